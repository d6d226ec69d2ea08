//! The same manager, lock and guard for synchronous code, like reqwest's and redis-rs's
//! `blocking` modules.
//!
//! One file because it mirrors the async API method for method, each a documented forwarder
//! onto one runtime: split, a reader would lose the one place that says which calls block.
//!
//! A lock is more than its calls: connections run as tasks, a won round's late requests are
//! finished by a driver task, a [`Guard`]'s keeper extends the lock between calls, and a
//! subscriber hears releases. The async layer runs all of that on the runtime of whoever calls
//! it. A synchronous caller has no runtime that keeps running between calls, so this module
//! brings its own: one worker thread (`redquorum-blocking`), shared by every clone of a
//! [`Redlock`] and every [`Lock`] and [`Guard`] it hands out. Each method waits on the caller's
//! thread with [`Runtime::block_on`]; the background work keeps running on the worker.
//!
//! ```no_run
//! use std::time::Duration;
//! use redquorum::blocking::Redlock;
//!
//! # fn run() -> Result<(), redquorum::Error> {
//! let manager = Redlock::from_list("redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003")?;
//! let lock = manager.acquire("invoice:42", Duration::from_secs(10))?;
//! // ... work, checking lock.is_valid() between steps ...
//! lock.release()?;
//! # Ok(()) }
//! ```
//!
//! # Invariants
//! 1. **The runtime lives as long as any handle.** A manager, each of its clones, and every lock
//!    and guard hold it (one `Arc`), so background work never stops while something may still
//!    need it, e.g. a guard kept after its manager was dropped.
//! 2. **Waiting is refused where a Tokio runtime is current** (an async task, a `block_on`, a
//!    `spawn_blocking` thread): `block_on` would panic there, or stall the runtime's thread.
//!    The method sends nothing and returns [`Error::InsideRuntime`], whose message names the
//!    async method to call instead. Tokio does not tell a `spawn_blocking` thread (where waiting would
//!    be harmless) from a worker, so both are refused.
//! 3. **A dropped lock or guard is released before `drop` returns**, on every node that answers
//!    within the node timeout: the async layer's drop only schedules a release on the current
//!    runtime, and does nothing outside one (lock invariant 2). Where a runtime is current
//!    (invariant 2) the drop cannot wait, and hands the release to our runtime instead, as the
//!    async drop does.
//! 4. **What the async layer spawns lands on our runtime**: a guard's keeper, the requests a
//!    detached lock leaves in flight, a background release. Calls that spawn run with our
//!    runtime entered, never on a caller's runtime that may stop being driven (`stragglers`
//!    invariant 2).
//! 5. **The runtime is never dropped where a runtime is current** (Tokio panics there): the last
//!    handle dropped there shuts it down from a thread of its own. Before it stops, the last
//!    handle waits for the manager's background work ([`Redlock::settle`]), so that a detached
//!    lock or a background release reaches every node that answers.
//!
//! # Cancel safety
//! A blocking call cannot be abandoned half-way: it returns once the async call it wraps has
//! finished, so what it leaves on the servers is what that call leaves when it completes (each
//! method says). The one way out in the middle is a panic, e.g. in [`Redlock::with_lock`]'s
//! work; unwinding drops the handles, which release their locks (invariant 3).
//!
//! # Why no conversion from an async manager
//! A manager's connections run as tasks on the runtime that made them. A manager shared between
//! a caller's runtime and ours would lose every connection made on whichever runtime stops
//! first, which fails the next round on those nodes (a failed extension is a guard's loss). A
//! blocking manager is therefore always built here, from a [`Builder`], with connections of its
//! own.

use std::future::Future;
use std::ops::Deref;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Runtime};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::base::error::{ConfigError, Error, LossReason};
use crate::handles::config::Builder;
use crate::handles::hold::HoldOptions;
use crate::handles::lock::LockInfo;
use crate::handles::request::{self, Request};
use crate::handles::status::NodeStatus;
use crate::handles::{election, hold, lock, redlock};
use crate::protocol::reply::NodeReply;
use crate::round::engine::Released;
use crate::round::retry::Retry;

/// The name of the runtime's threads, as seen in `top -H` and debuggers.
const THREAD_NAME: &str = "redquorum-blocking";

/// Whether waiting is refused on this thread (invariant 2): a Tokio runtime is current, or the
/// thread's locals are being destroyed (a handle dropped by a thread-local destructor), where
/// `block_on` would panic and abort the process.
fn runtime_is_current() -> bool {
    match Handle::try_current() {
        Ok(_) => true,
        Err(e) => e.is_thread_local_destroyed(),
    }
}

/// The error of a blocking `method` called where a runtime is current: one line saying so and
/// naming the async method to await instead (`method` is spelled the same in both modules).
fn cannot_block(method: &'static str) -> Error {
    Error::InsideRuntime { method }
}

/// The runtime, and what all handles of one manager share (invariant 1).
#[derive(Debug)]
struct Shared {
    redlock: redlock::Redlock,
    runtime: OwnRuntime,
    /// Releases of locks and guards dropped where waiting is refused, waited for before the
    /// runtime stops (invariant 5).
    releases: TaskTracker,
}

/// Our runtime; `None` only while [`Shared`] is being dropped.
#[derive(Debug)]
struct OwnRuntime(Option<Runtime>);

impl OwnRuntime {
    fn get(&self) -> &Runtime {
        self.0
            .as_ref()
            .expect("the runtime is taken only when the last handle is dropped")
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        // Invariant 5: dropping a runtime waits for its workers, which Tokio forbids where a
        // runtime is current. Reached there only if no thread could be started to do it.
        if let Some(runtime) = self.0.take()
            && runtime_is_current()
        {
            runtime.shutdown_background();
        }
    }
}

impl Shared {
    fn runtime(&self) -> &Runtime {
        self.runtime.get()
    }

    /// Our runtime, to wait on, unless a runtime is current here (invariant 2).
    fn waiting(&self, method: &'static str) -> Result<&Runtime, Error> {
        if runtime_is_current() {
            return Err(cannot_block(method));
        }
        Ok(self.runtime())
    }

    /// Runs `future` to completion on this thread, with our runtime driving it (invariant 2).
    fn block_on<F: Future>(&self, method: &'static str, future: F) -> Result<F::Output, Error> {
        Ok(self.waiting(method)?.block_on(future))
    }

    /// Runs a dropped handle's `release` before returning (invariant 3), bounded by the node
    /// timeout (a node that did not answer keeps the key until its TTL); where waiting is
    /// refused, in the background on our runtime instead, which the last handle's drop waits for
    /// (invariant 5).
    fn release_dropped<F>(&self, release: F)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if runtime_is_current() {
            self.releases.spawn_on(release, self.runtime().handle());
        } else {
            self.runtime().block_on(release);
        }
    }

    /// Runs `f` with our runtime current, so that whatever it spawns lands on ours (invariant 4).
    fn entered<T>(&self, f: impl FnOnce() -> T) -> T {
        let _entered = self.runtime().enter();
        f()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let runtime = OwnRuntime(self.runtime.0.take());
        let redlock = self.redlock.clone();
        let releases = self.releases.clone();
        // Invariant 5: the background work lands before the runtime that runs it stops.
        let wind_down = move || {
            if let Some(runtime) = &runtime.0 {
                releases.close();
                runtime.block_on(async {
                    releases.wait().await;
                    redlock.settle().await;
                });
            }
            drop(runtime);
        };
        if !runtime_is_current() {
            wind_down();
            return;
        }
        let spawned = std::thread::Builder::new()
            .name(format!("{THREAD_NAME}-exit"))
            .spawn(wind_down);
        if let Err(e) = spawned {
            // The closure was dropped here, and the runtime with it, without waiting
            // (`OwnRuntime`'s drop): the keys of a background release expire with their TTL.
            tracing::warn!(error = %e, "could not settle the blocking manager before shutting it down");
        }
    }
}

/// The lock manager for synchronous code: the async [`crate::Redlock`] and a Tokio runtime of
/// its own (one worker thread), shared by every clone and every lock and guard it hands out.
///
/// Cheap to clone (an `Arc`); create one per set of servers and share it between threads. Every
/// method that waits returns an error instead of waiting when called inside a Tokio runtime:
/// async code uses [`crate::Redlock`].
#[derive(Debug, Clone)]
pub struct Redlock {
    shared: Arc<Shared>,
}

impl Redlock {
    /// Checks `builder`'s configuration, creates the manager and starts its runtime. No
    /// connection is made yet: each node connects on first use (or at [`connect`](Self::connect)).
    /// Works anywhere, also inside an async runtime.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let builder = redquorum::Redlock::builder(["redis://10.0.0.1", "redis://10.0.0.2", "redis://10.0.0.3"])
    ///     .node_timeout(Duration::from_millis(50));
    /// let manager = redquorum::blocking::Redlock::new(builder)?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Config`] for a configuration [`Builder::build`] refuses, or when the runtime
    /// cannot start (setting `runtime`: the OS refused a thread or a file descriptor).
    pub fn new(builder: Builder) -> Result<Self, Error> {
        let redlock = builder.build()?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name(THREAD_NAME)
            .build()
            .map_err(|e| ConfigError::InvalidSetting {
                setting: "runtime",
                reason: format!("the blocking manager's Tokio runtime could not start: {e}"),
            })?;
        let runtime = OwnRuntime(Some(runtime));
        Ok(Self {
            shared: Arc::new(Shared {
                redlock,
                runtime,
                releases: TaskTracker::new(),
            }),
        })
    }

    /// A manager with default settings over a comma-separated list of URLs (the form of
    /// [`crate::Redlock::from_list`]).
    ///
    /// # Errors
    /// As for [`new`](Self::new).
    pub fn from_list(list: &str) -> Result<Self, Error> {
        Self::new(redlock::Redlock::builder_from_list(list))
    }

    /// Waits for an acquisition and wraps the lock it returns.
    fn lock<F>(&self, method: &'static str, acquire: F) -> Result<Lock, Error>
    where
        F: Future<Output = Result<lock::Lock, Error>>,
    {
        let lock = self.shared.block_on(method, acquire)??;
        Ok(Lock::held(lock, &self.shared))
    }

    /// Acquires what `request` asks for, as plain data; see [`crate::Redlock::request`].
    ///
    /// # Errors
    /// As for [`crate::Redlock::request`]; [`Error::InsideRuntime`] inside a runtime.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub fn request(&self, request: &Request) -> Result<Acquired, Error> {
        let redlock = &self.shared.redlock;
        // A campaign's keep-alive task is spawned on our runtime (invariant 4): it runs there.
        let acquired = self
            .shared
            .block_on("Redlock::request", redlock.request(request))??;
        Ok(match acquired {
            request::Acquired::Lock(lock) => Acquired::Lock(Lock::held(lock, &self.shared)),
            request::Acquired::KeptAlive(guard) => {
                Acquired::KeptAlive(Guard::held(guard, &self.shared))
            }
        })
    }

    /// The nodes' addresses (without credentials), in configuration order.
    pub fn nodes(&self) -> Vec<String> {
        self.shared.redlock.nodes()
    }

    /// How many nodes must grant a request: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.shared.redlock.quorum()
    }

    /// Connects to every node and loads the scripts; see [`crate::Redlock::connect`]. Returns each
    /// node's reply: `Granted` when it is ready.
    ///
    /// # Errors
    /// Only [`Error::InsideRuntime`], inside a runtime (nothing is sent then).
    ///
    /// # Cancel safety
    /// Nothing to cancel, and nothing is left on the servers but connections.
    pub fn connect(&self) -> Result<Vec<NodeReply>, Error> {
        self.shared
            .block_on("Redlock::connect", self.shared.redlock.connect())
    }

    /// Waits for the requests this manager still has in flight in the background (about two
    /// node timeouts at most); see [`crate::Redlock::settle`]. Dropping the last handle of a
    /// manager does this too, so a short-lived program needs it only before it exits with
    /// handles still alive (e.g. `std::process::exit`).
    ///
    /// # Errors
    /// Only [`Error::InsideRuntime`], inside a runtime.
    ///
    /// # Cancel safety
    /// Waiting only: it changes nothing on the servers.
    pub fn settle(&self) -> Result<(), Error> {
        self.shared
            .block_on("Redlock::settle", self.shared.redlock.settle())
    }

    /// Acquires `resource` for `ttl`, retrying by the manager's [`Retry`] policy; see
    /// [`crate::Redlock::acquire`]. The lock is released when dropped.
    ///
    /// # Errors
    /// As for [`crate::Redlock::acquire`]; [`Error::InsideRuntime`] inside a runtime.
    ///
    /// # Cancel safety
    /// Nothing to cancel: the call returns once the acquisition is decided. On an error, every
    /// attempt has been rolled back on every node that answered (others expire with the TTL).
    pub fn acquire(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire",
            self.shared.redlock.acquire(resource, ttl),
        )
    }

    /// A single attempt, no retry (`flock -n`). See [`acquire`](Self::acquire).
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire); [`Error::is_busy`] when somebody else holds it.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub fn try_acquire(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.lock(
            "Redlock::try_acquire",
            self.shared.redlock.try_acquire(resource, ttl),
        )
    }

    /// [`acquire`](Self::acquire) with a retry policy for this call only, e.g.
    /// `Retry::forever().max_wait(Duration::from_secs(5))`.
    ///
    /// # Errors
    /// As for [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub fn acquire_with(
        &self,
        resource: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_with",
            self.shared.redlock.acquire_with(resource, ttl, retry),
        )
    }

    /// Acquires every resource in `resources` as one lock, all-or-nothing on each node; see
    /// [`crate::Redlock::acquire_many`].
    ///
    /// # Errors
    /// As for [`crate::Redlock::acquire_many`]; [`Error::InsideRuntime`] inside a runtime.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire), for every key of the set.
    pub fn acquire_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_many",
            self.shared.redlock.acquire_many(resources, ttl),
        )
    }

    /// A single attempt at a set, no retry. See [`acquire_many`](Self::acquire_many).
    ///
    /// # Errors
    /// As for [`acquire_many`](Self::acquire_many).
    ///
    /// # Cancel safety
    /// As for [`acquire_many`](Self::acquire_many).
    pub fn try_acquire_many(&self, resources: &[&str], ttl: Duration) -> Result<Lock, Error> {
        self.lock(
            "Redlock::try_acquire_many",
            self.shared.redlock.try_acquire_many(resources, ttl),
        )
    }

    /// [`acquire_many`](Self::acquire_many) with a retry policy for this call only.
    ///
    /// # Errors
    /// As for [`acquire_many`](Self::acquire_many).
    ///
    /// # Cancel safety
    /// As for [`acquire_many`](Self::acquire_many).
    pub fn acquire_many_with(
        &self,
        resources: &[&str],
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_many_with",
            self.shared.redlock.acquire_many_with(resources, ttl, retry),
        )
    }

    /// Campaigns in `election` as `identity` until this candidate leads (by the manager's retry
    /// policy); the leadership is kept alive by the returned [`Guard`], whose fencing token is the
    /// term. See [`crate::Redlock::campaign`].
    ///
    /// # Errors
    /// As for [`crate::Redlock::campaign`]; [`Error::InsideRuntime`] inside a runtime.
    ///
    /// # Cancel safety
    /// Nothing to cancel.
    pub fn campaign(&self, election: &str, identity: &str, ttl: Duration) -> Result<Guard, Error> {
        let retry = self.shared.redlock.engine().rules.retry.clone();
        self.campaign_with(election, identity, ttl, &retry)
    }

    /// [`campaign`](Self::campaign) with a retry policy for this call only, e.g.
    /// [`Retry::forever`].
    ///
    /// # Errors
    /// As for [`campaign`](Self::campaign).
    pub fn campaign_with(
        &self,
        election: &str,
        identity: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Guard, Error> {
        let redlock = &self.shared.redlock;
        let campaign = redlock.campaign_with(election, identity, ttl, retry);
        // The keep-alive task is spawned on our runtime (invariant 4): the campaign runs there.
        let guard = self.shared.block_on("Redlock::campaign_with", campaign)??;
        Ok(Guard::held(guard, &self.shared))
    }

    /// Who leads `election` now, as a majority of nodes report it; see
    /// [`crate::Redlock::leader`].
    ///
    /// # Errors
    /// [`Error::InsideRuntime`] inside a runtime.
    pub fn leader(&self, election: &str) -> Result<Option<election::Leader>, Error> {
        self.shared
            .block_on("Redlock::leader", self.shared.redlock.leader(election))
    }

    /// Acquires the read-write lock `resource` as a reader; see [`crate::Redlock::acquire_read`].
    ///
    /// # Errors
    /// As for [`crate::Redlock::acquire_read`]; [`Error::InsideRuntime`] inside a runtime.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub fn acquire_read(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_read",
            self.shared.redlock.acquire_read(resource, ttl),
        )
    }

    /// A single attempt as a reader, no retry. See [`acquire_read`](Self::acquire_read).
    ///
    /// # Errors
    /// As for [`acquire_read`](Self::acquire_read).
    ///
    /// # Cancel safety
    /// As for [`acquire_read`](Self::acquire_read).
    pub fn try_acquire_read(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.lock(
            "Redlock::try_acquire_read",
            self.shared.redlock.try_acquire_read(resource, ttl),
        )
    }

    /// [`acquire_read`](Self::acquire_read) with a retry policy for this call only.
    ///
    /// # Errors
    /// As for [`acquire_read`](Self::acquire_read).
    ///
    /// # Cancel safety
    /// As for [`acquire_read`](Self::acquire_read).
    pub fn acquire_read_with(
        &self,
        resource: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_read_with",
            self.shared.redlock.acquire_read_with(resource, ttl, retry),
        )
    }

    /// Acquires the read-write lock `resource` as its writer; see
    /// [`crate::Redlock::acquire_write`].
    ///
    /// # Errors
    /// As for [`crate::Redlock::acquire_write`]; [`Error::InsideRuntime`] inside a runtime.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub fn acquire_write(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_write",
            self.shared.redlock.acquire_write(resource, ttl),
        )
    }

    /// A single attempt as the writer, no retry. See [`acquire_write`](Self::acquire_write).
    ///
    /// # Errors
    /// As for [`acquire_write`](Self::acquire_write).
    ///
    /// # Cancel safety
    /// As for [`acquire_write`](Self::acquire_write).
    pub fn try_acquire_write(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.lock(
            "Redlock::try_acquire_write",
            self.shared.redlock.try_acquire_write(resource, ttl),
        )
    }

    /// [`acquire_write`](Self::acquire_write) with a retry policy for this call only.
    ///
    /// # Errors
    /// As for [`acquire_write`](Self::acquire_write).
    ///
    /// # Cancel safety
    /// As for [`acquire_write`](Self::acquire_write).
    pub fn acquire_write_with(
        &self,
        resource: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_write_with",
            self.shared.redlock.acquire_write_with(resource, ttl, retry),
        )
    }

    /// Acquires one of the `permits` permits of the semaphore `semaphore`; see
    /// [`crate::Redlock::acquire_permit`].
    ///
    /// # Errors
    /// As for [`crate::Redlock::acquire_permit`]; [`Error::InsideRuntime`] inside a runtime.
    ///
    /// # Cancel safety
    /// As for [`acquire`](Self::acquire).
    pub fn acquire_permit(
        &self,
        semaphore: &str,
        permits: u32,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_permit",
            self.shared.redlock.acquire_permit(semaphore, permits, ttl),
        )
    }

    /// A single attempt at a permit, no retry. See [`acquire_permit`](Self::acquire_permit).
    ///
    /// # Errors
    /// As for [`acquire_permit`](Self::acquire_permit).
    ///
    /// # Cancel safety
    /// As for [`acquire_permit`](Self::acquire_permit).
    pub fn try_acquire_permit(
        &self,
        semaphore: &str,
        permits: u32,
        ttl: Duration,
    ) -> Result<Lock, Error> {
        self.lock(
            "Redlock::try_acquire_permit",
            self.shared
                .redlock
                .try_acquire_permit(semaphore, permits, ttl),
        )
    }

    /// [`acquire_permit`](Self::acquire_permit) with a retry policy for this call only.
    ///
    /// # Errors
    /// As for [`acquire_permit`](Self::acquire_permit).
    ///
    /// # Cancel safety
    /// As for [`acquire_permit`](Self::acquire_permit).
    pub fn acquire_permit_with(
        &self,
        semaphore: &str,
        permits: u32,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Lock, Error> {
        self.lock(
            "Redlock::acquire_permit_with",
            self.shared
                .redlock
                .acquire_permit_with(semaphore, permits, ttl, retry),
        )
    }

    /// Extends a lock known only by its resource and value to `ttl` from now; returns its new
    /// deadline. See [`crate::Redlock::extend_value`].
    ///
    /// # Errors
    /// [`Error::LockLost`] when fewer than a quorum still held `value` and extended it in time;
    /// [`Error::InsideRuntime`] inside a runtime.
    ///
    /// # Cancel safety
    /// Nothing to cancel. On an error the TTL may have been reset on some nodes; the lock is then
    /// as valid as before the call, and no more.
    pub fn extend_value(
        &self,
        resource: &str,
        value: &str,
        ttl: Duration,
    ) -> Result<Instant, Error> {
        self.shared.block_on(
            "Redlock::extend_value",
            self.shared.redlock.extend_value(resource, value, ttl),
        )?
    }

    /// Releases a lock known only by its resource and value on every node. Deletes nothing that
    /// does not hold `value`.
    ///
    /// # Errors
    /// Only [`Error::InsideRuntime`], inside a runtime (nothing is sent then).
    ///
    /// # Cancel safety
    /// Nothing to cancel: the call returns once every node answered or timed out; a node that
    /// did not answer may keep the key until it expires.
    pub fn release_value(&self, resource: &str, value: &str) -> Result<Released, Error> {
        self.shared.block_on(
            "Redlock::release_value",
            self.shared.redlock.release_value(resource, value),
        )
    }

    /// What every node holds for `resource`, in configuration order; see
    /// [`crate::Redlock::status`].
    ///
    /// # Errors
    /// Only [`Error::InsideRuntime`], inside a runtime.
    ///
    /// # Cancel safety
    /// Read-only: it leaves nothing on any server.
    pub fn status(&self, resource: &str) -> Result<Vec<NodeStatus>, Error> {
        self.shared
            .block_on("Redlock::status", self.shared.redlock.status(resource))
    }

    /// Acquires `resource` (with the manager's [`Retry`] policy), keeps it alive with the default
    /// [`HoldOptions`] while `work` runs on this thread, then releases it.
    ///
    /// Synchronous work cannot be stopped from outside: it is handed the lock's [`LockInfo`],
    /// and must check [`is_lost`](LockInfo::is_lost) between steps and return early once it is
    /// true.
    ///
    /// # Errors
    /// What [`acquire`](Self::acquire) returns if the lock cannot be taken; [`Error::HoldLost`]
    /// if it was lost before `work` returned, whose output is then dropped, since it was not
    /// made under the lock throughout. Once the work has returned with the lock still held, its
    /// output is returned whatever the release finds. [`Error::InsideRuntime`] inside a
    /// runtime, before anything is sent.
    ///
    /// # Cancel safety
    /// Nothing to cancel. If `work` panics, the lock is released while the panic unwinds, before
    /// it leaves this call.
    pub fn with_lock<T>(
        &self,
        resource: &str,
        ttl: Duration,
        work: impl FnOnce(LockInfo) -> T,
    ) -> Result<T, Error> {
        self.shared.waiting("Redlock::with_lock")?;
        // The work gets the lock's info, with its token (as the async `with_lock`).
        let guard = self
            .lock(
                "Redlock::with_lock",
                self.shared.redlock.acquire_fenced_now(resource, ttl),
            )?
            .keep_alive(ttl);
        let output = work(LockInfo::clone(&guard));
        // Read before the release, which makes every lock lost (hold invariant 4). Time alone
        // counts (hold invariant 7): a loss the keeper has not recorded yet is a loss.
        let lost_during_work = guard.is_lost();
        let output = (!lost_during_work).then_some(output);
        hold::work_done(resource, output, guard.release())
    }
}

/// A lock held on a quorum of nodes, for synchronous code: the async [`crate::Lock`] on the
/// manager's runtime. Dereferences to its [`LockInfo`] (`lock.value()`, `lock.is_valid()`, ...).
///
/// Release it with [`release`](Self::release), keep it alive with
/// [`keep_alive`](Self::keep_alive), or hand it to another process with
/// [`detach`](Self::detach). A lock dropped unreleased is released before `drop` returns, on
/// every node that answers within the node timeout (invariant 3); dropped inside a Tokio
/// runtime, it is released in the background instead.
#[derive(Debug)]
#[must_use = "a lock is released as soon as it is dropped: bind it (`let lock = ...`) and release it when the work is done"]
pub struct Lock {
    /// `None` only once a method consuming the lock has taken it.
    lock: Option<lock::Lock>,
    shared: Arc<Shared>,
}

/// Why the handle's `Option` is `Some` wherever it is read.
const PRESENT: &str = "taken only by methods that consume the handle";

impl Deref for Lock {
    type Target = LockInfo;

    fn deref(&self) -> &LockInfo {
        self.lock.as_ref().expect(PRESENT)
    }
}

impl Lock {
    /// The blocking handle of `lock`, on the manager's runtime.
    fn held(lock: lock::Lock, shared: &Arc<Shared>) -> Self {
        Self {
            lock: Some(lock),
            shared: Arc::clone(shared),
        }
    }

    /// Resets the lock's TTL to `ttl` from now on every node that still holds our value; see
    /// [`crate::Lock::extend`].
    ///
    /// # Errors
    /// [`Error::LockLost`] if the lock was no longer valid, or fewer than a quorum extended it
    /// within the new validity; the handle is then invalid for good. [`Error::InsideRuntime`]
    /// error inside a runtime (nothing is sent, and the lock is as before).
    ///
    /// # Cancel safety
    /// Nothing to cancel. On an error the deadline is the earlier of the old one and what the
    /// new TTL allows (lock invariant 3), safe whichever nodes applied it.
    pub fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let lock = self.lock.as_mut().expect(PRESENT);
        self.shared.block_on("Lock::extend", lock.extend(ttl))?
    }

    /// The lock's fencing token, issued on the first call; see [`crate::Lock::fence`].
    ///
    /// # Errors
    /// As [`crate::Lock::fence`]; [`Error::InsideRuntime`] inside a runtime (nothing is sent).
    pub fn fence(&mut self) -> Result<u64, Error> {
        let lock = self.lock.as_mut().expect(PRESENT);
        self.shared.block_on("Lock::fence", lock.fence())?
    }

    /// Releases the lock on every node and reports how many confirmed.
    ///
    /// # Errors
    /// Only [`Error::InsideRuntime`], inside a runtime; the lock is then released in the
    /// background, as if dropped there.
    ///
    /// # Cancel safety
    /// Nothing to cancel: the call returns once every node answered or timed out; a node that
    /// did not answer may keep the key until it expires.
    pub fn release(mut self) -> Result<Released, Error> {
        // Checked before the lock is taken: refused, the handle's drop releases it.
        let runtime = self.shared.waiting("Lock::release")?;
        let lock = self.lock.take().expect(PRESENT);
        Ok(runtime.block_on(lock.release()))
    }

    /// Gives the lock up without releasing it, for another process; see
    /// [`crate::Lock::detach`]. Does not wait: works anywhere.
    ///
    /// # Cancel safety
    /// The keys stay until their TTL runs out or somebody releases them by value
    /// ([`Redlock::release_value`]). The acquisition's requests still in flight are finished on
    /// the manager's runtime; [`Redlock::settle`], or dropping the manager's last handle, waits
    /// for them.
    pub fn detach(mut self) -> LockInfo {
        let lock = self.lock.take().expect(PRESENT);
        self.shared.entered(|| lock.detach()) // invariant 4
    }

    /// Keeps this lock alive on the manager's runtime, extending it to `ttl` with the default
    /// [`HoldOptions`], for as long as the returned [`Guard`] lives. Does not wait: works
    /// anywhere. See [`crate::Lock::keep_alive`].
    pub fn keep_alive(self, ttl: Duration) -> Guard {
        self.keep_alive_with(ttl, HoldOptions::new())
    }

    /// [`keep_alive`](Self::keep_alive) with other [`HoldOptions`]. Options that cannot work make
    /// the guard report [`LossReason::Invalid`] at once.
    pub fn keep_alive_with(mut self, ttl: Duration, options: HoldOptions) -> Guard {
        let lock = self.lock.take().expect(PRESENT);
        let guard = self.shared.entered(|| lock.keep_alive_with(ttl, options)); // invariant 4
        Guard::held(guard, &self.shared)
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            self.shared.release_dropped(async move {
                lock.release().await;
            });
        }
    }
}

/// What a [`Request`] won, blocking: a lock, or a lock kept alive from the start (a campaign's
/// leadership); see [`crate::Acquired`].
#[derive(Debug)]
#[non_exhaustive]
pub enum Acquired {
    /// A lock, a reader's or writer's lock, or a semaphore's permit.
    Lock(Lock),
    /// A lock kept alive in the background: an election's leadership.
    KeptAlive(Guard),
}

/// A lock kept alive in the background, for synchronous code: the async [`crate::Guard`], whose
/// keeper runs on the manager's runtime between calls. Dereferences to its [`LockInfo`].
///
/// Check [`is_lost`](LockInfo::is_lost) between steps, wait for the loss from a thread of its
/// own with [`wait_lost`](Self::wait_lost), or hand [`lost_token`](Self::lost_token) to what
/// must stop. A guard dropped unreleased stops its keeper and releases the lock before `drop`
/// returns (invariant 3); dropped inside a Tokio runtime, in the background instead.
#[derive(Debug)]
#[must_use = "a guard releases its lock as soon as it is dropped: bind it (`let guard = ...`) for as long as the work runs"]
pub struct Guard {
    /// `None` only once [`release`](Self::release) has taken it.
    guard: Option<hold::Guard>,
    shared: Arc<Shared>,
}

impl Deref for Guard {
    type Target = LockInfo;

    /// What the lock knows about itself: its deadline moves forward with every extension, and it
    /// counts as lost a margin before it, or once the keeper gave it up.
    fn deref(&self) -> &LockInfo {
        self.inner()
    }
}

impl Guard {
    /// The blocking handle of `guard`, on the manager's runtime.
    fn held(guard: hold::Guard, shared: &Arc<Shared>) -> Self {
        Self {
            guard: Some(guard),
            shared: Arc::clone(shared),
        }
    }

    fn inner(&self) -> &hold::Guard {
        self.guard.as_ref().expect(PRESENT)
    }

    /// Why the lock was lost, or `None` while it is kept alive.
    pub fn loss_reason(&self) -> Option<LossReason> {
        self.inner().loss_reason()
    }

    /// How many extensions succeeded so far.
    pub fn extensions(&self) -> u32 {
        self.inner().extensions()
    }

    /// A token that fires when the lock is lost, and once the guard is released or dropped; see
    /// [`crate::Guard::lost_token`]. Each call returns a new child token.
    pub fn lost_token(&self) -> CancellationToken {
        self.inner().lost_token()
    }

    /// Blocks this thread until the lock is lost or `timeout` has passed; returns whether it is
    /// lost. At once if it already is. For a watchdog thread next to the work.
    ///
    /// The wait itself runs on the manager's runtime, so this never panics, even inside an async
    /// runtime; but it blocks whatever thread calls it, which async code must not do: there,
    /// await `lost_token().cancelled()` instead.
    ///
    /// # Cancel safety
    /// Waiting only: it changes nothing on the servers.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        if self.is_lost() {
            return true;
        }
        let token = self.lost_token();
        let (sender, receiver) = mpsc::sync_channel(1);
        self.shared.runtime().spawn(async move {
            let fired = tokio::time::timeout(timeout, token.cancelled())
                .await
                .is_ok();
            // Fails only if the waiting thread is gone (it unwound): nobody to tell then.
            let _ = sender.send(fired);
        });
        // An error means the task was dropped unfinished: the runtime is shutting down, which
        // it does only once no handle is left, so not while `self` is borrowed.
        let fired = receiver.recv().unwrap_or(false);
        // Time alone makes a lock lost (hold invariant 7), also a moment before the keeper says so.
        fired || self.is_lost()
    }

    /// The lock's fencing token, issued on the first call; see [`crate::Guard::fence`].
    ///
    /// # Errors
    /// As [`crate::Guard::fence`]; [`Error::InsideRuntime`] inside a runtime (nothing is sent).
    pub fn fence(&mut self) -> Result<u64, Error> {
        let guard = self.guard.as_mut().expect(PRESENT);
        self.shared.block_on("Guard::fence", guard.fence())?
    }

    /// Stops the keeper, then releases the lock on every node; see [`crate::Guard::release`].
    ///
    /// # Errors
    /// [`Error::HoldLost`] with the reason if the lock had been lost before this call (the
    /// release is sent all the same). [`Error::InsideRuntime`] inside a runtime; the lock is
    /// then released in the background, as if dropped there.
    ///
    /// # Cancel safety
    /// Nothing to cancel: the call returns once every node answered or timed out; a node that
    /// did not answer may keep the key until it expires.
    pub fn release(mut self) -> Result<Released, Error> {
        // Checked before the guard is taken: refused, the handle's drop releases it.
        let runtime = self.shared.waiting("Guard::release")?;
        let guard = self.guard.take().expect(PRESENT);
        runtime.block_on(guard.release())
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(guard) = self.guard.take() {
            self.shared.release_dropped(async move {
                // A lost lock is released all the same; whoever dropped the guard cannot be told.
                if let Err(e) = guard.release().await {
                    tracing::debug!(error = %e, "dropped guard's lock had been lost");
                }
            });
        }
    }
}
