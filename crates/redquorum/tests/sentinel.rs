//! A Redlock node may be a primary with replicas behind Redis Sentinel: requests go to the
//! primary a majority of the sentinels name, a vote counts once the replicas have it, and a
//! failover neither gives a lock twice nor, when the promoted replica was online throughout,
//! costs the restart quarantine's wait.

mod common;

use std::time::{Duration, Instant};

use common::{eventually, patient, run_id, value_on};
use redquorum::{Cause, Error, HoldOptions, Mark, QuarantineReason, Redlock, Reply, Vouch};
use redquorum_nodes::{NodeSpec, SentinelGroup};

const MAX_TTL: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(20);

fn manager(url: &str) -> Redlock {
    Redlock::builder(vec![url.to_owned()])
        .max_ttl(MAX_TTL)
        .build()
        .expect("valid configuration")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_survives_its_primary_killed_and_the_promoted_replica_votes_at_once() {
    let mut group = common::sentinel_group(1);
    let url = group.url();
    let (a, b) = (manager(&url), manager(&url));
    let held = a.acquire("invoice:1", TTL).await.expect("A holds the lock");
    // B has used the node before the failover: it saw the replica online.
    let before = b.acquire("warm-up", TTL).await.expect("B's first lock");
    assert!(before.release().await.cause().is_none());
    // The vote counted once the replica had it (succession invariant 1).
    assert_eq!(
        value_on(group.data_node(1), "invoice:1").as_deref(),
        Some(held.value()),
        "A's lock is on the replica"
    );

    group.data_node(0).kill().expect("SIGKILL the primary");
    assert_eq!(group.await_new_primary(0).expect("a failover"), 1);
    let promoted = Instant::now();

    // Every attempt by B on A's resource is refused while A's lock is valid.
    let refused = b.try_acquire("invoice:1", TTL).await;
    let Err(refused) = refused else {
        panic!("B took A's lock after the failover: {refused:?}");
    };
    assert_ne!(refused.cause(), None, "{refused}");
    // And a lock on another resource comes within seconds, not after max_ttl.
    let other = b
        .acquire_with("invoice:2", TTL, &patient())
        .await
        .expect("a lock on the new primary");
    let waited = promoted.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "the new primary voted only after {waited:?}"
    );
    assert!(other.release().await.cause().is_none());
    // A client that starts now has nothing to judge the new primary by but the ordinary rules:
    // promoted seconds after it started, it is held to its uptime (succession invariant 3).
    // Refused either way, and never granted A's lock.
    let c = manager(&url);
    let Err(refused) = c.try_acquire("invoice:1", TTL).await else {
        panic!("a new client took A's lock after the failover");
    };
    assert!(
        matches!(
            refused.cause(),
            Some(Cause::Busy | Cause::Quarantined { .. })
        ),
        "{refused}"
    );
    // A still holds its lock: it extends and releases it on the new primary.
    let mut held = held;
    held.extend(TTL)
        .await
        .expect("A extends on the new primary");
    assert!(held.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_replica_did_not_acknowledge_is_not_a_vote() {
    let mut group = common::sentinel_group(1);
    let redlock = manager(&group.url());
    let first = redlock.acquire("payments", TTL).await.expect("acquired");
    assert!(first.release().await.cause().is_none());
    // The replica stops answering; the primary still lists it online.
    group.data_node(1).pause().expect("SIGSTOP the replica");
    let refused = redlock.try_acquire("payments", TTL).await;
    group.data_node(1).resume().expect("SIGCONT the replica");
    let Err(Error::NotAcquired { failure, .. }) = refused else {
        panic!("a write no replica had was counted as a vote: {refused:?}");
    };
    let reply = &failure.replies[0].reply;
    assert!(
        matches!(reply, Reply::Timeout)
            || matches!(reply, Reply::ServerError(why) if why.contains("did not acknowledge the write")),
        "{failure:?}"
    );
    let lock = redlock
        .acquire_with("payments", TTL, &patient())
        .await
        .expect("acquired once the replica answers again");
    assert!(lock.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_was_away_is_quarantined_when_promoted() {
    let mut group = common::sentinel_group(1);
    let redlock = manager(&group.url());
    let first = redlock.acquire("ledger", TTL).await.expect("acquired");
    assert!(first.release().await.cause().is_none());
    // The replica restarts: the primary no longer lists it online, and votes counted while it
    // was away may be missing on it (succession invariant 2).
    group.data_node(1).kill().expect("kill the replica");
    let away = redlock
        .acquire_with("ledger", TTL, &patient())
        .await
        .expect("a lock while the replica is away");
    assert!(away.release().await.cause().is_none());
    group.data_node(1).restart().expect("the replica back");
    assert_eq!(group.failover().expect("a failover to it"), 1);

    // Never granted; refused for its quarantine once the new primary answers in time (its first
    // health check may take longer than the node timeout on a loaded machine) and its votes are
    // acknowledged (the old primary, a primary still until the sentinels make it a replica, up
    // to about 10 s, is a candidate they could promote, and every vote waits for it).
    let mut last = None;
    for _ in 0..300 {
        let refused = redlock.try_acquire("ledger", TTL).await;
        let Err(Error::NotAcquired { failure, .. }) = refused else {
            panic!("a replica that was away voted at once after its promotion: {refused:?}");
        };
        let reply = failure.replies[0].reply.clone();
        let settling = match &reply {
            Reply::Timeout | Reply::Unreachable(_) => true,
            Reply::ServerError(why) => why.contains("acknowledged"),
            _ => false,
        };
        if !settling {
            last = Some(reply);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        matches!(&last, Some(Reply::Quarantined(q)) if q.reason == QuarantineReason::Promoted),
        "{last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinels_that_do_not_agree_give_no_vote() {
    let mut group = common::sentinel_group(1);
    let redlock = manager(&group.url());
    // Two of three sentinels gone: the one left names the primary, but alone.
    group.sentinel(1).kill().expect("kill a sentinel");
    group.sentinel(2).kill().expect("kill a sentinel");
    let refused = redlock.try_acquire("orders", TTL).await;
    let Err(Error::NotAcquired { failure, .. }) = refused else {
        panic!("one sentinel of three named a primary that voted: {refused:?}");
    };
    assert!(
        matches!(&failure.replies[0].reply, Reply::Unreachable(why) if why.contains("2 of the 3 sentinels")),
        "{failure:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_on_a_sentinel_node_beside_a_plain_one() {
    let group = common::sentinel_group(1);
    let plain = common::cluster(2);
    let mut urls = vec![group.url()];
    urls.extend(plain.urls());
    let build = || {
        Redlock::builder(urls.clone())
            .max_ttl(MAX_TTL)
            .fence_on_acquire(true)
            .lock_delay(Duration::from_secs(1))
            .fair(true)
            .build()
            .expect("valid configuration")
    };
    common::every_primitive_keeps_its_promise(build, TTL).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_starts_after_the_failover_trusts_a_promoted_replica_that_shows_its_receipt()
{
    let mut group = common::sentinel_group(1);
    let url = group.url();
    let a = manager(&url);
    let held = a.acquire("invoice:1", TTL).await.expect("A holds the lock");
    // A client that uses the node writes a receipt for the replica's run on the primary, once
    // the sentinels list the run; the replica has it by replication (succession invariant 5).
    let receipt = format!("redlock-node-marker:receipt:{}", run_id(group.data_node(1)));
    let replica = group.data_node(1);
    assert!(
        eventually(Duration::from_secs(20), || value_on(replica, &receipt)
            .is_some())
        .await,
        "no receipt for the replica's run reached it"
    );

    group.data_node(0).kill().expect("SIGKILL the primary");
    assert_eq!(group.await_new_primary(0).expect("a failover"), 1);
    let promoted = Instant::now();
    // The replica was promoted seconds after it started: without its receipt a new client would
    // hold it to its uptime. With it, the new client votes as soon as the sentinels name it.
    let c = manager(&url);
    let other = c
        .acquire_with("invoice:2", TTL, &patient())
        .await
        .expect("a new client's lock on the promoted replica");
    let waited = promoted.elapsed();
    assert!(
        waited < Duration::from_secs(10),
        "a new client waited {waited:?} for the promoted replica"
    );
    // And A's lock, which the replica acknowledged, is still A's.
    let refused = c.try_acquire("invoice:1", TTL).await;
    assert!(
        matches!(&refused, Err(e) if e.is_busy()),
        "a new client was not refused A's lock: {refused:?}"
    );
    assert!(other.release().await.cause().is_none());
    assert!(held.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receipt_written_under_another_history_vouches_for_nothing() {
    let mut group = common::sentinel_group(1);
    let url = group.url();
    let a = manager(&url);
    let held = a.acquire("invoice:1", TTL).await.expect("A holds the lock");
    let replica = run_id(group.data_node(1));
    // A receipt for the replica's run that names a history it was never promoted from (a
    // forged or stale one): the new client must hold it to its uptime as before.
    group
        .data_node(0)
        .cli(&[
            "SET",
            &format!("redlock-node-marker:receipt:{replica}"),
            "0123456789abcdef0123456789abcdef01234567",
        ])
        .expect("SET");
    // Written after any receipt of A's: wait until A's client could no longer overwrite it (it
    // writes each run's once) and it reached the replica.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let key = format!("redlock-node-marker:receipt:{replica}");
    let on_replica = value_on(group.data_node(1), &key);
    assert_eq!(
        on_replica.as_deref(),
        Some("0123456789abcdef0123456789abcdef01234567")
    );
    group.data_node(0).kill().expect("SIGKILL the primary");
    assert_eq!(group.await_new_primary(0).expect("a failover"), 1);
    let c = manager(&url);
    let mut quarantined = false;
    for _ in 0..100 {
        match c.try_acquire("invoice:2", TTL).await {
            Ok(lock) => panic!(
                "a new client trusted a young promoted replica on a receipt of another history: \
                 {lock:?}"
            ),
            Err(e) if matches!(e.cause(), Some(Cause::Quarantined { .. })) => {
                quarantined = true;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert!(quarantined, "the promoted replica was never judged");
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_lock_lives_through_a_failover() {
    let mut group = common::sentinel_group(1);
    let url = group.url();
    let a = manager(&url);
    // Extended every second: the failover (about 2 s) refuses some extensions.
    let ttl = Duration::from_secs(3);
    let guard = a
        .acquire("job", ttl)
        .await
        .expect("A holds the lock")
        .keep_alive_with(ttl, HoldOptions::new().interval(Duration::from_secs(1)));
    group.data_node(0).kill().expect("SIGKILL the primary");
    assert_eq!(group.await_new_primary(0).expect("a failover"), 1);
    // Well past the lock's first validity: kept alive on the promoted replica, never lost, and
    // never anybody else's meanwhile (hold invariant 9).
    let b = manager(&url);
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        assert!(
            !guard.is_lost(),
            "the kept-alive lock was lost in the failover: {:?}",
            guard.loss_reason()
        );
        if let Ok(lock) = b.try_acquire("job", ttl).await {
            panic!("B took the kept-alive lock during the failover: {lock:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(guard.extensions() >= 3, "{} extensions", guard.extensions());
    let released = guard.release().await.expect("released, not lost");
    assert!(released.cause().is_none(), "{released:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_marks_a_new_sentinel_node_on_its_primary() {
    let group = SentinelGroup::start(1, 3, NodeSpec::new().marked(false)).expect("a group");
    let redlock = manager(&group.url());
    let marks = redlock.mark_nodes(Vouch::BrandNew).await;
    assert_eq!(marks.len(), 1);
    assert!(marks[0].1.is_marked(), "{:?}", marks[0]);
    assert!(
        matches!(marks[0].1, Mark::Written | Mark::Vouched),
        "{:?}",
        marks[0]
    );
    // Votes at once, without the first-sight quarantine (once the replica has synchronised).
    let lock = redlock
        .acquire_with("first", TTL, &patient())
        .await
        .expect("a lock on a marked new Sentinel node");
    assert!(lock.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_sentinel_node_is_woken_by_the_release_on_the_primary() {
    let mut group = common::sentinel_group(1);
    let url = group.url();
    let (holder, waiter) = (manager(&url), manager(&url));
    let lock = holder
        .acquire("wake", TTL)
        .await
        .expect("the holder's lock");
    // A poll delay no test waits for: only a notification can wake it in time.
    let retry = redquorum::Retry::forever().delay(Duration::from_secs(60));
    let waiting = tokio::spawn(async move { waiter.acquire_with("wake", TTL, &retry).await });
    let primary = group.data_node(0);
    let watching = || {
        primary
            .cli(&["CLIENT", "LIST"])
            .is_ok_and(|list| list.lines().any(common::is_watching))
    };
    assert!(
        eventually(Duration::from_secs(20), watching).await,
        "the waiter never watched the lock on the primary"
    );
    assert!(!waiting.is_finished(), "acquired a held lock");
    assert!(lock.release().await.cause().is_none());
    let woken = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken by the release, not by its 60 s poll")
        .expect("the waiter's task")
        .expect("the waiter's lock");
    assert!(woken.is_valid());
}
