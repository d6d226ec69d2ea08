//! Fencing tokens: a number that grows with every acquisition of a resource, across clients,
//! processes and independent masters.
//!
//! A lock alone cannot stop a holder that paused (GC, swap, a stopped VM) past its validity from
//! writing after the next holder got the lock. A fencing token can: every acquisition carries a
//! larger token than all before it, and the protected resource refuses any write whose token is
//! smaller than the largest it has seen. [`LockInfo::fence`](crate::LockInfo::fence) is that token.
//!
//! # How a token is chosen
//! 1. The acquisition's `SET NX PX` is a script that, on success, also advances the node's
//!    counter for the resource (key `redlock-fence:<resource>`) in the same atomic step, to
//!    `max(counter + 1, the node's clock in µs rounded down to the grain)`
//!    (`scripts/fence_advance.lua`; the grain is [`clock_grain`]). The new counter is the node's
//!    *proposal*.
//! 2. When every vote of the winning quorum proposed the same value, that value is the token, and
//!    it is already stored on that quorum: the lock is handed out at once. This is the steady
//!    state: nodes that saw the same acquisitions hold the same counters, and read the same
//!    rounded clock unless their clocks straddle a grain boundary (about `δ / grain` of the
//!    acquisitions that cross one, `δ` being how far apart in time the nodes run the script).
//! 3. Otherwise (a node lost its counter or let it expire, missed acquisitions while it was
//!    away, advanced it in an attempt that lost, or read its clock across a grain boundary) the
//!    token is the largest proposal of any node that granted. A second round stores it
//!    (counter := max(counter, token)) on the nodes we locked, with a script that applies only
//!    while the lock still holds our value, and the lock is handed out only once a quorum stored
//!    it, within the validity. Otherwise the attempt fails and is rolled back.
//!
//! A lock on a set of resources gets one token: step 1 advances every counter of the set to one
//! value above the largest of them, and step 3 stores the token in the counter of every resource
//! of the set, while all of its keys still hold our value. The invariants below then hold for
//! each resource of the set.
//!
//! # Invariants (why tokens increase)
//! 1. A token handed out is stored on a quorum `S` of nodes before anybody may use it: by the
//!    acquisition itself on the quorum of votes that all proposed it (step 2), or by the store
//!    round (step 3).
//! 2. A later acquisition of the same resource (alone or in a set) wins on a quorum `M` of
//!    votes; `S` and `M` share a node (two majorities always do), and that node's `SET NX`
//!    succeeded only after the earlier lock's key was gone there, so after the earlier token was
//!    stored there (in the same script, or by a store that required the earlier key). Its counter
//!    was at least the earlier token, so its proposal is larger, and so is the later token: the
//!    agreed proposal of `M` (step 2) or the largest proposal (step 3), which is at least that
//!    node's.
//! 3. The store applies only while the lock value is ours, so a holder whose lock expired before
//!    the store cannot leave a token behind that a later holder did not see. A counter advanced
//!    by an attempt that then lost only makes later proposals larger.
//! 4. What can break it: a node of `S` that loses its data, if that leaves fewer than a quorum
//!    holding the token. The restart quarantine keeps such a node from voting for `max_ttl`,
//!    and the clock term of step 1 covers a lost counter: every proposal is at least the node's
//!    clock minus the grain, and a token is at most the clock of the node that proposed it (a
//!    counter grows by one per acquisition, so it stays behind the clocks while a resource is
//!    acquired fewer than a million times a second; a Redis server runs a few hundred thousand
//!    commands a second in all). So a later token is larger as long as node clocks differ by
//!    less than the time between the two acquisitions minus the grain: at least
//!    `max_ttl − grain ≥ max_ttl / 2` when quarantine is on, even if a majority lost its data at
//!    once. With the quarantine off, nothing keeps the two acquisitions that far apart: tokens
//!    then increase only for acquisitions further apart than the grain plus the clock
//!    difference.
//! 5. Counters expire after the fence retention (a day by default, never less than two seconds,
//!    whatever any client of the servers configured) without use; the next token then comes
//!    from the clock term, which is larger as long as node clocks differ by less than
//!    `(retention − grain) / 2`: half a second at the shortest retention and the coarsest grain,
//!    whatever other clients of the servers configured.
//! 6. **Without the quarantine, the exact clock.** Nothing then keeps a node that lost its counter
//!    from voting at once, and within one grain such a node and one that missed the last
//!    acquisition would both propose the rounded clock that the last token was: the same token
//!    twice. So a manager with the quarantine off rounds to 1 µs: its nodes' proposals then
//!    differ in practice, it takes the store round, and a node that lost its counter is covered
//!    as before this design, while node clocks differ by less than the time between the two
//!    acquisitions.
//!
//! This is where a clock assumption enters, and the only place: invariants 4–6. The grain
//! trades a little of their margin (at most a second, at most half of `max_ttl`) for nodes that
//! agree, and so for one round instead of two; every client of the same servers must use the
//! same `max_ttl`, as the quarantine already requires.
//!
//! Tokens are microsecond timestamps in practice (about 2^51 today), below 2^53, so the Lua
//! scripts compare them exactly as numbers.

use std::time::Duration;

/// The clock grain, in µs, for a manager whose largest TTL (and quarantine) is `max_ttl`: a
/// second, or half of `max_ttl` if that is shorter (invariant 4); with the quarantine off, 1 µs,
/// the exact clock (invariant 6).
pub(crate) fn clock_grain(max_ttl: Duration, quarantine: bool) -> u64 {
    if !quarantine {
        return 1;
    }
    let grain = Duration::from_secs(1).min(max_ttl / 2);
    u64::try_from(grain.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// What a fenced acquisition tells the nodes about the counters: how long to keep them and the
/// clock grain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Advance {
    pub(crate) retention_ms: u64,
    pub(crate) grain_us: u64,
}

/// What the nodes that granted an acquisition proposed as its token (step 1), gathered as their
/// replies come in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Proposals {
    /// The largest proposal of any node that granted, vote or not (step 3).
    largest: Option<u64>,
    /// The smallest and largest proposal among the votes.
    votes: Option<(u64, u64)>,
}

/// An acquisition's token, and whether it still needs the store round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) value: u64,
    /// Already stored on the quorum of votes (step 2, invariant 1): no store round.
    pub(crate) stored: bool,
}

impl Proposals {
    /// Adds one granting node's proposal; `vote` when its grant counts toward the quorum (a
    /// quarantined node's does not).
    pub(crate) fn add(&mut self, proposal: u64, vote: bool) {
        self.largest = self.largest.max(Some(proposal));
        if vote {
            self.votes = Some(match self.votes {
                None => (proposal, proposal),
                Some((low, high)) => (low.min(proposal), high.max(proposal)),
            });
        }
    }

    /// The token, once the round is won on the votes added: their common proposal when they all
    /// agree (step 2), else the largest proposal, to be stored (step 3).
    pub(crate) fn token(&self) -> Option<Token> {
        match self.votes {
            Some((low, high)) if low == high => Some(Token {
                value: low,
                stored: true,
            }),
            _ => self.largest.map(|value| Token {
                value,
                stored: false,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored_as(value: u64, stored: bool) -> Token {
        Token { value, stored }
    }

    fn proposals(list: &[(u64, bool)]) -> Proposals {
        let mut p = Proposals::default();
        for &(value, vote) in list {
            p.add(value, vote);
        }
        p
    }

    #[test]
    fn votes_that_agree_give_a_token_already_stored() {
        let token = proposals(&[(7, true), (7, true), (7, true)]).token();
        assert_eq!(token, Some(stored_as(7, true)));
    }

    #[test]
    fn votes_that_disagree_give_the_largest_to_store() {
        let token = proposals(&[(7, true), (9, true), (8, true)]).token();
        assert_eq!(token, Some(stored_as(9, false)));
    }

    #[test]
    fn a_larger_proposal_outside_the_votes_does_not_stop_agreement() {
        // A quarantined node's counter is no vote: the agreed value is stored on the quorum,
        // which every later quorum meets (invariant 2).
        let token = proposals(&[(7, true), (12, false), (7, true)]).token();
        assert_eq!(token, Some(stored_as(7, true)));
    }

    #[test]
    fn the_grain_is_a_second_or_half_of_max_ttl_and_exact_without_quarantine() {
        assert_eq!(clock_grain(Duration::from_secs(60), true), 1_000_000);
        assert_eq!(clock_grain(Duration::from_millis(500), true), 250_000);
        assert_eq!(clock_grain(Duration::from_nanos(1), true), 1, "never zero");
        assert_eq!(
            clock_grain(Duration::from_secs(60), false),
            1,
            "the exact clock"
        );
    }

    #[test]
    fn without_votes_the_largest_proposal_is_stored() {
        let token = proposals(&[(12, false)]).token();
        assert_eq!(token, Some(stored_as(12, false)));
        assert_eq!(Proposals::default().token(), None);
    }
}
