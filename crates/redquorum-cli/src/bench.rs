//! `redlock bench`: lock cycles per second and their latency, against the configured servers.
//!
//! A cycle is one acquisition and its release, timed together from the first request to the last
//! reply. All workers share one manager, as the tasks of one application would (one multiplexed
//! connection per node). Two workloads:
//! - `uncontended`: every worker locks a resource of its own, one attempt per cycle: the cost of
//!   the algorithm itself (two rounds to every node). A failed attempt is an error.
//! - `contended`: all workers take turns on one resource, waiting for it (retry delays of up to
//!   5 ms, and woken by releases unless `--no-notify`): how fast the lock changes hands. The
//!   latency includes the wait.
//!
//! Cycles per second alone flatter a lock that one worker keeps re-taking while the others
//! starve, so three more numbers say how waiting went:
//! - hand-offs: acquisitions whose previous holder of the resource was another worker. Each
//!   resource has a "last owner" that its holder swaps in while holding it; holders take turns,
//!   so each swap sees its predecessor. (Always 0 when uncontended: one worker per resource.)
//! - the wait: from the start of `acquire` to its success, retries included (uncontended: the
//!   cost of one acquisition).
//! - acquisitions per worker: the least served worker against a fair share (total/workers).
//!
//! Resources are named `redlock-bench:PID:...`, so parallel runs do not meet; every lock is
//! released at the end of its cycle.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use indicatif::ProgressBar;
use redquorum::{Redlock, Retry};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::exit::Outcome;
use crate::exit::{self, Failure, OK, UNAVAILABLE};
use crate::global::Global;
use crate::output;
use crate::{duration, progress};

const AFTER_HELP: &str = "\
Drives the library against the configured servers and reports cycles per second (a cycle is an
acquire and its release), latency percentiles of whole cycles, and errors. uncontended: each worker
locks its own resource, one attempt per cycle. contended: all workers take turns on one resource,
waiting for it; the latency includes the wait. Also reported: hand-offs (acquisitions whose
previous holder was another worker; always 0 uncontended), the wait from the start of an acquire
to its success, and acquisitions per worker: the least and most served, and min_share, the least
served worker's count over a fair share (total/concurrency; 1 is perfectly even, 0 a starved
worker). With --json, exactly one line:
{\"workload\", \"concurrency\", \"duration_ms\", \"nodes\", \"quorum\", \"notify\", \"fair\",
\"cycles\", \"cycles_per_sec\", \"handoffs\", \"handoffs_per_sec\", \"errors\", \"first_error\",
\"latency_us\": {\"p50\", \"p90\", \"p99\", \"max\", \"mean\"}, \"wait_us\": {the same},
\"per_worker\": {\"min\", \"max\", \"min_share\"}}; min_share is null when no cycle succeeded.

Examples:
  eval \"$(redlock nodes start --count 3)\" && redlock bench
  redlock bench --workload contended --concurrency 8 --duration 30s --json
  redlock --fair bench --workload contended   # arrival order: compare min_share and hand-offs
  redlock bench --no-fencing       # without the fencing token's extra round trip

Exit status: 0 done (errors are counted, not fatal); 69 fewer than a quorum of servers reachable
(or out of restart quarantine), or not a single cycle succeeded; 64 bad arguments (also a TTL
above --max-ttl).";

/// Measure lock cycles per second and latency against the configured servers.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// What to measure.
    #[arg(long, value_enum, default_value_t = Workload::Uncontended)]
    workload: Workload,

    /// How many concurrent workers.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=1024))]
    concurrency: u16,

    /// How long to run.
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "10s")]
    duration: Duration,

    /// The TTL of each lock.
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "10s")]
    ttl: Duration,

    /// Print exactly one line of JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
enum Workload {
    Uncontended,
    Contended,
}

/// One worker's results.
#[derive(Debug)]
struct Tally {
    /// Whole cycles; its count is the worker's number of acquisitions.
    latency_us: Histogram<u64>,
    /// From the start of each successful `acquire` to its success.
    wait_us: Histogram<u64>,
    handoffs: u64,
    errors: u64,
    first_error: Option<String>,
}

/// What a worker shares with the others locking the same resource.
#[derive(Debug, Clone)]
struct Resource {
    name: String,
    /// The last worker that acquired it, as its index + 1; 0 before the first acquisition, which
    /// is nobody's hand-off.
    last_owner: Arc<AtomicU64>,
}

#[derive(Debug, Serialize)]
struct Latency {
    p50: u64,
    p90: u64,
    p99: u64,
    max: u64,
    mean: f64,
}

/// How evenly the workers were served: acquisitions of the least and the most served, and the
/// least served one's count over a fair share.
#[derive(Debug, PartialEq, Serialize)]
struct PerWorker {
    min: u64,
    max: u64,
    /// `min / (total / workers)`, two decimals; `None` when nothing was acquired.
    min_share: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Report {
    workload: Workload,
    concurrency: u16,
    duration_ms: u128,
    nodes: usize,
    quorum: usize,
    notify: bool,
    fair: bool,
    cycles: u64,
    cycles_per_sec: f64,
    handoffs: u64,
    handoffs_per_sec: f64,
    errors: u64,
    first_error: Option<String>,
    latency_us: Latency,
    wait_us: Latency,
    per_worker: PerWorker,
}

pub async fn run(args: &Args, global: &Global) -> Outcome {
    output::check_run_length(args.duration)?;
    global.check_ttl(args.ttl)?;
    let manager = global.reachable().await?;

    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        progress::timed(args.duration)
    };
    let cycles = Arc::new(AtomicU64::new(0));
    let stop = CancellationToken::new();
    let prefix = format!("redlock-bench:{}", std::process::id());
    let contended = Resource {
        name: format!("{prefix}:contended"),
        last_owner: Arc::new(AtomicU64::new(0)),
    };
    let started = Instant::now();
    let mut workers = Vec::new();
    for worker in 0..args.concurrency {
        let resource = match args.workload {
            Workload::Uncontended => Resource {
                name: format!("{prefix}:{worker}"),
                last_owner: Arc::new(AtomicU64::new(0)),
            },
            Workload::Contended => contended.clone(),
        };
        workers.push(tokio::spawn(cycle(
            manager.clone(),
            args.workload,
            (worker, resource),
            args.ttl,
            Arc::clone(&cycles),
            stop.clone(),
        )));
    }
    let end = started + args.duration;
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    while Instant::now() < end {
        ticker.tick().await;
        let done = cycles.load(Ordering::Relaxed);
        progress::tick(&bar, started.elapsed(), format!("{done} cycles"));
    }
    stop.cancel();
    let (mut total, mut waits) = (new_histogram()?, new_histogram()?);
    let (mut handoffs, mut errors, mut first_error) = (0, 0, None);
    let mut acquisitions = Vec::new();
    for worker in workers {
        let tally = match worker.await {
            Ok(tally) => tally?,
            Err(e) => return Err(Failure::os(format!("a benchmark worker failed: {e}"))),
        };
        // Same bounds and precision on both sides: adding cannot fail.
        let _ = total.add(&tally.latency_us);
        let _ = waits.add(&tally.wait_us);
        acquisitions.push(tally.latency_us.len());
        handoffs += tally.handoffs;
        errors += tally.errors;
        first_error = first_error.or(tally.first_error);
    }
    let elapsed = started.elapsed();
    bar.finish_and_clear();

    let report = Report {
        workload: args.workload,
        concurrency: args.concurrency,
        duration_ms: elapsed.as_millis(),
        nodes: manager.nodes().len(),
        quorum: manager.quorum(),
        notify: !global.no_notify,
        fair: global.fair,
        cycles: total.len(),
        cycles_per_sec: rate(total.len(), elapsed),
        handoffs,
        handoffs_per_sec: rate(handoffs, elapsed),
        errors,
        first_error,
        latency_us: Latency::of(&total),
        wait_us: Latency::of(&waits),
        per_worker: per_worker(&acquisitions),
    };
    if args.json {
        output::print(&output::json(&report))?;
    } else {
        print_human(&report)?;
    }
    if report.cycles == 0 && report.errors > 0 {
        return Err(Failure::new(
            UNAVAILABLE,
            format!(
                "not a single cycle succeeded: {}",
                report.first_error.as_deref().unwrap_or("no error recorded")
            ),
        ));
    }
    Ok(OK)
}

async fn cycle(
    manager: Redlock,
    workload: Workload,
    (worker, resource): (u16, Resource),
    ttl: Duration,
    cycles: Arc<AtomicU64>,
    stop: CancellationToken,
) -> Result<Tally, Failure> {
    let retry = match workload {
        Workload::Uncontended => Retry::once(),
        Workload::Contended => Retry::forever().delay(Duration::from_millis(5)),
    };
    let mut tally = Tally {
        latency_us: new_histogram()?,
        wait_us: new_histogram()?,
        handoffs: 0,
        errors: 0,
        first_error: None,
    };
    let me = u64::from(worker) + 1;
    while !stop.is_cancelled() {
        let start = Instant::now();
        let lock = tokio::select! {
            lock = manager.acquire_with(&resource.name, ttl, &retry) => lock,
            () = stop.cancelled() => break,
        };
        match lock {
            Ok(lock) => {
                let waited = start.elapsed();
                // Swapped while holding the lock, so the previous value is our predecessor's.
                let previous = resource.last_owner.swap(me, Ordering::Relaxed);
                lock.release().await;
                tally.latency_us.saturating_record(micros(start.elapsed()));
                tally.wait_us.saturating_record(micros(waited));
                if previous != 0 && previous != me {
                    tally.handoffs += 1;
                }
                cycles.fetch_add(1, Ordering::Relaxed);
            }
            Err(e @ redquorum::Error::Config(_)) => return Err(exit::from_error(e)),
            Err(e) => {
                tally.errors += 1;
                tally.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    Ok(tally)
}

/// A duration in whole microseconds, at least 1 (the histograms' lowest value).
fn micros(elapsed: Duration) -> u64 {
    u64::try_from(elapsed.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

impl Latency {
    fn of(histogram: &Histogram<u64>) -> Self {
        Self {
            p50: histogram.value_at_quantile(0.5),
            p90: histogram.value_at_quantile(0.9),
            p99: histogram.value_at_quantile(0.99),
            max: histogram.max(),
            mean: (histogram.mean() * 10.0).round() / 10.0,
        }
    }
}

/// Summarises each worker's number of acquisitions.
fn per_worker(acquisitions: &[u64]) -> PerWorker {
    let total: u64 = acquisitions.iter().sum();
    let min = acquisitions.iter().copied().min().unwrap_or(0);
    let max = acquisitions.iter().copied().max().unwrap_or(0);
    // Precision: counts of cycles and workers are far below 2^52.
    let min_share = (total > 0)
        .then(|| (min as f64 * acquisitions.len() as f64 / total as f64 * 100.0).round() / 100.0);
    PerWorker {
        min,
        max,
        min_share,
    }
}

/// Microseconds from 1 µs to 1 h, 3 significant figures.
fn new_histogram() -> Result<Histogram<u64>, Failure> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3)
        .map_err(|e| Failure::os(format!("could not create a histogram: {e}")))
}

fn rate(count: u64, elapsed: Duration) -> f64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        // Precision: a count of cycles is far below 2^52.
        (count as f64 / secs * 10.0).round() / 10.0
    } else {
        0.0
    }
}

fn print_human(r: &Report) -> Result<(), Failure> {
    let ms = |us: u64| format!("{:.2}ms", us as f64 / 1000.0);
    let workload = match r.workload {
        Workload::Uncontended => "uncontended",
        Workload::Contended => "contended",
    };
    let on = |on: bool| if on { "on" } else { "off" };
    output::print(&format!(
        "{workload}, {} workers, {}, {} nodes (quorum {}), notify {}, fair {}",
        r.concurrency,
        duration::format(Duration::from_millis(
            u64::try_from(r.duration_ms).unwrap_or(u64::MAX)
        )),
        r.nodes,
        r.quorum,
        on(r.notify),
        on(r.fair)
    ))?;
    output::print(&format!(
        "cycles: {} ({}/s), errors: {}",
        r.cycles, r.cycles_per_sec, r.errors
    ))?;
    if r.workload == Workload::Contended {
        output::print(&format!(
            "hand-offs: {} ({}/s)",
            r.handoffs, r.handoffs_per_sec
        ))?;
    }
    let percentiles = |l: &Latency| {
        format!(
            "p50 {}  p90 {}  p99 {}  max {}",
            ms(l.p50),
            ms(l.p90),
            ms(l.p99),
            ms(l.max)
        )
    };
    output::print(&format!(
        "latency per cycle (acquire + release): {}",
        percentiles(&r.latency_us)
    ))?;
    output::print(&format!(
        "wait for the lock (acquire): {}",
        percentiles(&r.wait_us)
    ))?;
    let p = &r.per_worker;
    let share = p.min_share.map_or_else(String::new, |s| {
        format!(", least served {s} of a fair share")
    });
    output::print(&format!(
        "cycles per worker: min {}, max {}{share}",
        p.min, p.max
    ))?;
    if let Some(e) = &r.first_error {
        output::print(&format!("first error: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second_with_one_decimal() {
        assert_eq!(rate(150, Duration::from_secs(2)), 75.0);
        assert_eq!(rate(1, Duration::from_secs(3)), 0.3);
        assert_eq!(rate(5, Duration::ZERO), 0.0);
    }

    #[test]
    fn per_worker_compares_the_least_served_with_a_fair_share() {
        let even = per_worker(&[10, 10, 10, 10]);
        assert_eq!((even.min, even.max, even.min_share), (10, 10, Some(1.0)));
        // Fair share 40/4 = 10; the least served got 5.
        let uneven = per_worker(&[5, 15, 10, 10]);
        assert_eq!(
            (uneven.min, uneven.max, uneven.min_share),
            (5, 15, Some(0.5))
        );
        assert_eq!(per_worker(&[0, 30, 0]).min_share, Some(0.0));
        assert_eq!(per_worker(&[1, 2]).min_share, Some(0.67));
        let none = per_worker(&[0, 0]);
        assert_eq!((none.min, none.max, none.min_share), (0, 0, None));
        assert_eq!(per_worker(&[]).min_share, None);
    }
}
