//! The `redquorum` npm package's native addon: the library itself, exposed to Node.js through
//! napi-rs, not a re-implementation of it.
//!
//! The JavaScript layer (`index.js`) gives it its shape: node-redlock's `Redlock`, `Lock`,
//! `using()` and error classes, `AbortSignal`s for loss and cancellation, leader changes as an
//! async iterator. Everything that touches Redis, keeps time or decides a quorum happens here,
//! in the Rust library, on a Tokio runtime of its own: the event loop only converts values.
//!
//! # Layout
//! - `runtime`: one Tokio runtime per process, never shut down, and the promises JavaScript
//!   awaits on it.
//! - `port`: how the runtime's answers reach the event loop: one threadsafe function per
//!   environment, a burst of answers settled in one call.
//! - `exit`: a Node environment's end, where locks still held are left to expire.
//! - `settings`: milliseconds as durations, node-redlock's settings mapped onto the library's
//!   builder, which checks them.
//! - `manager`: the manager and every acquisition, cancellable.
//! - `held`: the held lock: ownership is the handle, the loss watch, keep-alive.
//! - `views`: read-only answers (node status, holder, leader, marks) and the leader watch.
//! - `errors`: the library's errors as data `index.js` throws as `Error` subclasses.

#![deny(unsafe_code)]

mod errors;
mod exit;
mod held;
mod manager;
// The one place with raw N-API calls: `port`'s module doc says why.
#[allow(unsafe_code)]
mod port;
mod runtime;
mod settings;
mod views;

/// The addon's allocator. A lock cycle's answers are allocated on one thread and freed on the
/// other (the runtime's and the event loop's); glibc's `malloc` serves that through its arena
/// locks, and took about a fifth of the event loop thread's time. With mimalloc the package's
/// CPU per lock cycle fell from 31 to 21 µs (32 tasks, one node; `docs/performance.md`). It
/// serves only the addon's own Rust allocations: Node and V8 keep theirs. Its v2 line, not v3
/// (3.3.2): v3 counts the thread that loaded the addon first as the process's main thread, and
/// once that thread (a worker) has ended, the next thread given its place crashes on its first
/// allocation (`test/processes.test.mjs`, workers that load the package one after another).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
