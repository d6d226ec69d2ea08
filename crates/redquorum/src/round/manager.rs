//! The Redlock algorithm, top to bottom: attempt (a `SET` round, then a fencing round when the
//! votes did not agree on the token), decide, roll back, wait, attempt again. The rounds
//! themselves (fan-out, count, deadline) are the [`engine`](crate::round::engine)'s; waiting for a
//! turn is [`waiting`](crate::round::waiting)'s.
//!
//! # Invariants
//! 1. A lock is handed out only if a quorum granted **and** the deadline is still in the future
//!    when the round is decided.
//! 2. A failed acquisition round is rolled back on **all** nodes, also those that refused or did
//!    not answer: a timed-out `SET` may still have been applied. Only then do we wait and retry.
//!    The one exception: a round that every node refused set nothing anywhere (a refusal is an
//!    answer, and our value is fresh), so it has nothing to roll back. That spares a busy lock's
//!    waiters a round per attempt.
//! 3. Every acquisition uses a fresh random value, so a rolled-back or expired attempt can never
//!    be mistaken for a later one, ours or anybody's.
//! 4. An extension counts only with a quorum within the new validity; a lock whose validity has
//!    run out is never extended (no resurrection: we never `SET NX` again to paper over it).
//! 5. With fencing on, a lock is handed out only once its token is stored on a quorum: by the
//!    acquisition round itself when every vote proposed the same token, else by a round of its
//!    own ([`fencing`](crate::protocol::fencing) explains why that makes tokens increase).
//! 6. **A quarantine is waited out, not polled.** When quarantined nodes made the difference
//!    ([`Cause::Quarantined`]), the next attempt comes when enough of their quarantines end for
//!    a quorum, or after [`QUARANTINE_POLL`] if that is sooner (the nodes' health is checked
//!    again meanwhile, so an operator's vouch is seen), never sooner than the retry delay; and
//!    no release wakes it: our own rollback frees the key, and a waiter woken by that tried
//!    again at once, over a thousand attempts a second for the whole quarantine.
//! 7. **A quarantine that a few tries cannot outlast is not waited for, and one that is waited
//!    for is waited for aloud.** When quarantined nodes are so many that the others cannot make
//!    a quorum (not merely when they made the difference: a node that timed out may answer
//!    next time, found by review) and the attempts left cannot reach the end of their
//!    quarantine ([`retry`](crate::round::retry) invariant
//!    4: each wait lasts at most [`QUARANTINE_POLL`]), the acquisition gives up at once, and its
//!    error says how long is left and, where the nodes may simply be new, how to vouch for them
//!    ([`remedy`](crate::protocol::remedy)): with a retry policy of attempts (every package's
//!    default), a first lock on a new server fails in milliseconds with the one call that ends
//!    the wait, not after seconds of silence. A caller that gave a deadline (`max_wait`) waits
//!    for as long as it said, since a vouch ends the quarantine at once and is seen within
//!    [`QUARANTINE_POLL`]; its wait begins with one warning that says the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tracing::Instrument;

use crate::handles::error::{Error, RoundFailure};
use crate::handles::lock::{Held, Lock};
use crate::handles::telemetry::{self, Acquisition, Waiting};
use crate::nodes::node::Request;
use crate::nodes::scripts::check_resource;
use crate::primitives::resources::{Access, Resources};
use crate::primitives::semaphore::Permits;
use crate::protocol::cause::Cause;
use crate::protocol::fencing::Voters;
use crate::protocol::quorum::Decision;
use crate::protocol::remedy::Reader;
use crate::protocol::reply::{NodeReply, Reply};
use crate::protocol::rwlock;
use crate::protocol::value::{self, Carried};
use crate::round::engine::{Deadline, Engine, Released, Until};
use crate::round::fresh;
use crate::round::retry::{Failed, Retry};
use crate::round::waiting::Turn;

/// One acquisition as the application sees it: in its span (wrapped only when a subscriber
/// wants it), its outcome and wait recorded. A macro rather than an async fn: one more async fn
/// around the acquisition loop nests its whole future once more, and moving that cost about
/// 650 instructions per lock (callgrind; `docs/performance.md`'s *What metrics and tracing
/// cost*). For the same reason the loop's future is built where it is awaited, not bound first
/// (a move of about 2 KB), and the result is borrowed to be recorded, not moved through.
macro_rules! acquire_seen {
    ($manager:expr, $wanted:expr, $ttl:expr, $retry:expr) => {{
        let wanted = $wanted;
        let seen = Acquisition::start(wanted.named(), $ttl, $manager.engine.rules.resource_label);
        let result = if seen.span().is_disabled() {
            $manager.acquire_wanted(wanted, $ttl, $retry, &seen).await
        } else {
            let span = seen.span().clone();
            $manager
                .acquire_wanted(wanted, $ttl, $retry, &seen)
                .instrument(span)
                .await
        };
        seen.finish(result.as_ref().map(drop));
        result
    }};
}

/// The lock manager: one connection per Redis master, shared by every lock and every clone.
///
/// Cheap to clone (an `Arc`); create one per set of servers and share it.
#[derive(Debug, Clone)]
pub struct Redlock {
    engine: Arc<Engine>,
}

/// What an acquisition is for: one lock (a resource, or a set all-or-nothing), or any one permit
/// of a semaphore ([`semaphore`](crate::primitives::semaphore)).
enum Wanted {
    Lock(Resources),
    /// A lock whose token comes with its acquisition, whatever the manager's
    /// `fence_on_acquire`: for a caller that takes the token at once (`with_lock`), which spares
    /// it the token's own round trip (`fencing` invariant 8).
    FencedLock(Resources),
    Permit(Permits),
    /// An election's lock, with the candidate's identity (`election` invariant 3).
    Campaign(Resources, String),
}

impl Wanted {
    /// How spans and metrics name it: the resources, or the semaphore's name.
    fn named(&self) -> &Resources {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => resources,
            Wanted::Permit(permits) => permits.named(),
        }
    }

    /// Whether the token comes with the acquisition rather than on request.
    fn fences_now(&self) -> bool {
        matches!(self, Wanted::FencedLock(_) | Wanted::Campaign(..))
    }

    /// The candidate's identity, for an election.
    fn identity(&self) -> Option<&str> {
        match self {
            Wanted::Campaign(_, identity) => Some(identity),
            _ => None,
        }
    }

    /// The keys whose release wakes a waiter: the lock's, or every permit's.
    fn watched(&self) -> &Resources {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => resources,
            Wanted::Permit(permits) => permits.watched(),
        }
    }

    /// The one key of a plain exclusive lock (not a set, a semaphore's permits or a read-write
    /// lock's side): what `waiting` invariant 13 lets a newcomer queue behind.
    fn single_exclusive(&self) -> Option<&str> {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _)
                if resources.access() == Access::Exclusive && resources.keys().len() == 1 =>
            {
                Some(resources.first())
            }
            _ => None,
        }
    }

    /// The keys a last release of a fresh value goes to, to tell a key of another type from a
    /// busy one.
    fn probed(&self) -> &Resources {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => resources,
            Wanted::Permit(permits) => permits.first_key(),
        }
    }

    /// Whether waiters queue in arrival order: for locks and elections, not for semaphores'
    /// permits or read-write locks.
    fn queues(&self, fair: bool) -> bool {
        fair && match self {
            Wanted::Lock(r) | Wanted::FencedLock(r) => r.access() == Access::Exclusive,
            Wanted::Campaign(..) => true,
            Wanted::Permit(_) => false,
        }
    }
}

/// How errors name what was asked for: `a`, `a, b`, or `jobs (3 permits)`.
impl std::fmt::Display for Wanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => resources.fmt(f),
            Wanted::Permit(permits) => permits.fmt(f),
        }
    }
}

/// The longest wait between two attempts held up by a quarantine (invariant 6): each attempt
/// costs the nodes a `SET`, a marker read and a rollback, and triggers their health checks,
/// which see a vouch (`redlock nodes mark`) within two seconds.
const QUARANTINE_POLL: Duration = Duration::from_secs(2);

/// Whether the quarantined nodes of a round are so many that the others cannot make a quorum
/// whatever they answer next (invariant 7): only then does waiting for the quarantine's end
/// decide the acquisition. With fewer, a node that timed out or refused may grant next time.
fn quarantine_blocks_quorum(failure: &RoundFailure) -> bool {
    let quarantined = failure
        .replies
        .iter()
        .filter(|r| matches!(r.reply, Reply::Quarantined(_)))
        .count();
    failure.replies.len() - quarantined < failure.quorum
}

/// `a:1 (first seen without a marker, 58 s left); b:2 (…)`: the quarantined nodes of a round.
fn quarantined_nodes(failure: &RoundFailure) -> String {
    let mut listed = String::new();
    for reply in &failure.replies {
        if let Reply::Quarantined(quarantine) = &reply.reply {
            if !listed.is_empty() {
                listed.push_str("; ");
            }
            listed.push_str(&format!("{} ({quarantine})", reply.node));
        }
    }
    listed
}

/// What every attempt of one acquisition shares.
struct Tries<'a> {
    ttl: Duration,
    ttl_ms: u64,
    /// A candidate's identity, which its lock values carry (`election` invariant 3).
    identity: Option<&'a str>,
    /// Whether the token comes with the acquisition (`fencing` invariant 8).
    fence_now: bool,
    /// When the retry policy's `max_wait` ends: no further permit is tried after it.
    give_up_at: Option<Instant>,
    /// For a read-write lock's writer: how long a refusal keeps new readers out.
    hold_off_ms: u64,
    turn: &'a Turn,
}

/// A lost attempt: its keys (to roll back), its failure, and what the wait before the next
/// one depends on.
struct LostAttempt {
    held: Held,
    failure: RoundFailure,
    /// Every node refused: nothing to roll back (invariant 2).
    set_nowhere: bool,
    /// A quorum put another fair waiter first.
    behind: bool,
}

impl Redlock {
    pub(crate) fn new(engine: Arc<Engine>) -> Self {
        Self { engine }
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The nodes' addresses (without credentials), in configuration order.
    pub fn nodes(&self) -> Vec<String> {
        self.engine
            .nodes
            .iter()
            .map(|n| n.label().to_owned())
            .collect()
    }

    /// How many nodes must grant a request: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        crate::protocol::quorum::majority(self.engine.nodes.len())
    }

    /// Connects to every node and loads the scripts, waiting for all of them (each bounded by
    /// the connect timeout plus the node timeout). Optional: nodes also connect on first use;
    /// calling this first keeps connection set-up out of the first lock's validity.
    ///
    /// Returns each node's reply: `Granted` when it is ready.
    pub async fn connect(&self) -> Vec<NodeReply> {
        let engine = &self.engine;
        let none: Arc<str> = Arc::from("");
        let round = engine
            .round(
                Until::AllReplied,
                Request::Connect,
                &Resources::one(""),
                &none,
                engine.rules.connect_timeout + engine.rules.node_timeout,
            )
            .await;
        engine.label(round.replies)
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
        let background = &self.engine.background;
        background.close();
        background.wait().await;
        background.reopen();
        // The requests won rounds left queued on their connections (invariant 2) are answered
        // before a request queued after them.
        let deadline = Instant::now() + self.engine.rules.node_timeout;
        join_all(self.engine.nodes.iter().map(|node| node.drain(deadline))).await;
    }

    /// Acquires `resource` for `ttl`, retrying by the manager's [`Retry`] policy.
    ///
    /// On success the lock is valid until [`LockInfo::deadline`](crate::LockInfo::deadline): the TTL minus the time the round
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
        self.acquire_with(resource, ttl, &self.engine.rules.retry)
            .await
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
        acquire_seen!(self, Wanted::Lock(Resources::one(resource)), ttl, retry)
    }

    /// [`acquire`](Self::acquire), the token with the acquisition (`Wanted::FencedLock`).
    pub(crate) async fn acquire_fenced_now(
        &self,
        resource: &str,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        let retry = &self.engine.rules.retry;
        acquire_seen!(
            self,
            Wanted::FencedLock(Resources::one(resource)),
            ttl,
            retry
        )
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
        self.acquire_many_with(resources, ttl, &self.engine.rules.retry)
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
        let resources = Resources::set(resources).map_err(|e| telemetry::refused(e.into()))?;
        acquire_seen!(self, Wanted::Lock(resources), ttl, retry)
    }

    /// Acquires the read-write lock `resource` as one of its readers, retrying by the manager's
    /// [`Retry`] policy: any number of readers at once, never together with a writer
    /// ([`acquire_write`](Self::acquire_write)). A writer that is waiting keeps new readers out,
    /// so writers are not starved.
    ///
    /// The returned [`Lock`] is extended, kept alive and released like a lock;
    /// [`LockInfo::is_read`](crate::LockInfo::is_read) says it is a reader's. Its fencing token
    /// is at least every earlier writer's, and every later writer's is larger: the protected
    /// resource accepts a read whose token is at least every write token it has seen, and a
    /// write whose token is larger than every read token and at least every write token
    /// (`docs/primitives.md`'s *Read-write locks*).
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_read(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.acquire_read_with(resource, ttl, &self.engine.rules.retry)
            .await
    }

    /// A single attempt as a reader, no retry. See [`acquire_read`](Self::acquire_read).
    pub async fn try_acquire_read(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.acquire_read_with(resource, ttl, &Retry::once()).await
    }

    /// [`acquire_read`](Self::acquire_read) with a retry policy for this call only.
    pub async fn acquire_read_with(
        &self,
        resource: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        let lock = Resources::read_write(resource, Access::Read);
        acquire_seen!(self, Wanted::Lock(lock), ttl, retry)
    }

    /// Acquires the read-write lock `resource` as its writer, retrying by the manager's
    /// [`Retry`] policy: alone, with no reader and no other writer. While it waits for readers
    /// to finish, no new reader is let in. Its key is a lock's key: a writer and a lock of the
    /// same name exclude each other. See [`acquire_read`](Self::acquire_read) for the tokens.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_write(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.acquire_write_with(resource, ttl, &self.engine.rules.retry)
            .await
    }

    /// A single attempt as the writer, no retry. See [`acquire_write`](Self::acquire_write).
    pub async fn try_acquire_write(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.acquire_write_with(resource, ttl, &Retry::once()).await
    }

    /// [`acquire_write`](Self::acquire_write) with a retry policy for this call only.
    pub async fn acquire_write_with(
        &self,
        resource: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        let lock = Resources::read_write(resource, Access::Write);
        acquire_seen!(self, Wanted::Lock(lock), ttl, retry)
    }

    /// An election's lock, its values carrying `identity` (for [`campaign`](Self::campaign)).
    pub(crate) async fn acquire_as(
        &self,
        election: &str,
        identity: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        let wanted = Wanted::Campaign(Resources::one(election), identity.to_owned());
        acquire_seen!(self, wanted, ttl, retry)
    }

    /// Acquires one of the `permits` permits of the semaphore `semaphore`, retrying by the
    /// manager's [`Retry`] policy: at most `permits` holders at a time, however many ask. Every
    /// client of the semaphore must pass the same `permits`.
    ///
    /// A permit is an ordinary lock on a key of its own, `<semaphore>:permit:<i>`, with `i` in
    /// `0..permits` ([`LockInfo::permit`](crate::LockInfo::permit)): validity, extension,
    /// [`keep_alive`](Lock::keep_alive), release and fencing are a lock's, and the fencing
    /// token grows per permit. An attempt tries the permits one round each, from a random one,
    /// and keeps the first it wins; waiters are woken when any permit is freed. Fair queueing
    /// does not apply. `docs/primitives.md`'s *Semaphores* has the argument.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when every permit was busy (or the nodes unreachable) on the last
    /// attempt, its `resource` reading `semaphore (k permits)`; [`Error::Config`] for 0 or more
    /// than [`MAX_PERMITS`](crate::handles::defaults::MAX_PERMITS) permits, or a TTL that leaves no
    /// validity (nothing is sent then).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub async fn acquire_permit(
        &self,
        semaphore: &str,
        permits: u32,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        self.acquire_permit_with(semaphore, permits, ttl, &self.engine.rules.retry)
            .await
    }

    /// A single attempt at a permit (every permit tried once), no retry. See
    /// [`acquire_permit`](Self::acquire_permit).
    pub async fn try_acquire_permit(
        &self,
        semaphore: &str,
        permits: u32,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        self.acquire_permit_with(semaphore, permits, ttl, &Retry::once())
            .await
    }

    /// [`acquire_permit`](Self::acquire_permit) with a retry policy for this call only.
    pub async fn acquire_permit_with(
        &self,
        semaphore: &str,
        permits: u32,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        let permits = Permits::new(semaphore, permits).map_err(|e| telemetry::refused(e.into()))?;
        acquire_seen!(self, Wanted::Permit(permits), ttl, retry)
    }

    /// The acquisition loop, for one resource or a set ([`Resources`] decides the wire format),
    /// or a semaphore's permits: attempt, and until one wins, roll back, wait, and attempt
    /// again. `seen` is the acquisition as telemetry sees it: its span learns how many attempts
    /// it took, and the retry schedule counts from its start.
    async fn acquire_wanted(
        &self,
        wanted: Wanted,
        ttl: Duration,
        retry: &Retry,
        seen: &Acquisition,
    ) -> Result<Lock, Error> {
        let engine = &self.engine;
        let ttl_ms = engine.check_ttl(ttl)?;
        // The library's own key names are not resources.
        for name in wanted.named().keys() {
            check_resource(name)?;
        }
        let mut schedule = retry.schedule(seen.started());
        // Fair waiters queue from their first attempt, in one place for the whole acquisition
        // (`waiting` invariant 3).
        let mut turn = Turn::new(
            wanted.queues(engine.rules.fair),
            retry.max_delay(),
            engine.rules.node_timeout,
        );
        let writer = matches!(&wanted, Wanted::Lock(r) if r.access() == Access::Write);
        if writer {
            // A read-write lock's writer names itself among the waiting writers, and leaves
            // them when it gives up (`rwlock` invariant 2).
            turn = turn.named();
        }
        // Gives the place up if this future is dropped between rounds (`waiting` invariant 4; a
        // writer's place among the waiting writers likewise): a release of a fresh value nobody
        // holds (invariant 3), which only leaves the queue.
        let place_kept = turn.id().map(|id| {
            let resources = wanted.named().clone();
            Held::new(
                Arc::clone(engine),
                resources,
                value::new(fresh::bytes(), Carried::NONE),
                Some(id),
            )
        });
        // How long a refused writer keeps new readers out (`rwlock` invariant 2).
        let hold_off_ms = if writer {
            let rules = &engine.rules;
            rwlock::hold_off(retry.max_delay(), rules.node_timeout, rules.max_ttl)
        } else {
            0
        };
        // `waiting` invariant 13: not ahead of this manager's waiters for the same lock.
        if engine.rules.notify
            && !engine.rules.fair
            && let Some(resource) = wanted.single_exclusive()
            && engine.waiters.is_contended(resource)
            && let Some(wait) = schedule.deferral(Instant::now())
        {
            // A wait like any other: counted in the waiters gauge.
            let _waiting = Waiting::start();
            turn.wait(
                Some(&engine.waiters),
                wanted.watched(),
                wait,
                false,
                |wait| wait,
            )
            .await;
        }
        let mut told_quarantine = false;
        loop {
            let attempts = seen.attempt();
            tracing::trace!(n = attempts, "attempt");
            let tries = Tries {
                ttl,
                ttl_ms,
                identity: wanted.identity(),
                fence_now: wanted.fences_now(),
                give_up_at: schedule.give_up_at(),
                hold_off_ms,
                turn: &turn,
            };
            let lost = match self.attempt_wanted(&wanted, &tries).await {
                Ok(lock) => {
                    if let Some(place) = place_kept {
                        place.disarm(); // the lock's release leaves the queue
                    }
                    return Ok(lock);
                }
                Err(lost) => lost,
            };
            let LostAttempt {
                held,
                mut failure,
                set_nowhere,
                behind,
            } = *lost;
            let failed = if failure.cause() == Cause::Busy {
                Failed::Busy
            } else {
                Failed::Otherwise
            };
            let mut next = schedule.next_delay(Instant::now(), failed);
            // Invariant 7: a quarantine that keeps a quorum from voting and ends after the last
            // attempt is not waited for.
            if let (Some(_), Cause::Quarantined { ready_in, .. }) = (next, failure.cause())
                && quarantine_blocks_quorum(&failure)
                && !schedule.reaches(ready_in, QUARANTINE_POLL)
            {
                next = None;
            }
            // Invariant 2; the last rollback also gives up the queue place (`waiting` invariant
            // 4) and tells a key of another type from a busy one.
            match next {
                Some(_) if set_nowhere => held.set_nowhere(),
                Some(_) => drop(held.roll_back().await),
                None => {
                    let rollback = held.give_up().await;
                    self.explain_refusals(&mut failure, &rollback, wanted.probed())
                        .await;
                }
            }
            let not_acquired = |failure| Error::NotAcquired {
                resource: wanted.to_string(),
                attempts,
                failure: Box::new(failure),
            };
            let Some(delay) = next else {
                if let Some(place) = place_kept {
                    place.disarm(); // the last rollback left the queue
                }
                return Err(not_acquired(failure));
            };
            let waiters = engine.rules.notify.then_some(&engine.waiters);
            let waiting = Waiting::start();
            match failure.cause() {
                // Invariant 6: a quarantine is waited out quietly, not polled.
                Cause::Quarantined {
                    ready_in, remedy, ..
                } => {
                    if !told_quarantine {
                        told_quarantine = true;
                        let advice = remedy
                            .map(|r| format!("; {}", r.advice(r.call(Reader::Rust))))
                            .unwrap_or_default();
                        tracing::warn!(
                            resource = %wanted,
                            ready_in_s = ready_in.as_secs_f64().ceil(),
                            "waiting for quarantined nodes: {}{advice}",
                            quarantined_nodes(&failure)
                        );
                    }
                    let wait = ready_in.min(QUARANTINE_POLL).max(delay);
                    tokio::time::sleep(schedule.capped(wait, Instant::now())).await;
                }
                _ => {
                    turn.wait(waiters, wanted.watched(), delay, behind, |wait| {
                        schedule.capped(wait, Instant::now())
                    })
                    .await;
                }
            }
            drop(waiting);
            if schedule.expired(Instant::now()) {
                // Nothing woke us before the deadline: give up without another attempt. The
                // round was rolled back; a release of a fresh value (the queue place's, if
                // any) gives up the queue place and tells a key of another type from a busy
                // one, as the last rollback does.
                let last = place_kept.unwrap_or_else(|| {
                    let probed = wanted.probed().clone();
                    Held::new(
                        Arc::clone(engine),
                        probed,
                        value::new(fresh::bytes(), Carried::NONE),
                        None,
                    )
                });
                let rollback = last.give_up().await;
                self.explain_refusals(&mut failure, &rollback, wanted.probed())
                    .await;
                return Err(not_acquired(failure));
            }
        }
    }

    /// One attempt at what is wanted: the lock, or the semaphore's permits one at a time from a
    /// random one, keeping the first won (`semaphore` invariant 4: the others are rolled back in
    /// the background, so the next is tried at once). A lost attempt at permits is the last
    /// permit's.
    async fn attempt_wanted(
        &self,
        wanted: &Wanted,
        tries: &Tries<'_>,
    ) -> Result<Lock, Box<LostAttempt>> {
        let permits = match wanted {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => {
                return self.attempt(resources, tries).await;
            }
            Wanted::Permit(permits) => permits,
        };
        let ((mut permit, mut resources), mut rest) =
            permits.from(u32::from_le_bytes(fresh::bytes()));
        loop {
            let lost = match self.attempt(resources, tries).await {
                Ok(lock) => return Ok(lock.with_permit(permit)),
                Err(lost) => lost,
            };
            // The next permit only if this one is busy (a quorum holds it): when nodes did not
            // answer, the next round would wait for them as long, and `max_wait` still holds.
            let busy = lost.failure.cause() == Cause::Busy;
            let out_of_time = tries.give_up_at.is_some_and(|at| Instant::now() >= at);
            let next = match rest.next() {
                Some(next) if busy && !out_of_time => next,
                _ => return Err(lost),
            };
            let LostAttempt {
                held, set_nowhere, ..
            } = *lost;
            if set_nowhere {
                held.set_nowhere();
            } else {
                drop(held); // released in the background (`lock` invariant 2)
            }
            (permit, resources) = next;
        }
    }

    /// One attempt: the `SET` round, then (fencing on, when the votes did not agree on the
    /// token) the round that stores it. Returns the lock, or what the loop needs to roll the
    /// attempt back and wait.
    async fn attempt(
        &self,
        resources: &Resources,
        tries: &Tries<'_>,
    ) -> Result<Lock, Box<LostAttempt>> {
        let &Tries {
            ttl,
            ttl_ms,
            identity,
            fence_now,
            hold_off_ms,
            turn,
            ..
        } = tries;
        let engine = &self.engine;
        let advance = engine.rules.fence;
        // Armed before the first request: dropping this future mid-round releases (invariant 3
        // keeps that release from touching anybody else's lock).
        let value = match identity {
            // `value` invariant 1: the holder's late-release bound travels with the value.
            None => value::new(fresh::bytes(), engine.rules.carried()),
            Some(identity) => value::campaign(fresh::bytes(), identity, engine.rules.carried()),
        };
        let mut held = Held::new(Arc::clone(engine), resources.clone(), value, turn.id());
        let set = match (turn.place(), resources.access()) {
            (Some(place), _) => Request::SetQueued {
                ttl_ms,
                advance,
                place,
            },
            (None, Access::Read | Access::Write) => Request::SetReadWrite {
                ttl_ms,
                advance,
                hold_off_ms,
                writer: turn.id(),
            },
            (None, Access::Exclusive) => match advance {
                // `fencing` invariant 8: a lock's token is issued on request, unless the
                // manager fences every acquisition, or the caller takes it at once, or the lock
                // is a campaign's (whose counter must advance with its `SET`: `election`
                // invariant 5).
                Some(advance)
                    if fence_now
                        || engine.rules.fence_on_acquire
                        || engine.nodes.len() > Voters::MAX_NODES =>
                {
                    Request::SetFenced {
                        ttl_ms,
                        advance,
                        scripted: identity.is_some(),
                    }
                }
                _ => Request::Set { ttl_ms },
            },
        };
        let on_request = matches!(set, Request::Set { .. }) && advance.is_some();
        let mut round = engine
            .round(
                Until::Won,
                set,
                resources,
                held.value(),
                engine.rules.node_timeout,
            )
            .await;
        // A release must not overtake a `SET` still on its way (engine invariant 2).
        held.follows(round.stragglers.take());
        // Invariant 2's exception: every node answered, and none set our value.
        let set_nowhere = round.replies.iter().all(|r| *r == Reply::Refused);
        // A quorum puts another waiter first: we cannot win before a release names us.
        let behind = round.behind >= round.quorum;
        let mut deadline = engine.deadline_if_won(&round, ttl);
        let mut fence = None;
        if let (Some(valid_until), Some(advance), Some(token)) =
            (deadline, advance, round.proposals.token())
        {
            // Invariant 5 (`fencing` invariant 1): the token is stored on a quorum before anybody
            // may use it, by the acquisition itself when its votes agree, else by a round of its
            // own.
            if !token.stored {
                let store = Request::Fence {
                    token: token.value,
                    retention_ms: advance.retention_ms,
                };
                round = engine
                    .round(
                        Until::WonThenDriven,
                        store,
                        resources,
                        held.value(),
                        engine.rules.node_timeout,
                    )
                    .await;
                let stored = round.decision == Decision::Won && valid_until > Instant::now();
                deadline = stored.then_some(valid_until);
            }
            fence = Some(token.value);
        }
        let voters = on_request.then_some(round.voted);
        match deadline {
            Some(deadline) => Ok(Lock::new(held, deadline, fence, voters)),
            None => Err(Box::new(LostAttempt {
                held,
                failure: round.failure(engine),
                set_nowhere,
                behind,
            })),
        }
    }

    /// Extends a lock known only by its resource and value (e.g. taken by another process of
    /// ours, as the CLI does) to `ttl` from now; returns its new deadline. Under the holder's
    /// [`lock_delay`](crate::Builder::lock_delay), whatever this manager's: the keys get the TTL
    /// plus the delay the holder carried in the value (engine invariant 9).
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
        self.engine
            .extend(
                &Resources::one(resource),
                &Arc::from(value),
                ttl,
                Deadline::Unknown,
            )
            .await
    }

    /// Releases a lock known only by its resource and value on every node. Deletes nothing that
    /// does not hold `value`.
    ///
    /// Success ([`Released::cause`] is `None`) means a quorum held `value` and deleted it: the
    /// lock is free. With a [`lock_delay`](crate::Builder::lock_delay), a release that reaches
    /// the nodes after the lock's validity deletes nothing: each node keeps the key until
    /// validity plus delay (it judges from the key's remaining time, allowing for clock drift
    /// up to `max_ttl`'s), so the lock stays unavailable as if nobody had released it, and the
    /// cause is [`Cause::LeftToDelay`](crate::Cause::LeftToDelay). A lock whose TTL is shorter
    /// than that drift allowance (`max_ttl` / 100 + 2 ms) is so judged whenever it is released
    /// by value.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the key on some nodes until it expires.
    pub async fn release_value(&self, resource: &str, value: &str) -> Released {
        self.engine
            .release(
                &Resources::one(resource),
                &Arc::from(value),
                None,
                Deadline::Unknown,
                Until::Decided,
            )
            .await
    }
}

impl Redlock {
    /// A key of another type makes `SET NX` fail like a held lock; the rollback's script tells
    /// the two apart, at no extra cost, so the failure's cause is
    /// [`Cause::WrongType`](crate::Cause) rather than busy. Except for a read-write lock's
    /// readers (a sorted set at the key): they hold the lock, so a lock they refused is busy. Only
    /// then, on a failure already reported as of another type, are the nodes read once more.
    async fn explain_refusals(
        &self,
        failure: &mut RoundFailure,
        rollback: &Released,
        resources: &Resources,
    ) {
        let mut other_type = false;
        for (reply, rolled) in failure.replies.iter_mut().zip(&rollback.replies) {
            if let (Reply::Refused | Reply::Pending, Reply::WrongType(_)) =
                (&reply.reply, &rolled.reply)
            {
                reply.reply = rolled.reply.clone();
                other_type = true;
            }
        }
        if !other_type || resources.keys().len() != 1 || resources.access() != Access::Exclusive {
            return;
        }
        let states = self.status(resources.first()).await;
        for (reply, state) in failure.replies.iter_mut().zip(states) {
            if matches!(reply.reply, Reply::WrongType(_))
                && matches!(state.state, crate::NodeState::Readers { .. })
            {
                reply.reply = Reply::Refused;
            }
        }
    }
}
