//! The resources one lock holds: one key, or a set of keys taken all-or-nothing; and how it
//! holds them: alone (a lock), or as a reader or the writer of a read-write lock.
//!
//! # Invariants
//! 1. A set is never empty, has no duplicates and is sorted, so every client asking for the same
//!    resources, in whatever order, sends the same keys in the same order.
//! 2. A one-key set is sent in the standard wire format (plain `SET NX PX`, the standard
//!    compare-and-delete script), so other Redlock clients interoperate; only sets of two or
//!    more keys use the all-or-nothing scripts (see `node`).
//!
//! Invariant 1 gives a canonical order; what makes sets deadlock-free is the all-or-nothing
//! script: a node grants every key of a set or none, so two clients never each hold part of the
//! same set on one node and wait for each other.

use std::fmt;
use std::sync::Arc;

use crate::base::error::ConfigError;
/// The keys of one lock (invariant 1), and how it holds them. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resources(Arc<[String]>, Access);

/// How a lock holds its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Alone: a lock, in the standard wire format for one key.
    Exclusive,
    /// As one of the readers of a read-write lock ([`rwlock`](crate::protocol::rwlock)).
    Read,
    /// As the writer of a read-write lock.
    Write,
}

impl Resources {
    /// A single resource.
    pub(crate) fn one(resource: &str) -> Self {
        Self(Arc::from([resource.to_owned()]), Access::Exclusive)
    }

    /// A single read-write lock, held as `access` says.
    pub(crate) fn read_write(resource: &str, access: Access) -> Self {
        Self(Arc::from([resource.to_owned()]), access)
    }

    /// How the lock holds its key.
    pub(crate) fn access(&self) -> Access {
        self.1
    }

    /// A set of resources, deduplicated and sorted (invariant 1).
    pub(crate) fn set(resources: &[&str]) -> Result<Self, ConfigError> {
        let mut keys: Vec<String> = resources.iter().map(|&r| r.to_owned()).collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Err(ConfigError::NoResources);
        }
        Ok(Self(keys.into(), Access::Exclusive))
    }

    /// Every key, sorted.
    pub(crate) fn keys(&self) -> &[String] {
        &self.0
    }

    /// The first key in sorted order, the one resource of a single-resource lock.
    pub(crate) fn first(&self) -> &str {
        // Never empty (invariant 1); `""` only to avoid a panic path.
        self.0.first().map_or("", String::as_str)
    }
}

/// One resource as itself, a set as `a, b, c`: how errors and logs name a lock.
impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_are_sorted_and_deduplicated_whatever_the_order_given() {
        let a = Resources::set(&["b", "a", "c", "a"]).unwrap();
        let b = Resources::set(&["c", "b", "a"]).unwrap();
        assert_eq!(a.keys(), ["a", "b", "c"]);
        assert_eq!(a, b);
        assert_eq!(a.first(), "a");
        assert_eq!(a.to_string(), "a, b, c");
    }

    #[test]
    fn an_empty_set_is_a_config_error() {
        assert_eq!(Resources::set(&[]), Err(ConfigError::NoResources));
    }

    #[test]
    fn a_set_of_one_is_the_single_resource() {
        assert_eq!(Resources::set(&["x", "x"]).unwrap(), Resources::one("x"));
        assert_eq!(Resources::one("x").to_string(), "x");
    }
}
