//! A won round does not wait for the slowest nodes, but their requests still land: the late keys
//! become part of the lock, the release follows them, and `settle` waits for them.

mod common;

use std::time::Duration;

use common::{cluster, connected, eventually, manager, value_on};
use redquorum::Redlock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_grants_become_part_of_the_lock() {
    let mut cluster = cluster(5);
    // A fresh manager: connections are made during the first round, so some nodes are late. (Its
    // patient node timeout lets every node connect and answer within the round's bound, so that
    // `settle` has every late grant to wait for.)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_set_always_lands_before_the_release() {
    let cluster = cluster(5);
    // A node timeout no loaded machine reaches: every node answers every round in time, so a
    // release that any node does not confirm means its late SET never landed, or came after.
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_secs(5))
        .fencing(false)
        .build()
        .unwrap();
    redlock.connect().await;
    let tasks: Vec<_> = (0..12)
        .map(|task| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                let mut unconfirmed = Vec::new();
                for cycle in 0..60 {
                    let resource = format!("res:{task}:{cycle}");
                    let lock = redlock
                        .try_acquire(&resource, Duration::from_secs(10))
                        .await
                        .unwrap();
                    let released = lock.release().await;
                    if released.confirmed != 5 {
                        unconfirmed.push((resource, released.replies));
                    }
                }
                unconfirmed
            })
        })
        .collect();
    for task in tasks {
        let unconfirmed = task.await.unwrap();
        assert!(
            unconfirmed.is_empty(),
            "releases not confirmed: {unconfirmed:?}"
        );
    }
    redlock.settle().await;
    for node in cluster.iter() {
        // The marker key is the node's, not a lock's: it stays.
        assert_eq!(
            node.cli(&["DBSIZE"]).unwrap(),
            "1",
            "no lock key is left behind"
        );
        assert_eq!(
            node.cli(&["RANDOMKEY"]).unwrap(),
            redquorum::MARKER_KEY,
            "no lock key is left behind"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_takes_the_late_set_when_it_resumes() {
    let mut cluster = cluster(5);
    let redlock = connected(&cluster).await;
    cluster.node(4).pause().unwrap();
    let lock = redlock
        .try_acquire("res", Duration::from_secs(10))
        .await
        .unwrap();
    // Node 0 may have been the other late node of the won round.
    let node = cluster.node(0);
    assert!(
        eventually(Duration::from_secs(10), || value_on(node, "res").as_deref()
            == Some(lock.value()))
        .await,
        "node 0 never took the lock"
    );
    cluster.node(4).resume().unwrap();
    redlock.settle().await;
    assert_eq!(
        value_on(cluster.node(4), "res").as_deref(),
        Some(lock.value()),
        "the node that was stopped during the round holds the lock too"
    );
    assert_eq!(lock.release().await.confirmed, 5);
}
