//! One file because a run is one sequence (steps below) sharing a config, recorder and stop token.
//!
//! The runner: starts the servers, proxies, clients and fault injector of one run, stops them
//! all by the deadline, and returns what happened as a [`History`].
//!
//! # A run, step by step
//! 1. One proxy per client-facing node (and, for a failover pair, one for the replication link)
//!    is bound on 127.0.0.1; clients only ever see proxy ports. The cluster layout has none:
//!    its clients get one `redis+cluster://` URL per Redis Cluster, with the servers' own
//!    addresses, once the servers are up, and the fault kinds that need a proxy are dropped
//!    from its plan (`Strategy::supports`).
//! 2. A dedicated thread starts the servers (AOF, `appendfsync always`) and keeps them: the
//!    launcher ties a server's life to the thread that started it, and every blocking operation
//!    on processes stays off the async runtime. The same thread later injects the faults.
//! 3. For strategies with the restart quarantine, the run waits until fresh nodes may vote.
//! 4. Every client gets its own lock manager (or connection), as a separate process would, and
//!    connects. Then the clock starts (time 0 of the history), the fault plan is handed to the
//!    injector, and the clients loop until the deadline: pick a resource, acquire it (or, in
//!    the semaphore workload, one of its permits), work a little, check validity, maybe take an
//!    injected pause, write to the protected resource, leave, release. A client told to crash
//!    leaves right after its work instead, abandons its lock unreleased, and goes on as a new
//!    process would, with new acquisitions. A client told to hand off leaves right after its
//!    work too, and hands its lock to another process: a manager of its own from the
//!    strategy's settings without a lock-delay, which extends the lock by value for a TTL and
//!    walks away; nobody releases it, and the client goes on as after a crash.
//! 5. At the deadline (or on Ctrl-C) clients are stopped, the injector is told to stop, and the
//!    servers are killed as their thread ends.
//!
//! # The protected resource
//! Each resource has an in-memory store that stands for what the lock protects. It accepts a
//! write whose fencing token is at least the largest it has seen and refuses an older one
//! ([`WriteOutcome::RejectedStale`]); writes without a token are accepted blindly
//! ([`WriteOutcome::Unfenced`]). In the semaphore workload it keeps the largest token *per
//! permit*: a permit's tokens grow per permit key, and the holders of the other permits are
//! legitimate at the same time, so one largest token per resource would refuse them.
//!
//! # What a section records about its end
//! A section records when its holder sent the release (just before sending it, so that nobody
//! can have won the lock back before that instant), or that it never did: a crashed client's
//! section is `abandoned`. A holder that slept past its validity releases late; with a
//! lock-delay its keys are still there, and its release frees them. Both are what the
//! checker's lock-delay rule reads. A handed-off section is `abandoned` too, and when the
//! extension won, `extended_by_value`, its deadline (`valid_until_us`) the extension's: the
//! keys were last set from that round, so that is when they must still stand the delay later.
//! A handoff whose extension failed is recorded as a crash, with the holder's deadline.
//!
//! # Invariants
//! 1. Every loop and wait is bounded: clients end at the deadline (each step races the stop
//!    token), joining them and the injector has a time limit, and the injector's own steps are
//!    bounded (see [`faults`]).
//! 2. Every process started is ours and is killed when the run ends, whichever way it ends:
//!    the server thread kills its servers when it is told to stop or when the runner is dropped
//!    (its channel hangs up), and the proxies stop with their shutdown token.
//! 3. Times in the history come from one monotonic clock in this one process (see
//!    [`history`](crate::history)).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::ChaosError;
use crate::faults::{self, Fault, Planned};
use crate::history::{FaultEvent, FaultKind, History, Section, WriteOutcome};
use crate::proxy::Proxy;
use crate::record::Recorder;
use crate::strategies::{
    Acquired, ClusterMarker, CountingClient, Design, Layout, LibraryClient, LockClient, Primitive,
    SetnxClient, Strategy,
};
use crate::topology::Topology;

/// How long a critical section's work takes, in ms, drawn per section. Long enough that a lock
/// lost right after it was granted is still relied on for a while (the failover race needs
/// that), short enough for many sections per run.
const WORK_MS: std::ops::RangeInclusive<u64> = 20..=400;
/// How long clients may take to notice the stop; their every step races it, so this is slack.
const CLIENTS_STOP_WITHIN: Duration = Duration::from_secs(5);
/// How long the server thread may take to stop: a restart in progress may need its full startup
/// timeout (10 s) before it notices.
const SERVERS_STOP_WITHIN: Duration = Duration::from_secs(30);
/// How often the progress counters are refreshed.
const PROGRESS_EVERY: Duration = Duration::from_millis(100);

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChaosConfig {
    /// The lock design under test (default [`Strategy::Redlock`]).
    pub strategy: Strategy,
    /// Independent nodes for the multi-node strategies (default 5); the single-node strategies
    /// use one (plus a replica for the failover pair).
    pub nodes: usize,
    /// Lock clients (default 8).
    pub clients: u32,
    /// Resources the clients compete for (default 2).
    pub resources: usize,
    /// How long the workload runs, warm-up not included (default 60 s).
    pub duration: Duration,
    /// The enabled fault kinds (default [`Fault::DEFAULT`]).
    pub faults: Vec<Fault>,
    /// Drives the fault plan and every client's choices (default 0).
    pub seed: u64,
    /// `Some(k)`: the semaphore workload, every client taking one of `k` permits of a
    /// resource; `None` (default): the lock workload.
    pub permits: Option<u32>,
    /// The library strategies' lock-delay (default zero: none). Their `max_ttl`, and so the
    /// restart quarantine and the warm-up, grow by as much.
    pub lock_delay: Duration,
    /// What the library's clients take: a lock (or permit), a read-write lock as reader or
    /// writer, or an election's leadership (default: a lock).
    pub primitive: Primitive,
}

/// The most permits a run may have: far beyond the clients a run may have.
pub const MAX_PERMITS: u32 = 64;
/// The longest lock-delay a run may have: a run sees a few crashes per ten seconds.
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(10);

impl Default for ChaosConfig {
    fn default() -> Self {
        Self {
            strategy: Strategy::Redlock,
            nodes: 5,
            clients: 8,
            resources: 2,
            duration: Duration::from_secs(60),
            faults: Fault::DEFAULT.to_vec(),
            seed: 0,
            permits: None,
            lock_delay: Duration::ZERO,
            primitive: Primitive::Lock,
        }
    }
}

impl ChaosConfig {
    /// Checks the limits: 1–15 nodes, 1–64 clients, 1–64 resources, a duration of 1 s to 24 h,
    /// 1–[`MAX_PERMITS`] permits, a lock-delay of at most [`MAX_LOCK_DELAY`]; and that the
    /// strategy takes them: `semaphore-counting` needs permits, `setnx-getset` has none, and only
    /// the library's strategies have a lock-delay.
    ///
    /// # Errors
    /// [`ChaosError::Config`] naming the setting.
    pub fn validate(&self) -> Result<(), ChaosError> {
        let bad = |what: &str| Err(ChaosError::Config(what.to_owned()));
        if !(1..=15).contains(&self.nodes) {
            return bad("nodes must be between 1 and 15");
        }
        if !(1..=64).contains(&self.clients) {
            return bad("clients must be between 1 and 64");
        }
        if !(1..=64).contains(&self.resources) {
            return bad("resources must be between 1 and 64");
        }
        if self.duration < Duration::from_secs(1) || self.duration > Duration::from_secs(86_400) {
            return bad("the duration must be between 1s and 24h");
        }
        if self
            .permits
            .is_some_and(|k| !(1..=MAX_PERMITS).contains(&k))
        {
            return bad("permits must be between 1 and 64");
        }
        match (self.strategy.semaphores_only(), self.permits) {
            (Some(true), None) => {
                return bad(&format!(
                    "{} is a semaphore: give it permits (--permits K)",
                    self.strategy
                ));
            }
            (Some(false), Some(_)) => {
                return bad(&format!(
                    "{} has no semaphore: leave permits out",
                    self.strategy
                ));
            }
            _ => {}
        }
        if self.lock_delay > MAX_LOCK_DELAY {
            return bad("the lock-delay must be at most 10s");
        }
        if self.primitive != Primitive::Lock {
            if !self.strategy.is_library() {
                return bad(&format!(
                    "{} has no read-write lock or election: only this library's strategies do",
                    self.strategy
                ));
            }
            if self.permits.is_some() {
                return bad("permits are for the lock workload, not read-write or election");
            }
        }
        if !self.lock_delay.is_zero() && !self.strategy.is_library() {
            return bad(&format!(
                "{} has no lock-delay: only this library's strategies do",
                self.strategy
            ));
        }
        Ok(())
    }
}

/// Where a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Starting servers and proxies.
    Starting,
    /// Waiting for fresh nodes to leave their restart quarantine.
    WarmingUp,
    /// Clients are running and faults are injected.
    Running,
    /// Stopping clients and servers.
    Stopping,
}

/// Live counters of a run, for a progress display; refreshed every 100 ms.
#[derive(Debug, Default)]
pub struct Progress {
    phase: AtomicU8,
    elapsed_ms: AtomicU64,
    sections: AtomicU64,
    faults: AtomicU64,
}

/// A reading of [`Progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    /// Where the run is.
    pub phase: Phase,
    /// Time since the workload started.
    pub elapsed: Duration,
    /// Critical sections recorded so far.
    pub sections: u64,
    /// Fault events recorded so far.
    pub faults: u64,
}

impl Progress {
    /// The counters now.
    #[must_use]
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            phase: match self.phase.load(Ordering::Relaxed) {
                0 => Phase::Starting,
                1 => Phase::WarmingUp,
                2 => Phase::Running,
                _ => Phase::Stopping,
            },
            elapsed: Duration::from_millis(self.elapsed_ms.load(Ordering::Relaxed)),
            sections: self.sections.load(Ordering::Relaxed),
            faults: self.faults.load(Ordering::Relaxed),
        }
    }

    fn set_phase(&self, phase: Phase) {
        let n = match phase {
            Phase::Starting => 0,
            Phase::WarmingUp => 1,
            Phase::Running => 2,
            Phase::Stopping => 3,
        };
        self.phase.store(n, Ordering::Relaxed);
    }

    fn update(&self, record: &Recorder) {
        let elapsed = record.origin().elapsed().as_millis();
        self.elapsed_ms.store(
            u64::try_from(elapsed).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        self.sections
            .store(count(record.sections_so_far()), Ordering::Relaxed);
        self.faults
            .store(count(record.faults_so_far()), Ordering::Relaxed);
    }
}

/// Runs `config` to its end and returns the history; Ctrl-C stops it early.
///
/// # Errors
/// [`ChaosError::Interrupted`] after Ctrl-C, else see [`run_until`].
///
/// # Cancel safety
/// Dropping the future stops the run: the server thread sees its channel hang up and kills every
/// server, and the proxies stop. Client tasks end at their next step.
pub async fn run(config: &ChaosConfig) -> Result<History, ChaosError> {
    let stop = CancellationToken::new();
    let on_ctrl_c = {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.cancel();
            }
        })
    };
    let result = run_until(config, &stop, &Progress::default()).await;
    on_ctrl_c.abort();
    result
}

/// Runs `config` until its end or until `stop` is cancelled, updating `progress` on the way.
///
/// # Errors
/// [`ChaosError::Config`] for a configuration that cannot work, [`ChaosError::Launch`] or
/// [`ChaosError::Replication`] if the servers cannot be started, [`ChaosError::Io`] if a port or
/// thread cannot be had, [`ChaosError::Interrupted`] if `stop` was cancelled before the end.
/// Violations are not errors: check the history.
///
/// # Cancel safety
/// As [`run`].
pub async fn run_until(
    config: &ChaosConfig,
    stop: &CancellationToken,
    progress: &Progress,
) -> Result<History, ChaosError> {
    config.validate()?;
    progress.set_phase(Phase::Starting);
    let layout = config.strategy.layout(config.nodes);
    // Invariant 2: every proxy task stops when this guard goes, whichever way we leave.
    let proxies_stop = CancellationToken::new();
    let _proxies_guard = proxies_stop.clone().drop_guard();
    let (proxy_count, replicated) = Topology::proxies_needed(layout);
    let mut proxies = Vec::with_capacity(proxy_count);
    for _ in 0..proxy_count {
        proxies.push(start_proxy(&proxies_stop).await?);
    }
    // Partitions need a port per client group on every proxy (see `faults`).
    let groups = if config.faults.contains(&Fault::Partition)
        && layout.supports(Fault::Partition)
        && !replicated
    {
        proxy_count.min(usize::try_from(config.clients).unwrap_or(usize::MAX))
    } else {
        0
    };
    let mut group_ports = Vec::with_capacity(proxy_count);
    for proxy in &proxies {
        let mut ports = Vec::with_capacity(groups);
        for _ in 0..groups {
            ports.push(
                proxy
                    .listen_for_group()
                    .await
                    .map_err(|source| ChaosError::Io {
                        action: "bind a proxy port on 127.0.0.1",
                        source,
                    })?,
            );
        }
        group_ports.push(ports);
    }
    let replication = if replicated {
        Some(start_proxy(&proxies_stop).await?)
    } else {
        None
    };

    let (mut servers, ready) = Servers::spawn(
        layout,
        config.strategy.cluster_marker(),
        proxies,
        replication,
    )?;
    let Started {
        nodes: node_count,
        slots,
        urls,
    } = tokio::select! {
        ready = ready => ready.unwrap_or_else(|_| Err(ChaosError::Io {
            action: "start the servers",
            source: std::io::Error::other("the server thread ended early"),
        }))?,
        () = stop.cancelled() => return servers.stopped_early().await,
    };
    progress.set_phase(Phase::WarmingUp);
    tokio::select! {
        () = tokio::time::sleep(config.strategy.warm_up(config.lock_delay)) => {}
        () = stop.cancelled() => return servers.stopped_early().await,
    }
    let urls = ClientUrls {
        shared: urls,
        groups: group_ports,
    };
    let clients = tokio::select! {
        clients = Clients::new(config, &urls) => clients?,
        () = stop.cancelled() => return servers.stopped_early().await,
    };

    let record = Arc::new(Recorder::new(Instant::now(), node_count, config.clients));
    // Only the kinds that apply to the strategy (the cluster layout has no proxies, and only
    // the library's clients hand a lock off).
    let faults: Vec<Fault> = config
        .faults
        .iter()
        .copied()
        .filter(|f| config.strategy.supports(*f))
        .collect();
    // The seed itself, so that `faults::plan` with the same arguments shows a run's plan.
    let plan = faults::plan(&faults, slots, config.clients, config.duration, config.seed);
    servers.go(plan, Arc::clone(&record));
    let clients_stop = stop.child_token();
    let workload = Workload {
        record: Arc::clone(&record),
        store: Arc::new(ProtectedStore::default()),
        resources: (0..config.resources)
            .map(|i| format!("chaos:{i}"))
            .collect(),
        stop: clients_stop.clone(),
    };
    let tasks = clients.spawn(config.seed, &workload);
    progress.set_phase(Phase::Running);

    let end = tokio::time::Instant::from_std(record.origin() + config.duration);
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    // Invariant 1: ends at `end` at the latest.
    let interrupted = loop {
        tokio::select! {
            _ = tick.tick() => progress.update(&record),
            () = tokio::time::sleep_until(end) => break false,
            () = stop.cancelled() => break true,
        }
    };
    progress.set_phase(Phase::Stopping);
    clients_stop.cancel();
    join_within(tasks, CLIENTS_STOP_WITHIN).await;
    let clients_done_us = record.now_us();
    servers.stop().await;
    progress.update(&record);
    if interrupted {
        return Err(ChaosError::Interrupted);
    }
    let mut history = record.take_history(
        config.strategy.name().to_owned(),
        config.seed,
        config.clients,
        clients_done_us,
    );
    history.permits = config.permits;
    history.lock_delay_us = u64::try_from(config.lock_delay.as_micros()).unwrap_or(u64::MAX);
    Ok(history)
}

async fn start_proxy(shutdown: &CancellationToken) -> Result<Proxy, ChaosError> {
    Proxy::start(0, shutdown.clone())
        .await
        .map_err(|source| ChaosError::Io {
            action: "bind a proxy port on 127.0.0.1",
            source,
        })
}

/// Waits for `tasks` to end, at most `limit` in all; aborts those still running then.
async fn join_within(tasks: Vec<JoinHandle<()>>, limit: Duration) {
    let give_up = tokio::time::Instant::now() + limit;
    for task in tasks {
        let abort = task.abort_handle();
        if tokio::time::timeout_at(give_up, task).await.is_err() {
            tracing::warn!("a client did not stop in time; aborted");
            abort.abort();
        }
    }
}

/// A stream of seeds derived from one (SplitMix64): independent choices per client and for the
/// fault plan, all reproducible from `--seed`.
fn derive(seed: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_add(stream.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What the server thread is told.
enum Command {
    /// Start injecting `plan`, recording into the record.
    Go(Vec<Planned>, Arc<Recorder>),
    /// Stop injecting (or do not start) and kill the servers.
    Stop,
}

/// The thread that owns the servers (see the module docs, step 2).
struct Servers {
    commands: mpsc::Sender<Command>,
    done: Option<oneshot::Receiver<()>>,
}

/// What the servers of a run are, once they answer.
struct Started {
    /// How many servers.
    nodes: usize,
    /// How many slots the faults are planned over.
    slots: usize,
    /// The URL of each slot, for the clients.
    urls: Vec<String>,
}

/// Tells, once, what servers answer, or why they could not be started.
type Ready = oneshot::Receiver<Result<Started, ChaosError>>;

impl Servers {
    fn spawn(
        layout: Layout,
        marker: ClusterMarker,
        proxies: Vec<Proxy>,
        replication: Option<Proxy>,
    ) -> Result<(Self, Ready), ChaosError> {
        let (commands, inbox) = mpsc::channel();
        let (ready_tx, ready) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        thread::Builder::new()
            .name("chaos-servers".to_owned())
            .spawn(move || {
                match Topology::start(layout, marker, proxies, replication) {
                    Ok(mut topology) => {
                        let _ = ready_tx.send(Ok(Started {
                            nodes: topology.node_count(),
                            slots: topology.slots(),
                            urls: topology.urls(),
                        }));
                        if let Ok(Command::Go(plan, record)) = inbox.recv() {
                            faults::injector::inject(&plan, &mut topology, &record, &inbox);
                        }
                        drop(topology); // kills every server (invariant 2)
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                    }
                }
                let _ = done_tx.send(());
            })
            .map_err(|source| ChaosError::Io {
                action: "start the server thread",
                source,
            })?;
        let servers = Self {
            commands,
            done: Some(done),
        };
        Ok((servers, ready))
    }

    fn go(&self, plan: Vec<Planned>, record: Arc<Recorder>) {
        let _ = self.commands.send(Command::Go(plan, record));
    }

    /// Tells the thread to stop and waits (bounded) until its servers are gone.
    async fn stop(&mut self) {
        let _ = self.commands.send(Command::Stop);
        if let Some(done) = self.done.take()
            && tokio::time::timeout(SERVERS_STOP_WITHIN, done)
                .await
                .is_err()
        {
            tracing::warn!("the servers did not stop in time; they die with their thread");
        }
    }

    async fn stopped_early(mut self) -> Result<History, ChaosError> {
        self.stop().await;
        Err(ChaosError::Interrupted)
    }
}

/// Every client of a run, of one design.
enum Clients {
    Library(Vec<LibraryClient>),
    Setnx(Vec<SetnxClient>),
    Counting(Vec<CountingClient>),
}

impl Clients {
    /// One client per `config.clients`, each with its own manager or connection, connected;
    /// client `id` reaches the nodes at `urls.of(id)`.
    async fn new(config: &ChaosConfig, urls: &ClientUrls) -> Result<Self, ChaosError> {
        let seed = |id: u32| derive(config.seed, 1_000 + u64::from(id));
        // `validate` refuses the counting design without permits.
        let permits = config.permits.unwrap_or(1);
        // One design per strategy, so only one of these fills up.
        let (mut library, mut setnx, mut counting) = (Vec::new(), Vec::new(), Vec::new());
        for id in 0..config.clients {
            let urls = urls.of(id);
            match config.strategy.design(&urls, config.lock_delay) {
                Design::Library(builder) => {
                    let client =
                        LibraryClient::new(builder.clone().build()?, seed(id), config.permits)
                            .taking(config.primitive, id)
                            .rejoining(*builder);
                    client.connect().await;
                    library.push(client);
                }
                Design::OldRecipe => {
                    let url = urls.first().map_or("", String::as_str);
                    setnx.push(SetnxClient::new(url, id, seed(id))?);
                }
                Design::Counting => {
                    let mut client = CountingClient::new(&urls, permits, id, seed(id))?;
                    client.connect().await;
                    counting.push(client);
                }
            }
        }
        Ok(if !setnx.is_empty() {
            Clients::Setnx(setnx)
        } else if !counting.is_empty() {
            Clients::Counting(counting)
        } else {
            Clients::Library(library)
        })
    }

    fn spawn(self, seed: u64, workload: &Workload) -> Vec<JoinHandle<()>> {
        match self {
            Clients::Library(clients) => spawn_all(clients, seed, workload),
            Clients::Setnx(clients) => spawn_all(clients, seed, workload),
            Clients::Counting(clients) => spawn_all(clients, seed, workload),
        }
    }
}

/// Which URLs each client is given: every client the same, one per slot, or, when partitions
/// are enabled, client `c` the ports of group `c mod groups` on every proxy (see
/// [`faults`](crate::faults)).
#[derive(Debug)]
struct ClientUrls {
    /// One URL per slot, for every client.
    shared: Vec<String>,
    /// Per slot, the port of each client group; empty without partitions.
    groups: Vec<Vec<u16>>,
}

impl ClientUrls {
    fn of(&self, client: u32) -> Vec<String> {
        let Some(count) = self.groups.first().map(Vec::len).filter(|&n| n > 0) else {
            return self.shared.clone();
        };
        let group = usize::try_from(client).unwrap_or(0) % count;
        self.groups
            .iter()
            .map(|ports| format!("redis://127.0.0.1:{}", ports[group]))
            .collect()
    }
}

fn spawn_all<C: LockClient>(
    clients: Vec<C>,
    seed: u64,
    workload: &Workload,
) -> Vec<JoinHandle<()>> {
    (0u32..)
        .zip(clients)
        .map(|(id, client)| {
            let rng = StdRng::seed_from_u64(derive(seed, 2_000 + u64::from(id)));
            tokio::spawn(client_loop(id, client, rng, workload.clone()))
        })
        .collect()
}

/// What every client shares.
#[derive(Clone)]
struct Workload {
    record: Arc<Recorder>,
    store: Arc<ProtectedStore>,
    resources: Arc<[String]>,
    stop: CancellationToken,
}

/// One client, until the stop (invariant 1).
///
/// Acquisitions and releases are not raced against the stop: each is bounded by itself (a short
/// retry, node timeouts), and letting them finish leaves no lock half taken or half released
/// behind. Only the critical section's sleeps end early.
async fn client_loop<C: LockClient>(id: u32, mut client: C, mut rng: StdRng, w: Workload) {
    let mut faults_seen = w.record.faults_so_far();
    while !w.stop.is_cancelled() {
        // A late joiner: after a fault, the client starts over as a new process would, so the
        // run checks clients that never saw the nodes before the fault (a data loss one of
        // them could not see must still keep the node out of its vote).
        let faults = w.record.faults_so_far();
        if faults > faults_seen {
            faults_seen = faults;
            if client.rejoin() {
                w.record.joined_late();
            }
        }
        let resource = &w.resources[rng.random_range(0..w.resources.len())];
        let work = Duration::from_millis(rng.random_range(WORK_MS));
        w.record.wants(id, Some(resource));
        // A fault while waiting ends the wait (the acquisition's future is dropped, which rolls
        // its round back), so that the client starts over as a late joiner at once, while the
        // lock it waited for may still be held from before the fault.
        let acquired = tokio::select! {
            acquired = client.acquire(resource) => acquired,
            () = w.record.next_fault() => None,
        };
        w.record.wants(id, None);
        let Some(acquired) = acquired else {
            // Every design retries within `acquire`; this only keeps a design that fails at
            // once from spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let (mut section, leaving) = critical_section(id, resource, &acquired, work, &w).await;
        match leaving {
            Leaving::Releasing => {}
            Leaving::Crashed => {
                client.abandon(acquired.held);
                w.record.section(section);
                continue;
            }
            Leaving::HandingOff => {
                hand_off(id, &mut client, acquired, section, &w).await;
                continue;
            }
        }
        // Before the release is sent: nobody can win the lock back before this instant.
        section.released_us = Some(w.record.now_us());
        w.record.section(section);
        client.release(acquired.held).await;
    }
}

/// How a critical section left its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaving {
    /// To be released (maybe late, after a pause).
    Releasing,
    /// Abandoned by a crash.
    Crashed,
    /// To be handed to another process, which extends it by value, then abandoned.
    HandingOff,
}

/// The section's holder hands its lock to another process (an injected fault, the module
/// docs): that process extends it by value from a manager without a lock-delay of its own, and
/// nobody releases it. Records the fault and the section, whose deadline becomes the
/// extension's if it won.
async fn hand_off<C: LockClient>(
    id: u32,
    client: &mut C,
    acquired: Acquired<C::Held>,
    mut section: Section,
    w: &Workload,
) {
    let name = lock_name(&section.resource, section.permit);
    let holders_left = acquired
        .valid_until
        .saturating_duration_since(Instant::now());
    let outcome = client.hand_off(acquired.held).await;
    let detail = match &outcome {
        Ok(deadline) => {
            section.valid_until_us = w.record.us(*deadline);
            section.extended_by_value = true;
            format!(
                "client {id} handed {name} to another process ({} ms of validity left), which \
                 extended it by value for {} ms from a manager without lock-delay: valid until \
                 {} ms; abandoned, never released",
                holders_left.as_millis(),
                crate::strategies::TTL.as_millis(),
                section.valid_until_us / 1000
            )
        }
        Err(why) => format!(
            "client {id} handed {name} to another process ({} ms of validity left), which did \
             not extend it ({why}): abandoned with the holder's deadline, never released",
            holders_left.as_millis()
        ),
    };
    w.record.fault(FaultEvent {
        at_us: w.record.now_us(),
        node: None,
        client: Some(id),
        kind: FaultKind::ClientHandoff {
            extended: outcome.is_ok(),
        },
        detail,
    });
    w.record.section(section);
}

/// Enter, work, maybe crash or hand off (injected faults: leave at once, the lock abandoned, or
/// handed to another process), check validity, maybe pause (an injected fault), write, leave.
async fn critical_section<H>(
    id: u32,
    resource: &str,
    lock: &Acquired<H>,
    work: Duration,
    w: &Workload,
) -> (Section, Leaving) {
    let entered = Instant::now();
    let enter_us = w.record.us(entered);
    w.record.enter(id, resource, enter_us, entered + work);
    let mut write = WriteOutcome::NotAttempted;
    let mut stopped = sleep_unless(work, &w.stop).await;
    let crashed = !stopped && w.record.take_crash(id, enter_us);
    if crashed {
        let left = lock.valid_until.saturating_duration_since(Instant::now());
        w.record.fault(FaultEvent {
            at_us: w.record.now_us(),
            node: None,
            client: Some(id),
            kind: FaultKind::ClientCrash,
            detail: format!(
                "client {id} crashed holding {}, {} ms of validity left: abandoned, never released",
                lock_name(resource, lock.permit),
                left.as_millis()
            ),
        });
    }
    // A handoff leaves as a crash does; the other process extends the lock once it has left.
    let handing_off = !stopped && !crashed && w.record.take_handoff(id);
    if !stopped && !crashed && !handing_off && Instant::now() < lock.valid_until {
        // The lock was valid when checked; a pause taken now lands between check and write,
        // as a GC pause would.
        if let Some(extra_ms) = w.record.take_pause(id) {
            let pause = lock.valid_until.saturating_duration_since(Instant::now()) + ms(extra_ms);
            w.record.fault(FaultEvent {
                at_us: w.record.now_us(),
                node: None,
                client: Some(id),
                kind: FaultKind::ClientPause {
                    ms: u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                },
                detail: format!(
                    "client {id} paused after its validity check, {extra_ms} ms past its deadline"
                ),
            });
            stopped = sleep_unless(pause, &w.stop).await;
        }
        if !stopped {
            write = w
                .store
                .write(resource, lock.permit, lock.fence, lock.shared);
        }
    }
    let exit_us = w.record.now_us();
    w.record.leave(id);
    let leaving = if crashed {
        Leaving::Crashed
    } else if handing_off {
        Leaving::HandingOff
    } else {
        Leaving::Releasing
    };
    let section = Section {
        resource: resource.to_owned(),
        client: id,
        value: lock.value.clone(),
        fence: lock.fence,
        enter_us,
        exit_us,
        valid_until_us: w.record.us(lock.valid_until),
        write,
        permit: lock.permit,
        released_us: None,
        abandoned: crashed || handing_off,
        extended_by_value: false,
        shared: lock.shared,
    };
    (section, leaving)
}

/// A lock's name for fault details: the resource, or the permit's key.
fn lock_name(resource: &str, permit: Option<u32>) -> String {
    match permit {
        Some(i) => format!("{resource}:permit:{i}"),
        None => resource.to_owned(),
    }
}

/// Sleeps for `duration`; `true` if stopped first.
async fn sleep_unless(duration: Duration, stop: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(duration) => false,
        () = stop.cancelled() => true,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The protected resources: per resource (and, in the semaphore workload, per permit), the
/// largest fencing token a writer used, and the largest a reader used.
#[derive(Debug, Default)]
struct ProtectedStore {
    largest: Mutex<HashMap<(String, Option<u32>), Largest>>,
}

/// The largest tokens one protected resource has seen: a writer's and a reader's.
#[derive(Debug, Default, Clone, Copy)]
struct Largest {
    wrote: u64,
    read: u64,
}

impl ProtectedStore {
    /// Uses `resource` as the holder of `permit` (if any) with `fence`, reading when `shared`
    /// (a read-write lock's reader), else writing. The rule of `docs/primitives.md`'s read-write locks: a
    /// read is accepted with a token at least every write token seen; a write with a token at
    /// least every write token and larger than every read token. (Without readers, that is "at
    /// least the largest seen".) Refused as stale otherwise; without a token, accepted blindly.
    fn write(
        &self,
        resource: &str,
        permit: Option<u32>,
        fence: Option<u64>,
        shared: bool,
    ) -> WriteOutcome {
        let Some(token) = fence else {
            return WriteOutcome::Unfenced;
        };
        let mut largest = self.largest.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = largest.entry((resource.to_owned(), permit)).or_default();
        let fresh = token >= seen.wrote && (shared || token > seen.read);
        if !fresh {
            return WriteOutcome::RejectedStale;
        }
        if shared {
            seen.read = seen.read.max(token);
        } else {
            seen.wrote = token;
        }
        WriteOutcome::Accepted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_follow_the_read_write_token_rule() {
        let store = ProtectedStore::default();
        assert_eq!(
            store.write("d", None, Some(5), false),
            WriteOutcome::Accepted
        );
        // Readers after the writer: at least its token.
        assert_eq!(
            store.write("d", None, Some(5), true),
            WriteOutcome::Accepted
        );
        assert_eq!(
            store.write("d", None, Some(6), true),
            WriteOutcome::Accepted
        );
        assert_eq!(
            store.write("d", None, Some(4), true),
            WriteOutcome::RejectedStale
        );
        // The old writer, after readers came: refused, also with its own token.
        assert_eq!(
            store.write("d", None, Some(5), false),
            WriteOutcome::RejectedStale
        );
        // The next writer goes above every reader.
        assert_eq!(
            store.write("d", None, Some(7), false),
            WriteOutcome::Accepted
        );
    }

    #[test]
    fn the_store_refuses_older_tokens_only() {
        let store = ProtectedStore::default();
        assert_eq!(
            store.write("a", None, Some(5), false),
            WriteOutcome::Accepted
        );
        assert_eq!(
            store.write("a", None, Some(5), false),
            WriteOutcome::Accepted,
            "equal is fine"
        );
        assert_eq!(
            store.write("a", None, Some(4), false),
            WriteOutcome::RejectedStale
        );
        assert_eq!(
            store.write("b", None, Some(1), false),
            WriteOutcome::Accepted,
            "per resource"
        );
        assert_eq!(store.write("a", None, None, false), WriteOutcome::Unfenced);
        assert_eq!(
            store.write("a", None, Some(9), false),
            WriteOutcome::Accepted
        );
    }

    #[test]
    fn the_store_keeps_the_largest_token_per_permit() {
        let store = ProtectedStore::default();
        assert_eq!(
            store.write("s", Some(0), Some(7), false),
            WriteOutcome::Accepted
        );
        // Permit 1's tokens are its own: 3 is not stale next to permit 0's 7.
        assert_eq!(
            store.write("s", Some(1), Some(3), false),
            WriteOutcome::Accepted
        );
        assert_eq!(
            store.write("s", Some(1), Some(2), false),
            WriteOutcome::RejectedStale
        );
        assert_eq!(
            store.write("s", Some(0), Some(6), false),
            WriteOutcome::RejectedStale
        );
        assert_eq!(
            store.write("s", Some(0), Some(8), false),
            WriteOutcome::Accepted
        );
    }

    #[test]
    fn derived_seeds_differ_per_stream_and_repeat() {
        assert_eq!(derive(7, 1), derive(7, 1));
        assert_ne!(derive(7, 1), derive(7, 2));
        assert_ne!(derive(7, 1), derive(8, 1));
    }

    #[test]
    fn configs_are_checked() {
        assert!(ChaosConfig::default().validate().is_ok());
        for bad in [
            ChaosConfig {
                nodes: 0,
                ..ChaosConfig::default()
            },
            ChaosConfig {
                clients: 0,
                ..ChaosConfig::default()
            },
            ChaosConfig {
                resources: 0,
                ..ChaosConfig::default()
            },
            ChaosConfig {
                duration: Duration::from_millis(500),
                ..ChaosConfig::default()
            },
            ChaosConfig {
                permits: Some(0),
                ..ChaosConfig::default()
            },
            ChaosConfig {
                permits: Some(MAX_PERMITS + 1),
                ..ChaosConfig::default()
            },
            ChaosConfig {
                strategy: Strategy::SemaphoreCounting,
                ..ChaosConfig::default()
            },
            ChaosConfig {
                strategy: Strategy::SetnxGetset,
                permits: Some(2),
                ..ChaosConfig::default()
            },
            ChaosConfig {
                strategy: Strategy::SemaphoreCounting,
                permits: Some(2),
                lock_delay: Duration::from_secs(1),
                ..ChaosConfig::default()
            },
            ChaosConfig {
                lock_delay: MAX_LOCK_DELAY + Duration::from_millis(1),
                ..ChaosConfig::default()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(ChaosError::Config(_))),
                "{bad:?}"
            );
        }
        for good in [
            ChaosConfig {
                permits: Some(2),
                lock_delay: Duration::from_secs(1),
                ..ChaosConfig::default()
            },
            ChaosConfig {
                strategy: Strategy::SemaphoreCounting,
                permits: Some(2),
                ..ChaosConfig::default()
            },
        ] {
            assert!(good.validate().is_ok(), "{good:?}");
        }
    }
}
