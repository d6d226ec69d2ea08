//! Auto-extension: keeping a lock alive for as long as a job runs, and saying at once when it
//! is gone.
//!
//! One file because the guard, its keeper task and its schedule share one loss rule (the
//! invariants below); a third of it is tests.
//!
//! A short TTL keeps a crashed holder from blocking everybody for long; real jobs outlive it.
//! [`Lock::keep_alive`] turns a lock into a [`Guard`] whose background task extends it well
//! before its validity runs out. Extension can fail (keys deleted or taken over, nodes down or
//! stalled), and a holder that keeps working on a lost lock breaks mutual exclusion, so the guard
//! fires a [`CancellationToken`] the moment it can no longer vouch for the lock, and
//! [`Redlock::with_lock`] stops the work by dropping its future.
//!
//! # Invariants
//! 1. **A loss is final.** Once the task has decided the lock is lost it sends nothing more and
//!    never extends again (lock invariant 1: no resurrection). The reason is recorded *before*
//!    the loss token fires, so whoever wakes on the token finds it.
//! 2. **The signal comes early, never late.** The lock counts as lost a safety margin before
//!    its deadline ([`HoldOptions::margin`]; by default a tenth of the validity, at most 1 s):
//!    the task never sleeps past that point, and an extension in flight is raced against it, so
//!    a round stuck on a stalled node cannot delay the signal past it, and whoever wakes on the
//!    loss token still has the margin to stop before the keys can expire.
//! 7. **Time alone makes a lock lost.** A guard's [`LockInfo`] ([`is_lost`](LockInfo::is_lost),
//!    [`remaining`](LockInfo::remaining)), and the clone `with_lock`'s work gets, read the clock, not only the task's verdict: once the margin
//!    before the deadline is reached they say "lost" and "no time left", even if the task never
//!    ran (a `current_thread` runtime blocked by the work itself). The token can only fire when
//!    the runtime runs the task; the clock needs nothing.
//! 8. **The first extension is due by the lock's own deadline.** A guard made from a lock that
//!    has already used part of its validity extends when the validity left is what an interval
//!    after a fresh acquisition would leave (`deadline − (validity − interval)`), at once if that
//!    has passed; not an interval after the guard's creation.
//! 3. **A bound is a loss, reported while the lock is still valid.** When another extension is
//!    due after [`HoldOptions::max_extensions`], or [`HoldOptions::max_hold`] has passed, the
//!    task stops as for any loss; the keys still have validity left, so the holder can wind down
//!    before they expire.
//! 4. **The task lives no longer than its guard.** It runs under a stop token that the guard
//!    cancels on release and on drop. The loss token is a child of the stop token, so releasing
//!    or dropping the guard also fires every loss token handed out: from then on the lock may not
//!    be relied on either.
//! 5. **Stopping is not losing**, while the lock is not lost by time. A stop that races a loss
//!    wins, and records nothing; the lock goes back to the guard to be released, or, if the guard
//!    is gone, is dropped, which releases it in the background (lock invariant 2). But a stop
//!    that comes after the margin (the task could not run: a `current_thread` runtime blocked
//!    past it) is a loss by time (invariant 7), recorded as
//!    [`LossReason::ValidityRanOut`]: the handle's `is_lost()` already said so, so
//!    [`Guard::release`] reports the lock lost rather than released, and its release is a lost
//!    lock's (with a lock-delay, the keys stay for the delay: engine invariant 5).
//! 9. **A failed extension is a loss only when it shows the lock gone.** An extension that did
//!    not reach a quorum because too few nodes answered (a failover under way, a node
//!    restarting, replicas that did not acknowledge), or quarantined ones, or a quorum too late,
//!    leaves the lock valid until the deadline the last success gave it: the keys are wherever
//!    they were, and no other holder can have taken them before that deadline. So the task tries
//!    again every [`RETRY_AFTER`] until the margin (invariant 2), and the lock is lost only then,
//!    or at once when the nodes that answered show it gone (not held there, or a key of another
//!    type). A retry that succeeds extends from its own round's start, as any extension.
//!    Found by the Sentinel failover check: a kept-alive lock was declared lost at the first
//!    extension the 2 s failover refused, although its key survived on the promoted replica.
//! 6. **Settings that cannot work are reported at once.** A TTL that leaves no validity, or an
//!    interval that is zero or not shorter than the validity, is a loss before any extension is
//!    sent, not a surprise one interval later.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::base::error::{ConfigError, Error, Limit, LossReason};
use crate::base::sync::lock;
use crate::base::telemetry;
use crate::handles::lock::{KeptAlive, Lock, LockInfo};
use crate::protocol::validity;
use crate::round::engine::Engine;
use crate::round::engine::{Deadline, Released, Until};

/// How a [`Guard`] keeps its lock alive. Every setting has a default; the bounds are off unless
/// set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use]
pub struct HoldOptions {
    interval: Option<Duration>,
    margin: Option<Duration>,
    max_extensions: Option<u32>,
    max_hold: Option<Duration>,
}

impl HoldOptions {
    /// The default [`margin`](Self::margin) is a tenth of the validity, but never more than
    /// this.
    pub const MAX_DEFAULT_MARGIN: Duration = Duration::from_secs(1);

    /// The defaults: extend every third of the validity, for as long as the guard lives.
    pub fn new() -> Self {
        Self::default()
    }

    /// How long after the guard is created, and after each successful extension, the next
    /// extension is sent (default: a third of the validity of a lock of the guard's TTL, i.e.
    /// `(ttl − drift) / 3`, about `ttl / 3`). A failed extension is a loss at once, so the
    /// interval is not there for retries: the two thirds left over absorb slow rounds and
    /// scheduling delays.
    ///
    /// Must be greater than zero and, with the [`margin`](Self::margin), shorter than that
    /// validity; otherwise the guard reports [`LossReason::Invalid`] at once.
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = Some(interval);
        self
    }

    /// How long before the lock's deadline the guard gives it up if no extension has succeeded
    /// by then (default: a tenth of the validity, at most
    /// [`MAX_DEFAULT_MARGIN`](Self::MAX_DEFAULT_MARGIN), and at most half of what the interval
    /// leaves of the validity): the loss
    /// token fires, and [`is_lost`](crate::LockInfo::is_lost) turns true, this much *before* the keys may expire,
    /// so the work has that long to stop (invariant 2).
    ///
    /// The interval plus the margin must be shorter than the validity; otherwise the guard
    /// reports [`LossReason::Invalid`] at once.
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// Extend at most this many times (default: unlimited). When another extension is due after
    /// that, the guard reports [`LossReason::LimitReached`] with [`Limit::Extensions`], while the
    /// lock is still valid, and stops extending.
    pub fn max_extensions(mut self, extensions: u32) -> Self {
        self.max_extensions = Some(extensions);
        self
    }

    /// Keep the lock alive for at most this long after the guard is created (default:
    /// unlimited). When it has passed, the guard reports [`LossReason::LimitReached`] with
    /// [`Limit::Hold`] and stops extending; the keys stay until released or expired.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
}

/// Validated settings of one guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    ttl: Duration,
    /// What a lock of `ttl` is valid for after an extension round (`ttl − drift`).
    validity: Duration,
    interval: Duration,
    margin: Duration,
    max_extensions: Option<u32>,
    max_hold: Option<Duration>,
}

impl Plan {
    /// Checks `options` against the validity a `ttl` leaves with this drift factor (invariant 6).
    fn new(
        ttl: Duration,
        options: &HoldOptions,
        drift_factor: f64,
        now: Instant,
    ) -> Result<Self, ConfigError> {
        let validity = validity::deadline(now, ttl, drift_factor)
            .map(|deadline| deadline - now)
            .ok_or_else(|| ConfigError::InvalidTtl {
                ttl,
                reason: format!(
                    "the clock-drift allowance ({:?}) leaves no validity; use a longer TTL",
                    validity::drift(ttl, drift_factor)
                ),
            })?;
        let interval = options.interval.unwrap_or(validity / 3);
        if interval.is_zero() || interval >= validity {
            return Err(ConfigError::InvalidSetting {
                setting: "interval",
                reason: format!(
                    "{interval:?} must be greater than zero and shorter than the {validity:?} a \
                     {ttl:?} lock stays valid, or the lock runs out between extensions"
                ),
            });
        }
        // The default never makes an explicit interval invalid: it shrinks to half of what the
        // interval leaves.
        let margin = options.margin.unwrap_or_else(|| {
            (validity / 10)
                .min(HoldOptions::MAX_DEFAULT_MARGIN)
                .min((validity - interval) / 2)
        });
        if interval.saturating_add(margin) >= validity {
            return Err(ConfigError::InvalidSetting {
                setting: "margin",
                reason: format!(
                    "{margin:?} plus the interval ({interval:?}) must be shorter than the \
                     {validity:?} a {ttl:?} lock stays valid, or the lock is given up before \
                     its first extension"
                ),
            });
        }
        Ok(Self {
            ttl,
            validity,
            interval,
            margin,
            max_extensions: options.max_extensions,
            max_hold: options.max_hold,
        })
    }
}

/// What the keeper does next.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// Nothing is due before this instant, which is never after the deadline (invariant 2).
    Wait(Instant),
    /// Send an extension, and give up on it at this instant (the deadline or the end of the
    /// hold, whichever comes first: invariant 2).
    Extend { give_up_at: Instant },
    /// Stop: the lock is lost.
    Lose(LossReason),
}

/// When the next extension is due and how many were made: the keeper's pure bookkeeping.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    plan: Plan,
    hold_end: Option<Instant>,
    due: Instant,
    extensions: u32,
    /// Extensions that failed in a row without showing the lock gone (invariant 9).
    retries: u32,
}

/// How long after a failed extension that did not show the lock gone the next one is sent
/// (invariant 9): a few per second, while a failover completes, without a storm of rounds.
const RETRY_AFTER: Duration = Duration::from_millis(200);

impl Schedule {
    /// A schedule for a guard made at `start` of a lock valid until `deadline` (invariant 8).
    fn new(plan: Plan, start: Instant, deadline: Instant) -> Self {
        Self {
            plan,
            // An end too far away to represent is no end.
            hold_end: plan.max_hold.and_then(|max| start.checked_add(max)),
            due: plan.due(deadline).max(start),
            extensions: 0,
            retries: 0,
        }
    }

    /// An extension sent at or before `now` failed without showing the lock gone: the next is
    /// due [`RETRY_AFTER`] from now, or an interval, if that is shorter (invariant 9).
    fn retry(&mut self, now: Instant) {
        self.retries = self.retries.saturating_add(1);
        self.due = now
            .checked_add(RETRY_AFTER.min(self.plan.interval))
            .unwrap_or(now);
    }

    /// What to do at `now`, with the lock valid until `deadline`.
    fn next(&self, now: Instant, deadline: Instant) -> Step {
        let give_up = self.plan.give_up(deadline);
        if now >= give_up {
            return Step::Lose(LossReason::ValidityRanOut); // invariant 2
        }
        if let (Some(end), Some(max)) = (self.hold_end, self.plan.max_hold)
            && now >= end
        {
            return Step::Lose(LossReason::LimitReached(Limit::Hold(max))); // invariant 3
        }
        let give_up_at = self.hold_end.map_or(give_up, |end| end.min(give_up));
        if now < self.due {
            return Step::Wait(self.due.min(give_up_at));
        }
        if let Some(max) = self.plan.max_extensions
            && self.extensions >= max
        {
            return Step::Lose(LossReason::LimitReached(Limit::Extensions(max))); // invariant 3
        }
        Step::Extend { give_up_at }
    }

    /// An extension succeeded, making the lock valid until `deadline`: the next one is due an
    /// interval after that extension's round started.
    fn extended(&mut self, deadline: Instant) {
        self.extensions = self.extensions.saturating_add(1);
        self.retries = 0;
        self.due = self.plan.due(deadline);
    }
}

impl Plan {
    /// When the extension of a lock valid until `deadline` is due: when it has as much validity
    /// left as it had an interval after it was taken (invariant 8).
    fn due(&self, deadline: Instant) -> Instant {
        let before = self.validity.saturating_sub(self.interval);
        deadline.checked_sub(before).unwrap_or(deadline)
    }

    /// When a lock valid until `deadline` is given up: `margin` before it (invariant 2).
    fn give_up(&self, deadline: Instant) -> Instant {
        deadline.checked_sub(self.margin).unwrap_or(deadline)
    }
}

/// What the guard can read while the task runs.
#[derive(Debug)]
struct Status {
    deadline: Instant,
    /// How long before `deadline` the lock counts as lost ([`Plan::margin`]; zero for a plan
    /// that could not work, which is lost at once anyway).
    margin: Duration,
    extensions: u32,
    loss: Option<LossReason>,
}

impl Status {
    /// The instant from which the lock counts as lost by time alone (invariant 7).
    fn lost_at(&self) -> Instant {
        self.deadline
            .checked_sub(self.margin)
            .unwrap_or(self.deadline)
    }

    /// The time left before the lock counts as lost, zero once it is (`lost` says whether the
    /// task already gave it up).
    fn remaining(&self, lost: bool, now: Instant) -> Duration {
        if lost {
            return Duration::ZERO;
        }
        self.lost_at().saturating_duration_since(now)
    }
}

fn status(status: &Mutex<Status>) -> MutexGuard<'_, Status> {
    lock(status)
}

impl Lock {
    /// Keeps this lock alive in the background, extending it to `ttl` with the default
    /// [`HoldOptions`]: every third of the validity, for as long as the returned [`Guard`]
    /// lives.
    ///
    /// # Panics
    /// Outside a Tokio runtime: the extensions run on a task spawned on the current runtime.
    pub fn keep_alive(self, ttl: Duration) -> Guard {
        self.keep_alive_with(ttl, HoldOptions::new())
    }

    /// [`keep_alive`](Self::keep_alive) with other [`HoldOptions`]. Options that cannot work
    /// (see [`HoldOptions::interval`]) make the guard report [`LossReason::Invalid`] at once.
    ///
    /// # Panics
    /// Outside a Tokio runtime: the extensions run on a task spawned on the current runtime.
    pub fn keep_alive_with(self, ttl: Duration, options: HoldOptions) -> Guard {
        let shared = Arc::clone(self.shared());
        let plan = Plan::new(ttl, &options, shared.rules.drift_factor, Instant::now());
        let status = Arc::new(Mutex::new(Status {
            deadline: self.deadline(),
            margin: plan.as_ref().map_or(Duration::ZERO, |plan| plan.margin),
            extensions: 0,
            loss: None,
        }));
        let stop = CancellationToken::new();
        let lost = stop.child_token(); // invariant 4
        let info = self.info_kept(Arc::new(Kept {
            status: Arc::clone(&status),
            lost: lost.clone(),
        }));
        let task = tokio::spawn(keep(
            self,
            plan,
            Arc::clone(&status),
            stop.clone(),
            lost.clone(),
        ));
        Guard {
            info,
            shared,
            status,
            lost,
            task,
            stop: stop.drop_guard(),
        }
    }
}

/// The background task: extends until lost or stopped, then hands the lock back.
async fn keep(
    mut lock: Lock,
    plan: Result<Plan, ConfigError>,
    status_of: Arc<Mutex<Status>>,
    stop: CancellationToken,
    lost: CancellationToken,
) -> Lock {
    let loss = tokio::select! {
        biased; // invariant 5
        () = stop.cancelled() => None,
        reason = extend_until_lost(&mut lock, plan, &status_of) => Some(reason),
    };
    let loss = match loss {
        // Invariant 5: stopped after the margin, the lock was already lost by time.
        None if Instant::now() >= status(&status_of).lost_at() => Some(LossReason::ValidityRanOut),
        other => other,
    };
    if let Some(reason) = loss {
        // Given up at the margin, it is lost although its deadline has not passed: its release
        // (or drop) is a lost lock's (engine invariant 5).
        lock.mark_lost();
        tracing::warn!(resource = lock.resource(), %reason, "kept-alive lock lost");
        telemetry::lost(&reason);
        status(&status_of).loss = Some(reason);
        lost.cancel(); // invariant 1: after the reason is recorded
    }
    lock
}

/// Extends `lock` on schedule; returns only when it is lost (invariant 1).
async fn extend_until_lost(
    lock: &mut Lock,
    plan: Result<Plan, ConfigError>,
    status_of: &Mutex<Status>,
) -> LossReason {
    let plan = match plan {
        Ok(plan) => plan,
        Err(e) => return LossReason::Invalid(e), // invariant 6
    };
    let mut schedule = Schedule::new(plan, Instant::now(), lock.deadline());
    // The last failed extension that did not show the lock gone: what the loss at the margin
    // reports (invariant 9).
    let mut failed: Option<Error> = None;
    loop {
        match schedule.next(Instant::now(), lock.deadline()) {
            Step::Lose(LossReason::ValidityRanOut) if failed.is_some() => {
                return failed.map_or(LossReason::ValidityRanOut, loss_of);
            }
            Step::Lose(reason) => return reason,
            Step::Wait(until) => sleep_until(until).await,
            Step::Extend { give_up_at } => {
                let extended = tokio::select! {
                    // A success that lands with the deadline still counts: `extend` only
                    // succeeds with a new deadline in the future.
                    biased;
                    result = lock.extend_or_retry(plan.ttl) => Some(result),
                    () = sleep_until(give_up_at) => None, // invariant 2
                };
                if extended.is_none() {
                    telemetry::extended(false); // cut short: it never reached its count
                }
                // Whatever happened, the guard reads the deadline the lock now has: a cancelled
                // extension to a shorter TTL may have moved it earlier (lock invariant 3).
                status(status_of).deadline = lock.deadline();
                match extended {
                    // The next step says which of deadline or hold end has passed.
                    None => {}
                    Some(Ok(())) => {
                        if schedule.retries > 0 {
                            tracing::info!(
                                resource = lock.resource(),
                                retries = schedule.retries,
                                "kept-alive lock extended again"
                            );
                        }
                        schedule.extended(lock.deadline());
                        status(status_of).extensions = schedule.extensions;
                        failed = None;
                    }
                    // Invariant 9: still valid; again shortly, until the margin.
                    Some(Err(e)) if e.may_pass() => {
                        if schedule.retries == 0 {
                            tracing::warn!(
                                resource = lock.resource(),
                                "extension failed, trying again until the lock's margin: {e}"
                            );
                        }
                        schedule.retry(Instant::now());
                        failed = Some(e);
                    }
                    Some(Err(e)) => return loss_of(e),
                }
            }
        }
    }
}

async fn sleep_until(instant: Instant) {
    tokio::time::sleep_until(tokio::time::Instant::from_std(instant)).await;
}

/// What `with_lock` returns, async or blocking: the work's `output`, `None` when the lock was
/// lost before the work finished (the work was stopped, or its output is not one made under the
/// lock throughout), given what the guard's release found. Once the work has finished with the
/// lock held, its output is returned whatever the release finds.
pub(crate) fn work_done<T>(
    resource: &str,
    output: Option<T>,
    released: Result<Released, Error>,
) -> Result<T, Error> {
    match (output, released) {
        (Some(output), Ok(released)) => {
            released.warn_if_unconfirmed(resource);
            Ok(output)
        }
        (Some(output), Err(e)) => {
            tracing::warn!(error = %e, "lock lost after the work finished");
            Ok(output)
        }
        (None, Err(e)) => Err(e),
        // Unreachable by invariants 1 and 4 for the async guard: only a recorded loss fires the
        // token while the guard lives; for the blocking one, a loss by time alone (invariant 7)
        // the keeper had not recorded. Either way the lock cannot be vouched for.
        (None, Ok(_)) => Err(Error::HoldLost {
            resource: resource.to_owned(),
            reason: LossReason::ValidityRanOut,
        }),
    }
}

/// Why a failed [`Lock::extend`] means the lock is lost.
fn loss_of(error: Error) -> LossReason {
    match error {
        Error::LockLost {
            failure: Some(failure),
            ..
        }
        | Error::NotAcquired { failure, .. } => LossReason::ExtensionFailed(failure),
        Error::LockLost { failure: None, .. } => LossReason::ValidityRanOut,
        Error::Config(e) => LossReason::Invalid(e),
        Error::HoldLost { reason, .. } => reason,
        // Only the blocking layer and a token's issue return these, never an extension.
        Error::InsideRuntime { .. } | Error::NotFenced { .. } => LossReason::ValidityRanOut,
    }
}

/// A lock kept alive in the background, created by [`Lock::keep_alive`].
///
/// Check [`is_lost`](LockInfo::is_lost) between steps, await [`lost`](Self::lost), or hand
/// [`lost_token`](Self::lost_token) to whatever must stop when the lock is gone. Release it with
/// [`release`](Self::release); a guard dropped unreleased stops its task and releases the lock in
/// the background, like a dropped [`Lock`].
#[derive(Debug)]
#[must_use = "a guard releases its lock as soon as it is dropped: bind it (`let guard = ...`) for as long as the work runs"]
pub struct Guard {
    info: LockInfo,
    shared: Arc<Engine>,
    status: Arc<Mutex<Status>>,
    lost: CancellationToken,
    task: JoinHandle<Lock>,
    /// Cancels the task's stop token when the guard is released or dropped (invariant 4).
    stop: DropGuard,
}

impl std::ops::Deref for Guard {
    type Target = LockInfo;

    /// What the lock knows about itself: its deadline moves forward with every extension, and it
    /// counts as lost a margin before it (invariant 7), or once the task gave it up.
    fn deref(&self) -> &LockInfo {
        &self.info
    }
}

impl Guard {
    /// Why the lock was lost, or `None` while it is kept alive.
    pub fn loss_reason(&self) -> Option<LossReason> {
        status(&self.status).loss.clone()
    }

    /// How many extensions succeeded so far.
    pub fn extensions(&self) -> u32 {
        status(&self.status).extensions
    }

    /// Resolves when the lock is lost; at once if it already is.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits, and dropping it changes nothing.
    pub async fn lost(&self) {
        self.lost.cancelled().await;
    }

    /// A token that fires when the lock is lost, for tasks that must stop then (e.g. in a
    /// `tokio::select!`). It also fires once the guard is released or dropped, since the lock may
    /// no longer be relied on after that either (invariant 4). Each call returns a new child
    /// token: cancelling it affects nothing else.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.child_token()
    }

    /// The lock's fencing token, issued on the first call as [`Lock::fence`] says, and kept.
    ///
    /// # Errors
    /// As [`Lock::fence`]: [`Error::NotFenced`] when no token could be issued (the lock may
    /// be lost: [`is_lost`](LockInfo::is_lost) says), [`Error::Config`] with fencing off.
    ///
    /// # Cancel safety
    /// As [`Lock::fence`]'s.
    pub async fn fence(&mut self) -> Result<u64, Error> {
        self.info.issue_fence(&self.shared).await
    }

    /// Stops the background task and gives the lock up without releasing it, as a holder that
    /// crashed would: it stays held until its TTL (plus any
    /// [`lock_delay`](crate::Builder::lock_delay)) runs out from its last extension, unless
    /// somebody who knows its value releases it. Returns what identifies it, with the deadline the
    /// last extension reached.
    ///
    /// # Cancel safety
    /// The task is stopped at the first poll; dropping the future then drops the lock, which is
    /// released in the background.
    pub async fn detach(self) -> LockInfo {
        let Guard {
            info, task, stop, ..
        } = self;
        drop(stop); // invariant 4
        match task.await {
            // The keeper's lock never saw a token the guard was issued.
            Ok(lock) => lock.detach().keeping_fence(&info),
            // The task failed and dropped the lock, which released it (see `release`).
            Err(_) => info,
        }
    }

    /// Stops the background task, then releases the lock on every node.
    ///
    /// # Errors
    /// [`Error::HoldLost`] with the reason if the lock had been lost before this call. The
    /// release is sent all the same, to delete our value wherever it is left.
    ///
    /// # Cancel safety
    /// The task is stopped at the first poll. If the future is dropped before the release is
    /// sent, the lock is released in the background as for a dropped guard; once the release is
    /// under way, dropping the future is [`Lock::release`]'s cancel safety.
    pub async fn release(self) -> Result<Released, Error> {
        let Guard {
            info,
            shared,
            status: status_of,
            task,
            stop,
            ..
        } = self;
        let resources = info.resource_set();
        drop(stop); // invariant 4
        let released = match task.await {
            Ok(lock) => lock.release().await,
            Err(e) => {
                // Only a panic or a runtime shutting down ends the task without handing the lock
                // back. The lock was dropped with the task, which started a release already;
                // releasing by value again is harmless and gives us the replies.
                tracing::error!(resource = %resources, error = %e, "keep-alive task failed");
                // Its queue place, if any, runs out with its lease.
                shared
                    // Its deadline is the task's, which is gone: released as by value.
                    .release(
                        resources,
                        &Arc::from(info.value()),
                        None,
                        Deadline::Unknown,
                        Until::Decided,
                    )
                    .await
            }
        };
        let loss = status(&status_of).loss.take();
        match loss {
            Some(reason) => {
                tracing::debug!(
                    resource = %resources,
                    confirmed = released.confirmed,
                    "released a lost lock"
                );
                Err(Error::HoldLost {
                    resource: resources.to_string(),
                    reason,
                })
            }
            None => Ok(released),
        }
    }
}

/// What a guard's task tells the lock's [`LockInfo`]: the deadline it reached, and whether it
/// gave the lock up.
#[derive(Debug)]
struct Kept {
    status: Arc<Mutex<Status>>,
    lost: CancellationToken,
}

impl KeptAlive for Kept {
    fn deadline(&self) -> Instant {
        status(&self.status).deadline
    }

    fn remaining(&self, now: Instant) -> Duration {
        let lost = self.lost.is_cancelled();
        status(&self.status).remaining(lost, now)
    }

    fn lost_token(&self) -> CancellationToken {
        self.lost.child_token()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn plan(ttl_ms: u64, options: HoldOptions) -> Result<Plan, ConfigError> {
        Plan::new(
            Duration::from_millis(ttl_ms),
            &options,
            0.01,
            Instant::now(),
        )
    }

    #[test]
    fn the_default_interval_is_a_third_of_the_validity() {
        // validity = 3000 − (30 + 2) = 2968 ms
        let plan = plan(3000, HoldOptions::new()).unwrap();
        assert_eq!(plan.interval, 2968 * MS / 3);
        assert_eq!(plan.max_extensions, None);
        assert_eq!(plan.max_hold, None);
    }

    #[test]
    fn intervals_that_let_the_lock_run_out_are_rejected() {
        for interval in [Duration::ZERO, 2968 * MS, 3000 * MS, 10_000 * MS] {
            let result = plan(3000, HoldOptions::new().interval(interval));
            assert!(
                matches!(
                    result,
                    Err(ConfigError::InvalidSetting {
                        setting: "interval",
                        ..
                    })
                ),
                "interval {interval:?}: {result:?}"
            );
        }
        assert!(plan(3000, HoldOptions::new().interval(2967 * MS)).is_ok());
    }

    #[test]
    fn a_ttl_without_validity_is_rejected() {
        for ttl_ms in [0, 1, 2] {
            let result = plan(ttl_ms, HoldOptions::new());
            assert!(
                matches!(result, Err(ConfigError::InvalidTtl { .. })),
                "ttl {ttl_ms} ms: {result:?}"
            );
        }
    }

    /// A schedule started at `t0` with a 100 ms interval and the given bounds.
    fn schedule(t0: Instant, max_extensions: Option<u32>, max_hold_ms: Option<u64>) -> Schedule {
        let plan = Plan {
            ttl: 1000 * MS,
            validity: 1000 * MS,
            interval: 100 * MS,
            margin: Duration::ZERO,
            max_extensions,
            max_hold: max_hold_ms.map(Duration::from_millis),
        };
        Schedule::new(plan, t0, t0 + 1000 * MS)
    }

    #[test]
    fn waits_until_due_but_never_past_the_deadline_or_hold_end() {
        let t0 = Instant::now();
        let s = schedule(t0, None, None);
        assert_eq!(s.next(t0, t0 + 500 * MS), Step::Wait(t0 + 100 * MS));
        assert_eq!(s.next(t0, t0 + 50 * MS), Step::Wait(t0 + 50 * MS));
        let s = schedule(t0, None, Some(30));
        assert_eq!(s.next(t0, t0 + 500 * MS), Step::Wait(t0 + 30 * MS));
    }

    #[test]
    fn a_failed_extension_is_tried_again_shortly_until_the_deadline() {
        let t0 = Instant::now();
        let mut s = schedule(t0, None, None);
        let deadline = t0 + 1000 * MS;
        let failed_at = t0 + 100 * MS;
        s.retry(failed_at);
        // Again after the shorter of the retry delay and the interval, not an interval after
        // the deadline moved (it did not).
        let again = failed_at + RETRY_AFTER.min(100 * MS);
        assert_eq!(s.next(failed_at, deadline), Step::Wait(again));
        assert_eq!(
            s.next(again, deadline),
            Step::Extend {
                give_up_at: deadline
            }
        );
        assert_eq!(s.retries, 1);
        // Past the deadline's margin the retries end in a loss, as any wait does.
        assert_eq!(
            s.next(deadline, deadline),
            Step::Lose(LossReason::ValidityRanOut)
        );
        // A success resets the count.
        s.extended(t0 + 1100 * MS);
        assert_eq!(s.retries, 0);
    }

    #[test]
    fn extends_when_due_and_gives_up_at_the_deadline_or_hold_end() {
        let t0 = Instant::now();
        let s = schedule(t0, None, None);
        let now = t0 + 100 * MS;
        assert_eq!(
            s.next(now, t0 + 500 * MS),
            Step::Extend {
                give_up_at: t0 + 500 * MS
            }
        );
        let s = schedule(t0, None, Some(300));
        assert_eq!(
            s.next(now, t0 + 500 * MS),
            Step::Extend {
                give_up_at: t0 + 300 * MS
            }
        );
    }

    #[test]
    fn every_way_to_lose_is_reported_in_order_of_gravity() {
        let t0 = Instant::now();
        // Each case: (max extensions, max hold, extensions made, now, deadline) → step.
        let lose = Step::Lose;
        let cases = [
            (None, None, 0, 600, 500, lose(LossReason::ValidityRanOut)),
            (
                Some(0),
                Some(10),
                5,
                600,
                500,
                lose(LossReason::ValidityRanOut),
            ),
            (
                None,
                Some(200),
                0,
                200,
                500,
                lose(LossReason::LimitReached(Limit::Hold(200 * MS))),
            ),
            (
                Some(1),
                Some(200),
                1,
                250,
                500,
                lose(LossReason::LimitReached(Limit::Hold(200 * MS))),
            ),
            (
                Some(2),
                None,
                2,
                100,
                500,
                lose(LossReason::LimitReached(Limit::Extensions(2))),
            ),
            (
                Some(0),
                None,
                0,
                100,
                500,
                lose(LossReason::LimitReached(Limit::Extensions(0))),
            ),
            // Limit not reached yet: not due, or fewer extensions than allowed.
            (Some(2), None, 2, 50, 500, Step::Wait(t0 + 100 * MS)),
            (
                Some(3),
                None,
                2,
                100,
                500,
                Step::Extend {
                    give_up_at: t0 + 500 * MS,
                },
            ),
        ];
        for (max_extensions, max_hold, made, now, deadline, expected) in cases {
            let mut s = schedule(t0, max_extensions, max_hold);
            s.extensions = made;
            let step = s.next(t0 + now * MS, t0 + deadline * MS);
            assert_eq!(
                step, expected,
                "max_extensions {max_extensions:?}, max_hold {max_hold:?}, made {made}, \
                 now {now} ms, deadline {deadline} ms"
            );
        }
    }

    #[test]
    fn the_next_extension_is_due_an_interval_after_the_last_success() {
        let t0 = Instant::now();
        let mut s = schedule(t0, None, None);
        // The extension's round started at 130 ms: valid until 1130 ms.
        s.extended(t0 + 1130 * MS);
        assert_eq!(s.extensions, 1);
        assert_eq!(
            s.next(t0 + 131 * MS, t0 + MS * 1130),
            Step::Wait(t0 + 230 * MS)
        );
    }

    #[test]
    fn a_late_guard_extends_by_the_lock_s_deadline_not_its_own_creation() {
        // Invariant 8: acquire(3 s), 2.5 s of work, keep_alive(3 s): the first extension is due
        // at once, not a third of the validity after the guard was made.
        let t0 = Instant::now();
        let plan = plan(3000, HoldOptions::new()).unwrap();
        let deadline = t0 + 2968 * MS;
        let made = t0 + 2500 * MS;
        let s = Schedule::new(plan, made, deadline);
        assert!(
            matches!(s.next(made, deadline), Step::Extend { .. }),
            "{:?}",
            s.next(made, deadline)
        );
        // A guard made at once waits the interval, as before.
        let s = Schedule::new(plan, t0, deadline);
        assert_eq!(s.next(t0, deadline), Step::Wait(t0 + 2968 * MS / 3));
    }

    #[test]
    fn the_lock_is_given_up_a_margin_before_its_deadline() {
        // Invariant 2: validity 2968 ms, margin a tenth of it.
        let t0 = Instant::now();
        let plan = plan(3000, HoldOptions::new()).unwrap();
        assert_eq!(plan.margin, 2968 * MS / 10);
        let deadline = t0 + 2968 * MS;
        let s = Schedule::new(plan, t0, deadline);
        let give_up = deadline - plan.margin;
        assert_eq!(
            s.next(t0 + 2000 * MS, deadline),
            Step::Extend {
                give_up_at: give_up
            }
        );
        assert_eq!(
            s.next(give_up, deadline),
            Step::Lose(LossReason::ValidityRanOut)
        );
        // Long TTLs: at most a second.
        let long = super::Plan::new(
            Duration::from_secs(60),
            &HoldOptions::new(),
            0.01,
            Instant::now(),
        )
        .unwrap();
        assert_eq!(long.margin, HoldOptions::MAX_DEFAULT_MARGIN);
        // A margin that leaves no room for the first extension is refused.
        let result = plan_with(3000, HoldOptions::new().margin(2000 * MS));
        assert!(
            matches!(
                result,
                Err(ConfigError::InvalidSetting {
                    setting: "margin",
                    ..
                })
            ),
            "{result:?}"
        );
    }

    fn plan_with(ttl_ms: u64, options: HoldOptions) -> Result<Plan, ConfigError> {
        plan(ttl_ms, options)
    }

    #[test]
    fn with_lock_can_be_spawned() {
        fn assert_send<T: Send + 'static>(_: &T) {}
        let redlock = crate::Redlock::from_list("redis://127.0.0.1:1").unwrap();
        let future = async move {
            redlock
                .with_lock(
                    "r",
                    Duration::from_secs(1),
                    |info| async move { info.is_lost() },
                )
                .await
        };
        assert_send(&future);
    }

    #[test]
    fn failed_extensions_map_to_their_loss() {
        let failure = Box::new(crate::base::error::RoundFailure {
            quorum: 2,
            replies: Vec::new(),
            asked: crate::protocol::cause::Asked::Keep,
        });
        let lost = |failure| Error::LockLost {
            resource: "r".into(),
            failure,
        };
        assert_eq!(
            loss_of(lost(Some(failure.clone()))),
            LossReason::ExtensionFailed(failure)
        );
        assert_eq!(loss_of(lost(None)), LossReason::ValidityRanOut);
        assert_eq!(
            loss_of(Error::Config(ConfigError::NoServers)),
            LossReason::Invalid(ConfigError::NoServers)
        );
    }
}
