//! Nodes that die, stop or come back: a majority is enough, a minority is not, and a silent node
//! costs a round no more than its timeout.

mod common;

use std::time::{Duration, Instant};

use common::{cluster, connected, default_timeout_connected, eventually, patient, value_on};
use redquorum::{Error, Redlock, Reply, Retry};

const TTL: Duration = Duration::from_secs(10);

fn replies_of(err: &Error) -> Vec<Reply> {
    match err {
        Error::NotAcquired { failure, .. } => {
            failure.replies.iter().map(|r| r.reply.clone()).collect()
        }
        other => panic!("expected NotAcquired, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_lock_with_two_killed_but_not_with_three() {
    let mut cluster = cluster(5);
    let redlock = connected(&cluster).await;
    cluster.node(0).kill().unwrap();
    cluster.node(1).kill().unwrap();

    let lock = redlock
        .acquire_with("res", TTL, &patient())
        .await
        .expect("3 of 5 nodes are a majority");
    for i in 2..5 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(lock.value())
        );
    }
    lock.release().await;

    cluster.node(2).kill().unwrap();
    let err = redlock
        .acquire_with("res", TTL, &Retry::new().delay(Duration::from_millis(10)))
        .await
        .expect_err("2 of 5 nodes are not a majority");
    let replies = replies_of(&err);
    assert_eq!(
        replies
            .iter()
            .filter(|r| matches!(r, Reply::Unreachable(_)))
            .count(),
        3,
        "the three dead nodes are reported unreachable: {err}"
    );
    assert!(!err.is_busy(), "dead nodes are not a busy resource: {err}");
    for i in 3..5 {
        assert_eq!(
            value_on(cluster.node(i), "res"),
            None,
            "rolled back on node {i}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_come_back_are_used_again() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    // Connect first, so the manager has live connections that the restart breaks.
    redlock.acquire("warm", TTL).await.unwrap().release().await;

    cluster.node(0).kill().unwrap();
    cluster.node(1).kill().unwrap();
    assert!(redlock.try_acquire("res", TTL).await.is_err());

    cluster.node(0).restart().unwrap();
    cluster.node(1).restart().unwrap();
    let lock = redlock
        .acquire_with("res", TTL, &patient())
        .await
        .expect("reconnects to restarted nodes");
    // The won round did not wait for the slowest node.
    redlock.settle().await;
    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(lock.value())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_node_is_no_vote_and_costs_only_its_timeout() {
    let mut cluster = cluster(3);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    redlock.acquire("warm", TTL).await.unwrap().release().await;

    // One of three stopped: the other two are a majority.
    cluster.node(0).pause().unwrap();
    let lock = redlock
        .acquire_with("res", TTL, &patient())
        .await
        .expect("2 of 3 is a majority");
    let released = lock.release().await;
    assert_eq!(released.confirmed, 2);
    assert_eq!(released.replies[0].reply, Reply::Timeout, "{released:?}");

    // Two of three stopped: no majority, and the attempt ends on the node timeout. TCP would
    // wait for minutes; allow a generous 10 s on a noisy machine.
    cluster.node(1).pause().unwrap();
    let started = Instant::now();
    let err = redlock
        .try_acquire("res2", TTL)
        .await
        .expect_err("no majority");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "attempt took {took:?}");
    let replies = replies_of(&err);
    assert_eq!(replies[0], Reply::Timeout, "{err}");
    assert_eq!(replies[1], Reply::Timeout, "{err}");

    cluster.node(0).resume().unwrap();
    cluster.node(1).resume().unwrap();
    let _held = redlock
        .acquire_with("res2", TTL, &patient())
        .await
        .expect("resumed nodes vote again");
}

/// Engine invariant 7: a release that needs slow nodes waits for their answers past the node
/// timeout. Two of three nodes are stopped while the release is on its way and resumed 150 ms
/// later: with the node timeout alone (50 ms) the release would count them as timed out and
/// report one confirmation of the two it needs; with the release's patience (1 s) every node's
/// answer counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_waits_for_the_slow_nodes_it_needs() {
    let mut cluster = cluster(3);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    redlock.acquire("warm", TTL).await.unwrap().release().await;
    let lock = redlock.acquire_with("res", TTL, &patient()).await.unwrap();
    cluster.node(0).pause().unwrap();
    cluster.node(1).pause().unwrap();
    let release = tokio::spawn(lock.release());
    tokio::time::sleep(Duration::from_millis(150)).await;
    cluster.node(0).resume().unwrap();
    cluster.node(1).resume().unwrap();
    let released = release.await.unwrap();
    // Decided once a quorum confirmed: the last node's answer may not be waited for, but its
    // release was sent and runs once it is resumed.
    assert_eq!(released.cause(), None, "{released:?}");
    assert!(released.confirmed >= 2, "{released:?}");
    assert!(
        eventually(Duration::from_secs(10), || (0..3).all(|i| value_on(
            cluster.node(i),
            "res"
        )
        .is_none()))
        .await,
        "every node's key deleted"
    );
}

/// ... and no longer than its patience: with two of three nodes stopped for good, the release
/// ends (allow 10 s on a noisy machine, against TCP's minutes) and says too few answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_gives_up_on_stopped_nodes_after_its_patience() {
    let mut cluster = cluster(3);
    // The library's default node timeout: how long the release waits is what this test checks.
    let redlock = default_timeout_connected(&cluster).await;
    let lock = redlock.acquire_with("res", TTL, &patient()).await.unwrap();
    cluster.node(0).pause().unwrap();
    cluster.node(1).pause().unwrap();
    let started = Instant::now();
    let released = lock.release().await;
    let took = started.elapsed();
    assert!(took < Duration::from_secs(10), "release took {took:?}");
    assert_eq!(released.confirmed, 1, "{released:?}");
    assert_eq!(
        released.cause(),
        Some(redquorum::Cause::Unavailable),
        "{released:?}"
    );
    assert_eq!(released.replies[0].reply, Reply::Timeout, "{released:?}");
    cluster.node(0).resume().unwrap();
    cluster.node(1).resume().unwrap();
}
