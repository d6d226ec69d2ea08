//! `redlock nodes start|stop|status|mark`: local Redis servers for development, and vouching
//! for servers that lost nothing.
//!
//! `start` launches N detached `redis-server` processes (they outlive `redlock`) on 127.0.0.1,
//! each in `DIR/node-I` with an append-only file fsynced on every write (the persistence Redlock
//! needs to survive a restart), and records them in `DIR/nodes.json`. `stop` and `status` read
//! that file: `stop` stops exactly the servers it lists, by the pid file each one wrote, after
//! checking that the pid is still a `redis-server` on the recorded port
//! ([`redquorum_nodes::stop_detached`]); nothing is ever looked up or killed by name.
//!
//! With `--cluster`, each of the N Redlock nodes is a local Redis Cluster instead (S masters
//! sharing the slots, R replicas each, formed with the `CLUSTER` commands by
//! [`redquorum_nodes::RedisCluster`]), and `REDLOCK_SERVERS` lists one `redis+cluster://` URL
//! per cluster. With `--sentinel`, each is a primary with replicas behind three sentinels
//! ([`redquorum_nodes::SentinelGroup`]), and it lists one `redis+sentinel://` URL per group.
//!
//! DIR defaults to `./.redlock-nodes` (or `$REDLOCK_NODES_DIR`): per project, so `start`,
//! `status` and `stop` run from the same place find the same nodes, and a `git clean` or `rm -r`
//! removes every trace. Data is kept across `stop`/`start`; delete DIR to forget it.
//!
//! # Builds
//! `start`, `stop` and `status` need the launcher crate, so they are in `local`, behind the
//! `tools` feature. `mark` (in `crate::mark`) is an operator's tool for production servers, which
//! the README sends operators to: it is in every build. A build without `tools` still knows the
//! other three names, and says in one line (exit 64) that it lacks them, rather than calling them
//! unknown.

#[cfg(feature = "tools")]
mod local;

#[cfg(feature = "tools")]
pub use local::launch_failure;

#[cfg(feature = "tools")]
use std::path::PathBuf;

use crate::exit::{Failure, Outcome, USAGE};
use redquorum::Vouch;

#[cfg(feature = "tools")]
const AFTER_HELP: &str = "\
Starts independent redis-server masters on 127.0.0.1 for development: detached (they keep running
after redlock exits), each in DIR/node-I with appendonly yes and appendfsync always. The ports are
recorded in DIR/nodes.json; `stop` stops exactly those servers (by their pid files), never anything
found by name. DIR defaults to ./.redlock-nodes ($REDLOCK_NODES_DIR); data survives stop/start.

With --cluster, each of the N nodes is a local Redis Cluster of --shards masters with --replicas
replicas each (in DIR/cluster-C/node-I), and REDLOCK_SERVERS lists one redis+cluster:// URL per
cluster. A cluster's nodes know each other by address and a start takes new ports, so a stopped
cluster is not started again: a new one is formed in its place, and its data is discarded.

With --sentinel, each of the N nodes is a primary with --replicas replicas behind three sentinels
(in DIR/sentinel-G), the topology most Redis users run, and REDLOCK_SERVERS lists one
redis+sentinel:// URL per group. A stopped group is likewise formed anew.

Examples:
  eval \"$(redlock nodes start --count 5)\"     # sets REDLOCK_SERVERS for this shell
  eval \"$(redlock nodes start --cluster --count 3 --shards 3 --replicas 1)\"
  eval \"$(redlock nodes start --sentinel --count 1 --replicas 2)\"
  redlock nodes start --count 3 --port 7001 --dir /tmp/locks
  redlock nodes status
  redlock nodes stop

Exit status: 0 ok; 64 bad arguments, or nodes already running in DIR; 69 redis-server not
installed, or (status) a recorded node is not running; 71 a file or process could not be set up.";

const MARK_HELP: &str = "\
A node that may have lost data less than --max-ttl ago (one just started, or seen for the first
time without a marker) does not vote until that time has passed: the restart quarantine. If you
know a server lost nothing, mark it: it gets a marker that vouches for it at once (for its
current run: a restart is judged again), and clients trust it without waiting; clients already
waiting see it within a few seconds. A server whose marker a client wrote on first sight is
marked the same way.

Refused unless --brand-new: a server started less than --max-ttl ago (by its uptime). It may have
restarted without locks that are still held; say --brand-new only for a new server that never
held a lock, never after a restart.
Refused without --force: a Redis before 7 (its counters cannot show a flush that CONFIG RESETSTAT
erased); a replica (locks go to masters); a server whose marker records a data
loss less than --max-ttl ago, or whose counters show one since it started (a flush, an eviction,
a promotion); and a server without a marker among the given servers that carry one (new to the
group: if it replaces a node that held locks less than --max-ttl ago, wait that long instead).
Vouching for a server that did lose data can let a lock be granted twice. Redis Cluster nodes are
not marked (each master carries its own marker).

Examples:
  redlock --servers redis://10.0.0.1:6379,redis://10.0.0.2:6379 nodes mark
  redlock nodes mark --brand-new redis://127.0.0.1:6379

Exit status: 0 every server carries a marker that vouches for it; 1 one was refused (see its
line); 69 one could not be reached.";

/// `nodes --help` in a build without the `tools` feature.
#[cfg(not(feature = "tools"))]
fn lean_help() -> String {
    format!(
        "This redlock was built without its `tools` feature (on by default), which `nodes start`,\n\
         `stop` and `status` need: it has `nodes mark` only.\n\n{MARK_HELP}"
    )
}

/// Start, stop, list or vouch for Redis nodes.
#[derive(Debug, clap::Args)]
#[cfg_attr(feature = "tools", command(after_help = AFTER_HELP))]
#[cfg_attr(
    not(feature = "tools"),
    command(
        about = "Vouch for Redis nodes (mark); this build has no nodes start, stop or status",
        after_help = lean_help()
    )
)]
#[command(arg_required_else_help = false, subcommand_required = true)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(Debug, clap::Subcommand)]
enum Action {
    #[cfg(feature = "tools")]
    /// Start N detached nodes; prints `export REDLOCK_SERVERS=...` on stdout.
    #[command(after_help = AFTER_HELP)]
    Start {
        /// How many nodes (independent masters); an odd number tolerates the most failures.
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=64))]
        count: u16,
        /// The first port; node I listens on PORT+I [default: free ports].
        #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
        port: Option<u16>,
        /// Each node is a Redis Cluster (see --shards, --replicas).
        #[arg(long, conflicts_with = "sentinel")]
        cluster: bool,
        /// Each node is a primary with replicas behind three sentinels (see --replicas).
        #[arg(long)]
        sentinel: bool,
        /// With --cluster: masters per cluster, sharing the 16384 slots.
        #[arg(long, default_value_t = 1, requires = "cluster",
              value_parser = clap::value_parser!(u16).range(1..=16))]
        shards: u16,
        /// With --cluster: replicas per master; with --sentinel: replicas of the primary
        /// [default: 1].
        #[arg(long, value_parser = clap::value_parser!(u16).range(0..=4))]
        replicas: Option<u16>,
        #[command(flatten)]
        dir: DirArg,
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    #[cfg(feature = "tools")]
    /// Stop the nodes recorded in DIR.
    #[command(after_help = AFTER_HELP)]
    Stop {
        #[command(flatten)]
        dir: DirArg,
    },
    /// Vouch that servers lost nothing (brand new, or known good): each gets a marker that lets
    /// clients trust it at once, instead of waiting out the restart quarantine.
    #[command(after_help = MARK_HELP)]
    Mark {
        /// The servers [default: the global --servers].
        #[arg(value_name = "URL")]
        urls: Vec<String>,
        /// The servers are new and never held a lock: mark them although they started less
        /// than --max-ttl ago (never after a restart).
        #[arg(long)]
        brand_new: bool,
        /// Mark whatever the evidence says: a replica, a server whose marker or counters record
        /// a data loss, or one new to a marked group.
        #[arg(long)]
        force: bool,
        /// Print one JSON object per server instead.
        #[arg(long)]
        json: bool,
    },
    #[cfg(feature = "tools")]
    /// List the nodes recorded in DIR and whether they are running.
    #[command(after_help = AFTER_HELP)]
    Status {
        #[command(flatten)]
        dir: DirArg,
        /// Print one JSON object instead.
        #[arg(long)]
        json: bool,
    },
    /// `start`, `stop` or `status` in a build without them: said so at once (exit 64).
    #[cfg(not(feature = "tools"))]
    #[command(external_subcommand)]
    NotInThisBuild(Vec<String>),
}

#[cfg(feature = "tools")]
#[derive(Debug, clap::Args)]
struct DirArg {
    /// Where the nodes keep their data, logs, pid files and the state file.
    #[arg(
        long,
        env = "REDLOCK_NODES_DIR",
        hide_env_values = true,
        default_value = ".redlock-nodes"
    )]
    dir: PathBuf,
}

pub fn run(args: &Args) -> Outcome {
    match &args.action {
        #[cfg(feature = "tools")]
        Action::Start {
            count,
            port,
            cluster,
            sentinel,
            shards,
            replicas,
            dir,
            json,
        } => {
            let topology = match (cluster, sentinel) {
                (true, _) => local::Topology::Cluster {
                    shards: *shards,
                    replicas: replicas.unwrap_or(1),
                },
                (false, true) => local::Topology::Sentinel {
                    replicas: replicas.unwrap_or(1),
                },
                (false, false) if replicas.is_some() => {
                    return Err(Failure::usage(
                        "--replicas needs --cluster or --sentinel (plain nodes have none)",
                    ));
                }
                (false, false) => local::Topology::Plain,
            };
            local::start(&local::absolute(&dir.dir)?, *count, *port, topology, *json)
        }
        #[cfg(feature = "tools")]
        Action::Stop { dir } => local::stop(&local::absolute(&dir.dir)?),
        #[cfg(feature = "tools")]
        Action::Status { dir, json } => local::status(&local::absolute(&dir.dir)?, *json),
        Action::Mark { .. } => Err(Failure::new(
            USAGE,
            "nodes mark runs on the async runtime (main dispatches it)",
        )),
        #[cfg(not(feature = "tools"))]
        Action::NotInThisBuild(words) => Err(not_in_this_build(words)),
    }
}

/// The one-line usage failure for a `nodes` subcommand this build lacks.
#[cfg(not(feature = "tools"))]
fn not_in_this_build(words: &[String]) -> Failure {
    match words.first().map(String::as_str) {
        Some(name @ ("start" | "stop" | "status")) => Failure::usage(format!(
            "redlock nodes {name} is not in this build: redlock was built without its `tools` \
             feature (on by default), which nodes start, stop and status need; nodes mark is here"
        )),
        Some(name) => Failure::usage(format!(
            "unrecognized subcommand '{name}' for redlock nodes (see redlock nodes --help)"
        )),
        None => Failure::usage("redlock nodes requires a subcommand (see redlock nodes --help)"),
    }
}

impl Args {
    /// `mark`'s servers, what the operator vouches and the json flag, when the action is
    /// `mark`.
    pub fn mark(&self) -> Option<(&[String], Vouch, bool)> {
        match &self.action {
            Action::Mark {
                urls,
                brand_new,
                force,
                json,
            } => {
                let vouch = match (force, brand_new) {
                    (true, _) => Vouch::Forced,
                    (false, true) => Vouch::BrandNew,
                    (false, false) => Vouch::Checked,
                };
                Some((urls, vouch, *json))
            }
            _ => None,
        }
    }
}
