//! The fault scheduler: a reproducible plan drawn from the seed ([`plan`], pure, here), and the
//! injector that carries it out against the run's servers, proxies and clients, recording every
//! applied event as a [`FaultEvent`](crate::history::FaultEvent) and every node's up-time
//! (`injector`, a file of its own: it only reads the plan).
//!
//! # The plan
//! The first fault starts [`FIRST_AT`] into the run, then one every 1–3 s; each lasts 0.5–2 s (a
//! partition a TTL longer, a failover [`FAILOVER_LAG`], a replacement at most [`REPLACE_AT_MOST`]) and is over [`QUIET_END`] before the run
//! ends, so recovery is part of the record. Each fault is of
//! one of the enabled kinds, drawn at random:
//!
//! | kind | what it does to a node (or client) | undone by |
//! |---|---|---|
//! | `kill` | `SIGKILL` (in a failover pair: and promote the replica) | restart with its data (AOF, `appendfsync always`) |
//! | `restart` | `SIGKILL` (in a failover pair: and promote the replica) | restart with its data deleted (a lost disk) |
//! | `pause` | `SIGSTOP`: connections stay open, nothing is answered | `SIGCONT` |
//! | `delay` | its proxy holds every chunk back 50–300 ms | heal |
//! | `drop` | its proxy closes every open connection | (instant) |
//! | `client-pause` | the client, in its next critical section, sleeps past its validity by 100–700 ms after its last validity check and before its write; it then writes, leaves and releases, late | (instant) |
//! | `client-crash` | the client, in its next critical section, crashes after its work: it leaves at once and abandons its lock, unreleased (`Lock::detach`), as a dead process would; the lock lives until its keys expire, which with a lock-delay is the delay after the holder's validity | (instant) |
//! | `client-handoff` | the library's strategies only: the client, in its next critical section, after its work, leaves at once and hands its lock to another process (`Lock::detach`), which extends it by value (`Redlock::extend_value`, a TTL from now) from a manager of its own without a lock-delay, then it too walks away: nobody releases it. The keys must keep the holder's delay (the library's engine invariant 9): the lock lives until the extension's deadline plus the delay. An extension that fails, or a reader's hold (never extended), leaves a crash's lock | (instant) |
//! | `restart-burst` | a majority of nodes, one after the other: `SIGKILL`, then a restart with its data deleted | (instant) |
//! | `flush` | `FLUSHALL` on a majority of nodes, over a connection of its own: data lost by a running server (an operator's mistake, eviction) | (instant) |
//! | `replace` | a majority of proxies switch to their spares: different, long-running servers without data, behind the same addresses; open connections are closed | switched back |
//! | `replace-marked` | as `replace`, and each spare is first marked by hand the way an operator once did (`SET redlock-node-marker manual`), the same word on every spare: a replacement that passes for a marked server unless a word written by hand vouches for nothing (the library's `marker` invariant 5) | switched back |
//! | `blackhole` | its proxy stops forwarding on every open connection, which stays open; new connections work | the black-holed connections are closed |
//! | `partition` | independent masters only: every client is cut off from a minority of the nodes, a different one per client group (a *ring of majorities*: group `g` reaches the majority of consecutive slots from `g + offset` on, `offset` drawn per fault); its connections to the others are closed and new ones refused, through ports of the proxies that only that group uses; it lasts 2.5–4 s ([`PARTITION_EXTRA`]) | healed: every client reaches every node |
//! | `failover` | cluster, Sentinel and endpoint layouts only: a majority of the Redis Clusters (or the Sentinel node, or one of the two replicas behind the address) stop replicating to their replica for [`FAILOVER_LAG`], longer than a TTL, while clients keep locking | the replicas take over (`CLUSTER FAILOVER TAKEOVER`; `SENTINEL FAILOVER`; `REPLICAOF NO ONE` and the address moved), missing every write of that window |
//! | `failback` | cluster layout only, from [`FAILBACK_FROM`] on: as `failover` for [`FAILBACK_WINDOW`], and a client is armed to crash in its next critical section, abandoning a lock the replicas never get | once it holds: each replica takes over with its client writes paused, its old master resynchronises from it and takes over again (see *How `failback` returns a master without its locks*) |
//!
//! Which kinds apply depends on the layout (`Layout::supports`): the cluster layout has no
//! proxies (cluster routing needs the servers' real addresses), so `delay`, `drop`,
//! `blackhole` and `replace` are left out of its plan, and so are `kill`, `restart` and
//! `restart-burst`; `failback` applies to the cluster layout alone, `failover` to it and to the
//! Sentinel layout. The Sentinel
//! layout (no proxies either) takes `kill`, `pause`, `failover`, `flush` and the client faults:
//! `kill` and `pause` hit the primary, and the sentinels fail over by themselves when it stays
//! down for longer than their `down-after-milliseconds` (1 s); a paused primary that wakes after
//! that is a split brain. `client-handoff` applies to the library's strategies alone, whatever
//! the layout (`Strategy::supports`). The runner drops the kinds that do not apply before
//! planning.
//!
//! # How `failover` makes a replica miss a window
//! The replica is told a wrong `masterauth` (`CONFIG SET masterauth …`) and the master closes
//! its replication link (`CLIENT KILL TYPE replica`): the replica reconnects every second, and
//! every handshake fails at `AUTH` (the master has no password), so it receives nothing. After
//! [`FAILOVER_LAG`] (and an aim, invariant 4) it takes over with `CLUSTER FAILOVER TAKEOVER`,
//! which needs no election (a one-master cluster has no other master to vote), gets its
//! `masterauth` back, and the old master turns replica of it and resynchronises, losing the
//! window's writes. (Making the master drop the link with a tiny `client-output-buffer-limit`
//! does not work on Redis 7: a replica's hard limit is raised to `repl-backlog-size`, at least
//! 16 kB, which lock traffic never has pending.) With the window longer than a TTL, every key
//! the promoted replica has is expired: every live lock on a majority is gone, the race of the
//! Redlock page made certain, as in the failover pair.
//!
//! # How `failback` returns a master without its locks
//! The failback of a shard's master Y and replica X, as a review found it (the library's
//! `quarantine` invariant 6): Y grants a lock that never reaches X, X leads without it while no
//! client writes to X (`CLIENT PAUSE … WRITE`: otherwise the first client to check X would
//! rewrite the marker it got from Y, and Y would get that back), Y resynchronises from X in full
//! and leads again: the same process, its own marker, a long uptime, and no lock. The lock
//! must stay valid through it (about 50 ms, but the late joiners that start over after each
//! fault event take up to a second to lock again on two cores), so the fault arms a client to
//! crash in its next critical section that starts once the replicas are cut, and is aimed at
//! that section ([`FAILBACK_AIM`]). It starts only from [`FAILBACK_FROM`] on: on younger
//! servers the uptime rule keeps a failed-back master out anyway.
//!
//! # Why partitions are per client
//! Every other network fault acts on a node's proxy, so a node is reachable for every client or
//! for none, and every client's view of the nodes is the same. Mutual exclusion with a majority
//! quorum does not care, but a semaphore kept as a count per node does: its flaw needs three
//! clients that each reach a different majority (see `strategies`). Clients are split into
//! groups (client `c` in group `c mod slots`, so at most `slots` groups), and each proxy listens
//! on one more port per group. A partition starts only when no node is impaired, and no node
//! fault starts during it, so each group still reaches a majority (invariant 2 holds per
//! client). Only the independent-masters layout has it: with one node there is no minority to
//! cut.
//!
//! A partition lasts a TTL longer than other faults. A release a cut-off client cannot deliver
//! leaves its key (or, for a count per node, its entry) on the nodes it cannot reach until the
//! key expires, up to a TTL later; in a partition shorter than that, those leftovers fill the
//! nodes and blur the ring. With 0.5–2 s partitions a count per node was caught in 4 of 5 10 s
//! runs; with 2.5–4 s ones, in 8 of 8, each with 31 to 74 entries over its permits.
//!
//! The data-loss faults (`restart-burst`, `flush`, `replace`, `failover`) hit a majority at once, aimed at
//! a fresh holder (invariant 4): a node that lost a lock only matters to a second client that
//! can complete a majority with it, and a minority never can when the holder has every node.
//! They start only when no node is impaired, and a design that quarantines such nodes is
//! unavailable for up to a TTL afterwards, by design.
//!
//! # Invariants
//! 1. The plan is a pure function of its inputs: the same seed gives the same faults, in the
//!    same order, at the same offsets. Only the moment each is applied varies with the machine.
//! 2. At most a minority of slots is impaired (killed, paused or delayed) at any time: at most
//!    `max(1, (slots − 1) / 2)`, so a single node can still be taken down. The plan keeps a
//!    margin ([`SLACK`]) for late starts, and the injector checks again before applying.
//! 3. Every fault is undone before the run ends, and on stop every paused node is resumed; the
//!    injector performs at most two steps per planned fault, each bounded in time.
//! 4. Kills and restarts are aimed: the injector waits up to [`AIM_WAIT`] for a client that has
//!    just entered a critical section (at most [`FRESH`] ago, with at least [`STAYS`] of work
//!    left) while another client is trying to acquire the same resource, because a node lost
//!    right after granting a lock somebody else wants is the case that matters. In a
//!    failover pair it also waits for the replica to lack that lock's key (`EXISTS`), which is
//!    the race of the Redlock page: the master dies before the write reaches the replica. After
//!    [`AIM_WAIT`] the fault is applied anyway. A `failover` is aimed at its promotion, its
//!    second step: the replicas, cut off for longer than a TTL, lack every live lock.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

pub use crate::fault::Fault;

pub(crate) mod injector;

/// When the first fault may start: the clients are busy by then.
pub const FIRST_AT: Duration = Duration::from_secs(1);
/// Every fault is over this long before the run ends.
pub const QUIET_END: Duration = Duration::from_secs(1);
/// Margin kept after a node fault's planned end before the plan counts the node as whole again:
/// a restart takes time, and an aimed kill may start late.
pub const SLACK: Duration = Duration::from_secs(1);
/// How long a kill waits for a fresh lock holder to aim at (invariant 4).
pub const AIM_WAIT: Duration = Duration::from_secs(1);
/// A holder is fresh for this long after entering its section.
pub const FRESH: Duration = Duration::from_millis(100);
/// The work a fresh holder must have left.
pub const STAYS: Duration = Duration::from_millis(250);
/// How long a `failover` keeps the replicas from replicating before they take over: longer than
/// a lock's TTL, so the promoted replicas know no lock anybody still relies on.
pub const FAILOVER_LAG: Duration =
    crate::strategies::TTL.saturating_add(Duration::from_millis(500));

/// The longest a `replace` keeps the spares behind the addresses: less than a TTL (the shortest
/// `max_ttl`), so that every client still quarantines the spares when the old servers are put
/// back. Putting a server back after its stand-in was trusted and voted is a replacement of its
/// own, by a server that shows its old marker and its durability, without the stand-in's locks:
/// a client that meets it for the first time (a late joiner) cannot tell it from a server that
/// never left, the documented limit of a marker restored with old data
/// (`docs/guarantees.md`). Found by `replace-marked` runs (seed 3): a 2 s replacement's spares
/// were trusted a few ms before the switch back, and a late joiner got the lock again from the
/// old servers.
pub const REPLACE_AT_MOST: Duration =
    crate::strategies::TTL.saturating_sub(Duration::from_millis(500));

/// How long a `failback` keeps the replicas from replicating before they take over: short, so
/// that the old masters lead again (in about 50 ms more, measured) while the lock they granted
/// in that window, and their replicas never got, is still valid.
pub const FAILBACK_WINDOW: Duration = Duration::from_millis(300);

/// How long a `failback` waits for its client to enter the critical section it abandons: the
/// clients start over after the fault's first event (late joiners), which takes up to about a
/// second on two cores.
pub const FAILBACK_AIM: Duration = Duration::from_secs(2);

/// The earliest a `failback` starts: once the servers have been up for longer than the
/// library's quarantine of a cluster master (`max_ttl` plus the cluster's node timeout, 5 s),
/// with a second to spare. On younger servers the uptime rule keeps the failed-back master out
/// anyway (it was promoted, so it is no longer taken as durable), which would hide whether the
/// marker rule holds; the reproduction this fault follows ran on servers up for longer.
pub const FAILBACK_FROM: Duration = crate::strategies::TTL.saturating_add(Duration::from_secs(6));

/// How much longer than the usual 0.5–2 s a partition lasts: a lock's TTL, so that every
/// partition outlasts the keys its cut-off clients could not release.
pub const PARTITION_EXTRA: Duration = crate::strategies::TTL;

/// One fault of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    /// When it starts, from the start of the run.
    pub at: Duration,
    /// How long it lasts (for kinds that are undone).
    pub lasts: Duration,
    /// What it does.
    pub action: Action,
}

/// What a planned fault does, to whom. Nodes are named by slot: the client-facing position,
/// which in a failover pair is whichever node is master when the fault starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Kill the node, bring it back with its data.
    Kill {
        /// The slot.
        slot: usize,
    },
    /// Kill the node, bring it back without its data.
    Restart {
        /// The slot.
        slot: usize,
    },
    /// Stop the node, then continue it.
    Pause {
        /// The slot.
        slot: usize,
    },
    /// Delay the node's traffic, then heal.
    Delay {
        /// The slot.
        slot: usize,
        /// The added delay per chunk, each way.
        ms: u64,
    },
    /// Close the node's connections.
    Drop {
        /// The slot.
        slot: usize,
    },
    /// Restart `count` slots from `first` on (wrapping) without their data, one after the other.
    RestartBurst {
        /// The first slot.
        first: usize,
        /// How many.
        count: usize,
    },
    /// `FLUSHALL` on `count` slots from `first` on (wrapping).
    Flush {
        /// The first slot.
        first: usize,
        /// How many.
        count: usize,
    },
    /// Put `count` slots from `first` on (wrapping) behind their spares, then back.
    Replace {
        /// The first slot.
        first: usize,
        /// How many.
        count: usize,
        /// Whether each spare is first marked by hand (`replace-marked`).
        marked: bool,
    },
    /// Black-hole the slot's open connections, then close them.
    Blackhole {
        /// The slot.
        slot: usize,
    },
    /// Cut `count` clusters from `first` on (wrapping) off their replicas, then promote the
    /// replicas.
    Failover {
        /// The first slot.
        first: usize,
        /// How many.
        count: usize,
    },
    /// Cut `count` clusters from `first` on (wrapping) off their replicas, crash `client` in
    /// its next critical section (its lock, taken in that window, stays valid and unreleased),
    /// promote the replicas, then make the old masters lead again once they resynchronised from
    /// them.
    Failback {
        /// The first slot.
        first: usize,
        /// How many.
        count: usize,
        /// The client whose lock the failback is aimed at.
        client: u32,
    },
    /// Pause a client past its validity in its next critical section.
    ClientPause {
        /// The client.
        client: u32,
        /// How far past its validity, in ms.
        extra_ms: u64,
    },
    /// Crash a client in its next critical section, its lock abandoned unreleased.
    ClientCrash {
        /// The client.
        client: u32,
    },
    /// Make a client hand its lock, in its next critical section, to another process that
    /// extends it by value without a lock-delay of its own; then the lock is abandoned.
    ClientHandoff {
        /// The client.
        client: u32,
    },
    /// Cut every client group off the slots outside its majority in a ring rotated by `offset`,
    /// then heal.
    Partition {
        /// The ring's rotation.
        offset: usize,
    },
}

impl Action {
    /// The kind of fault this is.
    #[must_use]
    pub fn kind(self) -> Fault {
        match self {
            Action::Kill { .. } => Fault::Kill,
            Action::Restart { .. } => Fault::Restart,
            Action::Pause { .. } => Fault::Pause,
            Action::Delay { .. } => Fault::Delay,
            Action::Drop { .. } => Fault::Drop,
            Action::ClientPause { .. } => Fault::ClientPause,
            Action::RestartBurst { .. } => Fault::RestartBurst,
            Action::Flush { .. } => Fault::Flush,
            Action::Replace { marked: false, .. } => Fault::Replace,
            Action::Replace { marked: true, .. } => Fault::ReplaceMarked,
            Action::Blackhole { .. } => Fault::Blackhole,
            Action::Failover { .. } => Fault::Failover,
            Action::Failback { .. } => Fault::Failback,
            Action::ClientCrash { .. } => Fault::ClientCrash,
            Action::Partition { .. } => Fault::Partition,
            Action::ClientHandoff { .. } => Fault::ClientHandoff,
        }
    }

    /// The slots it hits, given `slots` in all (none for a client pause, crash or handoff, every
    /// one for a partition).
    #[must_use]
    pub fn slots(self, slots: usize) -> Vec<usize> {
        match self {
            Action::Kill { slot }
            | Action::Restart { slot }
            | Action::Pause { slot }
            | Action::Delay { slot, .. }
            | Action::Drop { slot }
            | Action::Blackhole { slot } => vec![slot],
            Action::RestartBurst { first, count }
            | Action::Flush { first, count }
            | Action::Replace { first, count, .. }
            | Action::Failover { first, count }
            | Action::Failback { first, count, .. } => {
                (0..count).map(|i| (first + i) % slots.max(1)).collect()
            }
            Action::Partition { .. } => (0..slots).collect(),
            Action::ClientPause { .. }
            | Action::ClientCrash { .. }
            | Action::ClientHandoff { .. } => Vec::new(),
        }
    }
}

/// A majority of `slots`.
#[must_use]
pub fn majority(slots: usize) -> usize {
    slots / 2 + 1
}

/// At most this many slots impaired at once (invariant 2).
#[must_use]
pub fn max_impaired(slots: usize) -> usize {
    (slots.saturating_sub(1) / 2).max(1)
}

/// Plans the faults of a run of `duration` over `slots` nodes and `clients` clients, from
/// `faults` (the enabled kinds) and `seed` (invariant 1).
#[must_use]
pub fn plan(
    faults: &[Fault],
    slots: usize,
    clients: u32,
    duration: Duration,
    seed: u64,
) -> Vec<Planned> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut planned = Vec::new();
    // Usable kinds only: no node faults without nodes, no client faults without clients.
    let kinds: Vec<Fault> = faults
        .iter()
        .copied()
        .filter(|f| {
            if f.hits_a_client() {
                clients > 0
            } else {
                slots > 0
            }
        })
        .collect();
    let Some(last_end) = duration.checked_sub(QUIET_END) else {
        return planned;
    };
    if kinds.is_empty() {
        return planned;
    }
    let min_lasts = Duration::from_millis(500);
    // Per slot: until when it is counted as impaired (planned end + SLACK).
    let mut busy_until = vec![Duration::ZERO; slots];
    let mut at = FIRST_AT;
    // At most one fault per second of run: the loop is bounded by the duration.
    while at + min_lasts <= last_end {
        let kind = kinds[rng.random_range(0..kinds.len())];
        let lasts = Duration::from_millis(rng.random_range(500..=2000)).min(last_end - at);
        // A failover's window is fixed, longer than a TTL (the draw above keeps other plans).
        let lasts = match kind {
            Fault::Failover => FAILOVER_LAG,
            Fault::Failback => FAILBACK_WINDOW,
            // Longer than a TTL: the releases the cut-off clients could not deliver leave keys
            // that expire within it, and the ring's own views decide the rest (the module docs).
            Fault::Partition => (lasts + PARTITION_EXTRA).min(last_end - at),
            Fault::Replace | Fault::ReplaceMarked => lasts.min(REPLACE_AT_MOST),
            _ => lasts,
        };
        let action = match kind {
            Fault::ClientPause => Some(Action::ClientPause {
                client: rng.random_range(0..clients),
                extra_ms: rng.random_range(100..=700),
            }),
            Fault::ClientCrash => Some(Action::ClientCrash {
                client: rng.random_range(0..clients),
            }),
            Fault::ClientHandoff => Some(Action::ClientHandoff {
                client: rng.random_range(0..clients),
            }),
            Fault::Partition => {
                let offset = rng.random_range(0..slots);
                // Only when no node is impaired, and none is while it lasts (the module docs).
                if busy_until.iter().all(|&until| until <= at) {
                    busy_until.fill(at + lasts + SLACK);
                    Some(Action::Partition { offset })
                } else {
                    None
                }
            }
            kind if kind.hits_a_majority() => {
                let first = rng.random_range(0..slots);
                let count = majority(slots);
                // Only when no node is impaired (and a failover's window fits in the run); the
                // slots stay busy for the fault and the restarts or quarantines that follow it.
                let early = kind == Fault::Failback && at < FAILBACK_FROM;
                if !early && busy_until.iter().all(|&until| until <= at) && at + lasts <= last_end {
                    let busy = match kind {
                        Fault::Replace | Fault::ReplaceMarked => at + lasts + SLACK,
                        Fault::Failover | Fault::Failback => at + lasts + SLACK + SLACK,
                        _ => at + SLACK + SLACK,
                    };
                    for i in 0..count {
                        busy_until[(first + i) % slots] = busy;
                    }
                    Some(match kind {
                        Fault::RestartBurst => Action::RestartBurst { first, count },
                        Fault::Flush => Action::Flush { first, count },
                        Fault::Failover => Action::Failover { first, count },
                        Fault::Failback => Action::Failback {
                            first,
                            count,
                            client: rng.random_range(0..clients.max(1)),
                        },
                        _ => Action::Replace {
                            first,
                            count,
                            marked: kind == Fault::ReplaceMarked,
                        },
                    })
                } else {
                    None
                }
            }
            _ => {
                let free: Vec<usize> = (0..slots).filter(|&s| busy_until[s] <= at).collect();
                let impaired = slots - free.len();
                // A drop impairs nothing for long, so it may hit any slot.
                let slot = if kind.impairs() {
                    free.get(rng.random_range(0..free.len().max(1))).copied()
                } else {
                    Some(rng.random_range(0..slots))
                };
                match slot {
                    Some(slot) if !kind.impairs() || impaired < max_impaired(slots) => {
                        if kind.impairs() {
                            busy_until[slot] = at + lasts + SLACK;
                        }
                        Some(match kind {
                            Fault::Kill => Action::Kill { slot },
                            Fault::Restart => Action::Restart { slot },
                            Fault::Pause => Action::Pause { slot },
                            Fault::Delay => Action::Delay {
                                slot,
                                ms: rng.random_range(50..=300),
                            },
                            Fault::Blackhole => Action::Blackhole { slot },
                            _ => Action::Drop { slot },
                        })
                    }
                    // A minority is already impaired: skip this turn (invariant 2).
                    _ => None,
                }
            }
        };
        if let Some(action) = action {
            planned.push(Planned { at, lasts, action });
        }
        at += Duration::from_millis(rng.random_range(1000..=3000));
    }
    planned
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: Duration = Duration::from_secs(60);

    #[test]
    fn the_same_seed_gives_the_same_plan() {
        let a = plan(&Fault::DEFAULT, 5, 8, RUN, 42);
        assert_eq!(a, plan(&Fault::DEFAULT, 5, 8, RUN, 42));
        assert_ne!(a, plan(&Fault::DEFAULT, 5, 8, RUN, 43));
        assert!(a.len() >= 10, "a fault every 1-3 s: {}", a.len());
    }

    #[test]
    fn faults_stay_inside_the_run_and_use_only_enabled_kinds() {
        for seed in 0..50 {
            for kinds in [
                &[Fault::Kill][..],
                &[Fault::ClientPause, Fault::Delay],
                &[Fault::ClientCrash],
                &[Fault::ClientHandoff, Fault::Kill],
            ] {
                for p in plan(kinds, 5, 4, Duration::from_secs(20), seed) {
                    assert!(p.at >= FIRST_AT, "{p:?}");
                    assert!(p.at + p.lasts <= Duration::from_secs(19), "{p:?}");
                    assert!(kinds.contains(&p.action.kind()), "{p:?}");
                    if let Action::ClientPause { client, .. }
                    | Action::ClientCrash { client }
                    | Action::ClientHandoff { client } = p.action
                    {
                        assert!(client < 4);
                    }
                }
            }
        }
    }

    #[test]
    fn never_more_than_a_minority_is_impaired() {
        for slots in 1..=7 {
            for seed in 0..50 {
                let planned = plan(&Fault::ALL, slots, 4, RUN, seed);
                // Sweep every start: count the impairing faults in force then.
                for p in &planned {
                    let at_once = planned
                        .iter()
                        .filter(|q| {
                            q.action.kind().impairs() && q.at <= p.at && p.at < q.at + q.lasts
                        })
                        .count();
                    assert!(
                        at_once <= max_impaired(slots),
                        "{slots} slots, seed {seed}: {at_once} at {:?}",
                        p.at
                    );
                }
            }
        }
    }

    #[test]
    fn partitions_never_meet_a_node_fault() {
        for seed in 0..50 {
            let planned = plan(&Fault::ALL, 5, 8, RUN, seed);
            for p in planned
                .iter()
                .filter(|p| p.action.kind() == Fault::Partition)
            {
                let clash = planned.iter().find(|q| {
                    q != &p
                        && (q.action.kind().impairs() || q.action.kind().needs_every_node())
                        && q.at < p.at + p.lasts + SLACK
                        && p.at < q.at + q.lasts
                });
                assert!(clash.is_none(), "seed {seed}: {p:?} and {clash:?}");
            }
        }
        let partitions = plan(&[Fault::Partition], 5, 8, RUN, 1);
        assert!(partitions.len() >= 10, "{partitions:?}");
        assert!(
            partitions
                .iter()
                .all(|p| matches!(p.action, Action::Partition { offset } if offset < 5))
        );
    }

    #[test]
    fn minorities() {
        assert_eq!(
            (1..=7).map(max_impaired).collect::<Vec<_>>(),
            [1, 1, 1, 1, 2, 2, 3]
        );
    }

    #[test]
    fn no_kinds_or_a_short_run_plan_nothing() {
        assert!(plan(&[], 5, 4, RUN, 1).is_empty());
        assert!(plan(&Fault::DEFAULT, 5, 4, Duration::from_secs(2), 1).is_empty());
        assert!(plan(&[Fault::ClientPause], 5, 0, RUN, 1).is_empty());
        assert!(plan(&[Fault::ClientCrash], 5, 0, RUN, 1).is_empty());
        assert!(plan(&[Fault::ClientHandoff], 5, 0, RUN, 1).is_empty());
    }

    #[test]
    fn handoffs_hit_a_client_only_and_only_when_named() {
        assert!(!Fault::DEFAULT.contains(&Fault::ClientHandoff));
        assert!(Fault::ALL.contains(&Fault::ClientHandoff));
        let planned = plan(&[Fault::ClientHandoff], 5, 3, RUN, 7);
        assert!(planned.len() >= 10, "a fault every 1-3 s: {planned:?}");
        for p in &planned {
            assert!(
                matches!(p.action, Action::ClientHandoff { client } if client < 3),
                "{p:?}"
            );
            assert!(p.action.slots(5).is_empty(), "{p:?}");
            assert!(!p.action.kind().impairs() && !p.action.kind().needs_every_node());
        }
        // Named among others, it takes its turns, and the plan stays a pure function.
        let mixed = plan(&[Fault::ClientHandoff, Fault::ClientCrash], 5, 8, RUN, 7);
        assert_eq!(
            mixed,
            plan(&[Fault::ClientHandoff, Fault::ClientCrash], 5, 8, RUN, 7)
        );
        assert!(
            mixed
                .iter()
                .any(|p| p.action.kind() == Fault::ClientHandoff)
        );
        assert!(mixed.iter().any(|p| p.action.kind() == Fault::ClientCrash));
    }

    #[test]
    fn lists_parse_and_unknown_kinds_are_named() {
        assert_eq!(
            Fault::parse_list(" kill,pause,,kill "),
            Ok(vec![Fault::Kill, Fault::Pause])
        );
        assert_eq!(Fault::parse_list("none"), Ok(vec![]));
        assert_eq!(
            Fault::parse_list("client-crash,client-handoff"),
            Ok(vec![Fault::ClientCrash, Fault::ClientHandoff])
        );
        assert_eq!("client-handoff".parse(), Ok(Fault::ClientHandoff));
        for f in Fault::ALL {
            assert_eq!(f.name().parse::<Fault>(), Ok(f));
        }
        let err = Fault::parse_list("kill,split-brain").unwrap_err();
        assert!(err.contains("\"split-brain\""), "{err}");
        assert!(err.contains("client-pause"), "{err}");
    }
}
