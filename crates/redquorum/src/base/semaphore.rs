//! Counting semaphores: at most `permits` holders of one name at a time, each holding one
//! *permit*, which is an ordinary Redlock lock on a key of its own.
//!
//! # Why permits are keys, not a count
//! The obvious design keeps a count on each node ("room for k more") and counts a node's grant
//! as a vote. With a majority quorum that is unsafe once `k ≥ 2`: with N = 5 and k = 2, three
//! holders can each gather three grants (9 grants in all) while every node grants at most two
//! (10 in all): `{1,2,3}`, `{3,4,5}`, `{1,2,4}`. A counting design is safe only with a larger
//! quorum `q`, `(k + 1)·q > k·N`, which for k ≥ N means every node, so a single node down
//! stops the semaphore. (`tests/semaphore.rs` runs that schedule against real servers: the
//! counting variant gives three holders, ours two.)
//!
//! Here a semaphore named `s` with `k` permits is `k` lock keys, `s:permit:0` … `s:permit:k-1`,
//! and holding a permit is holding the lock on one of them, by the ordinary algorithm: `SET NX`
//! on a majority, validity, extension, release, fencing. An acquisition tries the permits one
//! round at a time, from a random one onwards, and stops at the first it wins.
//!
//! # Invariants
//! 1. **At most `k` holders.** Two holders of the same permit would be two holders of one lock
//!    key, which the mutex's argument excludes (any two majorities share a node, and that node
//!    holds one value). There are `k` keys, so at most `k` holders, with the same quorum (a
//!    majority, whatever `k`), the same assumptions (clocks that run at about the same rate, the
//!    restart quarantine) and the same fault tolerance as a lock.
//! 2. **Every client of a semaphore must use the same `k`.** The count is not stored anywhere:
//!    a client that believes in `k + 1` permits may take the key `s:permit:k` that the others
//!    never look at.
//! 3. A permit's fencing token is the lock's token for its key: larger than every earlier token
//!    of **the same permit**. A resource shared by the holders keeps the largest token it has
//!    seen per permit ([`LockInfo::permit`](crate::LockInfo::permit)), and refuses a write
//!    carrying a smaller one for that permit; a single "largest token" would refuse the other
//!    holders, who are legitimate at the same time.
//! 4. The attempts of one acquisition at different permits are independent locks: a permit that
//!    was not won is rolled back (in the background, so the next permit is tried at once); only
//!    the permit won is kept.
//!
//! # Cost
//! An uncontended acquisition is one lock round, exactly as for a lock. With `m` of `k` permits
//! held it tries about `k / (k − m)` permits; when all are held, `k` rounds (each refused by
//! every node, so with nothing to roll back) before it waits. Waiters are woken by the release or
//! expiry of any permit (notification), and fair queueing does not apply to semaphores.

use std::fmt;

use crate::base::defaults::MAX_PERMITS;
use crate::base::error::ConfigError;
use crate::base::resources::Resources;

/// A semaphore: its name, its permit count, and the lock key of each permit.
#[derive(Debug, Clone)]
pub(crate) struct Permits {
    /// The semaphore's name, as a resource for spans and metrics.
    name: Resources,
    /// One single-key lock per permit, in permit order.
    keys: Vec<Resources>,
    /// Every permit key, for waiting: the release of any wakes a waiter.
    watched: Resources,
}

impl Permits {
    /// The semaphore `name` with `permits` permits, or why not.
    pub(crate) fn new(name: &str, permits: u32) -> Result<Self, ConfigError> {
        if permits == 0 || permits > MAX_PERMITS {
            return Err(ConfigError::InvalidSetting {
                setting: "permits",
                reason: format!("{permits} is not between 1 and {MAX_PERMITS}"),
            });
        }
        let keys: Vec<String> = (0..permits).map(|i| permit_key(name, i)).collect();
        let watched = {
            let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
            Resources::set(&refs)?
        };
        Ok(Self {
            name: Resources::one(name),
            keys: keys.iter().map(|k| Resources::one(k)).collect(),
            watched,
        })
    }

    /// How many permits the semaphore has.
    pub(crate) fn count(&self) -> u32 {
        // At most MAX_PERMITS, so it fits.
        u32::try_from(self.keys.len()).unwrap_or(MAX_PERMITS)
    }

    /// The permits in the order one attempt tries them: the one at `start` (taken modulo the
    /// count), then the others onwards, wrapping around; each exactly once.
    pub(crate) fn from(
        &self,
        start: u32,
    ) -> ((u32, &Resources), impl Iterator<Item = (u32, &Resources)>) {
        let count = self.count();
        let at = move |i: u32| {
            let permit = (start % count + i) % count;
            (permit, &self.keys[permit as usize])
        };
        (at(0), (1..count).map(at))
    }

    /// The first permit's key.
    pub(crate) fn first_key(&self) -> &Resources {
        // Never empty: `new` refuses 0 permits.
        &self.keys[0]
    }

    /// Every permit key, for a waiter to be woken by the release of any.
    pub(crate) fn watched(&self) -> &Resources {
        &self.watched
    }

    /// The semaphore as a single resource named after it, for spans and metrics.
    pub(crate) fn named(&self) -> &Resources {
        &self.name
    }
}

/// How errors name a semaphore: `jobs (3 permits)`.
impl fmt::Display for Permits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plural = if self.count() == 1 { "" } else { "s" };
        write!(f, "{} ({} permit{plural})", self.name, self.count())
    }
}

/// The lock key of permit `i` of the semaphore `name`.
pub(crate) fn permit_key(name: &str, i: u32) -> String {
    format!("{name}:permit:{i}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_permit_is_a_key_of_its_own_under_the_name() {
        let p = Permits::new("jobs", 3).unwrap();
        let (first, rest) = p.from(0);
        let keys: Vec<&str> = std::iter::once(first)
            .chain(rest)
            .map(|(_, r)| r.first())
            .collect();
        assert_eq!(keys, ["jobs:permit:0", "jobs:permit:1", "jobs:permit:2"]);
        assert_eq!(p.watched().keys().len(), 3);
        assert_eq!(p.to_string(), "jobs (3 permits)");
        assert_eq!(p.named().to_string(), "jobs");
    }

    #[test]
    fn an_attempt_tries_every_permit_once_from_any_start() {
        let p = Permits::new("s", 5).unwrap();
        for start in [0, 3, 4, 5, 17, u32::MAX] {
            let (first, rest) = p.from(start);
            let order: Vec<u32> = std::iter::once(first).chain(rest).map(|(i, _)| i).collect();
            let mut sorted = order.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, [0, 1, 2, 3, 4], "start {start}: {order:?}");
            assert_eq!(order[0], start % 5);
        }
    }

    #[test]
    fn zero_or_too_many_permits_are_refused() {
        for bad in [0, MAX_PERMITS + 1] {
            let err = Permits::new("s", bad).unwrap_err();
            assert!(err.to_string().contains("permits"), "{err}");
        }
        assert!(Permits::new("s", MAX_PERMITS).is_ok());
    }
}
