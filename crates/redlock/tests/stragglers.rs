//! A won round does not wait for the slowest nodes, but their requests still land: the late keys
//! become part of the lock, and `settle` waits for them.

mod common;

use std::time::Duration;

use common::{cluster, manager, value_on};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_grants_become_part_of_the_lock() {
    let mut cluster = cluster(5);
    // A fresh manager: connections are made during the first round, so some nodes are late.
    let redlock = manager(&cluster);
    let lock = redlock
        .try_acquire("res", Duration::from_secs(10))
        .await
        .unwrap();
    redlock.settle().await;
    for i in 0..5 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(lock.value()),
            "node {i} holds the lock after settle"
        );
    }
    assert_eq!(lock.release().await.confirmed, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_waits_for_the_release_of_a_dropped_lock() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    let lock = redlock
        .try_acquire("res", Duration::from_secs(10))
        .await
        .unwrap();
    drop(lock);
    redlock.settle().await;
    for i in 0..3 {
        assert_eq!(value_on(cluster.node(i), "res"), None, "node {i}");
    }
}
