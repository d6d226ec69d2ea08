//! The hot calls' way back to the event loop: one threadsafe function per environment carries
//! every acquisition's, extension's and release's result, instead of one per promise.
//!
//! A promise settled by napi-rs's `JsDeferred` (what [`promise`](crate::runtime::promise) uses)
//! creates a threadsafe function of its own, with its libuv handle and a cleanup hook, and tears
//! it down once settled: measured at 8 µs per promise on this project's 2-core machine, about
//! half of what an uncontended lock-and-release cycle costs the client on one node. So `index.js`
//! registers one dispatcher per environment when it loads ([`listen`]), each hot call takes an
//! id from JavaScript, and its result comes back through the environment's one function as
//! `(id, value)`; completions that arrive together are delivered in one wake-up of the loop.
//!
//! # Invariants
//! 1. **One queue per environment**, kept in a thread-local: an environment (the main thread, a
//!    worker) runs on one thread, and a call made there takes a handle to that thread's queue,
//!    so its result goes back to the environment that asked.
//! 2. **The queue does not hold the event loop open**; `index.js` does, with a timer, while any
//!    of its calls is pending (`runtime` invariant 3: only pending promises keep the loop alive).
//! 3. **A result for an environment that is gone is dropped**: napi-rs marks the function aborted
//!    when Node finalizes it at the environment's teardown, and a call then does nothing.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use napi::Status;
use napi::bindgen_prelude::{Either3, FnArgs, Function};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;

use crate::errors::Failure;
use crate::held::Held;
use crate::runtime;

/// What a hot call resolves with: a lock, a failure, or a count (a release's confirmations;
/// 0 for an extension).
pub(crate) type Settled = Either3<Held, Failure, u32>;

type Args = FnArgs<(u32, Settled)>;

/// The environment's dispatcher, `(id, value) => …`, callable from any thread; weak
/// (invariant 2).
type Queue = ThreadsafeFunction<Args, (), Args, Status, false, true>;

thread_local! {
    /// This environment's queue (invariant 1).
    static QUEUE: RefCell<Option<Arc<Queue>>> = const { RefCell::new(None) };
}

/// Registers this environment's dispatcher: `dispatch(id, value)` settles the call `id`.
// napi-rs registers it with Node, except in `cargo test`'s build, where nothing calls it.
#[cfg_attr(test, allow(dead_code))]
#[napi(ts_args_type = "dispatch: (id: number, value: Held | Failure | number) => void")]
pub fn listen(dispatch: Function<'_, Args, ()>) -> napi::Result<()> {
    let queue = dispatch
        .build_threadsafe_function()
        .callee_handled::<false>()
        .weak::<true>()
        .build()?;
    QUEUE.set(Some(Arc::new(queue)));
    Ok(())
}

/// Runs `future` on the runtime, and settles the call `id` of this environment with its
/// output.
pub(crate) fn complete<F>(id: u32, future: F) -> napi::Result<()>
where
    F: Future<Output = Settled> + Send + 'static,
{
    let queue = QUEUE.with_borrow(|queue| queue.clone()).ok_or_else(|| {
        napi::Error::new(
            Status::GenericFailure,
            "redquorum's native module was loaded without index.js (no dispatcher)",
        )
    })?;
    runtime::runtime()?.spawn(async move {
        let settled = future.await;
        // Invariant 3: an aborted queue drops it.
        queue.call(
            (id, settled).into(),
            ThreadsafeFunctionCallMode::NonBlocking,
        );
    });
    Ok(())
}
