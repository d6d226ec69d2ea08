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
mod runtime;
mod settings;
mod views;
