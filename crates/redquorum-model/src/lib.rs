//! A model of redquorum's protocol, checked with `stateright`: within stated bounds, every
//! interleaving of clients, nodes, faults and the network keeps every guarantee, and with any one
//! rule removed ([`Rules`]) the checker finds the schedule that breaks it.
//!
//! # The library's code, and what is modelled
//! The decisions are the library's own, imported from `redquorum::protocol` (the library's
//! folder of pure decisions, hidden from its docs; not a stable API):
//! - vote counting: `Tally`, `majority` (`quorum.rs`);
//! - validity: `deadline`, `drift`, and `late_release_bound`, the bound a holder's release sends
//!   (`validity.rs`);
//! - the quarantine: `Memory::judge`, `Memory::lost_data`, `Observation::from_info`,
//!   `Marker::from_reply`, `marker_owner`, `id_of` (`quarantine.rs`, `marker.rs`);
//! - fencing: `clock_grain`, `trust_window`, `Advance::initial_counter`, `Advance::proposal`,
//!   `Proposals::add`, `Proposals::token` (`fencing.rs`); a token on request (`fencing`
//!   invariant 8) counts on the acquisition's voters, kept here as a bit set of the model's own
//!   ([`client::Fence`]) where the library has `fencing::Voters`, so that the symmetry
//!   reduction can rename its nodes;
//! - a release by value: `value::new`, `release_bound_by_value` (`value.rs`);
//! - first sight and marks: `first_sight::sighting`, `first_sight::decide`, `mark::refused`,
//!   `marker::extended`, `MarkerValue::tells_servers_apart`, `Memory::held_off`
//!   (`first_sight.rs`, `mark.rs`, `marker.rs`);
//! - a replicated node's succession: `Lineage::judge`, `Lineage::listed`,
//!   `Lineage::caught_up`, `Candidate::read` (`succession.rs`), the verdict's `Continues`
//!   waiving the uptime rule through `Observation::succeeded`; the library's `Lineage` is not
//!   `Clone`, so the model keeps the facts it is made of and builds it through those methods
//!   at each judgement ([`client::Lineage`]).
//!
//! Modelled, because they run on the servers or are I/O: what the nodes do (a standalone
//! master; a cluster node's master and replica; a replicated node's primary and replica behind
//! Sentinel, whose votes wait for the replica, `WAIT`), mirroring the
//! scripts and commands ([`node`]: `marker.lua`, `vouch.lua`, the native fenced pipeline,
//! `acquire_fenced.lua` with `fence_advance.lua`, the plain `SET NX PX` and `fence_held.lua` of
//! a token issued on request, `fence.lua`, `extend.lua`, `linger.lua`,
//! `release_timely.lua`, the standard compare-and-delete); when each client takes each step
//! ([`model`], [`client`]); faults ([`faults`]); clocks ([`clock`]). The old rules the switches restore (the counter floor, `N/2`, `start + ttl`, a
//! marker naming the `run_id` alone, a release that ignores the delay, a release bound of the
//! delay alone) are written here, since the library no longer has them.
//!
//! # Why a plain state machine, not stateright's actors
//! Time is global here (real time, and each process's clock as an offset from it), faults
//! rewrite a node's processes, and a health check reads a node and judges it in one step: a
//! [`stateright::Model`] with an explicit set of requests in flight says all of that directly,
//! where actors would need timers and a network model that hide the clocks.
//!
//! # What the checker is spared
//! Reductions keep the bounds that CI checks exhaustively within its time, each argued where it
//! is made: the symmetry reduction ([`symmetry`]: states that differ only in which client or
//! node is which are one); a rolled-back round sends no release to a node where it can only be
//! a no-op ([`model`]'s `roll_back`); a holder with no attempts left does not vanish, since the
//! holder that stays can do all it could ([`model`]'s actions); a late client arrives once the
//! faults are spent ([`Bounds::late_clients`]); and a scenario may forbid releases
//! ([`Bounds::releases`]) when its hole needs none.
//!
//! # Not modelled
//! Sets of resources, fair waiting, forced marks, clients with different node timeouts, the
//! client's clock estimate (a request carries the node's exact clock at the time it was built),
//! counter retention (longer than every horizon), `WAIT` on a cluster node's master (a
//! replicated node's is: [`Rules::vote_waits_for_replicas`]), a replicated node with more than
//! one replica, replicas seen away (the sentinels' candidate list, votes counted without a
//! replica, `Lineage::online`), sentinels that disagree, a promoted replica's receipt
//! (`succession` invariant 5: the model's replicas are up an hour, or restarted within the run,
//! a run no receipt names), a client VM whose clocks stand still. Semaphores and read-write locks only by their counting rules ([`counting`]).
//! `docs/model.md` has the bounds and measured costs.

pub mod client;
pub mod clock;
pub mod counting;
pub mod faults;
pub mod model;
pub mod node;
pub mod properties;
pub mod rules;
pub mod state;
pub mod symmetry;
pub mod trace;

pub use faults::{Fault, FaultKinds};
pub use model::{Action, Bounds, Protocol, State};
pub use rules::Rules;
pub use trace::{Step, Trace};

use std::time::{Duration, Instant};

use stateright::{Checker, Model};

/// How far a check may go before it stops short of the whole space. An exhaustive check is
/// judged by what it visited, never by the clock: a loaded machine takes longer over the same
/// states, and must reach the same verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Stop once this many states were generated (every successor counted, repeats included, as
    /// stateright counts them): the same cap on any machine. For an exhaustive check, a cap far
    /// above what the bounds generate turns bounds grown beyond what CI affords into a failure
    /// (not exhausted) instead of a run that never ends.
    States(usize),
    /// Stop after this long: for explorations that never meant to finish (`examples/deep.rs`).
    Time(Duration),
}

impl Budget {
    /// The tests' cap: 2.5 times what the largest of them generates (`Bounds::CI` with every
    /// rule on: 10.1 million states generated, 3.2 million unique; `docs/model.md`), so bounds
    /// grown past it fail within minutes rather than run for hours.
    pub const TESTS: Budget = Budget::States(25_000_000);
}

/// What one bounded check found.
#[derive(Debug)]
pub struct Report {
    /// Unique states explored.
    pub states: usize,
    /// States generated, repeats included: what [`Budget::States`] caps. The same count for
    /// the same bounds on every run that visits the whole space.
    pub generated: usize,
    /// How long it took.
    pub elapsed: Duration,
    /// A counterexample for each safety property broken.
    pub counterexamples: Vec<Trace>,
    /// Whether the liveness property (`sometimes`) was reached.
    pub live: bool,
    /// The witnesses of time passing ([`properties::WITNESSES`]) that were reached.
    pub witnessed: Vec<&'static str>,
    /// Whether the checker visited every reachable state: it was not stopped by its budget,
    /// nor at a first counterexample. Only then does an empty `counterexamples` mean that no
    /// schedule within the bounds breaks a guarantee.
    pub exhausted: bool,
}

/// Checks the model of `bounds` under `rules` (breadth first, so a counterexample is short,
/// though not always a shortest one: stateright checks a block of states at a time and a later
/// violation of the block may be the one reported), on `threads` threads, within `budget`.
pub fn check(bounds: Bounds, rules: Rules, threads: usize, budget: Budget) -> Report {
    check_until(bounds, rules, threads, budget, false)
}

/// [`check`], stopping at the first counterexample when `first` (a search for a known hole).
pub fn check_until(
    bounds: Bounds,
    rules: Rules,
    threads: usize,
    budget: Budget,
    first: bool,
) -> Report {
    search(bounds, rules, threads, budget, first, Search::Breadth)
}

/// [`check`] with the symmetry reduction ([`symmetry`]): depth first (stateright reduces
/// symmetry only there), so a counterexample is not the shortest; for the all-rules checks,
/// where the point is to find none.
pub fn check_symmetric(bounds: Bounds, rules: Rules, threads: usize, budget: Budget) -> Report {
    search(bounds, rules, threads, budget, false, Search::Symmetric)
}

/// How the checker walks the space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// Breadth first: a counterexample is short (within a block of states of a shortest one:
    /// [`check`]).
    Breadth,
    /// Depth first: the quickest way down a long schedule (a counterexample is not the
    /// shortest).
    Depth,
    /// Depth first with the symmetry reduction ([`symmetry`]; stateright reduces symmetry only
    /// depth first): for the checks with every rule on, where the point is to find nothing.
    Symmetric,
}

/// Checks the model of `bounds` under `rules`, walking it as `how` says, on `threads` threads,
/// within `budget`, stopping at the first counterexample when `first` (a search for a known
/// hole).
pub fn search(
    bounds: Bounds,
    rules: Rules,
    threads: usize,
    budget: Budget,
    first: bool,
    how: Search,
) -> Report {
    let started = Instant::now();
    let model = Protocol::new(bounds, rules);
    let names: Vec<&'static str> = model.properties().iter().map(|p| p.name).collect();
    let mut builder = model.checker().threads(threads);
    if first {
        builder = builder.finish_when(stateright::HasDiscoveries::AnyFailures);
    }
    builder = match budget {
        Budget::States(cap) => builder.target_state_count(cap),
        Budget::Time(cap) => builder.timeout(cap),
    };
    match how {
        Search::Breadth => report(&builder.spawn_bfs().join(), &names, started, budget, first),
        Search::Depth => report(&builder.spawn_dfs().join(), &names, started, budget, first),
        Search::Symmetric => {
            let checker = builder.symmetry_fn(symmetry::representative).spawn_dfs();
            report(&checker.join(), &names, started, budget, first)
        }
    }
}

fn report(
    checker: &impl Checker<Protocol>,
    names: &[&'static str],
    started: Instant,
    budget: Budget,
    first: bool,
) -> Report {
    let elapsed = started.elapsed();
    let mut counterexamples = Vec::new();
    let mut live = false;
    let mut witnessed = Vec::new();
    for &name in names {
        let found = checker.discovery(name);
        if name == properties::LIVENESS {
            live = found.is_some();
        } else if properties::WITNESSES.contains(&name)
            || properties::FENCE_WITNESSES.contains(&name)
            || name == properties::FIRST_SIGHT_TRUSTED
            || name == properties::PROMOTED_VOTES
        {
            if found.is_some() {
                witnessed.push(name);
            }
        } else if let Some(path) = found {
            counterexamples.push(Trace::of(name, path));
        }
    }
    let generated = checker.state_count();
    let capped = match budget {
        Budget::States(cap) => generated >= cap,
        Budget::Time(cap) => elapsed >= cap,
    };
    let stopped_early = first && !counterexamples.is_empty();
    Report {
        states: checker.unique_state_count(),
        generated,
        elapsed,
        exhausted: !capped && !stopped_early,
        counterexamples,
        live,
        witnessed,
    }
}
