//! One Tokio runtime per process, shared by every manager, and the two ways Python waits on it.
//!
//! The library's locks are more than their calls: connections run as tasks, a keep-alive task
//! extends a lock between calls, a subscriber hears releases. They need a runtime that keeps
//! running while Python does something else, so the process has one, started on first use
//! (worker threads named `redquorum`), never stopped: at exit the process simply ends, and the
//! keys of locks still held expire with their TTL.
//!
//! Synchronous calls wait on it with the GIL released ([`wait`]); asynchronous ones are bridged
//! to the running asyncio loop by `pyo3-async-runtimes`, whose generic bridge runs our futures
//! on this runtime ([`Tokio`], [`awaitable`]).
//!
//! # Invariants
//! 1. **A fork does not inherit a runtime.** A child has the parent's memory but none of its
//!    threads: the parent's runtime, its connections and its keep-alive tasks are dead there,
//!    and waiting on them would hang. The runtime is recorded with the pid that built it; a
//!    child builds its own on first use, and every object made before the fork ([`Owner`])
//!    refuses to work in the child with an error that says so, instead of hanging.
//! 2. **The parent's objects are never dropped in a child**: dropping them would wake tasks of a
//!    runtime that has no threads there. They are forgotten instead (their keys expire).
//! 3. **No Rust thread calls into Python once the interpreter is finalizing** ([`finalizing`],
//!    set by an `atexit` hook): a thread that takes the GIL then may be stopped in the middle
//!    of Rust code. What such a call would have done (set an event nobody can wait for any
//!    more) is skipped.
//! 4. **A blocking wait can be interrupted.** While a synchronous call waits, the calling thread
//!    looks for pending signals every [`SIGNAL_CHECK`], so Ctrl-C raises `KeyboardInterrupt`
//!    instead of waiting out a long acquisition; the abandoned future is dropped on the runtime,
//!    which is the library's cancel safety (a lock half-taken is released in the background).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3_async_runtimes::TaskLocals;
use pyo3_async_runtimes::generic::{ContextExt, JoinError, Runtime as GenericRuntime};
use tokio::runtime::Runtime;

use crate::errors;

/// How often a blocking wait looks for signals (invariant 4).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// The runtime of this process, with the pid that built it (invariant 1). Leaked: it lives as
/// long as the process, and a child's copy must never be dropped (invariant 2).
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// Set by the module's `atexit` hook (invariant 3).
static FINALIZING: AtomicBool = AtomicBool::new(false);

/// Whether the interpreter is shutting down, so that no Rust thread may call into Python.
pub(crate) fn finalizing() -> bool {
    FINALIZING.load(Ordering::Acquire)
}

/// The `atexit` hook: from now on no Rust thread calls into Python (invariant 3).
#[pyfunction]
pub(crate) fn _at_exit() {
    FINALIZING.store(true, Ordering::Release);
}

/// This process's runtime, built on first use (and again in a forked child).
fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, runtime)) = *slot
        && owner == pid
    {
        return Ok(runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .thread_name("redquorum")
        .enable_all()
        .build()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start redquorum's runtime: {e}")))?;
    let runtime: &'static Runtime = Box::leak(Box::new(runtime));
    // A forked child's copy of the parent's runtime is overwritten here, never dropped
    // (invariant 2): it is leaked like this one.
    *slot = Some((pid, runtime));
    Ok(runtime)
}

/// What every object that holds connections or tasks records: the process and runtime it was
/// made in (invariant 1).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner {
    pid: u32,
    runtime: &'static Runtime,
}

impl Owner {
    /// The current process's owner, building its runtime if needed.
    pub(crate) fn here() -> PyResult<Self> {
        Ok(Self {
            pid: std::process::id(),
            runtime: runtime()?,
        })
    }

    /// Whether this object was made in the current process (not inherited through a fork).
    pub(crate) fn is_here(&self) -> bool {
        self.pid == std::process::id()
    }

    /// The runtime, if this object belongs to the current process; otherwise the one-line error
    /// a forked child gets (invariant 1).
    pub(crate) fn runtime(&self, what: &str) -> PyResult<&'static Runtime> {
        if self.is_here() {
            Ok(self.runtime)
        } else {
            Err(errors::forked(what, self.pid))
        }
    }

    /// Runs `f` with the runtime entered, so that whatever it spawns (a keep-alive task, a
    /// background release) lands on it. In a forked child, `f` is not run (invariant 2).
    pub(crate) fn enter<T>(&self, f: impl FnOnce() -> T) -> Option<T> {
        self.is_here().then(|| {
            let _entered = self.runtime.enter();
            f()
        })
    }

    /// Waits for `future` on the runtime with the GIL released, so other Python threads run
    /// meanwhile; a pending signal's exception ends the wait (invariant 4).
    pub(crate) fn wait<F>(&self, py: Python<'_>, what: &str, future: F) -> PyResult<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        let runtime = self.runtime(what)?;
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(errors::config(format!(
                "{what} would block a thread of redquorum's own runtime; call it from Python code"
            )));
        }
        py.detach(|| {
            runtime.block_on(async {
                let mut future = std::pin::pin!(future);
                loop {
                    tokio::select! {
                        output = &mut future => return Ok(output),
                        () = tokio::time::sleep(SIGNAL_CHECK) => {
                            Python::attach(|py| py.check_signals())?;
                        }
                    }
                }
            })
        })
    }

    /// An awaitable for the running asyncio loop that resolves with `future`'s output, run on
    /// this object's runtime. Cancelling the awaitable drops the future (the library's cancel
    /// safety applies).
    pub(crate) fn awaitable<'py, F, T>(
        &self,
        py: Python<'py>,
        what: &str,
        future: F,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = PyResult<T>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
    {
        self.runtime(what)?;
        pyo3_async_runtimes::generic::future_into_py::<Tokio, _, T>(py, future)
    }
}

/// The bridge's view of our runtime: where `pyo3-async-runtimes` spawns the futures it awaits
/// for asyncio.
pub(crate) struct Tokio;

/// A spawned future's handle; `Unspawned` only if no runtime could be built, which an
/// [`Owner`] (made before any awaitable) has already reported as an error.
pub(crate) enum Spawned {
    Task(tokio::task::JoinHandle<()>),
    Unspawned,
}

/// Why a spawned future did not finish.
#[derive(Debug)]
pub(crate) enum NotFinished {
    Task(tokio::task::JoinError),
    Unspawned,
}

impl JoinError for NotFinished {
    fn is_panic(&self) -> bool {
        matches!(self, NotFinished::Task(e) if e.is_panic())
    }

    fn into_panic(self) -> Box<dyn std::any::Any + Send + 'static> {
        match self {
            NotFinished::Task(e) if e.is_panic() => e.into_panic(),
            _ => Box::new("the task did not run"),
        }
    }
}

impl Future for Spawned {
    type Output = Result<(), NotFinished>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Spawned::Task(handle) => Pin::new(handle).poll(cx).map_err(NotFinished::Task),
            Spawned::Unspawned => Poll::Ready(Err(NotFinished::Unspawned)),
        }
    }
}

impl GenericRuntime for Tokio {
    type JoinError = NotFinished;
    type JoinHandle = Spawned;

    fn spawn<F>(fut: F) -> Spawned
    where
        F: Future<Output = ()> + Send + 'static,
    {
        match runtime() {
            Ok(runtime) => Spawned::Task(runtime.spawn(fut)),
            Err(_) => Spawned::Unspawned,
        }
    }

    fn spawn_blocking<F>(f: F) -> Spawned
    where
        F: FnOnce() + Send + 'static,
    {
        match runtime() {
            Ok(runtime) => Spawned::Task(runtime.spawn_blocking(f)),
            Err(_) => Spawned::Unspawned,
        }
    }
}

tokio::task_local! {
    /// The asyncio loop and context of the awaitable a future runs for.
    static LOCALS: TaskLocals;
}

impl ContextExt for Tokio {
    fn scope<F, R>(locals: TaskLocals, fut: F) -> Pin<Box<dyn Future<Output = R> + Send>>
    where
        F: Future<Output = R> + Send + 'static,
    {
        Box::pin(LOCALS.scope(locals, fut))
    }

    fn get_task_locals() -> Option<TaskLocals> {
        LOCALS.try_with(|locals| locals.clone()).ok()
    }
}
