//! The interpreter's exit: once it has begun, no thread of ours enters Python again.
//!
//! Rust threads call into Python: the runtime's workers complete asyncio futures and fire loss
//! callbacks, and a Python thread that waited on the runtime with the GIL released takes it
//! back. Once `Py_FinalizeEx` has begun, a thread that asks for the GIL is ended by CPython
//! with `pthread_exit` (3.11–3.13), whose forced unwind through Rust frames aborts the process
//! (SIGABRT); one already running Python code while the interpreter frees its objects may
//! crash it (SIGSEGV). Measured before this gate: 12 of the 210 exits of
//! `python/tests/test_exit.py` ended in one of the two (`PyGILState_Release: thread state must
//! be current` among them); with it, none of 1,050 beside two busy CPU loops. A flag checked
//! before each call is not enough: a thread that read "not exiting" may still be on its way in
//! when finalization starts.
//!
//! So every entry into Python from a thread of ours holds a [`Pass`], and the module's
//! `atexit` hook ([`_at_exit`]) first shuts the gate, then waits, with the GIL released, until no
//! pass is out. After that nothing of ours enters Python: a worker's poll or callback that
//! would is not run (its task sleeps until the process ends), and a Python thread coming back
//! from a wait parks for good instead of taking the GIL (what CPython 3.14 itself does with
//! such threads). The keys of locks still held expire with their TTL.
//!
//! # Invariants
//! 1. **Shut, then drained.** [`_at_exit`] sets `CLOSING` before it reads `INSIDE`, and [`Pass::new`]
//!    counts itself in `INSIDE` before it reads `CLOSING` (both sequentially consistent): either
//!    the pass sees the gate shut and backs out, or `_at_exit` sees the pass and waits for it.
//! 2. **A pass is held for the whole time Python may run on its thread**, including the wait
//!    for the GIL: a Python thread takes its pass before it asks for the GIL back and drops it
//!    once it has it (see [`Pass`]'s users in `runtime`).
//! 3. **`_at_exit` never waits forever**: it gives the passes out [`DRAIN_LIMIT`] (a callback stuck
//!    in Python code cannot hold the exit up), then lets finalization go on.
//! 4. **A forked child starts with the gate open and empty** ([`after_fork_in_child`], run by `fork`'s hook): the
//!    threads whose passes the parent counted do not exist in the child.
//! 5. **The thread that finalizes is never stopped.** It runs the `atexit` hook and then the
//!    interpreter's teardown, where a `__del__` may still call us; CPython lets that thread (and
//!    only it) take the GIL during finalization, so it needs no pass ([`is_finalizer`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

/// Shut by [`_at_exit`]: no new pass is handed out.
static CLOSING: AtomicBool = AtomicBool::new(false);

/// Passes out now.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Set on the thread that ran the `atexit` hook: the one that finalizes (invariant 5).
    static FINALIZER: Cell<bool> = const { Cell::new(false) };
}

/// How long [`_at_exit`] waits for the passes out (invariant 3). What holds one is a poll of a
/// future (microseconds) or a short callback (setting an event); a second is far beyond both.
const DRAIN_LIMIT: Duration = Duration::from_secs(2);

/// Leave to enter Python from a thread of ours; while one is out, the exit waits.
#[must_use = "the pass must be held while Python runs"]
#[derive(Debug)]
pub(crate) struct Pass(());

impl Pass {
    /// A pass, unless the interpreter's exit has begun (invariant 1).
    pub(crate) fn new() -> Option<Self> {
        INSIDE.fetch_add(1, Ordering::SeqCst);
        if CLOSING.load(Ordering::SeqCst) {
            INSIDE.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Self(()))
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        // Saturating: a pass taken before a fork (an `on_lost` callback that forks) is dropped
        // in a child whose count started at zero (invariant 4).
        let _ = INSIDE.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
    }
}

/// Whether the interpreter's exit has begun.
pub(crate) fn closing() -> bool {
    CLOSING.load(Ordering::SeqCst)
}

/// Whether this thread is the one finalizing the interpreter (invariant 5).
pub(crate) fn is_finalizer() -> bool {
    FINALIZER.with(Cell::get)
}

/// Runs `f` with the GIL, unless the exit has begun (then `None`, and `f` is not run), or on
/// the finalizing thread (invariant 5).
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    let pass = Pass::new();
    // On the runtime's one worker (`runtime` invariant 6), waiting for the GIL must not stop
    // every other task: `block_in_place` hands the worker's tasks to another thread until the
    // GIL is ours and `f` is done. Elsewhere (a Python thread) it just runs `f`.
    (pass.is_some() || is_finalizer()).then(|| tokio::task::block_in_place(|| Python::attach(f)))
}

/// For a thread that must never come back once the exit has begun: it sleeps until the
/// process ends.
pub(crate) fn park_forever() -> ! {
    loop {
        std::thread::park();
    }
}

/// The module's `atexit` hook: shuts the gate and waits for the passes out (invariants 1, 3).
#[pyfunction]
pub(crate) fn _at_exit(py: Python<'_>) {
    FINALIZER.with(|f| f.set(true));
    CLOSING.store(true, Ordering::SeqCst);
    py.detach(|| {
        let limit = Instant::now() + DRAIN_LIMIT;
        while INSIDE.load(Ordering::SeqCst) > 0 && Instant::now() < limit {
            std::thread::sleep(Duration::from_millis(1));
        }
    });
}

/// In a forked child (`fork`'s hook): the child's gate is open and empty (invariant 4).
pub(crate) fn after_fork_in_child() {
    INSIDE.store(0, Ordering::SeqCst);
    CLOSING.store(false, Ordering::SeqCst);
}
