//! Restart quarantine: when a node's vote may be trusted again.
//!
//! A node that restarts without its data has forgotten every lock it held, so its "OK" to a
//! second client can complete a second majority while the first holder still relies on the lock.
//! The algorithm's answer is operational: keep a crashed node out for longer than the largest TTL
//! in use, so every lock it knew about has expired before it votes again. We enforce that in the
//! client instead of trusting operators to: each node's `run_id` and uptime are read on every
//! (re)connection and from time to time, and a node that is younger than `max_ttl` (or whose
//! `run_id` changed under us) is *quarantined*. We still set, extend and release keys there, but
//! its replies do not count toward a majority.
//!
//! This module is pure: it judges observations; the node layer makes them.
//!
//! # Invariants
//! 1. A node is trusted only once it has been up for `max_ttl`: every key it lost in a restart had
//!    a TTL of at most `max_ttl` (the manager refuses longer ones), so by then it would have
//!    expired anyway. Redis reports uptime in whole seconds as the difference of two clock
//!    readings each rounded down to the second, so `uptime_in_seconds:1` may mean a node up for
//!    a millisecond: a reported uptime counts for one second less ([`UPTIME_SLACK`]).
//! 2. A `run_id` that changed while we were connected means a restart or a different server at the
//!    same address; we cannot tell when it lost its data, so it is quarantined for a full
//!    `max_ttl` from the moment we notice.
//! 3. A node whose configuration cannot lose acknowledged writes (`appendonly yes` with
//!    `appendfsync always`, read with `CONFIG GET`) is trusted at once, but only when the
//!    manager is configured to trust such nodes: an explicit setting, not a guess. If `CONFIG` is
//!    not allowed, the node is not known to be durable.
//! 4. With quarantine disabled every node is trusted: plain Redlock.

use std::time::{Duration, Instant};

/// How much `uptime_in_seconds` may exceed the real uptime: Redis computes it as
/// `server.unixtime - server.stat_starttime`, two times in whole seconds (invariant 1). Ignoring
/// this let a node that restarted empty vote up to a second early: the flake of
/// `tests/quarantine.rs` (a node restarted at x.999 s and checked at x+1.001 s reads 1 s).
pub(crate) const UPTIME_SLACK: Duration = Duration::from_secs(1);

/// How the manager judges nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TrustPolicy {
    /// Whether young or restarted nodes are quarantined at all (invariant 4).
    pub(crate) enabled: bool,
    /// The largest TTL any client of these servers uses: the quarantine length.
    pub(crate) max_ttl: Duration,
    /// Whether nodes that cannot lose acknowledged writes are trusted at once (invariant 3).
    pub(crate) trust_durable: bool,
}

/// What a health check read from a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observation {
    pub(crate) run_id: String,
    pub(crate) uptime: Duration,
    pub(crate) durable: bool,
}

impl Observation {
    /// Reads `run_id` and `uptime_in_seconds` from an `INFO server` reply.
    pub(crate) fn from_info(info: &str, durable: bool) -> Option<Self> {
        let field = |name: &str| {
            info.lines()
                .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
        };
        Some(Self {
            run_id: field("run_id")?.to_owned(),
            uptime: Duration::from_secs(field("uptime_in_seconds")?.parse().ok()?),
            durable,
        })
    }
}

/// The instant from which the node's votes count, judged at `now` from `seen`, given the
/// `run_id` we saw on this node before (if any).
pub(crate) fn trusted_from(
    policy: &TrustPolicy,
    seen: &Observation,
    previous_run_id: Option<&str>,
    now: Instant,
) -> Instant {
    if !policy.enabled || (policy.trust_durable && seen.durable) {
        return now; // invariants 3, 4
    }
    if previous_run_id.is_some_and(|previous| previous != seen.run_id) {
        return now + policy.max_ttl; // invariant 2
    }
    let up_at_least = seen.uptime.saturating_sub(UPTIME_SLACK);
    now + policy.max_ttl.saturating_sub(up_at_least) // invariant 1
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
        }
    }

    fn seen(run_id: &str, uptime_s: u64, durable: bool) -> Observation {
        Observation {
            run_id: run_id.into(),
            uptime: Duration::from_secs(uptime_s),
            durable,
        }
    }

    #[test]
    fn a_young_node_waits_until_it_has_been_up_for_max_ttl() {
        let now = Instant::now();
        let from = trusted_from(&policy(), &seen("a", 15, false), None, now);
        assert_eq!(
            from - now,
            Duration::from_secs(46),
            "15 s reported: at least 14 s up"
        );
    }

    #[test]
    fn a_reported_second_of_uptime_may_be_a_millisecond() {
        let now = Instant::now();
        let from = trusted_from(&policy(), &seen("a", 1, false), None, now);
        assert_eq!(
            from - now,
            MAX_TTL,
            "a full max_ttl, as for a node just started"
        );
    }

    #[test]
    fn an_old_node_is_trusted_at_once() {
        let now = Instant::now();
        assert_eq!(
            trusted_from(&policy(), &seen("a", 61, false), None, now),
            now
        );
        assert_eq!(
            trusted_from(&policy(), &seen("a", 99_999, false), Some("a"), now),
            now
        );
    }

    #[test]
    fn a_run_id_that_changed_under_us_waits_a_full_max_ttl() {
        let now = Instant::now();
        let from = trusted_from(&policy(), &seen("b", 99_999, false), Some("a"), now);
        assert_eq!(
            from - now,
            MAX_TTL,
            "an old server at the same address is still new to us"
        );
    }

    #[test]
    fn durable_nodes_are_trusted_only_when_configured_to_be() {
        let now = Instant::now();
        let young_durable = seen("b", 1, true);
        assert_eq!(trusted_from(&policy(), &young_durable, Some("a"), now), now);
        let strict = TrustPolicy {
            trust_durable: false,
            ..policy()
        };
        assert_eq!(
            trusted_from(&strict, &young_durable, None, now) - now,
            MAX_TTL
        );
    }

    #[test]
    fn without_quarantine_every_node_is_trusted() {
        let now = Instant::now();
        let off = TrustPolicy {
            enabled: false,
            ..policy()
        };
        assert_eq!(
            trusted_from(&off, &seen("b", 0, false), Some("a"), now),
            now
        );
    }

    #[test]
    fn info_server_is_parsed() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:7f3a9c\r\ntcp_port:6379\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n";
        assert_eq!(
            Observation::from_info(info, false),
            Some(seen("7f3a9c", 42, false))
        );
        assert_eq!(Observation::from_info("# Server\r\n", false), None);
    }
}
