//! The blocking API from plain threads: the same exclusion, release on drop before `drop`
//! returns, a guard's keeper running between calls, and an error (not a panic) inside an async
//! runtime.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::thread;
use std::time::Duration;

use common::{KEEP_ALIVE_NODE_TIMEOUT, PATIENT_NODE_TIMEOUT, cluster, patient, pttl_on, value_on};
use redquorum::blocking::Redlock;
use redquorum::{Error, LossReason, NodeState};
use redquorum_nodes::Cluster;

/// Generous bound for anything that happens in the background: the machines are small and busy.
const WITHIN: Duration = Duration::from_secs(10);

/// A blocking manager over every node of `cluster`, connected, with the patient node timeout: a
/// busy machine must not turn a slow reply into a lost vote (these tests check the API, not
/// timeouts).
fn manager(cluster: &Cluster) -> Redlock {
    manager_with(cluster, PATIENT_NODE_TIMEOUT)
}

/// [`manager`] for the tests that keep a lock of a second alive, where any failed extension is a
/// loss: a node timeout an extension round can use up before the keeper gives the lock up.
fn keeping(cluster: &Cluster) -> Redlock {
    manager_with(cluster, KEEP_ALIVE_NODE_TIMEOUT)
}

fn manager_with(cluster: &Cluster, node_timeout: Duration) -> Redlock {
    let builder = redquorum::Redlock::builder(cluster.urls()).node_timeout(node_timeout);
    let redlock = Redlock::new(builder).expect("valid test configuration");
    let replies = redlock.connect().expect("not inside a runtime");
    assert!(
        replies.iter().all(|r| r.reply.is_granted()),
        "every node answers: {replies:?}"
    );
    redlock
}

fn held_everywhere(cluster: &mut Cluster, key: &str, value: &str) {
    for i in 0..cluster.len() {
        assert_eq!(
            value_on(cluster.node(i), key).as_deref(),
            Some(value),
            "node {i} holds the lock"
        );
    }
}

fn gone_everywhere(cluster: &mut Cluster, key: &str) {
    for i in 0..cluster.len() {
        assert_eq!(value_on(cluster.node(i), key), None, "key left on node {i}");
    }
}

/// Whether `err` is the error of a blocking method called inside a runtime.
fn is_inside_runtime(err: &Error) -> bool {
    matches!(err, Error::InsideRuntime { .. })
}

#[test]
fn handles_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Redlock>();
    assert_send_sync::<redquorum::blocking::Lock>();
    assert_send_sync::<redquorum::blocking::Guard>();
}

#[test]
fn a_held_lock_is_busy_until_released() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    let other = manager(&cluster);
    assert_eq!(redlock.nodes().len(), 3);
    assert_eq!(redlock.quorum(), 2);
    let ttl = Duration::from_secs(30);

    let lock = redlock.acquire("res", ttl).expect("the resource is free");
    assert!(lock.is_valid());
    // The won round did not wait for the slowest node.
    redlock.settle().expect("not inside a runtime");
    held_everywhere(&mut cluster, "res", lock.value());
    let err = other.try_acquire("res", ttl).expect_err("held");
    assert!(err.is_busy(), "busy, not unreachable: {err}");

    let released = lock.release().expect("not inside a runtime");
    assert_eq!(released.confirmed, 3, "{released:?}");
    gone_everywhere(&mut cluster, "res");
    let third = other.try_acquire("res", ttl).expect("free again");
    other.settle().expect("not inside a runtime");
    held_everywhere(&mut cluster, "res", third.value());
}

#[test]
fn a_dropped_lock_is_released_before_drop_returns() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    // A TTL far longer than the test: only a release removes the keys.
    let ttl = Duration::from_secs(60);

    let lock = redlock.acquire("res", ttl).expect("free");
    redlock.settle().expect("not inside a runtime");
    held_everywhere(&mut cluster, "res", lock.value());
    drop(lock);
    gone_everywhere(&mut cluster, "res");

    // A lock outlives its manager: the runtime lives as long as any handle.
    let set = redlock.acquire_many(&["b", "a"], ttl).expect("free");
    assert_eq!(set.resources(), ["a", "b"]);
    redlock.settle().expect("not inside a runtime");
    drop(redlock);
    held_everywhere(&mut cluster, "a", set.value());
    drop(set);
    gone_everywhere(&mut cluster, "a");
    gone_everywhere(&mut cluster, "b");
}

#[test]
fn extend_moves_the_deadline_and_the_keys_ttl() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    let mut lock = redlock
        .try_acquire("res", Duration::from_secs(2))
        .expect("free");
    let first = lock.deadline();

    lock.extend(Duration::from_secs(40)).expect("extended");
    assert!(lock.deadline() > first + Duration::from_secs(30));
    // The won rounds did not wait for the slowest node.
    redlock.settle().expect("not inside a runtime");
    for i in 0..3 {
        let pttl = pttl_on(cluster.node(i), "res");
        assert!(
            pttl > 30_000,
            "node {i}: PTTL {pttl} ms after the extension"
        );
    }
    // The extended lock outlives its first TTL.
    thread::sleep(Duration::from_millis(2500));
    assert!(lock.is_valid());
    held_everywhere(&mut cluster, "res", lock.value());
}

#[test]
fn a_guard_keeps_its_lock_alive_from_a_plain_thread() {
    let mut cluster = cluster(3);
    let redlock = keeping(&cluster);
    let other = manager(&cluster);
    let ttl = Duration::from_secs(1);
    let guard = redlock
        .try_acquire("res", ttl)
        .expect("free")
        .keep_alive(ttl);
    let first_deadline = guard.deadline();

    // No call into the manager in the meantime: the keeper runs on the manager's runtime.
    thread::sleep(Duration::from_millis(2500));

    assert!(!guard.is_lost(), "{:?}", guard.loss_reason());
    assert_eq!(guard.loss_reason(), None);
    assert!(guard.extensions() >= 2, "{} extensions", guard.extensions());
    assert!(guard.deadline() > first_deadline);
    let holding = (0..3)
        .filter(|&i| value_on(cluster.node(i), "res").as_deref() == Some(guard.value()))
        .count();
    assert!(
        holding >= 2,
        "held on {holding} nodes, 2.5 TTLs after the acquisition"
    );
    let err = other.try_acquire("res", ttl).expect_err("still held");
    assert!(err.is_busy(), "{err}");

    guard.release().expect("kept alive until released");
    gone_everywhere(&mut cluster, "res");
}

#[test]
fn a_dropped_guard_is_released_before_drop_returns() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    let ttl = Duration::from_secs(30);
    let guard = redlock
        .try_acquire("res", ttl)
        .expect("free")
        .keep_alive(ttl);
    redlock.settle().expect("not inside a runtime");
    held_everywhere(&mut cluster, "res", guard.value());
    let token = guard.lost_token();
    drop(guard);
    gone_everywhere(&mut cluster, "res");
    assert!(token.is_cancelled(), "a dropped guard vouches for nothing");
}

#[test]
fn wait_lost_sees_stalled_nodes_from_a_plain_thread() {
    let mut cluster = cluster(3);
    let redlock = keeping(&cluster);
    let ttl = Duration::from_secs(1);
    let guard = redlock
        .try_acquire("res", ttl)
        .expect("free")
        .keep_alive(ttl);
    assert!(
        !guard.wait_lost(Duration::from_millis(300)),
        "kept alive: {:?}",
        guard.loss_reason()
    );

    cluster.node(0).pause().expect("pause");
    cluster.node(1).pause().expect("pause");
    let lost = guard.wait_lost(WITHIN);
    cluster.node(0).resume().expect("resume");
    cluster.node(1).resume().expect("resume");

    assert!(lost, "the loss is seen within {WITHIN:?}");
    assert!(guard.is_lost());
    let reason = guard.loss_reason().expect("the keeper recorded why");
    assert!(
        matches!(
            reason,
            LossReason::ExtensionFailed(_) | LossReason::ValidityRanOut
        ),
        "{reason:?}"
    );
    let err = guard.release().expect_err("the lock was lost");
    assert!(err.is_lost(), "{err}");
    gone_everywhere(&mut cluster, "res");
}

#[test]
fn inside_a_runtime_calls_return_an_error_and_drops_release_in_the_background() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    let ttl = Duration::from_secs(60);
    let lock = redlock.try_acquire("res", ttl).expect("free");
    let mut extended = redlock.try_acquire("ext", ttl).expect("free");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");

    runtime.block_on(async {
        let err = redlock
            .try_acquire("other", ttl)
            .expect_err("refused inside a runtime");
        assert!(is_inside_runtime(&err), "{err:?}");
        let message = err.to_string();
        assert!(
            message.contains("redquorum::Redlock::try_acquire(..).await"),
            "names the async method: {message}"
        );
        assert!(!message.contains('\n'), "one line: {message}");
        for err in [
            redlock.settle().expect_err("refused"),
            redlock.status("res").expect_err("refused"),
            extended.extend(ttl).expect_err("refused"),
            redlock
                .with_lock("other", ttl, |_| ())
                .expect_err("refused"),
        ] {
            assert!(is_inside_runtime(&err), "{err:?}");
        }
        // Nothing was sent: the refused acquisitions left no key.
        assert_eq!(value_on(cluster.node(0), "other"), None);
        // Not waiting, the drop hands the release to the manager's runtime.
        drop(lock);
        let err = extended
            .release()
            .expect_err("refused, released as if dropped");
        assert!(is_inside_runtime(&err), "{err:?}");
        // The last handle of a manager, dropped here, shuts its runtime down elsewhere.
        let builder = redquorum::Redlock::builder(cluster.urls());
        drop(Redlock::new(builder).expect("valid"));
    });

    for key in ["res", "ext"] {
        assert!(
            common::eventually_blocking(WITHIN, || (0..3)
                .all(|i| value_on(cluster.node(i), key).is_none())),
            "{key} released in the background"
        );
    }
}

#[test]
fn with_lock_runs_work_longer_than_the_ttl_and_releases() {
    let mut cluster = cluster(3);
    let redlock = keeping(&cluster);
    let other = manager(&cluster);
    let ttl = Duration::from_secs(1);

    let output = redlock
        .with_lock("res", ttl, |info| {
            thread::sleep(Duration::from_millis(2500));
            let err = other.try_acquire("res", ttl).expect_err("held throughout");
            assert!(err.is_busy(), "{err}");
            assert!(!info.is_lost());
            42
        })
        .expect("the lock was kept");
    assert_eq!(output, 42);
    gone_everywhere(&mut cluster, "res");
}

#[test]
fn with_lock_reports_a_loss_during_the_work() {
    let mut cluster = cluster(3);
    let redlock = keeping(&cluster);
    let ttl = Duration::from_secs(1);

    let result = redlock.with_lock("res", ttl, |info| {
        cluster.node(0).pause().expect("pause");
        cluster.node(1).pause().expect("pause");
        let noticed = common::eventually_blocking(WITHIN, || info.is_lost());
        cluster.node(0).resume().expect("resume");
        cluster.node(1).resume().expect("resume");
        assert!(noticed, "the work sees the loss");
        "finished on a lost lock"
    });
    let err = result.expect_err("the output is not vouched for");
    assert!(matches!(err, Error::HoldLost { .. }), "{err:?}");
    gone_everywhere(&mut cluster, "res");
}

#[test]
fn a_detached_lock_is_extended_inspected_and_released_by_value() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    let info = redlock
        .try_acquire("res", Duration::from_secs(2))
        .expect("free")
        .detach();
    // Detached, not released.
    redlock.settle().expect("not inside a runtime");
    held_everywhere(&mut cluster, "res", info.value());

    let deadline = redlock
        .extend_value("res", info.value(), Duration::from_secs(40))
        .expect("still ours");
    assert!(deadline > info.deadline() + Duration::from_secs(30));
    let status = redlock.status("res").expect("not inside a runtime");
    assert_eq!(status.len(), 3);
    for node in &status {
        assert_eq!(node.value(), Some(info.value()), "{node:?}");
    }

    let released = redlock
        .release_value("res", info.value())
        .expect("not inside a runtime");
    assert_eq!(released.confirmed, 3, "{released:?}");
    let status = redlock.status("res").expect("not inside a runtime");
    assert!(
        status.iter().all(|node| node.state == NodeState::Free),
        "{status:?}"
    );
    let err = redlock
        .extend_value("res", info.value(), Duration::from_secs(5))
        .expect_err("released");
    assert!(err.is_lost(), "{err}");
}

#[test]
fn threads_sharing_a_manager_never_hold_the_lock_together() {
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    let inside = AtomicBool::new(false);
    let turns = AtomicU32::new(0);
    thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                for _ in 0..4 {
                    let lock = redlock
                        .acquire_with("res", Duration::from_secs(10), &patient())
                        .expect("wins eventually");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    thread::sleep(Duration::from_millis(20));
                    inside.store(false, Ordering::SeqCst);
                    turns.fetch_add(1, Ordering::SeqCst);
                    lock.release().expect("not inside a runtime");
                }
            });
        }
    });
    assert_eq!(turns.load(Ordering::SeqCst), 12);
    gone_everywhere(&mut cluster, "res");
}

#[test]
fn plain_threads_take_permits_read_write_locks_and_lead() {
    let cluster = cluster(3);
    let redlock = manager(&cluster);
    let ttl = Duration::from_secs(10);
    let permit = redlock.try_acquire_permit("pool", 1, ttl).unwrap();
    assert_eq!(permit.permit(), Some(0));
    assert!(
        redlock
            .try_acquire_permit("pool", 1, ttl)
            .unwrap_err()
            .is_busy()
    );
    permit.release().unwrap();

    let reader = redlock.try_acquire_read("doc", ttl).unwrap();
    assert!(redlock.try_acquire_write("doc", ttl).unwrap_err().is_busy());
    reader.release().unwrap();
    let writer = redlock.try_acquire_write("doc", ttl).unwrap();
    writer.release().unwrap();

    let leading = redlock.campaign("svc", "thread-a", ttl).unwrap();
    let seen = redlock.leader("svc").unwrap().expect("a leader");
    assert_eq!(
        (seen.identity.as_str(), seen.term),
        ("thread-a", redquorum::LockInfo::fence(&leading))
    );
    leading.release().unwrap();
    assert_eq!(redlock.leader("svc").unwrap(), None);
}

/// A request as plain data from a plain thread: a lock that excludes, dropped and so released,
/// and a campaign's leadership kept alive by the manager's own runtime between calls.
#[test]
fn a_request_from_a_plain_thread_holds_and_keeps_alive_like_the_typed_calls() {
    use redquorum::blocking::Acquired;
    use redquorum::{Kind, Request, Retry};
    let mut cluster = cluster(3);
    let redlock = manager(&cluster);
    let once = |kind: Kind, name: &str, ttl: Duration| {
        Request::new(kind, [name], ttl).retry(Retry::once())
    };
    let Ok(Acquired::Lock(lock)) = redlock.request(&once(Kind::Lock, "r", Duration::from_secs(10)))
    else {
        panic!("a free lock is granted");
    };
    assert!(redlock.try_acquire("r", Duration::from_secs(10)).is_err());
    drop(lock);
    assert_eq!(value_on(cluster.node(0), "r"), None, "released on drop");
    let campaign = Kind::Campaign {
        identity: "me".into(),
    };
    let Ok(Acquired::KeptAlive(leading)) =
        redlock.request(&once(campaign, "e", Duration::from_secs(1)))
    else {
        panic!("a free election is won");
    };
    thread::sleep(Duration::from_millis(2_500));
    assert!(!leading.is_lost(), "kept alive past its TTL between calls");
    assert!(leading.extensions() >= 1);
    leading.release().expect("still leading");
}
