//! First sight: a group of long-running servers that no client of ours ever marked is trusted at
//! once; anything that may have dropped data, or a node new to a group that others marked, still
//! waits out the quarantine. And an operator's `mark_nodes`. The rule and its argument are in
//! `src/protocol/first_sight.rs`.

mod common;

use common::{marker_on, unmarked};

use std::time::{Duration, Instant};

use redquorum::{
    Cause, Error, Mark, MarkerState, QuarantineReason, Reader, Redlock, Remedy, Reply, Retry, Vouch,
};
use redquorum_nodes::{Cluster, NodeSpec, Persistence, RedisNode};

const MAX_TTL: Duration = Duration::from_secs(3);

/// Long enough for a server to have been up for `max_ttl` by its reported uptime, which counts
/// for a second less (rounded to whole seconds), with a margin.
const UNTIL_LONG_RUNNING: Duration = Duration::from_millis(3000 + 1000 + 500);

fn client(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(common::PATIENT_NODE_TIMEOUT)
        .max_ttl(MAX_TTL)
        .fence_retention(MAX_TTL * 2)
        .trust_first_sight(true)
        .build()
        .unwrap()
}

/// The quarantined replies of a failed acquisition, with their reasons.
fn quarantined(err: &Error) -> Vec<QuarantineReason> {
    let Error::NotAcquired { failure, .. } = err else {
        panic!("not a failed acquisition: {err:?}");
    };
    failure
        .replies
        .iter()
        .filter_map(|r| match &r.reply {
            Reply::Quarantined(q) => Some(q.reason),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_running_group_that_no_client_marked_is_trusted_at_once() {
    let cluster = Cluster::start(3, unmarked()).unwrap();
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;
    let a = client(cluster.urls());
    let lock = a
        .try_acquire("res", MAX_TTL)
        .await
        .expect("a clean, long-running group without markers votes at once");
    for node in cluster.iter() {
        assert!(
            marker_on(node).starts_with("okg."),
            "vouched: {}",
            marker_on(node)
        );
    }
    // Another client, later, finds vouched markers and trusts them as it would any marked node.
    let b = client(cluster.urls());
    let refused = b.try_acquire("res", MAX_TTL).await.expect_err("held by A");
    assert_eq!(refused.cause(), Some(Cause::Busy), "{refused}");
    let status = b.status("res").await;
    assert!(
        status
            .iter()
            .all(|s| s.quarantine.is_none() && s.marker == Some(MarkerState::Vouched)),
        "{status:?}"
    );
    lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_just_started_is_quarantined_and_the_reason_says_so() {
    let cluster = Cluster::start(1, unmarked()).unwrap();
    let a = client(cluster.urls());
    let err = a
        .try_acquire("res", MAX_TTL)
        .await
        .expect_err("quarantined");
    let Some(Cause::Quarantined { ready_in, .. }) = err.cause() else {
        panic!("{err}");
    };
    assert!(
        ready_in > Duration::from_secs(1) && ready_in <= MAX_TTL,
        "{err}"
    );
    let reasons = quarantined(&err);
    assert_eq!(reasons.len(), 1, "{err}");
    assert!(
        matches!(
            reasons[0],
            QuarantineReason::Started | QuarantineReason::FirstSeenWithoutMarker
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("started") && message.contains("s left"),
        "the words say why and for how long: {message}"
    );
}

/// The replacement a newcomer cannot see by `run_id`: client A holds `res` on nodes 0 and 1, then
/// the server behind node 1's address is another long-running one that never had a marker. A
/// client that starts afterwards sees markers on nodes 0 and 2 and none on the replacement: it
/// is new to the group, and does not vote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_a_marker_in_a_marked_group_is_new_to_it_and_waits() {
    let mut cluster = Cluster::start(3, unmarked()).unwrap();
    let replacement = RedisNode::start(unmarked()).unwrap();
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;
    let a = client(cluster.urls());
    assert!(a.connect().await.iter().all(|r| r.reply.is_granted()));
    let a_lock = common::held_on_nodes_0_and_1(&mut cluster, &a, "res", MAX_TTL).await;

    let urls = vec![
        cluster.node(0).url(),
        replacement.url(),
        cluster.node(2).url(),
    ];
    let late = client(urls);
    let err = late
        .try_acquire("res", MAX_TTL)
        .await
        .expect_err("the replacement's grant is not a vote");
    let Error::NotAcquired { failure, .. } = &err else {
        panic!("{err}");
    };
    assert!(
        matches!(&failure.replies[1].reply,
            Reply::Quarantined(q) if q.reason == QuarantineReason::FirstSeenWithoutMarker),
        "the replacement is new to the group: {err}"
    );
    // (Node 2, vouched for by A's group, is also out for this client: its node list is another
    // group's, whose vouch holds for it only max_ttl after it was made: `marker` invariant 4.)
    assert!(a_lock.is_valid(), "A is still the only holder");
    assert!(
        marker_on(&replacement).starts_with("new."),
        "a first-sight marker, not vouched: {}",
        marker_on(&replacement)
    );
}

/// Every command that drops or replaces data, run on a long-running server nobody marked, keeps
/// that server out of a newcomer's vote; a control server that ran none of them is trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_data_dropping_command_keeps_a_long_running_server_quarantined_for_a_newcomer() {
    let spec = || {
        unmarked()
            .arg("--enable-debug-command")
            .arg("yes")
            .arg("--enable-module-command")
            .arg("yes")
    };
    let master = RedisNode::start(spec()).unwrap();
    let port = master.port().to_string();
    let runs: Vec<(&str, Vec<Vec<&str>>)> = vec![
        ("flushall", vec![vec!["FLUSHALL"]]),
        ("flushdb", vec![vec!["FLUSHDB"]]),
        ("swapdb", vec![vec!["SWAPDB", "0", "1"]]),
        (
            "replicaof",
            vec![
                vec!["REPLICAOF", "127.0.0.1", &port],
                vec!["REPLICAOF", "NO", "ONE"],
            ],
        ),
        (
            "slaveof",
            vec![
                vec!["SLAVEOF", "127.0.0.1", &port],
                vec!["SLAVEOF", "NO", "ONE"],
            ],
        ),
        ("failover", vec![vec!["FAILOVER"]]),
        ("debug", vec![vec!["DEBUG", "SET-ACTIVE-EXPIRE", "1"]]),
        ("restore", vec![vec!["RESTORE", "k", "0", "not-a-dump"]]),
        (
            "restore-asking",
            vec![vec!["RESTORE-ASKING", "k", "0", "not-a-dump"]],
        ),
        (
            "module|load",
            vec![vec!["MODULE", "LOAD", "/nonexistent/module.so"]],
        ),
        (
            "module|loadex",
            vec![vec!["MODULE", "LOADEX", "/nonexistent/module.so"]],
        ),
        ("config|resetstat", vec![vec!["CONFIG", "RESETSTAT"]]),
    ];
    let nodes: Vec<RedisNode> = runs
        .iter()
        .map(|_| RedisNode::start(spec()).unwrap())
        .collect();
    let control = RedisNode::start(spec()).unwrap();
    for (node, (name, commands)) in nodes.iter().zip(&runs) {
        for command in commands {
            // Refused or failed calls count too (they reached the command); errors are fine.
            let _ = node.cli(command);
        }
        let stats = node.cli(&["INFO", "commandstats"]).unwrap();
        assert!(
            stats.contains(&format!("cmdstat_{name}:calls=")),
            "{name} ran: {stats}"
        );
    }
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;
    let trusted = client(vec![control.url()]);
    let _held = trusted
        .try_acquire("res", MAX_TTL)
        .await
        .expect("the control server is trusted at once");
    for (node, (name, _)) in nodes.iter().zip(&runs) {
        let newcomer = client(vec![node.url()]);
        let err = newcomer.try_acquire("res", MAX_TTL).await.expect_err(name);
        assert_eq!(
            quarantined(&err),
            [QuarantineReason::FirstSeenWithoutMarker],
            "{name}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_marks_new_servers_and_waiting_clients_see_it_within_seconds() {
    let mut cluster = Cluster::start(3, unmarked()).unwrap();
    let waiter = client(cluster.urls());
    // A client already waiting for the quarantine (a minute would be its length).
    let long = Redlock::builder(cluster.urls())
        .max_ttl(Duration::from_secs(60))
        .build()
        .unwrap();
    let waiting = tokio::spawn({
        let long = long.clone();
        async move {
            let started = Instant::now();
            let lock = long
                .acquire_with(
                    "res",
                    Duration::from_secs(5),
                    &Retry::forever().max_wait(Duration::from_secs(30)),
                )
                .await;
            (
                lock.map(|l| l.resource().to_owned())
                    .map_err(|e| e.to_string()),
                started.elapsed(),
            )
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Just started: the operator must say they are brand new (a restart looks the same).
    let refused = waiter.mark_nodes(Vouch::Checked).await;
    assert!(
        refused
            .iter()
            .all(|(_, m)| matches!(m, Mark::RecentlyStarted { .. }) && !m.is_marked()),
        "{refused:?}"
    );
    let marks = waiter.mark_nodes(Vouch::BrandNew).await;
    assert!(
        marks
            .iter()
            .all(|(_, m)| *m == Mark::Vouched || *m == Mark::Written),
        "{marks:?}"
    );
    let (lock, waited) = waiting.await.unwrap();
    assert_eq!(
        lock,
        Ok("res".to_owned()),
        "the waiting client gets the lock"
    );
    assert!(
        waited < Duration::from_secs(30),
        "within its health rechecks, not the 60 s quarantine: {waited:?}"
    );
    // Marked again: nothing to do; a marker that records a loss is refused without force.
    let again = waiter.mark_nodes(Vouch::Checked).await;
    assert!(
        again
            .iter()
            .all(|(_, m)| *m == Mark::HasMarker { vouches: true }),
        "{again:?}"
    );
    cluster
        .node(0)
        .cli(&[
            "SET",
            "redlock-node-marker",
            "lost-5f0c2a9e7d13b846:99999999999999",
        ])
        .unwrap();
    let refused = waiter.mark_nodes(Vouch::Checked).await;
    assert_eq!(
        refused[0].1,
        Mark::HasMarker { vouches: false },
        "{refused:?}"
    );
    let forced = waiter.mark_nodes(Vouch::Forced).await;
    assert_eq!(forced[0].1, Mark::Overwritten, "{forced:?}");
    // A plain marker whose time has come (a launcher writes `…:0`) vouches already: nothing to
    // do, not "a loss".
    cluster
        .node(0)
        .cli(&["SET", "redlock-node-marker", "fresh-5f0c2a9e7d13b846:0"])
        .unwrap();
    let launched = waiter.mark_nodes(Vouch::Checked).await;
    assert_eq!(
        launched[0].1,
        Mark::HasMarker { vouches: true },
        "{launched:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_not_marked_without_force() {
    let master = RedisNode::start(unmarked()).unwrap();
    let replica = RedisNode::start(unmarked()).unwrap();
    replica
        .cli(&["REPLICAOF", "127.0.0.1", &master.port().to_string()])
        .unwrap();
    let marks = client(vec![replica.url()]).mark_nodes(Vouch::Checked).await;
    assert_eq!(marks[0].1, Mark::Replica, "{marks:?}");
    assert!(!marks[0].1.is_marked());
}

/// A client blocked only by a quarantine sleeps until a quorum can vote (or a few seconds),
/// instead of retrying at once: it once sent over a thousand attempts a second, each waking
/// itself with its own rollback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_waiting_out_a_quarantine_sends_a_handful_of_commands_a_second() {
    let node = RedisNode::start(unmarked()).unwrap();
    let calls = || node.commands_run().unwrap();
    let manager = Redlock::builder([node.url()])
        .max_ttl(Duration::from_secs(6))
        .build()
        .unwrap();
    assert!(
        manager
            .connect()
            .await
            .iter()
            .all(|r| matches!(r.reply, Reply::Quarantined(_)))
    );
    let before = calls();
    let window = Duration::from_secs(3);
    let started = Instant::now();
    let retry = Retry::forever().max_wait(window);
    let err = manager
        .acquire_with("res", Duration::from_secs(2), &retry)
        .await
        .expect_err("still quarantined after the window");
    let elapsed = started.elapsed();
    let sent = calls() - before - 1; // the INFO of `calls()` itself
    assert!(
        matches!(err.cause(), Some(Cause::Quarantined { .. })),
        "{err}"
    );
    let per_second = sent as f64 / elapsed.as_secs_f64();
    assert!(
        per_second < 20.0,
        "{sent} commands in {elapsed:?} ({per_second:.0}/s) while waiting"
    );
}

/// Review item: a first-sight marker that nobody vouched for, once its quarantine has been
/// waited out, vouches by its time like a plain one; it is reported so, not as still pending.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_sight_marker_whose_quarantine_was_waited_out_is_reported_so() {
    let cluster = Cluster::start(1, unmarked()).unwrap();
    let a = client(cluster.urls());
    a.connect().await;
    let before = a.status("res").await;
    assert_eq!(
        before[0].marker,
        Some(MarkerState::FirstSight),
        "{before:?}"
    );
    assert!(before[0].quarantine.is_some(), "{before:?}");
    let deadline = Instant::now() + MAX_TTL + Duration::from_secs(10);
    while a.status("res").await[0].quarantine.is_some() {
        assert!(
            Instant::now() < deadline,
            "the quarantine ends after max_ttl"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = a.status("res").await;
    assert_eq!(after[0].marker, Some(MarkerState::WaitedOut), "{after:?}");
    assert_eq!(
        after[0].marker.map(|m| m.to_string()).as_deref(),
        Some("written on first sight, quarantine waited out")
    );
}

/// A manager with the defaults but for the node timeout (and `max_ttl`, when given).
fn plain(url: String, max_ttl: Option<Duration>) -> Redlock {
    let builder = Redlock::builder([url]).node_timeout(common::PATIENT_NODE_TIMEOUT);
    match max_ttl {
        Some(max_ttl) => builder.max_ttl(max_ttl).fence_retention(max_ttl * 2),
        None => builder,
    }
    .build()
    .unwrap()
}

/// Issue 45: the first lock on a server just started, with the default retry policy (three
/// attempts), is not waited for (its quarantine outlasts them: `acquire` invariant 7). It fails
/// at its first attempt, naming the call that ends the wait in the reader's words; following
/// it, the same manager's next lock is granted at its first attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_lock_on_a_new_server_fails_at_once_with_the_call_that_ends_the_wait() {
    let node = RedisNode::start(unmarked()).unwrap();
    let manager = plain(node.url(), None); // max_ttl 60 s
    let err = manager
        .acquire("res", Duration::from_secs(5))
        .await
        .expect_err("quarantined for a minute");
    assert!(
        matches!(err, Error::NotAcquired { attempts: 1, .. }),
        "not waited for: {err}"
    );
    assert_eq!(err.remedy(), Some(Remedy::MarkBrandNew));
    let message = err.to_string();
    assert!(
        message.contains("s left")
            && message.contains(
                "; if these servers are new and never held a lock, end the wait at once with \
                 Redlock::mark_nodes(Vouch::BrandNew) (never after a restart"
            ),
        "{message}"
    );
    assert!(
        err.message(Reader::Python)
            .contains("with rl.mark_nodes(brand_new=True) (never after a restart"),
        "{err}"
    );
    let marks = manager.mark_nodes(Vouch::BrandNew).await;
    assert!(marks[0].1.is_marked(), "{marks:?}");
    manager
        .acquire_with("res", Duration::from_secs(5), &Retry::once())
        .await
        .expect("granted at the first attempt once marked")
        .release()
        .await;
}

/// A long-running server that no client marked (first-sight trust is opt-in): the remedy is
/// the plain mark, and it works at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_lock_on_a_long_running_unmarked_server_names_the_plain_mark() {
    let node = RedisNode::start(unmarked()).unwrap();
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;
    let manager = plain(node.url(), Some(MAX_TTL));
    let err = manager
        .acquire_with("res", Duration::from_secs(1), &Retry::once())
        .await
        .expect_err("first seen without a marker");
    assert_eq!(err.remedy(), Some(Remedy::Mark), "{err}");
    assert!(
        err.to_string()
            .ends_with("end the wait at once with Redlock::mark_nodes(Vouch::Checked)"),
        "{err}"
    );
    let marks = manager.mark_nodes(Vouch::Checked).await;
    assert!(marks[0].1.is_marked(), "{marks:?}");
    manager
        .acquire_with("res", Duration::from_secs(1), &Retry::once())
        .await
        .expect("granted at the first attempt once marked")
        .release()
        .await;
}

/// A server that restarted under a client's eyes may have lost locks still held: no mark is
/// suggested, only how long is left; and a caller that gave a deadline waits for it (a vouch
/// may end the wait), after one warning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_names_no_remedy_and_a_deadline_is_waited_for() {
    let mut node = RedisNode::start(NodeSpec::new()).unwrap(); // marked when it started
    let manager = plain(node.url(), Some(MAX_TTL));
    let patient = Retry::forever().max_wait(MAX_TTL * 3);
    manager
        .acquire_with("res", Duration::from_secs(1), &patient)
        .await
        .expect("the server votes once up for max_ttl")
        .release()
        .await;
    node.restart_empty().unwrap();
    let mut err = None;
    for _ in 0..50 {
        // The first attempts may find the connection broken (unavailable), not yet judged.
        match manager
            .acquire_with("res", Duration::from_secs(1), &Retry::once())
            .await
        {
            Err(e) if matches!(e.cause(), Some(Cause::Quarantined { .. })) => {
                err = Some(e);
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    let err = err.expect("quarantined after its restart");
    assert_eq!(err.remedy(), None, "{err}");
    assert!(!err.to_string().contains("mark_nodes"), "{err}");
    // A deadline longer than the quarantine: waited out, and granted.
    let lock = manager
        .acquire_with("res", Duration::from_secs(1), &patient)
        .await
        .expect("granted once the quarantine ended");
    lock.release().await;
}

/// Review of issue 45: a quarantine that made the difference, but not one that keeps a quorum
/// from voting (one new node of three, another down for now), is not given up on at once: the
/// node that is down may answer at the next attempt. Nor does the manager tell a waiter about
/// quarantined nodes then: what it waits for is not their quarantine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_that_leaves_a_quorum_possible_is_not_given_up_on_at_once() {
    // Durable and marked: trusted at once.
    let durable = NodeSpec::new().persistence(Persistence::AofAlways);
    let mut marked = Cluster::start(2, durable).unwrap();
    let new = RedisNode::start(unmarked()).unwrap();
    let urls = vec![marked.node(0).url(), marked.node(1).url(), new.url()];
    let manager = Redlock::builder(urls)
        .node_timeout(common::PATIENT_NODE_TIMEOUT)
        .build()
        .unwrap();
    manager.connect().await;
    assert_eq!(manager.quarantined_nodes().len(), 1, "the new node only");
    marked.node(1).kill().unwrap();
    let err = manager
        .acquire("res", Duration::from_secs(5))
        .await
        .expect_err("one vote of two needed");
    assert!(
        matches!(err, Error::NotAcquired { attempts: 3, .. }),
        "every attempt made: {err}"
    );
    assert_eq!(manager.quarantine_notice(Reader::Rust), None);
}
