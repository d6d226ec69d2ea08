//! One file because `Memory::judge` applies all seven invariants at once; its tests check them.
//!
//! Restart quarantine: when a node's vote may be trusted again.
//!
//! A node that lost its data (restarted empty, flushed, evicted its keys, or was replaced by a
//! different server behind the same address) has forgotten every lock it held, so its "OK" to a
//! second client can complete a second majority while the first holder still relies on the lock.
//! The algorithm's answer is operational: keep such a node out for longer than the largest TTL in
//! use, so every lock it knew about has expired before it votes again. We enforce that in the
//! client instead of trusting operators to: each node's `run_id`, uptime and *marker key* are
//! read on every (re)connection and from time to time, and a node that may have lost data less
//! than `max_ttl` ago is *quarantined*. We still set, extend and release keys there, but its
//! replies do not count toward a majority.
//!
//! The marker key ([`MARKER_KEY`]) is the evidence that a node still has its data: one key
//! without a TTL, written once, that every data loss takes with it. Configuration (`appendonly`,
//! `appendfsync`) only says what a node *should* keep; the marker says what it *did* keep.
//!
//! **First sight.** A node seen for the first time without a marker is quarantined for
//! `max_ttl` (invariant 3), unless the whole group's evidence vouches for it: every node of the
//! manager unmarked and *clean* (long-running, nothing in its counters that drops data), which
//! leaves one schedule it would get wrong, every marked node replaced at once by long-running
//! servers that never had a marker. [`first_sight`](crate::protocol::first_sight) has that rule,
//! its argument and its limit; an operator may vouch too (`redlock nodes mark`). Either writes a
//! marker that vouches, under the same id ([`marker`](crate::protocol::marker)), which the rules
//! here then read like any other.
//!
//! This module is pure: it judges observations; the node layer makes them.
//!
//! # Invariants
//! 1. A node is trusted only once it has been up for `max_ttl`, unless it is durable and shows
//!    its marker (invariant 4): every key it lost in a restart had a TTL of at most `max_ttl`
//!    (the manager refuses longer ones), so by then it would have expired anyway. Redis reports
//!    uptime in whole seconds as the difference of two clock readings each rounded down to the
//!    second, so `uptime_in_seconds:1` may mean a node up for a millisecond: a reported uptime
//!    counts for one second less ([`UPTIME_SLACK`]). Each check so bounds from below how long
//!    the node has been up, and the rounding moves that bound by up to two seconds from one check
//!    to the next; the [`Memory`] keeps the earliest start time any check of the same run
//!    allowed, so that a node once trusted is not quarantined again by a later check that found
//!    nothing new.
//! 2. Evidence of a data loss quarantines the node for a full `max_ttl` from the moment we see
//!    it, and that verdict is kept in the node's [`Memory`], which outlives connections and
//!    health checks: a later check that finds nothing new (the same new `run_id`, the same new
//!    marker) cannot shorten it. Evidence is: a `run_id` that changed under us (a restart, or a
//!    different server at the same address), a marker that is missing (the node lost its keys;
//!    we write a new one), or a marker whose value changed (somebody else saw it missing). We
//!    cannot tell when the loss happened, only that it was before we saw it. (A `run_id` that
//!    changed is no evidence on a replicated node whose new run continues the history it
//!    followed with every counted vote: `succession` invariants 3 and 7.)
//! 3. A marker is only ever written *with* its quarantine: its value carries the node time
//!    before which it vouches for nothing (`<random>:<node ms>`, `max_ttl` after it was
//!    written), and every client that reads it before then is quarantined until then. So a
//!    client that never saw the loss (a new process, another machine) still waits, and a loss
//!    after the marker was written takes the marker with it (then invariant 2 again). A marker
//!    whose value does not carry a time (`redquorum-nodes` writes `fresh-<port>-<pid>-<ns>:0`
//!    on a brand-new node; `redlock nodes mark` vouches likewise) vouches at once.
//! 4. A node whose configuration cannot lose acknowledged writes (`appendonly yes` with
//!    `appendfsync always`, read with `CONFIG GET`) is trusted at once after a restart, but only
//!    when the manager is configured to trust such nodes (an explicit setting), and only when it
//!    shows the marker we knew (or, on first sight, any marker that vouches): a wiped AOF
//!    directory, a new volume or a `FLUSHALL` leaves a durable node without its marker, which
//!    is evidence of a loss (invariant 2). If `CONFIG` is not allowed, the node is not known to
//!    be durable. Across a restart, only a marker whose id was drawn at random counts as "the
//!    marker we knew" (`marker` invariant 5): `manual`, written by hand on every server, would
//!    also be on a server replaced behind the same address. Nor is a replica promoted to
//!    master (`INFO replication` shows a
//!    `second_repl_offset`): it carries the master's marker by replication, but perhaps not the
//!    master's last keys.
//! 5. With quarantine disabled every node is trusted: plain Redlock. No marker is read or
//!    written.
//! 6. **A Redis Cluster master's marker names its owner**: the `run_id` of the process that
//!    wrote it and that process's `master_replid` (`<run_id>.<replid>/<random>:<node ms>`), and
//!    a master that finds a marker naming another owner treats it as missing: it writes its own,
//!    with its quarantine (invariants 2, 3). The replication id is there for the failback: a
//!    master Y demoted to a replica and fully resynchronised gets its data, its own marker
//!    included, from the replica X that was promoted in its place, and once it leads again it
//!    is the same process, with its own marker and a long uptime, but without the locks X never
//!    had. Every change of role changes the `master_replid` (a promotion draws a new one, a
//!    replica takes its master's), and nothing else does while the process runs, so the marker
//!    names Y's history before the failover and Y is quarantined as a promoted replica.
//!    A replica promoted to master has its old master's marker (replicated) but perhaps not its
//!    last keys; a master that took over a slot by migration may have a marker moved with it;
//!    both are quarantined for `max_ttl` from the first health check that sees them, by any
//!    client, and every client after that reads the pending time. Every lock counted on the
//!    old master was counted before the promotion, so it has expired by then, as long as the
//!    old master stopped granting before the promotion. In Redis Cluster's own failovers it may
//!    not quite have: a master cut off from the majority stops taking writes once it has missed
//!    the others for `cluster-node-timeout`, and its replica is elected after about the same
//!    time, measured from other pings, so the old master may take writes for up to about a node
//!    timeout after the promotion. So a cluster master's quarantine, whatever its evidence, is
//!    `max_ttl` plus its `cluster-node-timeout` (read with `CONFIG GET`; Redis's default, 15 s,
//!    when it cannot be read), and so is the pending time of the marker it writes. Not enough
//!    for an operator's `TAKEOVER` while the old master still serves clients
//!    (`docs/cluster.md`). A restart also
//!    changes the `run_id`, so a cluster master is quarantined after every restart, durable or
//!    not (conservative: its durability cannot tell a restart from a promotion). Resharding a
//!    master's lowest slot moves its marker (a key without a TTL) to the importing master, where
//!    it stays as a stray key of a few dozen bytes: nobody reads it unless that slot becomes the
//!    importing master's lowest, and then it names another owner and is rewritten, with its
//!    quarantine, as above. Harmless, so it is left there rather than deleted by a client that
//!    cannot tell a stray marker from a live one.
//! 7. **Within one run, an eviction or a change of replication history is a loss**, seen by
//!    every client that checked the node before. A server that evicted keys since our last
//!    check (`INFO stats`'s `evicted_keys` moved: it grew under a `maxmemory-policy` other than
//!    `noeviction`, or went down with a `CONFIG RESETSTAT` that may hide an eviction)
//!    may have evicted a lock key and kept its marker (the marker has no TTL, so `volatile-*`
//!    policies never take it). A reset can also hide an eviction without moving the count (0,
//!    then n evicted, then a reset: 0 again), so a reset is read from a counter that only a
//!    reset takes down, `total_commands_processed` in the same reply: a count that grew by less
//!    than our own health checks ran since our last reading ([`OWN_COMMANDS`]) was reset, and
//!    that is a loss on a node that may evict keys, at this check or the last, or whose eviction
//!    settings cannot be read (`CONFIG GET` refused); a node known not to evict at both checks
//!    lost nothing by it. What is left: a reset after which the server ran more commands than
//!    in its whole run before our last reading (a server that had run almost none: a
//!    long-running one has run millions), or a policy switched to evicting and back, an
//!    eviction and a reset, all between two health checks (10 s). A plain server whose
//!    `master_replid` changed under the same
//!    `run_id` was made a replica, whose full resync replaces its data (perhaps with a copy of
//!    its own marker), or was promoted (`REPLICAOF NO ONE`) with a replica's data. Neither
//!    shows in the marker, so the health check reads both. A client that meets the node for the
//!    first time has nothing to compare with: first sight reads the run's whole record instead
//!    (`first_sight::dropped_data`).

use std::fmt;
use std::time::{Duration, Instant};

use crate::protocol::marker::{MarkerValue, Tag};

/// The marker key: present on a node for as long as it kept its data (module docs). Its name is
/// shared with `redquorum-nodes`, which writes it on brand-new nodes.
pub const MARKER_KEY: &str = "redlock-node-marker";

/// The marker of a brand-new Redis Cluster master whose lowest served slot is `lowest_slot`,
/// given its `INFO` (the `server` and `replication` sections, as a plain `INFO` returns them)
/// and a randomly drawn `id`: its key and a value that vouches for it at once (invariants 3, 6).
/// [`cluster_marker`](crate::cluster_marker) draws the id.
pub(crate) fn cluster_marker_with_id(lowest_slot: u16, info: &str, id: u64) -> (String, String) {
    let owner = marker_owner(info, info, true);
    // A drawn id, as every marker of ours has (`marker` invariant 5).
    let id = format!("{id:016x}");
    (cluster_marker_key(lowest_slot), format!("{owner}/{id}:0"))
}

/// Who a Redis Cluster master's marker names (invariant 6): the process (`run_id`) and its
/// replication history (`master_replid`), from its `INFO server` and `INFO replication`.
pub fn marker_owner(server: &str, replication: &str, history: bool) -> String {
    let run_id = info_field(server, "run_id").unwrap_or_default();
    if !history {
        return run_id.to_owned();
    }
    let replid = info_field(replication, "master_replid").unwrap_or_default();
    format!("{run_id}.{replid}")
}

/// The marker key of a master of a Redis Cluster node whose lowest served slot is
/// `lowest_slot`: [`MARKER_KEY`] followed by a hash tag of that slot, so that the master serves
/// its own marker.
pub(crate) fn cluster_marker_key(lowest_slot: u16) -> String {
    format!(
        "{MARKER_KEY}{{{}}}",
        crate::protocol::slots::slot_tag(lowest_slot % crate::protocol::slots::SLOTS)
    )
}

/// How much `uptime_in_seconds` may exceed the real uptime: Redis computes it as
/// `server.unixtime - server.stat_starttime`, two times in whole seconds (invariant 1). Ignoring
/// this let a node that restarted empty vote up to a second early: the flake of
/// `tests/quarantine.rs` (a node restarted at x.999 s and checked at x+1.001 s reads 1 s).
pub(crate) const UPTIME_SLACK: Duration = Duration::from_secs(1);

/// How the manager judges nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrustPolicy {
    /// Whether nodes that may have lost data are quarantined at all (invariant 5).
    pub enabled: bool,
    /// The largest TTL any client of these servers uses: the quarantine length.
    pub max_ttl: Duration,
    /// Whether nodes that cannot lose acknowledged writes are trusted at once (invariant 4).
    pub trust_durable: bool,
    /// Whether a cluster master's marker names its replication history besides its process
    /// (invariant 6); `false` only for the chaos run's replaced rule.
    pub owner_history: bool,
    /// Whether a marker whose id was not drawn (a word written by hand) vouches like any other
    /// (`marker` invariant 5 off); `true` only for the chaos run's replaced rule.
    pub hand_markers_vouch: bool,
}

/// Why a node's votes do not count yet: the evidence that keeps it out longest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QuarantineReason {
    /// The server started less than `max_ttl` ago: it may have restarted without its data
    /// (invariant 1).
    Started,
    /// Seen for the first time without a marker: a new server, or one flushed or replaced in the
    /// last `max_ttl`; the group's evidence could not vouch for it (see the guide's *First use
    /// and the restart quarantine*), and no operator did
    /// ([`Redlock::mark_nodes`](crate::Redlock::mark_nodes)).
    FirstSeenWithoutMarker,
    /// Its `run_id` changed under us: it restarted, or another server answers at its address.
    Restarted,
    /// Its marker went missing or changed while it kept running: a data loss without a restart
    /// (a flush, an eviction), seen by this client or by another one.
    LostMarker,
    /// A promoted replica that may lack a lock: a Redis Cluster master that held another
    /// master's marker (or took over the marker's slot), or a Sentinel primary promoted from a
    /// replica that was away while votes counted without it (`docs/sentinel.md`).
    Promoted,
    /// It evicted keys since our last check (invariant 7): a lock key may be gone.
    Evicted,
    /// Its statistics were reset since our last check (`CONFIG RESETSTAT`) while it may evict
    /// keys (invariant 7): the reset may hide an eviction.
    StatsReset,
    /// Its replication history changed since our last check, in the same run (invariant 7): it
    /// was made a replica (whose full resync replaces its data) or promoted.
    Resynchronised,
}

impl fmt::Display for QuarantineReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QuarantineReason::Started => "started recently",
            QuarantineReason::FirstSeenWithoutMarker => "first seen without a marker",
            QuarantineReason::Restarted => "restarted (its run_id changed)",
            QuarantineReason::LostMarker => "lost its marker (data loss without a restart)",
            QuarantineReason::Promoted => {
                "promoted replica that may lack a lock (another master's marker, a replica \
                 that was away, or a copy of a quarantined primary)"
            }
            QuarantineReason::Evicted => "evicted keys (a lock key may be gone)",
            QuarantineReason::StatsReset => {
                "its statistics were reset while it may evict keys (an eviction may be hidden)"
            }
            QuarantineReason::Resynchronised => {
                "its replication history changed (made a replica, or promoted)"
            }
        })
    }
}

/// A node's quarantine as it stands: how long, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Quarantine {
    /// How much longer the node's votes do not count.
    pub left: Duration,
    /// What keeps it out longest.
    pub reason: QuarantineReason,
    /// How long the server has been up, when that alone would keep it out too.
    pub up: Option<Duration>,
    /// Whether the server started less than `max_ttl` ago, by its uptime, whether or not that
    /// keeps it out (a durable server's does not): an operator's plain mark is refused then,
    /// and only a brand-new one's vouch ([`Remedy`](crate::protocol::remedy::Remedy)) is right.
    pub young: bool,
    /// Whether its marker is a first-sight one that nothing vouched for yet: no client of ours
    /// marked the server before one first saw it, whatever reason keeps it out longest (its
    /// uptime may end a second after the marker's pending time).
    pub first_sight: bool,
}

impl Quarantine {
    /// A quarantine of `left` more, for `reason` (for tests of code that reports one).
    pub fn new(left: Duration, reason: QuarantineReason) -> Self {
        Self {
            left,
            reason,
            up: None,
            young: false,
            first_sight: false,
        }
    }
}

/// `first seen without a marker, started 3 s ago, 57 s left`.
impl fmt::Display for Quarantine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.reason, self.up) {
            (QuarantineReason::Started, Some(up)) => write!(f, "started {} s ago", up.as_secs())?,
            (reason, Some(up)) => write!(f, "{reason}, started {} s ago", up.as_secs())?,
            (reason, None) => write!(f, "{reason}")?,
        }
        write!(f, ", {} s left", self.left.as_secs_f64().ceil())
    }
}

/// The marker as a health check found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// It was there, holding `value`, which vouches for the node only after `pending` more
    /// (invariant 3; zero when it already does).
    Found {
        /// The marker's value.
        value: String,
        /// How long before it vouches.
        pending: Duration,
    },
    /// The check wrote `value`, which vouches after `max_ttl`: there was none, or (a cluster
    /// master's) one that named another owner (`replaced_other`).
    Written {
        /// The marker's value.
        value: String,
        /// Whether it replaced another owner's marker.
        replaced_other: bool,
    },
}

impl Marker {
    /// The marker's value.
    pub fn value(&self) -> &str {
        match self {
            Marker::Found { value, .. } | Marker::Written { value, .. } => value,
        }
    }

    /// Reads the marker script's reply: the value, whether it wrote it (1: where there was
    /// none, 2: over another owner's, 3: over a word written by hand, which counts as none:
    /// `marker` invariant 5), and the node's time; for a manager of the first-sight group
    /// `group` (`marker` invariant 4), with the quarantine `max_ttl`.
    pub fn from_reply(
        value: String,
        written: u8,
        node_ms: u64,
        group: Option<&str>,
        max_ttl: Duration,
    ) -> Self {
        if written != 0 {
            return Marker::Written {
                value,
                replaced_other: written == 2,
            };
        }
        let pending = MarkerValue::parse(&value).pending_for(node_ms, group, max_ttl);
        Marker::Found { value, pending }
    }
}

/// The fewest commands a server runs for our health checks between two readings of its
/// `total_commands_processed` (invariant 7): after one reading, the `INFO stats` that read it
/// and the marker script; before the next, `INFO server` and `INFO replication` in the same
/// pipeline. (`CONFIG GET` too, unless refused: not counted.)
pub(crate) const OWN_COMMANDS: u64 = 4;

/// What a health check read from a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// `INFO server`'s `run_id`.
    pub run_id: String,
    /// `INFO server`'s `uptime_in_seconds`.
    pub uptime: Duration,
    /// Whether its configuration cannot lose acknowledged writes (and it was never promoted).
    pub durable: bool,
    /// The marker as the check found or wrote it.
    pub marker: Marker,
    /// `INFO stats`'s `evicted_keys`, when it was read (invariant 7).
    pub evicted_keys: Option<u64>,
    /// `INFO stats`'s `total_commands_processed`, when it was read: lower than before only
    /// after a reset (invariant 7).
    pub commands: Option<u64>,
    /// Whether the server may evict lock keys, or its settings could not be read (invariant 7).
    pub may_evict: bool,
    /// `INFO replication`'s `master_replid`, when it was read (invariant 7).
    pub replid: Option<String>,
    /// A replicated node's primary promoted from the one the client followed, holding every
    /// vote counted there (`succession` invariant 3): its data came by replication, so its
    /// uptime says nothing of a loss (invariant 1 is waived), nor does a `run_id` that changed
    /// at its address (invariant 2's restart; `succession` invariant 7).
    pub succeeded: bool,
}

impl Observation {
    /// Reads `run_id` and `uptime_in_seconds` from an `INFO server` reply, and `evicted_keys`,
    /// `total_commands_processed` and `master_replid` when the reply also holds `INFO stats`
    /// and `INFO replication`. The server may evict until the caller says otherwise
    /// ([`may_evict`](Self::may_evict)): the settings are not in `INFO`.
    pub fn from_info(info: &str, durable: bool, marker: Marker) -> Option<Self> {
        let field = |name: &str| info_field(info, name);
        Some(Self {
            run_id: field("run_id")?.to_owned(),
            uptime: Duration::from_secs(field("uptime_in_seconds")?.parse().ok()?),
            durable,
            marker,
            evicted_keys: field("evicted_keys").and_then(|n| n.parse().ok()),
            commands: field("total_commands_processed").and_then(|n| n.parse().ok()),
            may_evict: true,
            replid: field("master_replid").map(str::to_owned),
            succeeded: false,
        })
    }
}

/// The value of `name` in an `INFO` reply (`name:value` lines).
pub(crate) fn info_field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
}

/// An instant and the reason that set it.
type Until = (Instant, QuarantineReason);

/// What we remember of a node across connections and health checks (invariant 2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Memory {
    run_id: Option<String>,
    /// The identity of the marker last seen ([`marker`](crate::protocol::marker) invariant 1).
    marker_id: Option<String>,
    /// Until when the evidence of a loss seen so far keeps the node out (invariant 2).
    quarantined_until: Option<Until>,
    /// Until when a vote's read-back found its first-sight marker extended by a group's first
    /// look keeps the node out (`first_sight` invariant 1): a floor, like a loss's, that no
    /// health check judged before it may lower.
    held_off_until: Option<Instant>,
    /// The earliest start of the node's current run (`run_id`) that any of its checks allowed:
    /// each is at or after the real start (invariant 1).
    started_by: Option<Instant>,
    /// The last verdict, for reports: until when the node is out and why, and until when its
    /// uptime alone keeps it out.
    last: Option<(Until, Option<Instant>)>,
    /// `evicted_keys`, `total_commands_processed`, whether it may evict and `master_replid` at
    /// the last check of the current run (invariant 7).
    evicted_keys: Option<u64>,
    commands: Option<u64>,
    may_evict: bool,
    replid: Option<String>,
    /// Until when the server's uptime, at the last check, is under `max_ttl` (for reports).
    young_until: Option<Instant>,
    /// Whether the last check found a first-sight marker nothing vouched for (for reports).
    first_sight_marker: bool,
    /// Whether the node was already reported as able to evict keys (warned once, not every
    /// health check).
    pub(crate) eviction_reported: bool,
    /// Whether the node was already reported as a Redis Cluster master whose
    /// `cluster-node-timeout` cannot be read (warned once).
    pub(crate) node_timeout_unread_reported: bool,
}

/// A health check's judgement: from when the node's votes count, why not before, and the new
/// evidence of a loss, if the check found any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    /// From when the node's votes count.
    pub trusted_from: Instant,
    /// Why not before, if it is out now.
    pub reason: Option<QuarantineReason>,
    /// The new evidence of a loss this check found, if any.
    pub loss: Option<QuarantineReason>,
}

impl Memory {
    /// Evidence of a loss seen at `now` outside a health check, `why` (a vote's marker read
    /// back wrong, or a cluster master's replication history read back changed): quarantined
    /// for `max_ttl` from now (invariant 2). Returns the new end.
    pub fn lost_data(
        &mut self,
        policy: &TrustPolicy,
        now: Instant,
        why: QuarantineReason,
    ) -> Instant {
        let until = latest(self.quarantined_until, (after(now, policy.max_ttl), why));
        self.quarantined_until = Some(until);
        let uptime_until = self.last.and_then(|(_, up)| up);
        self.last = Some((latest(self.last.map(|(u, _)| u), until), uptime_until));
        until.0
    }

    /// Evidence of a loss seen at `now` that keeps the node out until `until` rather than for a
    /// full `max_ttl` (`succession` invariant 6: a copy of a primary quarantined until then), for
    /// reason `why` (invariant 2). Returns the new end.
    pub fn lost_until(&mut self, until: Instant, why: QuarantineReason) -> Instant {
        let until = latest(self.quarantined_until, (until, why));
        self.quarantined_until = Some(until);
        let uptime_until = self.last.and_then(|(_, up)| up);
        self.last = Some((latest(self.last.map(|(u, _)| u), until), uptime_until));
        until.0
    }

    /// Until when the losses seen so far (invariant 2), and an extension a vote read back, keep
    /// the node out, if any do: what no health check may lower.
    pub fn floor(&self) -> Option<Instant> {
        let loss = self.quarantined_until.map(|(until, _)| until);
        loss.max(self.held_off_until)
    }

    /// A vote read back its first-sight marker extended: out until `until` at least.
    pub fn held_off(&mut self, until: Instant) {
        self.held_off_until = self.held_off_until.max(Some(until));
    }

    /// Whether no health check of this node has read a marker yet.
    pub fn is_first_sight(&self) -> bool {
        self.marker_id.is_none()
    }

    /// The node's quarantine at `now`, as far as the last verdict knows.
    pub(crate) fn quarantine(&self, now: Instant) -> Option<Quarantine> {
        let ((until, reason), uptime_until) = self.last?;
        let left = until.checked_duration_since(now).filter(|d| !d.is_zero())?;
        let up = uptime_until
            .filter(|u| *u > now)
            .and(self.started_by)
            .map(|s| now.saturating_duration_since(s));
        let young = self.young_until.is_some_and(|y| y > now);
        Some(Quarantine {
            left,
            reason,
            up,
            young,
            first_sight: self.first_sight_marker,
        })
    }

    /// Judges `seen` at `now` and remembers it.
    pub fn judge(&mut self, policy: &TrustPolicy, seen: &Observation, now: Instant) -> Verdict {
        if !policy.enabled {
            return Verdict {
                trusted_from: now,
                reason: None,
                loss: None,
            }; // invariant 5
        }
        let first_sight = self.marker_id.is_none();
        let restarted = self.run_id.as_deref().is_some_and(|r| r != seen.run_id);
        if restarted {
            self.started_by = None; // another run: its own start
        }
        let value = MarkerValue::parse(seen.marker.value());
        let marker_loss = match &seen.marker {
            Marker::Written {
                replaced_other: true,
                ..
            } => Some(QuarantineReason::Promoted),
            Marker::Written { .. } if !first_sight => Some(QuarantineReason::LostMarker),
            Marker::Found { .. } if self.marker_id.as_deref().is_some_and(|m| m != value.id) => {
                Some(QuarantineReason::LostMarker)
            }
            _ => None,
        };
        // Invariant 7: within one run, keys evicted or a replication history that changed.
        let same_run = self.run_id.is_some() && !restarted;
        // A count that went down was reset (`CONFIG RESETSTAT`), which may hide an eviction.
        let moved = |before: Option<u64>, now: Option<u64>| matches!((before, now), (Some(b), Some(n)) if n != b);
        let changed = |before: &Option<String>, now: &Option<String>| matches!((before, now), (Some(b), Some(n)) if b != n);
        // A count of commands that grew by less than our own health checks ran since the last
        // reading was reset too, perhaps after an eviction that the reset took back to the same
        // count.
        let reset = matches!((self.commands, seen.commands), (Some(b), Some(n)) if n < b.saturating_add(OWN_COMMANDS));
        let marker_loss = marker_loss
            .or((same_run && moved(self.evicted_keys, seen.evicted_keys))
                .then_some(QuarantineReason::Evicted))
            .or((same_run && reset && (self.may_evict || seen.may_evict))
                .then_some(QuarantineReason::StatsReset))
            .or((same_run && changed(&self.replid, &seen.replid))
                .then_some(QuarantineReason::Resynchronised));
        self.evicted_keys = seen.evicted_keys;
        self.commands = seen.commands;
        self.may_evict = seen.may_evict;
        self.replid.clone_from(&seen.replid);
        // Invariant 4; across a restart only on a marker whose id tells servers apart (`marker`
        // invariant 5): a hand-written word is on the replacement too.
        let durable = policy.trust_durable
            && seen.durable
            && marker_loss.is_none()
            && (!restarted || value.tells_servers_apart());
        // A replicated node's successor that holds every counted vote (`succession` invariants 3
        // and 7): behind a fixed address, a new run there is the failover itself, not a restart.
        let loss = marker_loss
            .or((restarted && !durable && !seen.succeeded).then_some(QuarantineReason::Restarted));
        let mut until = (now, QuarantineReason::Started);
        if let Some(reason) = loss {
            let lost = latest(self.quarantined_until, (after(now, policy.max_ttl), reason));
            self.quarantined_until = Some(lost); // invariant 2
        }
        if let Some(lost) = self.quarantined_until {
            until = latest(Some(until), lost);
        }
        // Invariant 3: a marker vouches from its time on; one we wrote, after `max_ttl`.
        let pending = match &seen.marker {
            Marker::Found { pending, .. } => *pending,
            Marker::Written { .. } => policy.max_ttl,
        };
        let written = matches!(seen.marker, Marker::Written { .. });
        let by_a_group = matches!(value.tag, Tag::GroupVouched { .. });
        let pending_reason = if value.tag == Tag::New || by_a_group || (first_sight && written) {
            QuarantineReason::FirstSeenWithoutMarker
        } else {
            QuarantineReason::LostMarker
        };
        until = latest(Some(until), (after(now, pending), pending_reason));
        // Young by its uptime, whether or not that keeps it out: what an operator's mark asks.
        let up_at_least = seen.uptime.saturating_sub(UPTIME_SLACK);
        self.young_until = (up_at_least < policy.max_ttl)
            .then(|| after(now, policy.max_ttl.saturating_sub(up_at_least)));
        // Invariant 1, waived for a durable node that kept its marker (invariant 4), for a
        // run an operator or the group vouched for (`marker` invariant 3), and for a replicated
        // primary's successor that holds every counted vote (`succession` invariant 3).
        let mut uptime_until = None;
        if !durable && !value.vouches_for_run(&seen.run_id) && !seen.succeeded {
            let up_at_least = seen.uptime.saturating_sub(UPTIME_SLACK);
            let started_by = now.checked_sub(up_at_least).unwrap_or(now);
            let started_by = self.started_by.map_or(started_by, |s| s.min(started_by));
            self.started_by = Some(started_by);
            let up_until = after(started_by, policy.max_ttl);
            uptime_until = Some(up_until);
            until = latest(Some(until), (up_until, QuarantineReason::Started));
        }
        self.first_sight_marker = value.tag == Tag::New;
        self.run_id = Some(seen.run_id.clone());
        self.marker_id = Some(value.id.to_owned());
        let out = until.0 > now;
        self.last = out.then_some((until, uptime_until));
        Verdict {
            trusted_from: until.0,
            reason: out.then_some(until.1),
            loss,
        }
    }
}

/// `now + d`, or far in the future when that does not fit an `Instant`.
pub(crate) fn after(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 60 * 60))
}

/// The later of two ends; on a tie, the one already known.
fn latest(a: Option<Until>, b: Until) -> Until {
    match a {
        Some(a) if a.0 >= b.0 => a,
        _ => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_TTL: Duration = Duration::from_secs(60);

    fn policy() -> TrustPolicy {
        TrustPolicy {
            enabled: true,
            max_ttl: MAX_TTL,
            trust_durable: true,
            owner_history: true,
            hand_markers_vouch: false,
        }
    }

    fn found(value: &str) -> Marker {
        Marker::Found {
            value: value.into(),
            pending: Duration::ZERO,
        }
    }

    fn seen(run_id: &str, uptime_s: u64, durable: bool, marker: Marker) -> Observation {
        Observation {
            run_id: run_id.into(),
            uptime: Duration::from_secs(uptime_s),
            durable,
            marker,
            evicted_keys: Some(0),
            commands: Some(100),
            may_evict: false,
            replid: Some("r1".into()),
            succeeded: false,
        }
    }

    /// The quarantine left at `now` after judging `observation` with `memory`.
    fn judged(memory: &mut Memory, observation: &Observation, now: Instant) -> Duration {
        memory
            .judge(&policy(), observation, now)
            .trusted_from
            .saturating_duration_since(now)
    }

    #[test]
    fn keys_evicted_or_a_new_replication_history_in_the_same_run_are_a_loss() {
        let now = Instant::now();
        let long_running = || seen("a", 3_600, false, found("m"));
        for (change, reason) in [
            (
                Box::new(|o: &mut Observation| o.evicted_keys = Some(1))
                    as Box<dyn Fn(&mut Observation)>,
                QuarantineReason::Evicted,
            ),
            (
                Box::new(|o: &mut Observation| o.replid = Some("r2".into())),
                QuarantineReason::Resynchronised,
            ),
        ] {
            let mut memory = Memory::default();
            assert_eq!(judged(&mut memory, &long_running(), now), Duration::ZERO);
            let mut later = long_running();
            change(&mut later);
            let verdict = memory.judge(&policy(), &later, now);
            assert_eq!(verdict.loss, Some(reason));
            assert_eq!(verdict.trusted_from.saturating_duration_since(now), MAX_TTL);
            // Seen first in that state, by a client with nothing to compare: no evidence here.
            assert_eq!(judged(&mut Memory::default(), &later, now), Duration::ZERO);
        }
        // A count that went down was reset (`CONFIG RESETSTAT`), which may hide an eviction.
        let mut memory = Memory::default();
        let mut evicting = long_running();
        evicting.evicted_keys = Some(5);
        assert_eq!(judged(&mut memory, &evicting, now), Duration::ZERO);
        let reset = memory.judge(&policy(), &long_running(), now);
        assert_eq!(reset.loss, Some(QuarantineReason::Evicted));
        // Unread (a server that refuses INFO stats): nothing is inferred.
        let mut memory = Memory::default();
        judged(&mut memory, &long_running(), now);
        let mut unread = long_running();
        unread.evicted_keys = None;
        assert_eq!(judged(&mut memory, &unread, now), Duration::ZERO);
    }

    /// Issue 44: an eviction, then `CONFIG RESETSTAT`, reads the same `evicted_keys` as before
    /// (0, n, 0); the count of commands, which only a reset takes down, says there was a reset,
    /// a loss on a node that may evict at either check (or cannot say), and nothing on one
    /// known not to evict at both.
    #[test]
    fn a_reset_of_the_statistics_is_a_loss_on_a_node_that_may_evict() {
        let now = Instant::now();
        let at = |commands: u64, may_evict: bool| Observation {
            commands: Some(commands),
            may_evict,
            ..seen("a", 3_600, false, found("m"))
        };
        for (before, after, loss) in [
            (true, true, Some(QuarantineReason::StatsReset)),
            (true, false, Some(QuarantineReason::StatsReset)),
            (false, true, Some(QuarantineReason::StatsReset)),
            (false, false, None),
        ] {
            let mut memory = Memory::default();
            assert_eq!(judged(&mut memory, &at(5_000, before), now), Duration::ZERO);
            let verdict = memory.judge(&policy(), &at(12, after), now);
            assert_eq!(
                verdict.loss, loss,
                "may evict before: {before}, after: {after}"
            );
            // Counting on: no reset.
            let mut memory = Memory::default();
            judged(&mut memory, &at(5_000, before), now);
            assert_eq!(memory.judge(&policy(), &at(5_012, after), now).loss, None);
        }
        // Grown by less than our own health checks ran in between: reset, and run up again.
        let mut memory = Memory::default();
        judged(&mut memory, &at(5_000, true), now);
        let verdict = memory.judge(&policy(), &at(5_000 + OWN_COMMANDS - 1, true), now);
        assert_eq!(verdict.loss, Some(QuarantineReason::StatsReset));
        // Read from a reply that holds them: a server's settings are not in INFO, so it may
        // evict until the health check says otherwise.
        let info = "run_id:a\r\nuptime_in_seconds:9\r\ntotal_commands_processed:77\r\n";
        let read = Observation::from_info(info, false, found("m")).expect("parsed");
        assert_eq!((read.commands, read.may_evict), (Some(77), true));
    }

    #[test]
    fn a_young_node_waits_until_it_has_been_up_for_max_ttl() {
        let now = Instant::now();
        let left = judged(
            &mut Memory::default(),
            &seen("a", 15, false, found("m")),
            now,
        );
        assert_eq!(
            left,
            Duration::from_secs(46),
            "15 s reported: at least 14 s up"
        );
    }

    #[test]
    fn a_reported_second_of_uptime_may_be_a_millisecond() {
        let now = Instant::now();
        let left = judged(
            &mut Memory::default(),
            &seen("a", 1, false, found("m")),
            now,
        );
        assert_eq!(left, MAX_TTL, "a full max_ttl, as for a node just started");
    }

    #[test]
    fn a_later_check_that_reads_less_uptime_does_not_undo_trust() {
        // Uptime is reported in whole seconds: 0.9 s later, the same run may still read 15 s.
        let now = Instant::now();
        let mut memory = Memory::default();
        assert_eq!(
            judged(&mut memory, &seen("a", 15, false, found("m")), now),
            Duration::from_secs(46)
        );
        let later = now + Duration::from_millis(900);
        let verdict = memory.judge(&policy(), &seen("a", 15, false, found("m")), later);
        assert_eq!(verdict.trusted_from, now + Duration::from_secs(46));
        // A restart is a new run: its own uptime counts, from scratch.
        let verdict = memory.judge(&policy(), &seen("b", 15, false, found("m")), later);
        assert_eq!(verdict.trusted_from, later + MAX_TTL);
    }

    #[test]
    fn an_old_node_with_its_marker_is_trusted_at_once() {
        let now = Instant::now();
        let mut memory = Memory::default();
        assert_eq!(
            judged(&mut memory, &seen("a", 61, false, found("m")), now),
            Duration::ZERO
        );
        assert_eq!(
            judged(&mut memory, &seen("a", 99_999, false, found("m")), now),
            Duration::ZERO
        );
    }

    #[test]
    fn a_run_id_that_changed_under_us_waits_a_full_max_ttl() {
        let now = Instant::now();
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, false, found("m")), now);
        let verdict = memory.judge(&policy(), &seen("b", 99_999, false, found("m")), now);
        assert_eq!(
            verdict.trusted_from - now,
            MAX_TTL,
            "an old server is still new to us"
        );
        assert_eq!(verdict.loss, Some(QuarantineReason::Restarted));
    }

    #[test]
    fn a_new_run_that_continues_a_replicated_history_is_no_restart() {
        let now = Instant::now();
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, false, found("m")), now);
        // Behind a fixed address, the replica promoted in place of the primary (`succession`
        // invariant 7), judged to hold every counted vote, young as it may be.
        let promoted = Observation {
            succeeded: true,
            ..seen("b", 5, false, found("m"))
        };
        let verdict = memory.judge(&policy(), &promoted, now);
        assert_eq!((verdict.trusted_from, verdict.loss), (now, None));
        // Not so for one that is not: the restart it looks like is a loss.
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, false, found("m")), now);
        let verdict = memory.judge(&policy(), &seen("b", 99_999, false, found("m")), now);
        assert_eq!(verdict.loss, Some(QuarantineReason::Restarted));
        // Nor does the waiver cover a marker gone with the data.
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, false, found("m")), now);
        let lost = Observation {
            succeeded: true,
            ..seen("b", 99_999, false, found("other"))
        };
        let verdict = memory.judge(&policy(), &lost, now);
        assert_eq!(verdict.loss, Some(QuarantineReason::LostMarker));
    }

    #[test]
    fn the_quarantine_after_a_change_survives_later_checks() {
        let t0 = Instant::now();
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, false, found("m")), t0);
        judged(&mut memory, &seen("b", 99_999, false, found("m")), t0);
        // Ten seconds later the same (new) run_id is seen again: nothing new, but the
        // quarantine still ends max_ttl after the change was first seen.
        let t1 = t0 + Duration::from_secs(10);
        let verdict = memory.judge(&policy(), &seen("b", 99_999, false, found("m")), t1);
        assert_eq!(verdict.trusted_from, t0 + MAX_TTL);
        assert_eq!(verdict.loss, None);
        let t2 = t0 + MAX_TTL;
        assert_eq!(
            judged(&mut memory, &seen("b", 99_999, false, found("m")), t2),
            Duration::ZERO
        );
    }

    #[test]
    fn a_missing_marker_is_a_loss_even_on_a_durable_old_node() {
        let now = Instant::now();
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, true, found("m")), now);
        let wiped = seen(
            "a",
            99_999,
            true,
            Marker::Written {
                value: "n:1".into(),
                replaced_other: false,
            },
        );
        let verdict = memory.judge(&policy(), &wiped, now);
        assert_eq!(verdict.trusted_from - now, MAX_TTL);
        assert_eq!(verdict.loss, Some(QuarantineReason::LostMarker));
        // A first sight of a node without a marker is a loss too: nothing vouches for it.
        assert_eq!(judged(&mut Memory::default(), &wiped, now), MAX_TTL);
    }

    #[test]
    fn a_marker_changed_by_someone_else_is_a_loss() {
        let now = Instant::now();
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, true, found("m1")), now);
        let verdict = memory.judge(&policy(), &seen("a", 99_999, true, found("m2")), now);
        assert_eq!(verdict.loss, Some(QuarantineReason::LostMarker));
        assert_eq!(verdict.trusted_from - now, MAX_TTL);
    }

    #[test]
    fn a_pending_marker_quarantines_a_client_that_never_saw_the_loss() {
        let now = Instant::now();
        let pending = Marker::Found {
            value: "r:1000".into(),
            pending: Duration::from_secs(42),
        };
        assert_eq!(
            judged(
                &mut Memory::default(),
                &seen("a", 99_999, true, pending),
                now
            ),
            Duration::from_secs(42)
        );
    }

    #[test]
    fn marker_values_carry_the_node_time_they_vouch_from() {
        let marker = Marker::from_reply("abc:5000".into(), 0, 2_000, None, MAX_TTL);
        assert_eq!(
            marker,
            Marker::Found {
                value: "abc:5000".into(),
                pending: Duration::from_secs(3)
            }
        );
        let past = Marker::from_reply("abc:1000".into(), 0, 2_000, None, MAX_TTL);
        assert!(matches!(past, Marker::Found { pending, .. } if pending.is_zero()));
        let by_hand = Marker::from_reply("set by the operator".into(), 0, 2_000, None, MAX_TTL);
        assert!(matches!(by_hand, Marker::Found { pending, .. } if pending.is_zero()));
        let written = Marker::from_reply("abc:9".into(), 1, 2_000, None, MAX_TTL);
        assert_eq!(
            written,
            Marker::Written {
                value: "abc:9".into(),
                replaced_other: false,
            }
        );
    }

    #[test]
    fn durable_nodes_with_their_marker_are_trusted_only_when_configured_to_be() {
        let now = Instant::now();
        let mut memory = Memory::default();
        let drawn = "9f0c1b2a3d4e5f60";
        judged(&mut memory, &seen("a", 99_999, true, found(drawn)), now);
        let restarted_durable = seen("b", 1, true, found(drawn));
        assert_eq!(
            judged(&mut memory.clone(), &restarted_durable, now),
            Duration::ZERO
        );
        let strict = TrustPolicy {
            trust_durable: false,
            ..policy()
        };
        assert_eq!(
            memory.judge(&strict, &restarted_durable, now).trusted_from - now,
            MAX_TTL
        );
    }

    /// `marker` invariant 5: every server an operator marked by hand carries the same word, so
    /// a durable server replaced behind the same address and marked the same way must not pass
    /// for the old one.
    #[test]
    fn a_hand_written_marker_never_forgives_a_restart() {
        let now = Instant::now();
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, true, found("manual")), now);
        let replaced = seen("b", 99_999, true, found("manual"));
        let verdict = memory.judge(&policy(), &replaced, now);
        assert_eq!(verdict.trusted_from - now, MAX_TTL);
        assert_eq!(verdict.loss, Some(QuarantineReason::Restarted));
    }

    #[test]
    fn without_quarantine_every_node_is_trusted() {
        let now = Instant::now();
        let off = TrustPolicy {
            enabled: false,
            ..policy()
        };
        let mut memory = Memory::default();
        let wiped = seen(
            "b",
            0,
            false,
            Marker::Written {
                value: "n:1".into(),
                replaced_other: false,
            },
        );
        assert_eq!(memory.judge(&off, &wiped, now).trusted_from, now);
    }

    #[test]
    fn evidence_outside_a_health_check_lasts_max_ttl_from_then() {
        let now = Instant::now();
        let mut memory = Memory::default();
        judged(&mut memory, &seen("a", 99_999, true, found("m")), now);
        assert_eq!(
            memory.lost_data(&policy(), now, QuarantineReason::LostMarker) - now,
            MAX_TTL
        );
        let later = now + Duration::from_secs(5);
        assert_eq!(
            judged(&mut memory, &seen("a", 99_999, true, found("m")), later),
            MAX_TTL - Duration::from_secs(5)
        );
    }

    #[test]
    fn info_server_is_parsed() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:7f3a9c\r\ntcp_port:6379\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n";
        let mut server_only = seen("7f3a9c", 42, false, found("m"));
        (server_only.evicted_keys, server_only.replid) = (None, None);
        (server_only.commands, server_only.may_evict) = (None, true);
        assert_eq!(
            Observation::from_info(info, false, found("m")),
            Some(server_only)
        );
        let all = format!(
            "{info}# Replication\r\nrole:master\r\nmaster_replid:r1\r\n# Stats\r\ntotal_commands_processed:100\r\nevicted_keys:0\r\n"
        );
        assert_eq!(
            Observation::from_info(&all, false, found("m")),
            Some(Observation {
                may_evict: true,
                ..seen("7f3a9c", 42, false, found("m"))
            })
        );
        assert_eq!(
            Observation::from_info("# Server\r\n", false, found("m")),
            None
        );
    }
}
