//! One file because a client is one record (connections, phase, fence) read by every decision here.
//!
//! A client: its connections with their health verdicts, and the rounds of one acquisition. The
//! decisions are the library's ([`redquorum::protocol`]): the quarantine's [`Memory`] and verdict,
//! the marker's owner, the [`Tally`], the validity [`deadline`], the fencing [`Proposals`] and
//! [`Advance::proposal`], a replicated node's succession (`succession::Lineage::judge`). What
//! is modelled here is only when a client takes each step.

use std::time::{Duration, Instant};

use redquorum::protocol::fencing::{Advance, Proposal, Proposals};
use redquorum::protocol::marker::{MarkerValue, extended, id_of};
use redquorum::protocol::quarantine::{
    Marker, Memory, Observation, QuarantineReason, TrustPolicy, marker_owner,
};
use redquorum::protocol::quorum::{Decision, Tally};
use redquorum::protocol::succession::{self, Candidate, Succession};
use redquorum::protocol::validity::deadline;

use crate::clock::{instant, ms_of};
use crate::node::{
    AcquireReply, GROUP, MarkerId, MarkerKey, Node, Process, address, previous_id, repl_id, run_id,
};
use crate::rules::Rules;

/// One connection of a client to a node, and what its health check found.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Conn {
    /// The server the last health check judged (`run_id`, `master_replid`), if any. The
    /// connection reaches the process (`run_id`): it survives a change of role.
    pub server: Option<(u8, u8)>,
    /// The node's memory (`quarantine::Memory`): it outlives connections, not a change of the
    /// server that serves a cluster node's slot (`shards` invariant 4).
    pub memory: Memory,
    /// From when the node's votes count.
    pub trusted_from: Option<Instant>,
    /// The marker the health check saw, read back with each vote (kept as the key, not its
    /// text, to spare the checker an allocation per connection per state).
    pub marker: Option<MarkerKey>,
    /// Whether the last verdict quarantined the node (had a reason).
    pub quarantined: bool,
    /// What the client saw of a replicated node's servers (`succession`); unused elsewhere.
    pub lineage: Lineage,
}

/// What a client saw of a replicated node (behind Sentinel): the facts the library's
/// `succession::Lineage` is made of, kept as a small value of the model's own, since the
/// library's holds maps of strings and is neither `Clone` nor `Hash`. Each judgement builds the
/// library's `Lineage` from these facts through its own methods ([`Lineage::rebuilt`]) and asks
/// its `judge`; the facts then follow what `judge` did (a new history followed, a run judged to
/// continue it). Replicas are never seen away (each is online at the primary and a candidate
/// at every reading: the sentinels' candidate list is not modelled), so the library's `online`
/// and its away times play no part.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Lineage {
    /// The address ([`Process::addr`]) of the server the connection's health check last judged:
    /// the connection's memory is that server's.
    pub at: Option<u8>,
    /// The `master_replid` of the primary the client follows.
    pub history: Option<u8>,
    /// The `run_id` judged `Continues` when it took over the history followed now.
    pub continued: Option<u8>,
    /// For each address, the `run_id` the sentinels last listed there as a replica.
    pub listed: [Option<u8>; 2],
    /// For each address, the latest client time (ms) at which the client saw it caught up with
    /// the primary it followed (`Lineage::caught_up`).
    pub caught_up: [Option<u16>; 2],
    /// Histories whose primary was quarantined, and until when (client ms): `Lineage::taint`
    /// (`succession` invariant 6). Two at most: the model's bounds make no more.
    pub tainted: [Option<(u8, u16)>; 2],
}

/// A replicated node's primary as its `INFO` reads (`Candidate::read`).
fn candidate(
    addr: &str,
    run: &str,
    uptime_s: i64,
    history: &str,
    previous: &str,
) -> Option<Candidate> {
    let server = format!("# Server\r\nrun_id:{run}\r\nuptime_in_seconds:{uptime_s}\r\n");
    let replication = format!(
        "# Replication\r\nrole:master\r\nmaster_replid:{history}\r\nmaster_replid2:{previous}\r\n"
    );
    Candidate::read(addr, &server, &replication)
}

impl Lineage {
    /// The library's `Lineage` holding these facts at `now`, built through its own methods: the
    /// history followed (a first primary judged `Ordinary`; or, when a run was judged to continue
    /// it, that judgement made again from a primary and replica of the model's own, at
    /// addresses no server has), then each address's listing and catch-up. `None` only if
    /// `Candidate::read` could not read the model's own `INFO` (never).
    pub fn rebuilt(&self, now: Instant, max_ttl: Duration) -> Option<succession::Lineage> {
        const LONG_UP_S: i64 = 3_600;
        let mut lineage = succession::Lineage::default();
        let zeros = previous_id(None);
        if let Some(history) = self.history {
            let followed = repl_id(history);
            match self.continued {
                None => {
                    let first = candidate("seed:0", "seed", LONG_UP_S, &followed, &zeros)?;
                    lineage.judge(&first, now, max_ttl);
                }
                Some(run) => {
                    let first = candidate("seed:0", "seed", LONG_UP_S, "seed", &zeros)?;
                    lineage.judge(&first, now, max_ttl);
                    lineage.listed("seed:1", &run_id(run), true, now);
                    lineage.caught_up("seed:1", "seed", now);
                    let promoted = candidate("seed:1", &run_id(run), LONG_UP_S, &followed, "seed")?;
                    let continues = lineage.judge(&promoted, now, max_ttl);
                    debug_assert_eq!(continues, Succession::Continues);
                }
            }
        }
        for (history, until) in self.tainted.iter().flatten() {
            lineage.taint(&repl_id(*history), instant(*until), now);
        }
        for addr in 0..2u8 {
            let at = usize::from(addr);
            if let Some(run) = self.listed[at] {
                lineage.listed(&address(addr), &run_id(run), true, now);
            }
            if let (Some(seen), Some(history)) = (self.caught_up[at], self.history) {
                lineage.caught_up(&address(addr), &repl_id(history), instant(seen));
            }
        }
        Some(lineage)
    }

    /// The library's `Lineage::judge` of `primary`, whose `INFO` reads `info` and
    /// `replication`, at client time `now`; the facts follow what it did. `None` when `INFO`
    /// lacks a field `Candidate::read` needs (never, with the model's `INFO`).
    pub fn judge(
        &mut self,
        primary: &Process,
        info: &str,
        replication: &str,
        now: u16,
        max_ttl: Duration,
    ) -> Option<Succession> {
        let candidate = Candidate::read(&address(primary.addr), info, replication)?;
        let verdict = self
            .rebuilt(instant(now), max_ttl)?
            .judge(&candidate, instant(now), max_ttl);
        // `judge` follows the candidate's history in every case but another history
        // (`Lost(Resynchronised)`), and records the run that continues a new one.
        if verdict != Succession::Lost(QuarantineReason::Resynchronised)
            && self.history != Some(primary.replid)
        {
            self.history = Some(primary.replid);
            self.continued = (verdict == Succession::Continues).then_some(primary.run);
        }
        // A promotion judged a loss marks its history for `max_ttl` (`succession` invariant 6).
        if verdict == Succession::Lost(QuarantineReason::Promoted) {
            let max_ttl_ms = u16::try_from(max_ttl.as_millis()).unwrap_or(u16::MAX);
            self.taint(primary.replid, now.saturating_add(max_ttl_ms), now);
        }
        Some(verdict)
    }

    /// The primary whose history is `history` is quarantined until client time `until`
    /// (`Lineage::taint`): kept, the latest for each history, dropping any that has ended.
    pub fn taint(&mut self, history: u8, until: u16, now: u16) {
        for slot in &mut self.tainted {
            if slot.is_some_and(|(_, end)| end <= now) {
                *slot = None;
            }
        }
        if let Some((_, end)) = self
            .tainted
            .iter_mut()
            .flatten()
            .find(|(h, _)| *h == history)
        {
            *end = (*end).max(until);
            return;
        }
        if let Some(free) = self.tainted.iter_mut().find(|slot| slot.is_none()) {
            *free = Some((history, until));
        } else if let Some(earliest) = self
            .tainted
            .iter_mut()
            .min_by_key(|slot| slot.map(|(_, end)| end))
        {
            // More than the bounds make: keep the later end (never shorter: invariant 6).
            if earliest.is_some_and(|(_, end)| end < until) {
                *earliest = Some((history, until));
            }
        }
    }

    /// The replica at `addr` was caught up with the primary whose history is `history` at client
    /// time `at` (`Lineage::caught_up`: heard only from the primary the client follows).
    pub fn caught_up(&mut self, addr: u8, history: u8, at: u16) {
        if self.history == Some(history) {
            let seen = &mut self.caught_up[usize::from(addr) % 2];
            *seen = (*seen).max(Some(at));
        }
    }
}

/// Where a client's acquisition stands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not holding, not trying.
    Idle,
    /// The acquisition round, attempt `value`, started at client clock `start`.
    Acquiring {
        /// The lock value.
        value: u8,
        /// The client's clock when the round started.
        start: u16,
        /// The library's vote count.
        tally: Tally,
        /// Grants counted as votes (for the N/2 switch).
        votes: u8,
        /// The library's proposals.
        proposals: Proposals,
        /// The nodes whose votes were counted (bit `n`: node `n`), kept only by a client whose
        /// token is issued on request ([`Client::on_request`]): what its fence round counts.
        voters: u8,
    },
    /// The fencing store round (`fencing` step 3).
    Storing {
        /// The lock value.
        value: u8,
        /// The client's clock when the acquisition started.
        start: u16,
        /// The token being stored.
        token: u64,
        /// The library's count of stores.
        tally: Tally,
        /// Stores counted (for the N/2 switch).
        votes: u8,
        /// The acquisition's place in the order of decisions ([`Fence::order`]).
        order: u8,
    },
    /// Extending a held lock (`engine::extend`: compare-and-`PEXPIRE` on every node, a quorum
    /// within the new validity); still valid until the old deadline meanwhile.
    Extending {
        /// The lock value.
        value: u8,
        /// The deadline before this extension.
        deadline: Instant,
        /// The fencing token, or what a token on request needs.
        fence: Fence,
        /// The client's clock when the extension round started.
        start: u16,
        /// The library's vote count.
        tally: Tally,
        /// Extensions counted (for the switches).
        votes: u8,
    },
    /// Holding the lock until `deadline` (client clock).
    Holding {
        /// The lock value.
        value: u8,
        /// The validity deadline.
        deadline: Instant,
        /// The fencing token, or what a token on request needs.
        fence: Fence,
    },
    /// A holder's fence round (`fencing` invariant 8: `fence_held.lua` on every node, a quorum
    /// of the voters proposing); still valid until its deadline meanwhile.
    Fencing {
        /// The lock value.
        value: u8,
        /// The validity deadline.
        deadline: Instant,
        /// The client's clock when the fence round started (for the node timeout).
        start: u16,
        /// The voters and the acquisition's order.
        fence: Fence,
        /// The library's count of proposals.
        tally: Tally,
        /// Proposals counted (for the N/2 switch).
        votes: u8,
        /// The library's proposals (the counted ones only).
        proposals: Proposals,
    },
    /// The store round after a fence round whose counted proposals disagree (`fence.lua`,
    /// counted on the voters).
    FenceStoring {
        /// The lock value.
        value: u8,
        /// The validity deadline.
        deadline: Instant,
        /// The client's clock when the store round started (for the node timeout).
        start: u16,
        /// The voters and the acquisition's order.
        fence: Fence,
        /// The token being stored.
        token: u64,
        /// The library's count of stores.
        tally: Tally,
        /// Stores counted (for the N/2 switch).
        votes: u8,
    },
}

impl Phase {
    /// The count of the round this phase is, if it is a round of attempt `value_in`: its tally,
    /// the votes counted, and the proposals of an acquisition or a fence round.
    pub fn round_mut(
        &mut self,
        value_in: u8,
    ) -> Option<(&mut Tally, &mut u8, Option<&mut Proposals>)> {
        match self {
            Phase::Acquiring {
                value,
                tally,
                votes,
                proposals,
                ..
            }
            | Phase::Fencing {
                value,
                tally,
                votes,
                proposals,
                ..
            } if *value == value_in => Some((tally, votes, Some(proposals))),
            Phase::Storing {
                value,
                tally,
                votes,
                ..
            }
            | Phase::Extending {
                value,
                tally,
                votes,
                ..
            }
            | Phase::FenceStoring {
                value,
                tally,
                votes,
                ..
            } if *value == value_in => Some((tally, votes, None)),
            _ => None,
        }
    }
}

/// A hold's fencing token, or, for a token on request not asked for yet, what its fence round
/// needs: the acquisition's voters and its place in the order of decisions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The token issued, if any.
    pub token: Option<u64>,
    /// The nodes whose `SET` the acquisition counted (bit `n`: node `n`); 0 once the token was
    /// asked for (a holder asks at most once) or when it came with the acquisition.
    pub voters: u8,
    /// How many acquisitions had been decided when this one was (its own included): the order
    /// the property on tokens compares ([`crate::properties`]); 0 when no longer needed.
    pub order: u8,
}

impl Fence {
    /// A token issued with the acquisition (the eager path), or by a fence round.
    pub fn issued(token: u64) -> Self {
        Fence {
            token: Some(token),
            voters: 0,
            order: 0,
        }
    }

    /// Whether the holder may still ask for its token.
    pub fn askable(&self) -> bool {
        self.token.is_none() && self.voters != 0
    }
}

/// A client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// How many ms this client's clock is behind real time.
    pub lag: u16,
    /// Acquisitions it may still start.
    pub attempts_left: u8,
    /// Its acquisition.
    pub phase: Phase,
    /// One connection per node.
    pub conns: Vec<Conn>,
    /// Its last hold: the value, deadline, and whether a release of it reached a node in time.
    pub last_hold: Option<(u8, Instant, bool)>,
    /// Extensions it may still start.
    pub extensions_left: u8,
    /// Its manager's first-sight protocol (`vouch::FirstSight`).
    pub sight: Sight,
    /// It first sees the nodes during the run, once the faults are spent.
    pub late: bool,
    /// How many hand-outs there had been when its hold began (its own included): an extension
    /// that wins after another's is no continuation of the hold.
    pub hold_since: u8,
    /// Its acquisitions are plain `SET NX PX` and its token is issued on request (`fencing`
    /// invariant 8), instead of with the acquisition (`Builder::fence_on_acquire`).
    pub on_request: bool,
}

/// The settings every client shares.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Settings {
    /// The lock's TTL (ms), the one its deadline is computed from.
    pub ttl_ms: u16,
    /// The lock-delay (ms); 0 for none.
    pub lock_delay_ms: u16,
    /// The node timeout: the longest an acquisition's request may lag and still be a vote.
    pub node_timeout: Duration,
    /// The bound a holder's release sends (`release_timely.lua`): a key with no more than this
    /// left (ms) is left to expire.
    pub release_bound_ms: u16,
    /// The drift factor.
    pub drift_factor: f64,
    /// The quarantine policy.
    pub policy: TrustPolicy,
    /// The fencing advance (grain, window).
    pub advance: Advance,
    /// Cluster nodes: markers name their owner.
    pub cluster: bool,
    /// Replicated nodes (a primary and its replica behind Sentinel): plain markers, votes that
    /// wait for the replica, promotions judged by the client's lineage.
    pub sentinel: bool,
    /// Whether clients take part in first sight (`Builder::trust_first_sight`).
    pub first_sight: bool,
    /// How long a first-sight marker must still be pending to count as pending
    /// (`first_sight` invariant 1): the drift of `max_ttl` (the library adds 100 ms for a
    /// round's own duration, which the model's rounds do not take).
    pub sight_margin_ms: u64,
    /// What a holder carries in its value (`engine`'s `Rules::carried`): the late-release bound
    /// (the delay, the node timeout and the drift of `max_ttl`) for senders that do not know its
    /// deadline, and the delay.
    pub carried: redquorum::protocol::value::Carried,
}

impl Settings {
    /// What a release by `value` sends from a process configured without the lock-delay: the
    /// library's `release_bound_by_value` of its own bound (none) and the value's; with the rule
    /// removed, its own alone.
    pub fn by_value_bound_ms(&self, value: u8, rules: &Rules) -> u16 {
        let own = redquorum::protocol::validity::late_release_bound(
            0,
            false,
            self.node_timeout,
            self.policy.max_ttl,
            self.drift_factor,
        );
        let bound = if rules.release_bound_from_value {
            let text = redquorum::protocol::value::new([value; 20], self.carried);
            redquorum::protocol::value::release_bound_by_value(own, &text)
        } else {
            own
        };
        u16::try_from(bound).unwrap_or(u16::MAX)
    }
}

/// What a group's first look found at one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Look {
    /// Not looked at yet.
    Unread,
    /// Clean, with a first-sight marker still pending: this id, on the run the look read.
    Unmarked(MarkerId, u8),
    /// It cannot join the group's trust.
    Excluded,
}

/// Where a manager's first-sight protocol stands: look at every node (in any order: the library
/// looks at all at once), decide, extend every marker, then vouch for each.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Sight {
    /// Not run (first sight off), or over.
    Idle,
    /// Looking; what each node showed.
    Looking(Vec<Look>),
    /// Extending the markers of the looks; which are done.
    Extending(Vec<Look>, Vec<bool>),
    /// Vouching for them; which are done.
    Vouching(Vec<Look>, Vec<bool>),
}

/// How many acquisitions a client may start at most: its values are `client × VALUES + k`.
pub const VALUES: u8 = 16;

impl Client {
    /// The value of the acquisition client `index` starts now, once `attempts_left` was counted
    /// down: values are never reused (`acquire` invariant 3), and each names its client, so
    /// that renaming clients renames their values ([`crate::symmetry`]).
    pub fn next_value(&self, index: usize) -> u8 {
        let index = u8::try_from(index).unwrap_or(u8::MAX);
        index.saturating_mul(VALUES) + (VALUES - 1 - self.attempts_left)
    }

    /// The client's clock (ms) at real time `t`.
    pub fn clock(&self, t: u16) -> u16 {
        t.saturating_sub(self.lag)
    }

    /// Whether its lock is valid at client clock `now`.
    pub fn valid(&self, now: u16) -> bool {
        matches!(
            self.phase,
            Phase::Holding { deadline, .. }
                | Phase::Extending { deadline, .. }
                | Phase::Fencing { deadline, .. }
                | Phase::FenceStoring { deadline, .. }
                if instant(now) < deadline
        )
    }
}

/// The round's deadline for a start at client clock `start` (`validity` invariant 3), or with
/// the drift term removed, `start + ttl`.
pub fn round_deadline(settings: &Settings, rules: &Rules, start: u16) -> Option<Instant> {
    let ttl = Duration::from_millis(u64::from(settings.ttl_ms));
    if rules.drift_term {
        deadline(instant(start), ttl, settings.drift_factor)
    } else {
        Some(instant(start) + ttl)
    }
}

/// A health check of `node` by a client whose clock reads `now` (`health::check`): `INFO`,
/// the marker script, the verdict of the library's [`Memory::judge`].
pub fn health_check(
    conn: &mut Conn,
    node: &mut Node,
    node_now: u16,
    now: u16,
    settings: &Settings,
    rules: &Rules,
    fresh_marker: u8,
) {
    let server = node.server();
    if settings.cluster && conn.server.is_some_and(|s| s.0 != server.0) {
        // Another master serves the slot: a server of its own, judged like a new node. The
        // same process back at the head of the slot (a failback) is the same server, with the
        // same memory, as in the library, which knows a master by its address.
        conn.memory = Memory::default();
    }
    if settings.sentinel {
        // A replicated node's servers are told apart by their address (`sentinels`: a server,
        // and its memory, per address): another address serves, a server of its own. (The
        // library keeps each address's memory across a failback, where the model forgets it:
        // it trusts no less than the library, so this can hide no hole.)
        if conn.lineage.at.is_some_and(|at| at != node.master.addr) {
            conn.memory = Memory::default();
        }
        conn.lineage.at = Some(node.master.addr);
    }
    conn.server = Some(server);
    let policy = TrustPolicy {
        enabled: rules.quarantine,
        ..settings.policy
    };
    if !policy.enabled {
        // Quarantine invariant 5: no marker is read or written.
        conn.trusted_from = Some(instant(now));
        conn.marker = None;
        return;
    }
    let info = node.info(node_now);
    let succession = if settings.sentinel {
        let Some(succession) = succeed(conn, node, &info, now, &policy, rules) else {
            conn.trusted_from = None; // `INFO` lacks what a primary is judged by: an error
            return;
        };
        succession
    } else {
        Succession::Ordinary
    };
    let owner = settings
        .cluster
        .then(|| marker_owner(&info, &node.info_replication(), rules.marker_names_replid));
    let owner_key = owner.as_ref().map(|_| {
        (
            node.master.run,
            rules.marker_names_replid.then_some(node.master.replid),
        )
    });
    let max_ttl_ms = u64::try_from(settings.policy.max_ttl.as_millis()).unwrap_or(u64::MAX);
    // A marker written on first sight says so, outside clusters (`health::check`).
    let first_seen = conn.memory.is_first_sight() && !settings.cluster;
    let (mut marker, mut written) = node.marker_script(
        node_now,
        owner_key,
        fresh_marker,
        max_ttl_ms,
        first_seen,
        None,
    );
    if written != 0 {
        // An id is drawn only where one is written (ids never repeat: `fresh`), so nodes in the
        // same situation stay alike for the symmetry reduction.
        node.next.marker = fresh_marker.wrapping_add(1);
    }
    if written == 0
        && rules.undrawn_marker_replaced
        && !MarkerValue::parse(&marker.value()).tells_servers_apart()
    {
        // `marker` invariant 5 (`health::read_marker`): a word written by hand is replaced as if
        // missing.
        (marker, written) = node.marker_script(
            node_now,
            owner_key,
            fresh_marker,
            max_ttl_ms,
            first_seen,
            Some(marker),
        );
        if written != 0 {
            node.next.marker = fresh_marker.wrapping_add(1);
        }
    }
    let group = settings.first_sight.then_some(GROUP);
    let found = Marker::from_reply(
        marker.value(),
        written,
        crate::clock::node_unix_ms(node_now),
        group,
        settings.policy.max_ttl,
    );
    // A durable configuration, never promoted (`health::check`): the model's nodes report it
    // when the bounds say so.
    let durable =
        settings.policy.trust_durable && !settings.cluster && node.master.previous.is_none();
    let Some(mut seen) = Observation::from_info(&info, durable, found) else {
        conn.trusted_from = None;
        return;
    };
    seen.succeeded = succession == Succession::Continues;
    let verdict = conn.memory.judge(&policy, &seen, instant(now));
    // `server::set_health`: no verdict lowers what the memory's losses and hold-offs set.
    let floor = conn.memory.floor();
    conn.trusted_from = Some(floor.map_or(verdict.trusted_from, |f| f.max(verdict.trusted_from)));
    // `health::check_health`: a replicated node's primary found quarantined marks its history
    // until then (`succession` invariant 6).
    if settings.sentinel
        && verdict.trusted_from > instant(now)
        && let Some(until) = ms_of(verdict.trusted_from)
    {
        conn.lineage.taint(node.master.replid, until, now);
    }
    conn.quarantined = verdict.reason.is_some();
    conn.marker = Some(marker);
}

/// `health::succeed` for a replicated node's primary, after the sentinels' listing of its
/// replica that precedes the health check (`sentinels::Inner::read`): the library's
/// `Lineage::judge` (with `promotion_judged_by_lineage`; off, a promoted server continues on
/// the sentinels' word), then what the primary's `INFO replication` says of its replica
/// (`Replicated::observe`: caught up as of this reading when it holds every write the primary
/// ran), then a loss recorded in the memory before the ordinary rules judge the rest. `None`
/// when `INFO` cannot be read as a primary's.
fn succeed(
    conn: &mut Conn,
    node: &Node,
    info: &str,
    now: u16,
    policy: &TrustPolicy,
    rules: &Rules,
) -> Option<Succession> {
    let lineage = &mut conn.lineage;
    if let Some(replica) = node.replica {
        // A candidate (replicas are never flagged down here), with its `run_id`.
        lineage.listed[usize::from(replica.addr) % 2] = Some(replica.run);
    }
    let master = node.master;
    let verdict = if rules.promotion_judged_by_lineage {
        let replication = node.info_replication();
        lineage.judge(&master, info, &replication, now, policy.max_ttl)?
    } else if master.previous.is_some() {
        // The rule removed: the primary the sentinels name, promoted, is trusted at once.
        Succession::Continues
    } else {
        Succession::Ordinary
    };
    if let Some(replica) = node.replica
        && replica.data == master.data
    {
        lineage.caught_up(replica.addr, master.replid, now);
    }
    match verdict {
        Succession::Lost(reason) => {
            conn.memory.lost_data(policy, instant(now), reason);
        }
        Succession::Inherits(until) => {
            conn.memory.lost_until(until, QuarantineReason::Promoted);
        }
        Succession::Ordinary | Succession::Continues => {}
    }
    Some(verdict)
}

/// Whether a reply that reads nothing back counts as a vote (`commands::perform` checks only
/// acquisitions: a fence round, a store round and an extension need our key, which a node that
/// lost its data cannot show): the same connection, and the node out of quarantine
/// (`engine` invariant 3).
pub fn unchecked_vote(conn: &Conn, server: (u8, u8), granted: bool, now: u16) -> bool {
    conn.server.is_some_and(|s| s.0 == server.0)
        && granted
        && conn.trusted_from.is_some_and(|from| instant(now) >= from)
}

/// Whether a reply from `node`'s current server counts as a vote, after the marker read back
/// (`server::check_marker`): a marker whose id changed is evidence of a loss, recorded in the
/// memory. Returns whether the grant is a vote.
pub fn vote(
    conn: &mut Conn,
    server: (u8, u8),
    read_back: Option<&MarkerKey>,
    granted: bool,
    now: u16,
    settings: &Settings,
    rules: &Rules,
) -> bool {
    let Some(checked) = conn.server.filter(|s| s.0 == server.0) else {
        return false; // the connection broke: an error, not a vote
    };
    let policy = TrustPolicy {
        enabled: rules.quarantine,
        ..settings.policy
    };
    // `server::check_history`: a cluster master (or a replicated node's primary) whose
    // replication history changed under the connection (a failover and a failback: the
    // connection survives both) may lack the locks its votes stood for.
    if ((settings.cluster && rules.marker_names_replid) || settings.sentinel)
        && rules.quarantine
        && rules.vote_reads_history
        && checked.1 != server.1
    {
        let until = conn
            .memory
            .lost_data(&policy, instant(now), QuarantineReason::Resynchronised);
        conn.trusted_from = Some(until);
        conn.server = None; // checked again, which quarantines it as a promoted replica
        return false;
    }
    if let Some(expected) = conn.marker.as_ref().map(MarkerKey::value) {
        let read = read_back.map(MarkerKey::value);
        let same = read
            .as_deref()
            .is_some_and(|r| id_of(r) == id_of(&expected));
        if !same {
            let until = conn
                .memory
                .lost_data(&policy, instant(now), QuarantineReason::LostMarker);
            conn.trusted_from = Some(until);
            conn.server = None; // checked again, which writes a new marker
            return false;
        }
        // The same first-sight marker, extended by a group's first look since the health
        // check (`server` invariant 7, `first_sight` invariant 1): no vote, held off until then.
        if let Some(later) = read.as_deref().and_then(|r| extended(&expected, r)) {
            let until = instant(now) + later;
            conn.memory.held_off(until);
            conn.trusted_from = conn.trusted_from.max(Some(until));
            conn.server = None;
            return false;
        }
    }
    granted && conn.trusted_from.is_some_and(|from| instant(now) >= from)
}

/// A granting node's proposal: the library's [`Advance::proposal`] on the native path (with the
/// trust window), the old counter floor with the rule off; a script's advance is stored.
pub fn proposal(reply: &AcquireReply, advance: &Advance, rules: &Rules) -> Proposal {
    if reply.scripted {
        return Proposal {
            value: reply.counter.unwrap_or(0),
            stored: true,
        };
    }
    if rules.trust_window {
        return advance.proposal(reply.counter, reply.clock_us);
    }
    // The rule before the trust window: a counter at or above 2^50 µs was started from a clock,
    // and was trusted however far behind the node's clock.
    const COUNTER_FLOOR: u64 = 1 << 50;
    let rounded = reply.clock_us - reply.clock_us % advance.grain_us.max(1);
    match reply.counter {
        Some(value) if value >= COUNTER_FLOOR => Proposal {
            value,
            stored: true,
        },
        counter => Proposal {
            value: counter.unwrap_or(0).max(rounded),
            stored: false,
        },
    }
}

/// Where a round stands: the library's [`Tally`], or `N/2` grants with the rule off.
pub fn decision(tally: &Tally, votes: u8, nodes: usize, rules: &Rules) -> Decision {
    if rules.strict_majority {
        return tally.decision();
    }
    if usize::from(votes) >= (nodes / 2).max(1) {
        Decision::Won
    } else {
        tally.decision().min_open()
    }
}

/// A lost verdict from the tally stays lost; anything else is still open for the N/2 count.
trait MinOpen {
    fn min_open(self) -> Decision;
}

impl MinOpen for Decision {
    fn min_open(self) -> Decision {
        match self {
            Decision::Won => Decision::Open,
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Markers;

    const MAX_TTL: Duration = Duration::from_millis(4);

    /// One library `Lineage` kept across events, and the model's facts, fed the same events.
    struct Both {
        kept: succession::Lineage,
        facts: Lineage,
    }

    impl Both {
        fn judge(&mut self, node: &Node, now: u16) -> Succession {
            let (info, replication) = (node.info(now), node.info_replication());
            let primary = node.master;
            let candidate = Candidate::read(&address(primary.addr), &info, &replication)
                .expect("the model's INFO reads");
            let expected = self.kept.judge(&candidate, instant(now), MAX_TTL);
            let got = self
                .facts
                .judge(&primary, &info, &replication, now, MAX_TTL);
            assert_eq!(got, Some(expected), "{primary:?} at {now}");
            expected
        }

        fn listed(&mut self, addr: u8, run: u8, now: u16) {
            self.kept
                .listed(&address(addr), &run_id(run), true, instant(now));
            self.facts.listed[usize::from(addr)] = Some(run);
        }

        fn caught_up(&mut self, addr: u8, history: u8, at: u16) {
            self.kept
                .caught_up(&address(addr), &repl_id(history), instant(at));
            self.facts.caught_up(addr, history, at);
        }
    }

    /// The model's facts, rebuilt into the library's `Lineage` at each judgement, judge as one
    /// `Lineage` kept across the same events does.
    #[test]
    fn the_facts_rebuild_the_librarys_lineage() {
        let mut both = Both {
            kept: succession::Lineage::default(),
            facts: Lineage::default(),
        };
        let mut node = Node::sentinel(Markers::Drawn);
        let replica = node.replica.expect("a replica");
        // Server `addr`, run `run`, serving after a promotion: a new history `replid` that
        // continues the one before it.
        let serving = |addr: u8, run: u8, replid: u8| Process {
            addr,
            run,
            replid,
            previous: Some(replid - 1),
            ..replica
        };
        both.listed(1, 1, 0);
        assert_eq!(both.judge(&node, 0), Succession::Ordinary); // the first primary
        both.caught_up(1, 0, 0);
        // The replica, caught up, promoted: it continues, and keeps the verdict on a recheck.
        node.master = serving(replica.addr, replica.run, 1);
        assert_eq!(both.judge(&node, 1), Succession::Continues);
        assert_eq!(both.judge(&node, 2), Succession::Continues);
        // A restart of it is a new run: the ordinary rules.
        node.master.run = 5;
        node.master.started = 2;
        assert_eq!(both.judge(&node, 2), Succession::Ordinary);
        // The old primary, listed and caught up with the new history, promoted back.
        both.listed(0, 0, 2);
        both.caught_up(0, 1, 2);
        node.master = serving(0, 0, 2);
        assert_eq!(both.judge(&node, 3), Succession::Continues);
        // A history the client never followed: a loss, and not followed.
        node.master.replid = 9;
        node.master.previous = Some(7);
        let resynchronised = Succession::Lost(QuarantineReason::Resynchronised);
        assert_eq!(both.judge(&node, 3), resynchronised);
        // A replica listed with one run_id, promoted with another (it restarted since).
        both.listed(1, 1, 3);
        node.master = Process {
            started: 3,
            ..serving(1, 6, 3)
        };
        let promoted = Succession::Lost(QuarantineReason::Promoted);
        assert_eq!(both.judge(&node, 4), promoted);
        // Its history is followed all the same; the next promotion continues from there.
        both.listed(0, 0, 4);
        both.caught_up(0, 3, 4);
        node.master = serving(0, 0, 4);
        // Within the quarantine of the promotion judged a loss: its successor inherits it
        // (succession invariant 6).
        let inherits = both.judge(&node, 5);
        assert!(matches!(inherits, Succession::Inherits(_)), "{inherits:?}");
    }
}
