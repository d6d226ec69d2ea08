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
        let mut lock = clients[i % clients.len()]
            .acquire_with("res", TTL, &patient())
            .await
            .unwrap();
        tokens.push(lock.fence().await.expect("fencing is on by default"));
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
                let mut lock = redlock.acquire_with("res", TTL, &patient()).await.unwrap();
                // Inside the critical section, so the order of pushes is the order of holders.
                let token = lock.fence().await.unwrap();
                seen.lock().unwrap().push(token);
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
    let mut lock = redlock.try_acquire("res", TTL).await.unwrap();
    let token = lock.fence().await.unwrap();
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
        let mut lock = redlock
            .acquire_with("res", max_ttl, &patient())
            .await
            .unwrap();
        tokens.push(lock.fence().await.unwrap());
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
        let mut lock = redlock.acquire_with("res", TTL, &patient()).await.unwrap();
        tokens.push(lock.fence().await.unwrap());
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

    let mut a_lock = a.try_acquire("res", Duration::from_secs(1)).await.unwrap();
    let a_token = a_lock.fence().await.unwrap();
    assert!(write(&storage, a_token, "from A, on time"));

    // A "pauses" past its validity.
    tokio::time::sleep_until(a_lock.deadline().into()).await;
    let mut b_lock = b.acquire_with("res", TTL, &patient()).await.unwrap();
    let b_token = b_lock.fence().await.unwrap();
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
    let mut lock = redlock.try_acquire("res", TTL).await.unwrap();
    assert_eq!(lock.fence().await.ok(), None);
}

/// A token on request (`fencing` invariant 8) counts only the nodes that voted for the lock.
/// A is held on nodes 0 and 1; node 2 refused it. Then node 1 loses A's key (its TTL ran out
/// there first, a flush) and node 2 gets A's value by a `SET` that landed late. Nodes 0 and 2
/// hold A's value: a majority, but node 2 is no voter, so A gets no token. Were it counted, A
/// would get a token above B's, who took node 1 and 2 in the meantime and fenced first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_on_request_counts_only_the_locks_voters() {
    let mut cluster = cluster(3);
    let a = connected(&cluster).await;
    let mut a_lock = common::held_on_nodes_0_and_1(&mut cluster, &a, "res", TTL).await;
    // B takes the lock on nodes 1 and 2 once A's key on node 1 is gone, and fences.
    cluster.node(1).cli(&["DEL", "res"]).expect("DEL on node 1");
    cluster.node(0).cli(&["DEL", "res"]).expect("DEL on node 0");
    let b = connected(&cluster).await;
    let mut b_lock = b.try_acquire("res", TTL).await.expect("B locks");
    let b_token = b_lock.fence().await.expect("B's token");
    assert!(b_lock.release().await.cause().is_none());
    // A's value comes back on node 0 (the clock of the test: as if B's hold never reached it)
    // and lands late on node 2, which never voted for A.
    for node in [0, 2] {
        cluster
            .node(node)
            .cli(&["SET", "res", a_lock.value(), "PX", "10000"])
            .expect("A's value");
    }
    let err = a_lock
        .fence()
        .await
        .expect_err("node 2 is no voter: one voter holds A's value");
    assert!(matches!(err, redquorum::Error::NotFenced { .. }), "{err}");
    // Node 2's grant is no answer for A's lock: the voters decided, and one of them refused.
    assert_eq!(err.cause(), Some(redquorum::Cause::NotHeld), "{err}");
    assert!(err.is_lost(), "{err}");
    assert_eq!(redquorum::LockInfo::fence(&a_lock), None, "no token issued");
    // Its rounds did advance the counters where its value was (counters only grow): the next
    // holder's token still goes above B's.
    a_lock.release().await;
    let mut c_lock = b.try_acquire("res", TTL).await.expect("C locks");
    assert!(c_lock.fence().await.expect("C's token") > b_token);
    assert!(c_lock.release().await.cause().is_none());
}

/// A holder that paused past its deadline and asks for its token only then gets none: its keys
/// are gone from every voter the next holder took, so fewer than a quorum of its voters hold
/// it, whatever the holder's own clock says (here the keys are taken from under a lock whose
/// deadline is still far, as a frozen clock would see it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_lock_was_taken_over_gets_no_token() {
    let cluster = cluster(3);
    let a = connected(&cluster).await;
    let mut a_lock = a.try_acquire("res", TTL).await.expect("A locks");
    for node in cluster.iter() {
        node.cli(&["DEL", "res"]).expect("A's keys expire");
    }
    let b = connected(&cluster).await;
    let mut b_lock = b.try_acquire("res", TTL).await.expect("B locks");
    let b_token = b_lock.fence().await.expect("B's token");
    assert!(a_lock.is_valid(), "A's own clock still trusts its lock");
    let err = a_lock.fence().await.expect_err("A lost its lock to B");
    assert!(matches!(err, redquorum::Error::NotFenced { .. }), "{err}");
    assert_eq!(err.cause(), Some(redquorum::Cause::NotHeld), "{err}");
    assert!(err.is_lost(), "{err}");
    // B's token is what the resource last saw, and asking again changes nothing.
    assert_eq!(b_lock.fence().await.expect("kept"), b_token);
    assert!(b_lock.release().await.cause().is_none());
    a_lock.release().await;
}

/// Tokens on request increase in the order of the acquisitions, not of the requests: a holder
/// asks late (while it still holds), after an earlier holder asked late too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_asked_late_still_follow_the_acquisitions() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut tokens = Vec::new();
    for _ in 0..5 {
        let mut lock = redlock.acquire("res", TTL).await.expect("free");
        // Work first, then the token: still before any later holder could take the lock.
        tokio::time::sleep(Duration::from_millis(20)).await;
        tokens.push(lock.fence().await.expect("a token"));
        lock.release().await;
    }
    // An acquisition whose token nobody asks for leaves no trace; the next one still goes up.
    redlock
        .acquire("res", TTL)
        .await
        .expect("free")
        .release()
        .await;
    let mut last = redlock.acquire("res", TTL).await.expect("free");
    tokens.push(last.fence().await.expect("a token"));
    last.release().await;
    assert_increasing(&tokens);
}

/// A guard's token is the lock's for good: detached, the lock hands it on (found by review: the
/// keeper's lock never saw it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guards_token_survives_its_detach() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut guard = redlock
        .acquire("res", TTL)
        .await
        .expect("free")
        .keep_alive(TTL);
    let token = guard.fence().await.expect("a token");
    let info = guard.detach().await;
    assert_eq!(info.fence(), Some(token));
    assert!(
        redlock
            .release_value("res", info.value())
            .await
            .cause()
            .is_none()
    );
}
