//! Waiting for a busy lock: woken by its release, and served in arrival order when asked.
//!
//! Every Redlock client we measured waits for a busy lock by sleeping a random delay and trying
//! again. The holder that releases and locks again at once wins nearly every time, and a waiter
//! learns of a release only when its delay runs out. Two mechanisms fix that, and neither carries
//! any part of the safety argument, which stays with `SET NX` on a quorum:
//!
//! - **Notification** ([`Builder::notify`](crate::Builder::notify), on by default). A refused
//!   waiter registers here, and the manager's subscriber connection to each node
//!   ([`subscriber`](crate::nodes::subscriber)) watches the lock key with Redis's key tracking: the
//!   server tells it when the key changes, whoever changes it, and the subscriber reports the
//!   key freed when it then finds it gone. That wakes the waiter, which tries again at once. So
//!   our releases, other Redlock clients' releases and expiries all wake waiters, and none of
//!   them costs the releasing client anything: the release is the standard compare-and-delete
//!   script. The random delay stays as the fallback: a lost message, a dead subscriber
//!   connection, or a server that cannot track keys only cost the delay, as before.
//! - **Fair queue** ([`Builder::fair`](crate::Builder::fair), off by default). Every attempt goes
//!   through a queue on each node (`scripts/acquire_queued.lua`): only the waiter at the head may
//!   take the keys; anyone else joins the queue (or keeps its place) and is refused. A fair
//!   client's release announces itself on `redlock-released:<resource>`, naming the head, and the
//!   subscribers of fair managers listen there, so only that waiter wakes. The queue orders
//!   waiters by a ticket they choose once per acquisition (their clock when they first tried),
//!   the same on every node, so every node agrees on the head.
//!
//! # Invariants
//! 1. A waiter is woken or its delay runs out, whichever comes first: a missing message never
//!    makes a wait longer than without notification (but see invariant 8 for fair waiters that
//!    cannot win yet).
//! 2. A wake-up that arrives while the waiter is busy trying is kept (one permit), so a release
//!    between a refused attempt and the next wait is not lost.
//! 3. A waiter keeps one queue place (id and ticket) for its whole acquisition, so a failed round
//!    or a lease that ran out never sends it to the back.
//! 4. A queue place is given up when the acquisition ends: by the lock's release once held, by
//!    the last rollback when it gives up, in the background when its future is dropped. A waiter
//!    that dies without doing so holds the head for at most its lease, which every attempt renews.
//! 5. Only our own clients with fairness on use the queue; safety never depends on it, and a client
//!    that ignores it can still take a free lock (it is merely not fair to the queue).
//! 6. A waiter wakes once a quorum of nodes reported a release it may use (a freed key, or an
//!    announcement for it) since it last woke: an attempt made before that many nodes are free
//!    cannot win, and would cost a rollback. (With more than 64 nodes, nodes share bits, which can
//!    only make a wake later, never wrong.)
//! 7. A release wakes one waiter of this process, not all: only one can win, and the others
//!    would only cost the nodes a refused attempt each. It is the named head if that is ours,
//!    else the longest-registered waiter the report is for. Observers (a
//!    [`LeaderWatch`](crate::LeaderWatch)) are woken by freed keys as well, never instead: they
//!    take nothing, so they must not take a contender's wake-up.
//! 8. A fair waiter that a quorum of nodes put behind another cannot win until a release names
//!    it (or the one ahead leaves or dies), so between announcements it tries only every quarter
//!    of its lease: often enough to keep its place and to find a dead head soon after its lease
//!    ends, and without loading the nodes with attempts that cannot win. The waiter at the head
//!    keeps the retry delay, which covers releases nobody announced.
//! 9. A fair waiter that registered before its subscriber listened for the resource tries once
//!    more as soon as it does: the announcement naming it may have gone unheard, and it would
//!    otherwise wait a quarter of its lease.
//! 10. An announcement naming a waiter that has not registered yet is kept for it: a fair waiter
//!     registers only after its refused attempt, and the release that names it can come in
//!     between. Lost, it would stall the whole queue (nobody else may go) for a quarter lease;
//!     measured with `examples/contended.rs`, that happened in about half the 10 s fair runs.
//! 11. A fair waiter for a set claims queue places only where it is blocked. An attempt that
//!     finds some member of the set busy on a node queues (or keeps its place) only for the busy
//!     members there, and leaves the queues of the free ones, announcing the next in line where
//!     it was first (`scripts/acquire_queued.lua`); only an attempt that finds every member free
//!     queues for all of them, and takes them if it is first in every queue. So:
//!     1. a set waiting for a busy `b` never closes a free `a` to `a`'s other fair waiters (it
//!        could not take `a` anyway); holding its place at the head of `a`'s queue would keep
//!        `a` idle for as long as `b`'s holder keeps `b`, extensions included;
//!     2. single-resource waiters are served exactly as before: the rule never applies to them;
//!     3. the set's ticket never changes (invariant 3), so wherever it queues again it is back
//!        in its arrival position, not at the back;
//!     4. the price: a set is served when all its members are free at once on a quorum, not in
//!        arrival order against the waiters of each member alone; under steady traffic on its
//!        members it can wait longer than its turn (sets get no starvation-freedom), and safety
//!        is unaffected (invariant 5);
//!     5. a set that finds every member free but another waiter first in one queue still
//!        queues for every member, so it may hold another member's queue until that waiter has
//!        taken its resource and the set's next attempt (within a quarter lease, invariant 8)
//!        finds it busy and lets go.
//! 12. **A release of ours is handed over in this process before it is answered.** Once a
//!     holder's release (not a rollback, nor a reader's) is queued on every node's connection,
//!     the waiter of this manager that the release would wake is woken at once, as if every
//!     node had reported the key freed ([`Waiters::handed_over`]), instead of after the server's
//!     push and the subscriber's read. Its next attempt is queued on each connection after the
//!     release, and each node runs them in that order ([`server`](crate::nodes::server)
//!     invariant 5), so the attempt finds the key freed: a hand-off between two holders of one
//!     process costs one round trip instead of three, and the woken waiter's attempt reaches
//!     the nodes before the releasing caller's own next one, which would otherwise win nearly
//!     every time (measured with `redlock bench --workload contended`: half the acquisitions
//!     went back to the holder that had just released). Like every wake-up, it is a hint
//!     (invariant 5): if the release freed nothing on some node (the lock had expired and was
//!     taken), the attempt is refused there and the waiter waits again; nothing is counted that
//!     a node did not grant. The order also fails, with the same consequence, where "queued"
//!     is not yet "on the wire in order": a release that waits for room in redis-rs's full
//!     request channel, a release redirected (`MOVED`, `ASK`) to another master of a cluster,
//!     a release on a connection being replaced, or one whose script the node had forgotten
//!     (`NOSCRIPT`, sent again as `EVAL`). Each costs the woken waiter one refused attempt, of
//!     its retry policy's attempts. A fair waiter is not woken this way: its turn is announced
//!     by the node (invariant 8).
//! 13. **A newcomer does not overtake the waiters of its manager.** An acquisition of one
//!     exclusive key (a plain lock, not a set, a semaphore or a read-write lock) that may wait,
//!     starting while a waiter of the same manager that contends (neither fair nor an observer)
//!     is registered for that key alone, waits registered behind it before its first attempt
//!     ([`Waiters::is_contended`]). Such a waiter was refused, so the lock is held, or was just
//!     handed the lock (invariant 12) and its attempt is on its way ahead of any attempt made
//!     now: the newcomer's attempt could only be refused, costing the nodes a vote (and with
//!     eager fencing the counter's writes, which a node with `appendfsync always` syncs to
//!     disk), or overtake a waiter that was there first. So the waiters of one process are
//!     served in the order they registered, and a holder that releases and wants the lock back
//!     queues behind them. A waiter for a set or for permits is not deferred to (it may be
//!     blocked by another member while this key is free), nor does a try-lock defer. The wait
//!     is a retry delay, drawn as between attempts, and ends by half the time left before the
//!     acquisition's deadline, so its first attempt still starts before it
//!     ([`retry`](crate::round::retry) invariant 1). The price: if the lock is free while the
//!     waiter ahead does not act on its wake-up (it is waiting out a quarantine, or giving up),
//!     the newcomer waits that delay. Nothing here is counted as a vote: it only delays an
//!     attempt.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::base::queue::{QueuePlace, WaiterId};
use crate::base::resources::Resources;
use crate::base::sync::lock;
use crate::nodes::subscriber::{Listener, Subscriber, Watch};

/// How often a reader held off by waiting writers looks again, at the most.
const HELD_OFF_POLL: Duration = Duration::from_secs(1);

/// One registered waiter: what wakes it.
#[derive(Debug)]
struct Wake {
    /// The waiter's id as release messages name it, formatted once.
    id: String,
    /// Fair waiters wake only on their own turn; others on every release.
    fair: bool,
    /// An observer: woken by every freed key, besides the waiter it wakes (invariant 7).
    observer: bool,
    /// The nodes that announced a release for us since we last woke, one bit per node index
    /// (modulo 64), and how many it takes to wake us: a quorum, since that many must be free for
    /// an attempt to win (invariant 6).
    heard: AtomicU64,
    quorum: u32,
    notify: Notify,
    /// Registered for one key alone (not a set, nor a semaphore's permits).
    single: bool,
}

impl Wake {
    /// Counts `node` as free for us, and wakes us once a quorum of nodes is (invariant 6).
    fn heard_from(&self, node: usize) {
        self.heard_from_all(1u64 << (node % 64));
    }

    /// [`heard_from`](Self::heard_from) for every node in the bit set `nodes`.
    fn heard_from_all(&self, nodes: u64) {
        let heard = self.heard.fetch_or(nodes, Ordering::AcqRel) | nodes;
        if heard.count_ones() >= self.quorum {
            self.notify.notify_one(); // a permit if it is not waiting yet (invariant 2)
        }
    }

    /// Whether this waiter contends for the lock with the acquisitions of its manager: not a
    /// fair one (the queue orders those) nor an observer (it takes nothing).
    fn contends(&self) -> bool {
        !self.fair && !self.observer
    }

    /// Whether a release message with this payload may wake this waiter: an empty payload (no
    /// live waiter queued) may wake anyone; a named head only that waiter, or a waiter that is not
    /// fair (it does not care whose turn it is).
    fn is_for(&self, head: &str) -> bool {
        head.is_empty() || !self.fair || head == self.id
    }
}

/// The waiters of one manager, by resource.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    by_resource: Mutex<HashMap<String, Vec<Arc<Wake>>>>,
    /// Announcements that named a waiter not registered (yet), by its id: the nodes that named
    /// it, claimed when it registers (invariant 10). Locked only inside `by_resource`.
    unclaimed: Mutex<HashMap<String, u64>>,
    /// How many waiters that contend (neither fair nor observers) are registered: most
    /// acquisitions find none without taking the lock (invariant 13).
    contenders: AtomicUsize,
    /// How many waiters of any kind are registered: most releases find none without taking the
    /// lock (invariant 12).
    registered: AtomicUsize,
}

/// How many unclaimed announcements are kept; beyond, they are all forgotten (most name waiters
/// of other processes, which never register here).
const UNCLAIMED_MAX: usize = 1024;

impl Registry {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Wake>>>> {
        lock(&self.by_resource)
    }
}

impl Listener for Registry {
    /// Records that `node` announced a fair client's release of `resource` naming `head`, for the
    /// one waiter it is for (invariant 7), and wakes it once a quorum of nodes has (invariant 6).
    fn released(&self, resource: &str, head: &str, node: usize) {
        let by_resource = self.lock();
        let wake = by_resource
            .get(resource)
            .and_then(|wakes| wakes.iter().find(|w| w.is_for(head)));
        match wake {
            Some(wake) => wake.heard_from(node),
            // Our waiter may be between its refused attempt and its registration (invariant 10).
            None if !head.is_empty() => {
                let mut unclaimed = lock(&self.unclaimed);
                if unclaimed.len() >= UNCLAIMED_MAX && !unclaimed.contains_key(head) {
                    unclaimed.clear();
                }
                *unclaimed.entry(head.to_owned()).or_default() |= 1u64 << (node % 64);
            }
            None => {}
        }
    }

    /// Records that `node` found `resource`'s key gone (whoever released it, or it expired), for
    /// the one waiter that is not fair (invariant 7): fair waiters wait for their turn's
    /// announcement (invariant 8).
    fn freed(&self, resource: &str, node: usize) {
        self.freed_on(resource, 1u64 << (node % 64));
    }

    /// Called once announcements for `resource` are heard: its fair waiters may have missed
    /// their turn's announcement before that, so each tries once more (invariant 9).
    fn listening(&self, resource: &str) {
        if let Some(wakes) = self.lock().get(resource) {
            for wake in wakes.iter().filter(|w| w.fair) {
                wake.notify.notify_one();
            }
        }
    }

    /// Whether anybody still waits for `resource`.
    fn is_waited_for(&self, resource: &str) -> bool {
        self.lock().contains_key(resource)
    }
}

impl Registry {
    /// [`freed`](Listener::freed) by every node in the bit set `nodes`.
    fn freed_on(&self, resource: &str, nodes: u64) {
        let by_resource = self.lock();
        let Some(wakes) = by_resource.get(resource) else {
            return;
        };
        if let Some(wake) = wakes.iter().find(|w| !w.fair && !w.observer) {
            wake.heard_from_all(nodes);
        }
        for observer in wakes.iter().filter(|w| w.observer) {
            observer.heard_from_all(nodes);
        }
    }
}

/// Notified waiting for one manager: its registry and one subscriber per node.
#[derive(Debug)]
pub(crate) struct Waiters {
    registry: Arc<Registry>,
    subscribers: Vec<Subscriber>,
}

impl Waiters {
    pub(crate) fn new(subscribers: Vec<Subscriber>) -> Self {
        Self {
            registry: Arc::default(),
            subscribers,
        }
    }

    /// A release of `resources` by this manager was queued on every node's connection: wakes
    /// the waiter each one's release would wake, as if every node had reported it freed
    /// (invariant 12). Called before any node has run it.
    pub(crate) fn handed_over(&self, resources: &Resources) {
        if self.registry.registered.load(Ordering::Acquire) == 0 {
            return;
        }
        for resource in resources.keys() {
            self.registry.freed_on(resource, u64::MAX);
        }
    }

    /// Whether a waiter of this manager that contends (neither fair nor an observer) is
    /// registered for `resource` alone (not as a member of a set, which may be blocked by
    /// another member): an acquisition of it starting now would overtake it (invariant 13).
    pub(crate) fn is_contended(&self, resource: &str) -> bool {
        if self.registry.contenders.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.registry
            .lock()
            .get(resource)
            .is_some_and(|wakes| wakes.iter().any(|w| w.contends() && w.single))
    }

    /// Registers a waiter for `resources` and makes sure every node's subscriber listens for
    /// their release. Deregisters when the returned [`Waiting`] is dropped.
    pub(crate) fn register(&self, resources: &Resources, id: WaiterId, fair: bool) -> Waiting {
        self.enlist(resources, id, fair, false)
    }

    /// Registers an observer of `resources` ([`LeaderWatch`](crate::LeaderWatch)): woken by every
    /// release it hears, alongside the one waiter a release wakes, never instead of it
    /// (invariant 7: it takes nothing, so it must not take a contender's wake-up).
    pub(crate) fn observe(&self, resources: &Resources) -> Waiting {
        self.enlist(resources, WaiterId::new(), false, true)
    }

    fn enlist(&self, resources: &Resources, id: WaiterId, fair: bool, observer: bool) -> Waiting {
        let quorum = crate::protocol::quorum::majority(self.subscribers.len()).min(64);
        let wake = Arc::new(Wake {
            id: id.to_string(),
            fair,
            observer,
            heard: AtomicU64::new(0),
            quorum: u32::try_from(quorum).unwrap_or(64),
            notify: Notify::new(),
            single: resources.keys().len() == 1,
        });
        self.registry.registered.fetch_add(1, Ordering::AcqRel);
        if wake.contends() {
            self.registry.contenders.fetch_add(1, Ordering::AcqRel);
        }
        {
            let mut by_resource = self.registry.lock();
            for resource in resources.keys() {
                by_resource
                    .entry(resource.clone())
                    .or_default()
                    .push(Arc::clone(&wake));
            }
            if fair && let Some(nodes) = lock(&self.registry.unclaimed).remove(&wake.id) {
                wake.heard_from_all(nodes); // invariant 10
            }
        }
        let listener: Arc<dyn Listener> = self.registry.clone();
        // Fair waiters hear their turn announced; the others watch the keys (also in a fair
        // manager: a semaphore's permits, a read-write lock, a leader watch).
        let watch = if fair {
            Watch::Announcements
        } else {
            Watch::Keys
        };
        for (node, subscriber) in self.subscribers.iter().enumerate() {
            subscriber.listen(node, resources, watch, &listener);
        }
        Waiting {
            wake,
            resources: resources.clone(),
            registry: Arc::clone(&self.registry),
        }
    }
}

/// One acquisition's turn-taking: its place in the fair queue (fair managers only), and once it
/// had to wait, its registration to be woken by releases.
#[derive(Debug)]
pub(crate) struct Turn {
    place: Option<QueuePlace>,
    /// Without a queue place: an id of the acquisition's own, when it needs one (a read-write
    /// lock's writer names itself among the waiting writers, and leaves them with it).
    id: Option<WaiterId>,
    waiting: Option<Waiting>,
}

impl Turn {
    /// A turn for an acquisition starting now; with a queue place when `fair` (invariant 3).
    pub(crate) fn new(fair: bool, retry_delay: Duration, node_timeout: Duration) -> Self {
        Self {
            place: fair.then(|| QueuePlace::new(retry_delay, node_timeout)),
            id: None,
            waiting: None,
        }
    }

    /// The same turn, with an id of its own if it has no queue place.
    pub(crate) fn named(mut self) -> Self {
        if self.place.is_none() {
            self.id = Some(WaiterId::new());
        }
        self
    }

    /// The queue place, the same for the whole acquisition (invariant 3).
    pub(crate) fn place(&self) -> Option<QueuePlace> {
        self.place
    }

    /// The queue place's waiter id, which a release gives up (invariant 4), or the turn's own.
    pub(crate) fn id(&self) -> Option<WaiterId> {
        self.place.map(|place| place.id).or(self.id)
    }

    /// Waits `delay` before the next attempt, or less when a release wakes us (invariant 1):
    /// registered with `waiters` on the first wait, unless notification is off (`None`). A fair
    /// waiter that a quorum put `behind` another waits for its turn's announcement, or a quarter
    /// of its lease (invariant 8). `cap` bounds the wait (the retry policy's `max_wait`).
    pub(crate) async fn wait(
        &mut self,
        waiters: Option<&Waiters>,
        resources: &Resources,
        delay: Duration,
        behind: bool,
        cap: impl FnOnce(Duration) -> Duration,
    ) {
        if let (Some(waiters), None) = (waiters, &self.waiting) {
            let id = self.id().unwrap_or_else(WaiterId::new);
            self.waiting = Some(waiters.register(resources, id, self.place.is_some()));
        }
        let wait = match self.place {
            Some(place) if behind && self.waiting.is_some() => delay.max(place.poll_behind()),
            // Held off by waiting writers (`rwlock` invariant 2): a writer that gives up leaves
            // the lock key as it was, so no release wakes us; look again at least every second.
            None if behind => delay.min(HELD_OFF_POLL),
            _ => delay,
        };
        match &self.waiting {
            Some(waiting) => waiting.woken_or(cap(wait)).await,
            None => tokio::time::sleep(cap(wait)).await,
        }
    }
}

/// A registered waiter; deregisters on drop.
#[derive(Debug)]
pub(crate) struct Waiting {
    wake: Arc<Wake>,
    resources: Resources,
    registry: Arc<Registry>,
}

impl Waiting {
    /// Waits until a release wakes us or `delay` has passed (invariant 1).
    pub(crate) async fn woken_or(&self, delay: Duration) {
        let _ = tokio::time::timeout(delay, self.wake.notify.notified()).await;
        self.wake.heard.store(0, Ordering::Release);
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let mut by_resource = self.registry.lock();
        for resource in self.resources.keys() {
            if let Some(wakes) = by_resource.get_mut(resource) {
                wakes.retain(|w| !Arc::ptr_eq(w, &self.wake));
                if wakes.is_empty() {
                    by_resource.remove(resource);
                }
            }
        }
        drop(by_resource);
        self.registry.registered.fetch_sub(1, Ordering::AcqRel);
        if self.wake.contends() {
            self.registry.contenders.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wake(fair: bool) -> Wake {
        Wake {
            id: WaiterId(0xab).to_string(),
            fair,
            observer: false,
            heard: AtomicU64::new(0),
            quorum: 1,
            notify: Notify::new(),
            single: true,
        }
    }

    #[test]
    fn ids_are_32_hex_digits() {
        assert_eq!(
            WaiterId(0xab).to_string(),
            "000000000000000000000000000000ab"
        );
        assert_ne!(WaiterId::new(), WaiterId::new());
    }

    #[test]
    fn a_fair_waiter_wakes_only_on_its_turn_or_an_open_release() {
        let fair = wake(true);
        assert!(fair.is_for(""));
        assert!(fair.is_for("000000000000000000000000000000ab"));
        assert!(!fair.is_for("000000000000000000000000000000cd"));
        let polling = wake(false);
        assert!(polling.is_for("000000000000000000000000000000cd"));
    }

    #[test]
    fn huge_delays_and_timeouts_give_a_day_long_queue_place_not_a_panic() {
        let place = QueuePlace::new(Duration::MAX, Duration::MAX);
        assert_eq!(place.lease_ms, 24 * 60 * 60 * 1000);
    }

    #[tokio::test]
    async fn a_waiter_wakes_once_a_quorum_of_distinct_nodes_announced() {
        let registry = Arc::new(Registry::default());
        let waiting = Waiting {
            wake: Arc::new(Wake {
                quorum: 2,
                ..wake(false)
            }),
            resources: Resources::one("r"),
            registry: Arc::clone(&registry),
        };
        registry
            .lock()
            .insert("r".into(), vec![Arc::clone(&waiting.wake)]);
        registry.released("r", "", 0);
        registry.released("r", "", 0); // the same node again
        let short = Duration::from_millis(50);
        let early = tokio::time::timeout(short, waiting.wake.notify.notified()).await;
        assert!(early.is_err(), "woken by one node");
        registry.released("r", "", 1);
        let woke = tokio::time::timeout(
            Duration::from_secs(30),
            waiting.woken_or(Duration::from_secs(3600)),
        )
        .await;
        assert!(woke.is_ok(), "not woken by a quorum");
        assert_eq!(
            waiting.wake.heard.load(Ordering::Acquire),
            0,
            "a wake starts a new count"
        );
    }

    /// A registry, and waiters on it with no subscribers (a quorum of one).
    fn waiters() -> (Arc<Registry>, Waiters) {
        let registry = Arc::new(Registry::default());
        let waiters = Waiters {
            registry: Arc::clone(&registry),
            subscribers: Vec::new(),
        };
        (registry, waiters)
    }

    /// Whether `waiting`'s wait returns at once (well within 30 s) rather than after an hour.
    async fn wakes_at_once(waiting: &Waiting) -> bool {
        let wait = waiting.woken_or(Duration::from_secs(3600));
        tokio::time::timeout(Duration::from_secs(30), wait)
            .await
            .is_ok()
    }

    /// Whether nothing wakes `waiting` within 50 ms.
    async fn stays_asleep(waiting: &Waiting) -> bool {
        let wake = waiting.wake.notify.notified();
        tokio::time::timeout(Duration::from_millis(50), wake)
            .await
            .is_err()
    }

    #[tokio::test]
    async fn fair_waiters_try_again_once_their_announcements_are_heard() {
        let (registry, waiters) = waiters();
        let resources = Resources::one("r");
        let fair = waiters.register(&resources, WaiterId(1), true);
        let unfair = waiters.register(&resources, WaiterId(2), false);
        registry.listening("r");
        assert!(wakes_at_once(&fair).await, "invariant 9");
        assert!(
            stays_asleep(&unfair).await,
            "a waiter that is not fair needs no catching up"
        );
    }

    #[tokio::test]
    async fn an_announcement_before_the_registration_is_kept_for_the_waiter_it_names() {
        let (registry, waiters) = waiters();
        let resources = Resources::one("r");
        registry.released("r", &WaiterId(7).to_string(), 0);
        let named = waiters.register(&resources, WaiterId(7), true);
        let other = waiters.register(&resources, WaiterId(8), true);
        assert!(wakes_at_once(&named).await, "invariant 10");
        assert!(
            stays_asleep(&other).await,
            "a waiter the announcement did not name was woken"
        );
    }

    #[tokio::test]
    async fn a_wake_before_the_wait_is_kept_and_a_dropped_waiter_is_forgotten() {
        let (registry, waiters) = waiters();
        let waiting = waiters.register(&Resources::one("r"), WaiterId(1), false);
        assert!(registry.is_waited_for("r"));
        registry.released("r", "", 0);
        assert!(
            wakes_at_once(&waiting).await,
            "invariant 2: the permit is kept"
        );
        drop(waiting);
        assert!(!registry.is_waited_for("r"));
    }
}
