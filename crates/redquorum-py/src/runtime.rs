//! One Tokio runtime per process, shared by every manager, and the two ways Python waits on it.
//!
//! The library's locks are more than their calls: connections run as tasks, a keep-alive task
//! extends a lock between calls, a subscriber hears releases. They need a runtime that keeps
//! running while Python does something else, so the process has one, started on first use
//! (its one worker thread is named `redquorum`: invariant 6), never stopped: at exit the
//! process simply ends, and the keys of locks still held expire with their TTL.
//!
//! Synchronous calls wait on it with the GIL released ([`Owner::wait`]); asynchronous ones are
//! asyncio futures of the running loop whose Rust futures run on it ([`Owner::awaitable`],
//! [`bridge`](crate::bridge)).
//!
//! # Invariants
//! 1. **A fork does not inherit a runtime.** A child has the parent's memory but none of its
//!    threads: the parent's runtime, its connections and its keep-alive tasks are dead there,
//!    and waiting on them would hang. The runtime is recorded with the pid that built it; a
//!    child builds its own on first use, and every object made before the fork ([`Owner`])
//!    refuses to work in the child with an error that says so, instead of hanging.
//! 2. **The parent's objects are never dropped in a child**: dropping them would wake tasks of a
//!    runtime that has no threads there. They are forgotten instead (their keys expire).
//! 3. **No thread of ours enters Python once the interpreter's exit has begun**
//!    ([`exit`](crate::exit)): every future an awaitable runs is polled with a pass, and
//!    completing it enters no Python on our threads ([`bridge`](crate::bridge) invariant 1); a blocking wait takes its pass before it takes the GIL back, or parks for good. What such a call would have
//!    done (complete a future or set an event nobody can wait for any more) is skipped.
//! 4. **A blocking wait can be interrupted.** While a synchronous call waits, the calling thread
//!    looks for pending signals every [`SIGNAL_CHECK`], so Ctrl-C raises `KeyboardInterrupt`
//!    instead of waiting out a long acquisition; the abandoned future is dropped on the runtime,
//!    which is the library's cancel safety (a lock half-taken is released in the background).
//! 5. **A blocking call's future runs as a task of the runtime**, not on the calling thread
//!    (`block_on` of the future itself would poll it there). A hand-off between two threads of
//!    one process is then decided by the runtime's workers alone: a release wakes the next
//!    waiter's task (the library's `waiting` invariant 12), which sends its attempt at once from
//!    a worker, where a future polled on its Python thread would first need the operating
//!    system to wake that thread. Measured with `python/bench/bench.py`, contended, 32 threads,
//!    one node, the same day: 2,689 hand-offs/s against 2,366 with the futures polled on their
//!    threads (within this machine's noise of each other; kept for the cleaner cancellation:
//!    an abandoned future is aborted on the runtime).
//! 6. **The runtime has one worker thread.** A Python process runs its Python on one thread at
//!    a time (the GIL), and the Rust side of a lock cycle is a few microseconds: one worker keeps
//!    up with every thread or task Python can run (uncontended, 32 threads on one node, three
//!    alternated runs: 21.9–23.2k cycles/s with one worker, 21.5–24.4k with two). A second
//!    worker costs more than it adds. Every hand-off crosses between Python threads and the
//!    runtime several times, and each crossing that wakes one worker may wake the other to look
//!    for work to steal: on two cores, the runtime's threads then parked about 6 times per
//!    contended hand-off. Measured with `python/bench/bench.py` (contended, 32 workers, one
//!    node, three runs of each, alternated): threads 3,690–3,836 hand-offs/s with one worker
//!    against 2,757–3,464 with two; asyncio 3,067–3,343 against 2,804–2,841. So nothing may
//!    hold the worker: blocking waits happen on Python's threads, name lookups on the blocking
//!    pool, an acquisition's error becomes an exception on the thread that raises it
//!    ([`errors::Failed`](crate::errors::Failed)), and the worker takes the GIL (to set a loss
//!    event, to build a rarer error) only through [`exit::attach`], inside `block_in_place`,
//!    which hands its other tasks to another thread until the GIL is free. A Python thread that keeps the GIL for seconds (a long call
//!    into C, a tight loop with a long switch interval) then delays that one task, not every
//!    lock's keep-alive (`test_sync.py`,
//!    `test_a_thread_that_keeps_the_gil_does_not_stop_the_runtime`: a kept-alive lock with a
//!    2 s TTL was lost without it while a 5 s hog held the GIL).
//! 7. **A blocking wait wakes the worker for nothing.** The task hands its output to the waiting
//!    thread on a channel of their own, and the thread looks for signals between timed waits
//!    on that channel. A timer of the runtime's (the `SIGNAL_CHECK` sleep this replaced), set
//!    by each wait from outside the runtime, woke the parked worker whenever it was the
//!    earliest one, only to re-arm its sleep: the worker's parks per contended hand-off went
//!    from 2.4 to 2.2 (counted per thread in `/proc`, 32 threads, one node).
//! 8. **A wait says why, once, on the caller's thread.** An acquisition still waiting after
//!    [`NOTICE_AFTER`] asks its manager what nodes are quarantined and logs it as a warning on
//!    the `redquorum` logger, with the call that ends the wait where a mark is right: from the
//!    waiting thread, between its signal checks, never from the worker (invariant 6). A wait
//!    that ends sooner costs nothing.

use std::future::Future;
use std::sync::Mutex;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors;
use crate::exit::{self, Pass};

/// How often a blocking wait looks for signals (invariant 4).
const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// How long a blocking wait lasts before it says why (invariant 8), as the CLI does.
const NOTICE_AFTER: Duration = Duration::from_secs(1);

/// Logs `text` as a warning on the `redquorum` logger; a logging failure is not the caller's.
fn warn(py: Python<'_>, text: &str) {
    let logged = py
        .import("logging")
        .and_then(|logging| logging.call_method1("getLogger", ("redquorum",)))
        .and_then(|logger| logger.call_method1("warning", ("%s", text)));
    if let Err(e) = logged {
        e.write_unraisable(py, None);
    }
}

/// The runtime of this process, with the pid that built it (invariant 1). Leaked: it lives as
/// long as the process, and a child's copy must never be dropped (invariant 2).
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// This process's runtime, built on first use (and again in a forked child).
fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((owner, runtime)) = *slot
        && owner == pid
    {
        return Ok(runtime);
    }
    // Invariant 6: one worker.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
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
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.wait_noticing(py, what, future, || None)
    }

    /// [`wait`](Self::wait), which after [`NOTICE_AFTER`] of waiting asks `notice` once what to
    /// tell the caller, and logs it as a warning on the `redquorum` logger, from the waiting
    /// thread (invariant 8).
    pub(crate) fn wait_noticing<F, N>(
        &self,
        py: Python<'_>,
        what: &str,
        future: F,
        mut notice: N,
    ) -> PyResult<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
        N: FnMut() -> Option<String> + Send,
    {
        let runtime = self.runtime(what)?;
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(errors::config(format!(
                "{what} would block a thread of redquorum's own runtime; call it from Python code"
            )));
        }
        let finalizer = exit::is_finalizer();
        if exit::closing() && !finalizer {
            // A daemon thread still running while the interpreter exits: its wait could not
            // end in Python any more (invariant 3), so it does not start one.
            py.detach(|| exit::park_forever());
        }
        let (output, _pass) = py.detach(|| {
            // Invariant 5: the future runs as a task of the runtime; this thread only waits,
            // for the output on a channel of its own rather than a timer of the runtime's
            // (invariant 7).
            let (send, output) = std::sync::mpsc::sync_channel(1);
            let mut task = AbortOnDrop(runtime.spawn(async move {
                let _ = send.send(future.await);
            }));
            let started = std::time::Instant::now();
            let mut noticed = false;
            let output = loop {
                match output.recv_timeout(SIGNAL_CHECK) {
                    Ok(output) => break Ok(output),
                    Err(RecvTimeoutError::Timeout) => {
                        if let Some(Err(signalled)) = exit::attach(|py| py.check_signals()) {
                            break Err(signalled);
                        }
                        if !noticed && started.elapsed() >= NOTICE_AFTER {
                            noticed = true;
                            if let Some(text) = notice() {
                                exit::attach(|py| warn(py, &text));
                            }
                        }
                    }
                    // The task ended without its output: it panicked.
                    Err(RecvTimeoutError::Disconnected) => {
                        let ended = runtime.block_on(&mut task.0).err();
                        break Err(PyRuntimeError::new_err(match ended {
                            Some(e) => format!("{what} failed: {e}"),
                            None => format!("{what} failed: it ended without a result"),
                        }));
                    }
                }
            };
            // Invariant 3 (`exit` invariant 2): the pass is taken before the GIL, and dropped
            // once the GIL is ours again, after this closure.
            match Pass::new() {
                Some(pass) => (output, Some(pass)),
                None if finalizer => (output, None),
                None => exit::park_forever(),
            }
        });
        output
    }

    /// An awaitable for the running asyncio loop that resolves with `future`'s output, run on
    /// this object's runtime. Cancelling the awaitable drops the future (the library's cancel
    /// safety applies).
    pub(crate) fn awaitable<'py, F, T, E>(
        &self,
        py: Python<'py>,
        what: &'static str,
        future: F,
    ) -> PyResult<Bound<'py, PyAny>>
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        T: for<'a> IntoPyObject<'a> + Send + 'static,
        E: Into<PyErr> + Send + 'static,
    {
        self.runtime(what)?;
        if exit::closing() {
            // Invariant 3: nothing of ours would complete it once the exit has begun (an
            // `atexit` hook registered before redquorum's runs after it): said at once rather
            // than an awaitable that never finishes. The blocking API still works there.
            return Err(PyRuntimeError::new_err(format!(
                "{what}: the interpreter is exiting, so an awaitable cannot complete; \
                 use the blocking API (redquorum.Redlock) in an atexit hook"
            )));
        }
        crate::bridge::awaitable(py, self.runtime, what, future)
    }
}

/// A blocking wait's task, aborted if the wait ends without it (a signal's exception): its future
/// is then dropped on the runtime, which is the library's cancel safety (invariant 4).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}
