//! A fenced acquisition takes one round when the nodes of its quorum agree on the token, and
//! stores the largest proposal in a round of its own whenever they do not: a node whose counter
//! was deleted, a node that missed acquisitions while it was down, counters that expired, a
//! majority that lost its data, sets whose members stand at different counters. Tokens increase
//! through every one of them (`fencing` invariants 1–6), also with the quarantine off and with
//! clients configured differently.

mod common;

use std::time::Duration;

use common::{calls, cluster, counter_on, patient, volatile_cluster};
use std::time::{SystemTime, UNIX_EPOCH};

use redquorum::defaults::SHORTEST_FENCE_RETENTION;
use redquorum::{Redlock, Retry};
use redquorum_nodes::Cluster;

const TTL: Duration = Duration::from_secs(10);

/// Whether a quorum of `cluster`'s nodes hold `token` as `resource`'s counter.
fn quorum_holds(cluster: &Cluster, resource: &str, token: u64) -> bool {
    let holding = cluster
        .iter()
        .filter(|n| counter_on(n, resource) == Some(token))
        .count();
    holding > cluster.len() / 2
}

fn reset_stats(cluster: &Cluster) {
    for node in cluster.iter() {
        node.cli(&["CONFIG", "RESETSTAT"]).expect("reset stats");
    }
}

/// Acquires and releases `resource`, returning the lock's token.
async fn cycle(redlock: &Redlock, resource: &str, retry: &Retry) -> u64 {
    let mut lock = redlock.acquire_with(resource, TTL, retry).await.unwrap();
    let token = lock.fence().await.expect("fencing is on by default");
    lock.release().await;
    token
}

/// Acquires and releases `resource` until its counter is the same on every node, and returns
/// the last token. Nodes that read their clocks across a grain boundary propose different values;
/// the largest proposal of the quorum is stored on every node, but a node that answered after the
/// quorum keeps its own if it is larger, until a quorum that includes it stores that.
async fn settle(cluster: &Cluster, redlock: &Redlock, resource: &str) -> u64 {
    let mut token = cycle(redlock, resource, &patient()).await;
    for _ in 0..30 {
        if cluster
            .iter()
            .all(|n| counter_on(n, resource) == Some(token))
        {
            return token;
        }
        token = cycle(redlock, resource, &patient()).await;
    }
    panic!("the counters of {resource} never became equal");
}

/// A manager whose every node answered its connection's health check: the tests below count on
/// each node taking part in the first cycles (a node still connecting is skipped by a round, and
/// then never got the counter the test reasons about; seen on a loaded machine).
async fn manager_with_timeout(cluster: &Cluster, on_acquire: bool) -> Redlock {
    common::ready(
        Redlock::builder(cluster.urls())
            .fence_on_acquire(on_acquire)
            .node_timeout(Duration::from_millis(300))
            .build()
            .unwrap(),
    )
    .await
}

/// A manager that fences every acquisition in its own round (`Builder::fence_on_acquire`).
async fn fencing_on_acquire(cluster: &Cluster) -> Redlock {
    common::ready(
        Redlock::builder(cluster.urls())
            .node_timeout(common::PATIENT_NODE_TIMEOUT)
            .fence_on_acquire(true)
            .build()
            .unwrap(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_agree_hand_out_the_token_in_the_acquisition_round() {
    let cluster = cluster(3);
    let redlock = fencing_on_acquire(&cluster).await;
    let mut previous = settle(&cluster, &redlock, "res").await;
    let mut refreshed = 0;
    for _ in 0..50 {
        reset_stats(&cluster);
        let token = cycle(&redlock, "res", &patient()).await;
        // Every node's commands counted, the slowest node's included (the won round did not wait
        // for it).
        redlock.settle().await;
        assert!(token > previous);
        assert!(
            quorum_holds(&cluster, "res", token),
            "stored by the acquisition"
        );
        if token != previous + 1 {
            // A counter used for longer than the trust window (29.5 s) without a clock term is
            // brought back to the clock by one store round (`fencing` invariant 4): a loaded
            // machine can take that long over these cycles. The clock, rounded to the grain.
            assert_eq!(token % 1_000_000, 0, "{token} after {previous}: the clock");
            refreshed += 1;
            previous = token;
            continue;
        }
        // The counters agree, so the cycle is one more than the last, in one round.
        for node in cluster.iter() {
            // One pipeline to acquire (its `INCR`), one script to release: no round to store
            // the token.
            assert_eq!(calls(node, "incr"), 1);
            assert_eq!(calls(node, "evalsha"), 1);
        }
        previous = token;
    }
    assert!(
        refreshed <= 2,
        "{refreshed} of 50 cycles were not one round"
    );
}

/// The default: a token on request (`fencing` invariant 8). The acquisition touches no counter;
/// asked for, the token takes one round when the voters agree, and none of it is paid by a
/// lock whose token nobody asks for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_that_agree_issue_a_token_on_request_in_one_round() {
    let cluster = cluster(3);
    let redlock = common::connected(&cluster).await;
    let mut previous = settle(&cluster, &redlock, "res").await;
    let mut stored_apart = 0;
    for _ in 0..50 {
        reset_stats(&cluster);
        let token = cycle(&redlock, "res", &patient()).await;
        redlock.settle().await;
        assert!(token > previous);
        assert!(quorum_holds(&cluster, "res", token), "stored on a quorum");
        // The standard `SET`, one fence script, one release script; a store round only when
        // the nodes read their clocks on either side of a grain boundary (the script's clock
        // term: `fencing` step 1), at most once a second.
        let store_rounds = cluster
            .iter()
            .filter(|node| calls(node, "evalsha") == 3)
            .count();
        if store_rounds == 0 {
            for node in cluster.iter() {
                assert_eq!(calls(node, "evalsha"), 2, "fence and release only");
                assert_eq!(calls(node, "set"), 2, "the lock's SET and the counter's");
                assert_eq!(calls(node, "incr"), 0);
            }
        } else {
            stored_apart += 1;
        }
        previous = token;
    }
    assert!(
        stored_apart <= 10,
        "{stored_apart} of 50 cycles took a store round"
    );
    // A lock whose token nobody asks for costs the standard commands only.
    reset_stats(&cluster);
    let lock = redlock.acquire("res", TTL).await.unwrap();
    lock.release().await;
    redlock.settle().await;
    for node in cluster.iter() {
        assert_eq!(calls(node, "set"), 1, "the lock's SET only");
        assert_eq!(calls(node, "evalsha"), 1, "the release only");
        assert_eq!(
            calls(node, "time") + calls(node, "incr") + calls(node, "pexpire"),
            0
        );
    }
    assert!(
        quorum_holds(&cluster, "res", previous),
        "nobody asked: the counter did not move"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_counter_was_deleted_makes_the_quorum_store_the_largest_proposal() {
    deleted_counter(false).await;
}

/// The same, every token with its acquisition (the native pipeline: `Builder::fence_on_acquire`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_counter_was_deleted_makes_the_quorum_store_the_largest_proposal_on_acquire() {
    deleted_counter(true).await;
}

async fn deleted_counter(on_acquire: bool) {
    let mut cluster = cluster(3);
    let redlock = manager_with_timeout(&cluster, on_acquire).await;
    let mut tokens = vec![cycle(&redlock, "res", &patient()).await];
    tokens.push(cycle(&redlock, "res", &patient()).await);
    cluster.node(0).cli(&["DEL", "redlock-fence:res"]).unwrap();
    // Node 2 is stopped, so the quorum is nodes 0 and 1: node 0 proposes its clock, node 1 its
    // counter + 1.
    cluster.node(2).pause().unwrap();
    let token = cycle(&redlock, "res", &patient()).await;
    cluster.node(2).resume().unwrap();
    assert!(token > tokens[1], "{token} after {tokens:?}");
    // They disagreed, so the largest proposal was stored on both: node 1 holds it now.
    assert_eq!(counter_on(cluster.node(1), "res"), Some(token));
    assert_eq!(counter_on(cluster.node(0), "res"), Some(token));
    tokens.push(token);
    tokens.push(cycle(&redlock, "res", &patient()).await);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_missed_acquisitions_while_down_is_caught_up_by_the_store() {
    missed_acquisitions(false).await;
}

/// The same, every token with its acquisition (the native pipeline: `Builder::fence_on_acquire`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_missed_acquisitions_while_down_is_caught_up_by_the_store_on_acquire() {
    missed_acquisitions(true).await;
}

async fn missed_acquisitions(on_acquire: bool) {
    let mut cluster = cluster(3);
    let redlock = manager_with_timeout(&cluster, on_acquire).await;
    let mut tokens = vec![cycle(&redlock, "res", &patient()).await];
    // The fence round's last reply may still be on its way (a won round does not wait).
    redlock.settle().await;
    let behind = counter_on(cluster.node(2), "res").expect("node 2 took part");
    // Node 2 is down (its data kept on disk) while nodes 0 and 1 hand out three more tokens.
    cluster.node(2).kill().unwrap();
    for _ in 0..3 {
        tokens.push(cycle(&redlock, "res", &patient()).await);
    }
    cluster.node(2).restart().unwrap();
    assert_eq!(
        counter_on(cluster.node(2), "res"),
        Some(behind),
        "it missed them"
    );
    // Now node 1 is down: the quorum is node 0 (up to date) and node 2 (behind).
    cluster.node(1).kill().unwrap();
    let token = cycle(&redlock, "res", &patient()).await;
    cluster.node(1).restart().unwrap();
    let last = *tokens.last().unwrap();
    assert!(token > last, "{token} after {tokens:?}");
    assert_eq!(counter_on(cluster.node(2), "res"), Some(token), "caught up");
    tokens.push(token);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_that_expired_start_again_above_every_earlier_token() {
    expired_counters(false).await;
}

/// The same, every token with its acquisition (the native pipeline: `Builder::fence_on_acquire`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_that_expired_start_again_above_every_earlier_token_on_acquire() {
    expired_counters(true).await;
}

async fn expired_counters(on_acquire: bool) {
    let cluster = cluster(3);
    let max_ttl = Duration::from_millis(500);
    let redlock = Redlock::builder(cluster.urls())
        .fence_on_acquire(on_acquire)
        .max_ttl(max_ttl)
        .fence_retention(max_ttl * 2)
        .build()
        .unwrap();
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let mut lock = redlock
            .acquire_with("res", max_ttl, &patient())
            .await
            .unwrap();
        tokens.push(lock.fence().await.unwrap());
        lock.release().await;
    }
    // Counters are kept at least SHORTEST_FENCE_RETENTION, whatever was configured.
    tokio::time::sleep(SHORTEST_FENCE_RETENTION + Duration::from_millis(500)).await;
    assert!(
        cluster.iter().all(|n| counter_on(n, "res").is_none()),
        "the counters expired"
    );
    let mut lock = redlock
        .acquire_with("res", max_ttl, &patient())
        .await
        .unwrap();
    tokens.push(lock.fence().await.unwrap());
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
}

/// Counters expire after the shortest retention, then two clients acquire: one that read the
/// nodes' clocks a moment ago starts the counters from its estimate of them (one round when
/// they agree), and a new one, which knows no clock, finds counters that `INCR` alone started
/// at 1: those propose their clocks, unstored, and the store round takes the largest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_started_again_by_an_estimate_or_by_incr_alone_go_above_every_earlier_token() {
    counters_started_again(false).await;
}

/// The same, every token with its acquisition (the native pipeline: `Builder::fence_on_acquire`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_started_again_by_an_estimate_or_by_incr_alone_go_above_every_earlier_token_on_acquire()
 {
    counters_started_again(true).await;
}

async fn counters_started_again(on_acquire: bool) {
    let cluster = cluster(3);
    let max_ttl = Duration::from_millis(500);
    let manager = || {
        Redlock::builder(cluster.urls())
            .fence_on_acquire(on_acquire)
            .max_ttl(max_ttl)
            .fence_retention(SHORTEST_FENCE_RETENTION)
            .build()
            .unwrap()
    };
    let warm = manager();
    let mut tokens = Vec::new();
    for resource in ["a", "b"] {
        for _ in 0..3 {
            let mut lock = warm
                .acquire_with(resource, max_ttl, &patient())
                .await
                .unwrap();
            tokens.push(lock.fence().await.unwrap());
            lock.release().await;
        }
    }
    let earlier = tokens.iter().copied().max().unwrap();
    tokio::time::sleep(SHORTEST_FENCE_RETENTION + Duration::from_millis(500)).await;
    assert!(
        cluster
            .iter()
            .all(|n| counter_on(n, "a").is_none() && counter_on(n, "b").is_none()),
        "the counters expired"
    );

    // The warm client read every node's clock under 5 s ago: the counter starts from that.
    let mut lock = warm.acquire_with("a", max_ttl, &patient()).await.unwrap();
    let token = lock.fence().await.unwrap();
    lock.release().await;
    assert!(token > earlier, "{token} after {tokens:?}");

    // A new client knows no clock yet: `INCR` starts each counter at 1, which no node may
    // propose as stored, so the token is a clock, stored by a round of its own.
    let cold = manager();
    // Connected first, so that the health checks' scripts are not counted below.
    cold.connect().await;
    reset_stats(&cluster);
    let mut lock = cold.acquire_with("b", max_ttl, &patient()).await.unwrap();
    let token = lock.fence().await.unwrap();
    let stores = cluster.iter().filter(|n| calls(n, "evalsha") >= 1).count();
    lock.release().await;
    assert!(token > earlier, "{token} after {tokens:?}");
    assert!(
        stores >= 2,
        "the store round ran on a quorum ({stores} nodes)"
    );
    assert!(quorum_holds(&cluster, "b", token), "and stored the token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_that_lost_its_counters_still_hands_out_larger_tokens() {
    majority_lost_counters(false).await;
}

/// The same, every token with its acquisition (the native pipeline: `Builder::fence_on_acquire`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_majority_that_lost_its_counters_still_hands_out_larger_tokens_on_acquire() {
    majority_lost_counters(true).await;
}

async fn majority_lost_counters(on_acquire: bool) {
    for quarantine in [false, true] {
        let mut cluster = volatile_cluster(3);
        // With the quarantine on, restarted nodes sit out `max_ttl` first; keep it short.
        let max_ttl = Duration::from_millis(500);
        let redlock = Redlock::builder(cluster.urls())
            .fence_on_acquire(on_acquire)
            .quarantine(quarantine)
            .max_ttl(max_ttl)
            .node_timeout(Duration::from_millis(100))
            .fence_retention(Duration::from_secs(60))
            .build()
            .unwrap();
        let retry = patient();
        let mut tokens = Vec::new();
        for _ in 0..4 {
            let mut lock = redlock.acquire_with("res", max_ttl, &retry).await.unwrap();
            tokens.push(lock.fence().await.unwrap());
            lock.release().await;
        }
        cluster.node(0).restart_empty().unwrap();
        cluster.node(1).restart_empty().unwrap();
        // Node 2 (which kept its counter) is slow, so the quorum is the two that lost theirs:
        // only the clock term can keep the token above the last one. With the quarantine on,
        // they vote again after max_ttl, past the clock grain (`fencing` invariant 4); with it
        // off, the clock is exact (invariant 6).
        cluster.node(2).pause().unwrap();
        let mut lock = redlock.acquire_with("res", max_ttl, &retry).await.unwrap();
        tokens.push(lock.fence().await.unwrap());
        cluster.node(2).resume().unwrap();
        assert!(
            tokens.windows(2).all(|w| w[0] < w[1]),
            "quarantine {quarantine}: {tokens:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_whose_members_stand_at_different_counters_gets_a_token_above_both() {
    let cluster = cluster(3);
    let redlock = common::connected(&cluster).await;
    let mut a = vec![settle(&cluster, &redlock, "a").await];
    for _ in 0..3 {
        a.push(cycle(&redlock, "a", &patient()).await);
    }
    let b = settle(&cluster, &redlock, "b").await;
    let mut set = redlock.acquire_many(&["a", "b"], TTL).await.unwrap();
    let token = set.fence().await.unwrap();
    set.release().await;
    assert!(
        token > b && a.iter().all(|t| token > *t),
        "{token}: a {a:?}, b {b}"
    );
    // Both counters now stand at the set's token on a quorum, so the set's next acquisition
    // agrees at once (unless it crosses a grain boundary: then the next one does).
    assert!(quorum_holds(&cluster, "a", token) && quorum_holds(&cluster, "b", token));
    let mut previous = token;
    let mut agreed = false;
    for _ in 0..20 {
        reset_stats(&cluster);
        let mut again = redlock.acquire_many(&["a", "b"], TTL).await.unwrap();
        let next = again.fence().await.unwrap();
        again.release().await;
        redlock.settle().await;
        assert!(next > previous);
        if next == previous + 1 {
            for node in cluster.iter() {
                // The acquisition, the token on request, the release: no store round.
                assert_eq!(calls(node, "evalsha"), 3, "acquire, fence and release only");
            }
            agreed = true;
            break;
        }
        previous = next;
    }
    assert!(agreed, "no acquisition of the set in one round");
    let b_alone = cycle(&redlock, "b", &patient()).await;
    let a_alone = cycle(&redlock, "a", &patient()).await;
    assert!(b_alone > previous && a_alone > previous);
}

/// Sleeps until `offset` past the next whole second of the clock the local nodes read with
/// `TIME`: the start of a fresh one-second grain.
async fn sleep_until_second_plus(offset: Duration) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970");
    let next = Duration::from_secs(now.as_secs() + 1) + offset;
    tokio::time::sleep(next - now).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_quarantine_off_a_minority_restarted_empty_cannot_repeat_a_token() {
    quarantine_off_minority_restarted(false).await;
}

/// The same, every token with its acquisition (the native pipeline: `Builder::fence_on_acquire`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_quarantine_off_a_minority_restarted_empty_cannot_repeat_a_token_on_acquire() {
    quarantine_off_minority_restarted(true).await;
}

async fn quarantine_off_minority_restarted(on_acquire: bool) {
    // Within one second, with clocks rounded to the second: lock A wins on nodes 0 and 1 (node 2
    // still holds an earlier holder's key) as the second's first acquisition, so its token is the
    // rounded clock; node 0 then restarts empty, and lock B wins on nodes 0 and 2 (node 1 is
    // slow). Node 0 has no counter and node 2 missed A: rounded, both would propose A's token
    // again. Without the quarantine the clock is therefore exact (`fencing` invariant 6).
    let mut cluster = volatile_cluster(3);
    let redlock = Redlock::builder(cluster.urls())
        .fence_on_acquire(on_acquire)
        .quarantine(false)
        .node_timeout(Duration::from_millis(100))
        .build()
        .unwrap();
    for _ in 0..3 {
        settle(&cluster, &redlock, "res").await;
        sleep_until_second_plus(Duration::from_millis(20)).await;
        cluster
            .node(2)
            .cli(&["SET", "res", "earlier-holder", "PX", "5000"])
            .unwrap();
        let a = cycle(&redlock, "res", &patient()).await;
        cluster.node(2).cli(&["DEL", "res"]).unwrap();
        cluster.node(0).restart_empty().unwrap();
        // The client finds its old connection to node 0 gone, and connects again.
        for _ in 0..2 {
            cycle(&redlock, "other", &patient()).await;
        }
        cluster.node(1).pause().unwrap();
        let b = cycle(&redlock, "res", &patient()).await;
        cluster.node(1).resume().unwrap();
        assert!(b > a, "lock B got token {b} after lock A's {a}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_short_retention_cannot_take_another_clients_token_back() {
    short_retention(false).await;
}

/// The same, every token with its acquisition (the native pipeline: `Builder::fence_on_acquire`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_a_short_retention_cannot_take_another_clients_token_back_on_acquire() {
    short_retention(true).await;
}

async fn short_retention(on_acquire: bool) {
    // Clients that disagree on max_ttl (a misconfiguration nothing detects): the short one rounds
    // to 100 ms and asks for counters kept 400 ms, the long one rounds to a second. Were the
    // counters gone within the second, the long one's rounded clock would be below the short
    // one's token: counters are kept at least SHORTEST_FENCE_RETENTION (`fencing` invariant 5).
    let cluster = volatile_cluster(3);
    let short_ttl = Duration::from_millis(200);
    let short = Redlock::builder(cluster.urls())
        .fence_on_acquire(on_acquire)
        .quarantine(false)
        .max_ttl(short_ttl)
        .fence_retention(short_ttl * 2)
        .build()
        .unwrap();
    let long = Redlock::builder(cluster.urls())
        .fence_on_acquire(on_acquire)
        .quarantine(false)
        .build()
        .unwrap();
    for _ in 0..3 {
        sleep_until_second_plus(Duration::from_millis(300)).await;
        let mut lock = short
            .acquire_with("res", short_ttl, &patient())
            .await
            .unwrap();
        let s = lock.fence().await.unwrap();
        lock.release().await;
        tokio::time::sleep(Duration::from_millis(450)).await;
        let mut lock = long
            .acquire_with("res", short_ttl, &patient())
            .await
            .unwrap();
        let l = lock.fence().await.unwrap();
        lock.release().await;
        assert!(
            l > s,
            "the long client's token {l} after the short client's {s}"
        );
    }
}

/// `with_lock`'s work has no handle to ask for a token with: it gets the token with the
/// acquisition, in its round trip, with no fence round of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_hands_its_work_a_token_from_the_acquisition_itself() {
    let cluster = cluster(3);
    let redlock = common::connected(&cluster).await;
    let first = settle(&cluster, &redlock, "res").await;
    reset_stats(&cluster);
    let token = redlock
        .with_lock("res", TTL, |info| async move { info.fence() })
        .await
        .expect("the work ran")
        .expect("the work's info carries the token");
    redlock.settle().await;
    assert!(token > first);
    for node in cluster.iter() {
        // The native fenced pipeline (its `INCR`) and the release script: no fence round.
        assert_eq!(calls(node, "incr"), 1);
        assert_eq!(calls(node, "evalsha"), 1);
    }
}
