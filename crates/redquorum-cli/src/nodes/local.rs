//! `redlock nodes start|stop|status`: the local servers, in builds with the `tools` feature
//! (they need the launcher crate, `redquorum-nodes`). See the parent module for what they do.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use redquorum_nodes::{
    Cluster, LaunchError, NodeSpec, Persistence, RedisCluster, RedisNode, SentinelGroup,
    detached_pid, stop_detached,
};
use serde::{Deserialize, Serialize};

use crate::exit::Outcome;
use crate::exit::{Failure, OK, UNAVAILABLE, USAGE};
use crate::output;

/// The state file in DIR.
const STATE_FILE: &str = "nodes.json";

/// `DIR/nodes.json`: what `start` started.
#[derive(Debug, Default, Serialize, Deserialize)]
struct State {
    nodes: Vec<NodeRecord>,
    /// The `REDLOCK_SERVERS` line, when it is not one URL per server (`--cluster`,
    /// `--sentinel`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    servers: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
struct NodeRecord {
    port: u16,
    /// The node's directory, relative to DIR.
    dir: String,
}

/// One node as reported by `start` and `status`.
#[derive(Debug, Serialize)]
struct NodeReport {
    url: String,
    port: u16,
    dir: PathBuf,
    pid: Option<u32>,
    running: bool,
}

/// What `start` and `status` print: the nodes recorded in DIR, as JSON or as text.
#[derive(Debug, Serialize)]
struct Report {
    dir: PathBuf,
    servers: String,
    nodes: Vec<NodeReport>,
}

impl Report {
    /// The nodes recorded in `state`, and their URLs as `--servers` takes them.
    fn new(dir: &Path, state: &State) -> Self {
        let nodes = reports(dir, state);
        let servers = state.servers.clone().unwrap_or_else(|| {
            nodes
                .iter()
                .map(|n| n.url.as_str())
                .collect::<Vec<_>>()
                .join(",")
        });
        Self {
            dir: dir.to_owned(),
            servers,
            nodes,
        }
    }
}

/// What each of the nodes `start` starts is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Topology {
    /// One plain master.
    Plain,
    /// A Redis Cluster of `shards` masters with `replicas` replicas each.
    Cluster { shards: u16, replicas: u16 },
    /// A primary with `replicas` replicas behind three sentinels.
    Sentinel { replicas: u16 },
}

/// How many sentinels watch each primary of `--sentinel`: the fewest that tolerate one down.
const SENTINELS: usize = 3;

/// Starts `count` nodes of `topology`.
pub(super) fn start(
    dir: &Path,
    count: u16,
    port: Option<u16>,
    topology: Topology,
    json: bool,
) -> Outcome {
    if let Some(state) = read_state(dir)? {
        let running = reports(dir, &state)
            .into_iter()
            .filter(|n| n.running)
            .count();
        if running > 0 {
            return Err(Failure::new(
                USAGE,
                format!(
                    "{running} node(s) recorded in {} are still running: stop them first \
                     (redlock nodes stop --dir {0}) or use another --dir",
                    dir.display()
                ),
            ));
        }
    }
    let mut spec = NodeSpec::new()
        .detached(true)
        .die_with_parent(false)
        .persistence(Persistence::AofAlways)
        .dir(dir);
    let state = match topology {
        Topology::Plain => {
            if let Some(port) = port {
                spec = spec.port(port);
            }
            let cluster = Cluster::start(usize::from(count), spec).map_err(launch_failure)?;
            let state = State {
                nodes: cluster
                    .iter()
                    .enumerate()
                    .map(|(i, node)| NodeRecord {
                        port: node.port(),
                        dir: format!("node-{i}"),
                    })
                    .collect(),
                servers: None,
            };
            // Detached: dropping the handles leaves the servers running (that is the point).
            drop(cluster);
            write_state(dir, &state)?;
            state
        }
        Topology::Cluster { shards, replicas } => {
            start_clusters(dir, spec, count, port, shards, replicas)?
        }
        Topology::Sentinel { replicas } => start_sentinel_groups(dir, spec, count, port, replicas)?,
    };
    let report = Report::new(dir, &state);
    if json {
        output::print(&output::json(&report))?;
    } else {
        let what = match topology {
            Topology::Plain => format!("{count} redis-server node(s)"),
            Topology::Cluster { shards, replicas } => format!(
                "{count} Redis Cluster(s) of {shards} master(s) with {replicas} replica(s) each"
            ),
            Topology::Sentinel { replicas } => format!(
                "{count} {} with {replicas} {} behind {SENTINELS} sentinels (each)",
                if count == 1 { "primary" } else { "primaries" },
                if replicas == 1 { "replica" } else { "replicas" },
            ),
        };
        eprintln!(
            "started {what} in {} (appendonly, fsync always):",
            dir.display()
        );
        for node in &report.nodes {
            eprintln!("  {}  pid {}", node.url, pid_text(node.pid));
        }
        eprintln!("stop them with: redlock nodes stop --dir {}", dir.display());
        output::print(&format!("export REDLOCK_SERVERS={}", report.servers))?;
    }
    Ok(OK)
}

/// Starts `count` Redis Clusters from `spec`, each in `DIR/cluster-C`, writes each master's
/// marker (so that clients trust the new masters at once, as they trust new plain nodes), and
/// records every server as soon as its cluster is up (so that `stop` finds them even if a later
/// cluster fails to start).
fn start_clusters(
    dir: &Path,
    spec: NodeSpec,
    count: u16,
    port: Option<u16>,
    shards: u16,
    replicas: u16,
) -> Result<State, Failure> {
    let per_cluster = usize::from(shards) * (1 + usize::from(replicas));
    let mut state = State::default();
    let mut urls = Vec::new();
    for c in 0..usize::from(count) {
        let cluster_dir = dir.join(format!("cluster-{c}"));
        discard_stopped_cluster(&cluster_dir)?;
        let mut spec = spec.clone().dir(cluster_dir);
        if let Some(port) = port {
            let first = usize::from(port) + c * per_cluster;
            let first = u16::try_from(first)
                .ok()
                .filter(|p| usize::from(*p) + per_cluster <= usize::from(u16::MAX))
                .ok_or_else(|| Failure::usage(format!("--port {port}: too few ports above it")))?;
            spec = spec.port(first);
        }
        let mut cluster = RedisCluster::start(usize::from(shards), usize::from(replicas), spec)
            .map_err(launch_failure)?;
        for i in 0..cluster.len() {
            state.nodes.push(NodeRecord {
                port: cluster.node(i).port(),
                dir: format!("cluster-{c}/node-{i}"),
            });
        }
        urls.push(cluster.url());
        state.servers = Some(urls.join(","));
        write_state(dir, &state)?;
        cluster
            .mark_masters(redquorum::cluster_marker)
            .map_err(launch_failure)?;
        // Detached: dropping the handle leaves the servers running.
        drop(cluster);
    }
    Ok(state)
}

/// Starts `count` Sentinel groups from `spec`, each in `DIR/sentinel-G` (a primary marked at
/// start, `replicas` replicas, [`SENTINELS`] sentinels), and records every server as soon as its
/// group is up (so that `stop` finds them even if a later group fails to start). A stopped
/// group is not started again: its sentinels name the old ports, so a new one is formed in its
/// place and its data is discarded.
fn start_sentinel_groups(
    dir: &Path,
    spec: NodeSpec,
    count: u16,
    port: Option<u16>,
    replicas: u16,
) -> Result<State, Failure> {
    let per_group = 1 + usize::from(replicas) + SENTINELS;
    let mut state = State::default();
    let mut urls = Vec::new();
    for g in 0..usize::from(count) {
        let group_dir = dir.join(format!("sentinel-{g}"));
        discard_stopped(&group_dir, &group_dir.join("sentinels"))?;
        let mut spec = spec.clone().dir(&group_dir);
        if let Some(port) = port {
            let first = usize::from(port) + g * per_group;
            let first = u16::try_from(first)
                .ok()
                .filter(|p| usize::from(*p) + per_group <= usize::from(u16::MAX))
                .ok_or_else(|| Failure::usage(format!("--port {port}: too few ports above it")))?;
            spec = spec.port(first);
        }
        let mut group =
            SentinelGroup::start(usize::from(replicas), SENTINELS, spec).map_err(launch_failure)?;
        let record = |node: &RedisNode| NodeRecord {
            port: node.port(),
            dir: node
                .dir()
                .strip_prefix(dir)
                .unwrap_or(node.dir())
                .display()
                .to_string(),
        };
        for i in 0..group.data_len() {
            state.nodes.push(record(group.data_node(i)));
        }
        for i in 0..group.sentinels_len() {
            state.nodes.push(record(group.sentinel(i)));
        }
        urls.push(group.url());
        state.servers = Some(urls.join(","));
        write_state(dir, &state)?;
        // Detached: dropping the handle leaves the servers running.
        drop(group);
    }
    Ok(state)
}

pub(super) fn stop(dir: &Path) -> Outcome {
    let Some(state) = read_state(dir)? else {
        eprintln!("no nodes recorded in {}: nothing to stop", dir.display());
        return Ok(OK);
    };
    let mut first_error = None;
    for record in &state.nodes {
        let node_dir = dir.join(&record.dir);
        match stop_detached(&node_dir, record.port) {
            Ok(true) => eprintln!("stopped 127.0.0.1:{}", record.port),
            Ok(false) => eprintln!("127.0.0.1:{} was not running", record.port),
            Err(e) => {
                eprintln!("127.0.0.1:{}: {}", record.port, chain(&e));
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        // Keep the state file: the nodes that could not be stopped are still listed in it.
        return Err(launch_failure(e));
    }
    fs::remove_file(dir.join(STATE_FILE))
        .map_err(|e| Failure::os(format!("could not remove {}: {e}", state_path(dir))))?;
    Ok(OK)
}

pub(super) fn status(dir: &Path, json: bool) -> Outcome {
    let Some(state) = read_state(dir)? else {
        return Err(Failure::new(
            UNAVAILABLE,
            format!(
                "no nodes recorded in {}: start some with redlock nodes start",
                dir.display()
            ),
        ));
    };
    let report = Report::new(dir, &state);
    let down = report.nodes.iter().filter(|n| !n.running).count();
    let total = report.nodes.len();
    if json {
        output::print(&output::json(&report))?;
    } else {
        for node in &report.nodes {
            let state = match node.pid {
                Some(pid) => format!("running, pid {pid}"),
                None => "not running".to_owned(),
            };
            output::print(&format!("{}  {state}", node.url))?;
        }
        output::print(&format!("export REDLOCK_SERVERS={}", report.servers))?;
    }
    if down > 0 {
        return Err(Failure::new(
            UNAVAILABLE,
            format!(
                "{down} of {total} nodes recorded in {} are not running",
                dir.display()
            ),
        ));
    }
    Ok(OK)
}

fn reports(dir: &Path, state: &State) -> Vec<NodeReport> {
    state
        .nodes
        .iter()
        .map(|record| {
            let node_dir = dir.join(&record.dir);
            let pid = detached_pid(&node_dir, record.port).ok().flatten();
            NodeReport {
                url: format!("redis://127.0.0.1:{}", record.port),
                port: record.port,
                dir: node_dir,
                pid,
                running: pid.is_some(),
            }
        })
        .collect()
}

fn pid_text(pid: Option<u32>) -> String {
    pid.map_or_else(|| "?".to_owned(), |p| p.to_string())
}

pub(super) fn absolute(dir: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(dir)
        .map_err(|e| Failure::usage(format!("invalid --dir {}: {e}", dir.display())))
}

fn state_path(dir: &Path) -> String {
    dir.join(STATE_FILE).display().to_string()
}

fn read_state(dir: &Path) -> Result<Option<State>, Failure> {
    let text = match fs::read_to_string(dir.join(STATE_FILE)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Failure::os(format!(
                "could not read {}: {e}",
                state_path(dir)
            )));
        }
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        Failure::os(format!(
            "{} is not a redlock nodes state file ({e}); remove it if the nodes are gone",
            state_path(dir)
        ))
    })
}

fn write_state(dir: &Path, state: &State) -> Result<(), Failure> {
    let text = serde_json::to_string_pretty(state)
        .map_err(|e| Failure::os(format!("could not encode the state file: {e}")))?;
    fs::write(dir.join(STATE_FILE), text + "\n")
        .map_err(|e| Failure::os(format!("could not write {}: {e}", state_path(dir))))
}

/// An error and its sources, on one line: redquorum-nodes keeps the OS error in `source()`.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(&format!(": {e}"));
        source = e.source();
    }
    text
}

/// Removes what a stopped cluster left in `dir`: its nodes' `nodes.conf` name each other by the
/// old ports, and their data holds keys of slots a new cluster assigns afresh, so a new cluster
/// cannot be formed on top of them. Only a directory with a node's `nodes.conf` is removed (ours);
/// the caller has checked that no recorded server still runs.
fn discard_stopped_cluster(dir: &Path) -> Result<(), Failure> {
    discard_stopped(dir, &dir.join("node-0").join("nodes.conf"))
}

/// Removes `dir` when `sign` shows a stopped cluster or Sentinel group of ours left it.
fn discard_stopped(dir: &Path, sign: &Path) -> Result<(), Failure> {
    if !sign.exists() {
        return Ok(());
    }
    fs::remove_dir_all(dir).map_err(|e| {
        Failure::new(
            crate::exit::OS_ERROR,
            format!("cannot remove the stopped group in {}: {e}", dir.display()),
        )
    })
}

/// A missing `redis-server` is a missing service (69), a bad spec a usage error (64), anything
/// else the operating system's doing (71).
pub fn launch_failure(error: LaunchError) -> Failure {
    let status = match &error {
        LaunchError::BinaryNotFound { .. } => UNAVAILABLE,
        LaunchError::InvalidSpec(_) => USAGE,
        _ => crate::exit::OS_ERROR,
    };
    Failure::new(status, chain(&error))
}
