//! An operator's vouch ([`Redlock::mark_nodes`](crate::Redlock::mark_nodes)), the rule: what
//! the server's own `INFO` says against marking it, and what each node's mark came to. The I/O
//! that reads the evidence and rewrites the marker is `nodes::mark`.

use std::time::Duration;

use crate::protocol::first_sight::{counters_blind, dropped_data, started_within};
use crate::protocol::quarantine::info_field;

/// What [`Redlock::mark_nodes`](crate::Redlock::mark_nodes) did on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Mark {
    /// Marked: the node had no marker; it now has one that vouches at once.
    Written,
    /// Marked: its marker was a first-sight one still pending (a client saw the node for the
    /// first time without a marker); it now vouches at once, under the same id, so clients
    /// already waiting take it at their next health check.
    Vouched,
    /// Marked with `force`, over a marker that already vouched or that records a loss.
    Overwritten,
    /// Not marked: it already has a marker, which vouches already (`vouches`), or which records
    /// a data loss less than `max_ttl` ago (or was written by hand). `force` overwrites it.
    HasMarker {
        /// Whether that marker already vouches for the node.
        vouches: bool,
    },
    /// Not marked: the server started less than `max_ttl` ago (`uptime`), so it may have
    /// restarted without locks that other clients still count on. [`Vouch::BrandNew`] marks it,
    /// on the operator's word that it is a new server that never held a lock; so does
    /// [`Vouch::Forced`].
    RecentlyStarted {
        /// How long the server has been up.
        uptime: Duration,
    },
    /// Not marked: the server is a replica, not a master (`force` marks it anyway).
    Replica,
    /// Not marked: its own counters show that it dropped or replaced data since it started (a
    /// `FLUSHALL`, an eviction, a promotion: the reason); `force` marks it anyway.
    DroppedData(String),
    /// Not marked: it has no marker while other nodes of the group carry one, so it is new to
    /// the group (flushed, or a server put in place of one that may have held locks less than
    /// `max_ttl` ago); `force` marks it anyway.
    NewToGroup,
    /// Not marked: a Redis Cluster node, whose masters each carry their own marker.
    Cluster,
    /// Not marked: the node could not be reached, or refused (its error, without credentials).
    Failed(String),
}

impl Mark {
    /// Whether the node now carries a marker that vouches for it.
    pub fn is_marked(&self) -> bool {
        matches!(self, Mark::Written | Mark::Vouched | Mark::Overwritten)
    }
}

impl std::fmt::Display for Mark {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mark::Written => "marked: it had no marker; trusted at once from now on",
            Mark::Vouched => {
                "marked: its first-sight marker now vouches; waiting clients trust it within seconds"
            }
            Mark::Overwritten => "marked (forced over the marker it had)",
            Mark::HasMarker { vouches: true } => {
                "not marked: its marker already vouches for it (nothing to do)"
            }
            Mark::HasMarker { vouches: false } => {
                "not marked: its marker records a data loss less than max_ttl ago; \
                 --force if you know it lost nothing"
            }
            Mark::RecentlyStarted { uptime } => {
                return write!(
                    f,
                    "not marked: it started {} s ago, less than max_ttl, so it may have \
                     restarted without locks that are still held; --brand-new if it is a new \
                     server that never held a lock, else wait until it has been up for max_ttl",
                    uptime.as_secs()
                );
            }
            Mark::Replica => "not marked: it is a replica; locks go to masters (--force to mark it anyway)",
            Mark::DroppedData(why) => {
                return write!(
                    f,
                    "not marked: {why}, so it may have lost locks (--force to mark it anyway)"
                );
            }
            Mark::NewToGroup => {
                "not marked: it has no marker while the group's other nodes carry one, so it is \
                 new to the group; if it replaces a node that held locks less than max_ttl ago, \
                 wait that long (--force to mark it anyway)"
            }
            Mark::Cluster => "not marked: a Redis Cluster node (each master carries its own marker)",
            Mark::Failed(why) => return write!(f, "not marked: {why}"),
        })
    }
}

/// What an operator's mark ([`Redlock::mark_nodes`](crate::Redlock::mark_nodes)) says about
/// the servers, and so which evidence against them it overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Vouch {
    /// The servers lost nothing: marked unless the evidence says otherwise (a start less than
    /// `max_ttl` ago, a replica, dropped data, a marker that records a loss, new to a marked
    /// group).
    Checked,
    /// Also: they are new servers that never held a lock, so a recent start is no reason to
    /// refuse (a restart is: it may have dropped locks still held). Every other evidence still
    /// refuses.
    BrandNew,
    /// Marked whatever the evidence says (`--force`).
    Forced,
}

/// What the server's own `INFO all` says against an operator's `vouch`, if anything: a cluster
/// node is never marked; unless forced, a replica, data dropped since the start, or a Redis
/// before 7 (whose counters cannot show `CONFIG RESETSTAT`, which erases a flush from them,
/// as first sight judges: `first_sight::unclean`); unless brand new or forced, a start less than
/// `max_ttl` ago.
pub fn refused(info: &str, vouch: Vouch, max_ttl: Duration) -> Option<Mark> {
    if info_field(info, "cluster_enabled") == Some("1") {
        return Some(Mark::Cluster);
    }
    if vouch == Vouch::Forced {
        return None;
    }
    if info_field(info, "role") != Some("master") {
        return Some(Mark::Replica);
    }
    if let Some(why) = dropped_data(info) {
        return Some(Mark::DroppedData(why));
    }
    if let Some(why) = counters_blind(info) {
        return Some(Mark::DroppedData(why));
    }
    match started_within(info, max_ttl) {
        Some(uptime) if vouch == Vouch::Checked => Some(Mark::RecentlyStarted { uptime }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn info(version: &str, uptime: u64, role: &str) -> String {
        format!(
            "# Server\r\nredis_version:{version}\r\nrun_id:abc\r\nuptime_in_seconds:{uptime}\r\n\
             # Replication\r\nrole:{role}\r\nsecond_repl_offset:-1\r\n# Stats\r\nevicted_keys:0\r\n\
             # Commandstats\r\ncmdstat_get:calls=3,usec=1\r\n"
        )
    }

    #[test]
    fn a_long_running_clean_master_is_marked() {
        assert_eq!(
            refused(&info("7.0.15", 3_600, "master"), Vouch::Checked, MINUTE),
            None
        );
    }

    #[test]
    fn a_recent_start_needs_the_word_brand_new() {
        let young = info("7.0.15", 10, "master");
        assert_eq!(
            refused(&young, Vouch::Checked, MINUTE),
            Some(Mark::RecentlyStarted {
                uptime: Duration::from_secs(10)
            })
        );
        assert_eq!(refused(&young, Vouch::BrandNew, MINUTE), None);
        assert_eq!(refused(&young, Vouch::Forced, MINUTE), None);
    }

    #[test]
    fn redis_before_7_is_marked_only_when_forced_as_first_sight_refuses_it() {
        let old = info("6.2.14", 3_600, "master");
        for vouch in [Vouch::Checked, Vouch::BrandNew] {
            let refusal = refused(&old, vouch, MINUTE);
            assert!(
                matches!(&refusal, Some(Mark::DroppedData(why)) if why.contains("before 7")),
                "{refusal:?}"
            );
        }
        assert_eq!(refused(&old, Vouch::Forced, MINUTE), None);
    }

    #[test]
    fn brand_new_does_not_override_a_replica() {
        let replica = info("7.0.15", 10, "slave");
        assert_eq!(
            refused(&replica, Vouch::BrandNew, MINUTE),
            Some(Mark::Replica)
        );
    }
}
