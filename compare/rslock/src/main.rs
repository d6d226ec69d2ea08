//! redquorum against [rslock](https://docs.rs/rslock) ("Redlock for async Rust"), side by side:
//! uncontended lock + release cycles over the same local Redis nodes, in the same process.
//!
//! ```text
//! cargo run --release --manifest-path compare/rslock/Cargo.toml -- --nodes 1,3,5 --tasks 1,32
//! cargo run --release --manifest-path compare/rslock/Cargo.toml -- --json > rows.jsonl
//! cargo run --release --manifest-path compare/rslock/Cargo.toml -- --help
//! ```
//!
//! For each node count N, N `redis-server`s are started with `appendonly yes` and
//! `appendfsync always` (redquorum-nodes, stopped at the end). Durable nodes are what lets
//! redquorum's restart quarantine, on by default, trust fresh servers at once. Every cycle takes
//! a fresh resource name, so no cycle ever waits for another, and must win its single attempt
//! (a refusal stops the run with an error). Three sides:
//!
//! - **rslock**: `LockManager::new(urls)` with its retries set to one attempt, `lock` then
//!   `unlock`;
//! - **defaults**: `Redlock::builder(urls).build()`, the library's full defaults (fencing
//!   tokens, restart quarantine, release notification), `try_acquire` then `release`;
//! - **plain**: the same with fencing, quarantine and notification off: plain Redlock.
//!
//! The sides run in alternating phases, their order rotated every phase, after a warm-up of each,
//! so that noise on the machine hits all three alike: the ratios to rslock are the numbers to
//! read; the absolute rates depend on the machine. Latency is one whole cycle (acquire and
//! release), in an HDR histogram. The table goes to stderr; `--json` also prints one object per
//! row on stdout, with each side's CPU time per cycle (this process, and the servers) from
//! `/proc`.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use redquorum::{Redlock, Reply};
use redquorum_nodes::{Cluster, NodeSpec, Persistence};
use rslock::LockManager;

#[derive(Debug, Parser)]
#[command(about = "Uncontended lock+release cycles: redquorum (defaults, plain) against rslock")]
struct Args {
    /// Node counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,3,5")]
    nodes: Vec<usize>,
    /// Concurrent task counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    tasks: Vec<usize>,
    /// Measured phases per side and row.
    #[arg(long, default_value_t = 4)]
    phases: u32,
    /// Length of each measured phase (`2s`, `500ms`, or seconds).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    duration_per_phase: Duration,
    /// Unmeasured warm-up of each side before a row's phases.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    warmup: Duration,
    /// Lock TTL (never reached: every cycle releases).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// Also print one JSON object per row on stdout.
    #[arg(long)]
    json: bool,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (s.strip_suffix('s').unwrap_or(s), 1.0),
    };
    let secs = number
        .trim()
        .parse::<f64>()
        .map_err(|e| format!("{s:?}: {e} (expected e.g. 2s, 500ms)"))?
        * unit;
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("{s:?}: must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Rslock,
    Defaults,
    Plain,
}

const SIDES: [Side; 3] = [Side::Rslock, Side::Defaults, Side::Plain];

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Rslock => "rslock",
            Side::Defaults => "defaults",
            Side::Plain => "plain",
        }
    }
}

/// How long `defaults` may take to trust the durable nodes before the run gives up.
const TRUST_TIMEOUT: Duration = Duration::from_secs(10);

/// The three clients of one row, connected to the same nodes before measuring.
struct Target {
    nodes: usize,
    /// The servers' pids, to read their CPU time.
    server_pids: Vec<u32>,
    rslock: LockManager,
    defaults: Redlock,
    plain: Redlock,
    ttl: Duration,
}

impl Target {
    async fn connect(cluster: &Cluster, ttl: Duration) -> Result<Self, String> {
        let urls = cluster.urls();
        let mut rslock = LockManager::new(urls.clone());
        // One attempt, like `try_acquire`: by default rslock tries 3 times, 0-200 ms apart,
        // which would hide a refused attempt inside a slow cycle.
        rslock.set_retry(1, Duration::from_millis(1));
        let defaults = Redlock::builder(urls.iter().cloned())
            .build()
            .map_err(|e| format!("redquorum defaults: {e}"))?;
        let plain = Redlock::builder(urls.iter().cloned())
            .fencing(false)
            .quarantine(false)
            .notify(false)
            .build()
            .map_err(|e| format!("redquorum plain: {e}"))?;

        for (name, redlock) in [("plain", &plain), ("defaults", &defaults)] {
            // Durable nodes (AOF, fsync always) are trusted at once: a quarantined reply here
            // should pass by itself within moments, or never.
            let give_up = Instant::now() + TRUST_TIMEOUT;
            let mut replies = redlock.connect().await;
            while replies
                .iter()
                .any(|r| matches!(r.reply, Reply::Quarantined(_)))
                && Instant::now() < give_up
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
                replies = redlock.connect().await;
            }
            if !replies.iter().all(|r| r.reply.is_granted()) {
                return Err(format!(
                    "{name}: not every node is ready after {TRUST_TIMEOUT:?}: {replies:?}"
                ));
            }
        }
        Ok(Self {
            nodes: urls.len(),
            server_pids: cluster.iter().filter_map(|node| node.pid()).collect(),
            rslock,
            defaults,
            plain,
            ttl,
        })
    }

    /// One acquire + release. `Ok(false)` when a redquorum release was not confirmed by every
    /// node (rslock's `unlock` reports nothing).
    async fn cycle(&self, side: Side, key: &str) -> Result<bool, String> {
        let redlock = match side {
            Side::Rslock => {
                let lock = self
                    .rslock
                    .lock(key, self.ttl)
                    .await
                    .map_err(|e| format!("rslock: uncontended lock of {key:?} refused: {e}"))?;
                self.rslock.unlock(&lock).await;
                return Ok(true);
            }
            Side::Defaults => &self.defaults,
            Side::Plain => &self.plain,
        };
        let lock = redlock.try_acquire(key, self.ttl).await.map_err(|e| {
            format!(
                "{}: uncontended try_acquire of {key:?} refused: {e}",
                side.name()
            )
        })?;
        Ok(lock.release().await.confirmed == self.nodes)
    }
}

/// Cycle latencies in nanoseconds, 1 ns to 60 s, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// What one side did over all its measured phases.
struct Totals {
    cycles: u64,
    /// redquorum cycles whose release was not confirmed by every node.
    incomplete: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
    /// CPU time of this process (client) and of the servers, when `/proc` tells.
    client_cpu: Option<Duration>,
    server_cpu: Option<Duration>,
}

impl Totals {
    fn new() -> Self {
        Self {
            cycles: 0,
            incomplete: 0,
            elapsed: Duration::ZERO,
            latency: histogram(),
            client_cpu: Some(Duration::ZERO),
            server_cpu: Some(Duration::ZERO),
        }
    }

    fn rate(&self) -> f64 {
        self.cycles as f64 / self.elapsed.as_secs_f64()
    }

    fn p50_us(&self) -> f64 {
        self.latency.value_at_quantile(0.5) as f64 / 1e3
    }

    fn p99_us(&self) -> f64 {
        self.latency.value_at_quantile(0.99) as f64 / 1e3
    }

    /// CPU time per cycle in µs.
    fn cpu_us(&self, cpu: Option<Duration>) -> Option<f64> {
        cpu.map(|c| c.as_secs_f64() * 1e6 / self.cycles as f64)
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "cycles": self.cycles,
            "seconds": self.elapsed.as_secs_f64(),
            "cycles_per_s": self.rate(),
            "p50_us": self.p50_us(),
            "p99_us": self.p99_us(),
            "max_us": self.latency.max() as f64 / 1e3,
            "incomplete_releases": self.incomplete,
            "client_cpu_us_per_cycle": self.cpu_us(self.client_cpu),
            "server_cpu_us_per_cycle": self.cpu_us(self.server_cpu),
        })
    }
}

static NEXT_PHASE: AtomicU64 = AtomicU64::new(0);

/// Runs `tasks` tasks of back-to-back cycles of `side` for `duration` and adds what they did to
/// `totals`. The first failed cycle stops every task and is returned.
async fn phase(
    target: &Arc<Target>,
    side: Side,
    tasks: usize,
    duration: Duration,
    totals: &mut Totals,
) -> Result<(), String> {
    let cpu_before = cpu_times(target);
    // Fresh keys in every phase and cycle: no cycle ever meets a key left by another.
    let phase_id = NEXT_PHASE.fetch_add(1, Ordering::Relaxed);
    let failed = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let end = start + duration;
    let workers: Vec<_> = (0..tasks)
        .map(|task| {
            let target = Arc::clone(target);
            let failed = Arc::clone(&failed);
            tokio::spawn(async move {
                let mut latency = histogram();
                let mut incomplete = 0;
                let mut key = String::new();
                for cycle in 0u64.. {
                    if Instant::now() >= end || failed.load(Ordering::Relaxed) {
                        break;
                    }
                    key.clear();
                    let _ = write!(key, "compare:{}:{phase_id}:{task}:{cycle}", side.name());
                    let t0 = Instant::now();
                    match target.cycle(side, &key).await {
                        Ok(true) => {}
                        Ok(false) => incomplete += 1,
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            return Err(e);
                        }
                    }
                    latency.saturating_record(
                        u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX),
                    );
                }
                Ok((latency, incomplete))
            })
        })
        .collect();
    let mut first_error = None;
    for worker in workers {
        match worker
            .await
            .map_err(|e| format!("a bench task died: {e}"))?
        {
            Ok((latency, incomplete)) => {
                totals.cycles += latency.len();
                totals.incomplete += incomplete;
                totals
                    .latency
                    .add(&latency)
                    .expect("histograms of equal bounds add up");
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    totals.elapsed += start.elapsed();
    let cpu_after = cpu_times(target);
    add_cpu(&mut totals.client_cpu, cpu_before.0, cpu_after.0);
    add_cpu(&mut totals.server_cpu, cpu_before.1, cpu_after.1);
    Ok(())
}

fn add_cpu(total: &mut Option<Duration>, before: Option<Duration>, after: Option<Duration>) {
    *total = match (*total, before, after) {
        (Some(total), Some(before), Some(after)) => Some(total + after.saturating_sub(before)),
        _ => None,
    };
}

/// CPU time used so far by this process and by the servers.
fn cpu_times(target: &Target) -> (Option<Duration>, Option<Duration>) {
    let servers = target
        .server_pids
        .iter()
        .map(|&pid| process_cpu(pid))
        .sum::<Option<Duration>>();
    (process_cpu(std::process::id()), servers)
}

/// A process's CPU time: the sum over its threads of `/proc/PID/task/TID/schedstat`'s first field
/// (nanoseconds on a CPU). `None` where there is no `/proc`.
fn process_cpu(pid: u32) -> Option<Duration> {
    let mut nanos = 0u64;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        nanos += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(Duration::from_nanos(nanos))
}

struct Row {
    nodes: usize,
    tasks: usize,
    /// In the order of [`SIDES`].
    sides: [Totals; 3],
}

impl Row {
    fn side(&self, side: Side) -> &Totals {
        &self.sides[side as usize]
    }

    /// `side`'s cycles/s over rslock's.
    fn throughput_ratio(&self, side: Side) -> f64 {
        self.side(side).rate() / self.side(Side::Rslock).rate()
    }

    /// `side`'s median cycle over rslock's.
    fn p50_ratio(&self, side: Side) -> f64 {
        self.side(side).p50_us() / self.side(Side::Rslock).p50_us()
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "nodes": self.nodes,
            "tasks": self.tasks,
            "rslock": self.side(Side::Rslock).json(),
            "defaults": self.side(Side::Defaults).json(),
            "plain": self.side(Side::Plain).json(),
            "throughput_ratio": {
                "defaults_over_rslock": self.throughput_ratio(Side::Defaults),
                "plain_over_rslock": self.throughput_ratio(Side::Plain),
            },
            "p50_ratio": {
                "defaults_over_rslock": self.p50_ratio(Side::Defaults),
                "plain_over_rslock": self.p50_ratio(Side::Plain),
            },
        })
    }
}

async fn measure(target: &Arc<Target>, tasks: usize, args: &Args) -> Result<Row, String> {
    for side in SIDES {
        phase(target, side, tasks, args.warmup, &mut Totals::new()).await?;
    }
    let mut sides = [Totals::new(), Totals::new(), Totals::new()];
    for i in 0..args.phases as usize {
        // Rotate the order every phase, so that a drift during the row hits every side alike.
        for k in 0..SIDES.len() {
            let side = SIDES[(i + k) % SIDES.len()];
            let totals = &mut sides[side as usize];
            phase(target, side, tasks, args.duration_per_phase, totals).await?;
        }
    }
    Ok(Row {
        nodes: target.nodes,
        tasks,
        sides,
    })
}

fn table(rows: &[Row], args: &Args) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Uncontended lock + release, a fresh resource per cycle, on durable nodes (AOF, fsync \
         always); rslock 0.10 (`tokio-comp`, one attempt) against redquorum with its defaults \
         (fencing, quarantine, notification) and plain. {} × {:?} per side and row, {} cores, {}.\n",
        args.phases,
        args.duration_per_phase,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        redis_version(),
    );
    out.push_str(
        "| nodes | tasks | rslock cycles/s | defaults cycles/s | plain cycles/s \
         | defaults / rslock | plain / rslock \
         | rslock p50 / p99 (µs) | defaults p50 / p99 (µs) | plain p50 / p99 (µs) \
         | p50 defaults / rslock | p50 plain / rslock |\n",
    );
    out.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for row in rows {
        let (r, d, p) = (
            row.side(Side::Rslock),
            row.side(Side::Defaults),
            row.side(Side::Plain),
        );
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.3} | {:.3} | {:.1} / {:.1} | {:.1} / {:.1} \
             | {:.1} / {:.1} | {:.3} | {:.3} |",
            row.nodes,
            row.tasks,
            r.rate(),
            d.rate(),
            p.rate(),
            row.throughput_ratio(Side::Defaults),
            row.throughput_ratio(Side::Plain),
            r.p50_us(),
            r.p99_us(),
            d.p50_us(),
            d.p99_us(),
            p.p50_us(),
            p.p99_us(),
            row.p50_ratio(Side::Defaults),
            row.p50_ratio(Side::Plain),
        );
    }
    for row in rows {
        for side in [Side::Defaults, Side::Plain] {
            let t = row.side(side);
            if t.incomplete > 0 {
                let _ = writeln!(
                    out,
                    "\n{} node(s), {} task(s): {} of {} {} releases were not confirmed by every \
                     node.",
                    row.nodes,
                    row.tasks,
                    t.incomplete,
                    t.cycles,
                    side.name(),
                );
            }
        }
    }
    out
}

fn redis_version() -> String {
    std::process::Command::new(redquorum_nodes::server_binary())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| {
            v.split_whitespace()
                .find_map(|w| w.strip_prefix("v=").map(|v| format!("redis {v}")))
        })
        .unwrap_or_else(|| "redis (unknown version)".to_owned())
}

fn run(args: &Args) -> Result<Vec<Row>, String> {
    if !(args.nodes.iter().chain(&args.tasks).all(|&n| n > 0) && args.phases > 0) {
        return Err("--nodes, --tasks and --phases must be positive".to_owned());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("Tokio runtime: {e}"))?;
    let mut rows = Vec::new();
    for &nodes in &args.nodes {
        // A cluster per N, started and stopped on this thread (redquorum-nodes ties the servers'
        // lifetime to the starting thread).
        let spec = NodeSpec::new().persistence(Persistence::AofAlways);
        let cluster = Cluster::start(nodes, spec)
            .map_err(|e| format!("starting {nodes} redis-server node(s): {e}"))?;
        let target = Arc::new(runtime.block_on(Target::connect(&cluster, args.ttl))?);
        for &tasks in &args.tasks {
            eprintln!("measuring {nodes} node(s), {tasks} task(s)…");
            let row = runtime.block_on(measure(&target, tasks, args))?;
            if args.json {
                println!("{}", row.json());
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(rows) => {
            eprint!("\n{}", table(&rows, &args));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
