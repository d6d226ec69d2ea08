//! A Jepsen-style checker for redquorum: run lock clients against real local servers while faults
//! are injected, record what every client believed, and check from that history alone whether
//! two holders of one resource ever overlapped (or, for a semaphore of `k` permits, whether more
//! than `k` ever held it at once), and whether a lock left unreleased stayed out of reach for
//! its lock-delay.
//!
//! The crate has two halves. The pure half ([`history`], [`checker`], [`report`]) knows nothing
//! about Redis, processes or time: it takes a recorded [`History`] and gives a [`Verdict`], so
//! every rule can be unit-tested on hand-made histories. The runner half starts the nodes,
//! injects the faults and drives the clients; it only ever *produces* a [`History`].
//!
//! # Layout
//!
//! - [`history`]: the recorded run: critical sections (with the permit held, and when or whether
//!   the holder released), fault events, node up-time, the permits and lock-delay of the run (the
//!   format both halves agree on; serialised as one JSON document).
//! - [`checker`]: pure verdict per resource: overlapping holders, holders beyond the permits,
//!   fencing-token order (per permit for a semaphore), acquisitions within the lock-delay of a
//!   lock left unreleased, stale writes refused, the longest wait with no holder.
//! - [`report`]: a text summary table, and HTML / SVG / JSON reports with a timeline.
//! - [`runner`]: [`run`] / [`run_until`]: starts everything, drives the clients (a lock
//!   workload, or with permits a semaphore workload), returns the [`History`]; the fenced
//!   in-memory store that plays the protected resource (per permit for a semaphore).
//! - [`strategies`]: the lock designs under test behind one small trait: ours, ours without
//!   quarantine, a single instance, a master with a replica promoted on crash, the old
//!   `SETNX`/`GETSET` recipe, ours over three Redis Clusters (defaults, `WAIT` only, or
//!   neither failover rule), and a semaphore kept as a count per node; ours takes a lock, a
//!   permit, a read-write lock as reader or writer, or an election's leadership
//!   ([`Primitive`]).
//! - [`faults`]: the seeded, reproducible fault plan and its injector (among its kinds, a shard
//!   failover to a replica that missed more than a TTL of writes, on the cluster layout; a ring
//!   of per-client partitions; a client that crashes holding its lock; a client that hands its
//!   lock to a process that extends it by value without a lock-delay of its own).
//! - [`proxy`]: the loopback TCP proxy in front of each node (latency, dropped connections, black
//!   holes, switching to another server, ports per client group that can be cut off).
//! - `topology`: the servers and proxies of a run; `record`: live state turned into a history;
//!   `error`: [`ChaosError`]; `fault`: the kinds of [`Fault`]; `named`: parsing and showing
//!   [`Fault`] and [`Strategy`] by name.

#![warn(missing_docs)]

pub mod checker;
pub mod history;
pub mod report;

pub use checker::{
    DelayViolation, Excess, Gap, Overlap, ResourceVerdict, TokenViolation, Verdict, check,
    check_with,
};
pub use history::{FaultEvent, FaultKind, History, NodeUp, Section, WriteOutcome};
pub use report::{summary_table, write_report};

// The runner half: servers, proxies, faults and clients of a run, producing a History.
mod error;
mod fault;
pub mod faults;
mod named;
pub mod proxy;
mod record;
pub mod runner;
pub mod strategies;
mod topology;

pub use error::ChaosError;
pub use fault::Fault;
pub use runner::{ChaosConfig, Phase, Progress, Snapshot, run, run_until};
pub use strategies::{Primitive, Strategy};
