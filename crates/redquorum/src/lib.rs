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
//! # Layout
//! Every async type is exported here, at the crate root, and only here. Three modules are
//! public: [`defaults`], the settings' default values; [`blocking`], the same API for synchronous
//! code (its types share names with the async ones, so they keep their module path); and
//! [`fork`], what to call around `fork()`. One is hidden, not a stable API: `protocol`, which
//! the model checker imports.
//!
//! The source is in five folders. `protocol` imports from none of the others: every arrow
//! into it runs one way.
//!
//! `protocol/`: the pure decisions, unit-tested without a server. No I/O, no imports from
//! outside the folder (its `mod.rs` has the rule); the model checker runs these very functions.
//! - `quorum`: vote counting; decides won, lost or still open.
//! - `validity`: deadline arithmetic (`start + ttl − drift`).
//! - `fencing`: why fencing tokens increase across independent masters, and how one is chosen.
//! - `quarantine`: when a node that may have lost its data votes again, and the marker key that
//!   is the evidence.
//! - `first_sight`: when a group of nodes first seen without markers is trusted at once.
//! - `marker`: the marker's value grammar: who wrote it, and from when it vouches.
//! - `mark`: what refuses an operator's vouch ([`Redlock::mark_nodes`]), and what the vouch
//!   came to on each node ([`Mark`], [`Vouch`]).
//! - `cause`: why a round that was not won failed (busy, not held, unavailable, quarantined,
//!   a key of another type, too slow).
//! - `reply`: what each node answered ([`Reply`], [`NodeReply`]).
//! - `value`: the lock value's grammar: the random digits, the holder's late-release bound, a
//!   candidate's identity.
//! - `rwlock`: readers or one writer on one key; why writers are not starved, and how readers'
//!   and writers' fencing tokens are ordered.
//! - `lease`: how long a fair waiter's queue place, or a waiting writer's entry, outlives its
//!   last renewal.
//! - `aliases`: one server, one vote, whatever names it is reached by.
//! - `slots`: Redis Cluster's hash slots, and the tags that keep a lock's keys in its slot.
//! - `sync`: locking a mutex without a poison path.
//!
//! `nodes/`: where bytes go to Redis.
//! - `node`: one Redlock node: what each request of a round (`Request`) means in commands and
//!   replies (`Answer`). The seam between the algorithm and the wire: a node that is a whole
//!   Redis Cluster routes each request to the `server` of the lock key's slot behind the same
//!   `Request`/`Answer`, without touching the algorithm.
//! - `server`: one Redis server: the one multiplexed connection to it, its health verdict,
//!   timeouts and replacement, and the order requests run in. The only module that sends lock
//!   commands.
//! - `shards`: a node that is a Redis Cluster: its slot map, routing, `WAIT` for replicas.
//! - `replica_acks`: the replicas' acknowledgements a cluster master's vote waits for.
//! - `scripts`: the Lua scripts (`src/nodes/scripts/*.lua`) and the keys each takes.
//! - `health`: the health check a connection passes before its replies count (`INFO`, the
//!   marker key, `CONFIG GET`), judged by `quarantine`.
//! - `vouch`: the only rewrites of a marker in place: first sight's I/O, and the script step an
//!   operator's mark uses.
//! - `mark`: an operator's vouch that servers lost nothing, [`Redlock::mark_nodes`]; and
//!   [`cluster_marker`], for tools that prepare new clusters.
//! - `connect`: a connection of its own to a server, outside its shared one (slot maps, first
//!   sight, marks).
//! - `subscriber`: the one other connection per node: hears waited-for lock keys freed (key
//!   tracking) and fair releases announced, and reports them to a `Listener`; only ever a hint.
//! - `stragglers`: the requests a won round leaves behind: kept by the lock, or finished by one
//!   task per runtime.
//! - `node_error`: why a node gave no usable answer, from a Redis error.
//!
//! `round/`: the algorithm, and the machinery it runs on.
//! - `manager`: the algorithm, readable top to bottom: attempt, decide, roll back, wait.
//! - `engine`: the round engine (every node at once, replies counted as they come, decided as
//!   soon as known) and what every lock shares; built from the validated settings.
//! - `deadlines`: one thread that wakes rounds past their node timeout (no timer per round).
//! - `waiting`: waiting for a busy lock: one acquisition's `Turn`, woken by releases, in arrival
//!   order when fair.
//! - `retry`: the retry policy with jittered delays, and the outage bound of a wait.
//! - `fresh`: random identifiers that never repeat across processes, a forked child's
//!   included (lock values, waiter ids, markers).
//! - [`fork`] (public): what to call around `fork()`.
//!
//! `primitives/`: beyond one lock, on the same quorum, validity, quarantine and fencing.
//! - `resources`: the resources of one lock, one key or a sorted set taken all-or-nothing.
//! - `semaphore`: why a semaphore's permits are lock keys of their own, not a count, and the
//!   order an acquisition tries them in. Pure, but not in `protocol`: it builds `Resources` and
//!   reports a [`ConfigError`], the caller-facing error type (so does `resources`).
//! - `election`: leader election on a lock: the term is the fencing token, the identity rides
//!   in the lock value, and observers read who leads.
//!
//! `handles/`: what callers hold and read.
//! - `config`: the [`Builder`]: checks every setting, then hands them to the engine.
//! - [`defaults`] (public): the settings' default values and bounds.
//! - `lock`: the held [`Lock`] and its clean-up on drop.
//! - `hold`: auto-extension: a [`Guard`] keeps a lock alive in the background and fires a
//!   cancellation token the moment it is lost; [`Redlock::with_lock`] runs work under it.
//! - [`blocking`] (public): the same manager, lock and guard for synchronous code, on a Tokio
//!   runtime of their own that keeps their background work running between calls.
//! - `status`: a read-only look at who holds a resource, node by node (the CLI's `status`).
//! - `error`: the one [`Error`] type.
//! - `telemetry`: every metric name and label, and the tracing spans' shape: what the
//!   application's recorder and subscriber receive.
//!
//! No two modules import each other, directly or through others: the arrows run one way.

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
