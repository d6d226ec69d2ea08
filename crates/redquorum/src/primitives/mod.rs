//! The primitives beyond one lock, built on the same rounds: sets of resources taken
//! all-or-nothing, semaphores and leader election (the read-write lock's rule is in the
//! protocol). Each says why it is as safe as a lock, and what it costs.

pub(crate) mod election;
pub(crate) mod resources;
pub(crate) mod semaphore;
