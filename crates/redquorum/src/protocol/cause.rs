//! Why a round did not reach its quorum: the library's classification of the node replies, so
//! that no caller re-derives "busy" from "unreachable" by counting replies itself.
//!
//! Pure: a function of the replies, the quorum and what was asked, tested over every
//! combination of outcomes for three nodes.
//!
//! # Invariants
//! 1. **A key of another type is named first.** Whatever else happened, a `WRONGTYPE` reply
//!    means the resource is not a lock at all, which retrying cannot fix.
//! 2. **Quarantine is blamed only when it made the difference**: with the quarantined nodes'
//!    grants counted, a quorum would have granted.
//! 3. **"Not held" and "busy" are definite answers.** A release or an extension is reported as
//!    not held only when the nodes that did not answer could not have made a quorum with the
//!    ones that did what we asked; otherwise the answer is unavailable, since the lock may still
//!    be held where nobody could look. An acquisition is busy as soon as one node refused: that
//!    node holds somebody else's value.
//! 4. **A release left to its lock-delay says so.** A release that did not reach a quorum, and
//!    that a node answered by keeping our key for the lock-delay (it came after the lock's
//!    validity, `engine` invariant 6), is [`Cause::LeftToDelay`] when the nodes that kept it,
//!    with those that did not answer, could still make a quorum (the lock may still be
//!    unavailable); otherwise the lock is not held, as invariant 3 says.

use std::fmt;
use std::time::Duration;

use crate::protocol::remedy::Remedy;
use crate::protocol::reply::Reply;

/// What a round asked the nodes to do, which decides what a refusal means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// Set our value (a refusal: somebody else's value is there).
    Acquire,
    /// Extend or delete our value (a refusal: our value is not there any more).
    Keep,
}

/// Why a round did not reach its quorum in time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Cause {
    /// The resource's key holds another Redis type on `node` (`WRONGTYPE`): it is not a lock,
    /// and retrying will not change that.
    WrongType {
        /// The first node that said so (its address, without credentials).
        node: String,
    },
    /// Nodes that may have lost their data less than `max_ttl` ago (each reply says why:
    /// [`Reply::Quarantined`]) granted, but are quarantined and do not vote; with their grants a
    /// quorum would have granted. Ends by itself within `max_ttl`.
    Quarantined {
        /// How many nodes were quarantined.
        nodes: usize,
        /// The longest quarantine left among them.
        longest: Duration,
        /// How long until enough of them leave their quarantine for the nodes that granted to
        /// make a quorum (as the replies stood): when waiting can first succeed.
        ready_in: Duration,
        /// What an operator can do at once, where a mark is right (`remedy` invariant 1).
        remedy: Option<Remedy>,
    },
    /// An acquisition: a node refused because somebody else holds the resource.
    Busy,
    /// An extension or a release: the nodes that answered do not hold our value (it expired, was
    /// released, or taken over), and those that did not answer could not change that.
    NotHeld,
    /// Too few nodes gave an answer that counts (unreachable, timed out, or an error reply such
    /// as `NOAUTH`) to decide.
    Unavailable,
    /// A quorum granted, but too late: no validity was left once it did.
    TooSlow,
    /// A release under a lock-delay that came after the lock's validity: the nodes that still
    /// held our value left it to expire ([`Reply::LeftToDelay`]), so the lock stays unavailable
    /// until its validity plus the delay. Not a release.
    LeftToDelay,
}

impl Cause {
    /// The cause's stable name, in `snake_case`: what every language binding reports as an
    /// error's `cause` (Python's exception attribute, Node's `Detail.cause`), from this one table
    /// so that they cannot drift apart (they had: `LeftToDelay` was `left_to_delay` in Python and
    /// `lost` in Node). Names are never reused for another cause.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Cause::WrongType { .. } => "wrong_type",
            Cause::Quarantined { .. } => "quarantined",
            Cause::Busy => "busy",
            Cause::NotHeld => "not_held",
            Cause::Unavailable => "unavailable",
            Cause::TooSlow => "too_slow",
            Cause::LeftToDelay => "left_to_delay",
        }
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::WrongType { node } => {
                write!(f, "the key has another Redis type on {node}: not a lock")
            }
            Cause::Quarantined {
                nodes, ready_in, ..
            } => write!(
                f,
                "{nodes} node(s) quarantined (they may have lost data less than max_ttl ago), too \
                 few could vote; a quorum can vote in {} s",
                ready_in.as_secs_f64().ceil()
            ),
            Cause::Busy => f.write_str("busy, held by someone else"),
            Cause::NotHeld => f.write_str("not held with this value"),
            Cause::Unavailable => f.write_str("too few nodes answered"),
            Cause::TooSlow => f.write_str("granted, but no validity was left"),
            Cause::LeftToDelay => {
                f.write_str("the lock had expired before the release; left to its lock-delay")
            }
        }
    }
}

impl Cause {
    /// Classifies the replies of a round that was not won in time (invariants 1–3); `nodes`
    /// pairs each reply with its node.
    pub(crate) fn of<'a>(
        asked: Asked,
        replies: impl Iterator<Item = (&'a str, &'a Reply)> + Clone,
        quorum: usize,
    ) -> Cause {
        let wrong_type = replies
            .clone()
            .find(|(_, reply)| matches!(reply, Reply::WrongType(_)));
        if let Some((node, _)) = wrong_type {
            return Cause::WrongType {
                node: node.to_owned(),
            };
        }
        let (mut granted, mut refused, mut late) = (0, 0, 0);
        let mut lefts = Vec::new();
        let mut quarantines = Vec::new();
        let mut total = 0;
        for (_, reply) in replies {
            total += 1;
            match reply {
                Reply::Granted => granted += 1,
                Reply::Refused => refused += 1,
                Reply::Quarantined(quarantine) => {
                    lefts.push(quarantine.left);
                    quarantines.push(quarantine);
                }
                Reply::LeftToDelay => late += 1,
                _ => {}
            }
        }
        if granted >= quorum {
            return Cause::TooSlow;
        }
        // Invariant 2.
        if !lefts.is_empty() && granted + lefts.len() >= quorum {
            lefts.sort_unstable();
            // The shortest quarantines end first: the one that completes a quorum.
            let ready_in = lefts[quorum.saturating_sub(granted + 1).min(lefts.len() - 1)];
            return Cause::Quarantined {
                nodes: lefts.len(),
                longest: lefts[lefts.len() - 1],
                ready_in,
                remedy: Remedy::of(quarantines, total),
            };
        }
        // Invariant 3. Silent: no answer that counts (a quarantined node's included).
        let silent = total - granted - refused - late;
        // Invariant 4: only when the nodes that kept our key could still hold the lock.
        if asked == Asked::Keep && late > 0 && granted + late + silent >= quorum {
            return Cause::LeftToDelay;
        }
        match asked {
            Asked::Acquire if refused > 0 => Cause::Busy,
            Asked::Keep if silent == 0 || granted + silent < quorum => Cause::NotHeld,
            _ => Cause::Unavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cause_has_its_own_stable_name() {
        let causes = [
            (
                Cause::WrongType {
                    node: "n".to_owned(),
                },
                "wrong_type",
            ),
            (
                Cause::Quarantined {
                    nodes: 1,
                    longest: Duration::ZERO,
                    ready_in: Duration::ZERO,
                    remedy: None,
                },
                "quarantined",
            ),
            (Cause::Busy, "busy"),
            (Cause::NotHeld, "not_held"),
            (Cause::Unavailable, "unavailable"),
            (Cause::TooSlow, "too_slow"),
            (Cause::LeftToDelay, "left_to_delay"),
        ];
        for (cause, name) in &causes {
            assert_eq!(cause.name(), *name, "{cause:?}");
        }
        let mut names: Vec<&str> = causes.iter().map(|(c, _)| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), causes.len(), "two causes share a name");
    }
    use crate::protocol::quarantine::{Quarantine, QuarantineReason};

    const NODES: [&str; 5] = ["a:1", "b:2", "c:3", "d:4", "e:5"];

    fn cause(asked: Asked, replies: &[Reply]) -> Cause {
        let quorum = replies.len() / 2 + 1;
        Cause::of(asked, NODES.iter().copied().zip(replies.iter()), quorum)
    }

    /// A node first seen without a marker, nothing vouched for it: `secs` left.
    fn q(secs: u64) -> Reply {
        let mut quarantine = Quarantine::new(
            Duration::from_secs(secs),
            QuarantineReason::FirstSeenWithoutMarker,
        );
        quarantine.first_sight = true;
        Reply::Quarantined(quarantine)
    }

    #[test]
    fn a_quarantine_is_ready_when_its_shortest_ones_complete_a_quorum() {
        use Reply::*;
        let s = Duration::from_secs;
        // Quorum 3 of 5, one granted: the second-shortest of the three quarantines decides.
        let got = cause(Asked::Acquire, &[q(3), q(10), q(7), Refused, Granted]);
        assert_eq!(
            got,
            Cause::Quarantined {
                nodes: 3,
                longest: s(10),
                ready_in: s(7),
                // Two nodes answer as voters: the others are new to a marked group.
                remedy: None,
            }
        );
        // Two granted: the shortest is enough.
        let got = cause(Asked::Acquire, &[q(3), q(10), Granted, Refused, Granted]);
        assert!(
            matches!(got, Cause::Quarantined { ready_in, .. } if ready_in == s(3)),
            "{got:?}"
        );
    }

    #[test]
    fn acquisitions_are_blamed_on_quarantine_only_if_it_made_the_difference() {
        use Reply::*;
        // A mark is named only when every node is quarantined (`remedy` invariant 1).
        let quarantined = |nodes| Cause::Quarantined {
            nodes,
            longest: Duration::from_secs(10),
            ready_in: Duration::from_secs(10),
            remedy: (nodes == 3).then_some(Remedy::Mark),
        };
        for (replies, expected) in [
            (vec![q(10), q(10), q(3)], quarantined(3)),
            (vec![Granted, q(10), Refused], quarantined(1)),
            (vec![Refused, q(10), q(10)], quarantined(2)),
            (vec![Refused, Refused, q(10)], Cause::Busy),
            (vec![q(10), Timeout, Timeout], Cause::Unavailable),
            (vec![Granted, Refused, Timeout], Cause::Busy),
            (vec![Granted, Timeout, Timeout], Cause::Unavailable),
            (vec![Granted, Granted, q(10)], Cause::TooSlow),
            (vec![Granted, Granted, Timeout], Cause::TooSlow),
            (
                vec![Granted, ServerError("NOAUTH".into()), Timeout],
                Cause::Unavailable,
            ),
        ] {
            assert_eq!(cause(Asked::Acquire, &replies), expected, "{replies:?}");
        }
    }

    #[test]
    fn a_release_left_to_its_lock_delay_says_so_unless_a_quorum_deleted() {
        use Reply::*;
        for replies in [
            vec![LeftToDelay, LeftToDelay, LeftToDelay],
            vec![LeftToDelay, Refused, Timeout],
            vec![Granted, LeftToDelay, Refused],
        ] {
            assert_eq!(
                cause(Asked::Keep, &replies),
                Cause::LeftToDelay,
                "{replies:?}"
            );
        }
        assert_eq!(
            cause(Asked::Keep, &[LeftToDelay, Refused, Refused]),
            Cause::NotHeld,
            "two nodes do not hold it: another client can take it, whatever the third keeps"
        );
        assert_eq!(
            cause(Asked::Keep, &[Granted, Granted, LeftToDelay]),
            Cause::TooSlow,
            "a quorum deleted: no cause is asked for then (`Released::cause` is None)"
        );
    }

    #[test]
    fn not_held_only_when_the_silent_nodes_could_not_make_a_quorum() {
        use Reply::*;
        let unreachable = || Unreachable("refused".into());
        for (replies, expected) in [
            (vec![Granted, unreachable(), Refused], Cause::Unavailable),
            (vec![Timeout, Timeout, Timeout], Cause::Unavailable),
            (vec![Refused, Refused, unreachable()], Cause::NotHeld),
            (vec![Refused, Refused, Refused], Cause::NotHeld),
            (vec![Granted, Refused, Refused], Cause::NotHeld),
            (
                vec![Refused, Refused, Timeout, Timeout, Timeout],
                Cause::Unavailable,
            ),
            (
                vec![Refused, Refused, Refused, Timeout, Timeout],
                Cause::NotHeld,
            ),
        ] {
            assert_eq!(cause(Asked::Keep, &replies), expected, "{replies:?}");
        }
    }

    /// Every combination of five outcomes on three nodes, for both kinds of round: the
    /// invariants hold whatever the mix.
    #[test]
    fn every_combination_of_three_replies_follows_the_invariants() {
        let outcomes = [
            Reply::Granted,
            Reply::Refused,
            Reply::Timeout,
            q(5),
            Reply::WrongType("WRONGTYPE".into()),
        ];
        for mask in 0..outcomes.len().pow(3) {
            let replies: Vec<Reply> = (0..3)
                .map(|i| outcomes[mask / outcomes.len().pow(i) % outcomes.len()].clone())
                .collect();
            let count = |f: fn(&Reply) -> bool| replies.iter().filter(|r| f(r)).count();
            let granted = count(|r| *r == Reply::Granted);
            let refused = count(|r| *r == Reply::Refused);
            let quarantined = count(|r| matches!(r, Reply::Quarantined(_)));
            let first_wrong = replies
                .iter()
                .position(|r| matches!(r, Reply::WrongType(_)));
            for asked in [Asked::Acquire, Asked::Keep] {
                let got = cause(asked, &replies);
                let case = format!("{asked:?} {replies:?}: {got:?}");
                match got {
                    Cause::WrongType { node } => {
                        assert_eq!(Some(node.as_str()), first_wrong.map(|i| NODES[i]), "{case}");
                    }
                    other => {
                        assert!(first_wrong.is_none(), "invariant 1: {case}");
                        match other {
                            Cause::TooSlow => assert!(granted >= 2, "{case}"),
                            Cause::Quarantined { nodes, .. } => {
                                assert_eq!(nodes, quarantined, "{case}");
                                assert!(granted < 2 && granted + quarantined >= 2, "{case}");
                            }
                            Cause::Busy => {
                                assert!(asked == Asked::Acquire && refused > 0, "{case}");
                            }
                            Cause::NotHeld => {
                                assert!(asked == Asked::Keep, "{case}");
                                // Invariant 3: even had every silent node granted, no quorum.
                                assert!(3 - refused < 2 || refused + granted == 3, "{case}");
                            }
                            Cause::Unavailable => {
                                assert!(granted < 2, "{case}");
                                if asked == Asked::Acquire {
                                    assert_eq!(refused, 0, "{case}");
                                }
                            }
                            Cause::WrongType { .. } | Cause::LeftToDelay => {
                                panic!("no such reply in the mix: {case}")
                            }
                        }
                    }
                }
            }
        }
    }
}
