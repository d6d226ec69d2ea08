//! The switches: one per rule of the library the model can remove, all on by default.
//!
//! Each switch names a hole found (and closed) in the library before: with the rule removed, the
//! checker must find a schedule that breaks a guarantee, and with it on, none within the bounds
//! (`tests/`). A switch that can be turned off without the checker noticing would be a rule the
//! model does not exercise.

/// Which of the library's rules the model applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rules {
    /// The restart quarantine (`quarantine` invariant 5 when off: every node trusted).
    pub quarantine: bool,
    /// A cluster master's marker names its `master_replid` as well as its `run_id`
    /// (`quarantine` invariant 6). Off: the owner is the `run_id` alone.
    pub marker_names_replid: bool,
    /// A cluster master's vote reads its `master_replid` back with the marker and compares it
    /// with the health check's (`server::check_history`, `server` invariant 7). Off: a
    /// connection made before a failback counts the failed-back master's votes until its next
    /// health check (found by `redlock chaos` under load: `docs/cluster.md`).
    pub vote_reads_history: bool,
    /// A release under a lock-delay leaves a key with no more than the delay left
    /// (`scripts/release_timely.lua`, `engine` invariant 6). Off: compare-and-delete.
    pub release_honours_delay: bool,
    /// A release under a lock-delay is judged late against the delay plus the lag of the write
    /// that set the key, at most a node timeout after its round began
    /// (`validity::late_release_bound`, `engine` invariant 6). Off: the delay alone, which let
    /// a release that reached a node after the holder's deadline free a key whose `SET` ran
    /// late (found by this checker: `docs/model.md`).
    pub release_bound_covers_lag: bool,
    /// A native proposal is stored only within the trust window of the node's clock
    /// (`fencing` invariant 4). Off: the old counter floor (any counter started from a clock).
    pub trust_window: bool,
    /// Validity gives up the drift allowance (`validity` invariant 2). Off: `start + ttl`.
    pub drift_term: bool,
    /// The quorum is `N/2 + 1` (`quorum` invariant 1). Off: `N/2`.
    pub strict_majority: bool,
    /// An extension counts only with a quorum, as an acquisition (`acquire` invariant 4). Off:
    /// one node that extended is enough.
    pub extension_needs_quorum: bool,
    /// A release by value, whose sender does not know the holder's deadline, sends the larger
    /// of its own late-release bound and the one the holder carried in the value
    /// (`value::release_bound_by_value`, `engine` invariant 6). Off: the sender's own, from its
    /// settings, which a sender without the holder's lock-delay sets to none.
    pub release_bound_from_value: bool,
    /// A marker whose id was not drawn (a word written by hand, the same on every server
    /// marked that way) vouches for nothing: the health check replaces it as if it were missing
    /// (`marker` invariant 5). Off: it is read as any marker, so a replacement server carrying
    /// the same word passes for the old one.
    pub undrawn_marker_replaced: bool,
    /// A holder that knows it lost its lock releases it under a lock-delay by keeping its keys
    /// for the delay (`scripts/linger.lua`, `engine` invariant 5). Off: compare-and-delete.
    pub lost_release_lingers: bool,
    /// An operator's unforced mark refuses a server that started less than `max_ttl` ago
    /// (`mark::refused`, `Mark::RecentlyStarted`). Off: only `vouch.lua`'s own refusals.
    pub mark_checks_uptime: bool,
    /// First-sight trust is opt-in, on the deployment's word that uptimes do not lie
    /// (`first_sight` invariant 7). Off: on by default, also where a host clock steps.
    pub first_sight_opt_in: bool,
    /// First sight trusts a node only with its whole group: every node unmarked and clean
    /// (`first_sight::decide`). Off: each clean, unmarked node on its own.
    pub first_sight_needs_group: bool,
    /// A token on request advances a node's counter only while the lock's key there holds our
    /// value (`scripts/fence_held.lua`, `fencing` invariant 8). Off: every node advances and
    /// proposes, our key there or not.
    pub fence_needs_held_key: bool,
    /// A fence round, and its store round, count only the lock's voters: the nodes whose `SET`
    /// the acquisition counted (`fencing::Voters`, invariant 8). Off: any node whose key holds
    /// our value counts (a `SET` that landed after the round included).
    pub fence_counts_voters_only: bool,
    /// A vote on a replicated node's primary (behind Sentinel) counts only once its replica
    /// acknowledged it (`WAIT n`: `succession` invariant 1, `nodes/replica_acks.rs`): the model
    /// counts a yes only with the replica holding the write (it acknowledges in the same step).
    /// Off: the primary's `OK` counts alone, and a failover may promote a replica that never
    /// had a counted lock.
    pub vote_waits_for_replicas: bool,
    /// After a failover, a client judges a replicated node's new primary with the library's
    /// `Lineage::judge` (`succession` invariants 2 to 4, `nodes/health.rs`'s `succeed`): at
    /// once only if it continues the history the client followed and the client saw it caught
    /// up after its start (`Succession::Continues`, the uptime rule waived); a replica the
    /// sentinels listed with another `run_id` (restarted since) or another history is out for
    /// `max_ttl`; anything else by the ordinary rules, its uptime included. Off: the server the
    /// sentinels name is trusted at once on its address (`Continues` for any promoted server,
    /// the uptime rule waived), which trusts a replica restarted from an old snapshot and
    /// promoted before it caught up.
    pub promotion_judged_by_lineage: bool,
}

impl Default for Rules {
    fn default() -> Self {
        Self::ALL
    }
}

impl Rules {
    /// Every rule on: the library as it is.
    pub const ALL: Rules = Rules {
        quarantine: true,
        marker_names_replid: true,
        vote_reads_history: true,
        release_honours_delay: true,
        release_bound_covers_lag: true,
        trust_window: true,
        drift_term: true,
        strict_majority: true,
        extension_needs_quorum: true,
        release_bound_from_value: true,
        undrawn_marker_replaced: true,
        lost_release_lingers: true,
        mark_checks_uptime: true,
        first_sight_opt_in: true,
        first_sight_needs_group: true,
        fence_needs_held_key: true,
        fence_counts_voters_only: true,
        vote_waits_for_replicas: true,
        promotion_judged_by_lineage: true,
    };
}
