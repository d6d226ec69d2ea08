//! `Redlock::status`: what each node holds for a resource, as the servers see it.

mod common;

use std::time::Duration;

use common::{cluster, connected};
use redquorum::{Locked, NodeState, Redlock, Reply};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_resource_is_free_everywhere() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let statuses = redlock.status("res").await;
    assert_eq!(statuses.len(), 3);
    for (status, url) in statuses.iter().zip(cluster.urls()) {
        assert_eq!(status.state, NodeState::Free, "{status:?}");
        assert!(status.is_reachable());
        assert_eq!(status.value(), None);
        assert!(url.ends_with(&status.node), "{} vs {url}", status.node);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_shows_its_value_and_ttl_on_every_node() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let lock = redlock.try_acquire("res", TTL).await.unwrap();
    // The won round did not wait for the slowest node.
    redlock.settle().await;
    for status in redlock.status("res").await {
        let NodeState::Held { value, ttl } = &status.state else {
            panic!("expected held: {status:?}");
        };
        assert_eq!(value, lock.value());
        let ttl = ttl.expect("a lock always expires");
        assert!(ttl > Duration::ZERO && ttl <= TTL, "{ttl:?}");
    }
    lock.release().await;
    assert!(
        redlock
            .status("res")
            .await
            .iter()
            .all(|s| s.state == NodeState::Free)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_of_other_types_and_without_expiry_are_reported_as_such() {
    let mut cluster = cluster(3);
    cluster.node(0).cli(&["HSET", "res", "f", "v"]).unwrap();
    cluster.node(1).cli(&["SET", "res", "plain"]).unwrap();
    cluster.node(2).cli(&["RPUSH", "res", "x"]).unwrap();
    cluster.node(2).cli(&["PEXPIRE", "res", "60000"]).unwrap();
    let redlock = connected(&cluster).await;
    let statuses = redlock.status("res").await;
    assert_eq!(
        statuses[0].state,
        NodeState::OtherType {
            kind: "hash".into(),
            ttl: None
        }
    );
    assert_eq!(
        statuses[1].state,
        NodeState::Held {
            value: "plain".into(),
            ttl: None
        }
    );
    match &statuses[2].state {
        NodeState::OtherType {
            kind,
            ttl: Some(ttl),
        } => {
            assert_eq!(kind, "list");
            assert!(*ttl <= Duration::from_secs(60), "{ttl:?}");
        }
        other => panic!("expected a list with a TTL: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_is_unavailable_and_the_others_still_answer() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let lock = redlock.try_acquire("res", TTL).await.unwrap();
    cluster.node(1).kill().unwrap();
    let statuses = redlock.status("res").await;
    assert!(
        matches!(
            statuses[1].state,
            NodeState::Unavailable(Reply::Unreachable(_) | Reply::Timeout)
        ),
        "{statuses:?}"
    );
    assert!(!statuses[1].is_reachable());
    for i in [0, 2] {
        assert_eq!(statuses[i].value(), Some(lock.value()), "{statuses:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_node_costs_no_more_than_the_node_timeout() {
    let mut cluster = cluster(3);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    redlock.connect().await;
    cluster.node(2).pause().unwrap();
    let started = std::time::Instant::now();
    let statuses = redlock.status("res").await;
    // Generous: the bound is 200 ms, the margin is for a loaded 2-core machine.
    assert!(started.elapsed() < Duration::from_secs(5), "{statuses:?}");
    assert_eq!(statuses[2].state, NodeState::Unavailable(Reply::Timeout));
    assert_eq!(statuses[0].state, NodeState::Free);
    cluster.node(2).resume().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspect_script_is_found_again_after_a_script_flush() {
    let mut cluster = cluster(1);
    let redlock = connected(&cluster).await;
    cluster.node(0).cli(&["SCRIPT", "FLUSH"]).unwrap();
    cluster
        .node(0)
        .cli(&["SET", "res", "v", "PX", "5000"])
        .unwrap();
    let statuses = redlock.status("res").await;
    assert_eq!(statuses[0].value(), Some("v"), "{statuses:?}");
}

/// `locked`: free, then held by our value for no longer than the TTL, free again once released;
/// with two of three nodes stopped it cannot tell, and says so rather than "free".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locked_reads_a_quorum_and_never_guesses() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    assert_eq!(redlock.locked("res").await, Locked::Free);
    let lock = redlock.acquire("res", TTL).await.unwrap();
    redlock.settle().await;
    match redlock.locked("res").await {
        Locked::Held { value, remaining } => {
            assert_eq!(value, lock.value());
            assert!(
                remaining > Duration::ZERO && remaining <= TTL,
                "{remaining:?}"
            );
        }
        other => panic!("held by a quorum: {other:?}"),
    }
    let reader = redlock.acquire_read("doc", TTL).await.unwrap();
    redlock.settle().await;
    assert!(matches!(
        redlock.locked("doc").await,
        Locked::Readers { .. }
    ));
    drop(reader.release().await);

    cluster.node(0).pause().unwrap();
    cluster.node(1).pause().unwrap();
    assert!(
        matches!(
            redlock.locked("res").await,
            Locked::Unknown {
                answered: 1,
                quorum: 2
            }
        ),
        "two silent nodes may hold it"
    );
    cluster.node(0).resume().unwrap();
    cluster.node(1).resume().unwrap();
    assert!(lock.release().await.is_confirmed());
    assert_eq!(redlock.locked("res").await, Locked::Free);
}
