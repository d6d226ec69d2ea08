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
//! Why one thread: JavaScript hands the runtime work from one thread (per environment), and a
//! lock cycle's work in the core is a few microseconds. On a multi-threaded runtime each
//! operation woke a worker, and the workers woke each other to steal it: 1.25 thread switches
//! and 7.5 system calls per lock cycle, the largest share of its CPU (issue 48). One thread,
//! handed a burst of operations at a time (invariant 5), keeps every task of the package's
//! (connections, keep-alives, watchers) where the operations run. It serves 100k+ lock cycles
//! a second, more than one event loop asks for.
//!
//! # Invariants
//! 1. **The runtime outlives every handle.** Built on first use, leaked, never stopped (its
//!    thread runs the dispatcher, which never returns): a
//!    lock dropped at any moment (a worker's teardown, the process's exit) finds it running,
//!    and at exit the process simply ends; the keys of locks still held expire with their TTL.
//! 2. **A promise settles through its environment's port** (`port`), which forgets the
//!    environment when it is torn down: a task finishing after its worker (or the process) is
//!    gone drops its result instead of calling into a freed environment.
//! 3. **Only pending promises keep the event loop alive.** The port holds the loop open
//!    while a promise is pending (Node waits for what is awaited), and nothing else of ours
//!    does unless asked: a held lock does not, so a process that holds nothing, or forgot a
//!    lock, exits on its own (`held`'s loss watcher uses a weak threadsafe function).
//! 4. **There is no `fork()` to survive.** Node's `child_process.fork` and `cluster` start a
//!    new process that loads the addon afresh, so unlike the Python package nothing here is
//!    inherited by a child.
//! 5. **A burst of operations wakes the runtime's thread once.** JavaScript queues each
//!    operation and wakes the dispatcher only when the queue was empty; the dispatcher takes the
//!    whole queue each time it wakes, and starts each operation's task on its own thread, in the
//!    order they were asked for. An operation's future is made there too, never on the event
//!    loop's thread.

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Env, Status};
use tokio::runtime::Runtime;
use tokio::sync::Notify;

use crate::port::Promised;

/// An operation JavaScript started: it makes its future on the runtime's thread, where the
/// future lives and dies (an acquisition's is about 6.5 KB: made on the event loop's thread it
/// was copied there, allocated there, and freed on the other, each a measurable share of a
/// lock cycle).
type Job = Box<dyn FnOnce() + Send>;

/// Operations waiting for the runtime's thread (invariant 5).
#[derive(Default)]
struct Submitted {
    jobs: Mutex<Vec<Job>>,
    ready: Notify,
}

/// The runtime and its queue of submitted operations.
struct Core {
    runtime: &'static Runtime,
    submitted: Arc<Submitted>,
}

/// The core, or why it could not be built (invariant 1).
static CORE: OnceLock<Result<Core, String>> = OnceLock::new();

fn core() -> napi::Result<&'static Core> {
    CORE.get_or_init(start)
        .as_ref()
        .map_err(|message| napi::Error::new(Status::GenericFailure, message.clone()))
}

/// Builds the runtime and starts its thread, which runs the dispatcher for good (invariant 1).
fn start() -> Result<Core, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start redquorum's runtime: {e}"))?;
    let runtime: &'static Runtime = Box::leak(Box::new(runtime));
    let submitted = Arc::new(Submitted::default());
    let queue = Arc::clone(&submitted);
    std::thread::Builder::new()
        .name("redquorum".into())
        .spawn(move || runtime.block_on(dispatch(queue)))
        .map_err(|e| format!("cannot start redquorum's thread: {e}"))?;
    Ok(Core { runtime, submitted })
}

/// The runtime thread's own loop: spawns every submitted operation, a burst at a time
/// (invariant 5). Spawned from the runtime's thread, a task costs no wake-up.
async fn dispatch(submitted: Arc<Submitted>) {
    loop {
        submitted.ready.notified().await;
        let jobs = std::mem::take(
            &mut *submitted
                .jobs
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for job in jobs {
            job();
        }
    }
}

/// This process's runtime, built on first use.
pub(crate) fn runtime() -> napi::Result<&'static Runtime> {
    Ok(core()?.runtime)
}

/// Hands `job` to the runtime's thread, waking it only for the first of a burst (invariant 5).
fn submit(core: &Core, job: Job) {
    let first = {
        let mut jobs = core
            .submitted
            .jobs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        jobs.push(job);
        jobs.len() == 1
    };
    if first {
        core.submitted.ready.notify_one();
    }
}

/// A promise that resolves with `convert(output)`, `output` being what the future that `make`
/// returns gives. `make` and the future run on the runtime's thread; `convert` runs on the
/// JavaScript thread (it builds JavaScript values). Invariant 2; how the answer crosses to the
/// event loop is `port`'s.
pub(crate) fn promise<'env, M, F, T, V, C>(
    env: &'env Env,
    make: M,
    convert: C,
) -> napi::Result<Object<'env>>
where
    M: FnOnce() -> F + Send + 'static,
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
    C: FnOnce(T) -> V + Send + 'static,
    V: ToNapiValue + 'static,
{
    // The runtime first: a promise made and then refused would reject with nobody to hear it.
    let core = core()?;
    let (promised, promise) = Promised::new(env)?;
    submit(
        core,
        Box::new(move || {
            tokio::spawn(async move {
                let gone = promised.gone();
                tokio::select! {
                    biased;
                    // `port` invariant 6: nobody is left to answer.
                    () = gone => {}
                    output = make() => promised.settle(move || convert(output)),
                }
            });
        }),
    );
    Ok(promise)
}

/// Runs `f` with the runtime entered, so that whatever it spawns (a keep-alive task, a
/// background release on drop) lands on it.
pub(crate) fn enter<T>(f: impl FnOnce() -> T) -> napi::Result<T> {
    let _entered = runtime()?.enter();
    Ok(f())
}
