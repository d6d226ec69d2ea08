//! How a busy lock changes hands: random-delay polling against notified and fair waiting,
//! side by side in one run, on local redis-server nodes this example starts.
//!
//! `cargo run --release -p redquorum --example contended -- --help`
//!
//! Every task loops: acquire the one resource (waiting as long as it takes), do a tiny critical
//! section, release. Per mode it reports lock cycles per second, hand-offs per second (an
//! acquisition by a different task than the previous one), the wait distribution (from calling
//! `acquire` to holding the lock), and the smallest task's share of acquisitions relative to a
//! fair share. A hand-off that any two holders overlapped in aborts the run.
//!
//! Modes: `polling` (notification and fairness off: the classic Redlock client), `notified`
//! (woken by releases), `fair` (woken, and served in arrival order), and `alone`: one task, the
//! same loop, nobody to wait for: a release round and then a `SET` round, one after the other.
//! Between processes, a hand-off takes at least that much (the next holder learns of the release
//! only once it has run), so `alone`'s rate is the yardstick the other modes are measured
//! against. Within one process, as here, a notified hand-off can beat it: the release wakes the
//! next waiter as soon as it is sent, and its `SET` follows the release on each connection
//! (`waiting` invariant 12), so the two rounds overlap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
    /// How many tasks fight for the one resource.
    #[arg(long, default_value_t = 8)]
    tasks: usize,
    /// How long each mode runs, in seconds.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// The retry delay (the polling interval's upper bound), in milliseconds.
    #[arg(long, default_value_t = 5)]
    delay_ms: u64,
    /// Run only these modes (comma-separated: alone, polling, notified, fair).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "alone,polling,notified,fair"
    )]
    modes: Vec<String>,
    /// Print one JSON line per mode.
    #[arg(long)]
    json: bool,
}

/// What one mode measured.
#[derive(Debug)]
struct Outcome {
    mode: String,
    cycles: u64,
    handoffs: u64,
    elapsed: Duration,
    wait_us: Histogram<u64>,
    per_task: Vec<u64>,
}

/// The figures reported for one mode, worked out once for both the JSON line and the table.
#[derive(Debug)]
struct Figures {
    cycles_per_sec: f64,
    handoffs_per_sec: f64,
    wait_p50_us: u64,
    wait_p99_us: u64,
    wait_max_us: u64,
    min_share: f64,
}

impl Outcome {
    fn per_sec(&self, n: u64) -> f64 {
        n as f64 / self.elapsed.as_secs_f64()
    }

    fn figures(&self) -> Figures {
        Figures {
            cycles_per_sec: self.per_sec(self.cycles),
            handoffs_per_sec: self.per_sec(self.handoffs),
            wait_p50_us: self.wait_us.value_at_quantile(0.5),
            wait_p99_us: self.wait_us.value_at_quantile(0.99),
            wait_max_us: self.wait_us.max(),
            min_share: self.min_share(),
        }
    }

    fn min_share(&self) -> f64 {
        let total: u64 = self.per_task.iter().sum();
        let fair = total as f64 / self.per_task.len() as f64;
        let min = self.per_task.iter().copied().min().unwrap_or(0);
        if fair > 0.0 { min as f64 / fair } else { 0.0 }
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let cluster = Cluster::start(args.nodes, NodeSpec::new())?;
    let mut outcomes = Vec::new();
    for mode in &args.modes {
        let outcome = runtime.block_on(measure(&cluster, mode, &args))?;
        if args.json {
            let (mode, nodes, tasks, delay_ms) =
                (&outcome.mode, args.nodes, args.tasks, args.delay_ms);
            let Figures {
                cycles_per_sec,
                handoffs_per_sec,
                wait_p50_us,
                wait_p99_us,
                wait_max_us,
                min_share,
            } = outcome.figures();
            println!(
                "{{\"mode\":\"{mode}\",\"nodes\":{nodes},\"tasks\":{tasks},\"delay_ms\":{delay_ms},\"cycles_per_sec\":{cycles_per_sec:.1},\"handoffs_per_sec\":{handoffs_per_sec:.1},\"wait_us\":{{\"p50\":{wait_p50_us},\"p99\":{wait_p99_us},\"max\":{wait_max_us}}},\"min_share\":{min_share:.3}}}"
            );
        }
        outcomes.push(outcome);
    }
    if !args.json {
        report(&args, &outcomes);
    }
    Ok(())
}

async fn measure(
    cluster: &Cluster,
    mode: &str,
    args: &Args,
) -> Result<Outcome, Box<dyn std::error::Error>> {
    let (notify, fair) = match mode {
        "alone" | "polling" => (false, false),
        "notified" => (true, false),
        "fair" => (true, true),
        other => {
            return Err(format!("unknown mode {other:?}: alone, polling, notified or fair").into());
        }
    };
    let retry = Retry::forever().delay(Duration::from_millis(args.delay_ms.max(1)));
    let manager = Redlock::builder(cluster.urls())
        .quarantine(false)
        .fencing(false)
        .notify(notify)
        .fair(fair)
        .retry(retry)
        .build()?;
    manager.connect().await;
    let resource = format!("contended:{mode}:{}", std::process::id());
    let stop_at = Instant::now() + Duration::from_secs(args.seconds);
    let last_owner = Arc::new(AtomicUsize::new(usize::MAX));
    let handoffs = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut tasks = Vec::new();
    let tasks_here = if mode == "alone" { 1 } else { args.tasks };
    for task in 0..tasks_here {
        let (manager, resource) = (manager.clone(), resource.clone());
        let (last_owner, handoffs, inside) = (
            Arc::clone(&last_owner),
            Arc::clone(&handoffs),
            Arc::clone(&inside),
        );
        tasks.push(tokio::spawn(async move {
            let mut wait_us = histogram().map_err(|e| e.to_string())?;
            let mut acquired = 0u64;
            while Instant::now() < stop_at {
                let asked = Instant::now();
                let lock = manager
                    .acquire(&resource, Duration::from_secs(5))
                    .await
                    .map_err(|e| e.to_string())?;
                let waited = u64::try_from(asked.elapsed().as_micros()).unwrap_or(u64::MAX);
                wait_us.saturating_record(waited);
                if inside.swap(true, Ordering::SeqCst) {
                    return Err("two holders at once".to_owned());
                }
                if last_owner.swap(task, Ordering::SeqCst) != task {
                    handoffs.fetch_add(1, Ordering::Relaxed);
                }
                acquired += 1;
                inside.store(false, Ordering::SeqCst);
                lock.release().await;
            }
            Ok::<_, String>((acquired, wait_us))
        }));
    }
    let mut wait_us = histogram()?;
    let mut per_task = Vec::new();
    for task in tasks {
        let (acquired, waits) = task.await??;
        wait_us.add(&waits)?;
        per_task.push(acquired);
    }
    let elapsed = started.elapsed();
    manager.settle().await;
    Ok(Outcome {
        mode: mode.to_owned(),
        cycles: per_task.iter().sum(),
        handoffs: handoffs.load(Ordering::Relaxed),
        elapsed,
        wait_us,
        per_task,
    })
}

/// Waits from 1 µs to a minute, to 3 significant digits (longer ones are recorded as a minute).
fn histogram() -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    Histogram::new_with_bounds(1, 60_000_000, 3)
}

fn report(args: &Args, outcomes: &[Outcome]) {
    println!(
        "{} tasks on one resource, {} nodes, retry delay {} ms, {} s per mode",
        args.tasks, args.nodes, args.delay_ms, args.seconds
    );
    println!(
        "{:<9} {:>10} {:>12} {:>10} {:>10} {:>10} {:>10}",
        "mode", "cycles/s", "hand-offs/s", "wait p50", "wait p99", "wait max", "min share"
    );
    for o in outcomes {
        let f = o.figures();
        println!(
            "{:<9} {:>10.0} {:>12.0} {:>8}µs {:>8}µs {:>8}µs {:>10.2}",
            o.mode,
            f.cycles_per_sec,
            f.handoffs_per_sec,
            f.wait_p50_us,
            f.wait_p99_us,
            f.wait_max_us,
            f.min_share
        );
    }
    let yardstick = outcomes.iter().find(|o| o.mode == "alone");
    if let Some(alone) = yardstick {
        println!(
            "yardstick: one task alone cycles {:.0} times/s (a release, then a SET)",
            alone.per_sec(alone.cycles)
        );
    }
    let base = outcomes.iter().find(|o| o.mode == "polling");
    for o in outcomes
        .iter()
        .filter(|o| o.mode != "polling" && o.mode != "alone")
    {
        let mut line = format!("{:<9}", o.mode);
        if let Some(base) = base {
            let handoffs =
                o.per_sec(o.handoffs) / base.per_sec(base.handoffs).max(f64::MIN_POSITIVE);
            let p99 = o.wait_us.value_at_quantile(0.99) as f64
                / (base.wait_us.value_at_quantile(0.99).max(1)) as f64;
            line += &format!(" hand-offs {handoffs:.1}× polling, p99 wait {p99:.2}× polling");
        }
        if let Some(alone) = yardstick {
            let used = o.per_sec(o.handoffs) / alone.per_sec(alone.cycles).max(f64::MIN_POSITIVE);
            line += &format!(", {:.0}% of alone's cycles", used * 100.0);
        }
        println!("{line}");
    }
}
