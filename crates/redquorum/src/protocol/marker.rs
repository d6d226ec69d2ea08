//! The marker's value: what a node's marker key says, and how every writer spells it.
//!
//! The marker ([`MARKER_KEY`](crate::MARKER_KEY)) is the evidence that a node kept its data
//! ([`quarantine`](crate::protocol::quarantine)). Its value says who wrote it and from when it
//! vouches:
//!
//! ```text
//! value = [owner "/"] body ":" time     owner = run_id "." master_replid (a cluster master's)
//! body  = id                   written after a loss was seen (or by an earlier version)
//!       | "new." id            written by a client that saw the node for the first time, without one
//!       | "ok." run_id "." id  vouched for by an operator (`redlock nodes mark`)
//!       | "okg." group "." ms "." run_id "." id
//!                              vouched for by a group's evidence ([`first_sight`](crate::protocol::first_sight)),
//!                              at node time `ms`, for the group of nodes `group` (a fingerprint)
//! time  = the node's clock, in ms, from which it vouches (0: at once)
//! ```
//!
//! # Invariants
//! 1. **The id is the marker's identity.** A loss takes the key with it, and whoever finds it
//!    missing writes a fresh random id; so a marker whose id changed is evidence of a loss, and
//!    one whose id stayed the same is the same marker, whatever its tag and time say. Only our
//!    own vouching ever rewrites a marker in place, and it keeps the id: a client that saw the
//!    marker pending does not take the vouch for a loss.
//! 2. **The time is last**, after the last `:`, as every version of this library has read it:
//!    a client that does not know the tags reads a vouched marker as vouching at once and a
//!    first-sight marker as pending until its time, which is what they mean; and it reads the
//!    rest as one opaque value.
//! 3. **A vouch names the run it vouches for.** An operator vouches that this server lost
//!    nothing up to now, which says nothing about a later restart: the uptime rule is waived
//!    only while the server's `run_id` is the one the marker names.
//! 4. **A group's vouch holds for that group.** The first-sight rule's evidence is the markers
//!    of every node a manager lists: it says nothing of a larger group the node also belongs to
//!    (a manager over one node of three, inspecting it alone). So a group's vouch names the group
//!    (a fingerprint of its nodes' addresses) and when it was made: for a manager of another
//!    group it vouches only `max_ttl` after that, as a marker written on first sight would.
//! 5. **Only a drawn id tells servers apart.** Invariant 1 reads "the same id" as "the same
//!    marker", which holds for ids drawn at random (64 bits: no two servers draw the same) and
//!    not for a word written by hand: every server an operator marked `manual` carries the same
//!    id, and a server replaced behind the same address and marked the same way would pass for
//!    the old one, to a client that knew the old one (a durable server's restart is forgiven on
//!    the strength of its marker: `quarantine` invariant 4) and to a new one alike. So a marker
//!    whose id was not drawn ([`MarkerValue::tells_servers_apart`]) vouches for nothing: the
//!    health check replaces it as if it were missing (`scripts/marker.lua`), with its
//!    quarantine, and a restart is forgiven only on a drawn id.

use std::time::Duration;

/// What a marker says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tag<'a> {
    /// Written after a loss was seen, by hand, or by an earlier version.
    Plain,
    /// Written by a client that saw the node for the first time, without a marker.
    New,
    /// Vouched for by an operator, for the run with this `run_id` (invariant 3).
    Vouched { run_id: &'a str },
    /// Vouched for by the group `group`'s evidence at node time `at_ms`, for the run with this
    /// `run_id` (invariants 3, 4).
    GroupVouched {
        group: &'a str,
        at_ms: u64,
        run_id: &'a str,
    },
}

/// A marker value, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MarkerValue<'a> {
    /// The owner, `<run_id>.<master_replid>` (a Redis Cluster master's marker), or "".
    pub owner: &'a str,
    /// What it says of itself.
    pub tag: Tag<'a>,
    /// The identity (invariant 1).
    pub id: &'a str,
    /// The node time in ms from which it vouches (0 when it carries none).
    pub vouches_from_ms: u64,
}

impl<'a> MarkerValue<'a> {
    /// Reads any value: one that follows no grammar is a plain marker whose id is the whole
    /// value and that vouches at once (a marker written by hand).
    pub fn parse(value: &'a str) -> Self {
        let (owner, rest) = match value.split_once('/') {
            Some((owner, rest))
                if !owner.is_empty()
                    && owner.bytes().all(|b| b.is_ascii_hexdigit() || b == b'.') =>
            {
                (owner, rest)
            }
            _ => ("", value),
        };
        let (body, vouches_from_ms) = match rest.rsplit_once(':') {
            Some((body, ms)) => match ms.parse::<u64>() {
                Ok(ms) => (body, ms),
                Err(_) => (rest, 0),
            },
            None => (rest, 0),
        };
        let group_vouched = body.strip_prefix("okg.").and_then(|rest| {
            let mut parts = rest.splitn(4, '.');
            let (group, at, run_id, id) =
                (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
            let at_ms = at.parse().ok()?;
            Some((
                Tag::GroupVouched {
                    group,
                    at_ms,
                    run_id,
                },
                id,
            ))
        });
        let (tag, id) = if let Some(vouched) = group_vouched {
            vouched
        } else if let Some(id) = body.strip_prefix("new.") {
            (Tag::New, id)
        } else if let Some((run_id, id)) = body
            .strip_prefix("ok.")
            .and_then(|vouched| vouched.split_once('.'))
        {
            (Tag::Vouched { run_id }, id)
        } else {
            (Tag::Plain, body)
        };
        Self {
            owner,
            tag,
            id,
            vouches_from_ms,
        }
    }

    /// How long after `node_ms` (the node's clock) it starts to vouch.
    pub fn pending_at(&self, node_ms: u64) -> Duration {
        Duration::from_millis(self.vouches_from_ms.saturating_sub(node_ms))
    }

    /// Whether it waives the uptime rule for the run `run_id` (invariant 3).
    pub fn vouches_for_run(&self, run_id: &str) -> bool {
        match self.tag {
            Tag::Vouched { run_id: vouched }
            | Tag::GroupVouched {
                run_id: vouched, ..
            } => vouched == run_id,
            _ => false,
        }
    }

    /// How long after `node_ms` it starts to vouch for a manager of the group `group` (`None`:
    /// a manager that takes no part in first sight), `max_ttl` being the quarantine: a group's
    /// vouch holds at once for its own group, `max_ttl` after it was made for any other
    /// (invariant 4).
    pub fn pending_for(&self, node_ms: u64, group: Option<&str>, max_ttl: Duration) -> Duration {
        match self.tag {
            Tag::GroupVouched {
                group: vouched,
                at_ms,
                ..
            } if Some(vouched) != group => {
                let max_ttl_ms = u64::try_from(max_ttl.as_millis()).unwrap_or(u64::MAX);
                Duration::from_millis(at_ms.saturating_add(max_ttl_ms).saturating_sub(node_ms))
            }
            _ => self.pending_at(node_ms),
        }
    }
}

/// What a node's marker says about how it came to be, as `redlock status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MarkerState {
    /// Vouched for: by an operator (`redlock nodes mark`), or by the group's evidence on first
    /// sight.
    Vouched,
    /// Written by a client that saw the node for the first time without a marker, and still
    /// pending: the node waits out its quarantine, unless vouched for.
    FirstSight,
    /// Written on first sight, and nobody vouched for the node: its quarantine was waited out,
    /// and the marker vouches by its time, as a plain one.
    WaitedOut,
    /// Written after a data loss was seen, by an earlier version, or by hand.
    Plain,
}

impl MarkerState {
    /// The state of `value`, on a node this client trusts now (`trusted`) or not: a first-sight
    /// marker on a trusted node is one whose time has come (no vouch rewrote it).
    pub(crate) fn of(value: &str, trusted: bool) -> Self {
        match MarkerValue::parse(value).tag {
            Tag::Vouched { .. } | Tag::GroupVouched { .. } => MarkerState::Vouched,
            Tag::New if trusted => MarkerState::WaitedOut,
            Tag::New => MarkerState::FirstSight,
            Tag::Plain => MarkerState::Plain,
        }
    }
}

impl std::fmt::Display for MarkerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MarkerState::Vouched => "vouched for",
            MarkerState::FirstSight => "written on first sight",
            MarkerState::WaitedOut => "written on first sight, quarantine waited out",
            MarkerState::Plain => "present",
        })
    }
}

/// How much later `read` vouches than `seen` when both are the same first-sight marker and
/// `read` was extended (its time moved later): `None` otherwise.
pub fn extended(seen: &str, read: &str) -> Option<Duration> {
    let (seen, read) = (MarkerValue::parse(seen), MarkerValue::parse(read));
    (read.tag == Tag::New && read.id == seen.id && read.vouches_from_ms > seen.vouches_from_ms)
        .then(|| Duration::from_millis(read.vouches_from_ms - seen.vouches_from_ms))
}

impl MarkerValue<'_> {
    /// Whether the id can tell one server from another (invariant 5): it holds a run of at
    /// least [`DRAWN_DIGITS`] hex digits, as every id this library, `redlock nodes mark` and
    /// the node launcher write does. A hand-written word (`manual`, `fresh`) does not.
    pub fn tells_servers_apart(&self) -> bool {
        let mut run = 0;
        self.id.bytes().any(|b| {
            run = if b.is_ascii_hexdigit() { run + 1 } else { 0 };
            run >= DRAWN_DIGITS
        })
    }
}

/// How many hex digits in a row make an id drawn at random (64 bits): see
/// [`MarkerValue::tells_servers_apart`].
pub(crate) const DRAWN_DIGITS: usize = 16;

/// The identity of a marker value (invariant 1).
pub fn id_of(value: &str) -> &str {
    MarkerValue::parse(value).id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_writer_s_spelling_is_read() {
        let plain = MarkerValue::parse("9f0c:1700");
        assert_eq!(
            plain,
            MarkerValue {
                owner: "",
                tag: Tag::Plain,
                id: "9f0c",
                vouches_from_ms: 1700
            }
        );
        let new = MarkerValue::parse("new.9f0c:1700");
        assert_eq!(
            (new.tag, new.id, new.vouches_from_ms),
            (Tag::New, "9f0c", 1700)
        );
        let ok = MarkerValue::parse("ok.abc123.9f0c:0");
        assert_eq!(ok.tag, Tag::Vouched { run_id: "abc123" });
        assert_eq!((ok.id, ok.vouches_from_ms), ("9f0c", 0));
        let owned = MarkerValue::parse("abc123/new.9f0c:5");
        assert_eq!(
            (owned.owner, owned.tag, owned.id),
            ("abc123", Tag::New, "9f0c")
        );
        let by_hand = MarkerValue::parse("set by the operator");
        assert_eq!(
            (by_hand.tag, by_hand.id, by_hand.vouches_from_ms),
            (Tag::Plain, "set by the operator", 0)
        );
        let fresh = MarkerValue::parse("fresh:0");
        assert_eq!((fresh.id, fresh.vouches_from_ms), ("fresh", 0));
    }

    #[test]
    fn only_drawn_ids_tell_servers_apart() {
        for drawn in [
            "9f0c1b2a3d4e5f60:0",
            "ok.abc.00ff00ff00ff00ff:0",
            "fresh-6379-4242-1732665600123456789:0",
        ] {
            assert!(MarkerValue::parse(drawn).tells_servers_apart(), "{drawn}");
        }
        for by_hand in [
            "manual",
            "manual:1700",
            "fresh:0",
            "ok.abc.9f0c:0",
            "set by me",
        ] {
            assert!(
                !MarkerValue::parse(by_hand).tells_servers_apart(),
                "{by_hand}"
            );
        }
    }

    #[test]
    fn a_vouch_keeps_the_identity_and_vouches_at_once_for_its_run_only() {
        let pending = "new.9f0c:99999";
        // As `scripts/vouch.lua` writes it.
        let vouch = format!("ok.run1.{}:0", id_of(pending));
        assert_eq!(id_of(&vouch), id_of(pending));
        let read = MarkerValue::parse(&vouch);
        assert!(read.pending_at(5).is_zero());
        assert!(read.vouches_for_run("run1"));
        assert!(
            !read.vouches_for_run("run2"),
            "a restart is not vouched for"
        );
        assert_eq!(
            MarkerValue::parse(pending).pending_at(99_000),
            Duration::from_secs(0) + Duration::from_millis(999)
        );
    }

    #[test]
    fn a_group_s_vouch_holds_at_once_for_that_group_only() {
        let max_ttl = Duration::from_secs(60);
        let value = MarkerValue::parse("okg.f00d.1000.run1.9f0c:0");
        assert_eq!(
            value.tag,
            Tag::GroupVouched {
                group: "f00d",
                at_ms: 1000,
                run_id: "run1"
            }
        );
        assert_eq!(value.id, "9f0c");
        assert!(value.vouches_for_run("run1"));
        assert!(value.pending_for(2000, Some("f00d"), max_ttl).is_zero());
        assert_eq!(
            value.pending_for(2000, Some("beef"), max_ttl),
            Duration::from_millis(59_000),
            "another group waits max_ttl from the vouch"
        );
        assert_eq!(
            value.pending_for(2000, None, max_ttl),
            Duration::from_millis(59_000)
        );
        assert!(value.pending_for(70_000, Some("beef"), max_ttl).is_zero());
    }

    #[test]
    fn an_earlier_version_reads_the_time_where_it_always_did() {
        // Earlier versions: `value.rsplit_once(':')` and a u64 after it.
        for value in ["ok.r.9f0c:0", "new.9f0c:1700", "abc/new.9f0c:1700"] {
            let (_, ms) = value.rsplit_once(':').unwrap();
            assert_eq!(
                ms.parse::<u64>().unwrap(),
                MarkerValue::parse(value).vouches_from_ms
            );
        }
    }
}
