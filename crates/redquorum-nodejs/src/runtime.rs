//! One Tokio runtime per process, shared by every manager of every `worker_thread`, and the
//! promises JavaScript awaits on it.
//!
//! The library's locks are more than their calls: connections run as tasks, a keep-alive task
//! extends a lock between calls, a subscriber hears releases. They need a runtime that keeps
//! running while JavaScript does something else, so all I/O happens on this one, never on
//! the event loop's thread (which only converts values).
//!
//! Why not napi-rs's own runtime (its `tokio_rt` feature): napi-rs shuts that runtime down
//! when the last Node environment is torn down, that is at the process's exit. A lock still
//! held then is dropped by its finalizer, and its drop spawns the background release on the
//! current runtime; on a runtime being shut down that spawn panics, and a panic across the FFI
//! boundary aborts the process: exactly the crash the Python package once had at exit
//! (`crates/redquorum-py/src/exit.rs`). This runtime is never shut down.
//!
//! # Invariants
//! 1. **The runtime outlives every handle.** Built on first use, leaked, never stopped: a
//!    lock dropped at any moment (a worker's teardown, the process's exit) finds it running,
//!    and at exit the process simply ends; the keys of locks still held expire with their TTL.
//! 2. **A promise settles through napi-rs's deferred**, whose threadsafe function napi-rs
//!    aborts when the environment that made it is torn down: a task finishing after its worker
//!    (or the process) is gone drops its result instead of calling into a freed environment.
//! 3. **Only pending promises keep the event loop alive.** A deferred holds the loop open
//!    while its promise is pending (Node waits for what is awaited), and nothing else of ours
//!    does unless asked: a held lock does not, so a process that holds nothing, or forgot a
//!    lock, exits on its own (`held`'s loss watcher uses a weak threadsafe function).
//! 4. **There is no `fork()` to survive.** Node's `child_process.fork` and `cluster` start a
//!    new process that loads the addon afresh, so unlike the Python package nothing here is
//!    inherited by a child.

use std::future::Future;
use std::sync::OnceLock;

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Env, Status};
use tokio::runtime::Runtime;

/// The runtime, or why it could not be built (invariant 1).
static RUNTIME: OnceLock<Result<&'static Runtime, String>> = OnceLock::new();

/// This process's runtime, built on first use.
pub(crate) fn runtime() -> napi::Result<&'static Runtime> {
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .thread_name("redquorum")
                .enable_all()
                .build()
                .map(|runtime| &*Box::leak(Box::new(runtime)))
                .map_err(|e| format!("cannot start redquorum's runtime: {e}"))
        })
        .clone()
        .map_err(|message| napi::Error::new(Status::GenericFailure, message))
}

/// A promise that resolves with `convert(future's output)`. The future runs on the runtime;
/// `convert` runs on the JavaScript thread (it builds JavaScript values). Invariant 2.
pub(crate) fn promise<'env, F, T, V, C>(
    env: &'env Env,
    future: F,
    convert: C,
) -> napi::Result<Object<'env>>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    C: FnOnce(T) -> V + Send + 'static,
    V: ToNapiValue + 'static,
{
    let runtime = runtime()?;
    let (deferred, promise) = env.create_deferred()?;
    runtime.spawn(async move {
        let output = future.await;
        deferred.resolve(move |_env: Env| Ok(convert(output)));
    });
    Ok(promise)
}

/// Runs `f` with the runtime entered, so that whatever it spawns (a keep-alive task, a
/// background release on drop) lands on it.
pub(crate) fn enter<T>(f: impl FnOnce() -> T) -> napi::Result<T> {
    let _entered = runtime()?.enter();
    Ok(f())
}
