//! Local `redis-server` processes for redquorum's integration tests, its CLI (`redlock`) and
//! its chaos checker.
//!
//! Redlock's guarantees are about what happens when independent Redis nodes crash, restart with
//! or without their data, or stop answering. Mocks cannot show that; real servers can. This crate
//! starts them on free loopback ports in their own directories, and lets a test inject exactly
//! those faults: [`RedisNode::kill`], [`RedisNode::restart`] (data kept with
//! [`Persistence::AofAlways`]), [`RedisNode::restart_empty`] (data lost) and
//! [`RedisNode::pause`] / [`RedisNode::resume`] (a stall or partition).
//!
//! ```
//! # fn main() -> Result<(), redquorum_nodes::LaunchError> {
//! use redquorum_nodes::{Cluster, NodeSpec, Persistence};
//!
//! let mut cluster = Cluster::start(3, NodeSpec::new().persistence(Persistence::AofAlways))?;
//! let node = cluster.node(0);
//! node.cli(&["SET", "resource", "token"])?;
//! node.restart()?;
//! assert_eq!(node.cli(&["GET", "resource"])?, "token");
//! println!("give the library: {}", cluster.servers());
//! # Ok(())
//! # } // dropping the cluster kills all three servers and removes their directories
//! ```
//!
//! # Promises
//!
//! - Servers listen on 127.0.0.1 only, with protected mode on, and never read a config file
//!   (but a sentinel, which Redis requires to have one of its own: [`NodeSpec::sentinel`]).
//! - A brand-new server gets the lock library's marker key ([`MARKER_KEY`]), which tells its
//!   clients it has lost nothing (see [`NodeSpec::marked`]); a restart never writes it, so a
//!   restart that lost the data shows it.
//! - We signal only processes we started, by pid: children we have not reaped yet, or a detached
//!   node's pid after checking `/proc` that it is still that server. Nothing is found by name.
//! - Every wait is bounded (startup 10 s by default, kill 5 s, `redis-cli` 10 s) and every OS or
//!   server failure is a [`LaunchError`], never a panic.
//! - Dropping a [`RedisNode`] or [`Cluster`] kills its servers. If this process is killed
//!   outright, `PR_SET_PDEATHSIG` kills them too, but only when the *thread* that started them
//!   exits: see [`NodeSpec::die_with_parent`].
//! - [Detached](NodeSpec::detached) nodes are the exception, for `redlock nodes start`: they
//!   outlive us and are stopped later with [`stop_detached`].
//!
//! # Environment
//!
//! - `REDLOCK_REDIS_SERVER`: the `redis-server` binary (default: `redis-server` on `PATH`).
//! - `REDLOCK_REDIS_CLI`: the `redis-cli` binary (default: next to the server binary, else on
//!   `PATH`).
//!
//! # Layout
//!
//! - `spec.rs`: [`NodeSpec`] and [`Persistence`], what to start.
//! - `node.rs`: [`RedisNode`], one server and its faults.
//! - `cluster.rs`: [`Cluster`], several independent nodes started side by side.
//! - `redis_cluster.rs`: [`RedisCluster`], a real Redis Cluster (masters sharing the hash slots,
//!   with replicas), formed with the cluster commands, and its failover.
//! - `sentinel.rs`: [`SentinelGroup`], a primary with replicas behind Redis Sentinel, and its
//!   failover.
//! - `detached.rs`: [`stop_detached`] and [`detached_pid`] for servers of an earlier run.
//! - `probe.rs`: free ports and the `PING` readiness probe over a plain TCP socket.
//! - `process.rs`: spawning, signals and bounded waits; the crate's only `unsafe` block.
//! - `binary.rs`: where `redis-server` and `redis-cli` are, and [`RedisBinary`] naming them.
//! - `error.rs`: [`LaunchError`].

mod binary;
mod cluster;
mod detached;
mod error;
mod node;
mod probe;
mod process;
mod redis_cluster;
mod sentinel;
mod spec;

pub use binary::{CLI_ENV, RedisBinary, SERVER_ENV, server_binary};
pub use cluster::Cluster;
pub use detached::{PID_FILE, detached_pid, stop_detached};
pub use error::LaunchError;
pub use node::{LOG_FILE, RedisNode};
pub use probe::MARKER_KEY;
pub use redis_cluster::{RedisCluster, SLOTS};
pub use sentinel::{DOWN_AFTER_MS, FAILOVER_TIMEOUT_MS, SentinelGroup};
pub use spec::{DEFAULT_STARTUP_TIMEOUT, NodeSpec, Persistence};
