//! Restart quarantine: a node that restarted without its data does not vote until it has been up
//! for `max_ttl`. First the hole it closes, shown with quarantine off; then the same scenario with
//! quarantine on.

mod common;

use std::time::Duration;

use common::{PATIENT_NODE_TIMEOUT, cluster, patient, volatile_cluster};
use redquorum::{Error, Redlock, Reply, Retry};
use redquorum_nodes::Cluster;

const MAX_TTL: Duration = Duration::from_secs(3);

/// Long enough for a fresh node to be trusted: `max_ttl` of reported uptime, which counts for a
/// second less (it is rounded to whole seconds, possibly up), and a margin.
const UNTIL_TRUSTED: Duration = Duration::from_millis(3000 + 1000 + 300);

fn client(cluster: &Cluster, quarantine: bool) -> Redlock {
    Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .max_ttl(MAX_TTL)
        .fence_retention(MAX_TTL * 2)
        .quarantine(quarantine)
        .build()
        .unwrap()
}

/// Client A holds `res` on nodes 0 and 1 only (node 2 was briefly held by somebody else), then
/// node 1 restarts empty. Returns A's lock.
async fn a_holds_then_one_of_its_nodes_restarts_empty(cluster: &mut Cluster) -> redquorum::Lock {
    // Let every node reach max_ttl of uptime, so only the restart makes one young.
    tokio::time::sleep(UNTIL_TRUSTED).await;
    let a = client(cluster, true);
    let lock = common::held_on_nodes_0_and_1(cluster, &a, "res", MAX_TTL).await;
    cluster.node(1).restart_empty().unwrap();
    assert!(lock.is_valid(), "A's lock is still valid when B tries");
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_quarantine_a_node_restarted_empty_hands_out_the_lock_twice() {
    let mut cluster = volatile_cluster(3);
    let a_lock = a_holds_then_one_of_its_nodes_restarts_empty(&mut cluster).await;
    let plain = client(&cluster, false);
    let b_lock = plain
        .try_acquire("res", MAX_TTL)
        .await
        .expect("plain Redlock: B gathers the restarted node and the free one");
    assert!(
        a_lock.is_valid() && b_lock.is_valid(),
        "two holders at once: the hole quarantine closes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_quarantine_the_restarted_node_does_not_vote_until_max_ttl() {
    let mut cluster = volatile_cluster(3);
    let a_lock = a_holds_then_one_of_its_nodes_restarts_empty(&mut cluster).await;
    let b = client(&cluster, true);
    let err = b
        .try_acquire("res", MAX_TTL)
        .await
        .expect_err("the restarted node's grant is not a vote");
    let Error::NotAcquired { failure, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        matches!(failure.replies[1].reply, Reply::Quarantined(_)),
        "node 1 is reported quarantined: {err}"
    );
    assert!(a_lock.is_valid(), "A still holds it, alone");

    let status = b.status("res").await;
    assert!(status[1].quarantine.is_some(), "{status:?}");
    assert!(status[0].quarantine.is_none() && status[2].quarantine.is_none());

    // Once A's lock has expired and the quarantine has ended, B gets in.
    let _held = b
        .acquire_with("res", MAX_TTL, &patient())
        .await
        .expect("after max_ttl the node votes again");
    assert!(!a_lock.is_valid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sees_the_run_id_change_quarantines_the_node() {
    let mut cluster = volatile_cluster(3);
    tokio::time::sleep(UNTIL_TRUSTED).await;
    let redlock = client(&cluster, true);
    redlock
        .try_acquire("warm", MAX_TTL)
        .await
        .unwrap()
        .release()
        .await;
    cluster.node(0).restart_empty().unwrap();
    // The first request finds the old connection broken; the next one reconnects and checks.
    redlock.status("res").await;
    let status = redlock.status("res").await;
    assert!(
        status[0].quarantine.is_some(),
        "restart noticed: {status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn durable_nodes_are_trusted_at_once_only_when_configured() {
    let cluster = cluster(3); // AOF with appendfsync always, just started
    let trusting = Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .build()
        .unwrap();
    trusting
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect("durable nodes vote from the start")
        .release()
        .await;

    let strict = Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .trust_durable_nodes(false)
        .build()
        .unwrap();
    let err = strict
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("young nodes are quarantined when durability is not trusted");
    let Error::NotAcquired { failure, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        failure
            .replies
            .iter()
            .any(|r| matches!(r.reply, Reply::Quarantined(_))),
        "{err}"
    );

    // Quarantine withholds votes, not work: a release still deletes and is reported as done.
    let mut cluster = cluster;
    for i in 0..3 {
        cluster
            .node(i)
            .cli(&["SET", "other", "v", "PX", "10000"])
            .unwrap();
    }
    let released = strict.release_value("other", "v").await;
    assert_eq!(released.confirmed, 3, "{released:?}");
}

#[tokio::test]
async fn a_ttl_longer_than_max_ttl_is_refused() {
    let redlock = Redlock::builder(["redis://127.0.0.1:1"])
        .max_ttl(Duration::from_secs(10))
        .build()
        .unwrap();
    let err = redlock
        .try_acquire("res", Duration::from_secs(11))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("max_ttl"), "{err}");
    let err = redlock
        .extend_value("res", "v", Duration::from_secs(11))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Config(_)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_once_trusted_stays_trusted_without_new_evidence() {
    // Redis reports uptime in whole seconds, so a later check of the same run can allow it a
    // second less than an earlier one did; a node that was trusted must not be quarantined
    // again by that. Each new connection checks the node again.
    let mut cluster = volatile_cluster(1);
    let redlock = client(&cluster, true);
    let mut waited = 0;
    while redlock
        .connect()
        .await
        .iter()
        .any(|r| matches!(r.reply, Reply::Quarantined(_)))
    {
        waited += 1;
        assert!(waited < 100, "never trusted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for _ in 0..10 {
        // Our connection is cut: the next request connects and checks the node again.
        cluster
            .node(0)
            .cli(&["CLIENT", "KILL", "TYPE", "normal"])
            .unwrap();
        // The first attempt finds the connection cut; the next connects and checks again.
        // Quick retries: a quarantine for nothing would outlast them.
        let quick = Retry::new().attempts(5).delay(Duration::from_millis(40));
        let lock = redlock
            .acquire_with("res", MAX_TTL, &quick)
            .await
            .expect("its vote counts, as before the new connection");
        let replies = redlock.connect().await;
        assert!(
            replies.iter().all(|r| r.reply == Reply::Granted),
            "{replies:?}"
        );
        lock.release().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
