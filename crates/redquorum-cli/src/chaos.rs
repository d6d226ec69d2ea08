//! `redlock chaos`: a Jepsen-style run. Local servers, lock clients competing for a few
//! resources, faults injected from a seed, and a checker that judges the recorded history.
//!
//! The run itself is `redquorum_chaos::run_until`; this file parses the flags, shows a progress
//! line while it runs (stderr), and prints the checker's summary table (or one JSON object) on
//! stdout. The servers are the run's own children on loopback ports, killed at the end, also on
//! Ctrl-C; the global `--servers`, `--max-ttl`, `--no-quarantine` and `--no-fencing` options do
//! not apply (each strategy fixes its own configuration).
//!
//! Exit status: 0 no violation; 1 a violation (overlapping holders, more holders than permits,
//! fencing tokens going back, a lock taken within the lock-delay of one left unreleased); 64 bad
//! arguments; 69 redis-server not installed; 71 OS error (ports, processes, the
//! report file); 130/143 stopped by SIGINT/SIGTERM.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::path::PathBuf;
use std::time::Duration;

use redquorum_chaos::runner::Snapshot;
use redquorum_chaos::{
    ChaosConfig, ChaosError, Fault, Phase, Primitive, Progress, Strategy, Verdict,
};
use serde::Serialize;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::exit::Outcome;
use crate::exit::{Failure, OK, USAGE};
use crate::{duration, nodes, output, progress};

/// The exit status when the checker found a violation.
pub const VIOLATION: u8 = 1;

const AFTER_HELP: &str = "\
Starts local redis-server nodes (loopback, appendonly with fsync always) behind TCP proxies, runs
--clients lock clients (each with its own connections) competing for --resources resources, and
injects faults drawn from --seed: about one every 1-3 s, each lasting 0.5-2 s, never more than a
minority of nodes at once. Each client loops: acquire, work 20-400 ms, check validity, write to a
fenced store (stale tokens refused), release. The history is then checked: two holders that both
believed themselves valid at once, or fencing tokens going backwards, are violations.

Semaphores (--permits K): each client takes one of K permits of a resource instead of its lock
(the library: a permit is a lock key of its own, <resource>:permit:<i>). Violations then: more
than K holders believing themselves valid at once, two holders of one permit at once, a permit's
tokens going back; the fenced store keeps the largest token per permit.

Read-write locks (--read-write, the library's strategies): each client takes a resource as a
reader three times in four, else as its writer. Violations then: a writer together with a reader
or another writer, a writer's token not above every earlier token, a reader's below an earlier
writer's. Elections (--election): each client campaigns for a resource, leads (its term the
fencing token), resigns; violations: two leaders at once, a term not larger than the last.

Lock-delay (--lock-delay DUR, the library's strategies, at most 10s): a lock its holder did not
release stays out of reach for DUR after the holder's validity ended; max-ttl becomes 2 s + DUR.
Checked from the history: a section that ended without a release while valid (client-crash, a
client-pause that released late, by value, as a process it was handed to would, or
client-handoff, whose deadline is then the extension's) keeps its lock until its deadline + the
delay: a release after the deadline frees nothing; another holder entering before then is a
violation. --check-delay DUR judges the history against another delay than the run's own, e.g. a
run without lock-delay against the delay it lacks.

Strategies (--strategy):
  redlock                 this library with its defaults, 5 nodes: quarantine (durable nodes trusted
                          when they show their marker key), fencing
  redlock-no-quarantine   the same with the restart quarantine off (plain Redlock)
  redlock-release-ignores-delay
                          redlock, but a release frees the lock even after its validity (the
                          rule a late release defeats under --lock-delay; restored to show that
                          client-pause catches it)
  redlock-hand-marker-vouches
                          redlock, but a marker written by hand vouches like a drawn one
                          (restored to show that replace-marked catches it)
  single-instance         this library on one node
  single-with-failover    one master, one replica whose replication lags 2.5 s (more than a
                          TTL); a kill promotes the replica (quarantine off, as a
                          single-instance client)
  setnx-getset            the old SETNX/GETSET timestamp recipe, DEL to release, no fencing
  redlock-cluster         this library with its defaults over 3 Redis Clusters (1 master + 1
                          replica each, one redis+cluster:// node per cluster, no proxies): a
                          promoted replica is quarantined (its marker names the old master)
  redlock-cluster-wait    the same with .quarantine(false).wait_for_replicas(true): every vote
                          waits (WAIT) for the shard's replica
  redlock-cluster-no-failover-rule
                          the same with .quarantine(false).wait_for_replicas(false): neither rule
  redlock-cluster-run-id-marker
                          redlock-cluster, but a master's marker names its run_id alone (the
                          rule a failback defeats; restored to show that failback catches it)
  redlock-sentinel        this library with its defaults over one primary with a replica behind
                          three sentinels (one redis+sentinel:// node, no proxies): votes wait
                          for the replica, a promoted replica is judged by what clients saw
  redlock-sentinel-trusting
                          redlock-sentinel, but trusting whatever server the sentinels name (no
                          WAIT, no judgement: restored to show that the Sentinel faults catch it)
  redlock-replicated      this library with its defaults over one primary with two replicas
                          behind one proxy that moves on failover (a managed endpoint; one
                          redis+replicated://…?replicas=2 node): votes wait for the replicas,
                          the new server behind the address is judged by its history
  redlock-replicated-trusting
                          redlock-replicated, but trusting whatever server answers behind the
                          address (no WAIT, no judgement: restored to show that kill and
                          failover catch it)
  semaphore-counting      a semaphore only (needs --permits): a count per node, each node a set
                          of holders with expiry that grants while it has fewer than K, held on
                          a majority of grants (three majorities need not share a node)
All use a 2 s TTL (and max-ttl); --nodes applies to redlock, redlock-no-quarantine,
redlock-release-ignores-delay and semaphore-counting only. The global --servers,
--node-timeout, --max-ttl, --no-quarantine, --no-fencing and --trust-first-sight do not apply
here (the library's strategies trust first sight: no fault here steps a clock).

Faults (--faults, comma-separated, or none):
  kill          SIGKILL a node, restart it later with its data (AOF); failover pair: fail over
  restart       SIGKILL a node, restart it later with its data deleted; failover pair: fail over
  pause         SIGSTOP a node, SIGCONT later
  delay         hold back every chunk through a node's proxy 50-300 ms
  drop          close every connection through a node's proxy (not in the default list)
  client-pause  a client sleeps past its validity between its check and its write
  restart-burst a majority of nodes, one after the other: SIGKILL, restart with data deleted
  flush         FLUSHALL on a majority of nodes (a running server loses its data)
  replace       a majority of proxies switch to different, empty, long-running servers, and
                back later
  replace-marked  as replace, each new server first marked by hand with the same word
                (SET redlock-node-marker manual), as an operator once did (not in the
                default list)
  blackhole     a node's proxy stops forwarding on its open connections, which stay open;
                new connections work
  failover      redlock-cluster*, redlock-sentinel* and redlock-replicated* only: a majority
                of the Redis Clusters (or the Sentinel node, or one of the two replicas behind
                the address) stop replicating for 2.5 s (more than a TTL) while clients keep
                locking, then the replicas take over (CLUSTER FAILOVER TAKEOVER; SENTINEL
                FAILOVER; REPLICAOF NO ONE and the address moved), missing those writes
  failback      redlock-cluster* only: as failover, with a 0.3 s window and the replicas'
                client writes paused while they lead; once the old masters resynchronised
                from them (losing the window's writes), the old masters take over again
  client-crash  a client crashes in its critical section after its work: it abandons its lock
                unreleased, as a dead process would (not in the default list)
  client-handoff  the library's strategies only: a client, in its critical section after its
                work, hands its lock to another process, which extends it by value for a TTL
                from a manager without lock-delay (same servers, otherwise the strategy's
                settings); then nobody releases it. The lock must stay out of reach until the
                extension's deadline + the lock-delay (a reader's hold, never extended, or an
                extension that fails leaves a crash's lock); the table counts the handoffs (not
                in the default list)
  partition     a ring of majorities: client c is cut off from every node outside the
                majority of consecutive nodes from c + offset on (c mod nodes; offset drawn per
                fault), its connections closed and refused, for 2.5-4 s (longer than a TTL);
                independent nodes only, never with a node fault (not in the default list)
Default: kill,pause,restart,delay,client-pause,restart-burst,flush,replace,blackhole; for the
redlock-cluster* strategies failover,failback,pause,client-pause,flush (client-crash and
client-handoff apply to them too); for the redlock-sentinel* strategies kill,pause,failover,
client-pause,flush, where kill and pause hit the primary and the sentinels fail over by
themselves (a primary is down after 1 s); for the redlock-replicated* strategies
kill,restart,failover,pause,drop,delay,blackhole,client-pause,flush, where kill and restart
promote a replica and move the address to it, and pause is an outage without a failover. The
cluster and Sentinel layouts have no proxies, so delay, drop, blackhole, replace and
partition do not apply to them, nor do kill, restart and restart-burst (a one-master cluster
whose master is down is an outage); nor does partition to single-with-failover, nor
client-handoff to setnx-getset and semaphore-counting (no extension by value). Kinds that do
not apply are left out of the plan, and the first line says which.

Output: the summary table on stdout; with --json one line instead: {\"strategy\", \"seed\",
\"nodes\", \"clients\", \"duration_ms\", \"sections\", \"faults\", \"overlaps\", \"token_violations\",
\"stale_writes_rejected\", \"violations\", \"safe\", \"permits\", \"most_holders\",
\"over_permits\", \"lock_delay_ms\", \"checked_delay_ms\", \"unreleased\", \"delay_violations\"}
(permits is null for a lock run). --report FILE.html|.svg|.json writes the full
history and verdict, with a timeline.

Examples:
  redlock chaos --duration 30s
  redlock chaos --strategy single-with-failover --faults kill --duration 10s --seed 7
  redlock chaos --strategy setnx-getset --faults client-pause --report run.html
  redlock chaos --strategy redlock-cluster-no-failover-rule --faults failover --seed 1
  redlock chaos --strategy redlock-cluster-run-id-marker --faults failback --seed 1
  redlock chaos --strategy redlock-sentinel --duration 30s
  redlock chaos --strategy redlock-replicated-trusting --faults failover --seed 1
  redlock chaos --permits 2 --duration 30s
  redlock chaos --strategy semaphore-counting --permits 2 --faults partition --duration 10s
  redlock chaos --lock-delay 1s --faults client-crash,client-pause --duration 20s
  redlock chaos --lock-delay 1s --faults client-handoff --duration 10s
  redlock chaos --strategy redlock-release-ignores-delay --lock-delay 1s --faults client-pause
  redlock chaos --faults client-crash,client-pause --check-delay 1s --duration 20s

Exit status: 0 no violation; 1 a violation was found; 64 bad arguments; 69 redis-server is not
installed; 71 operating-system error (also writing the report); 130/143 stopped by SIGINT/SIGTERM.";

/// Run lock clients against local servers under injected faults and check the history.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Independent nodes, for redlock and redlock-no-quarantine.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=15))]
    nodes: u16,

    /// Lock clients.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    clients: u32,

    /// Resources the clients compete for.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    resources: u16,

    /// How long the workload runs (start-up and warm-up not included).
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "60s")]
    duration: Duration,

    /// Fault kinds to inject, comma-separated, or none [default: see below, per strategy].
    #[arg(long, value_name = "LIST", value_parser = parse_faults)]
    faults: Option<Faults>,

    /// The lock design under test.
    #[arg(long, value_name = "NAME", value_parser = parse_strategy, default_value = "redlock")]
    strategy: Strategy,

    /// Semaphore workload: each client takes one of K permits of a resource [default: off, the
    /// lock workload; semaphore-counting needs it].
    #[arg(long, value_name = "K", value_parser = clap::value_parser!(u32).range(1..=64))]
    permits: Option<u32>,

    /// Read-write workload: readers (3 in 4) and writers of each resource.
    #[arg(long, conflicts_with_all = ["permits", "election"])]
    read_write: bool,

    /// Election workload: clients campaign for each resource, lead, resign.
    #[arg(long, conflicts_with = "permits")]
    election: bool,

    /// Lock-delay of the library's strategies: an unreleased lock stays out of reach this long
    /// after its holder's validity (at most 10s).
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "0s")]
    lock_delay: Duration,

    /// Judge the history against this lock-delay instead of --lock-delay.
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    check_delay: Option<Duration>,

    /// Seed of the fault schedule and the clients' choices [default: random, shown in the
    /// output].
    #[arg(long, value_name = "S")]
    seed: Option<u64>,

    /// Print one JSON object with the verdict's numbers instead of the table.
    #[arg(long)]
    json: bool,

    /// Also write the history and verdict to FILE (.html, .svg or .json).
    #[arg(long, value_name = "FILE", value_parser = report_path)]
    report: Option<PathBuf>,
}

/// The enabled fault kinds: one value, so clap does not take the list for repeated flags.
#[derive(Debug, Clone)]
struct Faults(Vec<Fault>);

fn parse_faults(list: &str) -> Result<Faults, String> {
    Fault::parse_list(list).map(Faults)
}

fn parse_strategy(name: &str) -> Result<Strategy, String> {
    name.parse()
}

/// Checks the report's extension before the run, so a typo does not cost a whole run.
fn report_path(text: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(text);
    match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if ["html", "svg", "json"].contains(&ext.to_ascii_lowercase().as_str()) => {
            Ok(path)
        }
        _ => Err("the report file must end in .html, .svg or .json".to_owned()),
    }
}

/// The verdict's numbers, as `--json` prints them.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    strategy: &'a str,
    seed: u64,
    nodes: usize,
    clients: u32,
    duration_ms: u64,
    sections: usize,
    faults: usize,
    overlaps: usize,
    token_violations: usize,
    stale_writes_rejected: usize,
    violations: usize,
    safe: bool,
    permits: Option<u32>,
    most_holders: usize,
    over_permits: usize,
    lock_delay_ms: u64,
    checked_delay_ms: u64,
    unreleased: usize,
    delay_violations: usize,
    /// Times a client started over as a new process after a fault (late joiners).
    late_joins: u64,
}

pub async fn run(args: &Args) -> Outcome {
    let config = ChaosConfig {
        strategy: args.strategy,
        nodes: usize::from(args.nodes),
        clients: args.clients,
        resources: usize::from(args.resources),
        duration: args.duration,
        faults: args.faults.as_ref().map_or_else(
            || args.strategy.default_faults().to_vec(),
            |faults| faults.0.clone(),
        ),
        seed: args.seed.unwrap_or_else(random_seed),
        permits: args.permits,
        lock_delay: args.lock_delay,
        primitive: if args.read_write {
            Primitive::ReadWrite
        } else if args.election {
            Primitive::Election
        } else {
            Primitive::Lock
        },
    };
    config
        .validate()
        .map_err(|e| Failure::usage(e.to_string()))?;
    let check_delay = args.check_delay.unwrap_or(args.lock_delay);
    // Before anything starts, so whoever saw the first line can interrupt us cleanly.
    let listen =
        |kind| signal(kind).map_err(|e| Failure::os(format!("could not listen for signals: {e}")));
    let (mut interrupt, mut terminate) = (
        listen(SignalKind::interrupt())?,
        listen(SignalKind::terminate())?,
    );

    let bar = progress::timed(config.duration);
    if !args.json {
        progress::say(
            &bar,
            &format!(
                "redlock chaos: {} ({}), seed {}, {} clients, {} resources{}, {}, faults: {}",
                config.strategy,
                config.strategy.describe(),
                config.seed,
                config.clients,
                config.resources,
                workload(&config, check_delay),
                duration::format(config.duration),
                fault_names(config.strategy, &config.faults),
            ),
        );
    }
    let stop = CancellationToken::new();
    let watched = Progress::default();
    let running = redquorum_chaos::run_until(&config, &stop, &watched);
    tokio::pin!(running);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut signalled = None;
    // Ends when the run does; the run is bounded by its duration, and a signal shortens it.
    let result = loop {
        tokio::select! {
            result = &mut running => break result,
            _ = tick.tick() => show(&bar, watched.snapshot()),
            _ = interrupt.recv(), if signalled.is_none() => {
                signalled = Some(130);
                stop.cancel();
            }
            _ = terminate.recv(), if signalled.is_none() => {
                signalled = Some(143);
                stop.cancel();
            }
        }
    };
    bar.finish_and_clear();
    let history = match result {
        Ok(history) => history,
        Err(ChaosError::Interrupted) => {
            progress::say(&bar, "interrupted: the servers are stopped");
            return Ok(signalled.unwrap_or(130));
        }
        Err(e) => return Err(failure(e)),
    };
    let verdict = redquorum_chaos::checker::check_with(&history, micros(check_delay));
    if let Some(path) = &args.report {
        redquorum_chaos::report::write_report(path, &history, &verdict).map_err(|e| {
            Failure::os(format!(
                "could not write the report {}: {e}",
                path.display()
            ))
        })?;
    }
    if args.json {
        output::print(&output::json(&summary(&history, &verdict)))?;
    } else {
        let table = redquorum_chaos::report::summary_table(&verdict, &history);
        output::print(table.trim_end())?;
        if history.late_joins > 0 {
            output::print(&format!(
                "late joiners: clients started over as new processes {} times after faults",
                history.late_joins
            ))?;
        }
        if let Some(path) = &args.report {
            output::print(&format!("report written to {}", path.display()))?;
        }
    }
    Ok(if verdict.is_safe() { OK } else { VIOLATION })
}

fn show(bar: &indicatif::ProgressBar, now: Snapshot) {
    let message = match now.phase {
        Phase::Starting => "starting servers".to_owned(),
        Phase::WarmingUp => "waiting for fresh nodes to leave their quarantine".to_owned(),
        Phase::Running => format!(
            "{} critical sections, {} fault events",
            now.sections, now.faults
        ),
        Phase::Stopping => "stopping".to_owned(),
    };
    progress::tick(bar, now.elapsed, message);
}

/// What the first line adds about the workload: permits, lock-delay, the delay checked.
fn workload(config: &ChaosConfig, check_delay: Duration) -> String {
    let mut text = String::new();
    if let Some(k) = config.permits {
        text.push_str(&format!(", {k} permits each"));
    }
    if !config.lock_delay.is_zero() {
        text.push_str(&format!(
            ", lock-delay {}",
            duration::format(config.lock_delay)
        ));
    }
    if check_delay != config.lock_delay {
        text.push_str(&format!(
            ", checked against a lock-delay of {}",
            duration::format(check_delay)
        ));
    }
    text
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

fn summary<'a>(history: &'a redquorum_chaos::History, verdict: &Verdict) -> Summary<'a> {
    let sum = |f: fn(&redquorum_chaos::ResourceVerdict) -> usize| {
        verdict.resources.iter().map(f).sum::<usize>()
    };
    Summary {
        strategy: &history.strategy,
        seed: history.seed,
        nodes: history.nodes,
        clients: history.clients,
        duration_ms: history.duration_us / 1000,
        sections: history.sections.len(),
        faults: history.faults.len(),
        overlaps: sum(|r| r.overlaps.len()),
        token_violations: sum(|r| r.token_violations.len()),
        stale_writes_rejected: sum(|r| r.stale_writes_rejected),
        violations: verdict.violations,
        safe: verdict.is_safe(),
        permits: verdict.permits,
        most_holders: verdict
            .resources
            .iter()
            .map(|r| r.most_holders)
            .max()
            .unwrap_or(0),
        over_permits: sum(|r| r.excess.len()),
        lock_delay_ms: history.lock_delay_us / 1000,
        checked_delay_ms: verdict.lock_delay_us / 1000,
        unreleased: sum(|r| r.unreleased),
        delay_violations: sum(|r| r.delay_violations.len()),
        late_joins: history.late_joins,
    }
}

fn failure(error: ChaosError) -> Failure {
    match error {
        ChaosError::Config(why) => Failure::new(USAGE, why),
        ChaosError::Launch(e) => nodes::launch_failure(e),
        other => Failure::os(chain(&other)),
    }
}

/// An error and its sources on one line, `a: b: c`.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// The enabled kinds that apply to `strategy`, and those that do not, if any.
fn fault_names(strategy: Strategy, faults: &[Fault]) -> String {
    let names = |apply: bool| {
        faults
            .iter()
            .filter(|f| strategy.supports(**f) == apply)
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(",")
    };
    let (applied, left_out) = (names(true), names(false));
    let applied = if applied.is_empty() {
        "none".to_owned()
    } else {
        applied
    };
    if left_out.is_empty() {
        applied
    } else {
        format!("{applied} ({left_out} not applicable to {strategy})")
    }
}

/// A seed from the OS's randomness (std's hasher keys), shown so the run can be repeated.
fn random_seed() -> u64 {
    RandomState::new().hash_one(std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_paths_need_a_known_extension() {
        assert!(report_path("run.html").is_ok());
        assert!(report_path("RUN.SVG").is_ok());
        assert!(report_path("run.json").is_ok());
        assert!(report_path("run.txt").is_err());
        assert!(report_path("run").is_err());
    }

    #[test]
    fn the_first_line_says_which_faults_do_not_apply() {
        let faults = [Fault::Failover, Fault::Delay, Fault::Pause];
        let handoff = [Fault::ClientCrash, Fault::ClientHandoff];
        let cases: [(Strategy, &[Fault], &str); 5] = [
            (
                Strategy::RedlockCluster,
                &faults,
                "failover,pause (delay not applicable to redlock-cluster)",
            ),
            (
                Strategy::Redlock,
                &faults,
                "delay,pause (failover not applicable to redlock)",
            ),
            (Strategy::Redlock, &[], "none"),
            (
                Strategy::SetnxGetset,
                &handoff,
                "client-crash (client-handoff not applicable to setnx-getset)",
            ),
            (
                Strategy::RedlockCluster,
                &handoff,
                "client-crash,client-handoff",
            ),
        ];
        for (strategy, faults, line) in cases {
            assert_eq!(fault_names(strategy, faults), line, "{strategy} {faults:?}");
        }
    }

    #[test]
    fn every_strategy_and_fault_is_in_the_help() {
        for strategy in Strategy::ALL {
            assert!(AFTER_HELP.contains(strategy.name()), "{strategy}");
        }
        for fault in Fault::ALL {
            assert!(
                AFTER_HELP.contains(&format!("  {} ", fault.name())),
                "{fault}"
            );
        }
    }

    #[test]
    fn random_seeds_differ() {
        assert_ne!(random_seed(), random_seed());
    }
}
