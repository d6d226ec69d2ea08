//! Validity, expiry, extension and release, as seen on the servers.

mod common;

use std::time::{Duration, Instant};

use common::{
    cluster, connected, default_timeout_manager, eventually, keeping_alive, manager, patient,
    pttl_on, value_on,
};
use redquorum::Error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validity_is_ttl_minus_elapsed_minus_drift() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let ttl = Duration::from_secs(10);
    let before = Instant::now();
    let lock = redlock.try_acquire("res", ttl).await.unwrap();
    // drift = 10 s × 0.01 + 2 ms = 102 ms; the round started after `before`.
    let latest_deadline = Instant::now() + ttl - Duration::from_millis(102);
    assert!(lock.deadline() <= latest_deadline);
    assert!(lock.deadline() >= before + ttl - Duration::from_millis(102));
    assert!(lock.remaining() <= ttl - Duration::from_millis(102));
    assert!(lock.is_valid());
    // The won round did not wait for the slowest node.
    redlock.settle().await;
    for i in 0..3 {
        let pttl = pttl_on(cluster.node(i), "res");
        assert!(pttl > 0 && pttl <= 10_000, "node {i}: PTTL {pttl}");
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(lock.value())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lock_lets_the_next_client_in() {
    let cluster = cluster(3);
    // Connected first, with a TTL a slow round does not use up: the first holder's single attempt
    // wins, and the second's finds its keys still there.
    let first = connected(&cluster).await;
    let second = connected(&cluster).await;
    let ttl = Duration::from_secs(1);
    let lock = first.try_acquire("res", ttl).await.unwrap();
    assert!(second.try_acquire("res", ttl).await.unwrap_err().is_busy());

    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    assert!(!lock.is_valid(), "the holder knows its lock ran out");
    let next = second
        .acquire_with("res", Duration::from_secs(5), &patient())
        .await
        .expect("the expired lock no longer blocks");
    assert_ne!(next.value(), lock.value());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_keeps_the_lock_past_its_first_ttl() {
    let mut cluster = cluster(3);
    // A TTL of a second with its node timeout: each extension must come while the lock is valid,
    // and a slow answer must not fail it.
    let redlock = keeping_alive(&cluster).await;
    let other = manager(&cluster);
    let ttl = Duration::from_secs(1);
    let mut lock = redlock.try_acquire("res", ttl).await.unwrap();
    let first_deadline = lock.deadline();
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        lock.extend(ttl).await.expect("extension while valid");
    }
    // 1.8 s have passed: without extension the keys would be gone.
    assert!(lock.deadline() > first_deadline);
    assert!(lock.is_valid());
    assert!(other.try_acquire("res", ttl).await.unwrap_err().is_busy());
    redlock.settle().await;
    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(lock.value())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_after_expiry_fails_and_never_resurrects() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    // Long enough that a slow round leaves validity; slept through twice over.
    let ttl = Duration::from_millis(500);
    let mut lock = redlock.try_acquire("res", ttl).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let err = lock.extend(Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    assert!(!lock.is_valid());
    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res"),
            None,
            "no key was set again"
        );
    }
    // And it stays lost, even if asked again.
    assert!(lock.extend(Duration::from_secs(10)).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extending_a_lock_taken_over_on_a_majority_fails() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut lock = redlock
        .try_acquire("res", Duration::from_secs(10))
        .await
        .unwrap();
    for i in 0..2 {
        cluster.node(i).cli(&["SET", "res", "intruder"]).unwrap();
    }
    let err = lock.extend(Duration::from_secs(10)).await.unwrap_err();
    let Error::LockLost {
        failure: Some(failure),
        ..
    } = &err
    else {
        panic!("expected a failed extension round, got {err:?}");
    };
    // The round is lost once the two taken-over nodes refused; the third may not have answered.
    assert_eq!(failure.replies[0].reply, redquorum::Reply::Refused, "{err}");
    assert_eq!(failure.replies[1].reply, redquorum::Reply::Refused, "{err}");
    assert!(failure.granted() <= 1, "{err}");
    assert!(!lock.is_valid());
    assert_eq!(
        value_on(cluster.node(0), "res").as_deref(),
        Some("intruder")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releasing_with_a_wrong_value_deletes_nothing() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let lock = redlock
        .try_acquire("res", Duration::from_secs(10))
        .await
        .unwrap();
    let released = redlock.release_value("res", "not-the-value").await;
    assert_eq!(released.confirmed, 0);
    // The won round did not wait for the slowest node.
    redlock.settle().await;
    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(lock.value())
        );
    }
    let value = lock.value().to_owned();
    assert_eq!(lock.release().await.confirmed, 3);
    assert_eq!(
        redlock.release_value("res", &value).await.confirmed,
        0,
        "only once"
    );
    for i in 0..3 {
        assert_eq!(value_on(cluster.node(i), "res"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_lock_is_released_in_the_background() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let lock = redlock
        .try_acquire("res", Duration::from_secs(30))
        .await
        .unwrap();
    drop(lock);
    let node = cluster.node(0);
    assert!(
        eventually(Duration::from_secs(5), || value_on(node, "res").is_none()).await,
        "dropped lock still set long after its drop"
    );
}

#[test]
fn a_lock_dropped_outside_a_runtime_does_not_panic() {
    let cluster = cluster(1);
    let redlock = manager(&cluster);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let lock = runtime
        .block_on(redlock.try_acquire("res", Duration::from_secs(1)))
        .unwrap();
    drop(runtime);
    drop(lock); // no runtime here: logs and lets the TTL expire
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_acquisition_leaves_nothing_behind() {
    let mut cluster = cluster(3);
    // The library's default node timeout: what a stalled round costs is part of this test.
    let redlock = default_timeout_manager(&cluster);
    // Two of three stopped: the round cannot finish before we cancel it.
    cluster.node(1).pause().unwrap();
    cluster.node(2).pause().unwrap();
    let retry = patient();
    let attempt = redlock.acquire_with("res", Duration::from_secs(30), &retry);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), attempt)
            .await
            .is_err(),
        "cannot win with two of three nodes stopped"
    );
    let node = cluster.node(0);
    assert!(
        eventually(Duration::from_secs(5), || value_on(node, "res").is_none()).await,
        "the cancelled round's key was not released"
    );
    cluster.node(1).resume().unwrap();
    cluster.node(2).resume().unwrap();
}

/// An extension to a shorter TTL that is cancelled half-way (here: the nodes stalled, so the
/// caller gave up) leaves the handle's deadline no later than the shorter TTL allows: the nodes
/// may apply it (and do, once they resume), so the old, longer deadline would be a lie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shorter_extension_shortens_the_deadline() {
    let mut cluster = cluster(3);
    let redlock = redquorum::Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    redlock.connect().await;
    let mut lock = redlock
        .try_acquire("res", Duration::from_secs(20))
        .await
        .unwrap();
    for i in 0..3 {
        cluster.node(i).pause().unwrap();
    }
    let before = Instant::now();
    let cancelled = tokio::time::timeout(
        Duration::from_millis(300),
        lock.extend(Duration::from_secs(2)),
    )
    .await;
    assert!(cancelled.is_err(), "the extension was cancelled half-way");
    for i in 0..3 {
        cluster.node(i).resume().unwrap();
    }
    assert!(
        lock.deadline() <= before + Duration::from_secs(2),
        "the handle trusts the lock no longer than the shorter TTL: {:?} left",
        lock.deadline().saturating_duration_since(Instant::now())
    );
    // The stalled extension did land: the keys now expire within the shorter TTL.
    let landed = eventually(Duration::from_secs(5), || {
        (0..3).all(|i| {
            let pttl = pttl_on(cluster.node(i), "res");
            (0..=2000).contains(&pttl)
        })
    })
    .await;
    assert!(landed, "the nodes applied the shorter TTL");
}
