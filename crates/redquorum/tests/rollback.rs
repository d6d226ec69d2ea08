//! A round that does not win leaves nothing behind: our value is removed from every node, and
//! nobody else's lock is touched.

mod common;

use std::time::Duration;

use common::{cluster, connected, value_on};
use redquorum::{Reply, Retry};

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_acquisition_is_rolled_back_on_every_node() {
    let mut cluster = cluster(5);
    // Another holder owns the key on three of five nodes.
    for i in 0..3 {
        cluster
            .node(i)
            .cli(&["SET", "res", "someone-else", "PX", "30000"])
            .unwrap();
    }
    let redlock = connected(&cluster).await;
    let err = redlock
        .acquire_with("res", TTL, &Retry::new().delay(Duration::from_millis(10)))
        .await
        .expect_err("only 2 of 5 nodes are free");
    assert!(err.is_busy(), "{err}");
    let Some(failure) = (match &err {
        redquorum::Error::NotAcquired { failure, .. } => Some(failure),
        _ => None,
    }) else {
        panic!("expected NotAcquired, got {err:?}");
    };
    assert_eq!(failure.quorum, 3);
    assert!(
        failure.replies[..3]
            .iter()
            .all(|r| r.reply == Reply::Refused),
        "{err}"
    );

    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some("someone-else"),
            "the other holder's key on node {i} is untouched"
        );
    }
    for i in 3..5 {
        assert_eq!(
            value_on(cluster.node(i), "res"),
            None,
            "our key on node {i} was rolled back"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_wins_despite_a_minority_held_elsewhere() {
    let mut cluster = cluster(5);
    for i in 0..2 {
        cluster
            .node(i)
            .cli(&["SET", "res", "someone-else", "PX", "30000"])
            .unwrap();
    }
    let redlock = connected(&cluster).await;
    let lock = redlock
        .try_acquire("res", TTL)
        .await
        .expect("3 of 5 are free");
    let value = lock.value().to_owned();
    let released = lock.release().await;
    assert_eq!(released.confirmed, 3);
    for i in 0..2 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some("someone-else")
        );
    }
    for i in 2..5 {
        assert_ne!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(value.as_str())
        );
    }
}
