//! Distributed locks on Redis with the Redlock algorithm.
//!
//! A [`Redlock`] manager talks to N independent Redis masters (N = 1 is the classic
//! single-instance lock). [`Redlock::acquire`] sends `SET resource <random> NX PX ttl` to all of
//! them at once and holds the lock when a majority (`N/2 + 1`) agreed while validity remained;
//! [`Lock::release`] runs a compare-and-delete script everywhere, so nobody deletes a lock that is
//! not theirs.
//!
//! # Guarantees
//! - **Mutual exclusion**, while the holder finishes before [`LockInfo::deadline`]: the keys on a
//!   majority outlive the deadline, and any two majorities share a node.
//! - **No deadlock**: every key expires with its TTL, so a crashed holder blocks nobody for
//!   longer than that.
//! - **Fault tolerance**: with a majority of nodes up and reachable, locks can be taken and
//!   released.
//! - **Interoperability**: the wire format is the standard one (plain string key, random value,
//!   `PX` expiry, compare-and-delete release), so other Redlock clients on the same servers
//!   respect our locks and we respect theirs.
//! - **Several resources at once** ([`Redlock::acquire_many`]): each node grants every key of
//!   the set or none, in one script call, and the set follows the same quorum, validity and
//!   fencing rules as one resource. No deadlock, whatever order callers list the resources in;
//!   a lock on one resource excludes every set containing it. Only sets use our own scripts: a
//!   one-element set is an ordinary lock in the standard wire format.
//!
//! - **Beyond the lock**, on the same quorum, validity, quarantine and fencing: semaphores
//!   ([`Redlock::acquire_permit`]: at most `k` holders, each permit a lock key of its own),
//!   read-write locks ([`Redlock::acquire_read`], [`Redlock::acquire_write`]: readers together, a
//!   writer alone and never starved), leader election ([`Redlock::campaign`]: the term is the
//!   fencing token; [`Redlock::leader`], [`Redlock::observe`]), and a lock-delay
//!   ([`Builder::lock_delay`]) for holders that vanish without releasing.
//!
//! # Non-guarantees
//! - A holder that pauses (GC, swap, a stopped VM) past its deadline may act after somebody else
//!   got the lock. Check [`LockInfo::is_valid`] (a [`Lock`] and a [`Guard`] dereference to their [`LockInfo`]) before each step, keep steps
//!   short.
//! - A node that loses its data (a restart, a flush, eviction, another server behind its
//!   address) could let a second client gather a majority. We quarantine such a node (its
//!   grants are not votes) for `max_ttl` from when we see the evidence: a changed `run_id`, a
//!   missing or changed marker key ([`MARKER_KEY`]), an uptime below `max_ttl`. A node
//!   configured not to lose acknowledged writes (AOF, `appendfsync always`) that still shows its
//!   marker is trusted at once. This protects a holder only if every client of those servers
//!   quarantines.
//! - Mutual exclusion assumes clocks that run at about the same rate (not synchronised ones);
//!   the drift allowance covers small differences, not jumps of the wall clock of a Redis server.
//!
//! # Quick start
//! ```no_run
//! use std::time::Duration;
//! use redquorum::Redlock;
//!
//! # async fn run() -> Result<(), redquorum::Error> {
//! let manager = Redlock::from_list("redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003")?;
//! let lock = manager.acquire("invoice:42", Duration::from_secs(10)).await?;
//! // ... work, checking lock.is_valid() between steps ...
//! lock.release().await;
//! # Ok(()) }
//! ```
//!
//! # One resource or several
//! Six acquire methods: [`Redlock::acquire`], [`Redlock::try_acquire`] and
//! [`Redlock::acquire_with`] for one resource, and their `_many` versions for a set. One generic
//! `acquire(impl Into<Resources>)` would save three names but hide at the call site what
//! differs: a set is taken by our own all-or-nothing scripts, not the standard wire format other
//! clients share. The separate names keep that visible, at the cost of three more methods.
//!
//! # One request for every language
//! [`Request`] is one acquisition as plain data (a [`Kind`], the resources, the TTL, the retry
//! policy) and [`Settings`] every manager setting as plain data; [`SharedLock`] is a held lock
//! owned by a foreign language's object. The Python and Node packages and the CLI build these
//! and forward them ([`Redlock::request`], [`Builder::settings`]): the rules that check a
//! request, apply a setting or share a handle are written once, here.
//!
//! # Layout
//! Every async type is exported here, at the crate root, and only here. Three modules are
//! public: [`defaults`], the settings' default values; [`blocking`], the same API for synchronous
//! code (its types share names with the async ones, so they keep their module path); and
//! [`fork`], what to call around `fork()`. One is hidden, not a stable API: `protocol`, which
//! the model checker imports.
//!
//! The source is in five folders, which are floors: each imports only from the floors below
//! it, so every arrow between folders runs one way (`docs/layout.md` lists every file).
//! 1. `protocol/`: the pure decisions (quorum, validity, fencing, quarantine, markers, causes,
//!    the lock value's grammar), unit-tested without a server. No I/O, no clock, no imports
//!    from outside the folder (its `mod.rs` has the rule); the model checker runs these very
//!    functions.
//! 2. `base/`: what every floor above uses: the one [`Error`] type, the [`defaults`], every
//!    metric and span name, the random draws every identifier comes from, and the plain values
//!    of an acquisition (its resources, a semaphore's permits, a waiter's queue place).
//! 3. `nodes/`: where bytes go to Redis: one node per configured address (a server, a Redis
//!    Cluster, a primary behind Sentinel or behind a fixed address), its connections, health
//!    check, Lua scripts and subscriber. What a node answers goes up as plain data.
//! 4. `round/`: the algorithm and the machinery it runs on: `acquire` (attempt, decide, roll
//!    back, wait: readable top to bottom), the round engine, deadlines, waiting, retry.
//! 5. `handles/`: what callers hold and read: [`Redlock`]'s face (`redlock`), the [`Request`]
//!    and [`Settings`] values, the [`Builder`], the held [`Lock`] and its [`Guard`], leader
//!    election, the [`SharedLock`] of other languages, [`blocking`] and the status of a
//!    resource.

#![warn(missing_docs)]
#![warn(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod base;
mod handles;
mod nodes;
#[doc(hidden)]
pub mod protocol;
mod round;
#[cfg(test)]
mod tests;

pub use base::defaults;
pub use handles::blocking;
pub use round::fork;

pub use base::error::{ConfigError, Error, Limit, LossReason, RoundFailure};
pub use handles::config::Builder;
pub use handles::election::{Leader, LeaderWatch};
pub use handles::hold::{Guard, HoldOptions};
pub use handles::lock::{Lock, LockInfo};
pub use handles::redlock::Redlock;
pub use handles::request::{Acquired, Kind, Request};
pub use handles::settings::Settings;
pub use handles::shared::{HandleError, Holding, SharedLock, Watched};
pub use handles::status::{Locked, NodeStatus};
pub use nodes::inspect::NodeState;
pub use nodes::mark::cluster_marker;
pub use nodes::scripts::check_resource;
pub use nodes::shards::Shard;
pub use protocol::cause::Cause;
pub use protocol::mark::{Mark, Vouch};
pub use protocol::marker::MarkerState;
pub use protocol::quarantine::{MARKER_KEY, Quarantine, QuarantineReason};
pub use protocol::remedy::{Reader, Remedy};
pub use protocol::reply::{NodeReply, Reply};
pub use round::engine::Released;
pub use round::retry::Retry;

/// The README's examples, compiled as doctests so they cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

// The repository's README and the docs/ files with Rust examples, compiled as doctests too.
// Only under `cfg(doctest)` (first, so the item is gone before `include_str!` runs): a packaged
// crate has no files outside its directory. scripts/check-links.sh checks that every markdown
// file with a Rust block is listed here.
/// The repository's README.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct RepositoryReadmeDoctests;
/// docs/library.md.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryDocs;
/// docs/primitives.md.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/primitives.md")]
pub struct PrimitivesDocs;
/// docs/cluster.md.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/cluster.md")]
pub struct ClusterDocs;
/// docs/sentinel.md.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/sentinel.md")]
pub struct SentinelDocs;
