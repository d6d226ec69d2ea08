//! Fencing tokens: a number that grows with every acquisition of a resource, across clients,
//! processes and independent masters.
//!
//! A lock alone cannot stop a holder that paused (GC, swap, a stopped VM) past its validity from
//! writing after the next holder got the lock. A fencing token can: every acquisition carries a
//! larger token than all before it, and the protected resource refuses any write whose token is
//! smaller than the largest it has seen. [`LockInfo::fence`](crate::LockInfo::fence) is that token.
//!
//! # How a token is chosen
//! 1. The acquisition's `SET NX PX` is a script that, on success, also returns the node's counter
//!    for the resource (key `redlock-fence:<resource>`) and the node's clock (`TIME`, µs).
//! 2. The client takes `token = max over granting nodes of max(counter + 1, time in µs)`.
//! 3. It stores the token on the nodes it locked with a script that applies only while the lock
//!    still holds our value (counter := max(counter, token)), and hands the lock out only once a
//!    quorum stored it, within the validity. Otherwise the attempt fails and is rolled back.
//!
//! A lock on a set of resources gets one token: step 1 returns the largest counter of the set,
//! and step 3 stores the token in the counter of every resource of the set, while all of its keys
//! still hold our value. The invariants below then hold for each resource of the set.
//!
//! # Invariants (why tokens increase)
//! 1. A token handed out is stored on a quorum `S` of nodes before anybody may use it.
//! 2. A later acquisition of the same resource (alone or in a set) wins on a quorum `M`; `S` and `M` share a node
//!    (two majorities always do), and that node's `SET NX` succeeded only after the earlier
//!    lock's key was gone there, so after the earlier store. Its counter is at least the
//!    earlier token, and the later token is larger (step 2 adds one).
//! 3. The store applies only while the lock value is ours, so a holder whose lock expired before
//!    the store cannot leave a token behind that a later holder did not see.
//! 4. What can break it: a node of `S` that loses its data, if that leaves fewer than a quorum
//!    holding the token. The restart quarantine keeps such a node from voting for `max_ttl`,
//!    and the clock term of step 2 covers a lost counter as long as node clocks differ by less
//!    than the time between the two acquisitions (at least `max_ttl` when quarantine is on).
//!    If a majority loses its data at once, there is no guarantee.
//! 5. Counters expire after the fence retention (a day by default) without use; the next token
//!    then comes from the clock term, which is larger as long as node clocks differ by less
//!    than half the retention.
//!
//! Tokens are microsecond timestamps in practice (about 2^51 today), below 2^53, so the Lua
//! scripts compare them exactly as numbers.

/// The smallest token a node would take as new: one more than its counter, and no less than its
/// clock in microseconds (so a node that lost its counter cannot send tokens backwards).
pub(crate) fn floor(counter: u64, seconds: u64, micros: u64) -> u64 {
    let clock = seconds.saturating_mul(1_000_000).saturating_add(micros);
    counter.saturating_add(1).max(clock)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_wins_over_an_older_counter() {
        assert_eq!(floor(5, 1_700_000_000, 250), 1_700_000_000_000_250);
    }

    #[test]
    fn the_counter_wins_when_it_is_ahead_of_the_clock() {
        let ahead = 1_700_000_000_000_250;
        assert_eq!(floor(ahead, 1_700_000_000, 0), ahead + 1);
    }

    #[test]
    fn a_lost_counter_still_gives_a_clock_token() {
        assert_eq!(floor(0, 2, 3), 2_000_003);
        assert_eq!(floor(0, 0, 0), 1, "never zero");
    }
}
