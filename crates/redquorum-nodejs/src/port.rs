//! How the runtime's answers reach JavaScript: one threadsafe function per environment, and a
//! queue of answers that one call of it settles all at once.
//!
//! Every operation of the package is a promise that a task of the core's runtime settles from
//! another thread. napi-rs's `Env::create_deferred` would do it, and did until issue 48: but
//! each deferred creates a threadsafe function of its own (a libuv handle opened and closed, an
//! environment cleanup hook added and removed, a few allocations), and each answer wakes the
//! event loop on its own. A lock cycle is two promises; with 32 tasks at N = 1 that crossing
//! was most of the package's 56–65 µs of CPU per cycle (`perf`: thread switches, `malloc`,
//! the cleanup hooks' hash table, against 24 µs for node-redlock's whole cycle). Here the
//! environment has one threadsafe function for its life, a promise is a bare
//! `napi_create_promise`, and a burst of answers wakes the event loop once (invariant 4).
//! The raw N-API calls this needs are the few below; napi-rs's own threadsafe function always
//! calls a JavaScript function, which we have none to give.
//!
//! # Invariants
//! 1. **Every promise settles once, on its environment's thread**: resolved with its answer, or
//!    rejected when the answer cannot be converted (a panic in the conversion included) or its
//!    operation ended without one (a panic in the library: [`Promised`]'s drop answers for it). Never after its environment is gone.
//! 2. **The threadsafe function is called only while it exists.** Every call is made under the
//!    port's lock, and the function's finalizer, which runs as its environment is torn down,
//!    forgets it under the same lock; answers that come later are dropped on the runtime's
//!    thread, where `exit::closing` is false: a lock in one is released in the background, as
//!    any lock dropped while the process goes on (a worker's end; the process's own exit ends
//!    before a finalizer runs). Those the finalizer drops are left to expire (`exit`).
//! 3. **Only pending promises keep the event loop alive**: the function holds the loop open
//!    while at least one of its environment's promises is pending, and not otherwise (runtime
//!    invariant 3).
//! 4. **One wake-up per burst.** An answer pushed into an empty queue calls the function; one
//!    pushed into a non-empty queue is taken by the call already on its way, since a drain
//!    takes the whole queue under the lock.
//! 5. **One port per environment.** Each environment (the main thread, each worker) runs on its
//!    own thread, so the port is found through a thread-local, looked up by the environment it
//!    was made for: an addon loaded twice on one thread (its `require` cache cleared) has two
//!    environments there, each with its port and its own count of pending promises.
//! 6. **An environment's end stops its operations.** The finalizer cancels the port's token,
//!    and each operation runs against it (`runtime::promise`): a worker terminated while it
//!    waits for a busy lock stops trying, where its acquisition went on retrying for an
//!    environment that no longer existed (with `retryCount: -1`, for good) and took the lock
//!    when it came free. A dropped operation is the library's cancel safety: whatever it had
//!    taken is released in the background.

use std::cell::RefCell;
use std::ffi::c_void;
use std::panic::AssertUnwindSafe;
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use napi::bindgen_prelude::{Object, ToNapiValue};
use napi::{Env, JsError, Status, sys};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Turns an operation's output into its JavaScript value, on the environment's thread.
type Settle = Box<dyn FnOnce(sys::napi_env) -> napi::Result<sys::napi_value> + Send>;

/// A promise's resolver. Used only on its environment's thread (invariant 1).
struct Deferred(sys::napi_deferred);

// SAFETY: the pointer crosses threads inside an answer but is only used by `drain`, which runs
// on the environment's own thread (invariant 1).
unsafe impl Send for Deferred {}

/// One answer waiting for the event loop.
struct Answer {
    deferred: Deferred,
    settle: Settle,
}

/// An environment's threadsafe function and the answers waiting for it.
struct Port {
    state: Mutex<State>,
    /// Cancelled when the environment is torn down: its operations still under way stop
    /// (invariant 6).
    gone: CancellationToken,
}

struct State {
    /// Null once the environment is gone (invariant 2).
    function: sys::napi_threadsafe_function,
    answers: Vec<Answer>,
}

// SAFETY: the function pointer is only used under the port's lock, while it exists (invariant
// 2); N-API allows calling a threadsafe function from any thread.
unsafe impl Send for State {}

impl Port {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues an answer, waking the event loop if it is the first of a burst (invariant 4).
    fn answer(&self, answer: Answer) {
        let mut state = self.state();
        if state.function.is_null() {
            drop(state);
            drop(answer); // invariant 2: its environment is gone
            return;
        }
        let first = state.answers.is_empty();
        state.answers.push(answer);
        if first {
            // SAFETY: the function exists while we hold the lock (invariant 2). A refusal
            // (`napi_closing`) means the environment is being torn down: its finalizer drops
            // the answers.
            unsafe {
                sys::napi_call_threadsafe_function(
                    state.function,
                    ptr::null_mut(),
                    sys::ThreadsafeFunctionCallMode::nonblocking,
                );
            }
        }
    }
}

/// An environment of this thread and its port, and how many of its promises are pending.
struct Local {
    env: sys::napi_env,
    port: Arc<Port>,
    pending: usize,
}

thread_local! {
    /// This thread's environments: one, but for an addon loaded twice (invariant 5).
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

fn check(status: sys::napi_status, what: &str) -> napi::Result<()> {
    if status == sys::Status::napi_ok {
        Ok(())
    } else {
        Err(napi::Error::new(
            Status::from(status),
            format!("redquorum: {what} failed"),
        ))
    }
}

/// The port of `env`, made on first use (invariant 5), counting one more pending promise
/// (invariant 3).
fn begin(env: sys::napi_env) -> napi::Result<Arc<Port>> {
    LOCAL.with_borrow_mut(|locals| {
        let at = match locals.iter().position(|l| l.env == env) {
            Some(at) => at,
            None => {
                locals.push(Local {
                    env,
                    port: open(env)?,
                    pending: 0,
                });
                locals.len() - 1
            }
        };
        let local = &mut locals[at];
        if local.pending == 0 {
            let function = local.port.state().function;
            // SAFETY: on the environment's thread, the function alive (it is forgotten only
            // at the environment's end, and this environment is running).
            check(
                unsafe { sys::napi_ref_threadsafe_function(env, function) },
                "holding the event loop open",
            )?;
        }
        local.pending += 1;
        Ok(Arc::clone(&local.port))
    })
}

/// Counts `settled` promises as settled, letting the event loop go when none is pending.
fn end(env: sys::napi_env, settled: usize) {
    LOCAL.with_borrow_mut(|locals| {
        let Some(local) = locals.iter_mut().find(|l| l.env == env) else {
            return;
        };
        local.pending = local.pending.saturating_sub(settled);
        if local.pending == 0 && settled > 0 {
            let function = local.port.state().function;
            if !function.is_null() {
                // SAFETY: on the environment's thread, the function alive.
                unsafe { sys::napi_unref_threadsafe_function(env, function) };
            }
        }
    });
}

/// Makes `env`'s threadsafe function, not holding the event loop open (invariant 3).
fn open(env: sys::napi_env) -> napi::Result<Arc<Port>> {
    let port = Arc::new(Port {
        state: Mutex::new(State {
            function: ptr::null_mut(),
            answers: Vec::new(),
        }),
        gone: CancellationToken::new(),
    });
    let name = "redquorum";
    let mut js_name = ptr::null_mut();
    // SAFETY: a valid environment on its own thread; the name outlives the call.
    check(
        unsafe {
            sys::napi_create_string_utf8(
                env,
                name.as_ptr().cast(),
                name.len() as isize,
                &mut js_name,
            )
        },
        "naming the answers' queue",
    )?;
    // The finalizer owns this reference; `drain` borrows it as its context until then.
    let context = Arc::into_raw(Arc::clone(&port)).cast_mut().cast::<c_void>();
    let mut function = ptr::null_mut();
    // SAFETY: no JavaScript function (the call goes to `drain`), an unbounded queue, one
    // owner: the environment, until its end releases it.
    let made = unsafe {
        sys::napi_create_threadsafe_function(
            env,
            ptr::null_mut(),
            ptr::null_mut(),
            js_name,
            0,
            1,
            context,
            Some(finalized),
            context,
            Some(drain),
            &mut function,
        )
    };
    if let Err(e) = check(made, "making the answers' queue") {
        // SAFETY: not handed to N-API, so still ours.
        drop(unsafe { Arc::from_raw(context.cast::<Port>()) });
        return Err(e);
    }
    // SAFETY: made just now, on this thread.
    check(
        unsafe { sys::napi_unref_threadsafe_function(env, function) },
        "letting the event loop go",
    )?;
    port.state().function = function;
    Ok(port)
}

/// Settles every queued answer, on the environment's thread (invariants 1, 4).
unsafe extern "C" fn drain(
    env: sys::napi_env,
    _callback: sys::napi_value,
    context: *mut c_void,
    _data: *mut c_void,
) {
    if env.is_null() {
        return; // the environment is being torn down: the finalizer drops the answers
    }
    // SAFETY: the finalizer's reference keeps the port alive while calls can come.
    let port = unsafe { &*context.cast::<Port>() };
    let answers = std::mem::take(&mut port.state().answers);
    let settled = answers.len();
    for Answer { deferred, settle } in answers {
        // A conversion that panics must not unwind into Node (that aborts the process): its
        // promise is rejected instead (invariant 1).
        let settled = std::panic::catch_unwind(AssertUnwindSafe(|| settle(env)))
            .unwrap_or_else(|_| {
                Err(napi::Error::new(
                    Status::GenericFailure,
                    "redquorum: converting the answer failed (a bug in the library; please report it)",
                ))
            });
        // SAFETY: each deferred is settled once, here, on its environment's thread.
        unsafe {
            match settled {
                Ok(value) => sys::napi_resolve_deferred(env, deferred.0, value),
                Err(e) => {
                    sys::napi_reject_deferred(env, deferred.0, JsError::from(e).into_value(env))
                }
            };
        }
    }
    end(env, settled);
}

/// The threadsafe function's end, as its environment is torn down (invariant 2).
unsafe extern "C" fn finalized(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: the reference `open` gave the finalizer.
    let port = unsafe { Arc::from_raw(data.cast::<Port>()) };
    let answers = {
        let mut state = port.state();
        state.function = ptr::null_mut();
        std::mem::take(&mut state.answers)
    };
    drop(answers);
    port.gone.cancel(); // invariant 6
    let _ = LOCAL.try_with(|local| {
        if let Ok(mut locals) = local.try_borrow_mut() {
            locals.retain(|l| !Arc::ptr_eq(&l.port, &port));
        }
    });
}

/// A pending promise, settled from any thread by [`Promised::settle`]; dropped unsettled, it
/// rejects (invariant 1).
pub(crate) struct Promised {
    port: Arc<Port>,
    deferred: Option<Deferred>,
}

impl Promised {
    /// Completes when the promise's environment is torn down (invariant 6).
    pub(crate) fn gone(&self) -> WaitForCancellationFutureOwned {
        self.port.gone.clone().cancelled_owned()
    }

    /// A new promise of `env`, and its JavaScript object.
    pub(crate) fn new(env: &Env) -> napi::Result<(Self, Object<'_>)> {
        let raw = env.raw();
        let mut deferred = ptr::null_mut();
        let mut promise = ptr::null_mut();
        // SAFETY: on the environment's thread.
        check(
            unsafe { sys::napi_create_promise(raw, &mut deferred, &mut promise) },
            "making a promise",
        )?;
        // On an error the promise is never handed out: nothing waits for it.
        let port = begin(raw)?;
        // SAFETY: a promise just made on this environment.
        let object = unsafe {
            <Object as napi::bindgen_prelude::FromNapiValue>::from_napi_value(raw, promise)?
        };
        Ok((
            Self {
                port,
                deferred: Some(Deferred(deferred)),
            },
            object,
        ))
    }

    /// Resolves the promise with `value`, converted on the environment's thread.
    pub(crate) fn settle<V: ToNapiValue + 'static>(
        mut self,
        value: impl FnOnce() -> V + Send + 'static,
    ) {
        if let Some(deferred) = self.deferred.take() {
            self.port.answer(Answer {
                deferred,
                // SAFETY (of `to_napi_value`): called by `drain` with its live environment.
                settle: Box::new(move |env| unsafe { V::to_napi_value(env, value()) }),
            });
        }
    }
}

impl Drop for Promised {
    fn drop(&mut self) {
        if let Some(deferred) = self.deferred.take() {
            self.port.answer(Answer {
                deferred,
                settle: Box::new(|_env| {
                    Err(napi::Error::new(
                        Status::GenericFailure,
                        "redquorum: the operation ended without an answer (a bug in the library; please report it)",
                    ))
                }),
            });
        }
    }
}
