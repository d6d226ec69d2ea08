//! Random identifiers that must never repeat across processes: lock values, fair waiters' ids,
//! node markers.
//!
//! A lock's value is what makes a release or an extension ours: two holders that drew the same
//! value could release each other's lock, and a third client would get in. So the values come
//! from the operating system (`getrandom`), not from a generator in the process's memory. A
//! forked child inherits that memory: rand 0.10's thread-local generator has no fork protection
//! (removed in rand 0.9), so a parent and its children, or two children, draw the same
//! sequence. Seen: four Python workers forked from one parent, one manager each, drew equal
//! values and one released another's lock (`python/tests/test_process.py`). Cost: one
//! `getrandom` system call per acquisition, well under a microsecond; a round trip to a node
//! is tens of them.
//!
//! # Invariants
//! 1. Every identifier is drawn from the operating system at the moment it is made, never from
//!    state a fork could copy. If the system refuses (it does not on Linux once booted), the
//!    thread's generator is used with the process id and the clock mixed in, so that processes
//!    still differ.

use std::time::{SystemTime, UNIX_EPOCH};

use rand::TryRng;
use rand::rngs::SysRng;

/// `N` random bytes from the operating system (invariant 1).
pub(crate) fn bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if SysRng.try_fill_bytes(&mut bytes).is_err() {
        rand::fill(&mut bytes);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mix = (u128::from(std::process::id()) << 64) ^ nanos;
        for (b, m) in bytes.iter_mut().zip(mix.to_le_bytes().iter().cycle()) {
            *b ^= m;
        }
    }
    bytes
}

/// A random `u64` (invariant 1).
pub(crate) fn u64() -> u64 {
    u64::from_le_bytes(bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ() {
        assert_ne!(bytes::<20>(), bytes::<20>());
        assert_ne!(u64(), u64());
    }
}
