//! A held lock that a foreign language's object owns: one handle, shared by whatever threads,
//! tasks or event-loop callbacks hold that object, and the watch behind its loss signal. The
//! Python and Node packages each wrap one [`SharedLock`] in their own class and only convert
//! arguments, errors and callbacks; the rules below are written once, here.
//!
//! # Invariants
//! 1. **Ownership is the handle.** The lock's value lives in this object, never in a thread- or
//!    task-local: whatever has the handle can extend or release it, and nothing else can
//!    (redis-py's `Lock` keeps its token in a thread-local, so another thread cannot release it).
//! 2. **One operation at a time.** The lock sits behind an async mutex: an extension and a
//!    release started together run one after the other; a release takes the lock out, and
//!    everything after it finds it released ([`HandleError::Released`]).
//! 3. **What the handle reports is current.** Its [`LockInfo`] is replaced after every
//!    extension, token issue and when the lock starts being kept alive, and every waiting
//!    [`watch`](SharedLock::watch) is told, so a reader of `remaining()` or `is_lost()` reads
//!    the clock against the deadline the last extension reached (a kept-alive lock's is live).
//! 4. **The watch ends once, with the first of: the lock lost (its deadline passed, an
//!    extension failed, its keep-alive gave it up), or the handle ended** (released, detached or
//!    dropped: [`end`](SharedLock::end)). A guard's token also fires on its release; that is
//!    reported as the end, not as a loss.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::base::error::{Error, LossReason};
use crate::handles::hold::{Guard, HoldOptions};
use crate::handles::lock::{Lock, LockInfo};
use crate::handles::request::Acquired;
use crate::round::engine::Released;

/// What a shared handle holds now.
#[derive(Debug)]
pub enum Holding {
    /// A lock its holder extends.
    Lock(Lock),
    /// A lock kept alive in the background.
    Guard(Guard),
}

/// One per handle, behind its `Arc`: boxing `Held` would only add an allocation per lock.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum State {
    Held(Holding),
    Released,
}

impl State {
    /// Why a kept-alive lock was lost, if it was.
    fn loss_reason(&self) -> Option<LossReason> {
        match self {
            State::Held(Holding::Guard(guard)) => guard.loss_reason(),
            _ => None,
        }
    }
}

/// Why an operation on a [`SharedLock`] was not even tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandleError {
    /// The lock was released or detached before (a second release is the holder's mistake,
    /// but also "not held").
    #[error("lock on {0:?} was already released")]
    Released(String),
    /// An extension of a lock kept alive in the background.
    #[error("lock on {0:?} is kept alive: it is extended in the background")]
    KeptAlive(String),
    /// A second keep-alive.
    #[error("lock on {0:?} is already kept alive")]
    AlreadyKeptAlive(String),
    /// A keep-alive while an extension or a release holds the lock.
    #[error("lock on {0:?}: an extension or a release is under way")]
    Busy(String),
}

/// How a [`watch`](SharedLock::watch) ended (invariant 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watched {
    /// The lock was lost while held.
    Lost,
    /// The handle was released, detached or dropped first.
    Ended,
}

/// A held lock owned by a foreign language's object (module docs).
#[derive(Debug, Clone)]
pub struct SharedLock {
    state: Arc<tokio::sync::Mutex<State>>,
    info: Arc<Mutex<LockInfo>>,
    /// Told whenever `info` changes (invariant 3), so a watch waits for the new deadline.
    changed: Arc<Notify>,
    /// Fired once released, detached or dropped (invariant 4).
    ended: CancellationToken,
}

impl SharedLock {
    /// The handle of what an acquisition won.
    pub fn new(acquired: Acquired) -> Self {
        let (info, holding) = match acquired {
            Acquired::Lock(lock) => (LockInfo::clone(&lock), Holding::Lock(lock)),
            Acquired::KeptAlive(guard) => (LockInfo::clone(&guard), Holding::Guard(guard)),
        };
        Self {
            state: Arc::new(tokio::sync::Mutex::new(State::Held(holding))),
            info: Arc::new(Mutex::new(info)),
            changed: Arc::new(Notify::new()),
            ended: CancellationToken::new(),
        }
    }

    fn read(&self) -> MutexGuard<'_, LockInfo> {
        self.info.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the lock knows about itself now (invariant 3).
    pub fn info(&self) -> LockInfo {
        self.read().clone()
    }

    /// How messages name the lock: its resources, `a, b`.
    pub fn name(&self) -> String {
        self.read().resources().join(", ")
    }

    /// Records `info` as current and tells the watches (invariant 3).
    fn update(&self, info: &LockInfo) {
        *self.read() = info.clone();
        self.changed.notify_waiters();
    }

    /// Extends the lock to `ttl` from now, as [`Lock::extend`]; the outer error when it was not
    /// tried (released, or kept alive).
    pub fn extend(
        &self,
        ttl: Duration,
    ) -> impl Future<Output = Result<Result<(), Error>, HandleError>> + Send + 'static {
        self.extend_noting(ttl, |_, _| {})
    }

    /// [`extend`](Self::extend), calling `noting` with the outcome and the lock's new info
    /// before any watch or reader can see that info (invariant 3): what a binding records about
    /// a loss (its reason) is there by the time the loss is seen.
    pub fn extend_noting<N>(
        &self,
        ttl: Duration,
        noting: N,
    ) -> impl Future<Output = Result<Result<(), Error>, HandleError>> + Send + 'static
    where
        N: FnOnce(&Result<(), Error>, &LockInfo) + Send + 'static,
    {
        let this = self.clone();
        async move {
            let mut state = this.state.lock().await; // invariant 2
            match &mut *state {
                State::Held(Holding::Lock(lock)) => {
                    let result = lock.extend(ttl).await;
                    noting(&result, lock);
                    this.update(lock);
                    Ok(result)
                }
                State::Held(Holding::Guard(_)) => Err(HandleError::KeptAlive(this.name())),
                State::Released => Err(HandleError::Released(this.name())),
            }
        }
    }

    /// The lock's fencing token, issued on the first call and kept, as [`Lock::fence`].
    pub fn fence(
        &self,
    ) -> impl Future<Output = Result<Result<u64, Error>, HandleError>> + Send + 'static {
        let this = self.clone();
        async move {
            let mut state = this.state.lock().await; // invariant 2
            let result = match &mut *state {
                State::Held(Holding::Lock(lock)) => {
                    let result = lock.fence().await;
                    this.update(lock);
                    result
                }
                State::Held(Holding::Guard(guard)) => {
                    let result = guard.fence().await;
                    this.update(guard);
                    result
                }
                State::Released => return Err(HandleError::Released(this.name())),
            };
            Ok(result)
        }
    }

    /// Releases the lock on every node, as [`Lock::release`] (a kept-alive lock's keep-alive
    /// stops first, as [`Guard::release`]); ends the handle (invariant 4: a release is no loss).
    pub fn release(
        &self,
    ) -> impl Future<Output = Result<Result<Released, Error>, HandleError>> + Send + 'static {
        let this = self.clone();
        async move {
            let taken = std::mem::replace(&mut *this.state.lock().await, State::Released);
            this.ended.cancel();
            match taken {
                State::Held(Holding::Lock(lock)) => Ok(Ok(lock.release().await)),
                State::Held(Holding::Guard(guard)) => Ok(guard.release().await),
                State::Released => Err(HandleError::Released(this.name())),
            }
        }
    }

    /// Gives the lock up without releasing it, as [`Lock::detach`]: it stays held until its TTL
    /// runs out. Ends the handle; returns what the lock was.
    pub fn detach(&self) -> impl Future<Output = Result<LockInfo, HandleError>> + Send + 'static {
        let this = self.clone();
        async move {
            let taken = std::mem::replace(&mut *this.state.lock().await, State::Released);
            let holding = match taken {
                State::Held(holding) => holding,
                State::Released => return Err(HandleError::Released(this.name())),
            };
            this.ended.cancel(); // before a guard's token fires: a detach is no loss
            Ok(match holding {
                Holding::Lock(lock) => lock.detach(),
                Holding::Guard(guard) => guard.detach().await,
            })
        }
    }

    /// Keeps the lock alive in the background from now on, as [`Lock::keep_alive_with`], on
    /// `runtime`.
    pub fn keep_alive(
        &self,
        runtime: &tokio::runtime::Handle,
        ttl: Duration,
        options: HoldOptions,
    ) -> Result<(), HandleError> {
        let mut state = self
            .state
            .try_lock()
            .map_err(|_| HandleError::Busy(self.name()))?;
        match std::mem::replace(&mut *state, State::Released) {
            State::Held(Holding::Lock(lock)) => {
                let guard = {
                    let _entered = runtime.enter();
                    lock.keep_alive_with(ttl, options)
                };
                self.update(&guard);
                *state = State::Held(Holding::Guard(guard));
                Ok(())
            }
            State::Held(Holding::Guard(guard)) => {
                *state = State::Held(Holding::Guard(guard));
                Err(HandleError::AlreadyKeptAlive(self.name()))
            }
            State::Released => Err(HandleError::Released(self.name())),
        }
    }

    /// Why a kept-alive lock was lost, if it was and no operation holds the lock right now.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.state.try_lock().ok()?.loss_reason()
    }

    /// Why a kept-alive lock was lost, if it was, once no operation holds the lock.
    pub async fn settled_loss_reason(&self) -> Option<LossReason> {
        self.state.lock().await.loss_reason()
    }

    /// How many background extensions succeeded (0 unless kept alive).
    pub fn extensions(&self) -> u32 {
        match self.state.try_lock().as_deref() {
            Ok(State::Held(Holding::Guard(guard))) => guard.extensions(),
            _ => 0,
        }
    }

    /// Whether the handle was released, detached or dropped.
    pub fn is_ended(&self) -> bool {
        self.ended.is_cancelled()
    }

    /// Ends the handle: every watch returns [`Watched::Ended`] (a binding's object dropped).
    pub fn end(&self) {
        self.ended.cancel();
    }

    /// Takes the lock out unless an operation holds it (which then drops it itself), leaving
    /// the handle released and ended: for a binding's object dropped unreleased, to release it
    /// in the background or leave it to expire as the binding's rules say.
    pub fn take(&self) -> Option<Holding> {
        self.ended.cancel();
        let mut state = self.state.try_lock().ok()?;
        match std::mem::replace(&mut *state, State::Released) {
            State::Held(holding) => Some(holding),
            State::Released => None,
        }
    }

    /// Waits until the lock is lost or the handle ends, whichever comes first (invariant 4).
    /// Cancel safe: dropping the future stops the watch.
    pub async fn watch(&self) -> Watched {
        loop {
            let notified = self.changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            let current = self.info();
            if let Some(token) = current.lost_token() {
                tokio::select! {
                    // A guard's token also fires on its release: that is the end, not a loss.
                    () = token.cancelled() => {
                        return if self.ended.is_cancelled() {
                            Watched::Ended
                        } else {
                            Watched::Lost
                        };
                    }
                    () = self.ended.cancelled() => return Watched::Ended,
                    () = notified => continue,
                }
            } else if !current.is_lost() {
                let deadline = tokio::time::Instant::from_std(current.deadline());
                tokio::select! {
                    () = tokio::time::sleep_until(deadline) => {}
                    () = self.ended.cancelled() => return Watched::Ended,
                    () = notified => continue,
                }
            }
            if self.ended.is_cancelled() {
                return Watched::Ended;
            }
            if self.info().is_lost() {
                return Watched::Lost;
            }
        }
    }
}
