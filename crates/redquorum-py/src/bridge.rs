//! Awaitables for asyncio whose futures run on our runtime and complete without our threads
//! ever taking the GIL.
//!
//! An awaitable is an asyncio future of the running loop; its Rust future runs as a task of the
//! process's runtime ([`runtime`](crate::runtime)). When the task ends, it queues the outcome
//! for the loop and writes one byte to a socket the loop watches (`loop.add_reader`), unless a
//! byte is already on its way; the loop's reader callback ([`Drain`]) then sets every queued
//! outcome on its future, on the loop's own thread, where the GIL is already held.
//!
//! Why not `pyo3-async-runtimes`, whose generic bridge we used before: it completes each future
//! from a thread of the runtime's blocking pool, which must first take the GIL from the loop's
//! thread (which holds it whenever Python runs there), then calls `call_soon_threadsafe`; and
//! two tasks and a done callback come with every awaitable. Measured with
//! `python/bench/bench.py` (N = 1, 2 cores, 32 asyncio tasks): uncontended cycles/s were
//! 7.4k with it, below redis-py's asyncio lock (8.3k) although ours does its I/O in Rust, and
//! contended hand-offs/s 2.4k; with this module, see `docs/python.md`.
//!
//! # Invariants
//! 1. **Our threads never enter Python to complete an awaitable.** A task only queues its
//!    outcome and writes to a socket; converting it to Python objects and setting it on the
//!    future happen in [`Drain`], on the loop's thread. So once the interpreter's exit has
//!    begun ([`exit`](crate::exit)), a task that ends touches nothing of Python's. (The futures
//!    themselves still build exceptions with the GIL, so they are polled only with a pass, as
//!    before: [`Gated`].)
//! 2. **No outcome is left unannounced.** A task queues its outcome, then writes a byte unless
//!    `signalled` was set; [`Drain`] reads every byte, then clears `signalled`, then takes the
//!    queue. An outcome queued after the drain took the queue finds `signalled` clear (or set by
//!    another outcome that also came after, whose byte is still unread) and is announced by a
//!    byte the drain has not read; one queued before is taken by this drain. Clearing
//!    `signalled` before reading would lose an outcome: the read could swallow the byte of an
//!    outcome whose `signalled` stays set, and every later outcome would then find it set and
//!    write nothing (that hung a release in the first version). An extra byte only costs an
//!    empty drain.
//! 3. **An awaitable nobody waits for any more drops its future and its outcome on the
//!    runtime**, which is the library's cancel safety (a lock half-taken or taken is released
//!    in the background, not leaked):
//!    1. cancelled: a done callback aborts the task; an outcome already queued finds the
//!       future cancelled in [`Drain`];
//!    2. forgotten, as when its loop is closed with the task still waiting: the task and the
//!       queue hold the asyncio future only weakly, and the weak reference's callback
//!       ([`Gone`]) aborts the task and takes the outcome back out of the queue once Python
//!       collects the future. It sets `gone` before it takes the queue's lock, and a task
//!       queues its outcome only under that lock after finding `gone` clear, so an outcome is
//!       either taken back or never queued.
//! 4. **A task that panics still completes its awaitable**, with a `RuntimeError`: an awaitable
//!    that never completes would hang its caller.
//! 5. **One socket pair per event loop, per process.** Found by the loop's identity through a
//!    weak reference (a loop that does not take one, as a C extension's may not, is held
//!    strongly instead), so a loop nobody else holds is collected with its selector, which
//!    drops our reader and closes the pair; its entry goes at the next look-up. All of them are
//!    forgotten in a forked child, whose copies belong to the parent's loops.
//! 6. **No Python runs while `LOOPS` is locked.** Python code may let another thread take the
//!    GIL, and that thread may be waiting for `LOOPS`: the look-up only compares references,
//!    and the reader is registered, and entries are dropped, after the lock is released. (A
//!    review reproduced the deadlock with six threads each running event loops.)

use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use futures_util::FutureExt;
use pyo3::IntoPyObjectExt;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyWeakrefReference;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;

use crate::exit::Pass;

/// What the loop's thread runs to turn a task's outcome into the future's result.
type Outcome = Box<dyn FnOnce(Python<'_>) -> PyResult<Py<PyAny>> + Send>;

/// An outcome waiting for the loop: whose it is (a weak reference to the asyncio future).
struct Pending {
    id: u64,
    future: Py<PyWeakrefReference>,
    outcome: Outcome,
}

/// One event loop's queue of outcomes and the socket pair that wakes it.
struct LoopWaker {
    queue: Mutex<Vec<Pending>>,
    /// A byte is on its way to the loop (invariant 2).
    signalled: AtomicBool,
    write: UnixStream,
    read: UnixStream,
    runtime: &'static Runtime,
}

impl LoopWaker {
    fn queue(&self) -> MutexGuard<'_, Vec<Pending>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `pending` and wakes the loop (invariant 2), unless its future is `gone`
    /// (invariant 3). Never enters Python.
    fn complete(&self, pending: Pending, gone: &AtomicBool) {
        let mut queue = self.queue();
        if gone.load(Ordering::SeqCst) {
            drop(queue);
            drop(pending); // on the runtime: this is its task
            return;
        }
        queue.push(pending);
        drop(queue);
        if !self.signalled.swap(true, Ordering::SeqCst) {
            // Non-blocking: a full socket already holds bytes that will wake the loop.
            let _ = (&self.write).write(&[1]);
        }
    }
}

/// The loop's reader callback: sets every queued outcome on its future.
#[pyclass(frozen)]
struct Drain(Arc<LoopWaker>);

#[pymethods]
impl Drain {
    fn __call__(&self, py: Python<'_>) {
        let waker = &self.0;
        // Invariant 2: the bytes are read, then `signalled` cleared, then the queue taken.
        let mut bytes = [0u8; 256];
        while matches!((&waker.read).read(&mut bytes), Ok(n) if n > 0) {}
        waker.signalled.store(false, Ordering::SeqCst);
        let pending = std::mem::take(&mut *waker.queue());
        for Pending {
            future, outcome, ..
        } in pending
        {
            let future = future.bind(py).upgrade();
            let cancelled = |future: &Bound<'_, PyAny>| {
                future
                    .call_method0(pyo3::intern!(py, "cancelled"))
                    .and_then(|c| c.extract::<bool>())
                    .unwrap_or(true)
            };
            let Some(future) = future.filter(|f| !cancelled(f)) else {
                // Invariant 3: whatever it holds is dropped where a release can be started.
                let _entered = waker.runtime.enter();
                drop(outcome);
                continue;
            };
            // The future is ours and not done: setting it cannot fail but for a bug; there is
            // nobody to tell but the loop's exception handler, which these calls reach anyway.
            let _ = match outcome(py) {
                Ok(value) => future.call_method1(pyo3::intern!(py, "set_result"), (value,)),
                Err(e) => {
                    future.call_method1(pyo3::intern!(py, "set_exception"), (e.into_value(py),))
                }
            };
        }
    }
}

/// A done callback that aborts the task behind a future (invariant 3); harmless once the task
/// has ended.
#[pyclass(frozen)]
struct AbortTask(AbortHandle);

#[pymethods]
impl AbortTask {
    fn __call__(&self, _future: &Bound<'_, PyAny>) {
        self.0.abort();
    }
}

/// The callback of the weak reference to an awaitable's future, called when Python collects
/// it (invariant 3.2): the task is aborted and its outcome, if queued, dropped on the runtime.
#[pyclass(frozen)]
struct Gone {
    id: u64,
    gone: Arc<AtomicBool>,
    task: AbortHandle,
    waker: Arc<LoopWaker>,
}

#[pymethods]
impl Gone {
    fn __call__(&self, _reference: &Bound<'_, PyAny>) {
        self.gone.store(true, Ordering::SeqCst); // before the queue's lock (invariant 3.2)
        self.task.abort();
        let taken: Vec<Pending> = {
            let mut queue = self.waker.queue();
            let (taken, kept) = std::mem::take(&mut *queue)
                .into_iter()
                .partition(|p| p.id == self.id);
            *queue = kept;
            taken
        };
        let _entered = self.waker.runtime.enter();
        drop(taken);
    }
}

/// How we find an event loop again: weakly if it takes a weak reference (invariant 5).
enum LoopRef {
    Weak(Py<PyWeakrefReference>),
    Strong(Py<PyAny>),
}

impl LoopRef {
    /// Whether this is `event_loop`; `None` once the loop is gone. Runs no Python code
    /// (invariant 6).
    fn is(&self, event_loop: &Bound<'_, PyAny>) -> Option<bool> {
        match self {
            LoopRef::Weak(weak) => weak
                .bind(event_loop.py())
                .upgrade()
                .map(|l| l.is(event_loop)),
            LoopRef::Strong(strong) => Some(strong.bind(event_loop.py()).is(event_loop)),
        }
    }
}

/// Every loop we have a socket pair for, and its waker.
type Loops = Vec<(LoopRef, Arc<LoopWaker>)>;

/// Every loop we have a socket pair for, with the pid that made them (invariant 5).
static LOOPS: Mutex<Option<(u32, Loops)>> = Mutex::new(None);

/// The waker of `event_loop`, made and registered with it on first use.
fn waker_for(event_loop: &Bound<'_, PyAny>, runtime: &'static Runtime) -> PyResult<Arc<LoopWaker>> {
    let pid = std::process::id();
    // Invariant 6: nothing in this block runs Python code; what it removes is dropped after.
    let (found, dead) = {
        let mut loops = LOOPS.lock().unwrap_or_else(|e| e.into_inner());
        if loops.as_ref().is_some_and(|(owner, _)| *owner != pid)
            && let Some((_, inherited)) = loops.take()
        {
            // A forked child: the parent's loops and sockets are not ours (invariant 5).
            std::mem::forget(inherited);
        }
        let (_, known) = loops.get_or_insert_with(|| (pid, Vec::new()));
        let mut found = None;
        let mut dead = Vec::new();
        for (reference, waker) in std::mem::take(known) {
            match reference.is(event_loop) {
                None => dead.push((reference, waker)),
                Some(true) => {
                    found = Some(Arc::clone(&waker));
                    known.push((reference, waker));
                }
                Some(false) => known.push((reference, waker)),
            }
        }
        (found, dead)
    };
    drop(dead);
    if let Some(waker) = found {
        return Ok(waker);
    }
    let sockets = UnixStream::pair().and_then(|(read, write)| {
        read.set_nonblocking(true)?;
        write.set_nonblocking(true)?;
        Ok((read, write))
    });
    let (read, write) = sockets.map_err(|e| {
        PyRuntimeError::new_err(format!("cannot make redquorum's wake-up socket: {e}"))
    })?;
    let waker = Arc::new(LoopWaker {
        queue: Mutex::default(),
        signalled: AtomicBool::new(false),
        write,
        read,
        runtime,
    });
    let fd = waker.read.as_raw_fd();
    event_loop.call_method1("add_reader", (fd, Drain(Arc::clone(&waker))))?;
    let reference = match PyWeakrefReference::new(event_loop) {
        Ok(weak) => LoopRef::Weak(weak.unbind()),
        Err(_) => LoopRef::Strong(event_loop.clone().unbind()),
    };
    let mut loops = LOOPS.lock().unwrap_or_else(|e| e.into_inner());
    let (_, known) = loops.get_or_insert_with(|| (pid, Vec::new()));
    known.push((reference, Arc::clone(&waker)));
    Ok(waker)
}

/// An asyncio future of the running loop that resolves with `future`'s output, run as a task
/// of `runtime`; `what` names the call in a panic's message.
pub(crate) fn awaitable<'py, F, T, E>(
    py: Python<'py>,
    runtime: &'static Runtime,
    what: &'static str,
    future: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, E>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
    E: Into<PyErr> + Send + 'static,
{
    static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static IDS: AtomicU64 = AtomicU64::new(0);
    let event_loop = GET_RUNNING_LOOP
        .import(py, "asyncio", "get_running_loop")?
        .call0()?;
    let waker = waker_for(&event_loop, runtime)?;
    let py_future = event_loop.call_method0(pyo3::intern!(py, "create_future"))?;
    let id = IDS.fetch_add(1, Ordering::Relaxed);
    let gone = Arc::new(AtomicBool::new(false));
    // The weak reference to the future (whose callback is `Gone`) can only be made once the
    // task exists, to abort it: it reaches the task through this channel.
    let (task_sender, task_receiver) = tokio::sync::oneshot::channel::<Py<PyWeakrefReference>>();
    let task = {
        let waker = Arc::clone(&waker);
        let gone = Arc::clone(&gone);
        runtime.spawn(Gated::new(async move {
            let output = AssertUnwindSafe(future).catch_unwind().await;
            let outcome: Outcome = Box::new(move |py| match output {
                // An error becomes an exception here, on the loop's thread (`errors::Failed`).
                Ok(result) => result
                    .map_err(Into::into)
                    .and_then(|value| value.into_py_any(py)),
                // Invariant 4.
                Err(panic) => Err(PyRuntimeError::new_err(format!(
                    "{what}: redquorum panicked: {}",
                    panic_message(panic.as_ref())
                ))),
            });
            // Sent by `awaitable` before it returns; a closed channel means the awaitable could
            // not be made (no weak reference), and nobody waits: the outcome is dropped here.
            if let Ok(future) = task_receiver.await {
                waker.complete(
                    Pending {
                        id,
                        future,
                        outcome,
                    },
                    &gone,
                );
            }
        }))
    };
    let weak = PyWeakrefReference::new_with(
        &py_future,
        Gone {
            id,
            gone,
            task: task.abort_handle(),
            waker,
        },
    )?;
    let _ = task_sender.send(weak.unbind());
    py_future.call_method1(
        pyo3::intern!(py, "add_done_callback"),
        (AbortTask(task.abort_handle()),),
    )?;
    Ok(py_future)
}

/// A future polled only with a pass (invariant 1; `runtime` invariant 3): ours build exceptions
/// with the GIL, so once the exit has begun they are not polled again; their task sleeps until
/// the process ends.
struct Gated<F>(Pin<Box<F>>);

impl<F> Gated<F> {
    fn new(future: F) -> Self {
        Self(Box::pin(future))
    }
}

impl<F: Future> Future for Gated<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(_pass) = Pass::new() else {
            return Poll::Pending;
        };
        self.0.as_mut().poll(cx)
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    if let Some(message) = panic.downcast_ref::<&str>() {
        message
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message
    } else {
        "a panic without a message"
    }
}
