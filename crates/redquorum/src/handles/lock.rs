//! The held lock: its value, its deadline, and the promise to clean up.
//!
//! All state of one acquisition lives in its handle, never in the manager: there is no reusable
//! mutex object that could report "valid" before locking or after unlocking. `release(self)`
//! consumes the handle, so a released lock cannot be used again.
//!
//! # Invariants
//! 1. A handle is valid only while its deadline is in the future and no extension has failed.
//!    Once invalid it stays invalid: [`Lock::extend`] never revives it.
//! 2. A handle (or an acquisition round in progress) that is dropped without being released
//!    starts a best-effort release on every node, in the background, on the current Tokio
//!    runtime. `Drop` never blocks, never awaits, and never panics: outside a runtime it only
//!    logs, and the keys expire with their TTL.
//! 3. **An extension never leaves the deadline later than the keys allow.** Before an extension
//!    to `ttl` is sent, the deadline becomes `min(deadline, now + ttl − drift)`: a shorter TTL
//!    may already have shortened the keys on a majority by the time the round is cancelled or
//!    fails, and every node that applies it does so after `now` (validity invariant 1). A
//!    longer TTL cannot shorten any key, so the old deadline stays a safe bound until the round
//!    is won.

use std::fmt;
use std::sync::Arc;

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::base::error::{ConfigError, Error};
use crate::base::resources::Resources;
use crate::protocol::fencing::Voters;
use crate::protocol::validity;
use crate::round::acquire::Won;
use crate::round::engine::{Deadline, Engine, Released};
use crate::round::held::Held;

/// What a lock knows about itself: its resources, its value, its fencing token, and how long it
/// may be relied on. Written once for every handle: a [`Lock`] and a
/// [`Guard`](crate::Guard) dereference to theirs, and [`Redlock::with_lock`]'s work gets a
/// clone.
///
/// [`Redlock::with_lock`]: crate::Redlock::with_lock
#[derive(Debug, Clone)]
pub struct LockInfo {
    resources: Resources,
    value: Arc<str>,
    fence: Fence,
    permit: Option<u32>,
    time: Time,
}

/// Where a lock's fencing token stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fence {
    /// The manager has fencing off.
    Off,
    /// Issued, with the acquisition or on request.
    Issued(u64),
    /// To be issued on request, counted on these nodes (`fencing` invariant 8).
    OnRequest(Voters),
}

/// How a lock's validity is known.
#[derive(Debug, Clone)]
enum Time {
    /// A lock nobody extends in the background: valid until `deadline` unless an extension
    /// failed (invariant 1).
    Fixed { deadline: Instant, lost: bool },
    /// A lock kept alive by a guard's task ([`hold`](crate::handles::hold)).
    Kept(Arc<dyn KeptAlive>),
}

/// What a keep-alive task tells about the lock it keeps.
pub(crate) trait KeptAlive: fmt::Debug + Send + Sync {
    /// The deadline the last extension reached.
    fn deadline(&self) -> Instant;
    /// The time left before the lock counts as lost at `now`; zero once it is.
    fn remaining(&self, now: Instant) -> Duration;
    /// A token that fires when the lock is lost.
    fn lost_token(&self) -> CancellationToken;
}

impl LockInfo {
    /// The locked resource (the Redis key); for a lock on several resources, the first of
    /// [`resources`](Self::resources).
    pub fn resource(&self) -> &str {
        self.resources.first()
    }

    /// Every locked resource, sorted and without duplicates (one for [`Redlock::acquire`]).
    ///
    /// [`Redlock::acquire`]: crate::Redlock::acquire
    pub fn resources(&self) -> &[String] {
        self.resources.keys()
    }

    /// The random value that identifies this acquisition: 40 hex characters, followed under a
    /// lock-delay by `-` and the holder's late-release bound in milliseconds (`value.rs`).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The fencing token of this lock, once issued: larger than every token of an earlier
    /// acquisition of this resource, and smaller than every token of a later one. Pass it to
    /// the protected resource, which must refuse any write carrying a smaller token than the
    /// largest it has seen. A lock's token is issued on request ([`Lock::fence`],
    /// [`Guard::fence`](crate::Guard::fence)); read-write holds, campaigns, fair waiters,
    /// [`Redlock::with_lock`](crate::Redlock::with_lock)'s work, and every lock of a manager
    /// that fences on acquisition
    /// ([`Builder::fence_on_acquire`](crate::Builder::fence_on_acquire)), have theirs from the
    /// start. `None` before, and when the manager has fencing off.
    pub fn fence(&self) -> Option<u64> {
        match self.fence {
            Fence::Issued(token) => Some(token),
            Fence::Off | Fence::OnRequest(_) => None,
        }
    }

    /// The token, issued now if it was not yet (`fencing` invariant 8), and kept.
    pub(crate) async fn issue_fence(&mut self, engine: &Arc<Engine>) -> Result<u64, Error> {
        let voters = match self.fence {
            Fence::Issued(token) => return Ok(token),
            Fence::Off => {
                return Err(Error::Config(ConfigError::InvalidSetting {
                    setting: "fencing",
                    reason: "this manager has fencing off (Builder::fencing(false)): its locks \
                             have no tokens"
                        .to_owned(),
                }));
            }
            Fence::OnRequest(voters) => voters,
        };
        if !self.is_valid() {
            return Err(Error::NotFenced {
                resource: self.resources.to_string(),
                failure: None,
            });
        }
        let token = engine
            .fence_on_request(&self.resources, &self.value, voters, self.deadline())
            .await?;
        // A kept-alive lock counts as lost a margin before its deadline: no token past that.
        if !self.is_valid() {
            return Err(Error::NotFenced {
                resource: self.resources.to_string(),
                failure: None,
            });
        }
        self.fence = Fence::Issued(token);
        Ok(token)
    }

    /// This info, with the token `from` was issued if it has none (a guard's, for the lock its
    /// keeper hands back).
    pub(crate) fn keeping_fence(mut self, from: &LockInfo) -> Self {
        if let (Fence::OnRequest(_), Fence::Issued(token)) = (self.fence, from.fence) {
            self.fence = Fence::Issued(token);
        }
        self
    }

    /// Whether this is a reader's hold on a read-write lock
    /// ([`Redlock::acquire_read`](crate::Redlock::acquire_read)); a writer's, a permit and a lock
    /// are exclusive.
    pub fn is_read(&self) -> bool {
        self.resources.access() == crate::base::resources::Access::Read
    }

    /// For a semaphore's permit ([`Redlock::acquire_permit`]), which one it is, in
    /// `0..permits`; `None` for a lock. Its [`fence`](Self::fence) grows per permit: a
    /// resource the holders share keeps the largest token it has seen *for each permit*.
    ///
    /// [`Redlock::acquire_permit`]: crate::Redlock::acquire_permit
    pub fn permit(&self) -> Option<u32> {
        self.permit
    }

    /// The monotonic instant until which the lock's keys are valid on a quorum, moved forward by
    /// every successful extension. A kept-alive lock is given up a safety margin earlier
    /// ([`HoldOptions::margin`](crate::HoldOptions::margin)); see
    /// [`remaining`](Self::remaining).
    pub fn deadline(&self) -> Instant {
        match &self.time {
            Time::Fixed { deadline, .. } => *deadline,
            Time::Kept(kept) => kept.deadline(),
        }
    }

    /// The time left before the lock counts as lost: up to the deadline, or for a kept-alive
    /// lock up to the margin before it; zero once lost.
    pub fn remaining(&self) -> Duration {
        let now = Instant::now();
        match &self.time {
            Time::Fixed { lost: true, .. } => Duration::ZERO,
            Time::Fixed { deadline, .. } => deadline.saturating_duration_since(now),
            Time::Kept(kept) => kept.remaining(now),
        }
    }

    /// Whether the lock may still be relied on (invariant 1); check it before each step. Time
    /// alone makes it false, even if a keep-alive task could not run.
    pub fn is_valid(&self) -> bool {
        !self.remaining().is_zero()
    }

    /// `!is_valid()`: the holder must stop relying on the lock. Final.
    pub fn is_lost(&self) -> bool {
        !self.is_valid()
    }

    /// A token that fires when a kept-alive lock is lost (and once its guard is released or
    /// dropped, or `with_lock` returns); `None` for a [`Lock`] nobody keeps alive, which only
    /// time and its own extensions end.
    pub fn lost_token(&self) -> Option<CancellationToken> {
        match &self.time {
            Time::Fixed { .. } => None,
            Time::Kept(kept) => Some(kept.lost_token()),
        }
    }

    /// The same lock, now kept alive by a task that reports through `kept`.
    pub(crate) fn kept(&self, kept: Arc<dyn KeptAlive>) -> Self {
        Self {
            time: Time::Kept(kept),
            ..self.clone()
        }
    }

    pub(crate) fn resource_set(&self) -> &Resources {
        &self.resources
    }
}

/// A lock held on a quorum of nodes; what it knows about itself is its [`LockInfo`], which it
/// dereferences to (`lock.value()`, `lock.is_valid()`, ...).
///
/// Valid until [`deadline`](LockInfo::deadline) unless an extension fails. Release it with
/// [`release`](Self::release), or hand it to another process with [`detach`](Self::detach); a
/// handle dropped unreleased is released in the background (best effort, on the current Tokio
/// runtime; outside a runtime it simply expires with its TTL).
///
/// A lock that nobody binds is released at once, so the compiler says so (`#[must_use]`): this
/// statement, which would hold the lock for no time at all, does not build under
/// `#![deny(unused_must_use)]`:
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # async fn f(manager: redquorum::Redlock) -> Result<(), redquorum::Error> {
/// manager.acquire("job", std::time::Duration::from_secs(10)).await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "a lock is released as soon as it is dropped: bind it (`let lock = ...`) and release it when the work is done"]
pub struct Lock {
    held: Held,
    info: LockInfo,
}

impl std::ops::Deref for Lock {
    type Target = LockInfo;

    fn deref(&self) -> &LockInfo {
        &self.info
    }
}
impl Lock {
    /// The lock an acquisition won: `fence` its token when it came with the acquisition, else
    /// `voters` the nodes it is issued on when asked (`fencing` invariant 8), with fencing on.
    pub(crate) fn won(won: Won) -> Self {
        let Won {
            mut held,
            deadline,
            fence,
            voters,
            permit,
        } = won;
        held.valid_until = Some(deadline);
        let fence = match (fence, voters) {
            (Some(token), _) => Fence::Issued(token),
            (None, Some(voters)) => Fence::OnRequest(voters),
            (None, None) => Fence::Off,
        };
        let info = LockInfo {
            resources: held.resources.clone(),
            value: Arc::clone(&held.value),
            fence,
            permit,
            time: Time::Fixed {
                deadline,
                lost: false,
            },
        };
        Self { held, info }
    }

    /// The manager this lock belongs to: its drift factor, and its nodes for a release by value.
    pub(crate) fn shared(&self) -> &Arc<Engine> {
        &self.held.shared
    }

    /// This lock's info, kept alive from now on by a task that reports through `kept`.
    pub(crate) fn info_kept(&self, kept: Arc<dyn KeptAlive>) -> LockInfo {
        self.info.kept(kept)
    }

    /// Moves the deadline (only a [`Time::Fixed`] one: a lock is kept alive only by value).
    fn set_time(&mut self, deadline: Instant, lost: bool) {
        self.info.time = Time::Fixed { deadline, lost };
        self.held.valid_until = Some(deadline);
        self.held.lost = lost;
    }

    /// Marks the lock lost although its deadline has not passed (its guard gave it up at the
    /// margin): a release from now on is a lost lock's (engine invariant 5).
    pub(crate) fn mark_lost(&mut self) {
        self.set_time(self.deadline(), true);
    }

    /// Gives the lock up without releasing it: it stays held until its TTL runs out, or until
    /// somebody who knows its value releases it ([`Redlock::release_value`], the CLI's
    /// `release`). For handing a lock to another process; returns what identifies it.
    ///
    /// The acquisition's requests still in flight are finished in the background;
    /// [`Redlock::settle`] waits for them, so that the lock is on every node that answers
    /// before this process exits.
    ///
    /// [`Redlock::release_value`]: crate::Redlock::release_value
    /// [`Redlock::settle`]: crate::Redlock::settle
    pub fn detach(self) -> LockInfo {
        let Lock { held, info } = self;
        held.detach();
        info
    }

    /// The lock's fencing token ([`LockInfo::fence`]), issued now on its first call: one round
    /// trip to the nodes, or two when their counters disagree (`fencing` invariant 8); later
    /// calls return the same token at once. Ask for it while the lock is valid, before the
    /// protected writes: a holder whose lock was taken over meanwhile gets no token.
    ///
    /// # Errors
    /// [`Error::NotFenced`] if fewer than a quorum of the nodes that voted for the lock still
    /// held it and answered in time, or its validity ran out first; [`Error::Config`] if the
    /// manager has fencing off.
    ///
    /// # Cancel safety
    /// Dropping the future may leave counters advanced on some nodes, which only makes later
    /// tokens larger; the next call starts again.
    pub async fn fence(&mut self) -> Result<u64, Error> {
        let engine = Arc::clone(&self.held.shared);
        self.info.issue_fence(&engine).await
    }

    /// Resets the lock's TTL to `ttl` from now on every node that still holds our value (for a
    /// set: on every node where all of its keys still do; the others change nothing).
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lock was no longer valid, or fewer than a quorum extended it
    /// within the new validity; the handle is then invalid for good.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the handle's deadline at the earlier of the old one and what
    /// the new TTL allows (invariant 3), which is safe whichever nodes applied it: with a
    /// shorter TTL, some nodes may already have shortened their key.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        self.extend_giving_up(ttl, |_| true).await
    }

    /// [`extend`](Self::extend), for a keeper that tries again while the lock is valid
    /// (`hold` invariant 9): a failure that does not show the lock gone (too few nodes
    /// answered, quarantined nodes, a quorum too late) leaves the handle valid until its
    /// deadline, as if the round had not been sent. Every other failure is final, as for
    /// `extend`.
    pub(crate) async fn extend_or_retry(&mut self, ttl: Duration) -> Result<(), Error> {
        self.extend_giving_up(ttl, |e| !e.may_pass()).await
    }

    /// `extend`, where a failure for which `gives_up` is true makes the handle invalid for good.
    async fn extend_giving_up(
        &mut self,
        ttl: Duration,
        gives_up: impl Fn(&Error) -> bool,
    ) -> Result<(), Error> {
        if !self.is_valid() {
            self.set_time(self.deadline(), true);
            return Err(Error::LockLost {
                resource: self.held.resources.to_string(),
                failure: None,
            });
        }
        // Invariant 3. A TTL that leaves no validity is refused before anything is sent.
        if let Some(bound) =
            validity::deadline(Instant::now(), ttl, self.held.shared.rules.drift_factor)
        {
            self.set_time(self.deadline().min(bound), false);
        }
        match self
            .held
            .shared
            .extend(&self.held.resources, &self.held.value, ttl, Deadline::Known)
            .await
        {
            Ok(deadline) => {
                self.set_time(deadline, false);
                Ok(())
            }
            Err(e @ Error::Config(_)) => Err(e),
            Err(e) if !gives_up(&e) => Err(e),
            Err(e) => {
                self.set_time(self.deadline(), true);
                Err(e)
            }
        }
    }

    /// Releases the lock on every node and reports how many confirmed. A lock that is already
    /// lost ([`is_lost`](LockInfo::is_lost)) while the manager has a
    /// [`lock_delay`](crate::Builder::lock_delay) is not deleted: its keys are kept for the delay
    /// from now, since this holder's last writes may still be in flight (so is a lost lock
    /// dropped unreleased).
    ///
    /// # Cancel safety
    /// Dropping the future half-way starts the same release again in the background.
    pub async fn release(self) -> Released {
        self.held.release().await
    }
}
