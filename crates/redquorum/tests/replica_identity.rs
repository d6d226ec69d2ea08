//! Adversarial tests of Sentinel nodes where the replica that acknowledges a vote is not the one
//! the sentinels then promote: each tries to get one lock granted to two holders at once (A
//! holds it, within its validity, when a client started after the failover, B, is granted it
//! too).
//!
//! `WAIT n` says how many replicas acknowledged a write, not which; the primary's `INFO
//! replication` names its replicas by the address each announces. Both schedules cut the
//! replication link of the replica the sentinels will promote (R1) without stopping it: its ACL
//! user on the primary is switched off and its connection killed (`ACL SETUSER u1 off`,
//! `CLIENT KILL USER u1`), so it cannot come back, answers the sentinels' pings, and stays a
//! candidate for ten `down-after-milliseconds`. Another replica (R2) is linked meanwhile:
//!
//! - one that can never be promoted (`replica-priority 0`), linked again after the cut while A
//!   waits for the lock;
//! - one that announces R1's address (`replica-announce-port`), so that the primary lists one
//!   replica at R1's address, and it is R2.
//!
//! A's lock is written on the primary and acknowledged by R2 only. The primary is then killed
//! (SIGKILL), the sentinels promote R1, which never had A's lock, and B asks for it.

mod common;

use std::time::{Duration, Instant};

use common::value_on;
use redquorum::{Error, Lock, Redlock, Retry};
use redquorum_nodes::{NodeSpec, Persistence, RedisNode, SentinelGroup};

/// The managers' `max_ttl`: short, so that a client started after the failover, which holds
/// the promoted replica to its uptime when it shows no receipt, is granted within the test.
const MAX_TTL: Duration = Duration::from_secs(20);
/// A's lock: as long as `max_ttl` allows, so that it is still valid when B is answered.
const A_TTL: Duration = Duration::from_secs(20);
const B_TTL: Duration = Duration::from_secs(5);
/// How long B keeps asking after the failover: about A's validity left then (17 s measured).
const B_WAIT: Duration = Duration::from_secs(18);
/// The resource both ask for.
const RESOURCE: &str = "invoice:E";
/// How long R1 has been up when its link is cut, when B is to wait for its uptime: A's lock
/// outlives B's wait by about this much.
const AGE: u64 = 8;

/// A manager of the Sentinel node at `url`. The patient node timeout gives a vote's `WAIT` a
/// second (half of it): the one vote of these schedules that R2 acknowledges must not be lost
/// to a slow machine.
fn manager(url: &str) -> Redlock {
    Redlock::builder(vec![url.to_owned()])
        .max_ttl(MAX_TTL)
        .node_timeout(common::PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid configuration")
}

/// Fails the test when `second` is a grant of a resource `first` still holds.
fn assert_not_granted_twice(first: &Lock, second: &Result<Lock, Error>, who: &str) {
    if let Ok(second) = second {
        assert!(
            !first.is_valid(),
            "DOUBLE GRANT: {who} holds {:?} (value {}) while the first holder's lock (value {}) \
             is still valid for {:?}",
            second.resource(),
            second.value(),
            first.value(),
            first.remaining()
        );
    }
}

/// The data servers' spec: durable (the first primary is trusted from the start), and the ACL
/// users the replicas replicate as (`u1`, `u2`), on every data server so that they can follow
/// whichever is promoted. The data clients and the sentinels use the default user.
fn data_spec() -> NodeSpec {
    let mut spec = NodeSpec::new().persistence(Persistence::AofAlways);
    for (user, password) in [("u1", "pw1"), ("u2", "pw2")] {
        // What a replica's user needs (redis.io, ACL: "+psync +replconf +ping").
        for arg in [
            "--user",
            user,
            "on",
            &format!(">{password}"),
            "+psync",
            "+replconf",
            "+ping",
        ] {
            spec = spec.arg(arg);
        }
    }
    spec
}

/// `spec`, replicating as `user` with `priority`.
fn replica_as(spec: NodeSpec, user: &str, password: &str, priority: u8) -> NodeSpec {
    spec.arg("--masteruser")
        .arg(user)
        .arg("--masterauth")
        .arg(password)
        .arg("--replica-priority")
        .arg(priority.to_string())
}

/// `field` of `node`'s `INFO section`.
fn info_of(node: &RedisNode, section: &str, field: &str) -> Option<String> {
    let info = node.cli(&["INFO", section]).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .map(|v| v.trim().to_owned())
}

/// The ports of the replicas `primary` lists online (`slaveN:…,state=online`), as announced.
fn online_ports(primary: &RedisNode) -> Vec<u16> {
    let info = primary.cli(&["INFO", "replication"]).unwrap_or_default();
    info.lines()
        .filter(|l| l.starts_with("slave") && l.contains("state=online"))
        .filter_map(|l| {
            l.split([':', ','])
                .find_map(|kv| kv.strip_prefix("port="))
                .and_then(|p| p.trim().parse().ok())
        })
        .collect()
}

/// Waits (bounded: `limit`) until `check` holds; fails the test naming `what` otherwise.
fn await_that(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "not within {limit:?}: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Cuts the replication link of the replica that replicates as `user` on `primary`: the user
/// is switched off (the replica cannot authenticate again) and its connection killed.
fn cut(primary: &RedisNode, user: &str) {
    primary
        .cli(&["ACL", "SETUSER", user, "off"])
        .expect("ACL SETUSER off");
    primary
        .cli(&["CLIENT", "KILL", "USER", user])
        .expect("CLIENT KILL USER");
}

/// Waits until `node` holds the receipt for its own run (written on the primary by a client
/// that read the sentinels' view, and replicated): a client started after a failover to it
/// then lets it vote at once.
fn await_own_receipt(node: &RedisNode) {
    let receipt = format!("redlock-node-marker:receipt:{}", common::run_id(node));
    await_that(
        Duration::from_secs(10),
        "the replica holds the receipt for its run",
        || value_on(node, &receipt).is_some(),
    );
}

/// Waits until `node` has been up for `secs` seconds. A client started after a failover to a
/// replica without a receipt waits until the replica has been up for `max_ttl`: B's wait ends
/// then, and A's lock, of a TTL of `max_ttl`, outlives it by about the replica's uptime when A
/// got it.
fn await_uptime(node: &RedisNode, secs: u64) {
    await_that(
        Duration::from_secs(secs + 10),
        "the replica's uptime",
        || {
            info_of(node, "server", "uptime_in_seconds")
                .and_then(|u| u.parse::<u64>().ok())
                .is_some_and(|up| up >= secs)
        },
    );
}

/// The ports of the replicas sentinel 0 lists.
fn sentinels_replica_ports(group: &mut SentinelGroup) -> Vec<String> {
    let reply = group
        .sentinel(0)
        .cli(&["SENTINEL", "REPLICAS", SentinelGroup::SERVICE])
        .unwrap_or_default();
    let lines: Vec<&str> = reply.lines().collect();
    lines
        .windows(2)
        .filter(|pair| pair[0] == "port")
        .map(|pair| pair[1].to_owned())
        .collect()
}

/// Warms `redlock` up on the node: it sees the primary and its replicas online.
async fn warm(redlock: &Redlock) {
    let lock = redlock
        .acquire_with("warm-a", Duration::from_secs(5), &common::patient())
        .await
        .expect("a warm-up lock");
    assert!(lock.release().await.cause().is_none());
}

/// Kills the primary (data node 0) and waits for the sentinels to promote data node 1, R1.
fn kill_primary_and_await_r1(group: &mut SentinelGroup) {
    let link_down = info_of(
        group.data_node(1),
        "replication",
        "master_link_down_since_seconds",
    );
    group.data_node(0).kill().expect("SIGKILL the primary");
    let killed = Instant::now();
    let promoted = group
        .await_new_primary(0)
        .expect("the sentinels promote a replica");
    eprintln!(
        "promoted data node {promoted} {:?} after the kill (its link had been down for {link_down:?} s \
         at the kill)",
        killed.elapsed()
    );
    assert_eq!(promoted, 1, "the sentinels promoted R1, the only candidate");
}

/// What the promoted R1 holds and how old it is, for the report.
fn describe_promoted(group: &mut SentinelGroup, held: &Lock) {
    let r1 = group.data_node(1);
    let receipt = format!("redlock-node-marker:receipt:{}", common::run_id(r1));
    eprintln!(
        "promoted R1: A's lock there: {:?}; its receipt: {}; uptime {:?} s; A's lock valid for {:?}",
        value_on(r1, RESOURCE),
        value_on(r1, &receipt).is_some(),
        info_of(r1, "server", "uptime_in_seconds"),
        held.remaining()
    );
}

/// A asks for the resource (TTL [`A_TTL`]) until it is granted, or until six seconds after R1's
/// link was cut at `cut_at`: well within R1's candidacy (ten down-after-milliseconds of link
/// down, as the sentinels measure it at the failover). Returns the lock and the attempts it
/// took; `None`, said on stderr, when A was refused throughout: then nothing was granted on
/// R2's acknowledgement alone, and nothing is held twice. A refusal must then name R1, at
/// `r1_port`: the replica the vote did not reach (`coverage` invariants 1 and 2).
async fn a_asks(a: &Redlock, cut_at: Instant, r1_port: u16) -> Option<(Lock, u32)> {
    let until = cut_at + Duration::from_secs(6);
    let mut attempts = 0;
    loop {
        attempts += 1;
        match a.try_acquire(RESOURCE, A_TTL).await {
            Ok(lock) => return Some((lock, attempts)),
            Err(e) if Instant::now() >= until => {
                eprintln!(
                    "A was refused {attempts} times, until {:?} after the cut (the last \
                     refusal: {e})",
                    cut_at.elapsed()
                );
                assert!(
                    e.to_string().contains(&format!(":{r1_port} ")),
                    "A's refusal does not name R1 (port {r1_port}), the replica its vote did \
                     not reach: {e}"
                );
                return None;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// B, a client started after the failover, asks for A's resource for up to [`B_WAIT`]: it must
/// not be granted while A's lock is valid.
async fn b_must_not_be_granted_while_a_holds(url: &str, held: &Lock) {
    let b = manager(url);
    let asked = Instant::now();
    let by_b = b
        .acquire_with(
            RESOURCE,
            B_TTL,
            &Retry::forever()
                .delay(Duration::from_millis(100))
                .max_wait(B_WAIT),
        )
        .await;
    eprintln!(
        "B after {:?}: {:?}; A's lock valid for {:?}",
        asked.elapsed(),
        by_b.as_ref().map(|l| l.value().to_owned()),
        held.remaining()
    );
    assert_not_granted_twice(held, &by_b, "B, a client started after the failover,");
}

/// The schedule of `a_replica_that_can_never_be_promoted_…`: A's manager made before the cut
/// and used (`warm`: it wrote the receipts that let a new client trust R1 at once), or made
/// after it.
async fn priority_zero_replica_acknowledges_alone(warm_a: bool) {
    // P, R1 (priority 100, as u1), R2 (priority 0, as u2), three sentinels (down-after 1 s).
    let mut group = SentinelGroup::start_with(2, 3, data_spec(), |r, spec| match r {
        1 => replica_as(spec, "u1", "pw1", 100),
        _ => replica_as(spec, "u2", "pw2", 0),
    })
    .expect("a primary, two replicas, three sentinels");
    let url = group.url();
    let r2_port = group.data_node(2).port();
    let early = if warm_a {
        let a = manager(&url);
        warm(&a).await;
        tokio::task::block_in_place(|| {
            await_own_receipt(group.data_node(1));
            await_own_receipt(group.data_node(2));
        });
        Some(a)
    } else {
        tokio::task::block_in_place(|| await_uptime(group.data_node(1), AGE));
        None
    };

    // Both links cut: the primary has no replica, and R1 is still a candidate.
    cut(group.data_node(0), "u1");
    cut(group.data_node(0), "u2");
    let cut_at = Instant::now();
    tokio::task::block_in_place(|| {
        await_that(Duration::from_secs(10), "no replica linked", || {
            info_of(group.data_node(0), "replication", "connected_slaves").as_deref() == Some("0")
        });
    });
    let a = early.unwrap_or_else(|| manager(&url));
    for attempt in 1..=2 {
        let refused = a.try_acquire(RESOURCE, A_TTL).await;
        eprintln!(
            "A's attempt {attempt} with no replica linked: {:?}",
            refused.as_ref().map(|l| l.value().to_owned())
        );
        assert!(
            refused.is_err(),
            "A was granted {RESOURCE} while no replica was linked (R1, a candidate, cannot have it)"
        );
    }

    // R2's link back: the primary lists it online; R1's stays cut.
    group
        .data_node(0)
        .cli(&["ACL", "SETUSER", "u2", "on"])
        .expect("ACL SETUSER u2 on");
    tokio::task::block_in_place(|| {
        await_that(Duration::from_secs(10), "R2 online at the primary", || {
            online_ports(group.data_node(0)) == [r2_port]
        });
    });
    eprintln!("R2 online {:?} after the cut", cut_at.elapsed());
    let r1_port = group.data_node(1).port();
    let Some((held, attempts)) = a_asks(&a, cut_at, r1_port).await else {
        return;
    };
    eprintln!(
        "A granted {RESOURCE} on attempt {attempts} after R2 came back, {:?} after the cut; on \
         R1: {:?}, on R2: {:?}",
        cut_at.elapsed(),
        value_on(group.data_node(1), RESOURCE),
        value_on(group.data_node(2), RESOURCE)
    );

    // The primary dies; R1, link still cut, is the only replica the sentinels may promote.
    tokio::task::block_in_place(|| kill_primary_and_await_r1(&mut group));
    describe_promoted(&mut group, &held);
    b_must_not_be_granted_while_a_holds(&url, &held).await;
}

/// R2 (`replica-priority 0`) acknowledges A's lock in place of R1, whose link is cut but which
/// the sentinels may promote: the lock must not count, since the sentinels then promote R1,
/// without it. A's manager is made after the cut, and B waits for R1's uptime (no receipt).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_can_never_be_promoted_does_not_acknowledge_in_place_of_one_that_can() {
    priority_zero_replica_acknowledges_alone(false).await;
}

/// The same, with A's manager used from the start (it wrote the receipts for both replicas'
/// runs, which they hold): B lets the promoted R1 vote at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_can_never_be_promoted_does_not_acknowledge_for_a_manager_that_watched_from_the_start()
 {
    priority_zero_replica_acknowledges_alone(true).await;
}

/// R2 announces R1's address (`replica-announce-port`): the sentinels, which learn replicas
/// from the primary's listing, know R1 only, and the primary lists both at R1's address. With
/// R1's link cut, the primary lists one replica online at R1's address, and it is R2: A's lock,
/// acknowledged by R2 alone, must not count, since the sentinels then promote R1, without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_announcing_one_address_do_not_acknowledge_for_each_other() {
    // P, R1 (as u1), three sentinels; R2 started beside them, as u2, announcing R1's port from
    // its start: the sentinels never learn its own address, so its priority does not matter.
    // (Known there with priority 100, it would be a candidate of its own that votes wait for.)
    let mut group = SentinelGroup::start_with(1, 3, data_spec(), |_, spec| {
        replica_as(spec, "u1", "pw1", 100)
    })
    .expect("a primary, a replica, three sentinels");
    let url = group.url();
    let primary_port = group.data_node(0).port().to_string();
    let r1_port = group.data_node(1).port();
    let r2 = RedisNode::start(replica_as(
        data_spec()
            .marked(false)
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(&primary_port)
            .arg("--replica-announce-port")
            .arg(r1_port.to_string()),
        "u2",
        "pw2",
        100,
    ))
    .expect("R2");
    tokio::task::block_in_place(|| {
        await_that(
            Duration::from_secs(15),
            "both replicas online, at R1's address",
            || online_ports(group.data_node(0)) == [r1_port, r1_port],
        );
        await_uptime(group.data_node(1), AGE);
    });
    eprintln!(
        "the sentinels list replicas at ports {:?} (R1 is {r1_port}, R2 {})",
        sentinels_replica_ports(&mut group),
        r2.port()
    );

    // R1's link cut: the primary lists one replica online at R1's address, R2.
    cut(group.data_node(0), "u1");
    let cut_at = Instant::now();
    tokio::task::block_in_place(|| {
        await_that(
            Duration::from_secs(10),
            "one replica online at R1's address",
            || online_ports(group.data_node(0)) == [r1_port],
        );
    });
    eprintln!(
        "R1's link: {:?}; R2's: {:?}",
        info_of(group.data_node(1), "replication", "master_link_status"),
        info_of(&r2, "replication", "master_link_status")
    );

    // A's manager is made after the cut: B waits for R1's uptime (no receipt for its run).
    let a = manager(&url);
    let Some((held, attempts)) = a_asks(&a, cut_at, r1_port).await else {
        return;
    };
    eprintln!(
        "A granted {RESOURCE} on attempt {attempts}, {:?} after the cut; on R1: {:?}, on R2: {:?}",
        cut_at.elapsed(),
        value_on(group.data_node(1), RESOURCE),
        value_on(&r2, RESOURCE)
    );

    tokio::task::block_in_place(|| kill_primary_and_await_r1(&mut group));
    describe_promoted(&mut group, &held);
    b_must_not_be_granted_while_a_holds(&url, &held).await;
    drop(r2);
}
