//! One file because every design sits behind one [`LockClient`] trait and one [`Strategy`] table.
//!
//! The lock designs under test, behind one small trait: [`LockClient`] acquires (giving a value,
//! maybe a fencing token, and the instant until which the holder believes itself valid) and
//! releases. The workload, the faults and the checker are the same for all of them; only the
//! design changes.
//!
//! | strategy | servers | what it is |
//! |---|---|---|
//! | `redlock` | `--nodes` independent masters | this library with its defaults: quarantine on, durable nodes trusted when they show their marker key (restart, flush and replace faults take their data although they run AOF), fencing on |
//! | `redlock-no-quarantine` | same | the same with `.quarantine(false)`: plain Redlock |
//! | `redlock-release-ignores-delay` | same | our defaults, but a release frees the lock whenever it comes (`replaced_rule_release_ignores_delay`, feature `replaced-rules`): the rule a late release defeated under `--lock-delay` |
//! | `redlock-hand-marker-vouches` | same | our defaults, but a marker written by hand vouches like a drawn one (`replaced_rule_hand_markers_vouch`, feature `replaced-rules`): the rule that `replace-marked` defeats |
//! | `single-instance` | 1 | this library on one node (quarantine and fencing on) |
//! | `single-with-failover` | 1 master + 1 replica | this library on one node that fails over to a replica whose replication lags 2.5 s, longer than the TTL; quarantine off, as any single-instance client |
//! | `setnx-getset` | 1 | the old recipe: `SETNX lock <expiry>`, `GET`/`GETSET` to take over an expired one, `DEL` to release; no fencing |
//! | `redlock-cluster` | 3 Redis Clusters, each 1 master + 1 replica | this library with its defaults, one `redis+cluster://` node per cluster: a promoted replica is quarantined (its marker names the old master), votes do not wait for replicas |
//! | `redlock-cluster-wait` | same | `.quarantine(false).wait_for_replicas(true)`: every vote waits (`WAIT`) for the shard's replica |
//! | `redlock-cluster-no-failover-rule` | same | `.quarantine(false).wait_for_replicas(false)`: neither rule, plain writes to whichever master serves the slot |
//! | `redlock-cluster-run-id-marker` | same | our defaults, but a master's marker names its `run_id` alone (`replaced_rule_marker_names_process_only`, feature `replaced-rules`): the rule that the failback defeated |
//! | `redlock-sentinel` | 1 primary + 1 replica behind 3 sentinels | this library with its defaults, one `redis+sentinel://` node: a vote waits (`WAIT`) for the replicas, and a promoted replica votes at once only if the client saw it online throughout (the library's `succession`) |
//! | `redlock-replicated` | 1 primary + 2 replicas behind one proxy that moves on failover (a managed endpoint) | this library with its defaults, one `redis+replicated://…?replicas=2` node: a vote waits for every replica online and two at least, and the server found behind the address after a failover is judged by its history (the library's `endpoint` and `succession`) |
//! | `redlock-replicated-trusting` | same | our defaults, but the node trusts whatever server answers behind the address (`replaced_rule_endpoint_trusts_its_address`, feature `replaced-rules`): no `WAIT`, every new server there taken to continue the history |
//! | `redlock-sentinel-trusting` | same | our defaults, but the node trusts whatever server the sentinels name, as a plain client of a replicated primary does (`replaced_rule_sentinel_trusts_its_primary`, feature `replaced-rules`): no `WAIT`, no judgement of a promoted replica |
//! | `semaphore-counting` | `--nodes` independent masters | a semaphore only (`--permits k`): a count per node (a sorted set of holders with expiry, granted while it has fewer than `k`), held on a majority of grants |
//!
//! Every lock has the same TTL, [`TTL`], which is also the library's `max_ttl` (the restart
//! quarantine), so a restarted node may vote again after 2 s. With a lock-delay (the library's
//! strategies only), `max_ttl` is the TTL plus the delay: the library refuses a key that would
//! outlive the quarantine.
//!
//! # Semaphores
//! With `--permits k` every client takes one of `k` permits of a resource instead of its lock:
//! the library's strategies call [`Redlock::acquire_permit_with`], where each permit is a lock
//! key of its own (`<resource>:permit:<i>`), so the lock's argument gives at most `k` holders.
//! `semaphore-counting` is the design that argument rules out, written as one would: the same
//! round as ours (every node at once, the library's node timeout, a held semaphore on a majority
//! of grants, the same drift allowance, a failed round rolled back), but each node grants while
//! its set holds fewer than `k` holders. Any two majorities share a node, but three majorities
//! need not share one, and a node with room grants whoever asks: with 5 nodes and 2 permits,
//! clients that reach `{0,1,2}`, `{2,3,4}` and `{0,1,3}` all hold at once. Its grants are not
//! fenced (a count has no order), so its sections write unfenced.
//!
//! Clients need not be partitioned for their majorities to differ. A node may refuse because it
//! is full of entries of rounds still in flight, other clients' attempts that fail and roll back
//! a moment later: the client it refused holds on three other nodes, and once the rollbacks land
//! the node has room for a third holder. Under contention alone (8 clients, 2 resources) runs
//! without any fault find it in most 10 s runs; the `partition` fault makes it certain. Its
//! clients connect before the run starts, as ours do, so that a first connection slower than the
//! node timeout does not cut one of them off a node by accident.
//!
//! `single-with-failover` turns the quarantine off on purpose: the promoted replica has a new
//! `run_id`, so with the quarantine on, our library would refuse its votes for `max_ttl` after
//! the failover, which is exactly long enough for every lock granted by the dead master to
//! expire. The strategy shows the race that a client trusting whatever master it is given runs
//! into.
//!
//! The `redlock-cluster*` strategies run on the cluster layout and its `failover` fault (a
//! majority of the clusters promote a replica that missed more than a TTL of writes) and
//! `failback` fault (the old masters, resynchronised from those replicas, lead again within a
//! TTL; see [`faults`](crate::faults)). Expected verdicts: `redlock-cluster` and
//! `redlock-cluster-wait` safe, `redlock-cluster-no-failover-rule` caught granting a lock twice
//! under `failover`, `redlock-cluster-run-id-marker` under `failback`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use redquorum::{Builder, Guard, Lock, Redlock, Retry};

use crate::fault::Fault;
use crate::named::named;

/// Every strategy's lock TTL, and the library's `max_ttl`: short, so that runs of a few seconds
/// see many expiries and restart quarantines.
pub const TTL: Duration = Duration::from_secs(2);

/// How long a client keeps trying for one resource before it picks one again.
const ACQUIRE_FOR: Duration = Duration::from_millis(400);
/// The longest delay between attempts; each delay is drawn from `[half, all]` of it.
const RETRY_DELAY: Duration = Duration::from_millis(40);
/// How long one Redis command of the `setnx-getset` recipe may take (the library's default node
/// timeout, for a fair comparison).
const COMMAND_TIMEOUT: Duration = redquorum::defaults::NODE_TIMEOUT;

/// A lock design under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// This library with its defaults: quarantine, durable-node trust on evidence, fencing.
    Redlock,
    /// This library with the restart quarantine off.
    RedlockNoQuarantine,
    /// This library's defaults, but a release frees the lock whenever it comes: the rule a late
    /// release defeats under a lock-delay.
    RedlockReleaseIgnoresDelay,
    /// This library's defaults, but a marker written by hand vouches: the rule a replacement
    /// marked by hand the same way defeats.
    RedlockHandMarkerVouches,
    /// This library on a single node.
    SingleInstance,
    /// This library on a single master that fails over to its asynchronous replica.
    SingleWithFailover,
    /// The old `SETNX` / `GETSET` recipe on a single node.
    SetnxGetset,
    /// This library with its defaults over three Redis Clusters (one master, one replica each).
    RedlockCluster,
    /// This library over three Redis Clusters, quarantine off, every vote waiting for the
    /// shard's replica (`WAIT`).
    RedlockClusterWait,
    /// This library over three Redis Clusters with neither failover rule: quarantine off, no
    /// `WAIT`.
    RedlockClusterNoFailoverRule,
    /// This library's defaults over three Redis Clusters, but a master's marker names its
    /// `run_id` alone: the rule a failback defeats.
    RedlockClusterRunIdMarker,
    /// A semaphore kept as a count per node, held on a majority of grants (the module docs).
    SemaphoreCounting,
    /// This library with its defaults over one primary with a replica behind three sentinels.
    RedlockSentinel,
    /// The same, but trusting whatever server the sentinels name: the replaced rule.
    RedlockSentinelTrusting,
    /// This library with its defaults over one primary with two replicas behind one address
    /// that moves on failover.
    RedlockReplicated,
    /// The same, but trusting whatever server answers behind the address: the replaced rule.
    RedlockReplicatedTrusting,
}

/// How a strategy's servers are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Independent masters, each behind its own proxy.
    Independent(usize),
    /// Node 0 starts as master, node 1 as its replica through a delayed replication proxy;
    /// clients reach the current master through one proxy.
    Failover,
    /// Independent Redis Clusters of one master and one replica each, one slot per cluster.
    /// Clients reach them directly, without proxies (cluster routing needs the real addresses),
    /// so the proxy faults do not apply (see [`Layout::supports`]).
    Clusters(usize),
    /// One primary with one replica behind three sentinels, one slot. Clients reach it by its
    /// `redis+sentinel://` URL, without proxies (the sentinels name the real addresses).
    Sentinel,
    /// One primary with two replicas behind one proxy, one slot: a managed service's primary
    /// endpoint, which the injector moves to the replica it promotes, as the service would.
    /// Clients reach it by a `redis+replicated://` URL naming the proxy.
    Endpoint,
}

/// How many Redis Clusters the `redlock-cluster*` strategies run on.
pub const CLUSTERS: usize = 3;

/// The kinds the cluster layout supports, in the order they are drawn from when none are named.
pub const CLUSTER_FAULTS: [Fault; 5] = [
    Fault::Failover,
    Fault::Failback,
    Fault::Pause,
    Fault::ClientPause,
    Fault::Flush,
];

/// The kinds the Sentinel layout supports, in the order they are drawn from when none are named.
pub const SENTINEL_FAULTS: [Fault; 5] = [
    Fault::Kill,
    Fault::Pause,
    Fault::Failover,
    Fault::ClientPause,
    Fault::Flush,
];

/// The kinds the endpoint layout supports, in the order they are drawn from when none are named.
pub const ENDPOINT_FAULTS: [Fault; 9] = [
    Fault::Kill,
    Fault::Restart,
    Fault::Failover,
    Fault::Pause,
    Fault::Drop,
    Fault::Delay,
    Fault::Blackhole,
    Fault::ClientPause,
    Fault::Flush,
];

impl Layout {
    /// Whether `fault` applies to this layout. The cluster layout has no proxies, so `delay`,
    /// `drop`, `blackhole`, `replace` and `partition` do not apply (nor does `partition` to a
    /// failover pair: one node has no minority to cut off); `kill`, `restart` and `restart-burst`
    /// do not either (a one-master cluster whose master is down serves nothing until it is back,
    /// which is an outage, not a test of the lock). `failover` and `failback` apply to it alone.
    pub(crate) fn supports(self, fault: Fault) -> bool {
        match self {
            // A client crash or handoff hits a client, whatever its servers.
            Layout::Clusters(_) => {
                CLUSTER_FAULTS.contains(&fault)
                    || matches!(fault, Fault::ClientCrash | Fault::ClientHandoff)
            }
            Layout::Sentinel => {
                SENTINEL_FAULTS.contains(&fault)
                    || matches!(fault, Fault::ClientCrash | Fault::ClientHandoff)
            }
            Layout::Endpoint => {
                ENDPOINT_FAULTS.contains(&fault)
                    || matches!(fault, Fault::ClientCrash | Fault::ClientHandoff)
            }
            Layout::Independent(_) => !matches!(fault, Fault::Failover | Fault::Failback),
            // One node: no minority to cut off.
            Layout::Failover => {
                !matches!(fault, Fault::Failover | Fault::Failback | Fault::Partition)
            }
        }
    }
}

impl Strategy {
    /// Every strategy, in the order the CLI lists them.
    pub const ALL: [Strategy; 16] = [
        Strategy::Redlock,
        Strategy::RedlockNoQuarantine,
        Strategy::RedlockReleaseIgnoresDelay,
        Strategy::RedlockHandMarkerVouches,
        Strategy::SingleInstance,
        Strategy::SingleWithFailover,
        Strategy::SetnxGetset,
        Strategy::RedlockCluster,
        Strategy::RedlockClusterWait,
        Strategy::RedlockClusterNoFailoverRule,
        Strategy::RedlockClusterRunIdMarker,
        Strategy::RedlockSentinel,
        Strategy::RedlockSentinelTrusting,
        Strategy::RedlockReplicated,
        Strategy::RedlockReplicatedTrusting,
        Strategy::SemaphoreCounting,
    ];

    /// The name used on the command line and in histories.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Redlock => "redlock",
            Strategy::RedlockNoQuarantine => "redlock-no-quarantine",
            Strategy::RedlockReleaseIgnoresDelay => "redlock-release-ignores-delay",
            Strategy::RedlockHandMarkerVouches => "redlock-hand-marker-vouches",
            Strategy::SingleInstance => "single-instance",
            Strategy::SingleWithFailover => "single-with-failover",
            Strategy::SetnxGetset => "setnx-getset",
            Strategy::RedlockCluster => "redlock-cluster",
            Strategy::RedlockClusterWait => "redlock-cluster-wait",
            Strategy::RedlockClusterNoFailoverRule => "redlock-cluster-no-failover-rule",
            Strategy::RedlockClusterRunIdMarker => "redlock-cluster-run-id-marker",
            Strategy::SemaphoreCounting => "semaphore-counting",
            Strategy::RedlockSentinel => "redlock-sentinel",
            Strategy::RedlockSentinelTrusting => "redlock-sentinel-trusting",
            Strategy::RedlockReplicated => "redlock-replicated",
            Strategy::RedlockReplicatedTrusting => "redlock-replicated-trusting",
        }
    }

    /// One line on what the strategy is.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Strategy::Redlock => {
                "this library with its defaults: quarantine (trusting durable nodes that show their marker), fencing"
            }
            Strategy::RedlockNoQuarantine => "this library with .quarantine(false): plain Redlock",
            Strategy::RedlockReleaseIgnoresDelay => {
                "this library's defaults, but a release frees the lock even after its validity under a lock-delay (the replaced rule)"
            }
            Strategy::RedlockHandMarkerVouches => {
                "this library's defaults, but a marker written by hand vouches like a drawn one (the replaced rule)"
            }
            Strategy::SingleInstance => "this library on one node",
            Strategy::SingleWithFailover => {
                "one master failing over to a replica that lags 2.5 s, more than a TTL; quarantine off"
            }
            Strategy::SetnxGetset => "the old SETNX/GETSET recipe with DEL release, no fencing",
            Strategy::RedlockCluster => {
                "this library with its defaults over 3 Redis Clusters (1 master + 1 replica each): a promoted replica is quarantined"
            }
            Strategy::RedlockClusterWait => {
                "this library over 3 Redis Clusters, quarantine off, every vote waits for the shard's replica (WAIT)"
            }
            Strategy::RedlockClusterNoFailoverRule => {
                "this library over 3 Redis Clusters, quarantine off and no WAIT: no failover rule"
            }
            Strategy::RedlockClusterRunIdMarker => {
                "this library's defaults over 3 Redis Clusters, but a master's marker names its run_id alone (the replaced rule)"
            }
            Strategy::SemaphoreCounting => {
                "a semaphore as a count per node (a set of holders with expiry), held on a majority of grants"
            }
            Strategy::RedlockSentinel => {
                "this library with its defaults over 1 primary + 1 replica behind 3 sentinels: votes wait for the replica, a promoted replica is judged"
            }
            Strategy::RedlockSentinelTrusting => {
                "this library over 1 primary + 1 replica behind 3 sentinels, trusting whatever server the sentinels name (the replaced rule)"
            }
            Strategy::RedlockReplicated => {
                "this library with its defaults over 1 primary + 2 replicas behind one address that moves on failover: votes wait for both replicas, the new server behind the address is judged"
            }
            Strategy::RedlockReplicatedTrusting => {
                "this library over 1 primary + 2 replicas behind one address that moves on failover, trusting whatever server answers there (the replaced rule)"
            }
        }
    }

    /// Whether the strategy is this library (and so takes a lock-delay, and permits as lock
    /// keys).
    #[must_use]
    pub fn is_library(self) -> bool {
        !matches!(self, Strategy::SetnxGetset | Strategy::SemaphoreCounting)
    }

    /// Whether the strategy runs the lock workload, the semaphore workload (`--permits`), or
    /// both: `None` for both, `Some(true)` for semaphores only, `Some(false)` for locks only.
    #[must_use]
    pub fn semaphores_only(self) -> Option<bool> {
        match self {
            Strategy::SetnxGetset => Some(false),
            Strategy::SemaphoreCounting => Some(true),
            _ => None,
        }
    }

    /// The servers this strategy runs on, given `--nodes`.
    pub(crate) fn layout(self, nodes: usize) -> Layout {
        match self {
            Strategy::Redlock
            | Strategy::RedlockNoQuarantine
            | Strategy::RedlockReleaseIgnoresDelay
            | Strategy::RedlockHandMarkerVouches
            | Strategy::SemaphoreCounting => Layout::Independent(nodes),
            Strategy::SingleInstance | Strategy::SetnxGetset => Layout::Independent(1),
            Strategy::SingleWithFailover => Layout::Failover,
            Strategy::RedlockCluster
            | Strategy::RedlockClusterWait
            | Strategy::RedlockClusterNoFailoverRule
            | Strategy::RedlockClusterRunIdMarker => Layout::Clusters(CLUSTERS),
            Strategy::RedlockSentinel | Strategy::RedlockSentinelTrusting => Layout::Sentinel,
            Strategy::RedlockReplicated | Strategy::RedlockReplicatedTrusting => Layout::Endpoint,
        }
    }

    /// Whether `fault` applies to this strategy: to its servers (the cluster layout has no
    /// proxies, and `failover` needs Redis Clusters), and for `client-handoff` to its clients,
    /// which must extend a lock by value (this library's strategies only).
    #[must_use]
    pub fn supports(self, fault: Fault) -> bool {
        self.layout(1).supports(fault) && (fault != Fault::ClientHandoff || self.is_library())
    }

    /// The kinds enabled when none are named: [`Fault::DEFAULT`], or for the cluster strategies
    /// [`CLUSTER_FAULTS`].
    #[must_use]
    pub fn default_faults(self) -> &'static [Fault] {
        match self.layout(1) {
            Layout::Clusters(_) => &CLUSTER_FAULTS,
            Layout::Sentinel => &SENTINEL_FAULTS,
            Layout::Endpoint => &ENDPOINT_FAULTS,
            Layout::Independent(_) | Layout::Failover => &Fault::DEFAULT,
        }
    }

    /// The marker a new cluster master is given, so that clients trust it at once: the
    /// library's, or for the replaced rule one that names the `run_id` alone.
    pub(crate) fn cluster_marker(self) -> ClusterMarker {
        match self {
            Strategy::RedlockClusterRunIdMarker => process_only_marker,
            _ => redquorum::cluster_marker,
        }
    }

    /// How long to wait after the servers started before clients start: with the quarantine on,
    /// a node votes only once it has been up for `max_ttl` (the TTL plus `lock_delay`), which
    /// the library reads in whole seconds (rounded down), hence one more second. A cluster's
    /// masters are marked (`RedisCluster::mark_masters`) and durable, so they are trusted at
    /// once.
    pub(crate) fn warm_up(self, lock_delay: Duration) -> Duration {
        match self {
            Strategy::Redlock
            | Strategy::RedlockReleaseIgnoresDelay
            | Strategy::RedlockHandMarkerVouches
            | Strategy::SingleInstance => max_ttl(lock_delay) + Duration::from_secs(1),
            _ => Duration::ZERO,
        }
    }

    /// How this strategy's clients are made, over the proxies' `urls`, with `lock_delay` for
    /// the library's strategies.
    pub(crate) fn design(self, urls: &[String], lock_delay: Duration) -> Design {
        // The library's defaults otherwise, durable-node trust included: restart, flush and
        // replace faults take a node's data although it runs with appendfsync always, and the
        // marker key is what must tell. First-sight trust is on (an opt-in): late joiners meet
        // `replace` spares that look long-running and unmarked, which only the group rule tells
        // apart, and no fault here steps a clock (the opt-in's premise).
        let builder = Redlock::builder(urls.iter().cloned())
            .max_ttl(max_ttl(lock_delay))
            .lock_delay(lock_delay)
            .trust_first_sight(true);
        match self {
            Strategy::Redlock | Strategy::SingleInstance => Design::Library(Box::new(builder)),
            Strategy::RedlockReleaseIgnoresDelay => {
                Design::Library(Box::new(builder.replaced_rule_release_ignores_delay()))
            }
            Strategy::RedlockHandMarkerVouches => {
                Design::Library(Box::new(builder.replaced_rule_hand_markers_vouch()))
            }
            Strategy::RedlockNoQuarantine | Strategy::SingleWithFailover => {
                Design::Library(Box::new(builder.quarantine(false)))
            }
            Strategy::RedlockCluster => Design::Library(Box::new(builder)),
            Strategy::RedlockClusterWait => {
                Design::Library(Box::new(builder.quarantine(false).wait_for_replicas(true)))
            }
            Strategy::RedlockClusterNoFailoverRule => {
                Design::Library(Box::new(builder.quarantine(false).wait_for_replicas(false)))
            }
            Strategy::RedlockClusterRunIdMarker => {
                Design::Library(Box::new(builder.replaced_rule_marker_names_process_only()))
            }
            Strategy::RedlockSentinel => Design::Library(Box::new(builder)),
            Strategy::RedlockSentinelTrusting => Design::Library(Box::new(
                builder.replaced_rule_sentinel_trusts_its_primary(),
            )),
            Strategy::RedlockReplicated => Design::Library(Box::new(builder)),
            Strategy::RedlockReplicatedTrusting => Design::Library(Box::new(
                builder.replaced_rule_endpoint_trusts_its_address(),
            )),
            Strategy::SetnxGetset => Design::OldRecipe,
            Strategy::SemaphoreCounting => Design::Counting,
        }
    }
}

/// The library's `max_ttl` with `lock_delay`: a key lives the TTL plus the delay, and may not
/// outlive the restart quarantine.
#[must_use]
pub fn max_ttl(lock_delay: Duration) -> Duration {
    TTL.saturating_add(lock_delay)
}

/// How a new cluster master's marker is made, from its lowest slot and its `INFO`: its key and
/// value.
pub(crate) type ClusterMarker = fn(u16, &str) -> (String, String);

/// [`redquorum::cluster_marker`] as the replaced rule writes it: naming the `run_id` alone.
fn process_only_marker(lowest_slot: u16, info: &str) -> (String, String) {
    let (key, value) = redquorum::cluster_marker(lowest_slot, info);
    let run_id = info
        .lines()
        .find_map(|line| line.trim().strip_prefix("run_id:"))
        .unwrap_or_default();
    // The library's drawn id and time (a word written by hand would vouch for nothing), under
    // an owner that names the process alone.
    let id_and_time = value.split_once('/').map_or("", |(_, rest)| rest);
    (key, format!("{run_id}/{id_and_time}"))
}

/// How a strategy's clients are made.
#[derive(Debug)]
pub(crate) enum Design {
    /// A [`LibraryClient`], each with a manager of its own from this builder.
    Library(Box<redquorum::Builder>),
    /// A [`SetnxClient`] on the first URL.
    OldRecipe,
    /// A [`CountingClient`] over every URL.
    Counting,
}

named!(Strategy, "strategy", "one of");

/// A lock that was granted, as its holder sees it.
#[derive(Debug)]
pub struct Acquired<H> {
    /// Identifies the acquisition in the history.
    pub value: String,
    /// The fencing token, if the design has one.
    pub fence: Option<u64>,
    /// For a semaphore whose permits are lock keys, which permit it is.
    pub permit: Option<u32>,
    /// A reader's hold on a read-write lock.
    pub shared: bool,
    /// Until when the holder believes it holds the lock.
    pub valid_until: Instant,
    /// What the design needs to release it.
    pub held: H,
}

/// One client of a lock design. Each client of a run has its own, as separate processes would.
pub trait LockClient: Send + 'static {
    /// What a granted lock keeps for its release.
    type Held: Send + Sync + 'static;

    /// Tries to take `resource`, with a short retry; `None` if it was not granted.
    ///
    /// # Cancel safety
    /// May be dropped at any point: whatever it set on the servers then expires with [`TTL`]
    /// (or, for the old recipe, is taken over once its timestamp has passed).
    fn acquire(
        &mut self,
        resource: &str,
    ) -> impl Future<Output = Option<Acquired<Self::Held>>> + Send;

    /// Gives the lock back; best effort, bounded by the design's timeouts.
    fn release(&mut self, held: Self::Held) -> impl Future<Output = ()> + Send;

    /// Walks away from the lock without releasing it, as a crashed process would: nothing is
    /// sent, and the lock lives until it expires.
    fn abandon(&mut self, held: Self::Held);

    /// Hands the lock to another process, which extends it by value to [`TTL`] from now from a
    /// manager of its own configured without a lock-delay; then that process walks away from
    /// it too, as [`abandon`](Self::abandon) does: nobody releases it. The extension's new
    /// deadline, or why there is none: then the lock was left as a crash leaves it. Only the
    /// library's clients can (the runner gives the fault to no other design); the others
    /// abandon the lock and say so.
    ///
    /// Bounded by the library's timeouts (a connection, an extension round).
    fn hand_off(
        &mut self,
        held: Self::Held,
    ) -> impl Future<Output = Result<Instant, String>> + Send {
        self.abandon(held);
        std::future::ready(Err("this design has no extension by value".to_owned()))
    }

    /// Starts over as a new process would, knowing nothing of the nodes (a *late joiner*):
    /// whether it did. Only the library's clients remember anything (each node's restart
    /// quarantine memory); the others have nothing to forget.
    fn rejoin(&mut self) -> bool {
        false
    }
}

/// What a client of the library takes each time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Primitive {
    /// The resource's lock; with permits, one permit of the resource as a semaphore.
    #[default]
    Lock,
    /// The resource as a read-write lock: three times in four as a reader, else as the writer.
    ReadWrite,
    /// The resource as an election: campaign, lead (the term is the fencing token), resign.
    Election,
}

/// A client of the strategies built on this library: its own manager, a short seeded retry.
#[derive(Debug)]
pub struct LibraryClient {
    manager: Redlock,
    /// How to make the manager again, for a late joiner ([`LockClient::rejoin`]).
    builder: Option<Builder>,
    retry: Retry,
    permits: Option<u32>,
    primitive: Primitive,
    /// Drives the reader-or-writer choice, reproducibly.
    choice: u64,
    id: u32,
}

/// What a library client holds: a lock, or an election's leadership kept alive.
#[derive(Debug)]
pub enum LibraryHeld {
    /// A lock, a permit, or a reader's or writer's hold.
    Lock(Lock),
    /// A leadership, extended in the background until resigned.
    Leading(Guard),
}

impl LibraryClient {
    /// A client with its own manager; `seed` makes its retry delays reproducible. With
    /// `permits`, it takes one of that many permits of a resource instead of its lock.
    #[must_use]
    pub fn new(manager: Redlock, seed: u64, permits: Option<u32>) -> Self {
        Self {
            manager,
            builder: None,
            retry: Retry::forever()
                .delay(RETRY_DELAY)
                .max_wait(ACQUIRE_FOR)
                .seed(seed),
            permits,
            primitive: Primitive::Lock,
            choice: seed | 1,
            id: 0,
        }
    }

    /// The same client taking `primitive`, as client `id` (an election's candidates name
    /// themselves after it).
    #[must_use]
    pub fn taking(mut self, primitive: Primitive, id: u32) -> Self {
        self.primitive = primitive;
        self.id = id;
        self
    }

    /// The same client, able to start over with a new manager from `builder`.
    #[must_use]
    pub fn rejoining(mut self, builder: Builder) -> Self {
        self.builder = Some(builder);
        self
    }

    /// A reader three times in four (xorshift over the seed).
    fn reads(&mut self) -> bool {
        self.choice ^= self.choice << 13;
        self.choice ^= self.choice >> 7;
        self.choice ^= self.choice << 17;
        !self.choice.is_multiple_of(4)
    }

    /// Connects to every node now, so that connection set-up does not happen inside the run.
    ///
    /// # Cancel safety
    /// Dropping it leaves connections half made; they are made again on first use.
    pub async fn connect(&self) {
        self.manager.connect().await;
    }
}

impl LockClient for LibraryClient {
    type Held = LibraryHeld;

    async fn acquire(&mut self, resource: &str) -> Option<Acquired<LibraryHeld>> {
        let reads = self.primitive == Primitive::ReadWrite && self.reads();
        let (manager, retry) = (&self.manager, &self.retry);
        let lock = match (self.primitive, self.permits) {
            (Primitive::Election, _) => {
                let me = format!("client-{}", self.id);
                let leading = manager
                    .campaign_with(resource, &me, TTL, retry)
                    .await
                    .ok()?;
                return Some(Acquired {
                    value: leading.value().to_owned(),
                    // A campaign's token comes with it (`election` invariant 5).
                    fence: redquorum::LockInfo::fence(&leading),
                    permit: None,
                    shared: false,
                    valid_until: leading.deadline(),
                    held: LibraryHeld::Leading(leading),
                });
            }
            (Primitive::ReadWrite, _) => {
                if reads {
                    manager.acquire_read_with(resource, TTL, retry).await
                } else {
                    manager.acquire_write_with(resource, TTL, retry).await
                }
            }
            (Primitive::Lock, None) => manager.acquire_with(resource, TTL, retry).await,
            (Primitive::Lock, Some(permits)) => {
                manager
                    .acquire_permit_with(resource, permits, TTL, retry)
                    .await
            }
        }
        .ok()?;
        let mut lock = lock;
        // Asked at once, as a holder that fences its writes would (`fencing` invariant 8);
        // `None` with fencing off, or if the nodes did not issue one.
        let fence = lock.fence().await.ok();
        Some(Acquired {
            value: lock.value().to_owned(),
            fence,
            permit: lock.permit(),
            shared: lock.is_read(),
            valid_until: lock.deadline(),
            held: LibraryHeld::Lock(lock),
        })
    }

    async fn release(&mut self, held: LibraryHeld) {
        match held {
            // A lock whose validity ran out (the client slept past it) is released by value, as
            // a process it was handed to would, which does not know the deadline: the nodes'
            // own rule must leave it to its lock-delay (the library's engine invariant 6).
            LibraryHeld::Lock(lock) if !lock.is_valid() => {
                let (resource, info) = (lock.resource().to_owned(), lock.detach());
                drop(self.manager.release_value(&resource, info.value()).await);
            }
            LibraryHeld::Lock(lock) => drop(lock.release().await),
            LibraryHeld::Leading(leading) => drop(leading.release().await),
        }
    }

    fn abandon(&mut self, held: LibraryHeld) {
        match held {
            // Dropped, a `Lock` would be released in the background; detached, it is left as is.
            LibraryHeld::Lock(lock) => drop(lock.detach()),
            // A leader that crashes stops extending and never resigns.
            LibraryHeld::Leading(leading) => {
                tokio::spawn(async move { drop(leading.detach().await) });
            }
        }
    }

    async fn hand_off(&mut self, held: LibraryHeld) -> Result<Instant, String> {
        let info = match held {
            LibraryHeld::Lock(lock) if lock.is_read() => {
                drop(lock.detach());
                return Err("a reader's hold has no extension by value".to_owned());
            }
            LibraryHeld::Lock(lock) => lock.detach(),
            // Its keeper stopped: the lock as the last extension left it.
            LibraryHeld::Leading(leading) => leading.detach().await,
        };
        // The other process: the strategy's settings, the same servers, no lock-delay.
        let Some(builder) = self.builder.clone() else {
            return Err("no builder to make the other process's manager with".to_owned());
        };
        let other = builder
            .lock_delay(Duration::ZERO)
            .build()
            .map_err(|e| format!("the other process's manager: {e}"))?;
        other.connect().await;
        let extended = other
            .extend_value(info.resource(), info.value(), TTL)
            .await
            .map_err(|e| e.to_string());
        // Its requests still in flight are answered before it goes, as a process that exits.
        other.settle().await;
        extended
    }

    fn rejoin(&mut self) -> bool {
        let Some(manager) = self.builder.as_ref().and_then(|b| b.clone().build().ok()) else {
            return false;
        };
        self.manager = manager;
        true
    }
}

/// A server the unsafe strategies reach by raw commands: its client and, once made, a
/// connection.
#[derive(Debug)]
struct RawNode {
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
}

impl RawNode {
    fn open(url: &str) -> Result<Self, redis::RedisError> {
        Ok(Self {
            client: redis::Client::open(url)?,
            conn: None,
        })
    }

    /// Runs `cmd` within [`COMMAND_TIMEOUT`] (connecting first if needed); a failure forgets
    /// the connection, so the next command makes a new one.
    async fn query<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Option<T> {
        let attempt = async {
            if self.conn.is_none() {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(COMMAND_TIMEOUT))
                    .set_response_timeout(None);
                self.conn = Some(
                    self.client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                        .ok()?,
                );
            }
            let conn = self.conn.as_mut()?;
            cmd.query_async::<T>(conn).await.ok()
        };
        let reply = tokio::time::timeout(COMMAND_TIMEOUT, attempt)
            .await
            .ok()
            .flatten();
        if reply.is_none() {
            self.conn = None;
        }
        reply
    }
}

/// The recipe once documented with Redis's `SETNX` command, before `SET NX PX` existed:
///
/// 1. `SETNX resource <now + timeout + 1>` (Unix time in ms). `1`: acquired.
/// 2. Else `GET resource`; if its timestamp has not passed, somebody holds it.
/// 3. If it has passed, `GETSET resource <now + timeout + 1>`; acquired only if the *old* value
///    returned is still a passed timestamp (else another client took it over first).
/// 4. Release with `DEL resource`.
///
/// The holder believes itself valid until its own timestamp. Its flaws are the point: timestamps
/// are wall-clock time, and a holder that paused past its timestamp deletes the next holder's
/// lock when it releases with `DEL`.
#[derive(Debug)]
pub struct SetnxClient {
    node: RawNode,
    id: u32,
    rng: StdRng,
}

impl SetnxClient {
    /// A client of the server at `url`; `seed` makes its retry delays reproducible.
    ///
    /// # Errors
    /// If `url` is not a Redis URL.
    pub fn new(url: &str, id: u32, seed: u64) -> Result<Self, redis::RedisError> {
        Ok(Self {
            node: RawNode::open(url)?,
            id,
            rng: StdRng::seed_from_u64(seed),
        })
    }

    /// One pass of steps 1–3: the timestamp it now holds, if it got the lock.
    async fn attempt(&mut self, resource: &str) -> Option<u64> {
        let timeout_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
        let stamp = wall_ms() + timeout_ms + 1;
        let set: i64 = self
            .node
            .query(redis::cmd("SETNX").arg(resource).arg(stamp))
            .await?;
        if set == 1 {
            return Some(stamp);
        }
        let current: Option<String> = self.node.query(redis::cmd("GET").arg(resource)).await?;
        let expired = |value: Option<&str>| {
            // A missing key or a value that is not a timestamp counts as expired.
            value
                .and_then(|v| v.parse::<u64>().ok())
                .is_none_or(|at| at < wall_ms())
        };
        if !expired(current.as_deref()) {
            return None;
        }
        let stamp = wall_ms() + timeout_ms + 1;
        let old: Option<String> = self
            .node
            .query(redis::cmd("GETSET").arg(resource).arg(stamp))
            .await?;
        expired(old.as_deref()).then_some(stamp)
    }
}

impl LockClient for SetnxClient {
    type Held = String;

    async fn acquire(&mut self, resource: &str) -> Option<Acquired<String>> {
        let give_up = Instant::now() + ACQUIRE_FOR;
        // Bounded by the deadline; each pass sleeps at least half of RETRY_DELAY.
        loop {
            if let Some(stamp) = self.attempt(resource).await {
                let left = Duration::from_millis(stamp.saturating_sub(wall_ms()));
                return Some(Acquired {
                    value: format!("client {}: {stamp}", self.id),
                    fence: None,
                    permit: None,
                    shared: false,
                    valid_until: Instant::now() + left,
                    held: resource.to_owned(),
                });
            }
            let max = u64::try_from(RETRY_DELAY.as_micros()).unwrap_or(u64::MAX);
            let delay = Duration::from_micros(self.rng.random_range(max / 2..=max));
            if Instant::now() + delay >= give_up {
                return None;
            }
            tokio::time::sleep(delay).await;
        }
    }

    async fn release(&mut self, resource: String) {
        let _: Option<i64> = self.node.query(redis::cmd("DEL").arg(resource)).await;
    }

    fn abandon(&mut self, _resource: String) {}
}

/// One node's grant of the counting semaphore: drop the holders whose time is up (by the node's
/// clock), then add `ARGV[1]` with an expiry of `ARGV[3]` ms if fewer than `ARGV[2]` hold. 1 if
/// it holds (also when it already did), 0 if the node is full.
const COUNTING_GRANT: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return 1 end
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
return 0
";

/// The library's clock-drift allowance for a TTL, so that the counting design's holders believe
/// exactly as long as ours would: 1% of the TTL plus 2 ms.
fn drift_allowance(ttl: Duration) -> Duration {
    ttl.mul_f64(redquorum::defaults::DRIFT_FACTOR) + Duration::from_millis(2)
}

/// A counting semaphore over independent nodes (the module docs): per resource, each node keeps
/// a sorted set of holders scored by their expiry, and grants while it has fewer than `permits`;
/// a holder needs grants from a majority. Release removes the holder from every node.
#[derive(Debug)]
pub struct CountingClient {
    nodes: Vec<RawNode>,
    permits: u32,
    id: u32,
    rng: StdRng,
}

impl CountingClient {
    /// A client of the servers at `urls` for a semaphore of `permits`; `seed` makes its values
    /// and retry delays reproducible.
    ///
    /// # Errors
    /// If a URL is not a Redis URL.
    pub fn new(
        urls: &[String],
        permits: u32,
        id: u32,
        seed: u64,
    ) -> Result<Self, redis::RedisError> {
        let nodes = urls
            .iter()
            .map(|url| RawNode::open(url.as_str()))
            .collect::<Result<_, redis::RedisError>>()?;
        Ok(Self {
            nodes,
            permits,
            id,
            rng: StdRng::seed_from_u64(seed),
        })
    }

    /// Connects to every node now (each within the library's connect timeout), as
    /// [`LibraryClient::connect`] does, so that connection set-up does not happen inside the
    /// run: a first connection that misses the command timeout on a loaded machine cuts one
    /// client off one node, a partition of its own that no fault planned.
    ///
    /// # Cancel safety
    /// Dropping it leaves some nodes unconnected; they are connected on first use.
    pub async fn connect(&mut self) {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(redquorum::defaults::CONNECT_TIMEOUT))
            .set_response_timeout(None);
        let connects = self.nodes.iter_mut().map(|node| async {
            if node.conn.is_none() {
                let made = tokio::time::timeout(
                    redquorum::defaults::CONNECT_TIMEOUT,
                    node.client
                        .get_multiplexed_async_connection_with_config(&config),
                )
                .await;
                node.conn = made.ok().and_then(Result::ok);
            }
        });
        join_all(connects).await;
    }

    /// Sends `cmd` to every node at once; each reply, `None` for a node that failed or was late.
    async fn everywhere<T: redis::FromRedisValue>(&mut self, cmd: &redis::Cmd) -> Vec<Option<T>> {
        join_all(self.nodes.iter_mut().map(|node| node.query(cmd))).await
    }

    /// Removes `value` from every node's set of `resource`'s holders.
    async fn remove(&mut self, resource: &str, value: &str) {
        let cmd = redis::cmd("ZREM").arg(resource).arg(value).clone();
        let _: Vec<Option<i64>> = self.everywhere(&cmd).await;
    }

    /// One round: `Some(deadline)` if a majority granted `value` with validity left; otherwise
    /// rolled back.
    async fn attempt(&mut self, resource: &str, value: &str) -> Option<Instant> {
        let ttl_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
        let start = Instant::now();
        let cmd = redis::cmd("EVAL")
            .arg(COUNTING_GRANT)
            .arg(1)
            .arg(resource)
            .arg(value)
            .arg(self.permits)
            .arg(ttl_ms)
            .clone();
        let replies: Vec<Option<i64>> = self.everywhere(&cmd).await;
        let grants = replies.iter().filter(|r| **r == Some(1)).count();
        let deadline = start + TTL.saturating_sub(drift_allowance(TTL));
        if grants > self.nodes.len() / 2 && Instant::now() < deadline {
            // A node that did not answer in time is one this client did not reach: where the
            // others did, that is room for one more holder (the module docs).
            tracing::debug!(
                client = self.id,
                resource,
                ?replies,
                "counting semaphore held"
            );
            return Some(deadline);
        }
        self.remove(resource, value).await;
        None
    }
}

impl LockClient for CountingClient {
    type Held = (String, String);

    async fn acquire(&mut self, resource: &str) -> Option<Acquired<(String, String)>> {
        let give_up = Instant::now() + ACQUIRE_FOR;
        // Bounded by the deadline; each pass sleeps at least half of RETRY_DELAY.
        loop {
            let value = format!("client {}: {:016x}", self.id, self.rng.random::<u64>());
            if let Some(valid_until) = self.attempt(resource, &value).await {
                return Some(Acquired {
                    value: value.clone(),
                    fence: None,
                    permit: None,
                    shared: false,
                    valid_until,
                    held: (resource.to_owned(), value),
                });
            }
            let max = u64::try_from(RETRY_DELAY.as_micros()).unwrap_or(u64::MAX);
            let delay = Duration::from_micros(self.rng.random_range(max / 2..=max));
            if Instant::now() + delay >= give_up {
                return None;
            }
            tokio::time::sleep(delay).await;
        }
    }

    async fn release(&mut self, (resource, value): (String, String)) {
        self.remove(&resource, &value).await;
    }

    fn abandon(&mut self, _held: (String, String)) {}
}

/// Wall-clock time in Unix milliseconds, as the old recipe uses.
fn wall_ms() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for strategy in Strategy::ALL {
            assert_eq!(strategy.name().parse::<Strategy>(), Ok(strategy));
        }
        let err = "zookeeper".parse::<Strategy>().unwrap_err();
        assert!(err.contains("redlock, redlock-no-quarantine"), "{err}");
    }

    #[test]
    fn only_quarantining_strategies_warm_up() {
        let none = Duration::ZERO;
        assert!(Strategy::Redlock.warm_up(none) > TTL);
        assert!(Strategy::SingleInstance.warm_up(none) > TTL);
        assert!(
            Strategy::Redlock.warm_up(Duration::from_secs(1)) > max_ttl(Duration::from_secs(1))
        );
        assert_eq!(Strategy::RedlockNoQuarantine.warm_up(none), Duration::ZERO);
        assert_eq!(Strategy::SetnxGetset.warm_up(none), Duration::ZERO);
        assert_eq!(Strategy::RedlockCluster.warm_up(none), Duration::ZERO);
        assert_eq!(Strategy::SemaphoreCounting.warm_up(none), Duration::ZERO);
    }

    #[test]
    fn the_replicated_layouts_take_failover_and_only_those_with_proxies_take_proxy_faults() {
        for strategy in Strategy::ALL {
            let layout = strategy.layout(5);
            let no_proxies = matches!(layout, Layout::Clusters(_) | Layout::Sentinel);
            let replicated = no_proxies || layout == Layout::Endpoint;
            assert_eq!(strategy.supports(Fault::Failover), replicated, "{strategy}");
            for fault in [Fault::Delay, Fault::Drop, Fault::Blackhole] {
                assert_eq!(strategy.supports(fault), !no_proxies, "{strategy} {fault}");
            }
            // A replacement switches a proxy to a spare: not on the replicated layouts.
            for fault in [Fault::Replace, Fault::ReplaceMarked] {
                assert_eq!(strategy.supports(fault), !replicated, "{strategy} {fault}");
            }
            assert!(
                strategy
                    .default_faults()
                    .iter()
                    .all(|f| strategy.supports(*f)),
                "{strategy}"
            );
        }
    }

    #[test]
    fn only_the_librarys_strategies_hand_a_lock_off() {
        for strategy in Strategy::ALL {
            assert_eq!(
                strategy.supports(Fault::ClientHandoff),
                strategy.is_library(),
                "{strategy}"
            );
            // A crash needs nothing of the design.
            assert!(strategy.supports(Fault::ClientCrash), "{strategy}");
            assert!(
                !strategy.default_faults().contains(&Fault::ClientHandoff),
                "{strategy}"
            );
        }
    }

    #[test]
    fn every_library_strategy_builds_a_manager() {
        let urls = vec!["redis://127.0.0.1:1".to_owned()];
        for delay in [Duration::ZERO, Duration::from_millis(1500)] {
            for strategy in Strategy::ALL {
                match strategy.design(&urls, delay) {
                    Design::Library(builder) => {
                        assert!(strategy.is_library(), "{strategy}");
                        let manager = builder.build();
                        assert!(manager.is_ok(), "{strategy}: {manager:?}");
                    }
                    Design::OldRecipe => assert_eq!(strategy, Strategy::SetnxGetset),
                    Design::Counting => assert_eq!(strategy, Strategy::SemaphoreCounting),
                }
            }
        }
    }

    #[test]
    fn the_counting_drift_is_the_librarys() {
        assert_eq!(drift_allowance(TTL), Duration::from_millis(22));
    }
}
