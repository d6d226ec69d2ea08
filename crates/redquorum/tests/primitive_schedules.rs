//! Schedules an adversarial review built against the first version of semaphores, read-write
//! locks and elections, where a liveness promise or a report did not hold (a writer that gave up
//! kept readers out, fair managers' waiters were never woken, an observer took a standby's
//! wake-up, a dead reader kept the key alive, a dropped first watch, a term that expired under a
//! long leadership, a semaphore attempt that waited out every permit on stalled nodes). Each
//! failed then; each states the promise it checks.

mod common;

use std::time::{Duration, Instant};

use common::{
    KEEP_ALIVE_NODE_TIMEOUT, PATIENT_NODE_TIMEOUT, cluster, connected, connected_with,
    default_timeout_connected,
};
use redquorum::{Error, Redlock, Retry};

const TTL: Duration = Duration::from_secs(10);

/// A retry that only a release wakes before `max_wait`: its delay between attempts is an hour.
fn by_release_only(max_wait: Duration) -> Retry {
    Retry::forever()
        .delay(Duration::from_secs(3600))
        .max_wait(max_wait)
}

fn attempts(err: &Error) -> Option<u32> {
    match err {
        Error::NotAcquired { attempts, .. } => Some(*attempts),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Read-write locks: the writer-waiting hold-off outlives a writer that gave up.
// ---------------------------------------------------------------------------------------------

/// The README before this fix (now `docs/primitives.md`'s *Read-write locks*): "a writer
/// refused because readers hold a node sets `redlock-writer-waiting:r` there for four of its
/// retry delays ... renewed by each attempt". A writer that *gave up* (its
/// `max_wait` passed, a `try_`, a dropped future) is not waiting any more, but its hold-off stays:
/// here a writer that waited 300 ms keeps every new reader out for 40 minutes (4 × its 10 min
/// delay), although nobody holds or wants the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gave_up_does_not_keep_readers_out_for_its_whole_hold_off() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let reader = redlock.try_acquire_read("cfg", TTL).await.unwrap();
    let patient_writer = Retry::forever()
        .delay(Duration::from_secs(600))
        .max_wait(Duration::from_millis(300));
    let gave_up = redlock
        .acquire_write_with("cfg", TTL, &patient_writer)
        .await
        .unwrap_err();
    assert!(gave_up.is_busy(), "{gave_up}");
    reader.release().await;
    // The writer left the waiting writers when it gave up.
    for node in cluster.iter() {
        assert_eq!(
            node.cli(&["ZCARD", "redlock-writer-waiting:cfg"]).unwrap(),
            "0"
        );
    }
    // Nobody holds "cfg", nobody waits for it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let next = redlock.try_acquire_read("cfg", TTL).await;
    assert!(
        next.is_ok(),
        "a reader is refused 2 s after the only writer gave up: {}",
        next.unwrap_err()
    );
}

/// `docs/library.md`'s *Configuration*: a retry `delay` of `Duration::MAX` "never polls (only
/// a release or `max_wait` ends the wait)"; rwlock invariant 4: waiters are woken by the key's
/// removal. A reader refused because of a writer's hold-off is woken by the last reader's release,
/// is refused again (the hold-off of a writer that has since given up is still there), and then
/// nothing ever wakes it: the hold-off's expiry is not watched. The lock is free; the reader waits
/// until its `max_wait`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_held_off_by_a_writer_that_gave_up_gets_in_once_the_hold_off_ends() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    // Another process, as far as waking goes. A writer's hold-off is four retry delays and a
    // node timeout, at least 1 s: with this node timeout, the 1 s below.
    let other = connected_with(&cluster, Duration::from_millis(400)).await;
    let first = other.try_acquire_read("doc", TTL).await.unwrap();
    // A writer tries for 300 ms (hold-off: 1 s, renewed by each attempt), then gives up.
    let brief = Retry::forever()
        .delay(Duration::from_millis(50))
        .max_wait(Duration::from_millis(300));
    let writer = other.acquire_write_with("doc", TTL, &brief);
    // A reader that only wants to be woken by releases.
    let reader = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let started = Instant::now();
            let by_release = by_release_only(Duration::from_secs(30));
            let got = redlock.acquire_read_with("doc", TTL, &by_release).await;
            (got, started.elapsed())
        })
    };
    assert!(writer.await.unwrap_err().is_busy());
    tokio::time::sleep(Duration::from_millis(200)).await;
    first.release().await; // the lock is free now; the hold-off ends within a second
    let (got, waited) = reader.await.unwrap();
    let lock = got.unwrap_or_else(|e| panic!("reader never got in: {e}"));
    assert!(
        waited < Duration::from_secs(8),
        "the reader waited {waited:?} for a lock free since ~0.5 s (hold-off ~1 s)"
    );
    lock.release().await;
}

/// rwlock invariant 4 / `docs/primitives.md`'s *Read-write locks*: waiters are "woken by the
/// key's removal (the writer's release, the last reader's), as for a lock". In a `fair(true)`
/// manager the subscribers listen only for release *announcements*, which the read-write release
/// script never publishes: a read-write waiter of a fair manager is never woken, and waits out its
/// whole delay (here: its max_wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_managers_reader_is_woken_by_the_writers_release() {
    let cluster = cluster(3);
    let fair = Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .fair(true)
        .build()
        .unwrap();
    fair.connect().await;
    let writer = fair.try_acquire_write("page", TTL).await.unwrap();
    let reader = {
        let fair = fair.clone();
        tokio::spawn(async move {
            let by_release = by_release_only(Duration::from_secs(20));
            let started = Instant::now();
            let got = fair.acquire_read_with("page", TTL, &by_release).await;
            (got, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    writer.release().await;
    let (got, waited) = reader.await.unwrap();
    let lock = got.unwrap_or_else(|e| panic!("reader never woken: {e}"));
    assert!(
        waited < Duration::from_secs(5),
        "woken by the release? waited {waited:?}"
    );
    lock.release().await;
}

/// rw_common.lua: "The set itself expires with its last reader (PEXPIRE to the longest), so
/// readers that die leave nothing behind for longer than their TTL"; `docs/primitives.md`'s
/// *Read-write locks*: "the set expiring with its longest-lived reader". The set's PEXPIRE only
/// ever grows: a long-TTL reader that *released* (cleanly, at once) leaves its TTL on the set, and
/// a short-TTL reader that then dies leaves the key behind for the long reader's TTL, not its own.
/// Our writers sweep it, but a plain lock of the same name (and every other Redlock client's
/// `SET NX`) is refused, and waiters are not woken (the key does not change), for all that time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_reader_leaves_nothing_behind_for_longer_than_its_ttl() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let long = redlock
        .try_acquire_read("rw", Duration::from_secs(30))
        .await
        .unwrap();
    // A short reader that dies: never released, never extended.
    let dead = redlock
        .try_acquire_read("rw", Duration::from_millis(500))
        .await
        .unwrap()
        .detach();
    long.release().await; // the long reader is gone at once
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(dead.is_lost());
    let pttl = cluster.iter().next().unwrap().cli(&["PTTL", "rw"]).unwrap();
    let plain = redlock.try_acquire("rw", TTL).await;
    assert!(
        plain.is_ok(),
        "nobody holds \"rw\" (the only reader left died 1 s ago), yet the key lives {pttl} ms \
         more and a lock is refused: {}",
        plain.unwrap_err()
    );
}

/// `docs/primitives.md`'s *Semaphores*: "waiters are woken by the release or expiry of any
/// permit". In a `fair(true)` manager waiters hear only release announcements, and a release
/// announces only when the key's fair queue exists (`release.lua`), which a permit's never does
/// (permits do not queue): a permit waiter of a fair manager is never woken and waits out its whole
/// delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_managers_permit_waiter_is_woken_by_a_release() {
    let cluster = cluster(3);
    let fair = Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .fair(true)
        .build()
        .unwrap();
    fair.connect().await;
    let holder = fair.try_acquire_permit("pool", 1, TTL).await.unwrap();
    let waiter = {
        let fair = fair.clone();
        tokio::spawn(async move {
            let by_release = by_release_only(Duration::from_secs(20));
            let started = Instant::now();
            let got = fair.acquire_permit_with("pool", 1, TTL, &by_release).await;
            (got, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.release().await;
    let (got, waited) = waiter.await.unwrap();
    let lock = got.unwrap_or_else(|e| panic!("permit waiter never woken: {e}"));
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    lock.release().await;
}

// ---------------------------------------------------------------------------------------------
// Elections
// ---------------------------------------------------------------------------------------------

/// `docs/primitives.md`'s *Leader election*: "`guard.release()` resigns, and a standby waiting
/// in its own campaign takes over at once (woken by the release)". A key's release wakes one waiter
/// per process (`Registry::freed` picks the first non-fair one), and a `LeaderWatch` registers as
/// such a waiter and stays registered for its whole life. A standby in the same process as an
/// observer (the natural setup: observe, and campaign as a hot standby) is therefore never woken:
/// the observer takes every wake-up. With a long retry delay the standby waits its whole delay
/// (with `Duration::MAX`, forever) while nobody leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_does_not_take_the_standbys_wake_up() {
    let cluster = cluster(3);
    let leader_process = connected(&cluster).await;
    let standby_process = connected(&cluster).await;
    let leading = leader_process.campaign("sched", "a", TTL).await.unwrap();

    let mut watch = standby_process.observe("sched");
    assert_eq!(watch.changed().await.unwrap().identity, "a");
    let watcher = tokio::spawn(async move {
        let next = watch.changed().await; // registers the watch as a waiter of "sched"
        (watch, next)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let standby = {
        let redlock = standby_process.clone();
        tokio::spawn(async move {
            let by_release = by_release_only(Duration::from_secs(20));
            redlock.campaign_with("sched", "b", TTL, &by_release).await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let resigned = Instant::now();
    leading.release().await.unwrap();
    let (_watch, _seen) = watcher.await.unwrap();
    let took_over = standby.await.unwrap();
    let waited = resigned.elapsed();
    let guard = took_over.unwrap_or_else(|e| panic!("the standby never took over: {e}"));
    assert!(
        waited < Duration::from_secs(5),
        "took over {waited:?} after the resignation"
    );
    guard.release().await.unwrap();
}

/// `LeaderWatch::changed`: "the first call [returns] the current one"; cancel safety:
/// "dropping the future loses nothing". `started` is set before the first read completes, so a
/// first call that is dropped half-way makes the next call compare with `last = None`: while
/// nobody leads it never returns (it loops until somebody leads), instead of returning `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_whose_first_call_was_dropped_still_reports_the_current_state() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut watch = redlock.observe("idle-election");
    {
        let first = watch.changed();
        tokio::pin!(first);
        // Poll once (the read is sent), then drop it, as a `select!` losing a race would.
        let polled = futures_poll_once(first.as_mut()).await;
        assert!(polled.is_none(), "the read takes a round trip");
    }
    let next = tokio::time::timeout(Duration::from_secs(3), watch.changed()).await;
    assert_eq!(
        next.ok(),
        Some(None),
        "the (effectively first) call reports that nobody leads"
    );
}

/// Polls `f` exactly once.
async fn futures_poll_once<F: std::future::Future + Unpin>(mut f: F) -> Option<F::Output> {
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        })
    })
    .await
}

/// The README before this fix (now `docs/primitives.md`'s *Leader election*): `leader(name)`
/// reads the leader "with the term when the counters of those nodes agree (they do: no `SET`
/// can succeed on a node that holds the leader's key)". Extensions never touch the counter, so it
/// expires `fence_retention` after the leader's acquisition (a day by default, 2 s here) while the
/// leader still leads: from then on `leader()` reports `term: None` for a perfectly healthy leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lived_leaders_term_stays_readable() {
    let cluster = cluster(3);
    // A lock of 900 ms kept alive: any extension that fails is a loss. (The node timeout is
    // allowed: at most max_ttl.)
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(KEEP_ALIVE_NODE_TIMEOUT)
        .max_ttl(Duration::from_secs(1))
        .fence_retention(Duration::from_secs(2))
        .build()
        .unwrap();
    redlock.connect().await;
    let ttl = Duration::from_millis(900);
    let mut leading = redlock.campaign("long", "a", ttl).await.unwrap();
    assert_eq!(
        redlock.leader("long").await.unwrap().term,
        leading.fence().await.ok()
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(leading.is_valid(), "still leading");
    let seen = redlock.leader("long").await.expect("a leads");
    assert_eq!(seen.identity, "a");
    assert_eq!(
        seen.term,
        leading.fence().await.ok(),
        "the leader's term, read while it leads"
    );
    leading.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Semaphores
// ---------------------------------------------------------------------------------------------

/// A `try_` is one attempt; with a majority of the nodes stalled, an attempt at a lock takes one
/// node timeout. An attempt at a semaphore tries every permit in turn, each round waiting the
/// node timeout for nodes that will not answer: `k` node timeouts (with `MAX_PERMITS` = 1024 and
/// the default 100 ms: 100 s) for an answer that was clear after the first round. `max_wait` does
/// not bound it either (checked only between attempts).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_at_a_semaphore_with_stalled_nodes_is_not_one_timeout_per_permit() {
    let mut cluster = cluster(3);
    // Stalled nodes cost their node timeout: the library's default, which this test measures.
    let redlock = default_timeout_connected(&cluster).await;
    cluster.node(1).pause().unwrap();
    cluster.node(2).pause().unwrap();
    let started = Instant::now();
    let lock_err = redlock.try_acquire("plain", TTL).await.unwrap_err();
    let one_lock = started.elapsed();
    let started = Instant::now();
    let capped = Retry::once().max_wait(Duration::from_millis(500));
    let permit_err = redlock
        .acquire_permit_with("pool", 64, TTL, &capped)
        .await
        .unwrap_err();
    let one_permit = started.elapsed();
    cluster.node(1).resume().unwrap();
    cluster.node(2).resume().unwrap();
    eprintln!(
        "lock: {one_lock:?} ({lock_err}); permit of 64: {one_permit:?} (attempts {:?})",
        attempts(&permit_err)
    );
    assert!(
        one_permit < Duration::from_secs(2),
        "one attempt at a 64-permit semaphore took {one_permit:?} (a lock's: {one_lock:?})"
    );
}
