//! The held lock, as Python sees it: one handle that owns the library's [`SharedLock`], whichever
//! thread or task holds the Python object. The rules of a shared handle (ownership is the handle,
//! one operation at a time, current info, one loss signal) are the core's
//! ([`redquorum::SharedLock`]'s invariants 1–4); this file converts arguments and errors.
//!
//! # Invariants
//! 1. **The loss signal fires once,** when the lock is lost or the handle ends (released,
//!    detached, dropped): whatever waits on it must stop relying on the lock then. The call
//!    needs the GIL, which busy threads may hold past the deadline: so the events `lock.lost`
//!    hands out (`_Lost` in `redquorum/__init__.py` and `asyncio.py`) read `Held::is_lost` too,
//!    and are never late for code that reads them.
//! 2. **A handle dropped unreleased releases in the background**, on the process's runtime (the
//!    library's drop), or in a forked child is forgotten (runtime invariant 2).

use std::time::Duration;

use pyo3::prelude::*;
use redquorum::{Acquired, Error, HandleError, HoldOptions, LockInfo, Released, SharedLock};

use crate::errors::{self, OrRaise};
use crate::exit;
use crate::runtime::Owner;
use crate::settings::{maybe_seconds, seconds};

/// A held lock, semaphore permit, reader, writer or leadership (`redquorum.Lock` wraps it).
#[pyclass(module = "redquorum._redquorum", name = "Held", frozen)]
pub(crate) struct Held {
    owner: Owner,
    shared: SharedLock,
}

/// Why an operation was not even tried, as Python raises it: a second release is the holder's
/// mistake, but also "not held" (`NotHeld`); the others are a misuse (`ConfigError`).
fn not_tried(error: &HandleError) -> PyErr {
    match error {
        HandleError::Released(_) => errors::raise("NotHeld", &error.to_string(), &[]),
        _ => errors::config(error.to_string()),
    }
}

/// A release's outcome, as the Python call returns it: how many nodes confirmed.
fn released(name: &str, outcome: Result<Result<Released, Error>, HandleError>) -> PyResult<usize> {
    match outcome {
        Ok(Ok(released)) => errors::released(name, &released),
        Ok(Err(e)) => Err(errors::from_error(e)),
        Err(e) => Err(not_tried(&e)),
    }
}

impl Held {
    pub(crate) fn new(owner: Owner, acquired: Acquired) -> Self {
        Self {
            owner,
            shared: SharedLock::new(acquired),
        }
    }

    fn info(&self) -> LockInfo {
        self.shared.info()
    }

    fn extension(&self, ttl: Duration) -> impl Future<Output = PyResult<()>> + Send + 'static {
        let extend = self.shared.extend(ttl);
        async move { extend.await.map_err(|e| not_tried(&e))?.or_raise() }
    }

    fn release_future(&self) -> impl Future<Output = PyResult<usize>> + Send + 'static {
        let release = self.shared.release();
        let name = self.shared.name();
        async move { released(&name, release.await) }
    }
}

#[pymethods]
impl Held {
    /// The locked resource; for several, the first (sorted).
    #[getter]
    fn resource(&self) -> String {
        self.info().resource().to_owned()
    }

    /// Every locked resource, sorted.
    #[getter]
    fn resources(&self) -> Vec<String> {
        self.info().resources().to_vec()
    }

    /// The random value that identifies this acquisition.
    #[getter]
    fn value(&self) -> String {
        self.info().value().to_owned()
    }

    /// The fencing token, or None with fencing off.
    #[getter]
    fn fence(&self) -> Option<u64> {
        self.info().fence()
    }

    /// For a semaphore's permit, its index.
    #[getter]
    fn permit(&self) -> Option<u32> {
        self.info().permit()
    }

    /// Whether this is a reader's hold on a read-write lock.
    #[getter]
    fn is_read(&self) -> bool {
        self.info().is_read()
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
        self.shared.loss_reason().map(|r| r.to_string())
    }

    /// How many background extensions succeeded.
    fn extensions(&self) -> u32 {
        self.shared.extensions()
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
        let runtime = self.owner.runtime("Lock.keep_alive")?;
        self.shared
            .keep_alive(runtime.handle(), ttl, options)
            .map_err(|e| not_tried(&e))
    }

    /// Gives the lock up without releasing it: it stays held until its TTL runs out, or until
    /// released by value. Returns the value.
    fn detach(&self, py: Python<'_>) -> PyResult<String> {
        let detach = self.shared.detach();
        let info = self.owner.wait(py, "Lock.detach", detach)?;
        Ok(info.map_err(|e| not_tried(&e))?.value().to_owned())
    }

    /// Calls `callback()` once, from a background thread, when the lock is lost, released or
    /// dropped (invariant 1). Never after the interpreter started shutting down.
    fn on_lost(&self, callback: Py<PyAny>) -> PyResult<()> {
        let runtime = self.owner.runtime("Lock.lost")?;
        let shared = self.shared.clone();
        runtime.spawn(async move {
            shared.watch().await; // lost or ended: either way, once (invariant 1)
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
            std::mem::forget(self.shared.clone());
            return;
        }
        // Invariant 2; an operation under way holds the lock, and drops it on the runtime.
        if let Some(taken) = self.shared.take() {
            self.owner.enter(|| drop(taken));
        }
    }
}
