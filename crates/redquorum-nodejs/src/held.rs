//! The held lock, as JavaScript sees it: one handle that owns the library's [`SharedLock`], and
//! the loss watcher behind `lock.lost`. The rules of a shared handle (ownership is the handle,
//! one operation at a time, current info, a watch that ends once) are the core's
//! ([`redquorum::SharedLock`]'s invariants 1–4); this file converts arguments, errors and
//! callbacks.
//!
//! # Invariants
//! 1. **The loss callback fires at most once, and only for a loss**: the deadline passed (to
//!    within a kept-alive lock's safety margin), an extension failed, the keys were found gone.
//!    A release or a drop ends the watch without a call: the holder gave the lock up, it did not
//!    lose it.
//! 2. **A watch does not keep the process alive** unless asked (`using()` asks, as
//!    node-redlock's extension timer does): a forgotten lock does not hold a process open.
//! 3. **A handle collected unreleased releases in the background**, on the process's runtime
//!    (the library's drop; runtime invariant 1); at the environment's end it is left to expire
//!    instead (`exit`).
//! 4. **`lock.lost` is never late for code that reads it.** The watcher calls back at the
//!    deadline, but its call waits in the event loop's queue behind whatever runs (a long
//!    synchronous task), and the keys expire meanwhile. So `lost.aborted`, `lost.reason` and
//!    `lost.throwIfAborted()` first ask [`Held::loss_now`], which reads the clock: the signal
//!    aborts the moment a read finds the lock lost, whether or not the watcher's call has run.
//!    A listener added with `addEventListener` still runs only when the loop gets to it; code
//!    that must stop in time reads the signal between steps.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use napi::Env;
use napi::bindgen_prelude::{BigInt, Either, Function, Object};
use napi::threadsafe_function::ThreadsafeFunctionCallMode;
use napi_derive::napi;
use redquorum::{Acquired, HandleError, Holding, SharedLock, Watched};

use crate::errors::{self, Failure, Outcome};
use crate::exit;
use crate::runtime::{self, promise};
use crate::settings::millis;

/// A held lock, semaphore permit, reader, writer or leadership (`index.js`'s `Lock` wraps it).
#[napi]
#[derive(Debug)]
pub struct Held {
    shared: SharedLock,
    /// Why a lock nobody keeps alive was lost, when an explicit extension found it so: what
    /// `lock.lost`'s reason says then, rather than "its validity ran out".
    lost_by_extension: Arc<Mutex<Option<Failure>>>,
}

/// Why an operation was not even tried, as a `Failure`: a second release is the holder's
/// mistake, but also "not held"; the others are a misuse (`config`).
fn not_tried(error: &HandleError) -> Failure {
    match error {
        HandleError::Released(name) => Failure::released_already(name),
        _ => Failure::config(&error.to_string()),
    }
}

impl Held {
    pub(crate) fn new(acquired: Acquired) -> Self {
        Self {
            shared: SharedLock::new(acquired),
            lost_by_extension: Arc::new(Mutex::new(None)),
        }
    }

    /// Why the lock was lost: a kept-alive lock's recorded reason, an explicit extension's
    /// failure if one found it lost, else its validity ran out (which is what a loss read off
    /// the clock is).
    fn loss_of(
        shared: &SharedLock,
        reason: Option<redquorum::LossReason>,
        by_extension: &Mutex<Option<Failure>>,
    ) -> Failure {
        if let Some(failure) = by_extension
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
        {
            return failure;
        }
        let name = shared.name();
        if let Some(reason) = reason {
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
        self.shared.info().resources().to_vec()
    }

    /// The random value that identifies this acquisition.
    #[napi(getter)]
    pub fn value(&self) -> String {
        self.shared.info().value().to_owned()
    }

    /// The fencing token once issued (with the acquisition, or by `issueFence`), else null.
    #[napi(getter)]
    pub fn issued_fence(&self) -> Option<BigInt> {
        self.shared.info().fence().map(BigInt::from)
    }

    /// The fencing token, issued now on the first call (`fencing` invariant 8) and kept: one
    /// round trip to the nodes that voted for the lock.
    #[napi(ts_return_type = "Promise<bigint | Failure>")]
    pub fn issue_fence<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let shared = self.shared.clone();
        let issue = move || async move {
            match shared.fence().await {
                Ok(Ok(token)) => Either::A(BigInt::from(token)),
                Ok(Err(e)) => Either::B(Failure::from(e)),
                Err(e) => Either::B(not_tried(&e)),
            }
        };
        promise(env, issue, |outcome| outcome)
    }

    /// For a semaphore's permit, its index.
    #[napi(getter)]
    pub fn permit(&self) -> Option<u32> {
        self.shared.info().permit()
    }

    /// Whether this is a reader's hold on a read-write lock.
    #[napi(getter)]
    pub fn is_read(&self) -> bool {
        self.shared.info().is_read()
    }

    /// Milliseconds left before the lock counts as lost; 0 once it is.
    #[napi(getter)]
    pub fn remaining(&self) -> f64 {
        self.shared.info().remaining().as_secs_f64() * 1000.0
    }

    /// When the lock counts as lost, in ms since the epoch (node-redlock's `expiration`): now
    /// plus what is left on the monotonic clock.
    #[napi(getter)]
    pub fn expiration(&self) -> f64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        (now + self.shared.info().remaining()).as_secs_f64() * 1000.0
    }

    /// Whether the lock may no longer be relied on. Final.
    #[napi(getter)]
    pub fn is_lost(&self) -> bool {
        self.shared.info().is_lost()
    }

    /// The loss, if the lock is lost by now (the clock, or its keep-alive's verdict) and was
    /// neither released nor dropped (invariant 1); else null. What `lock.lost` reads whenever
    /// it is read (invariant 4).
    #[napi]
    pub fn loss_now(&self) -> Option<Failure> {
        if self.shared.is_ended() || !self.shared.info().is_lost() {
            return None;
        }
        Some(Self::loss_of(
            &self.shared,
            self.shared.loss_reason(),
            &self.lost_by_extension,
        ))
    }

    /// How many background extensions succeeded.
    #[napi(getter)]
    pub fn extensions(&self) -> u32 {
        self.shared.extensions()
    }

    /// Resets the TTL to `ttl` ms from now on the nodes that still hold the lock.
    #[napi(ts_return_type = "Promise<undefined | Failure>")]
    pub fn extend<'env>(&self, env: &'env Env, ttl: f64) -> napi::Result<Object<'env>> {
        let ttl = millis("duration", ttl)?;
        let by_extension = Arc::clone(&self.lost_by_extension);
        // Recorded before the lock's new info is seen: a watch that finds it lost reads why
        // (invariant 1), not "its validity ran out".
        let shared = self.shared.clone();
        let noting = move |result: &Result<(), redquorum::Error>, info: &redquorum::LockInfo| {
            if let (Err(e), true) = (result, info.is_lost()) {
                // Its message says it already: `lock on "x" is lost: extension failed…`.
                let mut lost = Failure::from(e);
                lost.kind = "lost".to_owned();
                *by_extension.lock().unwrap_or_else(|e| e.into_inner()) = Some(lost);
            }
        };
        let extension = move || async move {
            match shared.extend_noting(ttl, noting).await {
                Ok(result) => errors::outcome(result),
                Err(e) => Either::B(not_tried(&e)),
            }
        };
        promise(env, extension, |outcome| outcome)
    }

    /// Releases the lock on every node; resolves with how many confirmed.
    #[napi(ts_return_type = "Promise<number | Failure>")]
    pub fn release<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let shared = self.shared.clone();
        let release = move || async move {
            let outcome: Outcome<u32> = match shared.release().await {
                Ok(Ok(released)) => errors::released(&shared, &released),
                Ok(Err(e)) => Either::B(Failure::from(e)),
                Err(e) => Either::B(not_tried(&e)),
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
        let options = match interval {
            Some(interval) => redquorum::HoldOptions::new().interval(interval),
            None => redquorum::HoldOptions::new(),
        };
        self.shared
            .keep_alive(runtime::runtime()?.handle(), ttl, options)
            .map_err(|e| errors::invalid(e.to_string()))
    }

    /// Calls `callback(failure)` once, on the event loop, when the lock is lost (invariant 1).
    /// With `keepProcessAlive`, the watch holds the event loop open until the lock is released
    /// or lost (invariant 2).
    #[napi]
    pub fn on_lost(
        &self,
        callback: Function<'_, Failure, ()>,
        keep_process_alive: bool,
    ) -> napi::Result<()> {
        let runtime = runtime::runtime()?;
        let shared = self.shared.clone();
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
            // Invariant 1: a release or a drop ends the watch without a call.
            if shared.watch().await == Watched::Lost {
                let reason = shared.settled_loss_reason().await;
                call(Self::loss_of(&shared, reason, &by_extension));
            }
        });
        Ok(())
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // An operation under way holds the lock, and drops it on the runtime.
        let Some(taken) = self.shared.take() else {
            return;
        };
        // An error means no runtime could ever be built, so no lock was ever taken.
        let _ = runtime::enter(|| match taken {
            // `exit` invariants: at the environment's end, left to expire, and no longer extended.
            Holding::Lock(lock) if exit::closing() => drop(lock.detach()),
            Holding::Guard(guard) if exit::closing() => {
                tokio::spawn(async move { drop(guard.detach().await) });
            }
            // Invariant 3: released in the background.
            other => drop(other),
        });
    }
}
