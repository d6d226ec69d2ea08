//! The Redlock algorithm, top to bottom: fan out, tally, decide, roll back.
//!
//! # Invariants
//! 1. A round sends its request to **every** node at the same instant and measures time from an
//!    instant taken before the first request ([`validity`](crate::validity) invariant 1).
//! 2. A round is decided as soon as the outcome is known ([`quorum`](crate::quorum) invariant 3).
//!    A won round returns at once, and its requests still in flight land all the same: a late
//!    `OK` simply becomes part of the lock (release and extension go to every node anyway). A
//!    request already queued on its node's connection is kept by the lock, unpolled, until the
//!    release is queued behind it: the node runs it first ([`node`](crate::node) invariant 5).
//!    Requests still waiting for a connection (a node's first request, or one after a
//!    reconnection) are finished in the background ([`stragglers`](crate::stragglers)), and the
//!    release waits for those: one that overtook such a `SET` would leave the key behind until
//!    its TTL. A round that can no longer be won still collects every reply, bounded by the node
//!    timeout, so that its rollback follows every late `SET`.
//! 3. A lock is handed out only if a quorum granted **and** the deadline is still in the future
//!    when the round is decided.
//! 4. A failed acquisition round is rolled back on **all** nodes, also those that refused or did
//!    not answer: a timed-out `SET` may still have been applied. Only then do we wait and retry.
//!    The one exception: a round that every node refused set nothing anywhere (a refusal is an
//!    answer, and our value is fresh), so it has nothing to roll back. That spares a busy lock's
//!    waiters a round per attempt.
//! 5. Every acquisition uses a fresh random value, so a rolled-back or expired attempt can never
//!    be mistaken for a later one, ours or anybody's.
//! 6. An extension counts only with a quorum within the new validity; a lock whose validity has
//!    run out is never extended (no resurrection: we never `SET NX` again to paper over it).
//! 7. A quarantined node ([`quarantine`](crate::quarantine)) still gets every request, but its
//!    grants are not votes. No lock or extension is longer than `max_ttl`, the quarantine length.
//! 8. With fencing on, a lock is handed out only once its token is stored on a quorum
//!    ([`fencing`](crate::fencing) explains why that makes tokens increase).
//! 9. Unless fairness is on, a single resource's release is the standard compare-and-delete
//!    script, byte for byte, and costs exactly what it costs other clients: waiters learn of it
//!    from the server's key tracking. A fair client's release also announces itself to the queued
//!    waiters ([`waiting`](crate::waiting)).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::join_all;

use tokio_util::task::TaskTracker;

use crate::config::{Builder, split_list};
use crate::deadlines::Alarm;
use crate::error::{ConfigError, Error, NodeReply, Reply, RoundFailure};
use crate::lock::{Held, Lock, Released};
use crate::node::{Answer, Node, NodeError, Request, reply_of};
use crate::quorum::{Decision, Tally};
use crate::resources::Resources;
use crate::retry::Retry;
use crate::stragglers::{LeftBehind, Stragglers};
use crate::sync::lock;
use crate::validity;
use crate::waiting::{QueuePlace, WaiterId, Waiters};

/// The lock manager: one connection per Redis master, shared by every lock and every clone.
///
/// Cheap to clone (an `Arc`); create one per set of servers and share it.
#[derive(Debug, Clone)]
pub struct Redlock {
    shared: Arc<Shared>,
}

/// What every lock handle shares with its manager.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) nodes: Vec<Node>,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) retry: Retry,
    pub(crate) max_ttl: Duration,
    /// How long fencing counters are kept after their last use; `None`: fencing is off.
    pub(crate) fence_retention: Option<Duration>,
    /// Whether waiters are woken by releases ([`Builder::notify`]).
    pub(crate) notify: bool,
    /// Whether waiters queue in arrival order ([`Builder::fair`]).
    pub(crate) fair: bool,
    /// The waiters of this manager and the subscribers that wake them.
    pub(crate) waiters: Waiters,
    /// Requests still in flight after their caller moved on: stragglers of won rounds, releases
    /// of dropped locks. Each is bounded by the node timeout. See [`Redlock::settle`].
    pub(crate) background: TaskTracker,
    /// Drives the stragglers of won rounds (tracked by `background`).
    pub(crate) stragglers: Stragglers,
}

/// How long a round waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Until {
    /// Return at the first decisive reply if it is a win (an acquisition's `SET`). The requests
    /// still in flight land all the same, so their keys become part of the lock, and come back
    /// with the round for the lock's release to follow (invariant 2). A loss still waits for
    /// every reply, so that the rollback follows every late `SET`.
    Won,
    /// As [`Won`](Self::Won), for rounds that set no lock key (fencing, extension): the requests
    /// still in flight are finished in the background, and nothing waits for them.
    WonThenDriven,
    /// Wait for every node or its timeout (release, connect), to report them all.
    AllReplied,
}

/// One round of requests, as decided.
#[derive(Debug)]
struct Round {
    start: Instant,
    decision: Decision,
    /// The requests of a won round still in flight.
    stragglers: Option<LeftBehind>,
    /// The largest fencing floor among the nodes that did what we asked (fenced acquisitions).
    fence_floor: Option<u64>,
    /// How many nodes said another waiter's turn comes first (fair acquisitions).
    behind: usize,
    quorum: usize,
    replies: Vec<Reply>,
}

impl Round {
    fn failure(self, shared: &Shared, validity_exhausted: bool) -> RoundFailure {
        RoundFailure {
            quorum: self.quorum,
            replies: shared.label(self.replies),
            validity_exhausted,
        }
    }
}

/// The replies of a round so far.
struct Count {
    request: Request,
    tally: Tally,
    /// Emptied when the round is decided: stragglers are not recorded any more.
    replies: Vec<Reply>,
    /// The largest fencing floor among the nodes that did what we asked (fenced acquisitions).
    fence_floor: Option<u64>,
    /// How many nodes refused a fair acquisition because another waiter was ahead.
    behind: usize,
}

impl Count {
    fn new(request: Request, nodes: usize) -> Self {
        Self {
            request,
            tally: Tally::new(nodes),
            replies: vec![Reply::Pending; nodes],
            fence_floor: None,
            behind: 0,
        }
    }

    /// Records node `i`'s answer, unless the round is decided already.
    fn record(&mut self, i: usize, result: &Result<Answer, NodeError>) {
        let Some(reply) = self.replies.get_mut(i) else {
            return;
        };
        *reply = reply_of(self.request, result);
        let counts = match result {
            Ok(answer) if answer.done => {
                self.fence_floor = self.fence_floor.max(answer.fence_floor);
                // Invariant 7: a quarantined node's vote does not count.
                !self.request.is_vote() || answer.quarantined_for.is_none()
            }
            Ok(answer) => {
                self.behind += usize::from(answer.behind);
                false
            }
            Err(_) => false,
        };
        self.tally.record(counts);
    }

    /// Every node that has not answered timed out.
    /// Records every request still pending as timed out, telling `timed_out` which node's.
    fn time_out_the_rest(&mut self, mut timed_out: impl FnMut(usize)) {
        for (i, reply) in self.replies.iter_mut().enumerate() {
            if matches!(reply, Reply::Pending) {
                *reply = Reply::Timeout;
                self.tally.record(false);
                timed_out(i);
            }
        }
    }
}

/// What every request of a round shares, owned so that a won round can leave its stragglers to
/// the background: one reference count per request rather than one per manager, resources and
/// value.
struct Fanout {
    shared: Arc<Shared>,
    request: Request,
    resources: Resources,
    value: Arc<str>,
    /// Written by each request as its reply comes in, read by the round after each poll.
    count: Mutex<Count>,
    /// How many requests still wait for their node's connection: not queued on it yet.
    unqueued: AtomicUsize,
}

impl Fanout {
    fn count(&self) -> MutexGuard<'_, Count> {
        lock(&self.count)
    }

    /// Node `i`'s request, its reply recorded as soon as it is in.
    async fn send(self: Arc<Self>, i: usize) {
        if let Some(node) = self.shared.nodes.get(i) {
            let queued = || {
                self.unqueued.fetch_sub(1, Ordering::Relaxed);
            };
            let result = node
                .send(self.request, &self.resources, &self.value, queued)
                .await;
            self.count().record(i, &result);
        }
    }
}

impl Shared {
    /// Sends `request` for `resources` and `value` to every node at once (invariant 1), all
    /// bounded by one deadline `timeout` from now, and counts the replies.
    async fn round(
        self: &Arc<Self>,
        until: Until,
        request: Request,
        resources: &Resources,
        value: &Arc<str>,
        timeout: Duration,
    ) -> Round {
        let start = Instant::now();
        let node_deadline = start + timeout;
        let fanout = Arc::new(Fanout {
            shared: Arc::clone(self),
            request,
            resources: resources.clone(),
            value: Arc::clone(value),
            count: Mutex::new(Count::new(request, self.nodes.len())),
            unqueued: AtomicUsize::new(self.nodes.len()),
        });
        // `join_all` keeps up to 30 futures in a single allocation (beyond, it switches to
        // `FuturesOrdered`, which only costs more) and polls every one still pending on each
        // wake-up, which with the handful of nodes of a Redlock deployment is cheaper than waking
        // them one by one. Each request records its own reply, so one poll
        // counts every reply that is in. Not `FuturesUnordered`: once it has polled all of its
        // futures in one go, which every round does first, it wakes its own task and returns
        // `Pending` (a yield, futures-rs#2333); measured with `examples/bench.rs`, 2.5 more
        // context switches and about 30 µs more per lock + release with one task.
        let mut requests =
            join_all((0..self.nodes.len()).map(|i| Fanout::send(Arc::clone(&fanout), i)));
        // One deadline for the round, not one per request: they would all share it; watched by
        // the deadline thread, not a Tokio timer ([`deadlines`](crate::deadlines)).
        let mut deadline = Alarm::new(node_deadline);
        // Whether requests are left on their way: only when the round was won before they all
        // replied.
        let left_behind = poll_fn(|cx| {
            // A reply that is in counts, even at the deadline.
            if Pin::new(&mut requests).poll(cx).is_ready() {
                return Poll::Ready(false);
            }
            if until != Until::AllReplied && fanout.count().tally.decision() == Decision::Won {
                return Poll::Ready(true); // invariant 2
            }
            if deadline.poll(cx).is_ready() {
                fanout.count().time_out_the_rest(|i| {
                    if let Some(node) = self.nodes.get(i) {
                        node.timed_out(); // node invariant 6
                    }
                });
                return Poll::Ready(false); // the requests still pending are cancelled
            }
            Poll::Pending
        })
        .await;
        // Decided: replies that come in from now on are not recorded.
        let (decision, quorum, fence_floor, behind, replies) = {
            let mut count = fanout.count();
            let replies = std::mem::take(&mut count.replies);
            (
                count.tally.decision(),
                count.tally.quorum(),
                count.fence_floor,
                count.behind,
                replies,
            )
        };
        // Invariant 2. All polls of the round ran on this task, so the count is current.
        let stragglers = left_behind.then(|| {
            let requests = Box::pin(requests.map(drop));
            let unqueued = fanout.unqueued.load(Ordering::Relaxed) > 0;
            if until == Until::Won && !unqueued {
                LeftBehind::Queued(Mutex::new(requests))
            } else {
                LeftBehind::Driven(self.stragglers.hand_off(
                    requests,
                    node_deadline,
                    self.background.token(),
                ))
            }
        });
        Round {
            start,
            decision,
            fence_floor,
            behind,
            stragglers,
            quorum,
            replies,
        }
    }

    /// Runs the compare-and-delete script on every node and waits for all of them; `leave`
    /// gives up that waiter's place in the fair queue.
    pub(crate) async fn release(
        self: &Arc<Self>,
        resources: &Resources,
        value: &Arc<str>,
        leave: Option<WaiterId>,
    ) -> Released {
        let round = self
            .round(
                Until::AllReplied,
                Request::Release {
                    leave,
                    // Invariant 9: only fair waiters need announcements.
                    announce: self.fair,
                },
                resources,
                value,
                self.node_timeout,
            )
            .await;
        Released {
            confirmed: round.replies.iter().filter(|r| r.is_granted()).count(),
            replies: self.label(round.replies),
        }
    }

    /// Runs the compare-and-PEXPIRE script on every node; returns the new deadline.
    pub(crate) async fn extend(
        self: &Arc<Self>,
        resources: &Resources,
        value: &Arc<str>,
        ttl: Duration,
    ) -> Result<Instant, Error> {
        let ttl_ms = self.check_ttl(ttl)?;
        let round = self
            .round(
                Until::WonThenDriven,
                Request::Extend { ttl_ms },
                resources,
                value,
                self.node_timeout,
            )
            .await;
        match self.deadline_if_won(&round, ttl) {
            Some(deadline) => Ok(deadline),
            None => {
                let won = round.decision == Decision::Won;
                Err(Error::LockLost {
                    resource: resources.to_string(),
                    failure: Some(Box::new(round.failure(self, won))),
                })
            }
        }
    }

    /// Invariant 3: the deadline, if the round was won and it is still in the future.
    fn deadline_if_won(&self, round: &Round, ttl: Duration) -> Option<Instant> {
        if round.decision != Decision::Won {
            return None;
        }
        validity::deadline(round.start, ttl, self.drift_factor).filter(|d| *d > Instant::now())
    }

    /// The TTL in whole milliseconds, if it leaves any validity after the drift allowance.
    fn check_ttl(&self, ttl: Duration) -> Result<u64, ConfigError> {
        let ttl_ms = validity::ttl_millis(ttl);
        let invalid = |reason: String| ConfigError::InvalidTtl { ttl, reason };
        if ttl_ms == 0 {
            return Err(invalid(
                "Redis expiries are whole milliseconds, at least 1 ms".into(),
            ));
        }
        if ttl > self.max_ttl {
            return Err(invalid(format!(
                "longer than max_ttl ({:?}), the restart quarantine; raise max_ttl on every client of these servers",
                self.max_ttl
            )));
        }
        if validity::deadline(Instant::now(), ttl, self.drift_factor).is_none() {
            let drift = validity::drift(ttl, self.drift_factor);
            return Err(invalid(format!(
                "the clock-drift allowance ({drift:?}) leaves no validity; use a longer TTL"
            )));
        }
        Ok(ttl_ms)
    }

    fn label(&self, replies: Vec<Reply>) -> Vec<NodeReply> {
        self.nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| NodeReply {
                node: node.label().to_owned(),
                reply,
            })
            .collect()
    }
}

impl Redlock {
    /// A builder over these servers, one URL per independent Redis master:
    /// `redis://[user:password@]host[:port][/db]`, `rediss://…` for TLS,
    /// `redis+unix:///path/to/socket[?db=N&pass=…]`.
    pub fn builder<I, S>(servers: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Builder::new(servers.into_iter().map(Into::into).collect())
    }

    /// A builder over a comma-separated list of URLs, the form of the CLI's `--servers` and of
    /// the `REDLOCK_SERVERS` environment variable.
    pub fn builder_from_list(list: &str) -> Builder {
        Builder::new(split_list(list))
    }

    /// A manager with default settings over a comma-separated list of URLs.
    pub fn from_list(list: &str) -> Result<Self, Error> {
        Self::builder_from_list(list).build()
    }

    pub(crate) fn from_shared(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The nodes' addresses (without credentials), in configuration order.
    pub fn nodes(&self) -> Vec<String> {
        self.shared
            .nodes
            .iter()
            .map(|n| n.label().to_owned())
            .collect()
    }

    /// How many nodes must grant a request: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        crate::quorum::majority(self.shared.nodes.len())
    }

    /// Connects to every node and loads the scripts, waiting for all of them (each bounded by
    /// the connect timeout plus the node timeout). Optional: nodes also connect on first use;
    /// calling this first keeps connection set-up out of the first lock's validity.
    ///
    /// Returns each node's reply: `Granted` when it is ready.
    pub async fn connect(&self) -> Vec<NodeReply> {
        let shared = &self.shared;
        let none: Arc<str> = Arc::from("");
        let round = shared
            .round(
                Until::AllReplied,
                Request::Connect,
                &Resources::one(""),
                &none,
                shared.connect_timeout + shared.node_timeout,
            )
            .await;
        shared.label(round.replies)
    }

    /// Waits for the requests this manager still has in flight in the background: the nodes that
    /// had not answered when a round was already won, and the releases of dropped locks. Each is
    /// bounded by the node timeout, and so is the final check that every node has run what was
    /// queued for it, so this returns within about two node timeouts.
    ///
    /// A short-lived process calls this before it exits, so that its last lock or extension
    /// reaches every node rather than a bare quorum (the CLI's `acquire` does).
    ///
    /// # Cancel safety
    /// Waiting only: dropping the future changes nothing.
    pub async fn settle(&self) {
        let background = &self.shared.background;
        background.close();
        background.wait().await;
        background.reopen();
        // The requests won rounds left queued on their connections (invariant 2) are answered
        // before a request queued after them.
        let deadline = Instant::now() + self.shared.node_timeout;
        join_all(self.shared.nodes.iter().map(|node| node.drain(deadline))).await;
    }

    /// Acquires `resource` for `ttl`, retrying by the manager's [`Retry`] policy.
    ///
    /// On success the lock is valid until [`Lock::deadline`]: the TTL minus the time the round
    /// took minus the clock-drift allowance.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] with every node's reply to the last attempt when no attempt won;
    /// [`Error::Config`] when the TTL leaves no validity (nothing is sent then).
    ///
    /// # Cancel safety
    /// If the future is dropped mid-round, a release of the round's value on every node is
    /// started in the background (as for a dropped [`Lock`]); keys a node stores after that
    /// expire with the TTL. Nothing is left held by a lock nobody owns for longer than the TTL.
    /// A waiter's place in the resource's queue is given up the same way, in the background.
    pub async fn acquire(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.acquire_with(resource, ttl, &self.shared.retry).await
    }

    /// A single attempt, no retry (`flock -n`). See [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.acquire_with(resource, ttl, &Retry::once()).await
    }

    /// [`acquire`](Self::acquire) with a retry policy for this call only, e.g.
    /// `Retry::forever().max_wait(Duration::from_secs(5))`.
    pub async fn acquire_with(
        &self,
        resource: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        self.acquire_resources(Resources::one(resource), ttl, retry)
            .await
    }

    /// Acquires every resource in `resources` as one lock, all-or-nothing on each node, retrying
    /// by the manager's [`Retry`] policy. The order of `resources` does not matter and duplicates
    /// are ignored: they are locked sorted, so `["b", "a"]` and `["a", "b", "a"]` are the same
    /// lock.
    ///
    /// The same rules as [`acquire`](Self::acquire) hold for the set as a whole: a node grants
    /// every key of the set or none (one script call), the lock is held when a quorum granted
    /// within the validity, and one fencing token covers the set, larger than every earlier token
    /// of each of its resources. No deadlock, whatever order callers list the resources in: no
    /// node ever holds part of a set. A lock on a single resource blocks every set that
    /// contains it, and the other way round.
    ///
    /// A one-resource list is exactly [`acquire`](Self::acquire) (standard wire format); sets
    /// of two or more use our own scripts, which other Redlock clients do not know, although they
    /// still see each key as held.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] as for [`acquire`](Self::acquire), its `resource` naming the sorted
    /// set as `a, b`; [`Error::Config`] for an empty list or a TTL that leaves no validity
    /// (nothing is sent then).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire): a release of every key of the set is started in the
    /// background.
    pub async fn acquire_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error> {
        self.acquire_many_with(resources, ttl, &self.shared.retry)
            .await
    }

    /// A single attempt at a set, no retry. See [`acquire_many`](Self::acquire_many).
    pub async fn try_acquire_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error> {
        self.acquire_many_with(resources, ttl, &Retry::once()).await
    }

    /// [`acquire_many`](Self::acquire_many) with a retry policy for this call only.
    pub async fn acquire_many_with(
        &self,
        resources: &[&str],
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        self.acquire_resources(Resources::set(resources)?, ttl, retry)
            .await
    }

    /// The acquisition loop, for one resource or a set ([`Resources`] decides the wire format).
    async fn acquire_resources(
        &self,
        resources: Resources,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        let shared = &self.shared;
        let ttl_ms = shared.check_ttl(ttl)?;
        let mut schedule = retry.schedule(Instant::now());
        // Fair waiters queue from their first attempt, in one place for the whole acquisition
        // (`waiting` invariant 3).
        let place = shared
            .fair
            .then(|| QueuePlace::new(retry.max_delay(), shared.node_timeout));
        // Gives the place up if this future is dropped between rounds (`waiting` invariant 4): a
        // release of a fresh value nobody holds (invariant 5), which only leaves the queue.
        let place_kept = place.map(|place| {
            Held::new(
                Arc::clone(shared),
                resources.clone(),
                new_value(),
                Some(place.id),
            )
        });
        let mut waiting = None;
        let mut attempts = 0;
        let fenced = shared.fence_retention.is_some();
        loop {
            attempts += 1;
            // Armed before the first request: dropping this future mid-round releases (invariant 5
            // keeps that release from touching anybody else's lock).
            let mut held = Held::new(
                Arc::clone(shared),
                resources.clone(),
                new_value(),
                place.map(|p| p.id),
            );
            let set = match place {
                Some(place) => Request::SetQueued {
                    ttl_ms,
                    fenced,
                    place,
                },
                None if fenced => Request::SetFenced { ttl_ms },
                None => Request::Set { ttl_ms },
            };
            let mut round = shared
                .round(
                    Until::Won,
                    set,
                    &resources,
                    held.value(),
                    shared.node_timeout,
                )
                .await;
            // A release must not overtake a `SET` still on its way (invariant 2).
            held.follows(round.stragglers.take());
            // Invariant 4's exception: every node answered, and none set our value.
            let set_nowhere = round.replies.iter().all(|r| *r == Reply::Refused);
            // A quorum puts another waiter first: we cannot win before a release names us.
            let behind = round.behind >= round.quorum;
            let mut deadline = shared.deadline_if_won(&round, ttl);
            let mut fence = None;
            if let (Some(valid_until), Some(retention), Some(token)) =
                (deadline, shared.fence_retention, round.fence_floor)
            {
                // Invariant 8: store the token on a quorum before anybody may use it.
                let store = Request::Fence {
                    token,
                    retention_ms: validity::ttl_millis(retention),
                };
                round = shared
                    .round(
                        Until::WonThenDriven,
                        store,
                        &resources,
                        held.value(),
                        shared.node_timeout,
                    )
                    .await;
                let stored = round.decision == Decision::Won && valid_until > Instant::now();
                deadline = stored.then_some(valid_until);
                fence = Some(token);
            }
            if let Some(deadline) = deadline {
                if let Some(place) = place_kept {
                    place.disarm(); // the lock's release leaves the queue
                }
                return Ok(Lock::new(held, deadline, fence));
            }
            let won = round.decision == Decision::Won;
            let mut failure = round.failure(shared, won);
            let next = schedule.next_delay(Instant::now());
            // Invariant 4; the last rollback also gives up the queue place (`waiting` inv. 4) and
            // tells WRONGTYPE from busy.
            match next {
                Some(_) if set_nowhere => held.set_nowhere(),
                Some(_) => drop(held.roll_back().await),
                None => explain_refusals(&mut failure, &held.release().await),
            }
            let Some(delay) = next else {
                if let Some(place) = place_kept {
                    place.disarm(); // the last rollback left the queue
                }
                return Err(Error::NotAcquired {
                    resource: resources.to_string(),
                    attempts,
                    failure: Box::new(failure),
                });
            };
            if shared.notify && waiting.is_none() {
                let id = place.map_or_else(WaiterId::new, |place| place.id);
                waiting = Some(shared.waiters.register(&resources, id, shared.fair));
            }
            // `waiting` invariant 8: behind others, only the lease needs our attempts; never past
            // `max_wait` (`retry` invariant 1).
            let wait = match place {
                Some(place) if behind && waiting.is_some() => delay.max(place.poll_behind()),
                _ => delay,
            };
            let wait = schedule.capped(wait, Instant::now());
            match &waiting {
                Some(waiting) => waiting.woken_or(wait).await,
                None => tokio::time::sleep(wait).await,
            }
            if schedule.expired(Instant::now()) {
                // Nothing woke us before the deadline: give up without another attempt. The
                // round was rolled back; a release of a fresh value (the queue place's, if
                // any) gives up the queue place and tells WRONGTYPE from busy, as the last
                // rollback does.
                let last = place_kept.unwrap_or_else(|| {
                    Held::new(Arc::clone(shared), resources.clone(), new_value(), None)
                });
                explain_refusals(&mut failure, &last.release().await);
                return Err(Error::NotAcquired {
                    resource: resources.to_string(),
                    attempts,
                    failure: Box::new(failure),
                });
            }
        }
    }

    /// Extends a lock known only by its resource and value (e.g. taken by another process of
    /// ours, as the CLI does) to `ttl` from now; returns its new deadline.
    ///
    /// # Errors
    /// [`Error::LockLost`] when fewer than a quorum still held `value` and extended it in time.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the TTL reset on some nodes; the lock is then as valid as
    /// before the call, and no more.
    pub async fn extend_value(
        &self,
        resource: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<Instant, Error> {
        self.shared
            .extend(&Resources::one(resource), &Arc::from(value), ttl)
            .await
    }

    /// Releases a lock known only by its resource and value on every node. Deletes nothing that
    /// does not hold `value`.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the key on some nodes until it expires.
    pub async fn release_value(&self, resource: &str, value: &str) -> Released {
        self.shared
            .release(&Resources::one(resource), &Arc::from(value), None)
            .await
    }
}

/// A key of another type makes `SET NX` fail like a held lock; the rollback's `GET` tells the two
/// apart, at no extra cost, so the error can say `WRONGTYPE` instead of "busy".
fn explain_refusals(failure: &mut RoundFailure, rollback: &Released) {
    for (reply, rolled) in failure.replies.iter_mut().zip(&rollback.replies) {
        if let (Reply::Refused | Reply::Pending, Reply::ServerError(e)) =
            (&reply.reply, &rolled.reply)
        {
            if e.starts_with("WRONGTYPE") {
                reply.reply = rolled.reply.clone();
            }
        }
    }
}

/// A fresh lock value: 20 bytes from the thread-local CSPRNG (seeded from the OS), as hex.
fn new_value() -> Arc<str> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 20];
    rand::fill(&mut bytes);
    let mut hex = [0u8; 40];
    for (pair, b) in hex.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
    // Built on the stack, so the `Arc` is the only allocation; ASCII, so nothing is replaced.
    Arc::from(&*String::from_utf8_lossy(&hex))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_40_hex_chars_and_fresh() {
        let a = new_value();
        let b = new_value();
        assert_eq!(a.len(), 40);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
