//! First sight: when a group of nodes seen for the first time without markers may be trusted at
//! once, instead of waiting `max_ttl`.
//!
//! A node without a marker may have lost its data in the last `max_ttl` (a `FLUSHALL`, a restart
//! without persistence, another server behind its address): the restart quarantine keeps it out
//! for `max_ttl`. Seen alone, such a node cannot be told from one that no client of ours ever
//! used, so every deployment used to pay one `max_ttl` on first use. The group as a whole can
//! tell them apart: every client of ours marks each node it sees (the health check writes a
//! marker where there is none), and a vote counts only where a marker vouches (`server`
//! invariant 7). So a lock of ours that is still valid was counted on a quorum of nodes that
//! each showed a marker at the time.
//!
//! # The rule
//! The nodes of one manager are trusted at once, on first sight, when **every** node of the
//! group (all N, not a quorum: a node we cannot read may be the one that shows a marker):
//! - shows no marker, or only a first-sight marker that is still pending (`new.`: a client that
//!   found none wrote it, and no vote counts on it while it is pending); and
//! - is *clean*: Redis 7 or later (earlier versions count `CONFIG RESETSTAT` together with
//!   every `CONFIG GET`), a master, up for at least `max_ttl` (plus the uptime slack), never a
//!   replica since it started, no evicted keys, and nothing in `INFO commandstats` since its
//!   start that drops or replaces data wholesale ([`DROPPING`]).
//!
//! Then each node's marker is *extended* (a compare-and-set that keeps it pending for another
//! `max_ttl`, only if it is still the same first-sight marker and still pending), and only once
//! every node's extension succeeded is each marker *vouched* (`ok.<run_id>.<id>:0`, the same
//! id: [`marker`](crate::protocol::marker) invariant 1). The health checks then read vouched
//! markers and trust the nodes by the ordinary rules.
//!
//! # Invariants
//! 1. **Every marker of the group was pending throughout.** A first-sight marker is pending when
//!    read, still pending when extended, and only ever extended while pending; its id never
//!    comes back once gone. So from each node's read until the last extension, no node showed a
//!    marker that vouches, and no vote of ours counted anywhere in the group. Two things keep
//!    "pending" true for clients that saw the marker earlier: "pending" here means pending by
//!    more than a clock drift of `max_ttl` and 100 ms (a client that trusts the marker when its
//!    time comes, by its own clock, may vote that much early by the node's), and a vote whose
//!    read-back finds the marker extended since its health check is no vote (`server`
//!    invariant 7).
//! 2. **Before its read, no clean node lost a vote it had counted.** A vote needs a vouching
//!    marker; a node that showed none at our read lost its marker since, and the only ways to
//!    lose it that a clean node does not show are per-key commands naming our keys (tampering,
//!    which no lock survives) and **replacement**: another server, long-running and never
//!    marked, behind the same address.
//! 3. So, with the rule's premises, a lock of ours still valid when we vouch was counted on a
//!    quorum of nodes *every one* of which was replaced since. That is the one schedule the rule
//!    gets wrong: every node that any client of ours had marked replaced at once (within
//!    `max_ttl`, while a lock was held) by long-running servers that never had a marker; with
//!    N = 1, the one node. The README's limits and `docs/guarantees.md` say so.
//! 4. **A partial vouch is still true.** Vouching begins only after every extension succeeded
//!    (invariant 1), so a process that dies half-way leaves some markers vouched, which the
//!    whole group had earned, and the rest pending for `max_ttl`.
//! 5. **Not for Redis Cluster nodes.** A cluster master's marker names its owner and a promotion
//!    is not a command (quarantine invariant 6): a manager with any cluster node never vouches.
//!    Nor with the quarantine off (no marker is read or written then).
//! 6. **The group is the manager's node list, and the vouch says so.** The evidence is about the
//!    nodes this manager lists; a node may belong to a larger group (a manager over one node of
//!    three, inspecting it alone). So the vouch names the group (a fingerprint of the sorted
//!    addresses) and when it was made, and for a manager of any other group it vouches only
//!    `max_ttl` after that, as a first-sight marker would (`marker` invariant 4). Clients that
//!    list the same servers under other addresses are another group: they wait once.
//! 7. **Only on the deployment's word that uptimes do not lie** (opt-in,
//!    [`Builder::trust_first_sight`](crate::Builder::trust_first_sight)). Redis reports its
//!    uptime as the difference of two wall-clock readings, and nothing in `INFO` is monotonic
//!    (CPU time and event counts grow with load as well as age, so neither bounds it from
//!    below). A server that restarted empty a moment ago on a host whose clock stepped forward
//!    afterwards (started before time sync, a VM restored from a snapshot) reports the step as
//!    uptime, and with no marker and clean counters is indistinguishable from a long-running
//!    server no client of ours used. So by default a node seen without a marker waits out the
//!    quarantine, timed by the client's own monotonic clock, or an operator marks it; the rule
//!    above runs only where the deployment says no server's clock steps forward after the
//!    server starts.

use std::time::Duration;

use crate::protocol::marker::{MarkerValue, Tag};
use crate::protocol::quarantine::{UPTIME_SLACK, info_field};

/// Commands that drop or replace a server's data wholesale, or erase the record of having done
/// so, as `INFO commandstats` names them. A clean node ran none of them since it started:
/// - `flushall`, `flushdb`: drop every key;
/// - `swapdb`: puts another database's keys in place of these;
/// - `replicaof`, `slaveof`, `failover`: make the server a replica, whose full resync replaces
///   its data with the master's (and a later promotion brings that data back as a master's);
/// - `debug`: `DEBUG RELOAD` / `LOADAOF` replace the data with the files' (any subcommand counts,
///   commandstats do not tell them apart);
/// - `restore`, `restore-asking`: write a whole key from another server's dump (the receiving
///   half of `MIGRATE` and of resharding);
/// - `module|load`, `module|loadex`: a module loaded at run time may do anything;
/// - `config|resetstat`: erases these very counters (it counts itself after the reset).
///
/// Not listed: commands that remove keys by name (`DEL`, `UNLINK`, `MOVE`, `RENAME`,
/// `MIGRATE`'s sending side, `EXPIRE`, scripts). Deleting our marker or a lock key by name is
/// tampering, which breaks every lock library alike, not a data loss. Eviction is read from
/// `INFO stats` (`evicted_keys`), a restart from the uptime, a promotion from `INFO replication`.
pub const DROPPING: [&str; 12] = [
    "flushall",
    "flushdb",
    "swapdb",
    "replicaof",
    "slaveof",
    "failover",
    "debug",
    "restore",
    "restore-asking",
    "module|load",
    "module|loadex",
    "config|resetstat",
];

/// Why a node is not clean, or `None` when it is (the module's rule), from its `INFO server`,
/// `INFO replication`, `INFO stats` and `INFO commandstats` replies, read after its marker.
pub fn unclean(info: &str, max_ttl: Duration) -> Option<String> {
    if let Some(why) = counters_blind(info) {
        return Some(why);
    }
    if info_field(info, "uptime_in_seconds").is_none() {
        return Some("INFO shows no uptime".to_owned());
    }
    if let Some(uptime) = started_within(info, max_ttl) {
        return Some(format!("started {} s ago", uptime.as_secs()));
    }
    if info_field(info, "role") != Some("master") {
        return Some("it is a replica".to_owned());
    }
    dropped_data(info)
}

/// Why a server's counters cannot show that it dropped data, or `None` (Redis 7 and later).
/// Before Redis 7, commandstats count `CONFIG RESETSTAT` and `MODULE LOAD` under `config` and
/// `module`, with every `CONFIG GET` (the health check's own): the record that erases the record
/// cannot be told apart, so such a server shows no evidence. Also `mark`'s rule.
pub fn counters_blind(info: &str) -> Option<String> {
    let major = info_field(info, "redis_version")
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    major
        .is_none_or(|major| major < 7)
        .then(|| "Redis before 7 does not count CONFIG RESETSTAT on its own".to_owned())
}

/// The server's uptime when it is less than `max_ttl` (with the quarantine's slack, its
/// invariant 1), so that its start may have dropped locks still held; a missing uptime counts as
/// none. Also `mark`'s rule.
pub fn started_within(info: &str, max_ttl: Duration) -> Option<Duration> {
    let uptime = info_field(info, "uptime_in_seconds").and_then(|s| s.parse::<u64>().ok());
    let uptime = Duration::from_secs(uptime.unwrap_or(0));
    (uptime.saturating_sub(UPTIME_SLACK) < max_ttl).then_some(uptime)
}

/// What in a server's `INFO` shows that it dropped or replaced data since it started: a
/// promotion, an eviction, a command of [`DROPPING`]; `None` when nothing does. Also what an
/// operator's unforced `redlock nodes mark` refuses to vouch over.
pub fn dropped_data(info: &str) -> Option<String> {
    if info_field(info, "second_repl_offset") != Some("-1") {
        return Some("it was a replica since it started (promoted)".to_owned());
    }
    match info_field(info, "evicted_keys").map(str::parse::<u64>) {
        Some(Ok(0)) => {}
        Some(Ok(_)) => return Some("it evicted keys".to_owned()),
        _ => return Some("INFO shows no evicted_keys".to_owned()),
    }
    let ran = |command: &str| {
        info_field(info, &format!("cmdstat_{command}")).is_some_and(|stats| {
            stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .is_none_or(|calls| calls != "0")
        })
    };
    DROPPING
        .iter()
        .find(|command| ran(command))
        .map(|command| format!("it ran {} since it started", command.to_uppercase()))
}

/// What the group's evidence decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every node's marker was vouched for (invariant 1).
    Vouched,
    /// Not every node could be read yet: try again later.
    Undecided,
    /// The group may not be trusted on first sight, for this reason: the nodes wait out their
    /// quarantine, as they always did.
    Wait(String),
}

/// One node as the group's first look saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sighting {
    /// Clean, and its marker is a first-sight one still pending: this id.
    Unmarked { id: String },
    /// It cannot join a first-sight trust, for this reason.
    Excluded(String),
    /// It could not be read.
    Unread,
}

/// The decision on the sightings of every node of the group (the module's rule).
pub fn decide(sightings: &[(String, Sighting)]) -> Outcome {
    if let Some((node, Sighting::Excluded(why))) = sightings
        .iter()
        .find(|(_, s)| matches!(s, Sighting::Excluded(_)))
    {
        return Outcome::Wait(format!("{node}: {why}"));
    }
    if sightings.iter().any(|(_, s)| *s == Sighting::Unread) {
        return Outcome::Undecided;
    }
    Outcome::Vouched
}

/// What a group's first look makes of one node (the rule above): its marker as `marker.lua`
/// returned it (read, or written as a first-sight one where there was none), at node time
/// `node_ms`, and its `INFO all` read after it. Only a first-sight marker still pending by more
/// than `margin` (invariant 1) on a clean node can join the group's trust.
pub fn sighting(
    marker: &str,
    node_ms: u64,
    info: &str,
    max_ttl: Duration,
    margin: Duration,
) -> Sighting {
    let marker = MarkerValue::parse(marker);
    if marker.tag != Tag::New || marker.pending_at(node_ms) <= margin {
        Sighting::Excluded("it shows a marker".to_owned())
    } else if info_field(info, "cluster_enabled") == Some("1") {
        Sighting::Excluded("a Redis Cluster node".to_owned())
    } else {
        unclean(info, max_ttl).map_or(
            Sighting::Unmarked {
                id: marker.id.to_owned(),
            },
            Sighting::Excluded,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_TTL: Duration = Duration::from_secs(60);

    fn info(uptime: u64, extra: &str) -> String {
        format!(
            "# Server\r\nredis_version:7.0.15\r\nrun_id:abc\r\nuptime_in_seconds:{uptime}\r\n# Replication\r\nrole:master\r\n\
             second_repl_offset:-1\r\n# Stats\r\nevicted_keys:0\r\n# Commandstats\r\n\
             cmdstat_set:calls=3,usec=1\r\n{extra}"
        )
    }

    #[test]
    fn a_long_running_master_that_dropped_nothing_is_clean() {
        assert_eq!(unclean(&info(61, ""), MAX_TTL), None);
        // A DEBUG refused by enable-debug-command ran nothing.
        let refused = "cmdstat_debug:calls=0,usec=0,rejected_calls=1\r\n";
        assert_eq!(unclean(&info(3600, refused), MAX_TTL), None);
    }

    #[test]
    fn every_dropping_command_makes_a_node_unclean() {
        for command in DROPPING {
            let ran = format!("cmdstat_{command}:calls=1,usec=5\r\n");
            let why = unclean(&info(3600, &ran), MAX_TTL);
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.contains(&command.to_uppercase())),
                "{command}: {why:?}"
            );
        }
    }

    #[test]
    fn young_promoted_evicting_or_replica_nodes_are_unclean() {
        assert_eq!(
            unclean(&info(60, ""), MAX_TTL).as_deref(),
            Some("started 60 s ago")
        );
        let promoted = info(3600, "").replace("second_repl_offset:-1", "second_repl_offset:42");
        assert!(unclean(&promoted, MAX_TTL).is_some_and(|w| w.contains("promoted")));
        let replica = info(3600, "").replace("role:master", "role:slave");
        assert!(unclean(&replica, MAX_TTL).is_some_and(|w| w.contains("replica")));
        let evicted = info(3600, "").replace("evicted_keys:0", "evicted_keys:7");
        assert!(unclean(&evicted, MAX_TTL).is_some_and(|w| w.contains("evicted")));
        assert!(unclean("# Server\r\n", MAX_TTL).is_some());
        // Redis 6 counts CONFIG RESETSTAT under CONFIG, with every CONFIG GET.
        let six = info(3600, "").replace("redis_version:7.0.15", "redis_version:6.2.14");
        assert!(unclean(&six, MAX_TTL).is_some_and(|w| w.contains("before 7")));
    }

    #[test]
    fn the_group_is_vouched_only_when_every_node_is_unmarked_and_clean() {
        let unmarked = |n: &str| (n.to_owned(), Sighting::Unmarked { id: "x".into() });
        let all = [unmarked("a"), unmarked("b"), unmarked("c")];
        assert_eq!(decide(&all), Outcome::Vouched);
        for i in 0..3 {
            let mut one_marked = all.clone();
            one_marked[i].1 = Sighting::Excluded("shows a marker".into());
            assert!(matches!(decide(&one_marked), Outcome::Wait(_)), "node {i}");
            let mut one_unread = all.clone();
            one_unread[i].1 = Sighting::Unread;
            assert_eq!(decide(&one_unread), Outcome::Undecided, "node {i}");
            // A marked node decides, whatever could not be read.
            let mut both = one_marked.clone();
            both[(i + 1) % 3].1 = Sighting::Unread;
            assert!(matches!(decide(&both), Outcome::Wait(_)), "node {i}");
        }
    }
}
