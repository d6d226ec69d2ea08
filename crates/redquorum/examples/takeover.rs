//! How long a standby takes to lead after the leader crashes, on local redis-server nodes this
//! example starts.
//!
//! `cargo run --release -p redquorum --example takeover -- --help`
//!
//! Each trial: a leader campaigns and keeps its leadership alive; a standby campaigns with
//! `Retry::forever()` and waits; after a random while the leader crashes (`Guard::detach`: it
//! stops extending and never resigns). The takeover is the time from the crash to the standby's
//! campaign returning. The standby cannot lead before the leader's key expires on a majority,
//! so what is measured against is the leader's TTL plus one retry delay (the slowest a standby
//! that only polls could be) and, more finely, the time the leader's key still had to live at
//! the crash. Notification on (the default): the standby is woken by the key's expiry.

use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use redquorum::{Redlock, Retry};
use redquorum_nodes::{Cluster, NodeSpec};

#[derive(Debug, Parser)]
struct Args {
    /// How many Redis nodes to start.
    #[arg(long, default_value_t = 5)]
    nodes: usize,
    /// How many crashes to measure.
    #[arg(long, default_value_t = 20)]
    trials: u32,
    /// The leadership's TTL, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    ttl_ms: u64,
    /// The standby's retry delay, in milliseconds (each delay is uniform in [d/2, d]).
    #[arg(long, default_value_t = 200)]
    retry_ms: u64,
    /// Poll only: notification off.
    #[arg(long)]
    no_notify: bool,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if args.trials == 0 || args.trials > 10_000 || args.ttl_ms < 10 || args.retry_ms == 0 {
        return Err("--trials 1..=10000, --ttl-ms at least 10 and --retry-ms above 0".into());
    }
    let cluster = Cluster::start(args.nodes, NodeSpec::new())?;
    let manager = |notify: bool| {
        Redlock::builder(cluster.urls())
            .quarantine(false) // fresh servers: nothing to lose yet
            .notify(notify)
            .build()
    };
    let (leader_side, standby_side) = (manager(true)?, manager(!args.no_notify)?);
    leader_side.connect().await;
    standby_side.connect().await;
    let ttl = Duration::from_millis(args.ttl_ms);
    let retry_delay = Duration::from_millis(args.retry_ms);
    let bound = ttl + retry_delay;
    let mut takeover = Histogram::<u64>::new(3)?;
    let mut after_expiry = Histogram::<u64>::new(3)?;
    let mut within = 0;
    for trial in 0..args.trials {
        let election = format!("takeover:{trial}");
        let leader = leader_side.campaign(&election, "leader", ttl).await?;
        let standby = {
            let (manager, election) = (standby_side.clone(), election.clone());
            let forever = Retry::forever()
                .delay(retry_delay)
                .max_wait(Duration::from_secs(60));
            tokio::spawn(async move {
                let lead = manager
                    .campaign_with(&election, "standby", ttl, &forever)
                    .await;
                (Instant::now(), lead)
            })
        };
        // Crash at a random point of the leadership, after at least one extension some of the
        // time.
        let hold = ttl.mul_f64(0.2 + 1.3 * rand::random::<f64>());
        tokio::time::sleep(hold).await;
        let crashed = leader.detach().await;
        let crash = Instant::now();
        // The key lives until about the last extension's start + TTL on the nodes; the holder's
        // deadline is that minus the drift allowance.
        let left = crashed.deadline().saturating_duration_since(crash);
        let (led_at, lead) = standby.await?;
        let successor = lead?;
        let took = led_at.duration_since(crash);
        if led_at < crashed.deadline() {
            return Err(format!("trial {trial}: a successor before the leader's deadline").into());
        }
        if took <= bound {
            within += 1;
        }
        takeover.record(took.as_micros() as u64)?;
        after_expiry.record(took.saturating_sub(left).as_micros() as u64)?;
        successor.release().await?;
    }
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{} trials, N = {}, TTL {} ms, retry delay {} ms, notification {}",
        args.trials,
        args.nodes,
        args.ttl_ms,
        args.retry_ms,
        if args.no_notify { "off" } else { "on" }
    );
    println!(
        "takeover after the crash (ms): min {:.0}, p50 {:.0}, p90 {:.0}, max {:.0}; within TTL + \
         one retry delay ({} ms): {within} of {}",
        ms(&takeover, 0.0),
        ms(&takeover, 0.5),
        ms(&takeover, 0.9),
        ms(&takeover, 1.0),
        bound.as_millis(),
        args.trials
    );
    println!(
        "beyond the crashed leader's deadline (ms): min {:.0}, p50 {:.0}, p90 {:.0}, max {:.0}",
        ms(&after_expiry, 0.0),
        ms(&after_expiry, 0.5),
        ms(&after_expiry, 0.9),
        ms(&after_expiry, 1.0)
    );
    Ok(())
}
