//! Whole runs against real `redis-server` processes: our Redlock survives every fault kind, and
//! a single master failing over to a lagging replica is caught handing a lock out twice.
//!
//! Both runs use fixed seeds, so their fault plans are fixed; what varies with the machine is
//! only when each fault lands. Neither verdict depends on that: the first is the library's
//! guarantee, whatever the timing; the second comes from kills aimed at a freshly granted lock
//! that another client waits for, on a replica that lags by more than a lock's TTL (see the
//! runner's `faults` and `topology` docs), and a run has about three such kills.

use std::fmt::Write as _;
use std::time::Duration;

use redlock_chaos::faults::plan;
use redlock_chaos::{
    ChaosConfig, Fault, FaultKind, History, Progress, Strategy, Verdict, check,
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
    }
    text
}

/// Seed 3's plan for 15 s over 5 nodes and 6 clients has every default kind (checked below).
const SEED: u64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_holds_under_every_fault_kind() {
    let config = ChaosConfig {
        strategy: Strategy::Redlock,
        nodes: 5,
        clients: 6,
        resources: 2,
        duration: Duration::from_secs(15),
        faults: Fault::DEFAULT.to_vec(),
        seed: SEED,
    };
    let planned = plan(&config.faults, 5, 6, config.duration, SEED);
    for kind in Fault::DEFAULT {
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
    let (history, verdict) = run(ChaosConfig {
        strategy: Strategy::SingleWithFailover,
        nodes: 1,
        clients: 6,
        resources: 2,
        duration: Duration::from_secs(10),
        faults: vec![Fault::Kill],
        seed: SEED,
    })
    .await;
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
