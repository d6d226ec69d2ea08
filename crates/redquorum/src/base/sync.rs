//! Locking a `Mutex` without a poison path.
//!
//! Nothing the crate does under its mutexes can panic half-way (they guard plain bookkeeping:
//! counts, registries, connection slots), so a poisoned mutex still holds consistent data.
//! Recovering its guard keeps a panic elsewhere (in a user's task, say) from turning every later
//! lock operation into a second panic.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// `mutex`'s guard, poisoned or not.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
