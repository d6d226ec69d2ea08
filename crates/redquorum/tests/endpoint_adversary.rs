//! Schedules a review wrote to break the node behind a fixed address (`redis+replicated://`),
//! with real `redis-server` processes: each found a hole, now fixed, and checks it stays shut.
//! They use `replicas=1` over two replicas where they need a vote to count without one, the
//! setting `docs/sentinel.md` calls unsafe whatever the client does; what they check is that
//! the client's own judgement is not fooled on top of that.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::endpoint::{Proxy, manager};
use common::{await_replication, eventually, value_on};
use redquorum::{Redlock, Retry};
use redquorum_nodes::{NodeSpec, Persistence, RedisNode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

const TTL: Duration = Duration::from_secs(25);

fn field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim_end().strip_prefix(&format!("{name}:")))
        .map(str::to_owned)
}

fn info(node: &RedisNode, section: &str) -> String {
    node.cli(&["INFO", section]).expect("INFO")
}

/// A proxy between a replica and its primary that behaves like a host that vanished: when the
/// replica's side closes, the primary's side is kept open (no FIN reaches the primary), so the
/// primary lists the replica `online` with its last acknowledged offset until `repl-timeout`.
/// With `refuse` set, new connections are closed at once (the replica's host cut off from the
/// primary).
struct Sticky {
    port: u16,
    refuse: Arc<AtomicBool>,
    shutdown: CancellationToken,
}

impl Sticky {
    async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let refuse = Arc::new(AtomicBool::new(false));
        let shutdown = CancellationToken::new();
        let (r, s) = (Arc::clone(&refuse), shutdown.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = s.cancelled() => return,
                    a = listener.accept() => a,
                };
                let Ok((client, _)) = accepted else { continue };
                if r.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let s = s.clone();
                tokio::spawn(async move {
                    let Ok(upstream) = TcpStream::connect(("127.0.0.1", target)).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut ur, mut uw) = upstream.into_split();
                    let s1 = s.clone();
                    tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut cr, &mut uw).await;
                        // Keep the primary's side open: no FIN.
                        s1.cancelled().await;
                        drop(uw);
                    });
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        let mut alive = true;
                        loop {
                            let n = tokio::select! {
                                () = s.cancelled() => return,
                                n = ur.read(&mut buf) => n,
                            };
                            let Ok(n) = n else { return };
                            if n == 0 {
                                return;
                            }
                            if alive && cw.write_all(&buf[..n]).await.is_err() {
                                alive = false; // drain what the primary sends, forever
                            }
                        }
                    });
                });
            }
        });
        Self {
            port,
            refuse,
            shutdown,
        }
    }
}

impl Drop for Sticky {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// An acknowledgement of a replica's previous run, still listed by the primary (the link to a
/// vanished host stays `online` until `repl-timeout`), is not credited to the new run at the same
/// address, which restarted from an old snapshot and never caught up (`succession` invariant 2:
/// credited as of the acknowledgement, at most a second more than its `lag` old; `endpoint`
/// invariant 2: a run is named only while its link is up). Before the fix, the promoted run was
/// judged to continue the history, its uptime and its new run id at the address both waived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledgement_of_a_replicas_previous_run_is_not_credited_to_its_restart() {
    let primary = RedisNode::start(
        NodeSpec::new()
            .persistence(Persistence::AofAlways)
            .arg("--repl-diskless-sync-delay")
            .arg("0"),
    )
    .expect("primary");
    // Only to keep the primary's offset still for the few seconds of the schedule (Redis pings
    // its replicas every 10 s by default, which moves the offset); see the report.
    primary
        .cli(&["CONFIG", "SET", "repl-ping-replica-period", "60"])
        .expect("config");
    let sticky = Sticky::start(primary.port()).await;
    let mut replica = RedisNode::start(
        NodeSpec::new()
            .persistence(Persistence::None)
            .marked(false)
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(sticky.port.to_string()),
    )
    .expect("replica");
    await_replication(&primary, "replica online", |info| {
        info.contains("state=online")
    })
    .await;
    let endpoint = Proxy::start(primary.port()).await;
    let url = format!(
        "redis+replicated://127.0.0.1:{}?replicas=1",
        endpoint.port()
    );

    // The replica's last snapshot, before the lock: its disk when it comes back.
    replica.cli(&["SAVE"]).expect("SAVE on the replica");
    let a = manager(&url);
    let held = a.acquire("L", TTL).await.expect("A holds L");
    assert_eq!(value_on(&replica, "L").as_deref(), Some(held.value()));

    // Let the replica acknowledge everything (it does every second), then its host vanishes.
    let settled = eventually(Duration::from_secs(5), || {
        let rep = info(&primary, "replication");
        let off = field(&rep, "master_repl_offset").unwrap_or_default();
        rep.contains(&format!("offset={off},"))
    })
    .await;
    assert!(settled, "replica acknowledged the primary's offset");
    sticky.refuse.store(true, Ordering::SeqCst);
    replica.kill().expect("kill the replica");
    // It comes back from its disk, at the same address, cut off from the primary.
    replica
        .restart()
        .expect("the replica restarts from its old snapshot");
    let rep = info(&replica, "replication");
    eprintln!(
        "restarted replica: role={:?} master_replid={:?} link={:?} L={:?}",
        field(&rep, "role"),
        field(&rep, "master_replid"),
        field(&rep, "master_link_status"),
        value_on(&replica, "L")
    );
    assert_eq!(value_on(&replica, "L"), None, "the snapshot has no L");
    let prep = info(&primary, "replication");
    eprintln!("primary still lists: {}", prep.replace("\r\n", " | "));
    // Past the uptime slack, so that a reading now is after the new run started.
    tokio::time::sleep(Duration::from_millis(2_500)).await;

    // B uses the node: its health check reads the primary, which lists the old run's
    // acknowledgement at the replica's address; its census reads the new run there.
    let b = manager(&url);
    let warm = b.try_acquire("warm-up", TTL).await;
    eprintln!("B's warm-up (expected refused: the dead link acknowledges nothing): {warm:?}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // The service promotes the restarted replica and moves the address.
    replica.cli(&["REPLICAOF", "NO", "ONE"]).expect("promote");
    eprintln!(
        "promoted, no replica yet: {}",
        info(&replica, "replication").replace("\r\n", " | ")
    );
    endpoint.point(replica.port(), true);
    // What B makes of it before any replica follows it: quarantined (held) or trusted (a vote
    // that fails only for want of a replica).
    let before = b.try_acquire("L", TTL).await;
    eprintln!("B on L, the new primary without replicas yet: {before:?}");
    // Latent: the verdict is the library's promise; only Redis's new history on the first
    // replica of a promoted server without a backlog keeps this from a double grant below. A
    // vote that fails for want of a replica says nothing of the verdict: B's own view of the
    // node does.
    let view = b.connect().await;
    eprintln!("B's view of the node: {view:?}");
    let latent = !view
        .iter()
        .all(|node| matches!(node.reply, redquorum::Reply::Quarantined(_)));
    // The old primary follows it.
    primary
        .cli(&["REPLICAOF", "127.0.0.1", &replica.port().to_string()])
        .expect("the old primary follows");
    await_replication(
        &replica,
        "the old primary resynced from the new one",
        |info| info.contains("state=online"),
    )
    .await;
    let promoted = Instant::now();
    eprintln!(
        "promoted: {}",
        info(&replica, "replication").replace("\r\n", " | ")
    );
    eprintln!(
        "promoted server: {}",
        info(&replica, "server")
            .lines()
            .filter(|l| l.starts_with("run_id") || l.starts_with("uptime_in_s"))
            .collect::<Vec<_>>()
            .join(" ")
    );

    // Control: a client that never read the primary is held back (uptime, no receipt).
    let c = manager(&url);
    let control = c.try_acquire("L", TTL).await;
    eprintln!("control client C on L: {control:?}");

    let retry = Retry::forever()
        .delay(Duration::from_millis(50))
        .max_wait(Duration::from_secs(8));
    let taken = b.acquire_with("L", TTL, &retry).await;
    eprintln!(
        "B on L after the promotion ({:?} after it): {taken:?}; A's remaining {:?}",
        promoted.elapsed(),
        held.remaining()
    );
    assert!(
        !latent,
        "LATENT: B trusted (Continues) a run that restarted from a snapshot without L and never \
         synced, on the strength of the old run's acknowledgement: {before:?}"
    );
    if let Ok(second) = &taken {
        let overlap = held.deadline().min(second.deadline()) > Instant::now();
        assert!(
            !overlap,
            "DOUBLE GRANT: A holds L until {:?} from now, B holds L until {:?} from now (value on \
             the new primary: {:?})",
            held.remaining(),
            second.remaining(),
            value_on(&replica, "L").map(|v| v == second.value())
        );
    }
}

/// A replica is credited at the address the primary lists it at only if the server reached there
/// announces that address (`census` invariant 1). Before the fix, two replicas that announce
/// each other's port (an announce setting that maps listed addresses to the wrong server)
/// swapped runs in the client's record, so that its own observation of one replica away was
/// recorded against the other's run, and the one away, promoted, granted a lock still held.
/// Now no vote of that node counts, and the error says why.
async fn swapped_schedule(swap: bool) {
    let spec = NodeSpec::new()
        .persistence(Persistence::AofAlways)
        .arg("--repl-diskless-sync-delay")
        .arg("0");
    let primary = RedisNode::start(spec.clone()).expect("primary");
    let port = primary.port().to_string();
    let replica = || {
        RedisNode::start(
            spec.clone()
                .marked(false)
                .arg("--replicaof")
                .arg("127.0.0.1")
                .arg(&port),
        )
        .expect("replica")
    };
    let (x, y) = (replica(), replica());
    if swap {
        x.cli(&[
            "CONFIG",
            "SET",
            "replica-announce-port",
            &y.port().to_string(),
        ])
        .expect("announce");
        y.cli(&[
            "CONFIG",
            "SET",
            "replica-announce-port",
            &x.port().to_string(),
        ])
        .expect("announce");
        primary
            .cli(&["CLIENT", "KILL", "TYPE", "replica"])
            .expect("reconnect");
    }
    await_replication(&primary, "two replicas online", |info| {
        info.matches("state=online").count() == 2
    })
    .await;
    eprintln!(
        "swap={swap} x={} y={} primary lists: {}",
        x.port(),
        y.port(),
        info(&primary, "replication")
            .lines()
            .filter(|l| l.starts_with("slave"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let endpoint = Proxy::start(primary.port()).await;
    let url = format!(
        "redis+replicated://127.0.0.1:{}?replicas=1",
        endpoint.port()
    );
    let b = manager(&url);
    if swap {
        for _ in 0..3 {
            let refused = b.try_acquire("warm-up", TTL).await;
            let Err(refused) = refused else {
                panic!("a vote counted with replicas that answer for each other: {refused:?}");
            };
            assert!(
                refused.to_string().contains("announces another address"),
                "{refused}"
            );
        }
        return;
    }
    let warm = b.acquire("warm-up", TTL).await.expect("B's first lock");
    assert!(warm.release().await.cause().is_none());
    tokio::time::sleep(Duration::from_millis(1_500)).await; // B's census and receipts

    // Y drops out (its link to the primary cut; it keeps its data and history).
    y.cli(&["REPLICAOF", "127.0.0.1", "1"]).expect("cut Y off");
    await_replication(&primary, "Y gone from the primary", |info| {
        info.matches("state=online").count() == 1
    })
    .await;
    // A's lock counts with X's acknowledgement alone (R = 1).
    let a = manager(&url);
    let held = a.acquire("L", TTL).await.expect("A holds L");
    assert_eq!(value_on(&y, "L"), None, "Y lacks A's lock");
    // B uses the node while Y is away: it reads the primary listing one replica online.
    let seen = b
        .acquire("while-away", TTL)
        .await
        .expect("B's lock while Y away");
    assert!(seen.release().await.cause().is_none());
    tokio::time::sleep(Duration::from_millis(1_500)).await;

    // The service promotes Y; X and the old primary follow it; the address moves.
    y.cli(&["REPLICAOF", "NO", "ONE"]).expect("promote Y");
    let yport = y.port().to_string();
    x.cli(&["REPLICAOF", "127.0.0.1", &yport])
        .expect("X follows");
    primary
        .cli(&["REPLICAOF", "127.0.0.1", &yport])
        .expect("old primary follows");
    await_replication(&y, "both follow Y", |info| {
        info.matches("state=online").count() == 2
    })
    .await;
    eprintln!(
        "Y promoted: {}",
        info(&y, "replication").replace("\r\n", " | ")
    );
    endpoint.point(y.port(), true);
    let retry = Retry::forever()
        .delay(Duration::from_millis(50))
        .max_wait(Duration::from_secs(8));
    let taken = b.acquire_with("L", TTL, &retry).await;
    eprintln!(
        "swap={swap}: B on L after Y's promotion: {taken:?}; A's remaining {:?}",
        held.remaining()
    );
    if let Ok(second) = &taken {
        assert!(
            held.deadline().min(second.deadline()) <= Instant::now(),
            "DOUBLE GRANT (swap={swap}): A holds L for {:?} more, B holds L for {:?} (B's \
             value on the new primary: {})",
            held.remaining(),
            second.remaining(),
            value_on(&y, "L").as_deref() == Some(second.value())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_seen_away_is_quarantined_when_promoted() {
    swapped_schedule(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_listed_at_each_others_address_count_no_vote() {
    swapped_schedule(true).await;
}

/// The manager's `Debug` (what `{:?}` of a `Redlock` or a `Lock` prints, as in a test failure or
/// a log line) never shows a password, whatever the node kind.
#[test]
fn debug_output_never_shows_a_password() {
    let mut leaks = Vec::new();
    for url in [
        "redis+replicated://app:s3cretpw@127.0.0.1:1?replicas=1",
        "redis+sentinel://app:s3cretpw@127.0.0.1:1/mymaster",
        "redis://app:s3cretpw@127.0.0.1:1",
    ] {
        let redlock = Redlock::builder(vec![url.to_owned()])
            .build()
            .expect("valid configuration");
        let shown = format!("{redlock:?}");
        if let Some(at) = shown.find("s3cretpw") {
            leaks.push(format!(
                "{url}: ...{}...",
                &shown[at.saturating_sub(100)..at + 20]
            ));
        }
    }
    assert!(
        leaks.is_empty(),
        "the password in Debug output:\n{}",
        leaks.join("\n")
    );
}
