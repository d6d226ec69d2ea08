//! Read-write locks: any number of readers, or one writer, never both; fenced, kept alive,
//! extended and released like a lock.
//!
//! # How it is stored
//! A read-write lock named `r` is one key on each node (`scripts/rw_*.lua`): while a writer holds
//! it, the string `r` holding the writer's value, exactly a lock's key; while readers hold it, a
//! sorted set of their values, each scored by its expiry in the node's milliseconds, the set
//! expiring with its longest-lived reader. A reader is granted on a node only if `r` is not a
//! string (no writer, nor anybody else's lock of that name) and no writer is waiting; the writer
//! only if `r` does not exist once expired readers are dropped.
//!
//! # Invariants
//! 1. **A writer excludes readers and writers.** Both take a majority of nodes, and any two
//!    majorities share a node. On that node, the second to arrive found the first's key (the
//!    writer's string, or the set with the reader's live entry) and was refused, for as long as
//!    the first's validity lasts: a reader's entry expires at the node's `now + TTL`, measured
//!    after the round started, as a key's `PX` does. Readers never exclude each other.
//! 2. **Writers are not starved by readers.** A writer refused because readers hold a node enters
//!    the lock's waiting writers there (a sorted set at `redlock-writer-waiting:r`: the
//!    acquisition's id, scored by when it stops counting), for [`hold_off`]: four of its retry
//!    delays and a round, at least a second and at most `max_ttl`, so every attempt of a live
//!    writer renews it before it lapses. While a live entry is there no new reader is let in, so
//!    the readers drain and the writer gets in; its grant removes its entry. A writer that gives
//!    up (its retries end, its future is dropped) removes its entry with its last release, as a
//!    fair waiter leaves its queue; one that dies keeps readers out until its entry lapses, at
//!    most `max_ttl`, as a dead holder keeps its lock. A reader refused only because writers
//!    wait is told so, and looks again at least every second: nothing wakes it when a writer
//!    gives up. (Readers may wait behind a stream of writers: this lock prefers writers.)
//! 3. **Fencing tokens order conflicting holders.** A writer's token is the lock's as for any
//!    lock (`max(counter + 1, rounded clock)`, [`fencing`](crate::protocol::fencing)); a reader
//!    raises the counter to the rounded clock without the `+ 1`, so concurrent readers propose the
//!    same token and take no second round. With the argument of `fencing` invariant 2 (the shared
//!    node's counter held the earlier token before the later grant there): a writer's token is
//!    larger than every earlier holder's, reader or writer, and a reader's is at least every
//!    earlier writer's. So the protected resource accepts a **write** only with a token larger
//!    than every read token and at least every write token it has seen, and a **read** only
//!    with a token at least every write token it has seen; a paused holder of either kind is
//!    then refused once a conflicting holder came after it.
//! 4. Waiters are woken by the key's removal (the writer's release, the last reader's), as for a
//!    lock; fair queueing does not apply.
//!
//! The names do not mix with a lock's: a lock on `r` and a read-write lock on `r` exclude each
//! other's writers and locks, but readers only exclude our own writers and locks that use these
//! scripts; another library's `SET NX` on `r` fails while readers hold it (the key exists).

use std::time::Duration;

use crate::protocol::lease::lease;
use crate::protocol::validity;

/// How long a writer refused because of readers keeps new readers out (invariant 2), in ms: a
/// fair waiter's lease for the same retry delay, which every attempt renews, and at most
/// `max_ttl`, so that a writer that died without leaving the waiting writers holds readers off
/// no longer than a dead holder holds its lock.
pub(crate) fn hold_off(retry_delay: Duration, node_timeout: Duration, max_ttl: Duration) -> u64 {
    validity::ttl_millis(lease(retry_delay, node_timeout).min(max_ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_writer_keeps_readers_out_longer_than_its_retry_delay() {
        let ms = Duration::from_millis;
        let minute = Duration::from_secs(60);
        assert_eq!(hold_off(ms(200), ms(100), minute), 1000);
        assert!(hold_off(ms(2000), ms(100), minute) > 2000 * 4);
        assert_eq!(
            hold_off(Duration::MAX, ms(100), minute),
            60_000,
            "at most max_ttl"
        );
    }
}
