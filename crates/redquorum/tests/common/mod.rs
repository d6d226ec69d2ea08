//! Shared helpers for the integration tests: real `redis-server` processes (via `redquorum-nodes`)
//! and managers pointed at them.
#![allow(dead_code)] // each test file uses its own subset

use std::time::Duration;

pub mod endpoint;

use redquorum::{Redlock, Retry};
use redquorum_nodes::{Cluster, NodeSpec, Persistence, RedisCluster, RedisNode, SentinelGroup};

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

/// The node timeout of tests that measure nothing about timeouts: a loaded 2-core machine running
/// debug builds has answered after 100 ms (the default); 2 s is far beyond any answer a healthy
/// local node gives, and only a test that stops a node waits it out.
pub const PATIENT_NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// The node timeout of tests that keep a lock of about a second alive (TTLs of 0.8–1 s): above
/// any answer a healthy local node gives on a loaded machine, and short enough that an extension
/// round ends by itself before the keeper gives the lock up. The first extension starts a third
/// of the validity in (`HoldOptions`' default interval) and the lock is given up a tenth of it
/// before the deadline: for 790 ms of validity (an 800 ms TTL) that leaves 263 + 400 = 663 ms
/// < 711 ms.
pub const KEEP_ALIVE_NODE_TIMEOUT: Duration = Duration::from_millis(400);

/// A manager over every node of `cluster`, with the [`PATIENT_NODE_TIMEOUT`] and default settings
/// otherwise (connecting on first use).
pub fn manager(cluster: &Cluster) -> Redlock {
    Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid test configuration")
}

/// A manager over every node of `cluster` with the library's default node timeout (100 ms), for
/// the tests that measure how a stopped node counts and how long it costs.
pub fn default_timeout_manager(cluster: &Cluster) -> Redlock {
    Redlock::builder(cluster.urls())
        .node_timeout(redquorum::defaults::NODE_TIMEOUT)
        .build()
        .expect("valid test configuration")
}

/// A manager over every node of `cluster` with the [`KEEP_ALIVE_NODE_TIMEOUT`], connected: for
/// tests that keep a lock of about a second alive.
pub async fn keeping_alive(cluster: &Cluster) -> Redlock {
    connected_with(cluster, KEEP_ALIVE_NODE_TIMEOUT).await
}

/// A manager over every node of `cluster` with `node_timeout`, connected.
pub async fn connected_with(cluster: &Cluster, node_timeout: Duration) -> Redlock {
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(node_timeout)
        .build()
        .expect("valid test configuration");
    ready(redlock).await
}

/// A [`manager`] whose connections to every node are established and checked.
pub async fn connected(cluster: &Cluster) -> Redlock {
    ready(manager(cluster)).await
}

/// [`connected`] with the library's default node timeout: see [`default_timeout_manager`].
pub async fn default_timeout_connected(cluster: &Cluster) -> Redlock {
    ready(default_timeout_manager(cluster)).await
}

/// `redlock`, once its connections to every node are established and checked.
pub async fn ready(redlock: Redlock) -> Redlock {
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
/// else's key while it tries, which is deleted once `client`'s request there has been refused.
/// For schedules that make one of the two lose the lock while a third node could complete
/// another majority.
pub async fn held_on_nodes_0_and_1(
    cluster: &mut Cluster,
    client: &Redlock,
    resource: &str,
    ttl: Duration,
) -> redquorum::Lock {
    cluster
        .node(2)
        .cli(&["SET", resource, "somebody-else"])
        .expect("SET on node 2");
    let lock = client
        .try_acquire(resource, ttl)
        .await
        .expect("held on nodes 0 and 1");
    // The won round did not wait for node 2; once `settle` returns, our `SET NX` there has run
    // (and was refused), so the other key can go. (An expiry of the other key, timed by a sleep,
    // raced the round on a loaded machine: node 2 could be free before our request reached it.)
    client.settle().await;
    cluster
        .node(2)
        .cli(&["DEL", resource])
        .expect("DEL on node 2");
    lock
}

/// Calls of `command` (lower case, e.g. `set`) on `node` since its statistics were last reset,
/// from `INFO commandstats`.
pub fn calls(node: &RedisNode, command: &str) -> u64 {
    let stats = node.cli(&["INFO", "commandstats"]).unwrap_or_default();
    let prefix = format!("cmdstat_{command}:calls=");
    stats
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|calls| calls.parse().ok())
        .unwrap_or(0)
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

/// A Redis Cluster of `masters` masters with `replicas` replicas each; AOF with `fsync always`
/// on every node and each master's marker written, so that the restart quarantine trusts the
/// masters it starts with.
pub fn redis_cluster(masters: usize, replicas: usize) -> RedisCluster {
    let spec = NodeSpec::new().persistence(Persistence::AofAlways);
    let mut cluster = RedisCluster::start(masters, replicas, spec).expect("start a Redis Cluster");
    cluster
        .mark_masters(redquorum::cluster_marker)
        .expect("markers written");
    cluster
}

/// Everything a `tracing-subscriber` formatter writes, kept for a test to read (one subscriber
/// per test binary: it is global to the process).
#[derive(Clone, Default)]
pub struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Captured {
    /// What was written so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Ok(mut bytes) = self.0.lock() {
            bytes.extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// A primary with `replicas` replicas and three sentinels; durable, so that the first primary,
/// seconds old, is trusted from the start (as [`cluster`]'s nodes are).
pub fn sentinel_group(replicas: usize) -> SentinelGroup {
    SentinelGroup::start(
        replicas,
        3,
        NodeSpec::new().persistence(Persistence::AofAlways),
    )
    .expect("a primary, replicas, sentinels")
}

/// Whether a `CLIENT LIST` line is a client with tracking on (flag `t`, next to `P` when it also
/// subscribes).
pub fn is_watching(client: &str) -> bool {
    client
        .split(' ')
        .find_map(|field| field.strip_prefix("flags="))
        .is_some_and(|flags| flags.contains('t'))
}

/// `node`'s `run_id`.
pub fn run_id(node: &RedisNode) -> String {
    let info = node.cli(&["INFO", "server"]).expect("INFO server");
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix("run_id:"))
        .expect("a run_id")
        .to_owned()
}

/// Waits (30 s at most) until `node`'s `INFO replication` passes `check`; fails the test naming
/// `what` otherwise.
pub async fn await_replication(node: &RedisNode, what: &str, check: impl Fn(&str) -> bool) {
    let seen = eventually(Duration::from_secs(30), || {
        node.cli(&["INFO", "replication"])
            .is_ok_and(|info| check(&info))
    })
    .await;
    assert!(seen, "{what}");
}

/// Every primitive keeps its promise over the managers `build` makes (two of them, fair waiting,
/// fencing on acquisition, a lock-delay): a fenced lock refused to the other and extended, a
/// fair waiter woken with a larger token, a semaphore of two, readers and a writer, an
/// election. For the node kinds beside plain ones (Sentinel, a fixed address).
pub async fn every_primitive_keeps_its_promise(build: impl Fn() -> Redlock, ttl: Duration) {
    use redquorum::Cause;
    let (a, b) = (build(), build());

    // A fenced lock, its token on request, an extension; refused to another manager meanwhile.
    let mut lock = a.acquire("job", ttl).await.expect("a lock");
    let first = lock.fence().await.expect("a token");
    assert_eq!(
        b.try_acquire("job", ttl)
            .await
            .err()
            .and_then(|e| e.cause()),
        Some(Cause::Busy)
    );
    lock.extend(ttl).await.expect("extended");
    // A fair waiter gets it once it is released.
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.acquire_with("job", ttl, &patient()).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(lock.release().await.cause().is_none());
    let mut next = waiter.await.expect("task").expect("the waiter's turn");
    assert!(next.fence().await.expect("a token") > first, "tokens grow");
    assert!(next.release().await.cause().is_none());

    // A semaphore of two permits: a third holder is refused.
    let p1 = a.acquire_permit("pool", 2, ttl).await.expect("permit 1");
    let p2 = b.acquire_permit("pool", 2, ttl).await.expect("permit 2");
    assert!(
        b.try_acquire_permit("pool", 2, ttl).await.is_err(),
        "a third permit"
    );
    assert!(p1.release().await.cause().is_none() && p2.release().await.cause().is_none());

    // Readers share, a writer waits for them.
    let r1 = a.acquire_read("doc", ttl).await.expect("reader 1");
    let r2 = b.acquire_read("doc", ttl).await.expect("reader 2");
    assert!(
        a.try_acquire_write("doc", ttl).await.is_err(),
        "a writer beside readers"
    );
    assert!(r1.release().await.cause().is_none() && r2.release().await.cause().is_none());
    let w = a.acquire_write("doc", ttl).await.expect("the writer");
    assert!(w.release().await.cause().is_none());

    // An election: one leader, seen by the other manager.
    let guard = a.campaign("leader", "a", ttl).await.expect("elected");
    let leader = b.leader("leader").await.expect("a leader");
    assert_eq!(leader.identity, "a");
    assert!(guard.release().await.is_ok());
}
