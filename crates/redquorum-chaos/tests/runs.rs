//! Whole runs against real `redis-server` processes: our Redlock survives every fault kind, and
//! a single master failing over to a lagging replica is caught handing a lock out twice; over
//! three Redis Clusters, our defaults survive a majority of shards failing over to replicas that
//! missed more than a TTL of writes, and the same library without a failover rule is caught;
//! they survive failbacks too, which catch a marker that names the `run_id` alone.
//! Semaphores: our permits (each a lock key) never let more than two hold two permits, under the
//! default faults and under partitions, while a count kept per node is caught with three.
//! Lock-delay: with it, a crashed holder's lock stays out of reach for the delay after its
//! deadline, and so does a lock handed to another process that extended it by value without a
//! delay of its own (after the extension's deadline); the same run without it is caught by the
//! same rule, and so is a release that frees the lock after its holder's validity.
//! Sentinel: our defaults over a primary with a replica behind three sentinels survive kills,
//! split brains and failovers to a replica that missed a window, and the same node trusting
//! whatever server the sentinels name is caught. Behind a fixed address that moves on failover:
//! our defaults survive kills, restarts and failovers to a replica that missed a window, and
//! trusting whatever server answers there is caught.
//!
//! Both runs use fixed seeds, so their fault plans are fixed; what varies with the machine is
//! only when each fault lands. Neither verdict depends on that: the first is the library's
//! guarantee, whatever the timing; the second comes from kills aimed at a freshly granted lock
//! that another client waits for, on a replica that lags by more than a lock's TTL (see the
//! runner's `faults` and `topology` docs), and a run has about three such kills.

use std::fmt::Write as _;
use std::time::Duration;

use redquorum_chaos::checker::check_with;
use redquorum_chaos::faults::{Planned, plan};
use redquorum_chaos::{
    ChaosConfig, Fault, FaultKind, History, Primitive, Progress, Strategy, Verdict, check,
    report::summary_table, run_until,
};
use tokio_util::sync::CancellationToken;

async fn run(config: ChaosConfig) -> (History, Verdict) {
    let history = run_until(&config, &CancellationToken::new(), &Progress::default())
        .await
        .unwrap_or_else(|e| panic!("{:?} run failed: {e} ({e:?})", config.strategy));
    let verdict = check(&history);
    (history, verdict)
}

/// How many times a hole test may run its planned run to catch its hole. A fault reaches a hole
/// only when it lands at the right moment of the workload (a lock held, and another client
/// trying before its holder releases), and a loaded machine can miss that moment in one run
/// (seen beside two busy CPU loops: plain Redlock through two restart bursts, no overlap). The
/// checker reports only what happened, so no run shows a hole that is not there: running the
/// same plan again, a bounded number of times, until the hole shows keeps what the test claims
/// (the fault reaches the hole), and a test of a safe design never repeats.
const HOLE_RUNS: usize = 3;

/// Runs `config` until `caught` says its hole showed, at most [`HOLE_RUNS`] times; the last
/// run's history and verdict, for the test's assertions.
async fn until_caught(
    config: &ChaosConfig,
    caught: impl Fn(&History, &Verdict) -> bool,
) -> (History, Verdict) {
    let mut last = run(config.clone()).await;
    for _ in 1..HOLE_RUNS {
        if caught(&last.0, &last.1) {
            break;
        }
        last = run(config.clone()).await;
    }
    last
}

fn unsafe_run(_: &History, verdict: &Verdict) -> bool {
    !verdict.is_safe()
}

/// The table, then every fault and overlap, for assertion messages.
fn explain(history: &History, verdict: &Verdict) -> String {
    let mut text = summary_table(verdict, history);
    for f in &history.faults {
        let _ = writeln!(text, "  {:>8} µs  {:?}  {}", f.at_us, f.kind, f.detail);
    }
    for r in &verdict.resources {
        for o in &r.overlaps {
            let _ = writeln!(
                text,
                "  overlap on {}: client {} and client {} over [{}, {}) µs",
                r.resource, o.first.client, o.second.client, o.from_us, o.to_us
            );
        }
        for e in &r.excess {
            let _ = writeln!(
                text,
                "  over the permits on {}: client {} entered with {} holders over [{}, {}) µs",
                r.resource,
                e.entering.client,
                e.holders.len(),
                e.from_us,
                e.to_us
            );
        }
        for d in &r.delay_violations {
            let _ = writeln!(
                text,
                "  within the lock-delay on {}: client {} entered at {} µs, client {}'s lock out \
                 of reach until {} µs",
                r.resource,
                d.next.client,
                d.next.enter_us,
                d.unreleased.client,
                d.protected_until_us
            );
        }
    }
    text
}

/// The first seed whose plan of `faults` (5 nodes, `clients` clients, `duration`) satisfies
/// `wanted`: plans are pure, so this is the same seed on every machine.
fn first_seed(
    faults: &[Fault],
    clients: u32,
    duration: Duration,
    wanted: impl Fn(&[Planned]) -> bool,
) -> u64 {
    (0..1000)
        .find(|&seed| wanted(&plan(faults, 5, clients, duration, seed)))
        .expect("some seed plans what is wanted")
}

fn count(planned: &[Planned], kind: Fault) -> usize {
    planned.iter().filter(|p| p.action.kind() == kind).count()
}

fn most_holders(verdict: &Verdict) -> usize {
    verdict
        .resources
        .iter()
        .map(|r| r.most_holders)
        .max()
        .unwrap_or(0)
}

/// Seed 3's plan for 15 s over 5 nodes and 6 clients has every kind of `NODE_FAULTS` (checked
/// below).
const SEED: u64 = 3;

/// The faults that hit one node or client at a time.
const NODE_FAULTS: [Fault; 5] = [
    Fault::Kill,
    Fault::Pause,
    Fault::Restart,
    Fault::Delay,
    Fault::ClientPause,
];

/// The faults added to reach the holes of trust: data lost by a majority, servers replaced
/// behind their address, connections gone silent.
const TRUST_FAULTS: [Fault; 4] = [
    Fault::RestartBurst,
    Fault::Flush,
    Fault::Replace,
    Fault::Blackhole,
];

/// The first seed whose plan of `faults` over `duration` (5 nodes, 6 clients) has every kind:
/// plans are pure, so this is the same seed on every machine.
fn seed_planning_all(faults: &[Fault], duration: Duration) -> u64 {
    (0..1000)
        .find(|&seed| {
            let planned = plan(faults, 5, 6, duration, seed);
            faults
                .iter()
                .all(|kind| planned.iter().any(|p| p.action.kind() == *kind))
        })
        .expect("some seed plans every kind")
}

fn applied(history: &History, kind: &FaultKind) -> bool {
    history.faults.iter().any(|f| &f.kind == kind)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_holds_under_every_fault_kind() {
    let config = ChaosConfig {
        strategy: Strategy::Redlock,
        nodes: 5,
        clients: 6,
        resources: 2,
        duration: Duration::from_secs(15),
        faults: NODE_FAULTS.to_vec(),
        seed: SEED,
        ..ChaosConfig::default()
    };
    let planned = plan(&config.faults, 5, 6, config.duration, SEED);
    for kind in NODE_FAULTS {
        assert!(
            planned.iter().any(|p| p.action.kind() == kind),
            "seed {SEED} plans no {kind}: {planned:?}"
        );
    }
    let (history, verdict) = run(config).await;
    let why = explain(&history, &verdict);
    assert!(verdict.is_safe(), "{why}");
    assert!(history.sections.len() >= 20, "too little work: {why}");
    for (what, seen) in [
        (
            "a kill",
            history.faults.iter().any(|f| f.kind == FaultKind::Kill),
        ),
        (
            "a restart without data",
            history
                .faults
                .iter()
                .any(|f| f.kind == FaultKind::Restart { with_data: false }),
        ),
        (
            "a client pause",
            history
                .faults
                .iter()
                .any(|f| matches!(f.kind, FaultKind::ClientPause { .. })),
        ),
    ] {
        assert!(seen, "{what} was planned but not applied: {why}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_lagging_replica_grants_a_lock_twice() {
    let config = ChaosConfig {
        strategy: Strategy::SingleWithFailover,
        nodes: 1,
        clients: 6,
        resources: 2,
        duration: Duration::from_secs(10),
        faults: vec![Fault::Kill],
        seed: SEED,
        ..ChaosConfig::default()
    };
    let (history, verdict) = until_caught(&config, unsafe_run).await;
    let why = explain(&history, &verdict);
    let failovers = history
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::Failover)
        .count();
    assert!(failovers >= 2, "{why}");
    let overlaps: usize = verdict.resources.iter().map(|r| r.overlaps.len()).sum();
    assert!(overlaps >= 1, "no lock was granted twice: {why}");
    assert!(!verdict.is_safe());
}

/// Ours stays safe when a majority loses its data (restarted empty, flushed, or replaced by
/// other servers behind the same addresses) and when connections go silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_holds_when_a_majority_loses_its_data() {
    let duration = Duration::from_secs(16);
    let seed = seed_planning_all(&TRUST_FAULTS, duration);
    let (history, verdict) = run(ChaosConfig {
        strategy: Strategy::Redlock,
        nodes: 5,
        clients: 6,
        resources: 2,
        duration,
        faults: TRUST_FAULTS.to_vec(),
        seed,
        ..ChaosConfig::default()
    })
    .await;
    let why = explain(&history, &verdict);
    assert!(verdict.is_safe(), "{why}");
    assert!(history.sections.len() >= 10, "too little work: {why}");
    for kind in [
        FaultKind::Restart { with_data: false },
        FaultKind::Flush,
        FaultKind::Replace { back: false },
        FaultKind::Blackhole,
    ] {
        assert!(applied(&history, &kind), "no {kind:?} applied: {why}");
    }
}

/// Review schedule 1 under faults: a majority of nodes replaced by servers an operator marked
/// by hand, all with the same word. Ours treats the word as no marker (`marker` invariant 5):
/// safe, late joiners included. With the word vouching (the replaced rule), a client takes the
/// replacements for marked servers and a lock is granted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_marked_by_hand_is_no_marked_server() {
    let config = |strategy| ChaosConfig {
        strategy,
        nodes: 5,
        clients: 6,
        resources: 2,
        duration: Duration::from_secs(8),
        faults: vec![Fault::ReplaceMarked],
        seed: SEED,
        ..ChaosConfig::default()
    };
    let (history, verdict) = run(config(Strategy::Redlock)).await;
    let why = explain(&history, &verdict);
    assert!(verdict.is_safe(), "{why}");
    assert!(history.sections.len() >= 10, "too little work: {why}");
    assert!(
        history
            .faults
            .iter()
            .any(|f| f.detail.contains("marked by hand")),
        "no replace-marked applied: {why}"
    );
    let (history, verdict) =
        until_caught(&config(Strategy::RedlockHandMarkerVouches), unsafe_run).await;
    let why = explain(&history, &verdict);
    assert!(
        !verdict.is_safe(),
        "the replaced rule was not caught: {why}"
    );
}

/// Each data-loss fault catches plain Redlock (no quarantine) granting a lock twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_redlock_is_caught_by_every_data_loss_fault() {
    for fault in [Fault::RestartBurst, Fault::Flush, Fault::Replace] {
        let config = ChaosConfig {
            strategy: Strategy::RedlockNoQuarantine,
            nodes: 5,
            clients: 6,
            resources: 2,
            duration: Duration::from_secs(8),
            faults: vec![fault],
            seed: SEED,
            ..ChaosConfig::default()
        };
        let (history, verdict) = until_caught(&config, unsafe_run).await;
        let why = explain(&history, &verdict);
        assert!(!verdict.is_safe(), "{fault} caught nothing: {why}");
    }
}

/// Seed 3's plan of `failover` over 10 s has two failovers, each of 2 of the 3 clusters: the
/// first promotes the original replicas, the second the original masters back.
fn cluster_failover_run(strategy: Strategy) -> ChaosConfig {
    ChaosConfig {
        strategy,
        nodes: 3,
        clients: 6,
        resources: 2,
        duration: Duration::from_secs(10),
        faults: vec![Fault::Failover],
        seed: SEED,
        ..ChaosConfig::default()
    }
}

fn failovers(history: &History) -> usize {
    history
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::Failover)
        .count()
}

/// Plain writes to whichever master serves the slot, no `WAIT` and no quarantine: a majority of
/// clusters promoting replicas that missed the window hands a lock out twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_failover_catches_redlock_without_a_failover_rule() {
    let config = cluster_failover_run(Strategy::RedlockClusterNoFailoverRule);
    let planned = plan(&config.faults, 3, 6, config.duration, SEED);
    assert_eq!(planned.len(), 2, "{planned:?}");
    let (history, verdict) = until_caught(&config, unsafe_run).await;
    let why = explain(&history, &verdict);
    assert_eq!(history.nodes, 6, "3 clusters of 2: {why}");
    assert!(failovers(&history) >= 2, "{why}");
    assert!(applied(&history, &FaultKind::ReplicationCut), "{why}");
    let overlaps: usize = verdict.resources.iter().map(|r| r.overlaps.len()).sum();
    assert!(overlaps >= 1, "no lock was granted twice: {why}");
    assert!(!verdict.is_safe());
}

/// Our defaults over the same clusters and faults: each promoted master finds a marker naming
/// its old master and is quarantined for `max_ttl`, so no lock is granted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_clusters_holds_when_a_majority_fails_over() {
    let (history, verdict) = run(cluster_failover_run(Strategy::RedlockCluster)).await;
    let why = explain(&history, &verdict);
    assert_eq!(
        failovers(&history),
        4,
        "two failovers of two clusters each: {why}"
    );
    assert!(verdict.is_safe(), "{why}");
    assert!(history.sections.len() >= 20, "too little work: {why}");
}

/// With the quarantine off, `WAIT` for every replica the shard had is what keeps a lock from
/// being granted twice, also when the same shard fails back within seconds, before the new
/// master lists its demoted master as its replica (this run found that hole).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_replicas_holds_through_failover_and_failback() {
    // 30 s, so that shards fail back within seconds of a failover: without the fix, this run
    // found 6 overlaps (the CLI's 30 s run, seed 3), while 10 s runs found none.
    let config = ChaosConfig {
        clients: 8,
        duration: Duration::from_secs(30),
        ..cluster_failover_run(Strategy::RedlockClusterWait)
    };
    let (history, verdict) = run(config).await;
    let why = explain(&history, &verdict);
    assert!(failovers(&history) >= 8, "failovers and failbacks: {why}");
    assert!(verdict.is_safe(), "{why}");
}

/// The semaphore workload: 8 clients, 2 resources of 2 permits each, 10 s.
/// 3 clusters, 6 clients on 2 resources, 14 s: failbacks start only 8 s in (once the servers
/// have been up for longer than a cluster master's quarantine, `faults::FAILBACK_FROM`); the seed
/// is the first that plans two in 14 s.
fn cluster_failback_run(strategy: Strategy) -> ChaosConfig {
    let faults = [Fault::Failback];
    let duration = Duration::from_secs(14);
    let clusters = 3;
    let seed = (0..1000)
        .find(|&seed| count(&plan(&faults, clusters, 6, duration, seed), Fault::Failback) >= 2)
        .expect("some seed plans two failbacks");
    ChaosConfig {
        strategy,
        nodes: 3,
        clients: 6,
        resources: 2,
        duration,
        faults: faults.to_vec(),
        seed,
        ..ChaosConfig::default()
    }
}

fn failbacks(history: &History) -> usize {
    history
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::Failback)
        .count()
}

/// The failback of the issue, on a majority of the clusters: a master grants a lock its
/// replica never gets, the replica leads without it (no client writes there), the master
/// resynchronises from it and leads again, the same process with its own marker back. A marker
/// that names the `run_id` alone (the rule replaced) lets the next client take the lock while
/// its holder's is valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failback_catches_a_marker_that_names_the_run_id_alone() {
    let config = cluster_failback_run(Strategy::RedlockClusterRunIdMarker);
    let (history, verdict) = until_caught(&config, unsafe_run).await;
    let why = explain(&history, &verdict);
    assert!(failbacks(&history) >= 2, "a majority failed back: {why}");
    assert!(
        abandoned(&history) >= 1,
        "the aimed lock was held through it: {why}"
    );
    assert!(!verdict.is_safe(), "no lock was granted twice: {why}");
}

/// Our defaults under the same failbacks: a failed-back master's marker names its replication
/// history before the failover, so it is quarantined as a promoted replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_clusters_holds_through_failbacks() {
    let (history, verdict) = run(cluster_failback_run(Strategy::RedlockCluster)).await;
    let why = explain(&history, &verdict);
    assert!(failbacks(&history) >= 2, "a majority failed back: {why}");
    assert!(verdict.is_safe(), "{why}");
    assert!(history.sections.len() >= 20, "too little work: {why}");
}

fn semaphore_run(strategy: Strategy, faults: &[Fault], seed: u64) -> ChaosConfig {
    ChaosConfig {
        strategy,
        nodes: 5,
        clients: 8,
        resources: 2,
        duration: Duration::from_secs(10),
        faults: faults.to_vec(),
        seed,
        permits: Some(2),
        ..ChaosConfig::default()
    }
}

/// Our permits are lock keys: the default faults (data lost by a majority included) never give
/// a third holder of two permits, nor two holders of one permit, and each permit's tokens go up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_hold_under_the_default_faults() {
    let duration = Duration::from_secs(10);
    // A plan with a node down, a client pause, and a majority losing its data.
    let seed = first_seed(&Fault::DEFAULT, 8, duration, |planned| {
        count(planned, Fault::ClientPause) >= 1
            && [Fault::Kill, Fault::Restart, Fault::Pause]
                .iter()
                .any(|&kind| count(planned, kind) >= 1)
            && [Fault::RestartBurst, Fault::Flush, Fault::Replace]
                .iter()
                .any(|&kind| count(planned, kind) >= 1)
    });
    let (history, verdict) = run(semaphore_run(Strategy::Redlock, &Fault::DEFAULT, seed)).await;
    let why = explain(&history, &verdict);
    assert!(verdict.is_safe(), "{why}");
    assert_eq!(verdict.permits, Some(2), "{why}");
    assert!(history.sections.len() >= 20, "too little work: {why}");
    assert!(
        history
            .sections
            .iter()
            .all(|s| s.permit.is_some_and(|p| p < 2)),
        "every section names its permit: {why}"
    );
    // Two at once, on some resource: a semaphore, not a lock in disguise.
    assert_eq!(most_holders(&verdict), 2, "{why}");
    assert!(
        history.faults.iter().any(|f| matches!(
            f.kind,
            FaultKind::Flush | FaultKind::Replace { .. } | FaultKind::Restart { .. }
        )),
        "no data-loss fault applied: {why}"
    );
}

/// Read-write locks under the default faults: readers together, a writer alone, and tokens in
/// the read-write order (`checker` invariant 8); elections: one leader at a time, each term above
/// the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_and_elections_hold_under_the_default_faults() {
    let duration = Duration::from_secs(10);
    let seed = first_seed(&Fault::DEFAULT, 8, duration, |planned| {
        count(planned, Fault::ClientPause) >= 1
            && [Fault::RestartBurst, Fault::Flush, Fault::Replace]
                .iter()
                .any(|&kind| count(planned, kind) >= 1)
    });
    for primitive in [Primitive::ReadWrite, Primitive::Election] {
        let config = ChaosConfig {
            strategy: Strategy::Redlock,
            nodes: 5,
            clients: 8,
            resources: 2,
            duration,
            faults: Fault::DEFAULT.to_vec(),
            seed,
            primitive,
            ..ChaosConfig::default()
        };
        let (history, verdict) = run(config).await;
        let why = explain(&history, &verdict);
        assert!(verdict.is_safe(), "{primitive:?}: {why}");
        assert!(history.sections.len() >= 20, "too little work: {why}");
        let readers = history.sections.iter().filter(|s| s.shared).count();
        if primitive == Primitive::ReadWrite {
            assert!(readers > 0 && readers < history.sections.len(), "{why}");
            // Readers really shared: two at once somewhere.
            assert!(most_holders(&verdict) >= 2, "{why}");
        } else {
            assert_eq!(readers, 0, "{why}");
            assert_eq!(most_holders(&verdict), 1, "one leader at a time: {why}");
        }
    }
}

/// A ring of partitions gives clients majorities that pairwise share a node but not all three:
/// a count kept per node lets three hold two permits, our permits do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_catch_a_count_per_node_and_not_our_permits() {
    let partition = [Fault::Partition];
    let seed = SEED;
    let planned = plan(&partition, 5, 8, Duration::from_secs(10), seed);
    assert!(count(&planned, Fault::Partition) >= 2, "{planned:?}");

    let counting = semaphore_run(Strategy::SemaphoreCounting, &partition, seed);
    let (history, verdict) = until_caught(&counting, unsafe_run).await;
    let why = explain(&history, &verdict);
    assert!(applied(&history, &FaultKind::Partition), "{why}");
    let excess: usize = verdict.resources.iter().map(|r| r.excess.len()).sum();
    assert!(excess >= 1, "a count per node never let a third in: {why}");
    assert!(most_holders(&verdict) >= 3, "{why}");
    assert!(!verdict.is_safe());
    assert!(summary_table(&verdict, &history).contains("VIOLATIONS: "));

    let (history, verdict) = run(semaphore_run(Strategy::Redlock, &partition, seed)).await;
    let why = explain(&history, &verdict);
    assert!(applied(&history, &FaultKind::Partition), "{why}");
    assert!(verdict.is_safe(), "{why}");
    assert_eq!(most_holders(&verdict), 2, "{why}");
    assert!(history.sections.len() >= 20, "too little work: {why}");
}

const LOCK_DELAY: Duration = Duration::from_secs(1);

/// 8 clients on 2 resources, 10 s, crashes (locks abandoned unreleased) and pauses (locks
/// released late), with or without a lock-delay.
fn crash_run(lock_delay: Duration) -> ChaosConfig {
    let faults = [Fault::ClientCrash, Fault::ClientPause];
    let duration = Duration::from_secs(10);
    let seed = first_seed(&faults, 8, duration, |planned| {
        count(planned, Fault::ClientCrash) >= 3 && count(planned, Fault::ClientPause) >= 1
    });
    ChaosConfig {
        strategy: Strategy::Redlock,
        nodes: 5,
        clients: 8,
        resources: 2,
        duration,
        faults: faults.to_vec(),
        seed,
        lock_delay,
        ..ChaosConfig::default()
    }
}

fn abandoned(history: &History) -> usize {
    history.sections.iter().filter(|s| s.abandoned).count()
}

/// With a lock-delay, a lock whose holder crashed (or slept past its validity) is not taken
/// before its holder's deadline plus the delay (or the late release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_delay_keeps_a_crashed_holders_lock_out_of_reach() {
    let (history, verdict) = run(crash_run(LOCK_DELAY)).await;
    let why = explain(&history, &verdict);
    assert_eq!(history.lock_delay_us, 1_000_000, "{why}");
    assert_eq!(verdict.lock_delay_us, 1_000_000, "{why}");
    assert!(abandoned(&history) >= 1, "no crash landed: {why}");
    assert!(
        history
            .faults
            .iter()
            .any(|f| f.kind == FaultKind::ClientCrash),
        "{why}"
    );
    assert!(verdict.is_safe(), "{why}");
    assert!(history.sections.len() >= 10, "too little work: {why}");
}

/// The rule a late release defeated, restored: a client that slept past its validity releases
/// late, and the release frees the lock at once instead of leaving it to its delay; the next
/// holder enters within the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_pauses_catch_a_release_that_ignores_the_lock_delay() {
    let faults = [Fault::ClientPause];
    let duration = Duration::from_secs(10);
    let seed = first_seed(&faults, 8, duration, |planned| {
        count(planned, Fault::ClientPause) >= 3
    });
    let config = ChaosConfig {
        strategy: Strategy::RedlockReleaseIgnoresDelay,
        faults: faults.to_vec(),
        seed,
        ..crash_run(LOCK_DELAY)
    };
    let entered_within = |_: &History, verdict: &Verdict| {
        verdict
            .resources
            .iter()
            .any(|r| !r.delay_violations.is_empty())
    };
    let (history, verdict) = until_caught(&config, entered_within).await;
    let why = explain(&history, &verdict);
    let caught: usize = verdict
        .resources
        .iter()
        .map(|r| r.delay_violations.len())
        .sum();
    assert!(caught >= 1, "nobody entered within the delay: {why}");
}

/// The same run without a lock-delay, judged against one: the next holder takes a crashed
/// holder's lock right at its expiry, within the delay it lacks. Judged against its own (none),
/// it is safe: the rule catches the missing delay, nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delay_check_catches_a_run_without_lock_delay() {
    let entered_within = |history: &History, _: &Verdict| {
        let judged = check_with(history, 1_000_000);
        judged
            .resources
            .iter()
            .any(|r| !r.delay_violations.is_empty())
    };
    let (history, verdict) = until_caught(&crash_run(Duration::ZERO), entered_within).await;
    let why = explain(&history, &verdict);
    assert!(
        verdict.is_safe(),
        "no lock-delay promised, none broken: {why}"
    );
    assert!(abandoned(&history) >= 1, "no crash landed: {why}");
    let judged = check_with(&history, 1_000_000);
    let why = explain(&history, &judged);
    let caught: usize = judged
        .resources
        .iter()
        .map(|r| r.delay_violations.len())
        .sum();
    assert!(caught >= 1, "nobody entered within the delay: {why}");
    assert_eq!(judged.violations, caught, "{why}");
}

/// A holder hands its lock to another process, which extends it by value from a manager without
/// a lock-delay of its own, and nobody releases it: the extension keeps the holder's delay
/// (the library's engine invariant 9), so nobody else enters before the extension's deadline
/// plus the delay. With the holder's delay dropped by the extension, the next holder enters at
/// the extension's deadline (13 delay violations in a 10 s run, seed 1, docs/chaos.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_off_and_extended_by_value_keeps_its_holders_delay() {
    let faults = [Fault::ClientHandoff];
    let duration = Duration::from_secs(5);
    let seed = first_seed(&faults, 8, duration, |planned| {
        count(planned, Fault::ClientHandoff) >= 2
    });
    let config = ChaosConfig {
        duration,
        faults: faults.to_vec(),
        seed,
        ..crash_run(LOCK_DELAY)
    };
    let (history, verdict) = run(config).await;
    let why = explain(&history, &verdict);
    assert!(
        applied(&history, &FaultKind::ClientHandoff { extended: true }),
        "no extension by value landed: {why}"
    );
    let handed: Vec<_> = history
        .sections
        .iter()
        .filter(|s| s.extended_by_value)
        .collect();
    assert!(!handed.is_empty(), "{why}");
    for s in &handed {
        assert!(s.abandoned, "{s:?}");
        // The extension's deadline, not the holder's: its round started after the holder left,
        // for a TTL less the drift allowance (22 ms); the holder's own ended before that.
        assert!(s.valid_until_us >= s.exit_us + 1_977_000, "{s:?}: {why}");
    }
    assert!(verdict.is_safe(), "{why}");
    assert!(
        summary_table(&verdict, &history).contains("handoffs: "),
        "{why}"
    );
}

/// One primary with a replica behind three sentinels, 8 clients on 2 resources, 20 s, every
/// fault the Sentinel layout takes: the primary killed (and back with its data), paused past
/// the sentinels' down-after (a split brain when it wakes), its replica cut off for longer
/// than a TTL and then promoted on request, a flush, a client pause.
fn sentinel_run(strategy: Strategy) -> ChaosConfig {
    ChaosConfig {
        strategy,
        nodes: 1,
        clients: 8,
        resources: 2,
        duration: Duration::from_secs(20),
        faults: redquorum_chaos::strategies::SENTINEL_FAULTS.to_vec(),
        seed: 2,
        ..ChaosConfig::default()
    }
}

/// Our defaults over a Sentinel node: votes wait for every replica the sentinels could
/// promote, and a promoted replica votes at once only if its clients saw it caught up since it
/// last started; no lock is granted twice through kills, split brains and failovers to a
/// replica that missed the writes of a window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_a_sentinel_node_holds_through_failovers_and_split_brains() {
    let (history, verdict) = run(sentinel_run(Strategy::RedlockSentinel)).await;
    let why = explain(&history, &verdict);
    assert_eq!(history.nodes, 2, "a primary and its replica: {why}");
    assert!(applied(&history, &FaultKind::Kill), "{why}");
    assert!(failovers(&history) >= 1, "{why}");
    assert!(verdict.is_safe(), "{why}");
    assert!(history.sections.len() >= 5, "too little work: {why}");
}

/// One primary with two replicas behind one address (a proxy) that moves on failover, 8 clients
/// on 2 resources, every fault the endpoint layout takes.
fn endpoint_run(strategy: Strategy, faults: &[Fault], seconds: u64) -> ChaosConfig {
    ChaosConfig {
        strategy,
        nodes: 1,
        clients: 8,
        resources: 2,
        duration: Duration::from_secs(seconds),
        faults: faults.to_vec(),
        seed: 2,
        ..ChaosConfig::default()
    }
}

/// Our defaults behind a fixed address: every vote waits for both replicas, and the server
/// found behind the address after a failover votes at once only if it continues the history
/// with every counted vote; no lock is granted twice through kills, restarts, and failovers to a
/// replica that missed the writes of a window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_behind_a_fixed_address_holds_through_failovers() {
    let faults = redquorum_chaos::strategies::ENDPOINT_FAULTS;
    let (history, verdict) = run(endpoint_run(Strategy::RedlockReplicated, &faults, 20)).await;
    let why = explain(&history, &verdict);
    assert_eq!(history.nodes, 3, "a primary and two replicas: {why}");
    assert!(failovers(&history) >= 1, "{why}");
    assert!(verdict.is_safe(), "{why}");
    assert!(history.sections.len() >= 5, "too little work: {why}");
}

/// The same layout, trusting whatever server answers behind the address (no `WAIT`, every new
/// server there taken to continue the history): caught by a failover to a replica that missed
/// a window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusting_whatever_server_answers_behind_the_address_is_caught() {
    let config = endpoint_run(Strategy::RedlockReplicatedTrusting, &[Fault::Failover], 15);
    let (history, verdict) = until_caught(&config, unsafe_run).await;
    let why = explain(&history, &verdict);
    assert!(!verdict.is_safe(), "no lock was granted twice: {why}");
}

/// The same node and faults, trusting whatever server the sentinels name (no `WAIT`, no
/// judgement of a promoted replica), as a plain client of a replicated primary does: caught
/// granting a lock twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusting_the_server_the_sentinels_name_is_caught() {
    let config = sentinel_run(Strategy::RedlockSentinelTrusting);
    let (history, verdict) = until_caught(&config, unsafe_run).await;
    let why = explain(&history, &verdict);
    assert!(!verdict.is_safe(), "no lock was granted twice: {why}");
}
