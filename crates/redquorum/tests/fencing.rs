//! Fencing tokens grow with every acquisition of a resource: across clients, under concurrency,
//! when a node loses its data, and when consecutive acquisitions use different majorities. A
//! holder that paused past its validity carries a smaller token than the next holder, so a
//! resource that checks tokens refuses its stale write.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{cluster, connected, counter_on, manager, patient};
use redquorum::Redlock;
use redquorum_nodes::RedisNode;

const TTL: Duration = Duration::from_secs(10);

fn assert_increasing(tokens: &[u64]) {
    for pair in tokens.windows(2) {
        assert!(pair[0] < pair[1], "tokens went backwards: {tokens:?}");
    }
}

/// How many nodes store at least `token` as the resource's counter.
fn stored_on(nodes: &[&RedisNode], resource: &str, token: u64) -> usize {
    nodes
        .iter()
        .filter(|n| counter_on(n, resource).is_some_and(|stored| stored >= token))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_clients_taking_turns() {
    let cluster = cluster(3);
    let clients: Vec<Redlock> = (0..4).map(|_| manager(&cluster)).collect();
    let mut tokens = Vec::new();
    for i in 0..20 {
        let lock = clients[i % clients.len()]
            .acquire_with("res", TTL, &patient())
            .await
            .unwrap();
        tokens.push(lock.fence().expect("fencing is on by default"));
        lock.release().await;
    }
    assert_increasing(&tokens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_in_the_order_holders_get_in_under_contention() {
    let cluster = cluster(3);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (redlock, seen) = (manager(&cluster), Arc::clone(&seen));
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let lock = redlock.acquire_with("res", TTL, &patient()).await.unwrap();
                // Inside the critical section, so the order of pushes is the order of holders.
                seen.lock().unwrap().push(lock.fence().unwrap());
                lock.release().await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let tokens = seen.lock().unwrap().clone();
    assert_eq!(tokens.len(), 48);
    assert_increasing(&tokens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_stored_on_a_quorum_before_it_is_handed_out() {
    let mut cluster = cluster(5);
    let redlock = connected(&cluster).await;
    let lock = redlock.try_acquire("res", TTL).await.unwrap();
    let token = lock.fence().unwrap();
    // The won round did not wait for the slowest nodes; node 0 may be one of them.
    redlock.settle().await;
    let nodes: Vec<&RedisNode> = cluster.iter().collect();
    assert!(
        stored_on(&nodes, "res", token) >= 3,
        "token {token} not on a quorum"
    );
    // The counter is an ordinary key with an expiry (the fence retention), not a leak.
    let pttl: i64 = cluster
        .node(0)
        .cli(&["PTTL", "redlock-fence:res"])
        .unwrap()
        .parse()
        .unwrap();
    assert!(pttl > 0, "counter keys expire: PTTL {pttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_when_a_minority_node_loses_its_data() {
    let mut cluster = cluster(3);
    // A node that lost its data sits out max_ttl (the quarantine); a short one keeps this quick.
    let max_ttl = Duration::from_secs(2);
    let redlock = Redlock::builder(cluster.urls())
        .max_ttl(max_ttl)
        .fence_retention(max_ttl * 2)
        .build()
        .unwrap();
    let mut tokens = Vec::new();
    for round in 0..6 {
        let lock = redlock
            .acquire_with("res", max_ttl, &patient())
            .await
            .unwrap();
        tokens.push(lock.fence().unwrap());
        lock.release().await;
        // A different node forgets everything, counters included, between acquisitions.
        cluster.node(round % 3).restart_empty().unwrap();
    }
    assert_increasing(&tokens);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_increasing_when_consecutive_majorities_differ() {
    let mut cluster = cluster(5);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    redlock.connect().await;
    // Each acquisition sees a different majority: the other two nodes are stopped.
    let stopped_pairs = [(3, 4), (0, 1), (1, 2), (0, 4), (2, 3)];
    let mut tokens = Vec::new();
    for (a, b) in stopped_pairs {
        cluster.node(a).pause().unwrap();
        cluster.node(b).pause().unwrap();
        let lock = redlock.acquire_with("res", TTL, &patient()).await.unwrap();
        tokens.push(lock.fence().unwrap());
        lock.release().await;
        cluster.node(a).resume().unwrap();
        cluster.node(b).resume().unwrap();
    }
    assert_increasing(&tokens);
}

/// The protected resource: a Redis key that accepts a write only with a token at least as large
/// as the largest it has seen (the script of `examples/fenced_write.rs`).
const CHECKED_WRITE: &str = include_str!("../examples/checked_write.lua");

fn write(storage: &RedisNode, token: u64, value: &str) -> bool {
    storage
        .cli(&[
            "EVAL",
            CHECKED_WRITE,
            "2",
            "data",
            "data:fence",
            &token.to_string(),
            value,
        ])
        .unwrap()
        == "1"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_validity_is_fenced_off() {
    let cluster = cluster(3);
    let storage = RedisNode::start(redquorum_nodes::NodeSpec::new()).unwrap();
    // A connected first, and a TTL a slow round cannot use up: its single attempt must win.
    let (a, b) = (connected(&cluster).await, manager(&cluster));

    let a_lock = a.try_acquire("res", Duration::from_secs(1)).await.unwrap();
    let a_token = a_lock.fence().unwrap();
    assert!(write(&storage, a_token, "from A, on time"));

    // A "pauses" past its validity.
    tokio::time::sleep_until(a_lock.deadline().into()).await;
    let b_lock = b.acquire_with("res", TTL, &patient()).await.unwrap();
    let b_token = b_lock.fence().unwrap();
    assert!(a_token < b_token, "A {a_token} must be below B {b_token}");
    assert!(write(&storage, b_token, "from B"));

    // A wakes up and writes as if it still held the lock: refused.
    assert!(!write(&storage, a_token, "from A, stale"));
    assert_eq!(storage.cli(&["GET", "data"]).unwrap(), "from B");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fencing_there_is_no_token() {
    let cluster = cluster(1);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(common::PATIENT_NODE_TIMEOUT)
        .fencing(false)
        .build()
        .unwrap();
    let lock = redlock.try_acquire("res", TTL).await.unwrap();
    assert_eq!(lock.fence(), None);
}
