//! PROBE (temporary): measure how long after `mark_nodes` the same manager's next lock waits.

mod common;

use std::time::{Duration, Instant};

use redquorum::{Cause, Redlock, Vouch};
use redquorum_nodes::{NodeSpec, SentinelGroup};

const MAX_TTL: Duration = Duration::from_secs(30);
const TTL: Duration = Duration::from_secs(5);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "probe"]
async fn probe_sentinel_mark_then_lock() {
    let runs: usize = std::env::var("PROBE_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(6);
    let replicas: usize = std::env::var("PROBE_REPLICAS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(2);
    let mut refused_runs = 0;
    for run in 0..runs {
        let group =
            SentinelGroup::start(replicas, 3, NodeSpec::new().marked(false)).expect("a group");
        let manager = Redlock::builder(vec![group.url()])
            .max_ttl(MAX_TTL)
            .build()
            .unwrap();
        let first = manager.try_acquire("res", TTL).await;
        let first = first.expect_err("first sight: quarantined");
        eprintln!("run {run}: first: {:?}", first.cause());
        let gap: u64 = std::env::var("PROBE_GAP_MS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let t0 = Instant::now();
        let marks = manager.mark_nodes(Vouch::BrandNew).await;
        let marked = t0.elapsed();
        eprintln!("run {run}: marks {marks:?} in {marked:?}");
        let after = Instant::now();
        let mut refusals = 0;
        let mut granted = None;
        while after.elapsed() < Duration::from_secs(8) {
            match manager.try_acquire("res", TTL).await {
                Ok(lock) => {
                    granted = Some(after.elapsed());
                    lock.release().await;
                    break;
                }
                Err(e) => {
                    refusals += 1;
                    let q = matches!(e.cause(), Some(Cause::Quarantined { .. }));
                    eprintln!(
                        "run {run}: refused at {:?} (quarantined {q}): {e}",
                        after.elapsed()
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if refusals > 0 {
            refused_runs += 1;
        }
        eprintln!("run {run}: RESULT refusals {refusals}, granted after {granted:?}");
    }
    eprintln!("PROBE: {refused_runs} of {runs} runs refused after the mark");
}
