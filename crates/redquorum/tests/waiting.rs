//! Waiting for a busy lock: a release wakes the waiter long before its poll delay would have, and
//! so do a release by another client and an expiry; with fairness on, waiters are served in
//! arrival order across processes, and a dead waiter at the head of the queue blocks nobody past
//! its lease.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{PATIENT_NODE_TIMEOUT, calls, cluster, eventually, is_watching, patient};
use redquorum::{Error, Lock, Redlock, Reply, Retry};
use redquorum_nodes::Cluster;
use tokio::task::JoinHandle;

const TTL: Duration = Duration::from_secs(10);

/// A poll delay no test waits for: an acquisition that ends before it was woken.
const NEVER_POLLS: Duration = Duration::from_secs(120);

/// The limit for things that happen "at once": loose, for a loaded two-core machine, and far
/// below [`NEVER_POLLS`].
const SOON: Duration = Duration::from_secs(20);

async fn built(cluster: &Cluster, notify: bool, fair: bool) -> Redlock {
    let manager = Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .notify(notify)
        .fair(fair)
        .build()
        .unwrap();
    manager.connect().await;
    manager
}

/// Whether `waiters` waiters are queued for `resource` on a majority of nodes.
fn queued_on_majority(cluster: &Cluster, resource: &str, waiters: usize) -> bool {
    let queue = format!("redlock-queue:{resource}");
    let queued = cluster
        .iter()
        .filter(|node| {
            node.cli(&["ZCARD", &queue])
                .is_ok_and(|n| n.parse::<usize>().is_ok_and(|n| n >= waiters))
        })
        .count();
    queued > cluster.len() / 2
}

/// Whether a majority of nodes have a client watching keys (`CLIENT TRACKING`): a waiter's
/// subscriber connection.
fn watching_on_majority(cluster: &Cluster) -> bool {
    let watching = cluster
        .iter()
        .filter(|node| {
            node.cli(&["CLIENT", "LIST"])
                .is_ok_and(|list| list.lines().any(is_watching))
        })
        .count();
    watching > cluster.len() / 2
}

/// `waiter` waiting for `resources` with a poll delay no test waits for, once a majority of nodes
/// watch the lock for it and it has not got in.
async fn never_polling(
    cluster: &Cluster,
    waiter: Redlock,
    resources: &[&'static str],
) -> JoinHandle<Result<Lock, Error>> {
    let resources = resources.to_vec();
    let retry = Retry::forever().delay(NEVER_POLLS);
    let waiting =
        tokio::spawn(async move { waiter.acquire_many_with(&resources, TTL, &retry).await });
    assert!(
        eventually(SOON, || watching_on_majority(cluster)).await,
        "the waiter never watched the lock"
    );
    assert!(!waiting.is_finished(), "acquired a held lock");
    waiting
}

/// The lock `waiting` gets "at once" (within [`SOON`], far below its poll delay), woken by `what`.
async fn woken(waiting: JoinHandle<Result<Lock, Error>>, what: &str) -> Lock {
    let lock = tokio::time::timeout(SOON, waiting)
        .await
        .unwrap_or_else(|_| panic!("not woken by {what}"))
        .unwrap()
        .unwrap();
    assert!(lock.is_valid());
    lock
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_the_waiter_long_before_its_poll_delay() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, false).await;
    let waiter = built(&cluster, true, false).await;
    let lock = holder.acquire("wake", TTL).await.unwrap();
    let waiting = never_polling(&cluster, waiter, &["wake"]).await;
    lock.release().await;
    let _held = woken(waiting, "the release").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_notification_a_waiter_only_polls() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, false).await;
    let waiter = built(&cluster, false, false).await;
    let lock = holder.acquire("poll", TTL).await.unwrap();
    holder.settle().await;
    // Every attempt sends a `SET NX` to every node: the waiter's first one is refused once every
    // node has counted one more.
    let sets_before: Vec<u64> = cluster.iter().map(|node| calls(node, "set")).collect();

    let retry = Retry::forever().delay(NEVER_POLLS);
    let mut waiting = tokio::spawn(async move { waiter.acquire_with("poll", TTL, &retry).await });
    assert!(
        eventually(SOON, || cluster
            .iter()
            .zip(&sets_before)
            .all(|(node, before)| calls(node, "set") > *before))
        .await,
        "the waiter's first attempt never reached every node"
    );
    // Refused everywhere: whatever the waiter does about it (queue, watch, or sleep out its
    // delay) follows within moments.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !queued_on_majority(&cluster, "poll", 1) && !watching_on_majority(&cluster),
        "a polling waiter neither queues nor watches"
    );
    lock.release().await;
    // The contrast with the test above: nothing wakes this waiter before its delay.
    let early = tokio::time::timeout(Duration::from_secs(2), &mut waiting).await;
    assert!(early.is_err(), "a polling waiter acquired without a poll");
    waiting.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_another_client_wakes_the_waiter_too() {
    let cluster = cluster(3);
    for node in cluster.iter() {
        node.cli(&["SET", "foreign", "their-value", "PX", "60000"])
            .unwrap();
    }
    let waiter = built(&cluster, true, false).await;
    let waiting = never_polling(&cluster, waiter, &["foreign"]).await;
    // A plain client's release: a DEL, nothing else.
    for node in cluster.iter() {
        node.cli(&["DEL", "foreign"]).unwrap();
    }
    let _held = woken(waiting, "another client's release").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_wakes_the_waiter() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, false).await;
    let waiter = built(&cluster, true, false).await;
    // A holder that never releases: its lock expires.
    let lock = holder
        .acquire("expiring", Duration::from_secs(5))
        .await
        .unwrap();
    lock.detach();
    let waiting = never_polling(&cluster, waiter, &["expiring"]).await;
    let _held = woken(waiting, "the expiry").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_a_set_is_woken_by_the_release_of_a_member() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, false).await;
    let waiter = built(&cluster, true, false).await;
    let lock = holder.acquire("member:b", TTL).await.unwrap();
    let waiting = never_polling(&cluster, waiter, &["member:a", "member:b"]).await;
    lock.release().await;
    let set = woken(waiting, "the member's release").await;
    assert_eq!(set.resources(), ["member:a", "member:b"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_are_served_in_arrival_order_across_processes() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, true).await;
    let lock = holder.acquire("turns", TTL).await.unwrap();

    // Three "processes" (managers of their own), arriving one after the other.
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for name in ["first", "second", "third"] {
        let manager = built(&cluster, true, true).await;
        let order = Arc::clone(&order);
        let retry = patient().delay(Duration::from_millis(50));
        waiters.push(tokio::spawn(async move {
            let lock = manager.acquire_with("turns", TTL, &retry).await?;
            order.lock().unwrap().push(name);
            lock.release().await;
            Ok::<_, Error>(())
        }));
        let queued = waiters.len();
        assert!(eventually(SOON, || queued_on_majority(&cluster, "turns", queued)).await);
    }
    // The holder releases and at once asks again: it goes to the back of the queue.
    lock.release().await;
    let again = holder.acquire_with("turns", TTL, &patient()).await.unwrap();
    order.lock().unwrap().push("holder again");
    again.release().await;
    for waiter in waiters {
        waiter.await.unwrap().unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        ["first", "second", "third", "holder again"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_at_the_head_blocks_the_queue_only_until_its_lease_ends() {
    let cluster = cluster(3);
    // A waiter that queued first and died: its place has a lease of 2 s and is never renewed.
    for node in cluster.iter() {
        let now_ms: u64 = node
            .cli(&["TIME"])
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
            * 1000;
        node.cli(&["ZADD", "redlock-queue:dead", "1", "deadbeef"])
            .unwrap();
        let expiry = (now_ms + 2000).to_string();
        node.cli(&["ZADD", "redlock-queue-lease:dead", &expiry, "deadbeef"])
            .unwrap();
    }
    let fair = built(&cluster, true, true).await;
    let refused = fair.try_acquire("dead", TTL).await.unwrap_err();
    let Error::NotAcquired { failure, .. } = refused else {
        panic!("expected NotAcquired, got {refused}");
    };
    assert!(
        failure.replies.iter().all(|r| r.reply == Reply::Refused),
        "a free lock is not ours while another waiter is ahead: {failure:?}"
    );
    // Clients that do not queue are not held back by it.
    let unfair = built(&cluster, true, false).await;
    unfair
        .try_acquire("dead", TTL)
        .await
        .unwrap()
        .release()
        .await;

    let lock = fair.acquire_with("dead", TTL, &patient()).await.unwrap();
    assert!(lock.is_valid());
    // The winning round's requests to the slowest node may still be on their way.
    fair.settle().await;
    // Every node that granted the lock dropped the dead waiter first (it was ahead until then);
    // a node that ran the winning round's script a moment before the lease ended there refused,
    // and keeps the dead entry until its next fair attempt.
    let mut granted = 0;
    for node in cluster.iter() {
        if common::value_on(node, "dead").as_deref() != Some(lock.value()) {
            continue;
        }
        granted += 1;
        assert_eq!(
            node.cli(&["ZSCORE", "redlock-queue:dead", "deadbeef"])
                .unwrap(),
            "",
            "the dead waiter is dropped from the queue"
        );
    }
    assert!(granted >= 2, "granted by {granted} nodes");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_the_queue() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, true).await;
    let lock = holder.acquire("leave", TTL).await.unwrap();
    let quitter = built(&cluster, true, true).await;
    let retry = Retry::new().attempts(2).delay(Duration::from_millis(50));
    let gave_up = quitter.acquire_with("leave", TTL, &retry).await;
    assert!(matches!(gave_up, Err(Error::NotAcquired { .. })));
    for node in cluster.iter() {
        assert_eq!(node.cli(&["ZCARD", "redlock-queue:leave"]).unwrap(), "0");
    }
    // Nobody is left ahead of the next waiter: the holder takes it again at once.
    lock.release().await;
    holder
        .try_acquire("leave", TTL)
        .await
        .unwrap()
        .release()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_contenders_each_get_at_least_half_their_share() {
    let cluster = cluster(3);
    let mut managers = Vec::new();
    for _ in 0..4 {
        managers.push(built(&cluster, true, true).await);
    }
    // Every contender connected before the 3 s start: none loses its share to setting up.
    let mut contenders = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    for manager in managers {
        contenders.push(tokio::spawn(async move {
            let mut acquired = 0u64;
            while tokio::time::Instant::now() < deadline {
                let lock = manager.acquire_with("share", TTL, &patient()).await?;
                acquired += 1;
                lock.release().await;
            }
            Ok::<_, Error>(acquired)
        }));
    }
    let mut counts = Vec::new();
    for contender in contenders {
        counts.push(contender.await.unwrap().unwrap());
    }
    let total: u64 = counts.iter().sum();
    let fair_share = total as f64 / counts.len() as f64;
    assert!(total >= 8, "too few acquisitions to judge: {counts:?}");
    for count in &counts {
        assert!(
            *count as f64 >= fair_share / 2.0,
            "a contender got less than half its share: {counts:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_denied_the_queue_still_locks_and_waits_by_polling() {
    let cluster = cluster(3);
    for node in cluster.iter() {
        // Lock keys only (and the node's marker, which the quarantine needs): no queue keys,
        // no channels.
        node.cli(&[
            "ACL",
            "SETUSER",
            "narrow",
            "on",
            ">secret",
            "~acl:*",
            "~redlock-node-marker",
            "resetchannels",
            "+@all",
        ])
        .unwrap();
    }
    let urls: Vec<String> = cluster
        .iter()
        .map(|node| format!("redis://narrow:secret@127.0.0.1:{}", node.port()))
        .collect();
    let narrow = |fair: bool| {
        Redlock::builder(urls.clone())
            .node_timeout(PATIENT_NODE_TIMEOUT)
            .fencing(false)
            .fair(fair)
            .build()
            .unwrap()
    };
    let holder = narrow(false);
    let lock = holder.acquire("acl:job", TTL).await.unwrap();
    // The lock on every node before the waiter starts: a `SET` still on its way to the third
    // node could otherwise lose to the waiter's first attempt there, and the release would
    // find that node refusing for a reason that has nothing to do with the ACL.
    holder.settle().await;
    let waiter = narrow(true);
    let observer = waiter.clone();
    let retry = Retry::forever().delay(Duration::from_millis(100));
    let waiting = tokio::spawn(async move { waiter.acquire_with("acl:job", TTL, &retry).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "acquired a held lock");

    let released = lock.release().await;
    assert_eq!(
        released.confirmed, 3,
        "the release itself never fails: {released:?}"
    );
    let acquired = tokio::time::timeout(SOON, waiting)
        .await
        .expect("the waiter never got in by polling")
        .unwrap()
        .unwrap();
    // A polling attempt may reach a node before the holder's release does there, and win with
    // the other two: the waiter's release must then delete its value on exactly those.
    observer.settle().await;
    let holding = observer
        .status("acl:job")
        .await
        .iter()
        .filter(|s| s.value() == Some(acquired.value()))
        .count();
    assert!(holding >= 2, "held on a majority");
    assert_eq!(acquired.release().await.confirmed, holding);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_while_waiting_leaves_the_queue() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, true).await;
    let lock = holder.acquire("dropped", TTL).await.unwrap();
    let waiter = built(&cluster, true, true).await;
    let retry = Retry::forever().delay(NEVER_POLLS);
    let waiting = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.acquire_with("dropped", TTL, &retry).await })
    };
    assert!(eventually(SOON, || queued_on_majority(&cluster, "dropped", 1)).await);
    waiting.abort();
    let _ = waiting.await;
    waiter.settle().await;
    for node in cluster.iter() {
        assert_eq!(node.cli(&["ZCARD", "redlock-queue:dropped"]).unwrap(), "0");
    }
    assert_eq!(
        lock.release().await.confirmed,
        3,
        "the holder's lock was untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_attempt_starts_after_max_wait_even_for_a_waiter_behind_in_the_queue() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, true).await;
    let lock = holder.acquire("deadline", TTL).await.unwrap();
    // A first waiter at the head of the queue, so that the next one is behind it.
    let first = built(&cluster, true, true).await;
    let ahead = tokio::spawn(async move { first.acquire_with("deadline", TTL, &patient()).await });
    assert!(eventually(SOON, || queued_on_majority(&cluster, "deadline", 1)).await);

    // Behind another waiter, a fair waiter tries only every quarter of its lease (`waiting`
    // invariant 8): with this node timeout, about 15 s, far beyond its max_wait of 1 s.
    let behind = Redlock::builder(cluster.urls())
        .fair(true)
        .node_timeout(Duration::from_secs(59))
        .build()
        .unwrap();
    behind.connect().await;
    let retry = Retry::forever()
        .delay(Duration::from_millis(500))
        .max_wait(Duration::from_secs(1));
    let started = tokio::time::Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        behind.acquire_with("deadline", TTL, &retry),
    )
    .await
    .expect("gave up at last");
    let elapsed = started.elapsed();
    let err = result.expect_err("acquired a held lock");
    assert!(err.is_busy(), "{err}");
    // Waiting out its quarter lease, it would start an attempt after about 15 s; with every
    // wait cut short at the deadline, it gives up after 1 s and a release round. The bound
    // is loose, for a loaded machine.
    assert!(
        elapsed < Duration::from_secs(10),
        "an attempt started after max_wait: gave up after {elapsed:?}"
    );
    lock.release().await;
    ahead.await.unwrap().unwrap().release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_set_waiter_does_not_close_a_free_member_while_another_is_busy() {
    let cluster = cluster(3);
    // Long enough to outlast every bound below: b stays busy until released.
    let long = Duration::from_secs(50);
    let x = built(&cluster, true, true).await;
    let b = x.acquire("member:b", long).await.unwrap();

    let w = built(&cluster, true, true).await;
    let mut set = tokio::spawn(async move {
        w.acquire_many_with(&["member:a", "member:b"], TTL, &patient())
            .await
    });
    assert!(
        eventually(SOON, || queued_on_majority(&cluster, "member:b", 1)).await,
        "the set never queued for its busy member"
    );

    // A fair waiter for `a` alone gets it at once, while `b` is still held.
    let y = built(&cluster, true, true).await;
    let a = tokio::time::timeout(SOON, y.acquire_with("member:a", TTL, &patient()))
        .await
        .expect("the set waiting for b closed a to its other waiters")
        .unwrap();
    assert!(a.is_valid());
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut set)
            .await
            .is_err(),
        "the set was acquired with a member held"
    );

    // Both freed: the set gets both.
    a.release().await;
    b.release().await;
    let set = tokio::time::timeout(SOON, set)
        .await
        .expect("the set never got its members once both were free")
        .unwrap()
        .unwrap();
    assert_eq!(set.resources(), ["member:a", "member:b"]);
    assert!(set.is_valid());
}

/// A waiter of `manager` for `resource` that polls only every [`NEVER_POLLS`], once a majority of
/// nodes watch the lock for it (it was refused and registered) and it has not got in.
async fn waiting_in(
    cluster: &Cluster,
    manager: &Redlock,
    resource: &'static str,
) -> JoinHandle<Result<Lock, Error>> {
    never_polling(cluster, manager.clone(), &[resource]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_a_waiter_of_the_same_manager_before_its_holder_takes_it_back()
{
    let cluster = cluster(3);
    let manager = built(&cluster, true, false).await;
    let lock = manager.acquire("handed", TTL).await.unwrap();
    let waiting = waiting_in(&cluster, &manager, "handed").await;
    // The holder releases and at once wants the lock back, as a loop of work items does.
    lock.release().await;
    let retry = Retry::forever().delay(NEVER_POLLS);
    let again = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire_with("handed", TTL, &retry).await })
    };
    // The waiter was woken when the release was sent, and its attempt ran right after it on
    // every node: it holds the lock, and the old holder does not (`waiting` invariant 12).
    let handed = woken(waiting, "the release of its own manager").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !again.is_finished(),
        "the lock was given back while handed over"
    );
    handed.release().await;
    let _back = woken(again, "the release of the lock it was handed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_waits_behind_the_waiters_of_its_manager_without_an_attempt() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, false).await;
    let manager = built(&cluster, true, false).await;
    let lock = holder.acquire("queue-here", TTL).await.unwrap();
    let first = waiting_in(&cluster, &manager, "queue-here").await;
    let sets_before: Vec<u64> = cluster.iter().map(|node| calls(node, "set")).collect();
    let retry = Retry::forever().delay(NEVER_POLLS);
    let newcomer = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire_with("queue-here", TTL, &retry).await })
    };
    // Its attempt could only be refused, or overtake the waiter ahead of it: it makes none
    // (`waiting` invariant 13).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sets_after: Vec<u64> = cluster.iter().map(|node| calls(node, "set")).collect();
    assert_eq!(sets_after, sets_before, "the newcomer tried a held lock");
    assert!(!newcomer.is_finished());
    // The first waiter is served first, then the newcomer, each woken by a release.
    lock.release().await;
    let served = woken(first, "the holder's release").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !newcomer.is_finished(),
        "the newcomer overtook the first waiter"
    );
    served.release().await;
    let _second = woken(newcomer, "the first waiter's release").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_attempt_is_made_at_once_even_behind_waiters() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, false).await;
    let manager = built(&cluster, true, false).await;
    let _lock = holder.acquire("try-here", TTL).await.unwrap();
    let _waiting = waiting_in(&cluster, &manager, "try-here").await;
    // A try-lock may not wait: it is refused at once, not after a (two-minute) delay.
    let once = Retry::once().delay(NEVER_POLLS);
    let tried = tokio::time::timeout(SOON, manager.acquire_with("try-here", TTL, &once))
        .await
        .expect("a single attempt waited behind the waiters");
    assert!(tried.is_err(), "a held lock was acquired");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_frees_nothing_hands_over_nothing() {
    let cluster = cluster(3);
    let manager = built(&cluster, true, false).await;
    let lock = manager.acquire("taken-over", TTL).await.unwrap();
    let waiting = waiting_in(&cluster, &manager, "taken-over").await;
    // Another client holds the key now on every node (our holder's lock ran out, say): the
    // release deletes nothing, yet it wakes the waiter, which must be refused.
    for node in cluster.iter() {
        node.cli(&["SET", "taken-over", "their-value", "PX", "60000"])
            .unwrap();
    }
    let released = lock.release().await;
    assert!(
        released.cause().is_some(),
        "released a lock it no longer held"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !waiting.is_finished(),
        "the waiter was granted a lock another client holds"
    );
    for node in cluster.iter() {
        assert_eq!(node.cli(&["GET", "taken-over"]).unwrap(), "their-value");
    }
    // Their release (a plain DEL) wakes it through the servers, as before.
    for node in cluster.iter() {
        node.cli(&["DEL", "taken-over"]).unwrap();
    }
    let _held = woken(waiting, "the other client's release").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_for_a_set_does_not_hold_back_a_newcomer_for_a_free_member() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, false).await;
    let manager = built(&cluster, true, false).await;
    let _b = holder.acquire("member-b", TTL).await.unwrap();
    // Waits for both, blocked by `b`, registered for `a` too.
    let _set = never_polling(&cluster, manager.clone(), &["member-a", "member-b"]).await;
    // `a` is free: a newcomer for it alone gets it at once, whatever the set waits for.
    let retry = Retry::forever().delay(NEVER_POLLS);
    let a = tokio::time::timeout(SOON, manager.acquire_with("member-a", TTL, &retry))
        .await
        .expect("a newcomer waited behind a set that cannot take the free member")
        .unwrap();
    assert!(a.is_valid());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_behind_waiters_still_attempts_before_its_max_wait() {
    let cluster = cluster(3);
    let holder = built(&cluster, true, false).await;
    let manager = built(&cluster, true, false).await;
    let _lock = holder.acquire("deadline", TTL).await.unwrap();
    let _first = waiting_in(&cluster, &manager, "deadline").await;
    let sets_before: Vec<u64> = cluster.iter().map(|node| calls(node, "set")).collect();
    // Nobody else sends a `SET` now: the holder holds, the first waiter never polls.
    let max_wait = Duration::from_secs(4);
    let retry = Retry::forever().delay(NEVER_POLLS).max_wait(max_wait);
    let newcomer = {
        let manager = manager.clone();
        tokio::spawn(async move { manager.acquire_with("deadline", TTL, &retry).await })
    };
    // Its wait behind the first waiter ends by half the time left (2 s): its attempt has
    // reached every node well before the deadline (4 s), not at it (`waiting` invariant 13,
    // `retry` invariant 1).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let sets_then: Vec<u64> = cluster.iter().map(|node| calls(node, "set")).collect();
    let attempted = sets_then
        .iter()
        .zip(&sets_before)
        .all(|(then, before)| then > before);
    assert!(attempted, "no attempt yet, a second before the deadline");
    let outcome = tokio::time::timeout(SOON, newcomer).await.unwrap().unwrap();
    let Err(Error::NotAcquired { attempts, .. }) = outcome else {
        panic!("acquired a held lock, or failed otherwise: {outcome:?}");
    };
    assert_eq!(attempts, 1, "an attempt after the deadline");
}
