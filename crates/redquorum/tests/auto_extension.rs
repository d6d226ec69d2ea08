//! Auto-extension: a guard keeps its lock across many TTLs, and says at once when it is gone
//! (keys deleted, nodes killed or stalled, a bound reached).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{
    PATIENT_NODE_TIMEOUT, cluster, connected, eventually, keeping_alive, manager, value_on,
};
use redquorum::{Error, HoldOptions, Limit, LossReason, Redlock, Reply};
use redquorum_nodes::Cluster;

/// Generous bound on how long a loss may take to be signalled: intervals here are well under a
/// second, but the test machines are small and busy.
const SIGNAL_WITHIN: Duration = Duration::from_secs(5);

fn reason_of(err: &Error) -> &LossReason {
    match err {
        Error::HoldLost { reason, .. } => reason,
        other => panic!("expected HoldLost, got {other:?}"),
    }
}

/// `res`, acquired in one attempt and kept alive with `options`.
async fn kept(redlock: &Redlock, ttl: Duration, options: HoldOptions) -> redquorum::Guard {
    redlock
        .try_acquire("res", ttl)
        .await
        .expect("the resource is free")
        .keep_alive_with(ttl, options)
}

fn gone_everywhere(cluster: &mut Cluster, key: &str) {
    for i in 0..cluster.len() {
        assert_eq!(value_on(cluster.node(i), key), None, "key left on node {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_keeps_its_lock_across_many_ttls() {
    let mut cluster = cluster(3);
    // A TTL of a second (with its node timeout), not less: any extension that fails is a loss,
    // and a loaded machine's slow answer must not be one.
    let redlock = keeping_alive(&cluster).await;
    let other = manager(&cluster);
    let ttl = Duration::from_secs(1);
    let guard = kept(&redlock, ttl, HoldOptions::new()).await;
    let first_deadline = guard.deadline();

    let job_end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < job_end {
        let err = other.try_acquire("res", ttl).await.unwrap_err();
        assert!(err.is_busy(), "the lock is held throughout: {err}");
        assert!(!guard.is_lost(), "{:?}", guard.loss_reason());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // 5 s is five TTLs: without extensions the keys would long be gone.
    assert!(guard.extensions() >= 3, "{} extensions", guard.extensions());
    assert!(guard.deadline() > first_deadline);
    assert!(!guard.remaining().is_zero());
    // The last extension's request to the slowest node may still be on its way.
    redlock.settle().await;
    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(guard.value())
        );
    }

    let released = guard.release().await.expect("released after a clean hold");
    assert_eq!(released.confirmed, 3, "{released:?}");
    gone_everywhere(&mut cluster, "res");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_runs_a_job_longer_than_the_ttl_and_releases() {
    let mut cluster = cluster(3);
    // As above: a TTL of a second, with its node timeout.
    let redlock = keeping_alive(&cluster).await;
    let other = manager(&cluster);
    let ttl = Duration::from_secs(1);
    let output = redlock
        .with_lock("res", ttl, |info| async move {
            let job_end = Instant::now() + Duration::from_secs(5);
            let mut refusals = 0;
            while Instant::now() < job_end {
                let err = other.try_acquire("res", ttl).await.unwrap_err();
                assert!(err.is_busy(), "the lock is held throughout: {err}");
                assert!(!info.is_lost());
                refusals += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            (refusals, info.value().to_owned())
        })
        .await
        .expect("the job finished while holding the lock");
    let (refusals, value) = output;
    assert!(refusals >= 3, "{refusals}");
    assert_eq!(value.len(), 40);
    gone_everywhere(&mut cluster, "res");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_key_on_a_majority_fires_the_loss_signal() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let ttl = Duration::from_secs(1);
    let guard = kept(&redlock, ttl, HoldOptions::new()).await;
    let token = guard.lost_token();
    assert!(!token.is_cancelled());

    for i in 0..2 {
        cluster.node(i).cli(&["DEL", "res"]).unwrap();
    }
    tokio::time::timeout(SIGNAL_WITHIN, token.cancelled())
        .await
        .expect("the loss is signalled within about one interval");
    assert!(guard.is_lost());
    assert_eq!(guard.remaining(), Duration::ZERO);
    let Some(LossReason::ExtensionFailed(failure)) = guard.loss_reason() else {
        panic!("expected a failed extension, got {:?}", guard.loss_reason());
    };
    assert_eq!(failure.replies[0].reply, Reply::Refused, "{failure}");
    assert_eq!(failure.replies[1].reply, Reply::Refused, "{failure}");

    // Released after the loss: reported as lost, but what was left is deleted all the same.
    let err = guard.release().await.expect_err("the lock was lost");
    assert!(err.is_lost(), "{err}");
    assert!(
        matches!(reason_of(&err), LossReason::ExtensionFailed(_)),
        "{err}"
    );
    gone_everywhere(&mut cluster, "res");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_stops_the_work_when_the_lock_is_lost() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let finished = Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();

    let job = {
        let finished = Arc::clone(&finished);
        tokio::spawn(async move {
            redlock
                .with_lock("res", Duration::from_secs(1), |info| async move {
                    let _ = started_tx.send(info.clone());
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    finished.store(true, Ordering::SeqCst);
                    7
                })
                .await
        })
    };
    let info = started_rx.await.expect("the work starts");
    for i in 0..2 {
        cluster.node(i).cli(&["DEL", "res"]).unwrap();
    }
    let result = tokio::time::timeout(SIGNAL_WITHIN, job)
        .await
        .expect("with_lock returns soon after the loss, not after the work's 30 s")
        .expect("the with_lock task does not panic");
    let err = result.expect_err("the lock was lost");
    assert!(
        matches!(reason_of(&err), LossReason::ExtensionFailed(_)),
        "{err}"
    );
    assert!(info.is_lost(), "the work's token fired");
    assert!(
        !finished.load(Ordering::SeqCst),
        "the work was stopped before it could finish"
    );
    gone_everywhere(&mut cluster, "res");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_majority_fires_the_loss_signal() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let ttl = Duration::from_secs(1);
    let guard = kept(&redlock, ttl, HoldOptions::new()).await;

    cluster.node(0).kill().unwrap();
    cluster.node(1).kill().unwrap();
    tokio::time::timeout(SIGNAL_WITHIN, guard.lost())
        .await
        .expect("the loss is signalled");
    assert!(
        matches!(
            guard.loss_reason(),
            Some(LossReason::ExtensionFailed(_) | LossReason::ValidityRanOut)
        ),
        "{:?}",
        guard.loss_reason()
    );
    let err = guard.release().await.expect_err("the lock was lost");
    assert!(err.is_lost(), "{err}");
    assert_eq!(
        value_on(cluster.node(2), "res"),
        None,
        "the survivor's key is released"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_nodes_let_the_validity_run_out_and_the_signal_still_fires() {
    let mut cluster = cluster(3);
    // Node timeout far beyond the TTL: an extension sent to stalled nodes hangs until then, so
    // only the deadline can end the wait.
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    redlock.connect().await;
    let ttl = Duration::from_secs(1);
    let guard = kept(&redlock, ttl, HoldOptions::new()).await;

    cluster.node(0).pause().unwrap();
    cluster.node(1).pause().unwrap();
    let signalled = tokio::time::timeout(SIGNAL_WITHIN, guard.lost()).await;
    let signalled_at = Instant::now();
    cluster.node(0).resume().unwrap();
    cluster.node(1).resume().unwrap();

    signalled.expect("the signal fires by the deadline, not after the 20 s node timeout");
    assert_eq!(guard.loss_reason(), Some(LossReason::ValidityRanOut));
    // Given up a safety margin before the deadline (a tenth of the 988 ms validity), not
    // earlier: `the_loss_signal_fires_before_the_deadline` checks the other side with a margin
    // wide enough for a busy machine.
    assert!(
        signalled_at + Duration::from_micros(98_800) >= guard.deadline(),
        "not before the margin either"
    );
    assert!(
        signalled_at < guard.deadline() + Duration::from_secs(5),
        "signalled {:?} after the deadline",
        signalled_at - guard.deadline()
    );
    let err = guard.release().await.expect_err("the lock was lost");
    assert_eq!(reason_of(&err), &LossReason::ValidityRanOut);
    gone_everywhere(&mut cluster, "res");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_extensions_ends_the_hold_while_the_lock_is_still_valid() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let ttl = Duration::from_secs(3);
    let options = HoldOptions::new()
        .interval(Duration::from_millis(100))
        .max_extensions(2);
    let guard = kept(&redlock, ttl, options).await;

    tokio::time::timeout(SIGNAL_WITHIN, guard.lost())
        .await
        .expect("the bound ends the hold");
    assert_eq!(
        guard.loss_reason(),
        Some(LossReason::LimitReached(Limit::Extensions(2)))
    );
    assert_eq!(guard.extensions(), 2);
    // The bound was reached with most of the 3 s validity left; the keys are still ours (once
    // the acquisition's and the extensions' requests to the slowest node have landed).
    redlock.settle().await;
    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(guard.value())
        );
    }
    let err = guard.release().await.expect_err("a bound is a loss");
    assert!(err.is_lost(), "{err}");
    gone_everywhere(&mut cluster, "res");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hold_ends_the_hold_and_not_before() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let ttl = Duration::from_secs(3);
    let max_hold = Duration::from_millis(800);
    let lock = redlock.try_acquire("res", ttl).await.unwrap();
    let started = Instant::now();
    let guard = lock.keep_alive_with(
        ttl,
        HoldOptions::new()
            .interval(Duration::from_millis(200))
            .max_hold(max_hold),
    );

    tokio::time::timeout(SIGNAL_WITHIN, guard.lost())
        .await
        .expect("the bound ends the hold");
    assert!(started.elapsed() >= max_hold, "{:?}", started.elapsed());
    assert_eq!(
        guard.loss_reason(),
        Some(LossReason::LimitReached(Limit::Hold(max_hold)))
    );
    assert!(guard.extensions() >= 1, "{} extensions", guard.extensions());
    let err = guard.release().await.expect_err("a bound is a loss");
    assert_eq!(
        reason_of(&err),
        &LossReason::LimitReached(Limit::Hold(max_hold))
    );
    gone_everywhere(&mut cluster, "res");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interval_that_cannot_work_is_reported_at_once() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let ttl = Duration::from_secs(10);
    let guard = kept(&redlock, ttl, HoldOptions::new().interval(ttl)).await;
    tokio::time::timeout(SIGNAL_WITHIN, guard.lost())
        .await
        .expect("reported at once, not after an interval");
    assert!(
        matches!(guard.loss_reason(), Some(LossReason::Invalid(_))),
        "{:?}",
        guard.loss_reason()
    );
    assert_eq!(guard.extensions(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_guard_stops_extending_and_releases_in_the_background() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let ttl = Duration::from_secs(30);
    let guard = kept(&redlock, ttl, HoldOptions::new()).await;
    let token = guard.lost_token();
    drop(guard);
    tokio::time::timeout(SIGNAL_WITHIN, token.cancelled())
        .await
        .expect("tokens handed out fire once the guard is gone");
    let node = cluster.node(0);
    assert!(
        eventually(Duration::from_secs(5), || value_on(node, "res").is_none()).await,
        "a dropped guard's lock is released"
    );
}

/// A guard made from a lock that already used most of its validity extends at once, by the
/// lock's deadline, not an interval after the guard was made (which would be past the deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_made_late_extends_by_the_lock_s_own_deadline() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let ttl = Duration::from_secs(3);
    let lock = redlock.try_acquire("res", ttl).await.expect("free");
    let value = lock.value().to_owned();
    // Work before keep_alive: 2 s of the 2.968 s validity. An interval (989 ms) from now would be
    // past the point where the lock is given up (a tenth of the validity before its deadline, at
    // 2.67 s), so a guard that waited it would lose the lock; the ~970 ms left leave a loaded
    // machine room for the extension due at once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let guard = lock.keep_alive(ttl);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        !guard.is_lost(),
        "kept alive across the late start: {:?}",
        guard.loss_reason()
    );
    assert!(guard.extensions() >= 2, "extended {}", guard.extensions());
    redlock.settle().await;
    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(value.as_str())
        );
    }
    guard.release().await.expect("released while held");
}

/// A `current_thread` runtime: work that blocks its one thread keeps the keeper task from running.
fn one_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Time alone makes a lock lost: work that blocks a `current_thread` runtime (so the keeper task
/// cannot run) still reads "lost" and "no time left" once the deadline is near, from the guard
/// and from the `with_lock` work's `LockInfo`.
#[test]
fn time_alone_makes_a_lock_lost_when_the_keeper_cannot_run() {
    let runtime = one_thread();
    let cluster = cluster(3);
    runtime.block_on(async {
        let redlock = manager(&cluster);
        let ttl = Duration::from_secs(2);
        let guard = redlock
            .try_acquire("res", ttl)
            .await
            .expect("free")
            .keep_alive(ttl);
        assert!(!guard.is_lost() && !guard.remaining().is_zero());
        // A blocking step: no task runs on this runtime until it returns.
        std::thread::sleep(Duration::from_millis(2500));
        assert!(Instant::now() > guard.deadline(), "past the deadline");
        assert!(guard.is_lost(), "lost by the clock alone");
        assert_eq!(guard.remaining(), Duration::ZERO);
        let _ = guard.release().await;

        let seen = redlock
            .with_lock("res", ttl, |info| async move {
                let deadline = info.deadline();
                let fresh = (info.is_lost(), info.remaining());
                std::thread::sleep(Duration::from_millis(2500));
                (deadline, fresh, info.is_lost(), info.remaining())
            })
            .await;
        // The work finished, but the lock was lost meanwhile: either the work's output (if the
        // loss was only noticed at release) or HoldLost. What the work saw is what matters.
        if let Ok((deadline, fresh, lost, remaining)) = seen {
            assert!(!fresh.0 && !fresh.1.is_zero(), "valid at first: {fresh:?}");
            assert!(
                deadline <= Instant::now(),
                "the deadline passed during the step"
            );
            assert!(lost, "the work sees the loss by the clock");
            assert_eq!(remaining, Duration::ZERO);
        }
    });
}

/// A guard released after its margin, on a runtime that could not run its keeper, agrees with
/// its own `is_lost()`: the release reports the lock lost (`ValidityRanOut`), and it is a lost
/// lock's release, so with a lock-delay the keys stay for the delay instead of being deleted as
/// if the lock had been held to the end (issue: `Guard::release` after the loss margin).
#[test]
fn a_guard_released_after_its_margin_is_reported_lost_and_keeps_its_lock_delay() {
    let runtime = one_thread();
    let cluster = cluster(3);
    runtime.block_on(async {
        let delayed = || {
            // Fresh managers whose first attempts connect: the patient node timeout. The only
            // release here is a lost lock's, which the late-release bound does not decide.
            Redlock::builder(cluster.urls())
                .node_timeout(PATIENT_NODE_TIMEOUT)
                .max_ttl(Duration::from_secs(10))
                .lock_delay(Duration::from_secs(3))
                .build()
                .expect("valid")
        };
        let redlock = delayed();
        let ttl = Duration::from_secs(3);
        let options = HoldOptions::new().margin(Duration::from_millis(1200));
        let guard = redlock
            .try_acquire("res", ttl)
            .await
            .expect("free")
            .keep_alive_with(ttl, options);
        // Block the only thread until past the margin, still before the deadline.
        let until = guard.deadline() - Duration::from_millis(500);
        std::thread::sleep(until.saturating_duration_since(Instant::now()));
        assert!(guard.is_lost(), "lost by the clock: past the margin");
        let released = guard.release().await;
        assert!(
            matches!(
                released,
                Err(Error::HoldLost {
                    reason: LossReason::ValidityRanOut,
                    ..
                })
            ),
            "the release agrees with is_lost(): {released:?}"
        );
        // Its lock-delay holds: nobody gets the lock at once.
        let err = delayed()
            .try_acquire("res", ttl)
            .await
            .expect_err("a lost lock's release leaves it to its lock-delay");
        assert!(err.is_busy(), "{err}");
    });
}

/// The loss signal fires a safety margin *before* the deadline, not at or after it: with the
/// extension stuck on stalled nodes, whoever waits on the token still has time to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loss_signal_fires_before_the_deadline() {
    let mut cluster = cluster(3);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_secs(4)) // extensions stall rather than fail
        .build()
        .expect("valid");
    redlock.connect().await;
    let ttl = Duration::from_secs(5);
    let guard = kept(&redlock, ttl, HoldOptions::new()).await;
    cluster.node(0).pause().expect("pause");
    cluster.node(1).pause().expect("pause");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the loss is signalled");
    let fired_at = Instant::now();
    let deadline = guard.deadline();
    cluster.node(0).resume().expect("resume");
    cluster.node(1).resume().expect("resume");
    assert!(
        fired_at < deadline,
        "signalled {:?} before the deadline, not after",
        deadline.saturating_duration_since(fired_at)
    );
    assert!(matches!(
        guard.loss_reason(),
        Some(LossReason::ValidityRanOut)
    ));
    let _ = guard.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_refused_by_a_stall_shorter_than_the_validity_do_not_lose_the_lock() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    redlock.connect().await;
    let ttl = Duration::from_secs(6);
    let guard = kept(
        &redlock,
        ttl,
        HoldOptions::new().interval(Duration::from_millis(500)),
    )
    .await;
    // A majority stalls for a second and a half: the extensions sent meanwhile time out, which
    // shows nothing about the keys (hold invariant 9). The keeper tries again until they answer.
    cluster.node(0).pause().expect("pause");
    cluster.node(1).pause().expect("pause");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    cluster.node(0).resume().expect("resume");
    cluster.node(1).resume().expect("resume");
    let before = guard.extensions();
    assert!(
        eventually(SIGNAL_WITHIN, || guard.extensions() > before + 1).await,
        "no extension after the stall ({} before)",
        guard.extensions()
    );
    assert!(
        !guard.is_lost(),
        "lost to a stall it outlived: {:?}",
        guard.loss_reason()
    );
    let released = guard.release().await.expect("released, not lost");
    assert!(released.cause().is_none(), "{released:?}");
    gone_everywhere(&mut cluster, "res");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_past_the_margin_loses_the_lock_with_the_last_refusal_as_its_reason() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    redlock.connect().await;
    let ttl = Duration::from_secs(2);
    let guard = kept(&redlock, ttl, HoldOptions::new()).await;
    // Refused at once, every time: the keeper tries again until the margin, not past it.
    cluster.node(0).kill().expect("kill");
    cluster.node(1).kill().expect("kill");
    tokio::time::timeout(SIGNAL_WITHIN, guard.lost())
        .await
        .expect("the signal fires by the margin");
    // Tried again until the margin; the loss says what the nodes did (hold invariant 9).
    let Some(LossReason::ExtensionFailed(failure)) = guard.loss_reason() else {
        panic!("{:?}", guard.loss_reason());
    };
    assert!(failure.granted() < failure.quorum, "{failure}");
    assert!(guard.remaining().is_zero());
}
