//! The held lock, as JavaScript sees it: one handle that owns the library's [`Lock`] (or the
//! [`Guard`] that keeps it alive), and the loss watcher behind `lock.lost`.
//!
//! # Invariants
//! 1. **Ownership is the handle.** The lock's value lives in this object: whatever code has the
//!    object can extend or release it, and nothing else can. node-redlock's `Lock` is the same.
//! 2. **One operation at a time.** The lock sits behind an async mutex: an extension and a
//!    release started together run one after the other; a release takes the lock out, and
//!    everything after it finds it released.
//! 3. **What the handle reports is current.** [`LockInfo`] is replaced after every extension
//!    and when the lock starts being kept alive, so `remaining`, `expiration` and `isLost`
//!    read the clock against the deadline the last extension reached.
//! 4. **The loss callback fires at most once, and only for a loss**: the deadline passed (to
//!    within a kept-alive lock's safety margin), an extension failed, the keys were found gone.
//!    A release or a drop ends the watch without a call: the holder gave the lock up, it did not
//!    lose it.
//! 5. **A watch does not keep the process alive** unless asked (`using()` asks, as
//!    node-redlock's extension timer does): a forgotten lock does not hold a process open.
//! 6. **A handle collected unreleased releases in the background**, on the process's runtime
//!    (the library's drop; runtime invariant 1); at the environment's end it is left to expire
//!    instead (`exit`).
//! 7. **`lock.lost` is never late for code that reads it.** The watcher calls back at the
//!    deadline, but its call waits in the event loop's queue behind whatever runs (a long
//!    synchronous task), and the keys expire meanwhile. So `lost.aborted`, `lost.reason` and
//!    `lost.throwIfAborted()` first ask [`Held::loss_now`], which reads the clock: the signal
//!    aborts the moment a read finds the lock lost, whether or not the watcher's call has run.
//!    A listener added with `addEventListener` still runs only when the loop gets to it; code
//!    that must stop in time reads the signal between steps.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use napi::Env;
use napi::bindgen_prelude::{BigInt, Either, Function, Object};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;
use redquorum::{Guard, Lock, LockInfo};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::errors::{self, Failure, Outcome};
use crate::exit;
use crate::runtime::{self, promise};
use crate::settings::millis;

/// What a handle holds.
#[derive(Debug)]
pub(crate) enum State {
    Lock(Lock),
    Guard(Guard),
    Released,
}

/// What an acquisition hands over.
#[derive(Debug)]
pub(crate) enum Acquired {
    Lock(Lock),
    Guard(Guard),
}

/// A held lock, semaphore permit, reader, writer or leadership (`index.js`'s `Lock` wraps it).
#[napi]
#[derive(Debug)]
pub struct Held {
    state: Arc<tokio::sync::Mutex<State>>,
    info: Arc<Mutex<LockInfo>>,
    /// Told whenever `info` changes (invariant 3), so a loss watcher waits for the new deadline.
    changed: Arc<Notify>,
    /// Fired once released or dropped (invariant 4).
    ended: CancellationToken,
    /// Why a lock nobody keeps alive was lost, when an explicit extension found it so: what
    /// `lock.lost`'s reason says then, rather than "its validity ran out".
    lost_by_extension: Arc<Mutex<Option<Failure>>>,
}

fn read(info: &Mutex<LockInfo>) -> MutexGuard<'_, LockInfo> {
    info.lock().unwrap_or_else(|e| e.into_inner())
}

impl Held {
    pub(crate) fn new(acquired: Acquired) -> Self {
        let (info, state) = match acquired {
            Acquired::Lock(lock) => (LockInfo::clone(&lock), State::Lock(lock)),
            Acquired::Guard(guard) => (LockInfo::clone(&guard), State::Guard(guard)),
        };
        Self {
            state: Arc::new(tokio::sync::Mutex::new(state)),
            info: Arc::new(Mutex::new(info)),
            changed: Arc::new(Notify::new()),
            ended: CancellationToken::new(),
            lost_by_extension: Arc::new(Mutex::new(None)),
        }
    }

    fn name(&self) -> String {
        read(&self.info).resources().join(", ")
    }

    /// Why the lock was lost, once the watcher saw it lost (invariant 4).
    async fn loss(
        state: &tokio::sync::Mutex<State>,
        info: &Mutex<LockInfo>,
        by_extension: &Mutex<Option<Failure>>,
    ) -> Failure {
        Self::loss_of(Some(&*state.lock().await), info, by_extension)
    }

    /// Why the lock was lost: a kept-alive lock's recorded reason when `state` could be read,
    /// an explicit extension's failure if one found it lost, else its validity ran out (which
    /// is what a loss read off the clock is).
    fn loss_of(
        state: Option<&State>,
        info: &Mutex<LockInfo>,
        by_extension: &Mutex<Option<Failure>>,
    ) -> Failure {
        if let Some(failure) = by_extension
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return failure;
        }
        let name = read(info).resources().join(", ");
        if let Some(State::Guard(guard)) = state
            && let Some(reason) = guard.loss_reason()
        {
            let message = format!("lock on {name:?} was lost: {reason}");
            let mut failure = match &reason {
                // The failed round's replies, node by node.
                redquorum::LossReason::ExtensionFailed(round) => {
                    Failure::from(redquorum::Error::LockLost {
                        resource: name.clone(),
                        failure: Some(round.clone()),
                    })
                }
                _ => Failure::lost(&name, &message, reason.name()),
            };
            failure.kind = "lost".to_owned();
            failure.message = message;
            failure.cause = Some(reason.name().to_owned());
            return failure;
        }
        Failure::lost(
            &name,
            &format!("lock on {name:?} was lost: its validity ran out"),
            "validity_ran_out",
        )
    }
}

#[napi]
impl Held {
    /// Every locked resource, sorted.
    #[napi(getter)]
    pub fn resources(&self) -> Vec<String> {
        read(&self.info).resources().to_vec()
    }

    /// The random value that identifies this acquisition.
    #[napi(getter)]
    pub fn value(&self) -> String {
        read(&self.info).value().to_owned()
    }

    /// The fencing token once issued (with the acquisition, or by `issueFence`), else null.
    #[napi(getter)]
    pub fn issued_fence(&self) -> Option<BigInt> {
        read(&self.info).fence().map(BigInt::from)
    }

    /// The fencing token, issued now on the first call (`fencing` invariant 8) and kept: one
    /// round trip to the nodes that voted for the lock.
    #[napi(ts_return_type = "Promise<bigint | Failure>")]
    pub fn issue_fence<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let (state, info) = (Arc::clone(&self.state), Arc::clone(&self.info));
        let name = self.name();
        let issue = async move {
            let mut state = state.lock().await; // invariant 2
            let result = match &mut *state {
                State::Lock(lock) => {
                    let result = lock.fence().await;
                    *read(&info) = LockInfo::clone(lock); // invariant 3
                    result
                }
                State::Guard(guard) => {
                    let result = guard.fence().await;
                    *read(&info) = LockInfo::clone(guard);
                    result
                }
                State::Released => return Either::B(Failure::released_already(&name)),
            };
            match result {
                Ok(token) => Either::A(BigInt::from(token)),
                Err(e) => Either::B(Failure::from(e)),
            }
        };
        promise(env, issue, |outcome| outcome)
    }

    /// For a semaphore's permit, its index.
    #[napi(getter)]
    pub fn permit(&self) -> Option<u32> {
        read(&self.info).permit()
    }

    /// Whether this is a reader's hold on a read-write lock.
    #[napi(getter)]
    pub fn is_read(&self) -> bool {
        read(&self.info).is_read()
    }

    /// Milliseconds left before the lock counts as lost; 0 once it is.
    #[napi(getter)]
    pub fn remaining(&self) -> f64 {
        read(&self.info).remaining().as_secs_f64() * 1000.0
    }

    /// When the lock counts as lost, in ms since the epoch (node-redlock's `expiration`): now
    /// plus what is left on the monotonic clock.
    #[napi(getter)]
    pub fn expiration(&self) -> f64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        (now + read(&self.info).remaining()).as_secs_f64() * 1000.0
    }

    /// Whether the lock may no longer be relied on. Final.
    #[napi(getter)]
    pub fn is_lost(&self) -> bool {
        read(&self.info).is_lost()
    }

    /// The loss, if the lock is lost by now (the clock, or its keep-alive's verdict) and was
    /// neither released nor dropped (invariant 4); else null. What `lock.lost` reads whenever
    /// it is read (invariant 7).
    #[napi]
    pub fn loss_now(&self) -> Option<Failure> {
        if self.ended.is_cancelled() || !read(&self.info).is_lost() {
            return None;
        }
        Some(Self::loss_of(
            self.state.try_lock().ok().as_deref(),
            &self.info,
            &self.lost_by_extension,
        ))
    }

    /// How many background extensions succeeded.
    #[napi(getter)]
    pub fn extensions(&self) -> u32 {
        match self.state.try_lock().as_deref() {
            Ok(State::Guard(guard)) => guard.extensions(),
            _ => 0,
        }
    }

    /// Resets the TTL to `ttl` ms from now on the nodes that still hold the lock.
    #[napi(ts_return_type = "Promise<undefined | Failure>")]
    pub fn extend<'env>(&self, env: &'env Env, ttl: f64) -> napi::Result<Object<'env>> {
        let ttl = millis("duration", ttl)?;
        let (state, info, changed, by_extension) = (
            Arc::clone(&self.state),
            Arc::clone(&self.info),
            Arc::clone(&self.changed),
            Arc::clone(&self.lost_by_extension),
        );
        let name = self.name();
        let extension = async move {
            let mut state = state.lock().await; // invariant 2
            match &mut *state {
                State::Lock(lock) => {
                    let result = lock.extend(ttl).await;
                    let outcome = errors::outcome(result);
                    if let (Either::B(failure), true) = (&outcome, lock.is_lost()) {
                        // The loss's reason, for `lock.lost` (invariant 4).
                        // Its message says it already: `lock on "x" is lost: extension failed…`.
                        let mut lost = failure.clone();
                        lost.kind = "lost".to_owned();
                        *by_extension.lock().unwrap_or_else(|e| e.into_inner()) = Some(lost);
                    }
                    *read(&info) = LockInfo::clone(lock); // invariant 3
                    changed.notify_waiters();
                    outcome
                }
                State::Guard(_) => Either::B(Failure::config(&format!(
                    "lock on {name:?} is kept alive: it is extended in the background"
                ))),
                State::Released => Either::B(Failure::released_already(&name)),
            }
        };
        promise(env, extension, |outcome| outcome)
    }

    /// Releases the lock on every node; resolves with how many confirmed.
    #[napi(ts_return_type = "Promise<number | Failure>")]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let state = Arc::clone(&self.state);
        let ended = self.ended.clone();
        let name = self.name();
        let release = async move {
            let taken = std::mem::replace(&mut *state.lock().await, State::Released);
            ended.cancel(); // invariant 4: a release is no loss
            let outcome: Outcome<u32> = match taken {
                State::Lock(lock) => errors::released(&name, &lock.release().await),
                State::Guard(guard) => match guard.release().await {
                    Ok(released) => errors::released(&name, &released),
                    Err(e) => Either::B(Failure::from(e)),
                },
                State::Released => Either::B(Failure::released_already(&name)),
            };
            outcome
        };
        promise(env, release, |outcome| outcome)
    }

    /// Keeps the lock alive in the background from now on (the library's `Guard`), extending
    /// it to `ttl` ms; `interval` ms, when given, is the longest wait between extensions.
    #[napi]
    pub fn keep_alive(&self, ttl: f64, interval: Option<f64>) -> napi::Result<()> {
        let ttl = millis("duration", ttl)?;
        let interval = interval.map(|ms| millis("interval", ms)).transpose()?;
        let name = self.name();
        let mut state = self.state.try_lock().map_err(|_| {
            errors::invalid(format!(
                "lock on {name:?}: an extension or a release is under way"
            ))
        })?;
        match std::mem::replace(&mut *state, State::Released) {
            State::Lock(lock) => {
                let options = match interval {
                    Some(interval) => redquorum::HoldOptions::new().interval(interval),
                    None => redquorum::HoldOptions::new(),
                };
                let guard = runtime::enter(|| lock.keep_alive_with(ttl, options))?;
                *read(&self.info) = LockInfo::clone(&guard);
                *state = State::Guard(guard);
                self.changed.notify_waiters();
                Ok(())
            }
            State::Guard(guard) => {
                *state = State::Guard(guard);
                Err(errors::invalid(format!(
                    "lock on {name:?} is already kept alive"
                )))
            }
            State::Released => Err(errors::invalid(format!(
                "lock on {name:?} was already released"
            ))),
        }
    }

    /// Calls `callback(failure)` once, on the event loop, when the lock is lost (invariant 4).
    /// With `keepProcessAlive`, the watch holds the event loop open until the lock is released
    /// or lost (invariant 5).
    #[napi]
    pub fn on_lost(
        &self,
        callback: Function<'_, Failure, ()>,
        keep_process_alive: bool,
    ) -> napi::Result<()> {
        let runtime = runtime::runtime()?;
        let (state, info, changed, ended) = (
            Arc::clone(&self.state),
            Arc::clone(&self.info),
            Arc::clone(&self.changed),
            self.ended.clone(),
        );
        let by_extension = Arc::clone(&self.lost_by_extension);
        let call: Box<dyn Fn(Failure) + Send + Sync> = if keep_process_alive {
            let tsfn = callback
                .build_threadsafe_function()
                .callee_handled::<false>()
                .build()?;
            Box::new(move |failure| {
                tsfn.call(failure, ThreadsafeFunctionCallMode::NonBlocking);
            })
        } else {
            let tsfn = callback
                .build_threadsafe_function()
                .callee_handled::<false>()
                .weak::<true>()
                .build()?;
            Box::new(move |failure| {
                tsfn.call(failure, ThreadsafeFunctionCallMode::NonBlocking);
            })
        };
        runtime.spawn(async move {
            loop {
                let notified = changed.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                let current = read(&info).clone();
                if let Some(token) = current.lost_token() {
                    tokio::select! {
                        () = token.cancelled() => {}
                        () = ended.cancelled() => return,
                        () = notified => continue,
                    }
                } else if !current.is_lost() {
                    let deadline = tokio::time::Instant::from_std(current.deadline());
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = ended.cancelled() => return,
                        () = notified => continue,
                    }
                }
                // A guard's token also fires on its release; that is no loss (invariant 4).
                if ended.is_cancelled() {
                    return;
                }
                if read(&info).is_lost() {
                    break;
                }
            }
            call(Self::loss(&state, &info, &by_extension).await);
        });
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.ended.cancel();
        // An operation under way holds the lock, and drops it on the runtime.
        let Ok(mut state) = self.state.try_lock() else {
            return;
        };
        let taken = std::mem::replace(&mut *state, State::Released);
        drop(state);
        // An error means no runtime could ever be built, so no lock was ever taken.
        let _ = runtime::enter(|| match taken {
            // `exit` invariants: at the environment's end, left to expire, and no longer extended.
            State::Lock(lock) if exit::closing() => drop(lock.detach()),
            State::Guard(guard) if exit::closing() => {
                tokio::spawn(async move { drop(guard.detach().await) });
            }
            // Invariant 6: released in the background.
            other => drop(other),
        });
    }
}
