//! What an operator can do at once about a quarantine that keeps a lock from being granted, and
//! how each language spells it.
//!
//! A quarantine ends by itself within `max_ttl`. Where the quarantined nodes may simply be new
//! (each was first seen without a marker, or started a moment ago), an operator who knows they
//! lost nothing can vouch for them ([`Redlock::mark_nodes`](crate::Redlock::mark_nodes),
//! `redlock nodes mark`), and they vote at once: the first lock on a new server need not wait a
//! minute. Where a node lost data under a client's eyes, vouching is how a lock is given twice:
//! there the only remedy is the wait, and the message says how long it is.
//!
//! # Invariants
//! 1. **A remedy is named only where a mark is right**: every node of the group is quarantined
//!    (a node that votes carries a marker, and a node without one among marked nodes is new to
//!    the group, which a mark refuses: `mark::refused`), and each shows only a first-sight
//!    marker nothing vouched for ([`Quarantine::first_sight`]), kept out by that or by its
//!    uptime, nothing else ([`QuarantineReason`]'s other reasons are evidence of a loss: a
//!    restart under our eyes, a lost marker, a promotion, an eviction, a reset of the
//!    statistics, a new replication history; and a server that showed any other marker but
//!    started recently restarted, where the mark does nothing: found by review).
//!    A mark may still be refused on evidence a quarantine does not carry (a flush in the
//!    server's counters, a Redis before 7): the refusal then says why.
//! 2. **A server up for less than `max_ttl` gets the brand-new vouch, with its condition.** A
//!    restart looks the same as a new server there, so the advice says "never after a restart";
//!    the plain mark would be refused for such a server anyway (`mark::refused`).
//! 3. **One sentence, each language's call.** The advice is worded here once; each reader (the
//!    library, the CLI, the Python and Node packages) gives only how it spells the call
//!    ([`Remedy::call`]), so no binding words it differently.

use std::fmt;

use crate::protocol::quarantine::{Quarantine, QuarantineReason};

/// What an operator can do at once about the quarantines that block a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Remedy {
    /// Vouch for the servers as brand new ([`Vouch::BrandNew`](crate::Vouch::BrandNew)): at
    /// least one of them started less than `max_ttl` ago (invariant 2).
    MarkBrandNew,
    /// Vouch for the servers ([`Vouch::Checked`](crate::Vouch::Checked)): each was first seen
    /// without a marker, and has been up for longer than `max_ttl`.
    Mark,
}

/// Whose words a message is in (invariant 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Reader {
    /// The Rust library.
    Rust,
    /// The Python package (`redquorum`), its manager named `rl` as in its README.
    Python,
    /// The Node.js package (`redquorum`), its manager named `redlock` as in its README.
    Node,
}

impl Remedy {
    /// The remedy for a group of `nodes` nodes whose quarantined ones are `quarantines`, if one
    /// is right (invariants 1 and 2); `None` for none.
    pub fn of<'a, I>(quarantines: I, nodes: usize) -> Option<Remedy>
    where
        I: IntoIterator<Item = &'a Quarantine>,
        I::IntoIter: ExactSizeIterator,
    {
        let quarantines = quarantines.into_iter();
        if quarantines.len() != nodes {
            return None;
        }
        let mut remedy = None;
        for quarantine in quarantines {
            let may_be_new = matches!(
                quarantine.reason,
                QuarantineReason::FirstSeenWithoutMarker | QuarantineReason::Started
            ) && quarantine.first_sight;
            if !may_be_new {
                return None;
            }
            remedy = if quarantine.up.is_some() || quarantine.young {
                Some(Remedy::MarkBrandNew)
            } else {
                remedy.or(Some(Remedy::Mark)) // a brand-new one among them keeps its word
            };
        }
        remedy
    }

    /// How `reader` calls for this remedy.
    pub fn call(self, reader: Reader) -> &'static str {
        match (self, reader) {
            (Remedy::MarkBrandNew, Reader::Rust) => "Redlock::mark_nodes(Vouch::BrandNew)",
            (Remedy::Mark, Reader::Rust) => "Redlock::mark_nodes(Vouch::Checked)",
            (Remedy::MarkBrandNew, Reader::Python) => "rl.mark_nodes(brand_new=True)",
            (Remedy::Mark, Reader::Python) => "rl.mark_nodes()",
            (Remedy::MarkBrandNew, Reader::Node) => "await redlock.markNodes({ brandNew: true })",
            (Remedy::Mark, Reader::Node) => "await redlock.markNodes()",
        }
    }

    /// The advice, with `call` the way the reader spells it (invariant 3): `if these servers
    /// are new and never held a lock, end the wait at once with …`.
    pub fn advice(self, call: &str) -> Advice<'_> {
        Advice { remedy: self, call }
    }
}

/// A remedy's advice, written when displayed.
#[derive(Debug, Clone, Copy)]
pub struct Advice<'a> {
    remedy: Remedy,
    call: &'a str,
}

impl fmt::Display for Advice<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let call = self.call;
        match self.remedy {
            Remedy::MarkBrandNew => write!(
                f,
                "if these servers are new and never held a lock, end the wait at once with \
                 {call} (never after a restart: a restarted server may have lost locks still held)"
            ),
            Remedy::Mark => write!(
                f,
                "if no lock was taken on these servers in the last max_ttl before they lost their \
                 marker (they are new, or nothing restarted or flushed them), end the wait at once \
                 with {call}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A quarantine for `reason`, up for `up` s when that keeps it out too, its marker a
    /// first-sight one nothing vouched for.
    fn q(reason: QuarantineReason, up: Option<u64>) -> Quarantine {
        let mut q = Quarantine::new(Duration::from_secs(50), reason);
        q.up = up.map(Duration::from_secs);
        q.first_sight = true;
        q
    }

    #[test]
    fn a_mark_is_named_only_where_every_quarantined_node_may_simply_be_new() {
        use QuarantineReason::*;
        let unmarked_young = q(FirstSeenWithoutMarker, Some(10));
        let unmarked_old = q(FirstSeenWithoutMarker, None);
        // Durable and young: its uptime keeps it out of nothing, but a plain mark is refused.
        let unmarked_durable_young = Quarantine {
            young: true,
            ..unmarked_old
        };
        let of = |qs: &[&Quarantine]| Remedy::of(qs.iter().copied(), qs.len());
        assert_eq!(of(&[&unmarked_young]), Some(Remedy::MarkBrandNew));
        assert_eq!(of(&[&unmarked_durable_young]), Some(Remedy::MarkBrandNew));
        assert_eq!(of(&[&unmarked_old]), Some(Remedy::Mark));
        // One young server among long-running ones: the brand-new vouch, whatever the order.
        assert_eq!(
            of(&[&unmarked_old, &unmarked_young]),
            Some(Remedy::MarkBrandNew)
        );
        assert_eq!(
            of(&[&unmarked_young, &unmarked_old]),
            Some(Remedy::MarkBrandNew)
        );
        // Kept out by its uptime a second longer than by its first-sight marker: still new.
        assert_eq!(of(&[&q(Started, Some(10))]), Some(Remedy::MarkBrandNew));
        // A server that showed another marker but started recently restarted: no mark (review).
        let restarted = Quarantine {
            first_sight: false,
            ..q(Started, Some(10))
        };
        assert_eq!(of(&[&restarted]), None);
        let group_vouched = Quarantine {
            first_sight: false,
            ..unmarked_old
        };
        assert_eq!(of(&[&group_vouched]), None);
        for loss in [
            Restarted,
            LostMarker,
            Promoted,
            Evicted,
            StatsReset,
            Resynchronised,
        ] {
            assert_eq!(of(&[&q(loss, None)]), None, "{loss:?}");
            assert_eq!(
                of(&[&unmarked_old, &q(loss, Some(3))]),
                None,
                "a loss among new nodes: {loss:?}"
            );
        }
        // A node of the group votes (it carries a marker): the others are new to a marked
        // group, which a mark refuses (review).
        assert_eq!(Remedy::of([&unmarked_young], 2), None);
        assert_eq!(Remedy::of([], 0), None);
    }

    #[test]
    fn each_reader_spells_the_call_in_one_sentence() {
        let advice = Remedy::MarkBrandNew
            .advice(Remedy::MarkBrandNew.call(Reader::Python))
            .to_string();
        assert!(
            advice.contains(
                "end the wait at once with rl.mark_nodes(brand_new=True) (never after a restart"
            ),
            "{advice}"
        );
        let advice = Remedy::Mark
            .advice(Remedy::Mark.call(Reader::Node))
            .to_string();
        assert!(
            advice.ends_with("with await redlock.markNodes()"),
            "{advice}"
        );
        assert!(!advice.contains('\n'));
    }
}
