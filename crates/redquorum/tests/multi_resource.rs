//! Locks on several resources at once: all-or-nothing on every node, one value and one fencing
//! token for the set, released and extended together, deadlock-free whatever the order callers
//! list the resources in.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use common::{
    PATIENT_NODE_TIMEOUT, cluster, connected, eventually, keeping_alive, manager, patient, pttl_on,
    value_on,
};
use redquorum::{ConfigError, Error, Redlock};
use redquorum_nodes::Cluster;

const TTL: Duration = Duration::from_secs(10);

/// A manager with fencing on (the default) and one with it off: they use different scripts.
async fn both_kinds(cluster: &Cluster) -> [Redlock; 2] {
    let unfenced = Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .fencing(false)
        .build()
        .unwrap();
    unfenced.connect().await;
    [connected(cluster).await, unfenced]
}

fn assert_absent_everywhere(cluster: &Cluster, keys: &[&str]) {
    for (i, node) in cluster.iter().enumerate() {
        for key in keys {
            assert_eq!(value_on(node, key), None, "{key} on node {i}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_refused_whole_when_one_member_is_held_on_a_majority() {
    let mut cluster = cluster(3);
    for i in [0, 1] {
        cluster
            .node(i)
            .cli(&["SET", "b", "x", "PX", "10000"])
            .unwrap();
    }
    for redlock in both_kinds(&cluster).await {
        let err = redlock
            .try_acquire_many(&["a", "b"], TTL)
            .await
            .unwrap_err();
        assert!(err.is_busy(), "{err}");
        assert!(err.to_string().contains("\"a, b\""), "{err}");
        // Nothing of ours anywhere: not `a` on any node, not `b` where it was free.
        assert_absent_everywhere(&cluster, &["a"]);
        assert_eq!(value_on(cluster.node(2), "b"), None);
        for i in [0, 1] {
            assert_eq!(value_on(cluster.node(i), "b").as_deref(), Some("x"));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holding_one_member_grants_none_of_the_set() {
    let mut cluster = cluster(3);
    cluster
        .node(0)
        .cli(&["SET", "b", "x", "PX", "10000"])
        .unwrap();
    for redlock in both_kinds(&cluster).await {
        // Nodes 1 and 2 are a quorum, so the lock is won; node 0 must not hold part of it.
        let lock = redlock.try_acquire_many(&["b", "a"], TTL).await.unwrap();
        assert_eq!(value_on(cluster.node(0), "a"), None);
        assert_eq!(value_on(cluster.node(0), "b").as_deref(), Some("x"));
        for i in [1, 2] {
            for key in ["a", "b"] {
                assert_eq!(
                    value_on(cluster.node(i), key).as_deref(),
                    Some(lock.value())
                );
            }
        }
        let released = lock.release().await;
        assert_eq!(released.confirmed, 2, "{released:?}");
        assert_eq!(value_on(cluster.node(0), "b").as_deref(), Some("x"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_removes_every_key_on_every_node() {
    let mut cluster = cluster(3);
    for redlock in both_kinds(&cluster).await {
        let lock = redlock
            .try_acquire_many(&["c", "a", "b", "a"], TTL)
            .await
            .unwrap();
        assert_eq!(lock.resources(), ["a", "b", "c"]);
        assert_eq!(lock.resource(), "a");
        // The won round did not wait for the slowest node.
        redlock.settle().await;
        for i in 0..3 {
            for key in ["a", "b", "c"] {
                assert_eq!(
                    value_on(cluster.node(i), key).as_deref(),
                    Some(lock.value())
                );
            }
        }
        assert_eq!(lock.release().await.confirmed, 3);
        assert_absent_everywhere(&cluster, &["a", "b", "c"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_set_is_released_in_the_background() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    drop(redlock.try_acquire_many(&["a", "b"], TTL).await.unwrap());
    redlock.settle().await;
    assert_absent_everywhere(&cluster, &["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_resets_every_key_and_only_where_all_are_ours() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut lock = redlock
        .try_acquire_many(&["a", "b"], Duration::from_secs(2))
        .await
        .unwrap();
    lock.extend(TTL).await.unwrap();
    // The won rounds did not wait for the slowest node.
    redlock.settle().await;
    for i in 0..3 {
        for key in ["a", "b"] {
            let pttl = pttl_on(cluster.node(i), key);
            assert!(pttl > 5_000, "{key} on node {i}: PTTL {pttl}");
        }
    }
    // `b` gone on a majority: those nodes must not extend `a` alone, and the lock is lost.
    for i in [0, 1] {
        cluster.node(i).cli(&["DEL", "b"]).unwrap();
        cluster.node(i).cli(&["PEXPIRE", "a", "3000"]).unwrap();
    }
    let err = lock.extend(TTL).await.unwrap_err();
    assert!(err.is_lost(), "{err}");
    assert!(!lock.is_valid());
    for i in [0, 1] {
        let pttl = pttl_on(cluster.node(i), "a");
        assert!(
            pttl <= 3_000,
            "node {i} extended part of the set: PTTL {pttl}"
        );
    }
    // Release deletes what is left of ours.
    assert_eq!(lock.release().await.confirmed, 3);
    assert_absent_everywhere(&cluster, &["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_keeps_the_whole_set() {
    let mut cluster = cluster(3);
    // A hold TTL of a second, with its node timeout: any extension that fails is a loss.
    let redlock = keeping_alive(&cluster).await;
    let lock = redlock.try_acquire_many(&["a", "b"], TTL).await.unwrap();
    let value = lock.value().to_owned();
    let guard = lock.keep_alive(Duration::from_secs(1));
    assert_eq!(guard.resources(), ["a", "b"]);
    assert!(
        eventually(Duration::from_secs(10), || guard.extensions() >= 3).await,
        "the guard extends"
    );
    assert!(!guard.is_lost());
    // The extensions' requests to the slowest node may still be on their way.
    redlock.settle().await;
    for i in 0..3 {
        for key in ["a", "b"] {
            assert_eq!(
                value_on(cluster.node(i), key).as_deref(),
                Some(value.as_str())
            );
            assert!(
                pttl_on(cluster.node(i), key) <= 1000,
                "{key}: extended to the hold TTL"
            );
        }
    }
    guard.release().await.unwrap();
    assert_absent_everywhere(&cluster, &["a", "b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_lock_and_a_set_exclude_each_other() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;

    let single = redlock.try_acquire("a", TTL).await.unwrap();
    let err = redlock
        .try_acquire_many(&["a", "b"], TTL)
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert_absent_everywhere(&cluster, &["b"]);
    single.release().await;

    let set = redlock.try_acquire_many(&["a", "b"], TTL).await.unwrap();
    for key in ["a", "b"] {
        let err = redlock.try_acquire(key, TTL).await.unwrap_err();
        assert!(err.is_busy(), "{key}: {err}");
    }
    // An overlapping set is refused too.
    let err = redlock
        .try_acquire_many(&["b", "c"], TTL)
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert_absent_everywhere(&cluster, &["c"]);
    set.release().await;
    redlock.try_acquire("b", TTL).await.unwrap().release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn opposite_orders_never_deadlock_and_never_overlap() {
    const ROUNDS: u64 = 25;
    let cluster = cluster(3);
    // Updated non-atomically inside the lock: any overlap loses an increment.
    let counter = Arc::new(AtomicU64::new(0));
    let orders: [&[&str]; 3] = [&["x", "y"], &["y", "x"], &["y", "x", "y"]];
    let mut tasks = Vec::new();
    for order in orders {
        let (redlock, counter) = (manager(&cluster), Arc::clone(&counter));
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let lock = redlock
                    .acquire_many_with(order, TTL, &patient())
                    .await
                    .unwrap();
                let seen = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                lock.release().await;
            }
        }));
    }
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(120), all)
        .await
        .expect("every client finishes: no deadlock");
    assert_eq!(
        counter.load(Ordering::SeqCst),
        ROUNDS * 3,
        "no two holders overlapped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_token_is_above_every_earlier_token_of_each_member() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut a = redlock.try_acquire("a", TTL).await.unwrap();
    let a_token = a.fence().await.unwrap();
    a.release().await;
    // `b`'s counter far ahead of every clock: only the counter can make the set's token larger.
    let ahead: u64 = 8_000_000_000_000_000;
    for i in 0..3 {
        let ahead = ahead.to_string();
        let set = ["SET", "redlock-fence:b", &ahead, "PX", "100000"];
        cluster.node(i).cli(&set).unwrap();
    }
    let mut set = redlock.try_acquire_many(&["b", "a"], TTL).await.unwrap();
    let set_token = set.fence().await.unwrap();
    assert!(set_token > ahead && set_token > a_token, "{set_token}");
    // The won round did not wait for the slowest node.
    redlock.settle().await;
    // Stored in every member's counter on the acquisition's voters: a quorum at least (a node
    // whose grant came after the round was decided is no voter, and its counters may be left
    // behind: `fencing` invariant 8).
    for key in ["redlock-fence:a", "redlock-fence:b"] {
        let stored = (0..3)
            .filter(|&i| {
                let value = cluster.node(i).cli(&["GET", key]).ok();
                value.and_then(|v| v.parse::<u64>().ok()) >= Some(set_token)
            })
            .count();
        assert!(
            stored >= 2,
            "{key} holds {set_token} on {stored} of 3 nodes"
        );
    }
    set.release().await;
    // So the next single lock of either member is above the set's token.
    for key in ["a", "b"] {
        let mut lock = redlock.try_acquire(key, TTL).await.unwrap();
        assert!(lock.fence().await.unwrap() > set_token, "{key}");
        lock.release().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_of_one_keeps_the_standard_wire_format() {
    let mut cluster = cluster(1);
    let redlock = Redlock::builder(cluster.urls())
        .fencing(false)
        .build()
        .unwrap();
    redlock.connect().await;
    cluster.node(0).cli(&["CONFIG", "RESETSTAT"]).unwrap();
    let lock = redlock
        .try_acquire_many(&["solo", "solo"], TTL)
        .await
        .unwrap();
    assert_eq!(lock.resources(), ["solo"]);
    let stats = cluster.node(0).cli(&["INFO", "commandstats"]).unwrap();
    assert!(stats.contains("cmdstat_set:"), "{stats}");
    assert!(
        !stats.contains("cmdstat_eval"),
        "a plain SET NX PX: {stats}"
    );
    lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_list_is_a_config_error() {
    let cluster = cluster(1);
    let redlock = manager(&cluster);
    let err = redlock.try_acquire_many(&[], TTL).await.unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::NoResources)),
        "{err:?}"
    );
}
