//! Leader election: one leader at a time, terms that only grow, a standby that takes over a
//! crashed leader, and observers that see each change.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{cluster, connected, keeping_alive, patient};
use redquorum::{ConfigError, Error, Redlock, Retry};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_each_term_larger_than_the_last() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let leading = Arc::new(AtomicUsize::new(0));
    let terms = Arc::new(Mutex::new(Vec::new()));
    let mut candidates = Vec::new();
    for i in 0..4 {
        let (redlock, leading, terms) = (redlock.clone(), Arc::clone(&leading), Arc::clone(&terms));
        candidates.push(tokio::spawn(async move {
            let me = format!("candidate-{i}");
            for _ in 0..3 {
                let mut leadership = redlock
                    .campaign_with("scheduler", &me, TTL, &patient())
                    .await
                    .expect("leads within a minute");
                assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "two leaders");
                let term = leadership.fence().await.expect("a term");
                terms.lock().unwrap().push(term);
                let seen = redlock.leader("scheduler").await.expect("a leader is seen");
                assert_eq!(seen.identity, me);
                assert_eq!(seen.term, Some(term), "observers read the leader's term");
                assert_eq!(seen.value, leadership.value());
                tokio::time::sleep(Duration::from_millis(5)).await;
                leading.fetch_sub(1, Ordering::SeqCst);
                leadership.release().await.expect("resigned");
            }
        }));
    }
    for candidate in candidates {
        candidate.await.unwrap();
    }
    let terms = terms.lock().unwrap();
    assert_eq!(terms.len(), 12);
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "terms in the order of leadership: {terms:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_takes_over_a_crashed_leader_once_its_lock_runs_out() {
    let cluster = cluster(3);
    // The leader's lock of 800 ms is kept alive: any extension that fails is a loss.
    let redlock = keeping_alive(&cluster).await;
    let ttl = Duration::from_millis(800);
    let mut leader = redlock.campaign("primary", "a", ttl).await.unwrap();
    let standby = {
        let redlock = redlock.clone();
        let forever = Retry::forever()
            .delay(Duration::from_millis(100))
            .max_wait(Duration::from_secs(30));
        tokio::spawn(async move { redlock.campaign_with("primary", "b", ttl, &forever).await })
    };
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(leader.is_valid(), "kept alive past its first TTL");
    let first_term = leader.fence().await.unwrap();
    // The leader crashes: it stops extending and never resigns.
    let crashed = leader.detach().await;
    let crash = Instant::now();
    let mut successor = standby.await.unwrap().expect("the standby takes over");
    let took = crash.elapsed();
    assert!(
        Instant::now() >= crashed.deadline(),
        "no successor before the crashed leader's validity ended"
    );
    assert!(successor.fence().await.unwrap() > first_term);
    let seen = redlock.leader("primary").await.unwrap();
    assert_eq!(seen.identity, "b");
    // Its TTL plus a retry delay, with room for a loaded machine.
    assert!(took < Duration::from_secs(10), "took over after {took:?}");
    successor.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_every_change_of_leader() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let observer = connected(&cluster).await;
    let mut watch = observer.observe("db-primary");
    assert_eq!(watch.changed().await, None, "nobody leads yet");

    let mut a = redlock.campaign("db-primary", "node-a", TTL).await.unwrap();
    let seen = watch.changed().await.expect("node-a leads");
    assert_eq!(
        (seen.identity.as_str(), seen.term),
        ("node-a", a.fence().await.ok())
    );

    let first_term = redquorum::LockInfo::fence(&a);
    let resigned = Instant::now();
    a.release().await.unwrap();
    assert_eq!(watch.changed().await, None, "node-a resigned");
    // Woken by the key's removal, not by the one-second poll alone (generous bound).
    assert!(resigned.elapsed() < Duration::from_secs(5));

    let b = redlock.campaign("db-primary", "node-b", TTL).await.unwrap();
    let seen = watch.changed().await.expect("node-b leads");
    assert_eq!(seen.identity, "node-b");
    assert!(seen.term > first_term);
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_needs_fencing_and_a_bounded_identity() {
    let servers = ["redis://127.0.0.1:1"];
    let unfenced = Redlock::builder(servers).fencing(false).build().unwrap();
    let err = unfenced.campaign("e", "me", TTL).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Config(ConfigError::InvalidSetting {
                setting: "fencing",
                ..
            })
        ),
        "{err}"
    );
    let fenced = Redlock::builder(servers).build().unwrap();
    let long = "x".repeat(redquorum::defaults::MAX_IDENTITY + 1);
    let err = fenced.campaign("e", &long, TTL).await.unwrap_err();
    assert!(err.to_string().contains("identity"), "{err}");
}
