//! What the algorithm costs: uncontended lock + release cycles through redlock, against a raw
//! baseline that sends the same commands with nothing around them.
//!
//! One file because an example is one program: the baselines, the measured loop and its report
//! must be read (and run) together for the ratio to mean anything.
//!
//! ```text
//! cargo run --release -p redquorum --example bench
//! cargo run --release -p redquorum --example bench -- --nodes 3 --tasks 32 --json
//! cargo run --release -p redquorum --example bench -- --help
//! ```
//!
//! For each node count N the bench starts N local, non-persistent `redis-server`s (redquorum-nodes;
//! stopped at the end). Every cycle uses a fresh resource name, so no cycle ever waits for
//! another:
//!
//! - **redlock**: `try_acquire` (one attempt, no retry), then `release`; plain Redlock, i.e. no
//!   fencing (unless `--fencing`), no restart quarantine (fresh servers would rightly be
//!   quarantined), and notification off (unless `--notify`, which should cost nothing here,
//!   since nobody waits; see `examples/contended.rs` for what it buys);
//! - **baseline**: `SET key value NX PX ttl` to all N nodes concurrently (`join_all`, one
//!   `MultiplexedConnection` per node, made once), then `EVALSHA` of the standard
//!   compare-and-delete script to all N concurrently. Same kind of value (20 random bytes, hex).
//!   With `--against plain`, the baseline is plain Redlock through the library instead, so that
//!   `--fencing` (or the other options) is measured against the library without it, side by
//!   side.
//!
//! Both sides run in the same process, in alternating phases (baseline, redlock, redlock,
//! baseline, …) after a warm-up of each, so that noise on the machine hits both alike: the ratios
//! are the numbers to read, the absolute rates depend on the machine. Short phases, many of them,
//! cancel noise better than long ones. Latency is one whole cycle (acquire and release), in an
//! HDR histogram. CPU per cycle (client: this process; servers: the `redis-server`s) comes from
//! `/proc` on Linux and shows overhead even when the machine is not saturated.
//!
//! Targets: with many tasks, redlock keeps at least 0.95× the baseline's cycles/s at every N;
//! with one task, its median cycle takes at most 1.1× the baseline's.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use futures_util::future::join_all;
use hdrhistogram::Histogram;
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redquorum::Redlock;
use redquorum_nodes::{Cluster, NodeSpec, RedisCluster, RedisNode, SentinelGroup};

/// The compare-and-delete script as the Redis documentation and other Redlock clients write it.
const STANDARD_RELEASE: &str = r#"if redis.call("get",KEYS[1]) == ARGV[1] then
    return redis.call("del",KEYS[1])
else
    return 0
end"#;

static NEXT_PHASE: AtomicU64 = AtomicU64::new(0);

/// Throughput needed with many tasks, as a fraction of the baseline's.
const TARGET_THROUGHPUT: f64 = 0.95;
/// Median cycle time allowed with one task, as a multiple of the baseline's.
const TARGET_LATENCY: f64 = 1.1;
/// Throughput needed over one-shard Redis Clusters with many tasks, as a fraction of the same
/// settings over plain nodes.
const TARGET_CLUSTER_THROUGHPUT: f64 = 0.9;
/// Throughput needed of a semaphore's permit or a read-write lock with many tasks, as a fraction
/// of a lock's with the same settings.
const TARGET_PRIMITIVE: f64 = 0.5;

#[derive(Debug, Parser)]
#[command(about = "Uncontended lock+release cycles: redlock against raw SET NX / EVALSHA")]
struct Args {
    /// Length of each measured phase (`2s`, `500ms`, or seconds).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    duration_per_phase: Duration,
    /// Measured phases per side and row, alternating baseline and redlock.
    #[arg(long, default_value_t = 4)]
    phases: u32,
    /// Unmeasured warm-up of each side before a row's phases.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    warmup: Duration,
    /// Node counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,3,5")]
    nodes: Vec<usize>,
    /// Concurrent task counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,32")]
    tasks: Vec<usize>,
    /// Lock TTL (never reached: every cycle releases).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    ttl: Duration,
    /// Notification on, as by default (nobody waits here, so it should cost nothing).
    #[arg(long)]
    notify: bool,

    /// Restart quarantine on, as by default, with `max_ttl` = the TTL: every acquisition also
    /// reads the node's marker back (waits until the fresh servers are trusted; no target
    /// applies).
    #[arg(long)]
    quarantine: bool,

    /// Fencing on, as by default: every lock can have a token, issued on request (no target
    /// applies against raw commands). Nobody asks unless `--ask-fence`, so it should cost
    /// nothing.
    #[arg(long)]
    fencing: bool,
    /// With `--fencing`: every cycle asks for its lock's token (`Lock::fence`), which costs one
    /// more round trip: the price of fencing for a caller that uses it.
    #[arg(long, requires = "fencing")]
    ask_fence: bool,
    /// With `--fencing`: every acquisition gets its token in its own round
    /// (`Builder::fence_on_acquire`), as the defaults did before tokens on request.
    #[arg(long, requires = "fencing")]
    fence_on_acquire: bool,
    /// Redlock's node timeout (default: the library's); raise it under valgrind.
    #[arg(long, value_parser = parse_duration)]
    node_timeout: Option<Duration>,
    /// Each task locks the same resource every cycle (a new one only after a release that left
    /// a key behind), instead of a fresh resource per cycle: fencing then updates a counter
    /// instead of creating one.
    #[arg(long)]
    reuse: bool,
    /// Print one JSON object per row on stdout (the table then goes to stderr).
    #[arg(long)]
    json: bool,
    /// Run only this side, e.g. under a profiler (no ratios then).
    #[arg(long, value_enum)]
    only: Option<Side>,
    /// What the baseline side runs: raw commands, or plain Redlock through the library
    /// (no fencing, quarantine or notification), to measure what those options cost side by side.
    #[arg(long, value_enum, default_value = "raw")]
    against: Against,
    /// The redlock side runs over N Redis Clusters of one master and this many replicas each
    /// (`redis+cluster://`), the baseline over N plain nodes with the same settings and as many
    /// plain replicas each (`--replicaof`, so that both sides pay for replication on this one
    /// machine): what routing and the vote's `WAIT` for replicas cost. Target: ≥ 0.9× the
    /// cycles/s with many tasks.
    #[arg(long, conflicts_with = "sentinel_replicas")]
    cluster_replicas: Option<usize>,
    /// The redlock side runs over N primaries behind Redis Sentinel (three sentinels each), with
    /// this many replicas each (`redis+sentinel://`), the baseline over N plain nodes with the
    /// same settings and as many plain replicas each: what following the sentinels and the
    /// vote's `WAIT` cost.
    #[arg(long)]
    sentinel_replicas: Option<usize>,
    /// With `--cluster-replicas`: masters per Redis Cluster, sharing the slots. The table then
    /// also shows each master's server CPU per cycle in the first cluster (how evenly uniformly
    /// named resources spread over the shards).
    #[arg(long, default_value_t = 1, requires = "cluster_replicas")]
    cluster_shards: usize,
    /// What the redlock side takes each cycle: a lock, a semaphore's permit (`--permits`), or a
    /// read-write lock as reader or writer. Against `--against mutex`, the baseline is a lock
    /// with the same settings, side by side.
    #[arg(long, value_enum, default_value = "lock")]
    primitive: Primitive,
    /// The semaphore's permits with `--primitive permit`.
    #[arg(long, default_value_t = 4)]
    permits: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Against {
    Raw,
    Plain,
    /// A lock through the library with the same settings: for `--primitive`.
    Mutex,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Primitive {
    Lock,
    Permit,
    Read,
    Write,
}

impl Args {
    fn runs(&self, side: Side) -> bool {
        self.only.is_none_or(|only| only == side)
    }
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Side {
    Baseline,
    Redlock,
}

/// Everything one row's cycles need, for both sides, connected before measuring.
struct Target {
    nodes: usize,
    /// The servers' pids, to read their CPU time.
    server_pids: Vec<u32>,
    /// With `--cluster-replicas`: the first cluster's masters, to read each one's CPU time.
    shard_pids: Vec<u32>,
    redlock: Redlock,
    /// The baseline with `--against plain`: the library with none of the options.
    plain: Option<Redlock>,
    conns: Vec<MultiplexedConnection>,
    release_sha: String,
    ttl: Duration,
    ttl_ms: u64,
    /// `--reuse`: a task's resource name is kept from cycle to cycle.
    reuse: bool,
    /// What the redlock side takes each cycle.
    primitive: Primitive,
    permits: u32,
    /// `--ask-fence`: the redlock side asks for every lock's token.
    ask_fence: bool,
}

impl Target {
    /// With `redis_clusters` (their URLs and every server's pid), the redlock side runs over
    /// them and the baseline is the same settings over `cluster`'s plain nodes.
    async fn connect(
        cluster: &Cluster,
        redis_clusters: Option<(Vec<String>, Vec<u32>)>,
        shard_pids: Vec<u32>,
        args: &Args,
    ) -> Self {
        let urls = cluster.urls();
        let redlock_urls = redis_clusters
            .as_ref()
            .map_or_else(|| urls.clone(), |(urls, _)| urls.clone());
        // Plain Redlock, the same commands as the baseline: no fencing round unless asked for, and
        // no restart quarantine, which would (rightly) not count the votes of servers that
        // started a moment ago.
        let configured = |urls: &[String]| {
            let mut builder = Redlock::builder(urls.iter().cloned())
                .quarantine(args.quarantine)
                .max_ttl(args.ttl)
                .fence_retention(args.ttl * 2)
                .fencing(args.fencing)
                .fence_on_acquire(args.fence_on_acquire)
                .notify(args.notify);
            if let Some(timeout) = args.node_timeout {
                builder = builder.node_timeout(timeout);
            }
            builder.build().expect("valid bench configuration")
        };
        let redlock = configured(&redlock_urls);
        let plain = if redis_clusters.is_some() {
            // The same settings over the plain nodes.
            Some(configured(&urls))
        } else if args.against == Against::Mutex {
            Some(configured(&urls))
        } else {
            (args.against == Against::Plain).then(|| {
                // The same max_ttl: the first manager to meet a fresh server writes its marker,
                // which vouches for it only max_ttl later.
                let mut builder = Redlock::builder(urls.iter().cloned())
                    .max_ttl(args.ttl)
                    .quarantine(false)
                    .fencing(false)
                    .notify(false);
                if let Some(timeout) = args.node_timeout {
                    builder = builder.node_timeout(timeout);
                }
                builder.build().expect("valid bench configuration")
            })
        };
        if let Some(plain) = &plain {
            trusted(plain, args).await;
        }
        let ttl = args.ttl;
        trusted(&redlock, args).await;
        // Like redlock's connections, no response timeout inside redis-rs: the baseline has no
        // timers at all.
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        let mut conns = Vec::with_capacity(urls.len());
        let mut release_sha = String::new();
        for url in &urls {
            let client = redis::Client::open(url.as_str()).expect("valid node URL");
            let mut conn = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .expect("baseline connects to the node");
            release_sha = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg(STANDARD_RELEASE)
                .query_async(&mut conn)
                .await
                .expect("SCRIPT LOAD of the release script");
            conns.push(conn);
        }
        let mut server_pids: Vec<u32> = cluster.iter().filter_map(|node| node.pid()).collect();
        if let Some((_, pids)) = &redis_clusters {
            server_pids.extend(pids);
        }
        Self {
            nodes: urls.len(),
            server_pids,
            shard_pids,
            redlock,
            plain,
            conns,
            release_sha,
            ttl,
            ttl_ms: u64::try_from(ttl.as_millis()).expect("TTL fits in u64 milliseconds"),
            reuse: args.reuse,
            primitive: args.primitive,
            permits: args.permits,
            ask_fence: args.ask_fence,
        }
    }

    /// One cycle; `false` if the release missed a node that had granted the lock.
    async fn cycle(&self, side: Side, key: &str) -> bool {
        match side {
            Side::Baseline => match &self.plain {
                Some(plain) => self.redlock_cycle(plain, key, Primitive::Lock, false).await,
                None => {
                    self.baseline_cycle(key).await;
                    true
                }
            },
            Side::Redlock => {
                self.redlock_cycle(&self.redlock, key, self.primitive, self.ask_fence)
                    .await
            }
        }
    }

    async fn redlock_cycle(
        &self,
        redlock: &Redlock,
        key: &str,
        primitive: Primitive,
        ask_fence: bool,
    ) -> bool {
        let lock = match primitive {
            Primitive::Lock => redlock.try_acquire(key, self.ttl).await,
            Primitive::Permit => {
                redlock
                    .try_acquire_permit(key, self.permits, self.ttl)
                    .await
            }
            Primitive::Read => redlock.try_acquire_read(key, self.ttl).await,
            Primitive::Write => redlock.try_acquire_write(key, self.ttl).await,
        }
        .expect("an uncontended lock is granted");
        let mut lock = lock;
        if ask_fence {
            lock.fence().await.expect("a token for a held lock");
        }
        let released = lock.release().await;
        // Rarely, a node that had not answered when the quorum was reached gets the release
        // before its SET (that SET was still waiting for room in the connection's queue); its key
        // then stays until the TTL. Counted and reported, not fatal: keys are never reused.
        released.confirmed == self.nodes
    }

    async fn baseline_cycle(&self, key: &str) {
        let value = random_value();
        let set = join_all(self.conns.iter().map(|conn| {
            let mut conn = conn.clone();
            let mut cmd = redis::cmd("SET");
            cmd.arg(key)
                .arg(&value)
                .arg("NX")
                .arg("PX")
                .arg(self.ttl_ms);
            async move { cmd.query_async::<redis::Value>(&mut conn).await }
        }))
        .await;
        for reply in set {
            let reply = reply.expect("baseline SET reaches the node");
            assert_eq!(
                reply,
                redis::Value::Okay,
                "an uncontended SET NX is granted"
            );
        }
        let released = join_all(self.conns.iter().map(|conn| {
            let mut conn = conn.clone();
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&self.release_sha).arg(1).arg(key).arg(&value);
            async move { cmd.query_async::<i64>(&mut conn).await }
        }))
        .await;
        for reply in released {
            let deleted = reply.expect("baseline EVALSHA reaches the node");
            assert_eq!(deleted, 1, "the baseline's own key is deleted");
        }
    }
}

/// Connects `redlock` to every node and waits until each votes: a fresh server is trusted once
/// it has been up for max_ttl (it shows its marker), with `--quarantine`.
async fn trusted(redlock: &Redlock, args: &Args) {
    let mut replies = redlock.connect().await;
    let trusted_by = Instant::now() + args.ttl + Duration::from_secs(5);
    while replies
        .iter()
        .any(|r| matches!(r.reply, redquorum::Reply::Quarantined(_)))
        && Instant::now() < trusted_by
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
        replies = redlock.connect().await;
    }
    assert!(
        replies.iter().all(|r| r.reply.is_granted()),
        "every node answers: {replies:?}"
    );
}

/// 20 random bytes as hex, as redlock makes its lock values.
fn random_value() -> String {
    let mut bytes = [0u8; 20];
    rand::fill(&mut bytes);
    bytes.iter().fold(String::with_capacity(40), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

/// Cycle latencies in nanoseconds, 1 ns to 60 s, 3 significant digits.
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("valid histogram bounds")
}

/// What one side did over all its measured phases.
struct Totals {
    cycles: u64,
    /// Cycles whose release was not confirmed by every node.
    incomplete: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
    /// CPU time of this process (client) and of the servers, when `/proc` tells.
    client_cpu: Option<Duration>,
    server_cpu: Option<Duration>,
    /// Each of the first cluster's masters (`--cluster-shards`).
    shard_cpu: Vec<Option<Duration>>,
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
            shard_cpu: Vec::new(),
        }
    }

    /// CPU time per cycle in µs.
    fn cpu_us(&self, cpu: Option<Duration>) -> Option<f64> {
        cpu.map(|c| c.as_secs_f64() * 1e6 / self.cycles as f64)
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
}

/// Runs `tasks` tasks of back-to-back cycles for `duration` and adds what they did to `totals`.
async fn phase(
    target: &Arc<Target>,
    side: Side,
    tasks: usize,
    duration: Duration,
    totals: &mut Totals,
) {
    let cpu_before = cpu_times(target);
    let shards_before: Vec<Option<Duration>> = target
        .shard_pids
        .iter()
        .map(|&pid| process_cpu(pid))
        .collect();
    // Fresh keys in every phase and cycle (unless `--reuse`), so that a key left behind never
    // meets a later cycle.
    let phase_id = NEXT_PHASE.fetch_add(1, Ordering::Relaxed);
    let start = Instant::now();
    let end = start + duration;
    let workers: Vec<_> = (0..tasks)
        .map(|task| {
            let target = Arc::clone(target);
            tokio::spawn(async move {
                let mut latency = histogram();
                let mut incomplete = 0;
                let mut key = String::new();
                // With `--reuse`, a task keeps its resource name until a release leaves a key
                // behind (its next name then starts fresh).
                let mut name = 0u64;
                for cycle in 0u64.. {
                    if Instant::now() >= end {
                        break;
                    }
                    if !target.reuse {
                        name = cycle;
                    }
                    key.clear();
                    let _ = write!(key, "bench:{phase_id}:{task}:{name}");
                    let t0 = Instant::now();
                    if !target.cycle(side, &key).await {
                        incomplete += 1;
                        name = cycle + 1;
                    }
                    latency.saturating_record(
                        u64::try_from(t0.elapsed().as_nanos()).unwrap_or(u64::MAX),
                    );
                }
                (latency, incomplete)
            })
        })
        .collect();
    for worker in workers {
        let (latency, incomplete) = worker.await.expect("bench task panicked");
        totals.cycles += latency.len();
        totals.incomplete += incomplete;
        totals
            .latency
            .add(&latency)
            .expect("histograms of equal bounds add up");
    }
    totals.elapsed += start.elapsed();
    let cpu_after = cpu_times(target);
    add_cpu(&mut totals.client_cpu, cpu_before.0, cpu_after.0);
    add_cpu(&mut totals.server_cpu, cpu_before.1, cpu_after.1);
    totals
        .shard_cpu
        .resize(target.shard_pids.len(), Some(Duration::ZERO));
    for ((total, before), &pid) in totals
        .shard_cpu
        .iter_mut()
        .zip(shards_before)
        .zip(&target.shard_pids)
    {
        add_cpu(total, before, process_cpu(pid));
    }
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
/// (nanoseconds on a CPU). `None` where there is no `/proc`. Threads that already exited are not
/// counted; the runtime's workers and the servers' threads live for the whole run.
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
    baseline: Totals,
    redlock: Totals,
}

impl Row {
    fn throughput_ratio(&self) -> f64 {
        self.redlock.rate() / self.baseline.rate()
    }

    fn latency_ratio(&self) -> f64 {
        self.redlock.p50_us() / self.baseline.p50_us()
    }

    /// The target this row is held to and whether it meets it; `None` when none applies (fencing
    /// adds a round trip; one side only).
    fn verdict(&self, args: &Args) -> Option<(String, bool)> {
        if args.cluster_replicas.is_some() && self.tasks > 1 && args.only.is_none() {
            let ratio = self.throughput_ratio();
            return Some((
                format!("cycles/s ≥ {TARGET_CLUSTER_THROUGHPUT}× plain nodes: {ratio:.2}×"),
                ratio >= TARGET_CLUSTER_THROUGHPUT,
            ));
        }
        if args.against == Against::Mutex {
            if self.tasks == 1 {
                return None;
            }
            let ratio = self.throughput_ratio();
            return Some((
                format!("cycles/s ≥ {TARGET_PRIMITIVE}× the lock: {ratio:.2}×"),
                ratio >= TARGET_PRIMITIVE,
            ));
        }
        if args.cluster_replicas.is_some()
            || args.sentinel_replicas.is_some()
            || args.fencing
            || args.quarantine
            || args.only.is_some()
            || args.against == Against::Plain
        {
            return None;
        }
        Some(if self.tasks == 1 {
            let ratio = self.latency_ratio();
            (
                format!("p50 ≤ {TARGET_LATENCY}×: {ratio:.2}×"),
                ratio <= TARGET_LATENCY,
            )
        } else {
            let ratio = self.throughput_ratio();
            (
                format!("cycles/s ≥ {TARGET_THROUGHPUT}×: {ratio:.2}×"),
                ratio >= TARGET_THROUGHPUT,
            )
        })
    }

    fn json(&self, args: &Args) -> serde_json::Value {
        let side = |t: &Totals| {
            serde_json::json!({
                "cycles": t.cycles,
                "incomplete_releases": t.incomplete,
                "seconds": t.elapsed.as_secs_f64(),
                "cycles_per_s": t.rate(),
                "p50_us": t.p50_us(),
                "p99_us": t.p99_us(),
                "max_us": t.latency.max() as f64 / 1e3,
                "client_cpu_us_per_cycle": t.cpu_us(t.client_cpu),
                "server_cpu_us_per_cycle": t.cpu_us(t.server_cpu),
            })
        };
        serde_json::json!({
            "nodes": self.nodes,
            "tasks": self.tasks,
            "baseline": side(&self.baseline),
            "redlock": side(&self.redlock),
            "throughput_ratio": self.throughput_ratio(),
            "p50_ratio": self.latency_ratio(),
            "fencing": args.fencing,
            "quarantine": args.quarantine,
            "notify": args.notify,
            "against": format!("{:?}", args.against).to_lowercase(),
            "reuse": args.reuse,
            "cluster_replicas": args.cluster_replicas,
            "sentinel_replicas": args.sentinel_replicas,
            "cluster_shards": args.cluster_replicas.map(|_| args.cluster_shards),
            "shard_cpu_us_per_cycle": self
                .redlock
                .shard_cpu
                .iter()
                .map(|cpu| self.redlock.cpu_us(*cpu))
                .collect::<Vec<_>>(),
            "target_met": self.verdict(args).map(|(_, met)| met),
        })
    }
}

async fn measure(target: &Arc<Target>, tasks: usize, args: &Args) -> Row {
    for side in [Side::Baseline, Side::Redlock] {
        if !args.runs(side) {
            continue;
        }
        phase(target, side, tasks, args.warmup, &mut Totals::new()).await;
    }
    let (mut baseline, mut redlock) = (Totals::new(), Totals::new());
    for i in 0..args.phases {
        // ABBA order, so that a drift during the row does not favour either side.
        let order = if i % 2 == 0 {
            [Side::Baseline, Side::Redlock]
        } else {
            [Side::Redlock, Side::Baseline]
        };
        for side in order {
            if !args.runs(side) {
                continue;
            }
            let totals = match side {
                Side::Baseline => &mut baseline,
                Side::Redlock => &mut redlock,
            };
            phase(target, side, tasks, args.duration_per_phase, totals).await;
        }
    }
    Row {
        nodes: target.nodes,
        tasks,
        baseline,
        redlock,
    }
}

fn table(rows: &[Row], args: &Args) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Uncontended `try_acquire{}` + `release`{}, {}; baseline = {}. \
         {} × {:?} per side and row, {} cores, {}.\n",
        match args.primitive {
            Primitive::Lock => "",
            Primitive::Permit => "_permit",
            Primitive::Read => "_read",
            Primitive::Write => "_write",
        },
        {
            let fencing = match (args.fencing, args.fence_on_acquire, args.ask_fence) {
                (false, ..) => "",
                (true, false, false) => " with fencing (tokens on request, none asked)",
                (true, false, true) => " with fencing (every token asked for)",
                (true, true, _) => " with fencing (every token with its acquisition)",
            };
            let notify = if args.notify {
                ", announced releases"
            } else {
                ""
            };
            format!("{fencing}{notify}")
        },
        if args.reuse {
            "the same resource per task"
        } else {
            "a fresh resource per cycle"
        },
        match (args.cluster_replicas, args.against) {
            (Some(_), _) =>
                "the same settings over plain nodes (redlock: one-shard Redis Clusters)",
            (None, _) if args.sentinel_replicas.is_some() =>
                "the same settings over plain nodes with plain replicas (redlock: Sentinel primaries)",
            (None, Against::Raw) => "raw `SET NX PX` then `EVALSHA` on every node",
            (None, Against::Plain) => "plain Redlock (no fencing, quarantine or notification)",
            (None, Against::Mutex) => "a lock through the library, same settings",
        },
        args.phases,
        args.duration_per_phase,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        redis_version(),
    );
    out.push_str(
        "| nodes | tasks | baseline cycles/s | redlock cycles/s | ratio \
         | baseline p50 / p99 (µs) | redlock p50 / p99 (µs) | p50 ratio \
         | client CPU µs/cycle, baseline / redlock | servers CPU µs/cycle, baseline / redlock \
         | target |\n",
    );
    out.push_str("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    for row in rows {
        let (b, r) = (&row.baseline, &row.redlock);
        let target = match row.verdict(args) {
            Some((target, met)) => format!("{target} {}", if met { "✅" } else { "❌" }),
            None => "–".to_owned(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} / {} | {} / {} | {} | {} / {} | {} / {} | {target} |",
            row.nodes,
            row.tasks,
            num(b.rate(), 0),
            num(r.rate(), 0),
            num(row.throughput_ratio(), 3),
            num(b.p50_us(), 1),
            num(b.p99_us(), 1),
            num(r.p50_us(), 1),
            num(r.p99_us(), 1),
            num(row.latency_ratio(), 3),
            opt(b.cpu_us(b.client_cpu)),
            opt(r.cpu_us(r.client_cpu)),
            opt(b.cpu_us(b.server_cpu)),
            opt(r.cpu_us(r.server_cpu)),
        );
    }
    for row in rows.iter().filter(|row| row.redlock.shard_cpu.len() > 1) {
        let r = &row.redlock;
        let per_cycle: Vec<f64> = r
            .shard_cpu
            .iter()
            .map(|cpu| r.cpu_us(*cpu).unwrap_or(f64::NAN))
            .collect();
        let total: f64 = per_cycle.iter().sum();
        let busiest = per_cycle.iter().copied().fold(0.0, f64::max);
        let shares: Vec<String> = per_cycle
            .iter()
            .map(|us| format!("{us:.1} µs ({:.0}%)", 100.0 * us / total))
            .collect();
        let _ = writeln!(
            out,
            "\n{} node(s), {} task(s): the first cluster's masters, server CPU per cycle: {}; \
             busiest {:.0}% of the cluster's total. One master per host, each with a core of its \
             own, would bound a cluster at {:.0} cycles/s (1 s / the busiest master's CPU per \
             cycle), against {:.0} for one master doing all of it.",
            row.nodes,
            row.tasks,
            shares.join(", "),
            100.0 * busiest / total,
            1e6 / busiest,
            1e6 / total,
        );
    }
    for row in rows.iter().filter(|row| row.redlock.incomplete > 0) {
        let _ = writeln!(
            out,
            "\n{} node(s), {} task(s): {} of {} redlock releases were not confirmed by every node.",
            row.nodes, row.tasks, row.redlock.incomplete, row.redlock.cycles,
        );
    }
    out
}

/// `x` with `decimals`, or a dash when there is no number (a side that did not run).
fn num(x: f64, decimals: usize) -> String {
    if x.is_finite() && x > 0.0 {
        format!("{x:.decimals$}")
    } else {
        "–".to_owned()
    }
}

fn opt(x: Option<f64>) -> String {
    num(x.unwrap_or(f64::NAN), 1)
}

fn redis_version() -> String {
    let server = redquorum_nodes::server_binary();
    std::process::Command::new(&server)
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

fn main() {
    let args = Args::parse();
    assert!(
        args.nodes.iter().chain(&args.tasks).all(|&n| n > 0) && args.phases > 0,
        "--nodes, --tasks and --phases must be positive"
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let mut rows = Vec::new();
    for &nodes in &args.nodes {
        // A cluster per N, started and stopped on this thread (redquorum-nodes ties the servers'
        // lifetime to the starting thread).
        let cluster = Cluster::start(nodes, NodeSpec::new()).expect("start redis-server nodes");
        // With --cluster-replicas: as many plain replicas of each plain node (the baseline's).
        let plain_replicas: Vec<RedisNode> = cluster
            .iter()
            .flat_map(|master| {
                let port = master.port().to_string();
                let replicas = args.cluster_replicas.or(args.sentinel_replicas);
                (0..replicas.unwrap_or(0)).map(move |_| {
                    let spec = NodeSpec::new()
                        .arg("--replicaof")
                        .arg("127.0.0.1")
                        .arg(port.clone());
                    RedisNode::start(spec).expect("start a plain replica")
                })
            })
            .collect();
        // With --cluster-replicas: N one-shard Redis Clusters for the redlock side.
        let mut redis_clusters: Vec<RedisCluster> = args
            .cluster_replicas
            .map(|replicas| {
                (0..nodes)
                    .map(|_| {
                        let mut cluster =
                            RedisCluster::start(args.cluster_shards, replicas, NodeSpec::new())
                                .expect("start a Redis Cluster");
                        cluster
                            .mark_masters(redquorum::cluster_marker)
                            .expect("markers written");
                        cluster
                    })
                    .collect()
            })
            .unwrap_or_default();
        // With --sentinel-replicas: N primaries behind sentinels for the redlock side.
        let mut sentinel_groups: Vec<SentinelGroup> = args
            .sentinel_replicas
            .map(|replicas| {
                (0..nodes)
                    .map(|_| {
                        SentinelGroup::start(replicas, 3, NodeSpec::new())
                            .expect("start a Sentinel group")
                    })
                    .collect()
            })
            .unwrap_or_default();
        let sentinel_side = args.sentinel_replicas.map(|_| {
            let urls = sentinel_groups.iter().map(SentinelGroup::url).collect();
            let pids: Vec<u32> = sentinel_groups
                .iter_mut()
                .flat_map(|g| {
                    (0..g.data_len())
                        .filter_map(|i| g.data_node(i).pid())
                        .collect::<Vec<_>>()
                })
                .chain(plain_replicas.iter().filter_map(RedisNode::pid))
                .collect();
            (urls, pids)
        });
        let cluster_side = args.cluster_replicas.map(|_| {
            let urls = redis_clusters.iter().map(RedisCluster::url).collect();
            let pids: Vec<u32> = redis_clusters
                .iter_mut()
                .flat_map(|c| {
                    (0..c.len())
                        .filter_map(|i| c.node(i).pid())
                        .collect::<Vec<_>>()
                })
                .collect();
            let pids = pids
                .into_iter()
                .chain(plain_replicas.iter().filter_map(RedisNode::pid))
                .collect();
            (urls, pids)
        });
        let shard_pids: Vec<u32> = redis_clusters
            .first_mut()
            .map(|first| {
                (0..args.cluster_shards)
                    .filter_map(|m| first.node(m).pid())
                    .collect()
            })
            .unwrap_or_default();
        let target = Arc::new(runtime.block_on(Target::connect(
            &cluster,
            cluster_side.or(sentinel_side),
            shard_pids,
            &args,
        )));
        for &tasks in &args.tasks {
            eprintln!("measuring {nodes} node(s), {tasks} task(s)…");
            let row = runtime.block_on(measure(&target, tasks, &args));
            if args.json {
                println!("{}", row.json(&args));
            }
            rows.push(row);
        }
        drop(target);
        drop(cluster);
        drop(redis_clusters);
        drop(sentinel_groups);
        drop(plain_replicas);
    }
    let table = table(&rows, &args);
    if args.json {
        eprint!("\n{table}");
    } else {
        print!("\n{table}");
    }
}
