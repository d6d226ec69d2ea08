//! The base floor: what every folder above uses, and which uses nothing above it. The one error
//! type, the settings' defaults and bounds, every metric and span name, the random draws every
//! identifier comes from, and the plain values an acquisition is made of (the resources of one
//! lock, a semaphore's permits, a waiter's place in a queue). It imports only from `protocol`.

pub mod defaults;
pub(crate) mod error;
pub(crate) mod fresh;
pub(crate) mod queue;
pub(crate) mod resources;
pub(crate) mod semaphore;
pub(crate) mod sync;
pub(crate) mod telemetry;
