//! Who may succeed a replicated primary and vote at once: the rule that spares a failover behind
//! Redis Sentinel the minute without locks of a restart quarantine, without trusting a promoted
//! replica that may lack a lock.
//!
//! A node that is a primary with replicas ([`sentinels`](crate::nodes::sentinels)) counts a vote
//! only once every replica that could be promoted acknowledged it (`WAIT`, invariant 1). So a
//! replica that was up and acknowledging through the life of every lock still valid holds every
//! one of them, and when Sentinel promotes it, it may vote at once. This module judges a new
//! primary against what the client saw of the old one: its replication history (`master_replid`)
//! and which replicas Sentinel listed, and when each was down. It is pure: the node layer reads,
//! this judges.
//!
//! # Invariants
//! 1. **Every counted vote reached every replica that could be promoted in its place.** A vote
//!    counts only when `WAIT n` answered `n`, where `n` is the larger of the number of replicas
//!    the primary itself listed online (`INFO replication`) at its last reading, which every
//!    vote makes in the same pipeline before its `WAIT`, and the number the sentinels last
//!    listed up (not flagged down, their link to the primary up). A vote whose own reading
//!    shows more replicas online than its `WAIT` asked for is not counted either: a new replica
//!    might have stood in for one that lags. Replicas that drop out of the primary's list do
//!    not lower `n` until the sentinels flag them down: a primary cut off from its replicas
//!    (a partition, or deposed by a failover it has not heard of) sees none online, and its
//!    votes must still wait for them, in vain. A replica that drops out is recorded as down by
//!    the reading that no longer shows it (invariant 2).
//! 2. **A replica that was down may have missed a vote.** The [`Lineage`] remembers when the
//!    client last saw each replica down: not online at the primary, or flagged by the sentinels
//!    (`s_down`, `o_down`, `disconnected`, its link to the primary down). Promoted within
//!    `max_ttl` of that, it may lack a lock still valid: it is quarantined for `max_ttl`
//!    ([`QuarantineReason::Promoted`]). So is a replica the client never saw online, or one
//!    whose `run_id` is not the one the sentinels listed at its address (a replacement).
//! 3. **A promotion continues a history, or it is judged as a loss.** A new primary votes at
//!    once only if its `master_replid2` is the history the client last followed (it was a
//!    replica of that primary and was promoted from it) and invariant 2 lets it. Any other
//!    history (a chain of failovers the client missed, a server that was a replica of
//!    something else, a resync from a replica that missed a lock) is quarantined for `max_ttl`.
//!    The first primary a client sees is judged by the ordinary rules
//!    ([`quarantine`](crate::protocol::quarantine)): it has nothing to compare.
//! 4. **The history only moves forward.** The client follows a new history only from a primary
//!    that continues the one it followed (or from its first): an old primary cut off from its
//!    replicas, still a primary in its own eyes, is judged against the new history, quarantined,
//!    and cannot take the client back to its own.
//!
//! 5. **A promoted replica's uptime is no evidence.** The restart quarantine keeps a server
//!    out until it has been up for `max_ttl` because a restart may have lost locks; a replica's
//!    data is its primary's, taken again in full when it restarts, so a replica restarted a
//!    minute before its promotion lost nothing by it. What it may lack is a vote counted while
//!    it was away, which invariant 2 judges, not its uptime. So the first primary a client sees,
//!    when it was promoted in its current run (`second_repl_offset`), is not held to its uptime
//!    (every other rule still applies: its marker, evictions, resets); a primary that restarted
//!    since its promotion shows none and is held to it.
//!
//! What it cannot see: a replica that dropped out and came back between two of this client's
//! readings while *another* client counted votes without it, then was promoted before it caught
//! up with them, with every other replica unable to be promoted. And a client that starts after
//! a failover judges the promoted primary as a first sight (invariant 3): it relies on invariant
//! 1 having held for every client before it. Both are in `docs/sentinel.md`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crate::protocol::quarantine::{QuarantineReason, info_field};

/// What a client saw of one replicated service: the history it follows and its replicas.
#[derive(Debug, Default)]
pub(crate) struct Lineage {
    /// The `master_replid` of the primary the client last followed (invariant 4).
    history: Option<String>,
    /// The replicas seen, by address (`ip:port`).
    replicas: HashMap<String, Replica>,
}

#[derive(Debug, Default)]
struct Replica {
    /// The `run_id` the sentinels listed at this address, if they did.
    run_id: Option<String>,
    /// When the client last saw it down, if ever (invariant 2).
    down_at: Option<Instant>,
    /// Whether the client ever saw it online at the primary.
    online_once: bool,
}

/// What [`Lineage::judge`] made of a primary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Succession {
    /// The first primary this client saw of the service, or the one it follows: the ordinary
    /// rules judge it.
    Ordinary,
    /// Promoted from the primary the client followed, and holds every vote counted there
    /// (invariant 3), or promoted from one the client never saw (invariant 5): its uptime says
    /// nothing of a loss.
    Continues,
    /// May lack a counted vote: out for `max_ttl`, for this reason.
    Lost(QuarantineReason),
}

/// A primary as its `INFO server` and `INFO replication` describe it, at the address it was
/// reached at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) address: String,
    pub(crate) run_id: String,
    /// `master_replid`: its history.
    pub(crate) history: String,
    /// `master_replid2`: the history it continued when it was promoted (`000…` when never).
    pub(crate) previous: String,
    /// Whether it was promoted from a replica in its current run (`second_repl_offset` is not
    /// -1): its data came by replication.
    pub(crate) promoted: bool,
}

impl Candidate {
    /// Reads a candidate at `address` from its `INFO server` and `INFO replication` sections.
    pub(crate) fn read(address: &str, server: &str, replication: &str) -> Option<Self> {
        Some(Self {
            address: address.to_owned(),
            run_id: info_field(server, "run_id")?.to_owned(),
            history: info_field(replication, "master_replid")?.to_owned(),
            previous: info_field(replication, "master_replid2")
                .unwrap_or_default()
                .to_owned(),
            promoted: info_field(replication, "second_repl_offset").is_some_and(|o| o != "-1"),
        })
    }
}

/// The replicas a primary's `INFO replication` lists online (`slaveN:ip=…,port=…,state=online`),
/// as `ip:port`.
pub(crate) fn online_replicas(replication: &str) -> Vec<String> {
    replication
        .lines()
        .filter(|line| line.starts_with("slave"))
        .filter_map(|line| {
            let (_, fields) = line.trim_end().split_once(':')?;
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            };
            if field("state")? != "online" {
                return None;
            }
            Some(format!("{}:{}", field("ip")?, field("port")?))
        })
        .collect()
}

impl Lineage {
    /// The sentinels listed a replica at `address`, with `run_id`, `up` or flagged down, at
    /// `now` (invariant 2).
    pub(crate) fn listed(&mut self, address: &str, run_id: &str, up: bool, now: Instant) {
        let replica = self.replicas.entry(address.to_owned()).or_default();
        if !run_id.is_empty() {
            replica.run_id = Some(run_id.to_owned());
        }
        if !up {
            replica.down_at = Some(now);
        }
    }

    /// The primary at `primary` listed `online` as its replicas online at `now`: every other
    /// replica the client knows is down (invariants 1, 2).
    pub(crate) fn online(&mut self, primary: &str, online: &[String], now: Instant) {
        for address in online {
            self.replicas
                .entry(address.clone())
                .or_default()
                .online_once = true;
        }
        for (address, replica) in &mut self.replicas {
            if address != primary && !online.contains(address) {
                replica.down_at = Some(now);
            }
        }
    }

    /// Judges `candidate`, a server that says it is the primary, at `now` (invariants 2 to 4).
    /// Follows its history when it continues ours.
    pub(crate) fn judge(
        &mut self,
        candidate: &Candidate,
        now: Instant,
        max_ttl: Duration,
    ) -> Succession {
        let Some(followed) = self.history.as_deref() else {
            self.history = Some(candidate.history.clone());
            // The first primary seen (invariant 3): nothing to compare with. Promoted, its data
            // came by replication, so its uptime is no evidence of a loss (invariant 5).
            return if candidate.promoted {
                Succession::Continues
            } else {
                Succession::Ordinary
            };
        };
        if candidate.history == followed {
            return Succession::Ordinary;
        }
        if candidate.previous != followed {
            return Succession::Lost(QuarantineReason::Resynchronised); // invariants 3, 4
        }
        self.history = Some(candidate.history.clone());
        let acknowledged = self.replicas.get(&candidate.address).is_some_and(|r| {
            r.online_once
                && r.run_id.as_ref().is_none_or(|id| *id == candidate.run_id)
                && r.down_at
                    .is_none_or(|at| now.saturating_duration_since(at) >= max_ttl)
        });
        if acknowledged {
            Succession::Continues
        } else {
            Succession::Lost(QuarantineReason::Promoted) // invariant 2
        }
    }

    /// The history the client follows, if it saw a primary yet.
    #[cfg(test)]
    fn history(&self) -> Option<&str> {
        self.history.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX_TTL: Duration = Duration::from_secs(30);

    fn primary(address: &str, history: &str, previous: &str) -> Candidate {
        Candidate {
            address: address.into(),
            run_id: format!("run-{address}"),
            history: history.into(),
            previous: previous.into(),
            promoted: previous != "0",
        }
    }

    /// A client that followed the primary `p` with `history`, whose replicas `online` were
    /// listed by the sentinels and online at the primary.
    fn following(history: &str, online: &[&str], now: Instant) -> Lineage {
        let mut lineage = Lineage::default();
        assert_eq!(
            lineage.judge(&primary("p", history, "0"), now, MAX_TTL),
            Succession::Ordinary
        );
        for address in online {
            lineage.listed(address, &format!("run-{address}"), true, now);
        }
        let online: Vec<String> = online.iter().map(|a| (*a).to_owned()).collect();
        lineage.online("p", &online, now);
        lineage
    }

    #[test]
    fn a_replica_online_throughout_that_continues_the_history_votes_at_once() {
        let now = Instant::now();
        let mut lineage = following("h1", &["r"], now);
        assert_eq!(
            lineage.judge(&primary("r", "h2", "h1"), now, MAX_TTL),
            Succession::Continues
        );
        assert_eq!(lineage.history(), Some("h2"));
        // And the next failover continues from there.
        lineage.online("r", &["p".to_owned()], now);
        assert_eq!(
            lineage.judge(&primary("p", "h3", "h2"), now, MAX_TTL),
            Succession::Continues
        );
    }

    #[test]
    fn a_replica_down_within_max_ttl_never_online_or_replaced_is_quarantined() {
        let then = Instant::now();
        let soon = then + Duration::from_secs(10);
        let r = || primary("r", "h2", "h1");

        // Dropped out of the primary's list, then back.
        let mut lineage = following("h1", &["r"], then);
        lineage.online("p", &[], then);
        lineage.online("p", &["r".to_owned()], then + Duration::from_secs(1));
        assert_eq!(
            lineage.judge(&r(), soon, MAX_TTL),
            Succession::Lost(QuarantineReason::Promoted)
        );
        // Its history is followed all the same: its own quarantine covers what it missed.
        assert_eq!(lineage.history(), Some("h2"));

        // Flagged down by the sentinels, more than max_ttl ago: long caught up.
        let mut lineage = following("h1", &["r"], then);
        lineage.listed("r", "run-r", false, then);
        assert_eq!(
            lineage.judge(&r(), then + MAX_TTL, MAX_TTL),
            Succession::Continues
        );
        let mut lineage = following("h1", &["r"], then);
        lineage.listed("r", "run-r", false, then);
        assert_eq!(
            lineage.judge(&r(), soon, MAX_TTL),
            Succession::Lost(QuarantineReason::Promoted)
        );

        // Listed by the sentinels but never seen online; never listed; another server there.
        let mut lineage = following("h1", &[], then);
        lineage.listed("r", "run-r", true, then);
        assert_eq!(
            lineage.judge(&r(), then, MAX_TTL),
            Succession::Lost(QuarantineReason::Promoted)
        );
        let mut lineage = following("h1", &["r"], then);
        assert_eq!(
            lineage.judge(&primary("x", "h2", "h1"), then, MAX_TTL),
            Succession::Lost(QuarantineReason::Promoted)
        );
        let mut lineage = following("h1", &["r"], then);
        let mut replaced = r();
        replaced.run_id = "another".into();
        assert_eq!(
            lineage.judge(&replaced, then, MAX_TTL),
            Succession::Lost(QuarantineReason::Promoted)
        );
    }

    #[test]
    fn another_history_is_a_loss_and_never_followed() {
        let now = Instant::now();
        let mut lineage = following("h1", &["r"], now);
        // Promoted from a history the client never followed (a failover it missed).
        assert_eq!(
            lineage.judge(&primary("r", "h3", "h2"), now, MAX_TTL),
            Succession::Lost(QuarantineReason::Resynchronised)
        );
        assert_eq!(lineage.history(), Some("h1"));
        // The old primary, still one in its own eyes after the client followed a new history.
        let mut lineage = following("h1", &["r"], now);
        assert_eq!(
            lineage.judge(&primary("r", "h2", "h1"), now, MAX_TTL),
            Succession::Continues
        );
        assert_eq!(
            lineage.judge(&primary("p", "h1", "0"), now, MAX_TTL),
            Succession::Lost(QuarantineReason::Resynchronised)
        );
        assert_eq!(lineage.history(), Some("h2"));
    }

    #[test]
    fn a_promoted_primary_seen_first_is_not_held_to_its_uptime() {
        let now = Instant::now();
        let mut lineage = Lineage::default();
        assert_eq!(
            lineage.judge(&primary("r", "h2", "h1"), now, MAX_TTL),
            Succession::Continues
        );
        assert_eq!(lineage.history(), Some("h2"));
    }

    #[test]
    fn reads_a_candidate_and_its_online_replicas_from_info() {
        let server = "# Server\r\nrun_id:abc\r\n";
        let replication = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
             slave0:ip=127.0.0.1,port=7001,state=online,offset=10,lag=0\r\n\
             slave1:ip=127.0.0.1,port=7002,state=wait_bgsave,offset=0,lag=0\r\n\
             master_replid:h2\r\nmaster_replid2:h1\r\nsecond_repl_offset:11\r\n";
        let read = Candidate::read("a:1", server, replication).expect("candidate");
        assert_eq!((read.run_id.as_str(), read.history.as_str()), ("abc", "h2"));
        assert_eq!(read.previous, "h1");
        assert!(read.promoted);
        assert_eq!(online_replicas(replication), vec!["127.0.0.1:7001"]);
        assert_eq!(Candidate::read("a:1", "", replication), None);
    }
}
