//! A Node environment's end (the process's exit, a worker's termination): the locks still held
//! there are left to expire, as a crashed holder's would be, never released half-way.
//!
//! When an environment is torn down, Node runs the finalizers of every object still alive, our
//! lock handles among them. A handle collected while the program runs releases its lock in the
//! background (`held` invariant 3); doing the same at exit would start releases that the exit
//! cuts short at any point: some nodes deleted, some not, the outcome a race with the process's
//! end. The Python package leaves such locks to expire (`crates/redquorum-py/src/runtime.rs`),
//! and so do we: a holder that exits without releasing is a holder that crashed, which Redlock
//! is built for.
//!
//! # Invariants
//! 1. **The hook runs before the finalizers.** Node runs an environment's cleanup hooks in the
//!    reverse order of their registration, and the one that finalizes napi objects is registered
//!    when the addon loads, before any of ours (ours is added by the first acquisition), so by
//!    the time a handle is finalized at teardown, [`closing`] already says so.
//! 2. **Per environment, per thread.** Each environment (the main thread, each worker) runs on
//!    its own thread, so the flag is thread-local: a worker's end leaves its own locks to
//!    expire, and nobody else's.
//! 3. **Left to expire means stopped, too.** A lock kept alive stops being extended (its guard
//!    is detached), so it expires one TTL after its last extension, as documented.

use std::cell::Cell;

use napi::Env;

thread_local! {
    /// Whether this thread's environment is being torn down.
    static CLOSING: Cell<bool> = const { Cell::new(false) };
    /// Whether the hook is registered for this thread's environment.
    static HOOKED: Cell<bool> = const { Cell::new(false) };
}

/// Registers the teardown hook of `env`, once per environment (invariants 1, 2).
pub(crate) fn watch(env: &Env) -> napi::Result<()> {
    if !HOOKED.get() {
        env.add_env_cleanup_hook((), |()| CLOSING.set(true))?;
        HOOKED.set(true);
    }
    Ok(())
}

/// Whether this thread's environment is being torn down.
pub(crate) fn closing() -> bool {
    CLOSING.get()
}
