//! One file because `Lineage::judge` applies all seven invariants at once; its tests check them.
//!
//! Who may succeed a replicated primary and vote at once: the rule that spares a failover behind
//! Redis Sentinel the minute without locks of a restart quarantine, without trusting a promoted
//! replica that may lack a lock.
//!
//! A node that is a primary with replicas ([`sentinels`](crate::nodes::sentinels)) counts a vote
//! only once every replica the sentinels could promote acknowledged it, each by name (invariant 1). A
//! replica the client saw caught up with the primary after it last started, and never saw away
//! since, holds every vote counted before then (replication is in order), and every later one
//! waited for it too: promoted, it may vote at once. This module judges a new
//! primary against what the client saw of the old one: its replication history
//! (`master_replid`), which replicas acknowledged its votes, and when each was away. It is
//! pure: the node layer reads, this judges.
//!
//! # Invariants
//! 1. **Every counted vote reached every replica the sentinels could promote now, each shown
//!    by name.** A vote counts only when every replica (by address) that the primary itself
//!    listed online (`INFO replication`) at its last reading, or that the sentinels last
//!    listed as a candidate (`sentinels` invariant 3), or that the vote's own reading lists
//!    online, acknowledged an offset that covers the vote's write, read from the primary after
//!    the vote's `WAIT` ([`coverage`](crate::protocol::coverage) invariant 1), at an address
//!    where the replica answers for itself (`coverage` invariant 2). `WAIT`'s count says how
//!    many acknowledged, not which: counted by number, a replica that may never be promoted
//!    (`replica-priority 0`) stood in for the candidate that was (found by review with real
//!    processes: a lock granted twice). Replicas that drop out of the primary's list do not
//!    leave the vote's list until the sentinels stop listing them as candidates: a primary cut
//!    off from its replicas (a partition, or deposed by a failover it has not heard of) sees
//!    none online, and its votes still wait for them, in vain.
//! 2. **Caught up is not the same as seen.** Every vote and health check reads the primary's
//!    `INFO replication`: its own `master_repl_offset`, and the offset each replica last
//!    acknowledged. The client keeps the primary's offsets of the last few seconds
//!    ([`Offsets`]); a replica whose acknowledged offset is at least the primary's offset at an
//!    earlier reading had every write the primary had executed by then, and is recorded as
//!    caught up as of that reading (replicas acknowledge every second, and at every `WAIT`), or
//!    as of its acknowledgement if that came earlier: at the latest a second more than its
//!    `lag` before the reading that shows it. An acknowledgement is the process's that sent it:
//!    a replica that died without closing its connection stays listed with its last one until
//!    the primary's `repl-timeout`, and a quiet primary's offset does not move past it, so
//!    crediting the reading would credit a run restarted at that address since, from an old
//!    snapshot (found by review, on a node behind a fixed address).
//!    It is recorded as away whenever a vote could count without it: when neither the primary's
//!    last reading lists it online nor the sentinels' last listing names it a candidate. (Either
//!    one, and every vote waits for it: a primary deposed without knowing it lists none of the
//!    replicas that left it, and that says nothing of them. Nor is a deposed primary
//!    heard at all once the client follows another history.) A replica that restarted since it was
//!    last caught up (its uptime says so) may have come back from its disk without what it
//!    missed: it has not caught up since.
//! 3. **A promotion continues a history, or it is judged as a loss.** A new primary votes at
//!    once only if its `master_replid2` is the history the client last followed (it was a
//!    replica of that primary and was promoted from it), its `run_id` is the one the sentinels
//!    listed at its address, and it was caught up after it last started and not seen away
//!    since: its uptime is then no evidence of a loss (its data came by replication, up to a
//!    reading after its start, and every vote since waited for it). A replica seen away within
//!    `max_ttl` (not caught up since) may lack a lock still valid: it is quarantined for `max_ttl`
//!    ([`QuarantineReason::Promoted`]). Any other history (a chain of failovers the client
//!    missed, a server that was a replica of something else, a resync from a replica that
//!    missed a lock) is quarantined for `max_ttl` too. Anything else (the first primary a client
//!    sees, a replica never caught up nor seen away) is judged by the ordinary rules
//!    ([`quarantine`](crate::protocol::quarantine)), its uptime included: a replica restarted
//!    and promoted before it resynchronised is young, and is held to it (found by review: a
//!    client that started after such a promotion took a lock still held).
//!    The verdict is the promotion's: later checks of the same run keep it (its uptime stays no
//!    evidence); a restart of it is a new run, judged by the ordinary rules.
//! 4. **The history only moves forward.** The client follows a new history only from a primary
//!    that continues the one it followed (or from its first): an old primary cut off from its
//!    replicas, still a primary in its own eyes, is judged against the new history, quarantined,
//!    and cannot take the client back to its own.
//!
//! 5. **A replica can show that it caught up, to a client that never saw it.** While the
//!    sentinels list a replica's run (its `run_id`), a client that uses the node writes on the
//!    primary a *receipt* for that run: a key naming it ([`receipt_key`]) that holds the
//!    primary's history (`master_replid`), for `max_ttl`, by a script that writes only on a
//!    primary (`scripts/receipts.lua`). A run id exists only from the run's start, so a server
//!    that holds the receipt for its own run received, after it last started, the primary's
//!    writes up to the receipt's (replication is in order, and a full resync copies a data set
//!    that had them): it caught up after its start, as invariant 2's readings would have shown
//!    a client that watched. A new primary that a client would judge by the ordinary rules (it
//!    meets it first, or never saw it caught up nor away) and that holds its own receipt, naming
//!    the history it was promoted from (`master_replid2`), continues that history as in
//!    invariant 3: its uptime is no evidence of a loss. Found by the issue's own check: a client
//!    started after a failover of servers started a few seconds before waited 26 s past the
//!    promotion, until the replica's uptime reached `max_ttl` (30 s there). What a receipt cannot tell is a replica away since it was written: the residual
//!    below, as for a replica with a long uptime. A receipt that is missing (not yet written, a
//!    run the sentinels have not listed yet, expired, refused by an ACL) leaves the ordinary
//!    rules; it expires `max_ttl` after it was written, after the run's uptime passes `max_ttl`
//!    anyway (and early, never late, on a replica whose clock runs ahead: Redis replicates the
//!    expiry as an absolute time). A replica restarted since is a new run, which no receipt names
//!    until one is written for it.
//!
//! 6. **A copy of a primary that may lack a vote may lack it too.** Whenever a health check
//!    finds a replicated node's primary quarantined (restarted from a snapshot without the
//!    locks counted since, promoted while a replica was away, seen first without its marker,
//!    ...), its history is marked until the quarantine ends, and a server promoted from that
//!    history before then is out until then too ([`Succession::Inherits`]): a replica that
//!    resynchronised from it, or caught up with it, has its data, and no more. Nor is a receipt
//!    written on a quarantined primary (`sentinels`' `receipts`): it would vouch for a copy of
//!    data that may lack a vote. Found by review: a primary without an append-only file,
//!    restarted from its last snapshot (Redis 7 gives it a new `master_replid`, the old one as
//!    `master_replid2`, as if promoted), lost two locks; its replica resynchronised from it; a
//!    client that used the node followed its new history and wrote the replica's receipt there;
//!    promoted, the replica granted both locks, to that client and to a new one, while they were
//!    held.
//!
//! 7. **Behind a fixed address, a replica is known by its run.** A node whose servers share
//!    one address (a managed endpoint that moves on failover: `endpoint`) reaches every
//!    primary at that address, which tells nothing of which replica it was. There the client
//!    reads each replica's `run_id` from the replica itself, at the address its primary lists
//!    it at, and keeps it only if that server says it replicates the history the client follows
//!    ([`Lineage::named`]); a new primary is then found among the replicas by its `run_id`,
//!    which a run never shares, and judged as in invariant 3. A replica whose run the client
//!    could not read (the address unreachable, a restart since the last reading) is not found:
//!    the ordinary rules judge it. A run found this way is judged on the record of the address
//!    it was read at: the very process, so its own record. And since every primary there has
//!    the same address, a run that changed under it is no evidence of a restart when the new
//!    run continues the history (`quarantine`'s restart loss is waived for it).
//!
//! What it cannot see: a replica cut off without a restart (a partition) for longer than the
//! sentinels let a candidate be silent (`down-after-milliseconds`, or five ping periods:
//! `sentinels` invariant 3), while another client counted votes without it, then
//! back and promoted before it caught up, with every other replica unable to be promoted: a
//! client that did not read the primary while it was away, or that starts after the failover,
//! trusts it. Its uptime is long (or it shows a receipt written before it went away:
//! invariant 5), so nothing on the server tells. That is in `docs/sentinel.md`.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::protocol::quarantine::{MARKER_KEY, QuarantineReason, UPTIME_SLACK, after, info_field};

/// The key of the receipt for the replica run `run_id` (invariant 5): under the marker's
/// prefix, which no resource may take.
pub(crate) fn receipt_key(run_id: &str) -> String {
    format!("{MARKER_KEY}:receipt:{run_id}")
}

/// What a client saw of one replicated service: the history it follows and its replicas.
#[derive(Debug, Default)]
pub struct Lineage {
    /// The `master_replid` of the primary the client last followed (invariant 4).
    history: Option<String>,
    /// The replicas seen, by address (`ip:port`).
    replicas: HashMap<String, Replica>,
    /// The `run_id` of the primary judged [`Succession::Continues`] when it took over the
    /// history followed now: every later check of that run keeps the verdict.
    continued: Option<String>,
    /// Until when each history's primary was quarantined, as its health checks found
    /// (invariant 6): a server that continues it inherits the quarantine.
    taints: HashMap<String, Instant>,
}

#[derive(Debug, Default)]
struct Replica {
    /// The `run_id` the sentinels listed at this address, if they did.
    run_id: Option<String>,
    /// Whether the sentinels' last listing named it a candidate for promotion.
    candidate: bool,
    /// Whether the followed primary's last reading listed it online.
    online: bool,
    /// When the client last saw it away (invariant 2).
    away_at: Option<Instant>,
    /// When the client last saw it caught up with the primary (invariant 2).
    acknowledged_at: Option<Instant>,
}

impl Replica {
    /// Records it away at `now` if a vote could count without it now: neither online at the
    /// primary nor a candidate (invariants 1, 2).
    fn check_away(&mut self, now: Instant) {
        if !self.online && !self.candidate {
            self.away_at = Some(now);
        }
    }
}

/// What [`Lineage::judge`] made of a primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Succession {
    /// Nothing to judge it by here: the ordinary rules judge it, its uptime included.
    Ordinary,
    /// Promoted from the primary the client followed, after acknowledging since it last started
    /// (invariant 3): its uptime says nothing of a loss.
    Continues,
    /// May lack a counted vote: out for `max_ttl`, for this reason.
    Lost(QuarantineReason),
    /// Continues the history of a primary quarantined until then (invariant 6): its data is a
    /// copy of one that may lack a counted vote, so it is out until then too.
    Inherits(Instant),
}

/// A primary as its `INFO server` and `INFO replication` describe it, at the address it was
/// reached at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub(crate) address: String,
    pub(crate) run_id: String,
    /// `uptime_in_seconds`.
    pub(crate) uptime: Duration,
    /// `master_replid`: its history.
    pub(crate) history: String,
    /// `master_replid2`: the history it continued when it was promoted (`000…` when never).
    pub(crate) previous: String,
}

impl Candidate {
    /// Whether it was promoted from a replica in its current run (`master_replid2` set).
    pub(crate) fn was_promoted(&self) -> bool {
        self.previous.bytes().any(|b| b != b'0')
    }

    /// Reads a candidate at `address` from its `INFO server` and `INFO replication` sections.
    pub fn read(address: &str, server: &str, replication: &str) -> Option<Self> {
        Some(Self {
            address: address.to_owned(),
            run_id: info_field(server, "run_id")?.to_owned(),
            uptime: Duration::from_secs(info_field(server, "uptime_in_seconds")?.parse().ok()?),
            history: info_field(replication, "master_replid")?.to_owned(),
            previous: info_field(replication, "master_replid2")
                .unwrap_or_default()
                .to_owned(),
        })
    }
}

/// What a primary's `INFO replication` says of its replicas: those online
/// (`slaveN:ip=…,port=…,state=online`, as `ip:port`) with the offset each last acknowledged and
/// how many whole seconds ago (`lag`), and the primary's own `master_repl_offset` (invariant 2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replicas {
    pub online: Vec<String>,
    pub acknowledged: Vec<(String, u64, Duration)>,
    pub primary_offset: Option<u64>,
}

/// How long the primary's offsets are kept (invariant 2): longer than the second between a
/// replica's acknowledgements, with room for a loaded machine.
const OFFSETS_KEPT: Duration = Duration::from_secs(10);

/// The shortest time between two offsets kept: a busy primary is read by every vote.
const OFFSETS_SPACING: Duration = Duration::from_millis(50);

/// The primary's `master_repl_offset` at its readings of the last [`OFFSETS_KEPT`] (invariant 2).
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    readings: VecDeque<(Instant, u64)>,
}

impl Offsets {
    /// The primary's offset was `offset` at a reading at `now`.
    pub(crate) fn record(&mut self, now: Instant, offset: u64) {
        while self
            .readings
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > OFFSETS_KEPT)
        {
            self.readings.pop_front();
        }
        let spaced = self
            .readings
            .back()
            .is_none_or(|(at, _)| now.saturating_duration_since(*at) >= OFFSETS_SPACING);
        if spaced {
            self.readings.push_back((now, offset));
        }
    }

    /// The latest reading by which a replica that acknowledged `acknowledged` had every write
    /// the primary had executed, if one is kept.
    pub(crate) fn reached(&self, acknowledged: u64) -> Option<Instant> {
        self.readings
            .iter()
            .rev()
            .find(|(_, offset)| *offset <= acknowledged)
            .map(|(at, _)| *at)
    }
}

impl Replicas {
    /// Reads them from an `INFO replication` reply.
    pub fn read(replication: &str) -> Self {
        let mut replicas = Replicas {
            primary_offset: info_field(replication, "master_repl_offset")
                .and_then(|o| o.parse().ok()),
            ..Replicas::default()
        };
        for line in replication.lines().filter(|l| l.starts_with("slave")) {
            let Some((_, fields)) = line.trim_end().split_once(':') else {
                continue;
            };
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            if let (Some("online"), Some(ip), Some(port)) =
                (field("state"), field("ip"), field("port"))
            {
                let address = format!("{ip}:{port}");
                let offset = field("offset").and_then(|o| o.parse().ok());
                let lag = field("lag").and_then(|l| l.parse().ok());
                if let (Some(offset), Some(lag)) = (offset, lag) {
                    replicas
                        .acknowledged
                        .push((address.clone(), offset, Duration::from_secs(lag)));
                }
                replicas.online.push(address);
            }
        }
        replicas
    }
}

impl Lineage {
    /// The sentinels listed a replica at `address`, with `run_id`, a candidate or flagged, at
    /// `now` (invariant 2).
    pub fn listed(&mut self, address: &str, run_id: &str, candidate: bool, now: Instant) {
        let replica = self.replicas.entry(address.to_owned()).or_default();
        if !run_id.is_empty() {
            replica.run_id = Some(run_id.to_owned());
        }
        replica.candidate = candidate;
        replica.check_away(now);
    }

    /// The replica at `address`, read there, is the run `run_id`, and replicates the history
    /// the client follows (invariant 7): what the sentinels' listing tells, for a node without
    /// them. Its candidacy is left as it was.
    pub(crate) fn named(&mut self, address: &str, run_id: &str) {
        self.replicas.entry(address.to_owned()).or_default().run_id = Some(run_id.to_owned());
    }

    /// The history the client follows (invariant 4), if it saw a primary yet.
    pub(crate) fn followed(&self) -> Option<&str> {
        self.history.as_deref()
    }

    /// The primary at `primary`, whose history is `history`, listed `online` as its replicas
    /// online at `now`: every other replica the client knows is away (invariant 2). Only the
    /// primary whose history the client follows is heard: an old primary, deposed without
    /// knowing it, lists none of the replicas that left it for the new one (invariant 4).
    pub(crate) fn online(&mut self, primary: &str, history: &str, online: &[String], now: Instant) {
        if self.history.as_deref() != Some(history) {
            return;
        }
        for address in online {
            self.replicas.entry(address.clone()).or_default();
        }
        for (address, replica) in &mut self.replicas {
            if address != primary {
                replica.online = online.contains(address);
                replica.check_away(now);
            }
        }
    }

    /// The replica at `address` was caught up as of `at` with the primary whose history is
    /// `history` (invariant 2): heard only from the primary the client follows, as
    /// [`online`](Self::online).
    pub fn caught_up(&mut self, address: &str, history: &str, at: Instant) {
        if self.history.as_deref() != Some(history) {
            return;
        }
        let replica = self.replicas.entry(address.to_owned()).or_default();
        replica.acknowledged_at = replica.acknowledged_at.max(Some(at));
    }

    /// `replicas` were caught up with the primary the client follows at `now` (for tests of
    /// the judgement).
    #[cfg(test)]
    fn acknowledged(&mut self, replicas: &[String], now: Instant) {
        let history = self.history.clone().unwrap_or_default();
        for address in replicas {
            self.caught_up(address, &history, now);
        }
    }

    /// The primary the client follows listed `online` at `now` (for tests of the judgement).
    #[cfg(test)]
    fn online_now(&mut self, primary: &str, online: &[String], now: Instant) {
        let history = self.history.clone().unwrap_or_default();
        self.online(primary, &history, online, now);
    }

    /// Judges `candidate`, a server that says it is the primary, at `now` (invariants 2 to 4).
    /// Follows its history when it continues ours.
    pub fn judge(&mut self, candidate: &Candidate, now: Instant, max_ttl: Duration) -> Succession {
        let Some(followed) = self.history.as_deref() else {
            self.history = Some(candidate.history.clone());
            return Succession::Ordinary; // the first primary seen (invariant 3)
        };
        if candidate.history == followed {
            // The same primary checked again: what its promotion was judged stays (found by
            // test: its recheck 10 s later held it to its uptime, a minute without locks).
            return if self.continued.as_deref() == Some(candidate.run_id.as_str()) {
                Succession::Continues
            } else {
                Succession::Ordinary
            };
        }
        if candidate.previous != followed {
            return Succession::Lost(QuarantineReason::Resynchronised); // invariants 3, 4
        }
        self.history = Some(candidate.history.clone());
        self.continued = None;
        // Invariant 6: a copy of a primary that may lack a vote, within its quarantine.
        if let Some(until) = self.taints.get(&candidate.previous).filter(|u| **u > now) {
            return Succession::Inherits(*until);
        }
        // Invariant 7: by the address it was reached at, or else by its run.
        let (replica, by_address) = match self.replicas.get(&candidate.address) {
            Some(replica) => (replica, true),
            None => match self
                .replicas
                .values()
                .find(|r| r.run_id.as_deref() == Some(candidate.run_id.as_str()))
            {
                Some(replica) => (replica, false),
                None => return Succession::Ordinary,
            },
        };
        if by_address
            && replica
                .run_id
                .as_ref()
                .is_some_and(|id| *id != candidate.run_id)
        {
            // Another server there; its history is followed, out for `max_ttl` (invariant 6).
            self.taint(&candidate.history, after(now, max_ttl), now);
            return Succession::Lost(QuarantineReason::Promoted);
        }
        // When it started, at the latest (a reported uptime may be a second long: `quarantine`
        // invariant 1).
        let started = now.checked_sub(candidate.uptime.saturating_sub(UPTIME_SLACK));
        let acknowledged = replica
            .acknowledged_at
            .filter(|at| started.is_some_and(|started| *at > started));
        let away = replica.away_at.filter(|away| {
            acknowledged.is_none_or(|at| *away >= at)
                && now.saturating_duration_since(*away) < max_ttl
        });
        match (acknowledged, away) {
            (_, Some(_)) => {
                self.taint(&candidate.history, after(now, max_ttl), now); // invariant 6
                Succession::Lost(QuarantineReason::Promoted)
            }
            (Some(at), None) if replica.away_at.is_none_or(|away| away < at) => {
                self.continued = Some(candidate.run_id.clone());
                Succession::Continues
            }
            _ => Succession::Ordinary,
        }
    }

    /// The primary whose history is `history` is quarantined until `until` (invariant 6): a
    /// server that continues that history before then inherits the quarantine.
    pub fn taint(&mut self, history: &str, until: Instant, now: Instant) {
        self.taints.retain(|_, until| *until > now);
        let kept = self.taints.entry(history.to_owned()).or_insert(until);
        *kept = (*kept).max(until);
    }

    /// The runs of the replicas a vote may wait for now (online at the primary, or a candidate
    /// of the sentinels), as the sentinels listed them: those a receipt is due for
    /// (invariant 5).
    pub(crate) fn runs_listed(&self) -> Vec<String> {
        self.replicas
            .values()
            .filter(|r| r.online || r.candidate)
            .filter_map(|r| r.run_id.clone())
            .collect()
    }

    /// Whether a replica a vote may wait for now has no run listed yet: the sentinels have not
    /// read its `INFO` (invariant 5).
    pub(crate) fn runs_unknown(&self) -> bool {
        self.replicas
            .values()
            .any(|r| (r.online || r.candidate) && r.run_id.is_none())
    }

    /// `candidate`, judged [`Succession::Ordinary`], holds `receipt`, the receipt for its own
    /// run (invariant 5): whether it shows it received, after it last started, the writes of
    /// the history it was promoted from. If so it continues that history, as if the client had
    /// seen it caught up, and every later check of the same run keeps the verdict.
    pub(crate) fn received(&mut self, candidate: &Candidate, receipt: Option<&str>) -> bool {
        let shows = receipt.is_some_and(|history| history == candidate.previous)
            && self.history.as_deref() == Some(candidate.history.as_str());
        if shows {
            self.continued = Some(candidate.run_id.clone());
        }
        shows
    }

    /// The history the client follows, if it saw a primary yet.
    #[cfg(test)]
    fn history(&self) -> Option<&str> {
        self.followed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_TTL: Duration = Duration::from_secs(30);
    const LONG_UP: Duration = Duration::from_secs(3_600);

    fn primary(address: &str, history: &str, previous: &str) -> Candidate {
        Candidate {
            address: address.into(),
            run_id: format!("run-{address}"),
            uptime: LONG_UP,
            history: history.into(),
            previous: previous.into(),
        }
    }

    /// A client that followed the primary `p` with `history`, whose replicas `acked`, listed by
    /// the sentinels, acknowledged one of its votes at `now`.
    fn following(history: &str, acked: &[&str], now: Instant) -> Lineage {
        let mut lineage = Lineage::default();
        let first = lineage.judge(&primary("p", history, "0"), now, MAX_TTL);
        assert_eq!(first, Succession::Ordinary);
        for address in acked {
            lineage.listed(address, &format!("run-{address}"), true, now);
        }
        let acked: Vec<String> = acked.iter().map(|a| (*a).to_owned()).collect();
        lineage.online_now("p", &acked, now);
        lineage.acknowledged(&acked, now);
        lineage
    }

    #[test]
    fn a_new_client_trusts_a_promoted_replica_by_its_receipt_of_the_history_it_continued() {
        let now = Instant::now();
        let young = |history: &str, previous: &str| Candidate {
            uptime: Duration::from_secs(5),
            ..primary("r", history, previous)
        };
        // A client that meets the promoted replica first: the ordinary rules, unless it shows
        // its receipt naming the history it was promoted from (invariant 5).
        let r = young("h2", "h1");
        assert!(r.was_promoted());
        let mut fresh = Lineage::default();
        assert_eq!(fresh.judge(&r, now, MAX_TTL), Succession::Ordinary);
        assert!(!fresh.received(&r, None), "no receipt");
        assert!(
            !fresh.received(&r, Some("h0")),
            "a receipt of another history"
        );
        assert!(fresh.received(&r, Some("h1")));
        // Its later checks keep the verdict; a restart of it is a new run.
        assert_eq!(fresh.judge(&r, now, MAX_TTL), Succession::Continues);
        let restarted = Candidate {
            run_id: "run-r-2".into(),
            ..r.clone()
        };
        assert_eq!(fresh.judge(&restarted, now, MAX_TTL), Succession::Ordinary);
        // A primary never promoted has no history to continue (the health check reads no
        // receipt for it).
        let original = young("h1", "0000000000000000000000000000000000000000");
        assert!(!original.was_promoted());
    }

    #[test]
    fn a_replica_that_acknowledged_since_it_started_votes_at_once() {
        let now = Instant::now();
        let later = now + Duration::from_secs(5);
        let mut lineage = following("h1", &["r"], now);
        let r = primary("r", "h2", "h1");
        assert_eq!(lineage.judge(&r, later, MAX_TTL), Succession::Continues);
        assert_eq!(lineage.history(), Some("h2"));
        // Checked again (every 10 s), the same run keeps its verdict; a restart of it does not.
        assert_eq!(lineage.judge(&r, later, MAX_TTL), Succession::Continues);
        let mut restarted = r.clone();
        restarted.run_id = "run-r-2".into();
        assert_eq!(
            lineage.judge(&restarted, later, MAX_TTL),
            Succession::Ordinary
        );
        // And the next failover continues from there.
        lineage.online_now("r", &["p".to_owned()], later);
        // What the old primary says, once deposed, is not heard.
        lineage.online("p", "h1", &[], later);
        lineage.acknowledged(&["p".to_owned()], later);
        let p = primary("p", "h3", "h2");
        assert_eq!(lineage.judge(&p, later, MAX_TTL), Succession::Continues);
    }

    #[test]
    fn a_replica_restarted_since_it_acknowledged_is_held_to_its_uptime() {
        let then = Instant::now();
        let mut lineage = following("h1", &["r"], then);
        let mut young = primary("r", "h2", "h1");
        young.uptime = Duration::from_secs(3);
        let soon = then + Duration::from_secs(10);
        assert_eq!(lineage.judge(&young, soon, MAX_TTL), Succession::Ordinary);
    }

    #[test]
    fn a_replica_away_within_max_ttl_or_replaced_is_quarantined() {
        let then = Instant::now();
        let soon = then + Duration::from_secs(10);
        let r = || primary("r", "h2", "h1");

        // Dropped out of the primary's list after it acknowledged, no longer a candidate, then
        // back online.
        let mut lineage = following("h1", &["r"], then);
        lineage.online_now("p", &[], then + Duration::from_secs(1));
        lineage.listed("r", "run-r", false, then + Duration::from_secs(1));
        lineage.online_now("p", &["r".to_owned()], then + Duration::from_secs(2));
        let lost = Succession::Lost(QuarantineReason::Promoted);
        assert_eq!(lineage.judge(&r(), soon, MAX_TTL), lost);
        // Its history is followed all the same: its own quarantine covers what it missed.
        assert_eq!(lineage.history(), Some("h2"));

        // Listed as no candidate (flagged down for a moment) while online at the primary: every
        // vote still waited for it.
        let mut lineage = following("h1", &["r"], then);
        lineage.listed("r", "run-r", false, then + Duration::from_secs(1));
        assert_eq!(lineage.judge(&r(), soon, MAX_TTL), Succession::Continues);

        // Away, but it acknowledged again since: it caught up.
        let mut lineage = following("h1", &["r"], then);
        lineage.online_now("p", &[], then + Duration::from_secs(1));
        lineage.listed("r", "run-r", false, then + Duration::from_secs(1));
        lineage.acknowledged(&["r".to_owned()], then + Duration::from_secs(2));
        assert_eq!(lineage.judge(&r(), soon, MAX_TTL), Succession::Continues);

        // Away more than max_ttl ago, never acknowledged since: the ordinary rules.
        let mut lineage = following("h1", &["r"], then);
        lineage.online_now("p", &[], then + Duration::from_secs(1));
        lineage.listed("r", "run-r", false, then + Duration::from_secs(1));
        let late = then + MAX_TTL + Duration::from_secs(2);
        assert_eq!(lineage.judge(&r(), late, MAX_TTL), Succession::Ordinary);

        // Another server at its address.
        let mut lineage = following("h1", &["r"], then);
        let mut replaced = r();
        replaced.run_id = "another".into();
        assert_eq!(lineage.judge(&replaced, then, MAX_TTL), lost);

        // Never seen: the ordinary rules.
        let mut lineage = following("h1", &["r"], then);
        let x = primary("x", "h2", "h1");
        assert_eq!(lineage.judge(&x, then, MAX_TTL), Succession::Ordinary);
    }

    #[test]
    fn a_replica_the_sentinels_name_a_candidate_is_not_away_for_leaving_a_primary() {
        let now = Instant::now();
        let mut lineage = following("h1", &["r"], now);
        let r = primary("r", "h2", "h1");
        // The old primary, deposed without knowing it, lists no replica (r left it for the new
        // history): while the sentinels name r a candidate, that says nothing of it.
        lineage.online("p", "h1", &[], now + Duration::from_secs(1));
        let later = now + Duration::from_secs(2);
        assert_eq!(lineage.judge(&r, later, MAX_TTL), Succession::Continues);
    }

    /// Review (issue 46): a promoted replica judged [`Succession::Lost`] may lack a counted
    /// vote, and so may every server that later copies its data. A replica `s` that caught up
    /// with it (or holds a receipt written on it) and is promoted in turn, while the first
    /// promotion's quarantine still runs, must not continue its history at once.
    #[test]
    fn a_successor_of_a_quarantined_primary_inherits_its_quarantine() {
        let then = Instant::now();
        let soon = then + Duration::from_secs(5);
        let later = then + Duration::from_secs(10);
        let mut lineage = following("h1", &["r", "s"], then);
        // r away (votes counted without it), then back online and promoted: quarantined.
        lineage.online_now("p", &["s".to_owned()], then + Duration::from_secs(1));
        lineage.listed("r", "run-r", false, then + Duration::from_secs(1));
        let r = primary("r", "h2", "h1");
        let lost = Succession::Lost(QuarantineReason::Promoted);
        assert_eq!(lineage.judge(&r, soon, MAX_TTL), lost);
        // s resyncs from r (its data now r's, without the vote r missed) and is caught up.
        lineage.listed("s", "run-s", true, soon);
        lineage.online_now("r", &["s".to_owned()], soon);
        lineage.acknowledged(&["s".to_owned()], soon);
        // r fails within its quarantine; s is promoted from r's history.
        let s = primary("s", "h3", "h2");
        assert_ne!(
            lineage.judge(&s, later, MAX_TTL),
            Succession::Continues,
            "s continues a history whose primary may lack a vote, within that quarantine"
        );
        // Nor does a new client trust it by a receipt written on r.
        let mut fresh = Lineage::default();
        let young_s = Candidate {
            uptime: Duration::from_secs(5),
            ..s.clone()
        };
        assert_eq!(fresh.judge(&young_s, later, MAX_TTL), Succession::Ordinary);
        // (The receipt says s caught up with r, not that r had every vote: see the test
        // a_primary_restarted_from_a_snapshot_is_no_promotion_and_its_receipts_vouch_for_nothing.)
    }

    #[test]
    fn another_history_is_a_loss_and_never_followed() {
        let now = Instant::now();
        let mut lineage = following("h1", &["r"], now);
        // Promoted from a history the client never followed (a failover it missed).
        let lost = Succession::Lost(QuarantineReason::Resynchronised);
        assert_eq!(lineage.judge(&primary("r", "h3", "h2"), now, MAX_TTL), lost);
        assert_eq!(lineage.history(), Some("h1"));
        // The old primary, still one in its own eyes after the client followed a new history.
        let mut lineage = following("h1", &["r"], now);
        let r = primary("r", "h2", "h1");
        assert_eq!(lineage.judge(&r, now, MAX_TTL), Succession::Continues);
        assert_eq!(lineage.judge(&primary("p", "h1", "0"), now, MAX_TTL), lost);
        assert_eq!(lineage.history(), Some("h2"));
    }

    #[test]
    fn reads_a_candidate_and_its_replicas_from_info() {
        let server = "# Server\r\nrun_id:abc\r\nuptime_in_seconds:42\r\n";
        let replication = "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
             slave0:ip=127.0.0.1,port=7001,state=online,offset=10,lag=0\r\n\
             slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n\
             slave2:ip=127.0.0.1,port=7003,state=online,offset=9,lag=0\r\n\
             master_replid:h2\r\nmaster_replid2:h1\r\nmaster_repl_offset:10\r\n\
             second_repl_offset:11\r\n";
        let read = Candidate::read("a:1", server, replication).expect("candidate");
        assert_eq!((read.run_id.as_str(), read.history.as_str()), ("abc", "h2"));
        assert_eq!((read.previous.as_str(), read.uptime.as_secs()), ("h1", 42));
        let replicas = Replicas::read(replication);
        assert_eq!(replicas.online, vec!["127.0.0.1:7001", "127.0.0.1:7003"]);
        assert_eq!(replicas.primary_offset, Some(10));
        assert_eq!(
            replicas.acknowledged,
            vec![
                ("127.0.0.1:7001".to_owned(), 10, Duration::ZERO),
                ("127.0.0.1:7003".to_owned(), 9, Duration::ZERO)
            ]
        );
        assert_eq!(Candidate::read("a:1", "", replication), None);
    }

    #[test]
    fn a_replica_caught_up_as_of_the_latest_reading_its_offset_covers() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut offsets = Offsets::default();
        offsets.record(at(0), 100);
        offsets.record(at(10), 150); // too soon after the last: not kept
        offsets.record(at(100), 200);
        offsets.record(at(200), 300);
        assert_eq!(offsets.reached(99), None);
        assert_eq!(offsets.reached(150), Some(at(0)));
        assert_eq!(offsets.reached(250), Some(at(100)));
        assert_eq!(offsets.reached(300), Some(at(200)));
        // Old readings go.
        offsets.record(at(20_000), 400);
        assert_eq!(offsets.reached(300), None);
        assert_eq!(offsets.reached(400), Some(at(20_000)));
    }
}
