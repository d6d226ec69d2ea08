//! Semaphores: at most `permits` holders at a time, each permit a lock of its own (kept alive,
//! extended, released and fenced like one), and the schedule that breaks a semaphore built on a
//! per-node count with a majority quorum.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{PATIENT_NODE_TIMEOUT, cluster, connected, keeping_alive, patient, value_on};
use redquorum::{Error, Redlock, Retry};

const TTL: Duration = Duration::from_secs(10);

/// A loopback address where nothing listens: a node that this client cannot reach.
fn unreachable_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("its address").port();
    drop(listener);
    format!("redis://127.0.0.1:{port}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_holders_than_permits_however_many_ask() {
    const PERMITS: usize = 3;
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    // Which task holds each permit right now: a permit is never held twice.
    let owners = Arc::new(Mutex::new(HashMap::<u32, usize>::new()));
    let mut tasks = Vec::new();
    for task in 0..12 {
        let (redlock, holding, most, owners) = (
            redlock.clone(),
            Arc::clone(&holding),
            Arc::clone(&most),
            Arc::clone(&owners),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..15 {
                let lock = redlock
                    .acquire_permit_with("jobs", PERMITS as u32, TTL, &patient())
                    .await
                    .expect("a permit within a minute");
                let permit = lock.permit().expect("a permit's index");
                assert!((permit as usize) < PERMITS, "permit {permit}");
                let previous = owners.lock().unwrap().insert(permit, task);
                assert_eq!(previous, None, "permit {permit} held twice");
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= PERMITS, "{now} holders of {PERMITS} permits");
                tokio::time::sleep(Duration::from_millis(3)).await;
                assert!(lock.is_valid());
                holding.fetch_sub(1, Ordering::SeqCst);
                owners.lock().unwrap().remove(&permit);
                let released = lock.release().await;
                assert_eq!(released.cause(), None, "{released:?}");
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    // The semaphore really let several in at once: it is not a mutex in disguise.
    assert_eq!(most.load(Ordering::SeqCst), PERMITS);
}

/// N = 5, k = 2, and three clients that each reach three nodes: `{1,2,3}`, `{3,4,5}`,
/// `{1,2,4}`. A semaphore that keeps a count per node and counts any node with room as a vote
/// gives all three a majority (`docs/primitives.md`'s *Semaphores*); permits as lock keys give
/// two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_per_node_gives_three_holders_of_two_permits_and_permit_keys_do_not() {
    let mut cluster = cluster(5);
    let reach: [&[usize]; 3] = [&[0, 1, 2], &[2, 3, 4], &[0, 1, 3]];

    // The counting variant, run by hand: a node grants while fewer than 2 holders are on it.
    const COUNTING: &str = "if redis.call('SCARD', KEYS[1]) < 2 then \
                            redis.call('SADD', KEYS[1], ARGV[1]) return 1 end return 0";
    let mut counted_holders = 0;
    for (client, nodes) in reach.iter().enumerate() {
        let holder = format!("client-{client}");
        let grants = nodes
            .iter()
            .filter(|&&i| {
                let reply = cluster
                    .node(i)
                    .cli(&["EVAL", COUNTING, "1", "counted", &holder]);
                reply.expect("EVAL") == "1"
            })
            .count();
        if grants >= 3 {
            counted_holders += 1;
        }
    }
    assert_eq!(
        counted_holders, 3,
        "the counting variant lets 3 hold 2 permits"
    );

    // The same reachability for our semaphore: each client's manager has all five nodes, two
    // of which it cannot reach.
    let urls = cluster.urls();
    let mut holders = Vec::new();
    for nodes in reach {
        let list: Vec<String> = (0..5)
            .map(|i| {
                if nodes.contains(&i) {
                    urls[i].clone()
                } else {
                    unreachable_url()
                }
            })
            .collect();
        let redlock = Redlock::builder(list)
            .node_timeout(PATIENT_NODE_TIMEOUT)
            .build()
            .unwrap();
        match redlock.try_acquire_permit("sem", 2, TTL).await {
            Ok(lock) => holders.push(lock),
            Err(e) => assert!(e.is_busy(), "{e}"),
        }
    }
    // Deterministic: the first takes a permit on {1,2,3}; the second finds it held on 3, so
    // only the other permit can win on {3,4,5}; the third finds one held on 1 and 2, the other
    // on 4.
    assert_eq!(holders.len(), 2, "two permits, two holders");
    assert_ne!(holders[0].permit(), holders[1].permit());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_a_lock_that_is_fenced_kept_alive_and_released() {
    let cluster = cluster(3);
    // A short TTL of a second, with its node timeout: any extension that fails is a loss.
    let redlock = keeping_alive(&cluster).await;
    let short = Duration::from_secs(1);
    let mut first = redlock.try_acquire_permit("pool", 2, short).await.unwrap();
    let mut second = redlock.try_acquire_permit("pool", 2, TTL).await.unwrap();
    // The won rounds did not wait for the slowest node.
    redlock.settle().await;
    let permits = [first.permit().unwrap(), second.permit().unwrap()];
    assert_eq!(
        {
            let mut p = permits;
            p.sort_unstable();
            p
        },
        [0, 1]
    );
    for (lock, permit) in [(&mut first, permits[0]), (&mut second, permits[1])] {
        let key = format!("pool:permit:{permit}");
        assert_eq!(lock.resource(), key);
        assert!(lock.fence().await.ok().is_some());
        for node in cluster.iter() {
            assert_eq!(value_on(node, &key).as_deref(), Some(lock.value()));
        }
    }
    let err = redlock
        .try_acquire_permit("pool", 2, TTL)
        .await
        .unwrap_err();
    assert!(err.is_busy(), "{err}");
    assert!(err.to_string().contains("pool (2 permits)"), "{err}");

    // Kept alive through extensions well past its first TTL.
    let guard = first.keep_alive(short);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(guard.is_valid() && guard.extensions() >= 2, "{guard:?}");
    let key = format!("pool:permit:{}", permits[0]);
    guard.release().await.unwrap();
    second.release().await;
    for node in cluster.iter() {
        assert_eq!(value_on(node, &key), None);
    }
    // Both free again.
    let again = redlock.try_acquire_permit("pool", 2, TTL).await.unwrap();
    again.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_permits_fencing_tokens_increase() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut last: HashMap<u32, u64> = HashMap::new();
    for _ in 0..20 {
        let mut lock = redlock.try_acquire_permit("fenced", 3, TTL).await.unwrap();
        let (permit, fence) = (lock.permit().unwrap(), lock.fence().await.unwrap());
        if let Some(before) = last.insert(permit, fence) {
            assert!(fence > before, "permit {permit}: {fence} after {before}");
        }
        lock.release().await;
    }
    assert!(
        last.len() > 1,
        "the random start spreads the permits: {last:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_when_any_permit_is_freed() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let held = [
        redlock.try_acquire_permit("busy", 2, TTL).await.unwrap(),
        redlock.try_acquire_permit("busy", 2, TTL).await.unwrap(),
    ];
    // A retry delay far beyond the test: only the release's notification can end the wait.
    let slow = Retry::forever()
        .delay(Duration::from_secs(30))
        .max_wait(Duration::from_secs(50));
    let waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let lock = redlock.acquire_permit_with("busy", 2, TTL, &slow).await;
            (lock, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let [first, second] = held;
    let freed = second.permit();
    second.release().await;
    let (lock, waited) = waiter.await.unwrap();
    let lock = lock.expect("the freed permit");
    assert_eq!(lock.permit(), freed);
    assert!(
        waited < Duration::from_secs(20),
        "woken, not polled: {waited:?}"
    );
    lock.release().await;
    first.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_permits_or_too_many_is_a_config_error_and_sends_nothing() {
    let redlock = Redlock::builder(["redis://127.0.0.1:1"]).build().unwrap();
    for permits in [0, redquorum::defaults::MAX_PERMITS + 1] {
        let err = redlock
            .try_acquire_permit("s", permits, TTL)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err}");
        assert!(err.to_string().contains("permits"), "{err}");
    }
}
