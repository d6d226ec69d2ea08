//! Vote counting: decides whether a round is won, lost, or still open.
//!
//! Pure logic, no I/O: the manager feeds it one reply at a time, in whatever order the nodes
//! answer, and stops waiting as soon as the outcome is known.
//!
//! # Invariants
//! 1. The quorum is a strict majority of the configured nodes, `N/2 + 1`, so any two quorums
//!    share at least one node. That shared node is what stops two clients from both holding a
//!    lock.
//! 2. Only an explicit grant counts. A timeout, a connection error or an error reply is never a
//!    vote, because we cannot know what the node did.
//! 3. The round is **won** as soon as grants reach the quorum, and **lost** as soon as the grants so
//!    far plus the replies still outstanding cannot reach it. Either decision is final: later
//!    replies can never change it (tested over every combination below).

/// The number of nodes that make a strict majority of `nodes` (invariant 1).
pub fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// Where a round stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Decision {
    /// A quorum granted the request.
    Won,
    /// A quorum can no longer be reached.
    Lost,
    /// Not decided yet: wait for more replies.
    Open,
}

/// Running count of one round's replies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tally {
    quorum: usize,
    outstanding: usize,
    granted: usize,
}

impl Tally {
    /// A round over `voters` nodes, all of which count toward the quorum.
    pub fn new(voters: usize) -> Self {
        Self {
            quorum: majority(voters),
            outstanding: voters,
            granted: 0,
        }
    }

    /// Counts one node's reply (invariant 2: pass `false` for anything but a grant) and says where
    /// the round now stands.
    pub fn record(&mut self, granted: bool) -> Decision {
        self.outstanding = self.outstanding.saturating_sub(1);
        if granted {
            self.granted += 1;
        }
        self.decision()
    }

    /// Where the round stands (invariant 3).
    pub fn decision(&self) -> Decision {
        if self.granted >= self.quorum {
            Decision::Won
        } else if self.granted + self.outstanding < self.quorum {
            Decision::Lost
        } else {
            Decision::Open
        }
    }

    /// How many grants a win needs.
    pub fn quorum(&self) -> usize {
        self.quorum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_is_strict() {
        let expected = [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (6, 4), (7, 4)];
        for (n, q) in expected {
            assert_eq!(majority(n), q, "N = {n}");
        }
    }

    /// Every subset of granting nodes, for N = 1..=7, in two reply orders (ascending and
    /// descending node index): the final verdict is `granted ≥ N/2+1`, and the first decisive
    /// moment already agrees with it (invariant 3).
    #[test]
    fn every_combination_of_votes_decides_like_a_majority() {
        for n in 1..=7usize {
            for mask in 0u32..(1 << n) {
                let expected = if (mask.count_ones() as usize) >= majority(n) {
                    Decision::Won
                } else {
                    Decision::Lost
                };
                for order in [(0..n).collect::<Vec<_>>(), (0..n).rev().collect::<Vec<_>>()] {
                    let mut tally = Tally::new(n);
                    let mut first_decision = None;
                    for &i in &order {
                        let d = tally.record(mask & (1 << i) != 0);
                        if d != Decision::Open && first_decision.is_none() {
                            first_decision = Some(d);
                        }
                    }
                    assert_eq!(
                        tally.decision(),
                        expected,
                        "N = {n}, grants = {mask:0n$b}, order = {order:?}"
                    );
                    assert_eq!(
                        first_decision,
                        Some(expected),
                        "early decision disagrees: N = {n}, grants = {mask:0n$b}, order = {order:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn decides_before_the_slowest_node_answers() {
        let mut tally = Tally::new(5);
        assert_eq!(tally.record(true), Decision::Open);
        assert_eq!(tally.record(true), Decision::Open);
        assert_eq!(tally.record(true), Decision::Won, "3 of 5 is enough");

        let mut tally = Tally::new(5);
        assert_eq!(tally.record(false), Decision::Open);
        assert_eq!(tally.record(false), Decision::Open);
        assert_eq!(
            tally.record(false),
            Decision::Lost,
            "3 refusals of 5 end it"
        );
    }
}
