//! The held lock, as Python sees it: one handle that owns the library's [`Lock`] (or the
//! [`Guard`] that keeps it alive), whichever thread or task holds the Python object.
//!
//! # Invariants
//! 1. **Ownership is the handle.** The lock's value lives in this object, never in a thread- or
//!    task-local: any thread or task that has the object can extend or release it, and nobody
//!    without it can (redis-py's `Lock` keeps its token in a thread-local, so another thread
//!    cannot release it, and asyncio tasks sharing a thread share it).
//! 2. **One operation at a time.** The lock sits behind an async mutex: an extension and a
//!    release from two threads run one after the other; a release takes the lock out, and
//!    everything after it finds it released.
//! 3. **What the handle reports is current.** [`LockInfo`] is replaced after every extension
//!    and when the lock starts being kept alive, so `remaining()` and `is_lost()` read the
//!    clock against the deadline the last extension reached (a kept-alive lock's is live).
//! 4. **The loss signal fires once,** when the lock is lost (its deadline passed, an extension
//!    failed, its guard gave it up) or released or dropped: whatever waits on it must stop
//!    relying on the lock then, as the library's loss token says.
//!    The call needs the GIL, which busy threads may hold past the deadline: so the events
//!    `lock.lost` hands out (`_Lost` in `redquorum/__init__.py` and `asyncio.py`) read
//!    `Held::is_lost` too, and are never late for code that reads them.
//! 5. **A handle dropped unreleased releases in the background**, on the process's runtime (the
//!    library's drop), or in a forked child is forgotten (runtime invariant 2).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pyo3::prelude::*;
use redquorum::{Guard, HoldOptions, Lock, LockInfo};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::errors::{self, OrRaise};
use crate::exit;
use crate::runtime::Owner;
use crate::settings::{maybe_seconds, seconds};

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

/// A held lock, semaphore permit, reader, writer or leadership (`redquorum.Lock` wraps it).
#[pyclass(module = "redquorum._redquorum", name = "Held", frozen)]
pub(crate) struct Held {
    owner: Owner,
    state: Arc<tokio::sync::Mutex<State>>,
    info: Arc<Mutex<LockInfo>>,
    /// Told whenever `info` changes (invariant 3), so a loss watcher waits for the new deadline.
    changed: Arc<Notify>,
    /// Fired once released or dropped (invariant 4).
    ended: CancellationToken,
}

fn read(info: &Mutex<LockInfo>) -> MutexGuard<'_, LockInfo> {
    info.lock().unwrap_or_else(|e| e.into_inner())
}

impl Held {
    pub(crate) fn new(owner: Owner, acquired: Acquired) -> Self {
        let (info, state) = match acquired {
            Acquired::Lock(lock) => (LockInfo::clone(&lock), State::Lock(lock)),
            Acquired::Guard(guard) => (LockInfo::clone(&guard), State::Guard(guard)),
        };
        Self {
            owner,
            state: Arc::new(tokio::sync::Mutex::new(state)),
            info: Arc::new(Mutex::new(info)),
            changed: Arc::new(Notify::new()),
            ended: CancellationToken::new(),
        }
    }

    fn info(&self) -> LockInfo {
        read(&self.info).clone()
    }

    fn name(&self) -> String {
        read(&self.info).resources().join(", ")
    }

    fn extension(&self, ttl: Duration) -> impl Future<Output = PyResult<()>> + Send + 'static {
        let (state, info, changed) = (
            Arc::clone(&self.state),
            Arc::clone(&self.info),
            Arc::clone(&self.changed),
        );
        let name = self.name();
        async move {
            let mut state = state.lock().await; // invariant 2
            match &mut *state {
                State::Lock(lock) => {
                    let result = lock.extend(ttl).await;
                    *read(&info) = LockInfo::clone(lock); // invariant 3
                    changed.notify_waiters();
                    result.or_raise()
                }
                State::Guard(_) => Err(errors::config(format!(
                    "lock on {name:?} is kept alive: it is extended in the background"
                ))),
                State::Released => Err(released_already(&name)),
            }
        }
    }

    fn release_future(&self) -> impl Future<Output = PyResult<usize>> + Send + 'static {
        let state = Arc::clone(&self.state);
        let ended = self.ended.clone();
        let name = self.name();
        async move {
            let taken = std::mem::replace(&mut *state.lock().await, State::Released);
            let result = match taken {
                State::Lock(lock) => errors::released(&name, &lock.release().await),
                State::Guard(guard) => match guard.release().await {
                    Ok(released) => errors::released(&name, &released),
                    Err(e) => Err(errors::from_error(e)),
                },
                State::Released => Err(released_already(&name)),
            };
            ended.cancel(); // invariant 4
            result
        }
    }
}

fn released_already(name: &str) -> PyErr {
    // A second release is the holder's mistake, but also "not held": raised as NotHeld.
    errors::raise(
        "NotHeld",
        &format!("lock on {name:?} was already released"),
        &[],
    )
}

#[pymethods]
impl Held {
    /// The locked resource; for several, the first (sorted).
    #[getter]
    fn resource(&self) -> String {
        read(&self.info).resource().to_owned()
    }

    /// Every locked resource, sorted.
    #[getter]
    fn resources(&self) -> Vec<String> {
        read(&self.info).resources().to_vec()
    }

    /// The random value that identifies this acquisition.
    #[getter]
    fn value(&self) -> String {
        read(&self.info).value().to_owned()
    }

    /// The fencing token, or None with fencing off.
    #[getter]
    fn fence(&self) -> Option<u64> {
        read(&self.info).fence()
    }

    /// For a semaphore's permit, its index.
    #[getter]
    fn permit(&self) -> Option<u32> {
        read(&self.info).permit()
    }

    /// Whether this is a reader's hold on a read-write lock.
    #[getter]
    fn is_read(&self) -> bool {
        read(&self.info).is_read()
    }

    /// Seconds left before the lock counts as lost; 0.0 once it is.
    fn remaining(&self) -> f64 {
        self.info().remaining().as_secs_f64()
    }

    /// Whether the lock may no longer be relied on. Final.
    fn is_lost(&self) -> bool {
        self.info().is_lost()
    }

    /// Whether the lock is kept alive in the background.
    #[getter]
    fn kept_alive(&self) -> bool {
        self.info().lost_token().is_some()
    }

    /// Why a kept-alive lock was lost, if it was.
    fn loss_reason(&self) -> Option<String> {
        match &*self.state.try_lock().ok()? {
            State::Guard(guard) => guard.loss_reason().map(|r| r.to_string()),
            _ => None,
        }
    }

    /// How many background extensions succeeded.
    fn extensions(&self) -> u32 {
        match self.state.try_lock().as_deref() {
            Ok(State::Guard(guard)) => guard.extensions(),
            _ => 0,
        }
    }

    /// Resets the TTL to `ttl` seconds from now on the nodes that still hold the lock.
    fn extend(&self, py: Python<'_>, ttl: &Bound<'_, PyAny>) -> PyResult<()> {
        let ttl = seconds("ttl", ttl)?;
        self.owner.wait(py, "Lock.extend", self.extension(ttl))?
    }

    /// `extend` as an awaitable.
    fn extend_async<'py>(
        &self,
        py: Python<'py>,
        ttl: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ttl = seconds("ttl", ttl)?;
        self.owner.awaitable(py, "Lock.extend", self.extension(ttl))
    }

    /// Releases the lock on every node; returns how many confirmed.
    fn release(&self, py: Python<'_>) -> PyResult<usize> {
        self.owner.wait(py, "Lock.release", self.release_future())?
    }

    /// `release` as an awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.owner
            .awaitable(py, "Lock.release", self.release_future())
    }

    /// Keeps the lock alive in the background from now on (the library's `Guard`).
    #[pyo3(signature = (ttl, interval=None, margin=None, max_extensions=None, max_hold=None))]
    fn keep_alive(
        &self,
        ttl: &Bound<'_, PyAny>,
        interval: Option<&Bound<'_, PyAny>>,
        margin: Option<&Bound<'_, PyAny>>,
        max_extensions: Option<u32>,
        max_hold: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let ttl = seconds("ttl", ttl)?;
        let mut options = HoldOptions::new();
        if let Some(d) = maybe_seconds("interval", interval)? {
            options = options.interval(d);
        }
        if let Some(d) = maybe_seconds("margin", margin)? {
            options = options.margin(d);
        }
        if let Some(n) = max_extensions {
            options = options.max_extensions(n);
        }
        if let Some(d) = maybe_seconds("max_hold", max_hold)? {
            options = options.max_hold(d);
        }
        self.owner.runtime("Lock.keep_alive")?;
        let name = self.name();
        let mut state = self.state.try_lock().map_err(|_| {
            errors::config(format!(
                "lock on {name:?}: an extension or a release is under way"
            ))
        })?;
        match std::mem::replace(&mut *state, State::Released) {
            State::Lock(lock) => {
                let Some(guard) = self.owner.enter(|| lock.keep_alive_with(ttl, options)) else {
                    return Err(errors::config("the lock belongs to another process"));
                };
                *read(&self.info) = LockInfo::clone(&guard);
                *state = State::Guard(guard);
                self.changed.notify_waiters();
                Ok(())
            }
            State::Guard(guard) => {
                *state = State::Guard(guard);
                Err(errors::config(format!(
                    "lock on {name:?} is already kept alive"
                )))
            }
            State::Released => Err(released_already(&name)),
        }
    }

    /// Gives the lock up without releasing it: it stays held until its TTL runs out, or until
    /// released by value. Returns the value.
    fn detach(&self, py: Python<'_>) -> PyResult<String> {
        let state = Arc::clone(&self.state);
        let ended = self.ended.clone();
        let name = self.name();
        self.owner.wait(py, "Lock.detach", async move {
            let taken = std::mem::replace(&mut *state.lock().await, State::Released);
            let info = match taken {
                State::Lock(lock) => lock.detach(),
                State::Guard(guard) => guard.detach().await,
                State::Released => return Err(released_already(&name)),
            };
            ended.cancel();
            Ok(info.value().to_owned())
        })?
    }

    /// Calls `callback()` once, from a background thread, when the lock is lost, released or
    /// dropped (invariant 4). Never after the interpreter started shutting down.
    fn on_lost(&self, callback: Py<PyAny>) -> PyResult<()> {
        let runtime = self.owner.runtime("Lock.lost")?;
        let (info, changed, ended) = (
            Arc::clone(&self.info),
            Arc::clone(&self.changed),
            self.ended.clone(),
        );
        runtime.spawn(async move {
            loop {
                let notified = changed.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                let current = read(&info).clone();
                if let Some(token) = current.lost_token() {
                    tokio::select! {
                        () = token.cancelled() => break,
                        () = ended.cancelled() => break,
                        () = notified => {}
                    }
                } else {
                    if current.is_lost() {
                        break;
                    }
                    let deadline = tokio::time::Instant::from_std(current.deadline());
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = ended.cancelled() => break,
                        () = notified => {}
                    }
                }
            }
            // Runtime invariant 3: not once the interpreter's exit has begun.
            let fired = exit::attach(|py| {
                if let Err(e) = callback.call0(py) {
                    e.write_unraisable(py, None);
                }
            });
            if fired.is_none() {
                std::mem::forget(callback); // no reference count queued for a GIL never taken
            }
        });
        Ok(())
    }

    fn __repr__(&self) -> String {
        let info = self.info();
        let fence = info
            .fence()
            .map_or_else(|| "None".to_owned(), |f| f.to_string());
        format!(
            "<redquorum.Lock {:?} fence={fence} remaining={:.3}s{}>",
            info.resources().join(", "),
            info.remaining().as_secs_f64(),
            if info.is_lost() { " lost" } else { "" }
        )
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.owner.is_here() {
            // Runtime invariant 2: nothing of a parent's runtime is touched in a child.
            std::mem::forget(Arc::clone(&self.state));
            std::mem::forget(Arc::clone(&self.info));
            std::mem::forget(self.ended.clone());
            std::mem::forget(Arc::clone(&self.changed));
            return;
        }
        self.ended.cancel();
        // Invariant 5; an operation under way holds the lock, and drops it on the runtime.
        if let Ok(mut state) = self.state.try_lock() {
            let taken = std::mem::replace(&mut *state, State::Released);
            drop(state);
            self.owner.enter(|| drop(taken));
        }
    }
}
