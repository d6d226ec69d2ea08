//! Lock-delay: a lock its holder did not release stays unavailable for the delay after its
//! validity ends; a clean release frees it at once.

mod common;

use std::time::{Duration, Instant};

use common::{cluster, connected, pttl_on};
use redquorum::{ConfigError, Error, Redlock, Retry};
use redquorum_nodes::Cluster;

const DELAY: Duration = Duration::from_millis(1500);

/// The node timeout of the managers with a lock-delay: above any answer a healthy node gives on a
/// loaded machine, and short enough for the releases here. A release judges itself late when a
/// key has no more than the delay plus the node timeout left (plus the drift allowance of
/// `max_ttl`, 602 ms, when it is by value): 2 s, or 2.6 s by value, against the 3.4 s and more
/// that the timely releases below leave (a 2 s TTL extended just before, or a 5 s TTL).
const NODE_TIMEOUT: Duration = Duration::from_millis(500);

async fn delayed(cluster: &Cluster) -> Redlock {
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(NODE_TIMEOUT)
        .lock_delay(DELAY)
        .build()
        .unwrap();
    redlock.connect().await;
    redlock
}

/// A lock on "handed" that `holder` takes and hands to another process (detached): what that
/// process knows of it.
async fn handed_off(holder: &Redlock, ttl: Duration) -> redquorum::LockInfo {
    let info = holder.try_acquire("handed", ttl).await.unwrap().detach();
    holder.settle().await;
    info
}

/// `other` takes `resource`, trying every 20 ms, and must not get it before `ends`.
async fn next_holder_not_before(other: &Redlock, resource: &str, ends: Instant) {
    let every_20ms = Retry::forever()
        .delay(Duration::from_millis(20))
        .max_wait(Duration::from_secs(20));
    let lock = other
        .acquire_with(resource, Duration::from_secs(5), &every_20ms)
        .await
        .expect("free once the delay is over");
    let got = Instant::now();
    assert!(
        got >= ends,
        "a new holder {:?} before the delay ended",
        ends - got
    );
    lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_nobody_released_stays_out_of_reach_for_the_delay_after_its_validity() {
    let cluster = cluster(3);
    let holder = delayed(&cluster).await;
    let ttl = Duration::from_millis(500);
    // The holder "crashes": it never releases, and nothing releases for it.
    let info = holder.try_acquire("crashed", ttl).await.unwrap().detach();
    holder.settle().await;
    let ends = info.deadline() + DELAY;

    // Another client (no delay of its own) tries every 20 ms.
    let other = connected(&cluster).await;
    next_holder_not_before(&other, "crashed", ends).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_release_frees_the_lock_at_once() {
    let cluster = cluster(3);
    let holder = delayed(&cluster).await;
    let lock = holder
        .try_acquire("released", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(lock.release().await.cause(), None);
    let other = connected(&cluster).await;
    let next = other
        .try_acquire("released", Duration::from_secs(5))
        .await
        .expect("a single attempt wins right after the release");
    next.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_outlive_the_validity_by_the_delay_after_every_extension() {
    let cluster = cluster(3);
    let holder = delayed(&cluster).await;
    let ttl = Duration::from_secs(2);
    let mut lock = holder.try_acquire("extended", ttl).await.unwrap();
    for round in 0..2 {
        if round == 1 {
            lock.extend(ttl).await.unwrap();
        }
        // The won round did not wait for the slowest node.
        holder.settle().await;
        // The holder counts on less than the TTL; the servers keep the key the delay longer.
        assert!(lock.remaining() <= ttl);
        for node in cluster.iter() {
            let pttl = pttl_on(node, "extended");
            let whole = (ttl + DELAY).as_millis() as i64;
            assert!(
                pttl > ttl.as_millis() as i64 && pttl <= whole,
                "round {round}: PTTL {pttl}"
            );
        }
    }
    lock.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_that_leaves_no_room_under_max_ttl_is_refused() {
    let servers = ["redis://127.0.0.1:1"];
    let too_long = Redlock::builder(servers)
        .max_ttl(Duration::from_secs(10))
        .lock_delay(Duration::from_secs(10))
        .build()
        .unwrap_err();
    assert!(
        matches!(
            too_long,
            Error::Config(ConfigError::InvalidSetting {
                setting: "lock_delay",
                ..
            })
        ),
        "{too_long}"
    );
    let redlock = Redlock::builder(servers)
        .max_ttl(Duration::from_secs(10))
        .lock_delay(Duration::from_secs(4))
        .build()
        .unwrap();
    let err = redlock
        .try_acquire("r", Duration::from_secs(7))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::InvalidTtl { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("lock-delay"), "{err}");
}

/// A holder that releases a lock it already lost (its validity ran out while it worked) may still
/// have writes in flight: with a lock-delay its keys are kept for the delay from the release,
/// not deleted; a release while still valid deletes them (above).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_a_lost_lock_keeps_it_out_of_reach_for_the_delay() {
    let cluster = cluster(3);
    let holder = delayed(&cluster).await;
    let lock = holder
        .try_acquire("late", Duration::from_millis(300))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(lock.is_lost(), "the holder worked past its validity");
    let released = Instant::now();
    let kept = lock.release().await;
    assert!(
        kept.confirmed >= 2,
        "the keys are still ours, kept: {kept:?}"
    );
    for node in cluster.iter() {
        let pttl = pttl_on(node, "late");
        assert!(pttl > 0, "kept for the delay, not deleted: PTTL {pttl}");
    }
    let other = connected(&cluster).await;
    let every_20ms = Retry::forever()
        .delay(Duration::from_millis(20))
        .max_wait(Duration::from_secs(20));
    let next = other
        .acquire_with("late", Duration::from_secs(5), &every_20ms)
        .await
        .expect("free once the delay is over");
    assert!(
        released.elapsed() >= DELAY - Duration::from_millis(50),
        "a new holder {:?} after the lost lock's release",
        released.elapsed()
    );
    next.release().await;
}

/// A hand-off's release by value (`Lock::detach`, then `release_value` from another process)
/// that comes after the lock's validity does not free it early: the nodes keep the key for the
/// delay, the release says it is not one (`Cause::LeftToDelay`), and nobody gets the lock
/// until validity plus delay. In time, the same release frees it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_value_after_the_validity_leaves_the_lock_to_its_delay() {
    late_release_by_value(false).await;
}

/// The same with fair waiting, whose release script also announces the release to the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_by_value_after_the_validity_leaves_the_lock_to_its_delay() {
    late_release_by_value(true).await;
}

/// The holder's lock-delay and timing bound a late release by value, whoever sends it (`value`
/// invariant 1): a process with no lock-delay of its own, and a node timeout far shorter than
/// the holder's, releases after the validity; the nodes keep the key for the holder's delay all
/// the same. (Judged by the releaser's settings, nothing would be late and the lock would be free
/// at once.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_by_value_is_judged_by_the_holders_settings_not_the_senders() {
    let cluster = cluster(3);
    let info = handed_off(&delayed(&cluster).await, Duration::from_millis(500)).await;
    let ends = info.deadline() + DELAY;

    // No lock-delay, and a node timeout a tenth of the holder's.
    let releaser = common::ready(
        Redlock::builder(cluster.urls())
            .node_timeout(NODE_TIMEOUT / 10)
            .build()
            .unwrap(),
    )
    .await;
    tokio::time::sleep_until((info.deadline() + Duration::from_millis(100)).into()).await;
    let released = releaser.release_value("handed", info.value()).await;
    assert_eq!(
        released.cause(),
        Some(redquorum::Cause::LeftToDelay),
        "a late release is not a release, whoever sends it: {released:?}"
    );
    let other = connected(&cluster).await;
    next_holder_not_before(&other, "handed", ends).await;
}

async fn late_release_by_value(fair: bool) {
    let cluster = cluster(3);
    let built = |fair: bool| {
        Redlock::builder(cluster.urls())
            .node_timeout(NODE_TIMEOUT)
            .lock_delay(DELAY)
            .fair(fair)
            .build()
            .unwrap()
    };
    // Connected first: a single attempt at a 500 ms lock has no time to connect, and a release
    // must not count a node still connecting as silent.
    let holder = common::ready(built(fair)).await;
    let ttl = Duration::from_millis(500);
    let info = holder.try_acquire("handed", ttl).await.unwrap().detach();
    holder.settle().await;
    let ends = info.deadline() + DELAY;

    // Another process, which knows the value but not the deadline, releases late.
    let releaser = common::ready(built(fair)).await;
    tokio::time::sleep_until((info.deadline() + Duration::from_millis(100)).into()).await;
    let released = releaser.release_value("handed", info.value()).await;
    assert_eq!(
        released.cause(),
        Some(redquorum::Cause::LeftToDelay),
        "a late release is not a release: {released:?}"
    );
    assert!(
        released
            .replies
            .iter()
            .all(|r| r.reply == redquorum::Reply::LeftToDelay),
        "{released:?}"
    );
    let other = connected(&cluster).await;
    next_holder_not_before(&other, "handed", ends).await;

    // In time, a release by value frees the lock at once.
    let info = holder
        .try_acquire("handed", Duration::from_secs(5))
        .await
        .unwrap()
        .detach();
    holder.settle().await;
    let released = releaser.release_value("handed", info.value()).await;
    assert_eq!(released.cause(), None, "{released:?}");
    other
        .try_acquire("handed", Duration::from_secs(5))
        .await
        .expect("free at once after a timely release")
        .release()
        .await;
}

/// An extension by value keeps the holder's lock-delay, whoever sends it (engine invariant 9,
/// `value` invariant 2): a process without a lock-delay of its own (a shell's `redlock extend`)
/// extends a handed-off lock, and every node still keeps the key the holder's delay past the new
/// TTL; the holder then vanishes, and nobody gets the lock before the new deadline plus the
/// delay. (With the extender's settings, the keys would get the TTL alone and the lock would be
/// free at the new deadline.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_by_value_keeps_the_holders_delay_whoever_sends_it() {
    let cluster = cluster(3);
    // Long enough that an extension by value is timely (engine invariant 10: more validity left
    // than the node timeout and the drift allowance of `max_ttl`, 1.1 s here).
    let info = handed_off(&delayed(&cluster).await, Duration::from_secs(3)).await;
    let extender = connected(&cluster).await; // no lock-delay
    let ttl = Duration::from_secs(2);
    let deadline = extender
        .extend_value("handed", info.value(), ttl)
        .await
        .expect("the holder's lock is extended by value");
    extender.settle().await;
    for node in cluster.iter() {
        let pttl = pttl_on(node, "handed");
        assert!(
            pttl > (ttl + DELAY / 2).as_millis() as i64 && pttl <= (ttl + DELAY).as_millis() as i64,
            "the key lives the holder's delay past the new TTL: PTTL {pttl}"
        );
    }
    let other = connected(&cluster).await;
    next_holder_not_before(&other, "handed", deadline + DELAY).await;
}

/// Nor does an extender with a longer lock-delay of its own give the keys more than the
/// holder's: a key that outlived the new deadline by more than the holder's delay would have
/// more left than the bound the value carries, and a late release by value would be judged
/// timely and free the lock inside the delay (`value` invariant 2). Here the late release after
/// such an extension is still no release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_by_value_gives_the_holders_delay_not_the_senders() {
    let cluster = cluster(3);
    // Long enough that an extension by value is timely (engine invariant 10: more validity left
    // than the node timeout and the drift allowance of `max_ttl`, 1.1 s here).
    let info = handed_off(&delayed(&cluster).await, Duration::from_secs(3)).await;
    let longer = common::ready(
        Redlock::builder(cluster.urls())
            .node_timeout(NODE_TIMEOUT)
            .lock_delay(DELAY * 3)
            .build()
            .unwrap(),
    )
    .await;
    let ttl = Duration::from_millis(800);
    let deadline = longer
        .extend_value("handed", info.value(), ttl)
        .await
        .expect("extended by value");
    longer.settle().await;
    for node in cluster.iter() {
        let pttl = pttl_on(node, "handed");
        assert!(
            pttl <= (ttl + DELAY).as_millis() as i64,
            "the holder's delay, not the extender's: PTTL {pttl}"
        );
    }
    tokio::time::sleep_until((deadline + Duration::from_millis(100)).into()).await;
    let released = longer.release_value("handed", info.value()).await;
    assert_eq!(
        released.cause(),
        Some(redquorum::Cause::LeftToDelay),
        "a late release after an extension by value is no release: {released:?}"
    );
    let other = connected(&cluster).await;
    next_holder_not_before(&other, "handed", deadline + DELAY).await;
}

/// A late release is judged by the bound the holder carried, which allows the write's lag and
/// the drift allowance of the holder's `max_ttl` (engine invariant 9). An extension by value
/// whose own drift allowance already takes all of that is refused before anything is sent: no
/// lag would be left for its votes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_by_value_the_holders_bound_cannot_cover_is_refused() {
    // A holder with a 100 ms delay, 50 ms node timeout and 10 s max_ttl carries 252 ms:
    // 152 ms for the lag and the drift allowance; a 20 s TTL's allowance is 202 ms.
    let value = format!("{}-252-100", "ab".repeat(20));
    let extender = Redlock::builder(["redis://127.0.0.1:1"]).build().unwrap();
    let err = extender
        .extend_value("r", &value, Duration::from_secs(20))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::InvalidTtl { .. })),
        "{err}"
    );
    assert!(
        err.to_string().contains("carried in the lock's value"),
        "{err}"
    );
    // A TTL whose allowance leaves room is sent (and fails only for want of a server).
    let err = extender
        .extend_value("r", &value, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err}");
}

/// A late extension is no extension, whoever sends it (engine invariant 10): after the holder's
/// deadline, an extension by value does not revive the lock inside its delay (the node says it
/// is left to its delay), and a release by value after it is still a late one. Found by review:
/// before, the extension succeeded and the release that followed freed the lock 4.4 s early.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extension_by_value_after_the_deadline_does_not_revive_the_lock() {
    let cluster = cluster(3);
    let info = handed_off(&delayed(&cluster).await, Duration::from_millis(500)).await;
    let ends = info.deadline() + DELAY;
    let other = connected(&cluster).await; // no lock-delay
    tokio::time::sleep_until((info.deadline() + Duration::from_millis(100)).into()).await;
    let err = other
        .extend_value("handed", info.value(), Duration::from_secs(2))
        .await
        .expect_err("a late extension is no extension");
    assert_eq!(err.cause(), Some(redquorum::Cause::LeftToDelay), "{err}");
    let released = other.release_value("handed", info.value()).await;
    assert_eq!(
        released.cause(),
        Some(redquorum::Cause::LeftToDelay),
        "{released:?}"
    );
    next_holder_not_before(&other, "handed", ends).await;
}
