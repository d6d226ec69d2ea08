//! Whether a vote on a replicated primary reached every replica that could be promoted, each
//! by name: the rule behind `succession` invariant 1.
//!
//! `WAIT n` answers how many replicas acknowledged a write, not which. Counted by number, a
//! replica the sentinels will never promote (`replica-priority 0`), or a replica newly attached,
//! can acknowledge in place of the one they will promote: found by review with real processes,
//! a lock granted on a primary whose only linked replica had priority 0, then granted again by
//! the replica promoted after the primary died, which never had it. So a vote reads the
//! primary's `INFO replication` twice, in the same pipeline as its write: once right after the
//! write (the primary's `master_repl_offset` then covers the write), once after the `WAIT`
//! (each replica's acknowledged `offset`, listed at its address). It counts only if every
//! replica it must reach, by address, acknowledged an offset at least the first reading's.
//!
//! # Invariants
//! 1. **Each replica that could be promoted is shown to hold the write, by its own
//!    acknowledgement.** The replicas a vote must reach are those the primary listed online at
//!    the client's last reading, those the sentinels last listed as candidates, and those its
//!    own first reading lists online (a replica that just attached may be a candidate the
//!    sentinels have not listed yet). Each must appear online in the second reading with an
//!    acknowledged offset at least the primary's offset in the first: replication is in order,
//!    so that replica had every write the primary executed before the first reading, the
//!    vote's own included. The `WAIT`'s count only bounds how long the vote waits; it decides
//!    nothing.
//! 2. **One address, one replica.** A replica is named by the address the primary lists it at,
//!    which the replica announces (`replica-announce-ip`, `-port`). Two replicas that announce
//!    one address (a misconfiguration) make the listing unable to say which acknowledged: a
//!    reading that lists an address twice is no vote. One that lists it once while another
//!    server answers there is caught by reading the replica at its address (the `census`):
//!    a required address the census did not find linked to this primary is not credited.
//! 3. **At least the floor.** Behind a fixed address the service's replicas are not published:
//!    the user says how many it keeps, and a vote needs that many different addresses credited.
//! 4. **What a vote credits is what the lineage learns.** The replicas credited are recorded as
//!    caught up as of the vote's sending (`succession` invariant 2): their offsets cover the
//!    first reading, which came after the write.
//!
//! The rule it replaced, counting by number, stays behind a switch ([`Counting::ByNumber`]) for
//! the model and the chaos run, which show it giving a lock twice.

use crate::protocol::succession::Replicas;

/// How a vote's acknowledgements are judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Counting {
    /// Each required replica by its own acknowledged offset (the rule).
    ByIdentity,
    /// **Unsafe**: `WAIT`'s count against the number of replicas required, every replica of
    /// the first reading credited when the count covers them all (the rule the review broke).
    ByNumber,
}

/// What one vote on a replicated primary saw.
#[derive(Debug, Clone, Copy)]
pub struct Vote<'a> {
    /// The replicas it must reach, by address, as known before it was sent (invariant 1).
    pub required: &'a [String],
    /// The fewest different replicas it must reach (invariant 3).
    pub floor: u32,
    /// The primary's `INFO replication` right after the write.
    pub before: &'a Replicas,
    /// The primary's `INFO replication` after the `WAIT`; `None` when no `WAIT` was sent (no
    /// replica was known to wait for).
    pub after: Option<&'a Replicas>,
    /// How many replicas the `WAIT` asked for, and how many it said acknowledged.
    pub waited: u32,
    /// See `waited`.
    pub acknowledged: u32,
}

/// Why a vote on a replicated primary does not count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shortfall {
    /// The readings say nothing a vote could check (no offset, no second reading) while a
    /// replica had to be reached.
    Unreadable,
    /// The primary lists two replicas at this address (invariant 2).
    SameAddress(String),
    /// The replica at this address did not acknowledge the write (invariant 1).
    NotAcknowledged(String),
    /// The replica at this address acknowledged, but the census did not find it linked to this
    /// primary there (invariant 2): why not.
    Unconfirmed(String, String),
    /// Fewer different replicas acknowledged than the floor, or (by number) than the `WAIT`
    /// asked for.
    TooFew { acknowledged: u32, wanted: u32 },
    /// By number: more replicas online than the `WAIT` asked for.
    MoreOnline { online: u32, waited: u32 },
}

impl std::fmt::Display for Shortfall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unreadable => f.write_str(
                "INFO replication gave no reading a vote could check the replicas by: not a vote",
            ),
            Self::SameAddress(address) => write!(
                f,
                "the primary lists two replicas at {address}, so it cannot tell which \
                 acknowledged (check their replica-announce-ip and -port): not a vote"
            ),
            Self::NotAcknowledged(address) => write!(
                f,
                "the replica at {address} did not acknowledge the write in time: not a vote \
                 (it could be promoted without it)"
            ),
            Self::Unconfirmed(address, why) => write!(
                f,
                "the replica listed at {address} is not confirmed there ({why}): not a vote"
            ),
            Self::TooFew {
                acknowledged,
                wanted,
            } => write!(
                f,
                "only {acknowledged} of the primary's {wanted} replicas acknowledged the write \
                 in time: not a vote (it might not survive a failover)"
            ),
            Self::MoreOnline { online, waited } => write!(
                f,
                "{online} replicas came online while the vote waited for {waited}: not a vote \
                 (the next one waits for them all)"
            ),
        }
    }
}

/// Judges `vote` by `counting`: the replicas it credits (every replica shown to hold the
/// write), or why it is no vote. `confirmed` says whether the census found the replica listed
/// at an address to be the one there, or why not (invariant 2); a caller without a census
/// passes `|_| Ok(())`.
pub fn credit(
    vote: &Vote<'_>,
    counting: Counting,
    confirmed: impl Fn(&str) -> Result<(), String>,
) -> Result<Vec<String>, Shortfall> {
    match counting {
        Counting::ByIdentity => by_identity(vote, confirmed),
        Counting::ByNumber => by_number(vote),
    }
}

fn by_identity(
    vote: &Vote<'_>,
    confirmed: impl Fn(&str) -> Result<(), String>,
) -> Result<Vec<String>, Shortfall> {
    // Invariant 2.
    for listing in [Some(vote.before), vote.after].into_iter().flatten() {
        if let Some(twice) = listed_twice(&listing.online) {
            return Err(Shortfall::SameAddress(twice.to_owned()));
        }
    }
    let mut required = vote.required.iter().chain(&vote.before.online).peekable();
    if required.peek().is_none() && vote.floor == 0 {
        return Ok(Vec::new()); // nothing to wait for: no `WAIT` was sent
    }
    let Some(written) = vote.before.primary_offset else {
        return Err(Shortfall::Unreadable);
    };
    // Invariant 1: acknowledged at least the offset read after the write (none without a
    // reading after a `WAIT`).
    let credited: Vec<String> = vote
        .after
        .iter()
        .flat_map(|after| &after.acknowledged)
        .filter(|(_, offset, _)| *offset >= written)
        .map(|(address, _, _)| address.clone())
        .collect();
    for address in required {
        if !credited.contains(address) {
            return Err(Shortfall::NotAcknowledged(address.clone()));
        }
        if let Err(why) = confirmed(address) {
            return Err(Shortfall::Unconfirmed(address.clone(), why));
        }
    }
    // Invariant 3.
    let count = u32::try_from(credited.len()).unwrap_or(u32::MAX);
    if count < vote.floor {
        return Err(Shortfall::TooFew {
            acknowledged: count,
            wanted: vote.floor,
        });
    }
    Ok(credited)
}

/// The rule the review broke: `WAIT`'s count, and every replica of the first reading credited
/// when the count covers them all.
fn by_number(vote: &Vote<'_>) -> Result<Vec<String>, Shortfall> {
    if vote.acknowledged < vote.waited {
        return Err(Shortfall::TooFew {
            acknowledged: vote.acknowledged,
            wanted: vote.waited,
        });
    }
    let online = u32::try_from(vote.before.online.len()).unwrap_or(u32::MAX);
    if online > vote.waited {
        return Err(Shortfall::MoreOnline {
            online,
            waited: vote.waited,
        });
    }
    Ok(if vote.acknowledged >= online {
        vote.before.online.clone()
    } else {
        Vec::new()
    })
}

/// An address `listing` names twice, if any.
fn listed_twice(listing: &[String]) -> Option<&str> {
    listing
        .iter()
        .enumerate()
        .find(|(i, address)| listing[..*i].contains(address))
        .map(|(_, address)| address.as_str())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A reading: the primary at `offset`, each replica `(address, acknowledged offset)`.
    fn reading(offset: u64, replicas: &[(&str, u64)]) -> Replicas {
        Replicas {
            online: replicas.iter().map(|(a, _)| (*a).to_owned()).collect(),
            acknowledged: replicas
                .iter()
                .map(|(a, o)| ((*a).to_owned(), *o, Duration::ZERO))
                .collect(),
            primary_offset: Some(offset),
        }
    }

    fn names(addresses: &[&str]) -> Vec<String> {
        addresses.iter().map(|a| (*a).to_owned()).collect()
    }

    fn vote<'a>(
        required: &'a [String],
        before: &'a Replicas,
        after: &'a Replicas,
        waited: u32,
        acknowledged: u32,
    ) -> Vote<'a> {
        Vote {
            required,
            floor: 0,
            before,
            after: Some(after),
            waited,
            acknowledged,
        }
    }

    /// The review's schedule: the candidate r1 is cut off, the replica that may never be
    /// promoted (r2) linked; `WAIT 1` answers 1.
    #[test]
    fn a_replica_that_may_never_be_promoted_does_not_stand_in_for_a_candidate() {
        let required = names(&["r1"]);
        let before = reading(100, &[("r2", 90)]);
        let after = reading(100, &[("r2", 100)]);
        let v = vote(&required, &before, &after, 1, 1);
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Err(Shortfall::NotAcknowledged("r1".into()))
        );
        // The rule it replaced counts it.
        assert_eq!(
            credit(&v, Counting::ByNumber, |_| Ok(())),
            Ok(names(&["r2"]))
        );
    }

    #[test]
    fn every_required_replica_that_acknowledged_the_write_is_credited() {
        let required = names(&["r1", "r2"]);
        let before = reading(100, &[("r1", 50), ("r2", 60)]);
        let after = reading(120, &[("r1", 100), ("r2", 130)]);
        let v = vote(&required, &before, &after, 2, 2);
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Ok(names(&["r1", "r2"]))
        );
        // One short of the offset read after the write: it may lack it.
        let after = reading(120, &[("r1", 99), ("r2", 130)]);
        let v = vote(&required, &before, &after, 2, 2);
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Err(Shortfall::NotAcknowledged("r1".into()))
        );
    }

    #[test]
    fn a_replica_newly_online_must_hold_the_write_too() {
        // Not known before the vote, online at its first reading: required.
        let required = names(&["r1"]);
        let before = reading(100, &[("r1", 100), ("r3", 0)]);
        let after = reading(100, &[("r1", 100), ("r3", 20)]);
        let v = vote(&required, &before, &after, 1, 1);
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Err(Shortfall::NotAcknowledged("r3".into()))
        );
        let after = reading(100, &[("r1", 100), ("r3", 100)]);
        let v = vote(&required, &before, &after, 1, 1);
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Ok(names(&["r1", "r3"]))
        );
    }

    #[test]
    fn an_address_listed_twice_or_unconfirmed_is_no_vote() {
        let required = names(&["r1"]);
        let before = reading(100, &[("r1", 100), ("r1", 40)]);
        let after = reading(100, &[("r1", 100), ("r1", 100)]);
        let v = vote(&required, &before, &after, 2, 2);
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Err(Shortfall::SameAddress("r1".into()))
        );
        let before = reading(100, &[("r1", 100)]);
        let after = reading(100, &[("r1", 100)]);
        let v = vote(&required, &before, &after, 1, 1);
        assert_eq!(
            credit(&v, Counting::ByIdentity, |a| if a == "r1" {
                Err("link down".into())
            } else {
                Ok(())
            }),
            Err(Shortfall::Unconfirmed("r1".into(), "link down".into()))
        );
    }

    #[test]
    fn the_floor_counts_different_replicas() {
        let before = reading(100, &[("r1", 100)]);
        let after = reading(100, &[("r1", 100)]);
        let v = Vote {
            floor: 2,
            ..vote(&[], &before, &after, 2, 1)
        };
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Err(Shortfall::TooFew {
                acknowledged: 1,
                wanted: 2
            })
        );
    }

    #[test]
    fn without_both_readings_only_a_vote_that_needed_no_replica_counts() {
        let none = Replicas::default();
        let v = Vote {
            required: &[],
            floor: 0,
            before: &none,
            after: None,
            waited: 0,
            acknowledged: 0,
        };
        assert_eq!(credit(&v, Counting::ByIdentity, |_| Ok(())), Ok(Vec::new()));
        // A replica came online that no `WAIT` was sent for.
        let before = reading(100, &[("r1", 100)]);
        let v = Vote {
            before: &before,
            ..v
        };
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Err(Shortfall::NotAcknowledged("r1".into()))
        );
        // A replica required, and no offset to hold it to.
        let required = names(&["r1"]);
        let v = Vote {
            required: &required,
            before: &none,
            ..v
        };
        assert_eq!(
            credit(&v, Counting::ByIdentity, |_| Ok(())),
            Err(Shortfall::Unreadable)
        );
    }
}
