//! Shared helpers for the integration tests: real `redis-server` processes (via `redquorum-nodes`)
//! and managers pointed at them.
#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;

use redquorum::{Redlock, Retry};
use redquorum_nodes::{Cluster, NodeSpec, Persistence, RedisNode};

/// `n` fresh, independent masters on free loopback ports, stopped on drop. They run with AOF and
/// `appendfsync always`, so the restart quarantine trusts them from the start, as it trusts the
/// nodes of `redlock nodes start`.
pub fn cluster(n: usize) -> Cluster {
    Cluster::start(n, NodeSpec::new().persistence(Persistence::AofAlways))
        .expect("start redis-server nodes")
}

/// `n` fresh masters without persistence: a restart loses every key. The quarantine does not
/// trust them until they have been up for `max_ttl`.
pub fn volatile_cluster(n: usize) -> Cluster {
    Cluster::start(n, NodeSpec::new()).expect("start redis-server nodes")
}

/// A manager over every node of `cluster`, with default settings (connecting on first use).
pub fn manager(cluster: &Cluster) -> Redlock {
    Redlock::builder(cluster.urls())
        .build()
        .expect("valid test configuration")
}

/// A manager whose connections to every node are established and checked.
pub async fn connected(cluster: &Cluster) -> Redlock {
    let redlock = manager(cluster);
    let replies = redlock.connect().await;
    assert!(
        replies.iter().all(|r| r.reply.is_granted()),
        "every node answers: {replies:?}"
    );
    redlock
}

/// A retry policy for tests that must eventually win: keeps trying for up to a minute, with short
/// delays so contention resolves quickly.
pub fn patient() -> Retry {
    Retry::forever()
        .delay(Duration::from_millis(20))
        .max_wait(Duration::from_secs(60))
}

/// The value stored at `key` on `node`, or `None` when the key does not exist.
pub fn value_on(node: &RedisNode, key: &str) -> Option<String> {
    if node.cli(&["EXISTS", key]).expect("redis-cli EXISTS") == "0" {
        return None;
    }
    Some(node.cli(&["GET", key]).expect("redis-cli GET"))
}

/// The key's remaining time to live on `node`, in milliseconds (`-2`: no such key).
pub fn pttl_on(node: &RedisNode, key: &str) -> i64 {
    node.cli(&["PTTL", key])
        .expect("redis-cli PTTL")
        .parse()
        .expect("PTTL is an integer")
}

/// Polls `check` every 20 ms until it holds or `limit` passes; returns whether it held.
pub async fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let give_up = tokio::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if tokio::time::Instant::now() >= give_up {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`eventually`] for plain threads (the blocking API's tests): polls `check` every 20 ms until
/// it holds or `limit` passes; returns whether it held.
pub fn eventually_blocking(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let give_up = std::time::Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if std::time::Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `resource`'s fencing counter on `node`, if it has one.
pub fn counter_on(node: &RedisNode, resource: &str) -> Option<u64> {
    value_on(node, &format!("redlock-fence:{resource}")).and_then(|v| v.parse().ok())
}

/// Applies `acl` (an `ACL SETUSER` line as published, for user `locker`) on every node, with
/// `password` in place of `CHANGE-ME`.
pub fn apply_acl(cluster: &Cluster, acl: &str, password: &str) {
    let line = acl.replace("CHANGE-ME", password);
    let args: Vec<&str> = line.split(' ').collect();
    for node in cluster.iter() {
        node.cli(&args).expect("ACL SETUSER");
    }
}

/// A builder for `cluster` as the ACL user `locker` with `password`.
pub fn as_acl_user(cluster: &Cluster, password: &str) -> redquorum::Builder {
    let urls: Vec<String> = cluster
        .iter()
        .map(|node| format!("redis://locker:{password}@127.0.0.1:{}", node.port()))
        .collect();
    Redlock::builder(urls)
}

/// `client` takes `resource` for `ttl` on nodes 0 and 1 of `cluster` only: node 2 holds somebody
/// else's key while it tries, which then expires. For schedules that make one of the two lose
/// the lock while a third node could complete another majority.
pub async fn held_on_nodes_0_and_1(
    cluster: &mut Cluster,
    client: &Redlock,
    resource: &str,
    ttl: Duration,
) -> redquorum::Lock {
    cluster
        .node(2)
        .cli(&["SET", resource, "somebody-else", "PX", "300"])
        .expect("SET on node 2");
    let lock = client
        .try_acquire(resource, ttl)
        .await
        .expect("held on nodes 0 and 1");
    tokio::time::sleep(Duration::from_millis(400)).await; // node 2's other key expires
    lock
}

/// Servers without persistence that nobody marked: what a user's own Redis looks like (the
/// first-sight tests).
pub fn unmarked() -> NodeSpec {
    NodeSpec::new().marked(false)
}

/// The marker on `node`, as it stands.
pub fn marker_on(node: &RedisNode) -> String {
    node.cli(&["GET", "redlock-node-marker"])
        .expect("GET the marker")
}
