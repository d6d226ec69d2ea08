//! A Redlock node may be a primary with replicas behind one fixed address that moves to the new
//! primary on failover (a managed service's primary endpoint), without Sentinel: a vote counts
//! once the replicas the service keeps have it, and the server found behind the address after a
//! failover is judged by its replication history, not as a restart. Here the address is a
//! loopback proxy the test re-points, as the service would.

mod common;

use std::time::{Duration, Instant};

use common::endpoint::{Endpoint, MAX_TTL, manager};
use common::{await_replication, eventually, patient, run_id, value_on};
use redquorum::{Cause, Error, Redlock, Reply};
use redquorum_nodes::{NodeSpec, RedisNode};

const TTL: Duration = Duration::from_secs(20);

/// Waits until the receipt for `replica`'s run, written on the primary by a client that used the
/// node (`succession` invariant 5), has reached `replica`.
async fn await_receipt(replica: &RedisNode) {
    let receipt = format!("redlock-node-marker:receipt:{}", run_id(replica));
    assert!(
        eventually(Duration::from_secs(20), || value_on(replica, &receipt)
            .is_some())
        .await,
        "no receipt for the replica's run reached it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_survives_its_primary_killed_and_the_server_promoted_behind_the_address_votes_at_once()
 {
    // Two replicas, of which every vote waits for one at least: a failover that loses the
    // primary leaves the new one a replica to wait for.
    let mut endpoint = Endpoint::start(2).await;
    let url = endpoint.url(1);
    let (a, b) = (manager(&url), manager(&url));
    let held = a.acquire("invoice:1", TTL).await.expect("A holds the lock");
    // B has used the node before the failover: it saw the replica caught up.
    let before = b.acquire("warm-up", TTL).await.expect("B's first lock");
    assert!(before.release().await.cause().is_none());
    // The vote counted once every replica online had it (`endpoint` invariant 1).
    for replica in &endpoint.nodes[1..] {
        assert_eq!(
            value_on(replica, "invoice:1").as_deref(),
            Some(held.value()),
            "A's lock is on every replica"
        );
    }
    await_receipt(&endpoint.nodes[1]).await;

    endpoint.nodes[0].kill().expect("SIGKILL the primary");
    endpoint.fail_over(1, true);
    let promoted = Instant::now();

    // Every attempt by B on A's resource is refused while A's lock is valid.
    for _ in 0..5 {
        let refused = b.try_acquire("invoice:1", TTL).await;
        let Err(refused) = refused else {
            panic!("B took A's lock after the failover: {refused:?}");
        };
        assert_ne!(refused.cause(), None, "{refused}");
    }
    // A lock on another resource comes within seconds, not after max_ttl: the promoted server
    // is young and a new run at the address, and neither holds it back.
    let other = b
        .acquire_with("invoice:2", TTL, &patient())
        .await
        .expect("a lock on the new primary");
    let waited = promoted.elapsed();
    eprintln!("failover -> first lock, a client that used the node: {waited:?}");
    assert!(
        waited < Duration::from_secs(10),
        "the new primary voted only after {waited:?}"
    );
    assert!(other.release().await.cause().is_none());
    // A client that starts now trusts it by its receipt, and is refused A's lock.
    let c = manager(&url);
    let fresh = c
        .acquire_with("invoice:3", TTL, &patient())
        .await
        .expect("a new client's lock on the promoted server");
    let waited = promoted.elapsed();
    eprintln!("failover -> first lock, a client started after it: {waited:?}");
    assert!(
        waited < Duration::from_secs(15),
        "a new client waited {waited:?} for the promoted server"
    );
    assert!(fresh.release().await.cause().is_none());
    let refused = c.try_acquire("invoice:1", TTL).await;
    assert!(
        matches!(&refused, Err(e) if e.is_busy()),
        "a new client was not refused A's lock: {refused:?}"
    );
    // A still holds its lock: it extends and releases it on the new primary.
    let mut held = held;
    held.extend(TTL)
        .await
        .expect("A extends on the new primary");
    assert!(held.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vote_waits_for_the_replicas_the_service_keeps() {
    let mut endpoint = Endpoint::start(1).await;
    let redlock = manager(&endpoint.url(1));
    let first = redlock.acquire("payments", TTL).await.expect("acquired");
    assert!(first.release().await.cause().is_none());
    // The replica is gone: the primary lists none online, but the service keeps one, and a
    // write it does not have could be lost to its promotion.
    endpoint.nodes[1].kill().expect("kill the replica");
    await_replication(
        &endpoint.nodes[0],
        "the primary saw its replica go",
        |info| info.contains("connected_slaves:0"),
    )
    .await;
    for _ in 0..3 {
        let refused = redlock.try_acquire("payments", TTL).await;
        let Err(Error::NotAcquired { failure, .. }) = refused else {
            panic!("a write no replica had was counted as a vote: {refused:?}");
        };
        let reply = &failure.replies[0].reply;
        // The first vote names the replica it last saw online; later ones, which no longer
        // list it, count the replica the service keeps.
        assert!(
            matches!(reply, Reply::ServerError(why)
                if why.contains("did not acknowledge the write")
                    || why.contains("0 of the primary's 1 replicas acknowledged")),
            "{failure:?}"
        );
    }
    endpoint.nodes[1].restart().expect("the replica back");
    let lock = redlock
        .acquire_with("payments", TTL, &patient())
        .await
        .expect("acquired once the replica is back");
    assert_eq!(
        value_on(&endpoint.nodes[1], "payments").as_deref(),
        Some(lock.value()),
        "the vote reached the replica"
    );
    assert!(lock.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_primary_counts_no_vote_for_new_clients_nor_for_those_it_kept() {
    let mut endpoint = Endpoint::start(2).await;
    let url = endpoint.url(1);
    let a = manager(&url);
    let warm = a.acquire("warm-up", TTL).await.expect("A's first lock");
    assert!(warm.release().await.cause().is_none());
    await_receipt(&endpoint.nodes[1]).await;

    // The service promotes a replica (the other follows it), but the address still leads to the
    // old primary, which runs on, a primary in its own eyes, without replicas (a split brain).
    endpoint.promote(1);
    await_replication(
        &endpoint.nodes[0],
        "the old primary lost its replicas",
        |info| info.contains("connected_slaves:0"),
    )
    .await;
    // A client that meets it now reads no replica online: its writes there are no votes, since
    // the service keeps one at least (`endpoint` invariant 1).
    let d = manager(&url);
    for client in [&d, &a] {
        for _ in 0..2 {
            let refused = client.try_acquire("report", TTL).await;
            assert!(
                refused.is_err(),
                "a vote counted on a primary without its replicas: {refused:?}"
            );
        }
    }
    // The address moves; the connections open to the old primary stay open.
    endpoint.proxy.point(endpoint.nodes[1].port(), false);
    let b = manager(&url);
    let report = b
        .acquire_with("report", TTL, &patient())
        .await
        .expect("B locks on the new primary");
    // A and D reach the old primary first, or the new one: refused either way.
    for client in [&a, &d] {
        for _ in 0..3 {
            let refused = client.try_acquire("report", TTL).await;
            assert!(refused.is_err(), "B's lock taken beside it: {refused:?}");
        }
        let refused = client.try_acquire("report", TTL).await;
        assert!(
            matches!(&refused, Err(e) if e.is_busy()),
            "a client on the new primary was not refused B's lock: {refused:?}"
        );
    }
    assert!(report.release().await.cause().is_none());
    let next = a
        .acquire_with("report", TTL, &patient())
        .await
        .expect("A's turn on the new primary");
    assert_eq!(
        value_on(&endpoint.nodes[1], "report").as_deref(),
        Some(next.value()),
        "A's lock is on the new primary"
    );
    assert!(next.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_behind_the_address_that_does_not_continue_the_history_is_quarantined() {
    let endpoint = Endpoint::start(1).await;
    let url = endpoint.url(1);
    let (a, b) = (manager(&url), manager(&url));
    let held = a.acquire("ledger", TTL).await.expect("A holds the lock");
    let warm = b.acquire("warm-up", TTL).await.expect("B's first lock");
    assert!(warm.release().await.cause().is_none());
    // The address moves to a server that never replicated this history (the service replaced
    // the primary with an empty one, and gave it a replica): it has none of the locks.
    let stranger = RedisNode::start(NodeSpec::new().marked(false)).expect("an empty server");
    let port = stranger.port().to_string();
    let _its_replica = RedisNode::start(
        NodeSpec::new()
            .marked(false)
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(&port),
    )
    .expect("its replica");
    await_replication(&stranger, "the replacement's replica online", |info| {
        info.contains("state=online")
    })
    .await;
    endpoint.proxy.point(stranger.port(), true);
    for _ in 0..3 {
        let refused = b.try_acquire("ledger", TTL).await;
        let Err(refused) = refused else {
            panic!("a server without A's lock granted it: {refused:?}");
        };
        assert!(
            matches!(refused.cause(), Some(Cause::Quarantined { .. })),
            "{refused}"
        );
    }
    let c = manager(&url);
    let refused = c.try_acquire("ledger", TTL).await;
    assert!(
        matches!(&refused, Err(e) if matches!(e.cause(), Some(Cause::Quarantined { .. }))),
        "a new client was not held back: {refused:?}"
    );
    drop(held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_works_behind_the_address_beside_a_plain_node() {
    let endpoint = Endpoint::start(1).await;
    let plain = common::cluster(2);
    let mut urls = vec![endpoint.url(1)];
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

#[test]
fn a_replicated_url_without_the_replicas_it_keeps_is_refused_by_name() {
    let refused = Redlock::builder(vec!["redis+replicated://127.0.0.1:6379".to_owned()]).build();
    let Err(e) = refused else {
        panic!("a replicated node without replicas=R was accepted");
    };
    assert!(e.to_string().contains("replicas=R"), "{e}");
}
