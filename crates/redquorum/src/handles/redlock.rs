//! The lock manager as callers see it: [`Redlock`], its acquisitions of every kind and the
//! operations on a lock known only by its value. Each acquisition names what it wants and hands
//! it to the algorithm ([`acquire`](crate::round::acquire)), which runs it top to bottom; this file
//! only says, for the application, what each call means and guarantees.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tracing::Instrument;

use crate::base::error::{ConfigError, Error};
use crate::base::resources::{Access, Resources};
use crate::base::semaphore::Permits;
use crate::base::telemetry::{self, Acquisition};
use crate::handles::hold;
use crate::handles::lock::{Lock, LockInfo};
use crate::handles::request::{Acquired, Kind, Request};
use crate::nodes::mark;
use crate::nodes::request as node_request;
use crate::protocol::mark::{Mark, Vouch};
use crate::protocol::reply::NodeReply;
use crate::round::acquire::Wanted;
use crate::round::engine::{Deadline, Engine, Released, Until};
use crate::round::retry::Retry;

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
            $manager.engine.acquire(wanted, $ttl, $retry, &seen).await
        } else {
            let span = seen.span().clone();
            $manager
                .engine
                .acquire(wanted, $ttl, $retry, &seen)
                .instrument(span)
                .await
        };
        seen.finish(result.as_ref().map(drop));
        result.map(Lock::won)
    }};
}

/// The lock manager: one connection per Redis master, shared by every lock and every clone.
///
/// Cheap to clone (an `Arc`); create one per set of servers and share it.
#[derive(Debug, Clone)]
pub struct Redlock {
    engine: Arc<Engine>,
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
                node_request::Request::Connect,
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

    /// Acquires what `request` asks for, a lock of any kind or an election's leadership, as
    /// plain data ([`Request`]): what the Python and Node packages and the CLI call, so that one
    /// path leads every language to the algorithm. It is the typed method of the request's kind
    /// ([`acquire`](Self::acquire), [`acquire_many`](Self::acquire_many),
    /// [`acquire_read`](Self::acquire_read), [`acquire_write`](Self::acquire_write),
    /// [`acquire_permit`](Self::acquire_permit), [`campaign`](Self::campaign)) with the
    /// request's retry policy, or the manager's: the same guarantees, errors and cancel safety.
    ///
    /// # Errors
    /// Those of the kind's method; [`Error::Config`] also for a kind other than [`Kind::Lock`]
    /// with other than exactly one resource (nothing is sent then).
    pub async fn request(&self, request: &Request) -> Result<Acquired, Error> {
        let retry = request.retry.as_ref().unwrap_or(&self.engine.rules.retry);
        let ttl = request.ttl;
        let refused = |e: ConfigError| telemetry::refused(e.into());
        if let Kind::Campaign { identity } = &request.kind {
            let election = request.one().map_err(refused)?;
            let guard = self.campaign_with(election, identity, ttl, retry).await?;
            return Ok(Acquired::KeptAlive(guard));
        }
        let wanted = request.wanted().map_err(refused)?;
        acquire_seen!(self, wanted, ttl, retry).map(Acquired::Lock)
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
    /// than [`MAX_PERMITS`](crate::base::defaults::MAX_PERMITS) permits, or a TTL that leaves no
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

    /// Vouches, as an operator, that every node of this manager lost nothing: each gets a
    /// marker that vouches at once for its current run, so clients trust it without waiting out
    /// the restart quarantine (`redlock nodes mark`). What is refused, and what overrides it, is
    /// [`Vouch`]'s: a node that started less than `max_ttl` ago only as [`Vouch::BrandNew`]
    /// (its uptime is the one evidence that it did not restart empty while a lock was held);
    /// a replica, dropped data, a marker that records a loss or a node new to a marked group only
    /// as [`Vouch::Forced`]. A marker that already vouches is left as it is. A first-sight
    /// marker still pending (a client saw the node without one) is vouched for under the same
    /// id, so clients already waiting trust it at their next health check (within 2 s).
    ///
    /// Vouching for a server that did lose data less than `max_ttl` ago (flushed, restarted
    /// without persistence) lets a lock be granted twice: this is the operator's word against the
    /// evidence. The uptime is the server's own, a wall-clock difference: on a host whose clock
    /// stepped forward since the server started it overstates (`docs/guarantees.md`).
    ///
    /// This manager checks the nodes it marked again at once: its own next lock needs no wait.
    ///
    /// Returns each node's address (without credentials) and what was done there.
    ///
    /// # Cancel safety
    /// Each node's marker is written by one script call: dropping the future leaves every node
    /// either marked or as it was.
    pub async fn mark_nodes(&self, vouch: Vouch) -> Vec<(String, Mark)> {
        let rules = &self.engine.rules;
        mark::mark_nodes(
            &self.engine.nodes,
            vouch,
            rules.max_ttl,
            rules.connect_timeout,
        )
        .await
    }

    /// Acquires `resource` (with the manager's [`Retry`](crate::Retry) policy), keeps it alive
    /// with the default [`HoldOptions`](crate::HoldOptions), runs `work`, and releases the lock.
    ///
    /// If the lock is lost before `work` finishes, the work's future is dropped at once, so it
    /// stops at its next `.await`; work that must not be cut anywhere should check
    /// [`LockInfo::is_lost`] between steps and return early instead.
    ///
    /// # Errors
    /// What [`acquire`](Self::acquire) returns if the lock cannot be taken; [`Error::HoldLost`]
    /// if it was lost before `work` finished (the work was stopped then). Once the work has
    /// finished, its output is returned whatever the release finds.
    ///
    /// # Cancel safety
    /// Dropping the future while acquiring is [`acquire`](Self::acquire)'s cancel safety; while
    /// the work runs, it drops the work and the guard, which releases the lock in the background;
    /// while releasing, it is [`Guard::release`](crate::Guard::release)'s.
    pub async fn with_lock<T, F, Fut>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(LockInfo) -> Fut,
        Fut: Future<Output = T>,
    {
        // The work gets the lock's info, and no handle to ask for a token with: the token comes
        // with the acquisition, in its round trip (`fencing` invariant 8).
        let guard = self
            .acquire_fenced_now(resource, ttl)
            .await?
            .keep_alive(ttl);
        let info = LockInfo::clone(&guard);
        let output = tokio::select! {
            // A loss noticed together with the output wins: we cannot tell the work finished
            // while the lock was still ours.
            biased;
            () = guard.lost() => None,
            output = work(info) => Some(output),
        };
        hold::work_done(resource, output, guard.release().await)
    }
}
