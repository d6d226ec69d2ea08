//! One file because a `Connection` lends out the server's private state: invariants 1–8 need both.
//!
//! One Redis server: the only place lock commands go to Redis (the other connection per node
//! is the [`subscriber`](crate::nodes::subscriber), which listens for releases). What each request
//! of a round means in commands and replies is [`commands`](crate::nodes::commands)' business; this
//! module owns the connection they travel on, its health, and the order they run in.
//!
//! Each server owns one long-lived multiplexed connection (redis-rs [`MultiplexedConnection`]),
//! shared by every lock and every task: requests from many tasks are pipelined on it, and no
//! request ever opens a TCP connection of its own. It is made lazily on first use (so a manager
//! can be built outside a runtime and while servers are down) and made again on the next request
//! after it broke.
//!
//! We manage that one connection ourselves rather than through redis-rs's `ConnectionManager`,
//! because every (re)connection must run the restart-quarantine health check (`INFO server`, the
//! marker script, `CONFIG GET`) *before* the connection carries a vote; `ConnectionManager`
//! reconnects behind our back with no hook to do that, and it replaces a connection only on an
//! error, never one that silently stopped answering (invariant 6).
//!
//! # Invariants
//! 1. One connection per node: a new one is made only when none is published and no attempt is
//!    under way; every request waiting for it awaits the same shared attempt, bounded by the
//!    connect timeout.
//! 2. A connection is published only after its health check succeeded, so no reply on it is
//!    counted before the node's quarantine is known. (`SCRIPT LOAD` is best-effort: a user who
//!    may not run `SCRIPT` gets every script through the `EVAL` fallback.)
//! 3. `forget(generation)` forgets only the connection of that generation: a request that failed
//!    on an old connection cannot drop its replacement.
//! 4. Only the connect/forget lock writes the published connection (and only while holding it),
//!    so "published" and "attempt under way" never both hold and are never lost.
//! 5. A server runs our requests in the order they were queued on its connection (redis-rs's
//!    channel to the connection's task), and a request is queued in the very poll that gets
//!    past [`Server::connection`]'s wait for the connection, unless that channel is full
//!    (50 commands): then it waits for room, and is queued only when polled again. A queued request runs even
//!    if its future is never polled again, but not if the future is dropped before the
//!    connection's task took it (redis-rs skips a command whose reply nobody waits for). Either
//!    way, a request queued later never overtakes it. A script's `EVAL` fallback after
//!    `NOSCRIPT` is queued only if the request is polled again. A replaced connection
//!    (invariant 6) ends this order: requests still queued on it may run after later ones on its
//!    successor. Those were given up on and never counted, so the worst they do is set a key
//!    that a release already missed, which expires by its TTL.
//! 6. **A connection that stops answering is replaced.** Errors drop a connection at once; so
//!    do [`TIMEOUTS_BEFORE_REPLACING`] requests in a row whose round's deadline passed without
//!    their reply (a server that moved, a firewall that silently drops the flow, a proxy black
//!    hole), and a health recheck that fails or times out. Only a deadline counts, not a request
//!    merely dropped: a won round's stragglers are dropped unpolled once the release is queued
//!    behind them, answered or not. A node that stops answering is seen by the next round it
//!    fails, or by the next release, which waits for every node. Every connection has TCP
//!    keepalive on, so an idle flow that died is noticed by the kernel too. The replacement runs the health check first
//!    (invariant 2), so a server found behind the old address is judged before it votes.
//! 7. **A vote carries its own evidence.** With the quarantine on, every acquisition (`SET`, or
//!    the fenced and queued scripts) is followed on the same connection, in the same pipeline,
//!    by a `GET` of the marker key, which must return the marker this connection's health check
//!    saw: the same id (`marker` invariant 1; a vouch rewrites the rest). A node that lost its
//!    data since (a `FLUSHALL`, an eviction, a restart behind a proxy that kept our TCP
//!    connection) shows it in that very reply, and its grant is not a vote: it is quarantined
//!    for `max_ttl` from then on, and checked again. A first-sight marker whose time moved later
//!    was extended by a group's first look (`first_sight` invariant 1): that grant is not a
//!    vote either, and the node is out until the later time, and checked again. Extensions and
//!    fencing need no marker: they succeed only where the key still holds our value, which a
//!    node that lost it cannot show. **On a Redis Cluster master the marker is not enough:** a
//!    master demoted, resynchronised in full from the replica promoted in its place and
//!    promoted again (a failback) keeps our connection (Redis closes none on a change of
//!    role) and shows its own marker, byte for byte (it was replicated, and came back with the
//!    resync), but not the locks that replica lacked. So a cluster master's vote also reads
//!    `INFO replication` in the same pipeline, after the vote, and its `master_replid` must be
//!    the health check's: every change of role draws or takes another, and nothing else
//!    changes it while the process runs (quarantine invariant 6). Another one, and the grant
//!    is not a vote: the node is out for `max_ttl` and checked again, which quarantines it as a
//!    promoted replica. Read after the vote, it covers a change of role before the vote ran
//!    (found by `redlock chaos --faults failback` under load: a client connected before the
//!    failback took a lock still held until its next health check, up to 10 s later;
//!    `tests/redis_cluster.rs`,
//!    `a_failback_during_a_quiet_spell_does_not_vote_for_a_client_connected_before`).
//! 8. **On a Redis Cluster, a vote waits for the shard's replicas.** On a master of a cluster
//!    node ([`shards`](crate::nodes::shards)), every vote (acquisition, extension, fencing round)
//!    is followed by a `WAIT n t` on the same connection, `n` the replicas the slot map lists for
//!    the shard: in the same pipeline when no `WAIT` runs, else the next `WAIT`, shared by every
//!    vote that came while one ran ([`replica_acks`](crate::nodes::replica_acks)). `WAIT` counts
//!    the writes of its own connection up to the last one, so it covers ours. Fewer than `n`
//!    acknowledgements and the reply is an error, not a vote.
//!
//! The common path takes no lock: the published connection sits in an [`ArcSwapOption`] and is
//! read with one atomic load, and the health verdict is two atomics, because the mutexes they
//! replaced showed up as contention in profiles (`docs/performance.md`'s *Hand-made parts*).
//! Each request reads the clock once, after its reply, for both the quarantine verdict and the
//! re-check decision.
//!
//! Every request is bounded in time, never by this layer alone: all requests of a round share one
//! deadline, which the [`engine`](crate::round::engine) enforces with one alarm per round, not a
//! timer per request (measured: `docs/performance.md`'s *Hand-made parts*). A node that does not
//! answer in time (stopped, overloaded, partitioned) is a `Timeout`, never a vote.
//!
//! Scripts are sent as `EVALSHA`; on `NOSCRIPT` (a node restarted, or its script cache was flushed)
//! the same call is repeated once as `EVAL` with the script body, which also caches it again. They
//! are loaded with `SCRIPT LOAD` on every connection, so the common path never pays for the
//! fallback.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, RedisError, Value};

use crate::base::defaults::{FENCE_PREFIX, WRITER_WAITING_PREFIX};
use crate::base::error::{ConfigError, redact_url, secrets_in};
use crate::base::sync::lock;
use crate::nodes::clock_estimate::ClockEstimate;
use crate::nodes::health::{Health, MarkerKey, check_health};
use crate::nodes::node_error::NodeError;
use crate::nodes::replica_acks::ReplicaAcks;
use crate::nodes::replicated::Replicated;
use crate::nodes::run_ids::RunIds;
use crate::nodes::scripts::{KeyGroup, LuaScript};
use crate::nodes::subscriber::{Subscriber, Watch};
use crate::nodes::vouch::FirstSight;
use crate::protocol::aliases::Claimant;
use crate::protocol::coverage::{Counting, Shortfall, Vote, credit};
use crate::protocol::marker::{self, MarkerState};
use crate::protocol::quarantine::{
    MARKER_KEY, Memory, Quarantine, QuarantineReason, TrustPolicy, info_field,
};
use crate::protocol::slots;
use crate::protocol::succession::Replicas;

/// What a server connection needs to know to connect and to judge its own health.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServerSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) trust: TrustPolicy,
}

/// What a server that is one master of a Redis Cluster node ([`shards`](crate::nodes::shards)) does
/// differently: every key of a lock is named into the lock key's slot, the marker key into a
/// slot this master serves, and a vote waits for the shard's replicas (invariant 8).
#[derive(Debug)]
pub(crate) struct InCluster {
    /// The marker key, with a hash tag of a slot this master serves.
    pub(crate) marker_key: String,
    /// How many replicas must acknowledge a vote's writes (`WAIT`), 0 for none: see
    /// [`shards`](crate::nodes::shards) invariant 2.
    pub(crate) replicas: AtomicU32,
    /// The longest a `WAIT` may hold the connection, in milliseconds (half the node timeout:
    /// see [`shards`](crate::nodes::shards)).
    pub(crate) wait_ms: u64,
}

/// How often a live connection's health check is repeated: catches a `run_id` change or a
/// lost marker that did not break our connection (a proxy in between, a `FLUSHALL`), and is
/// cheap (one `INFO server`, one short script, one `CONFIG GET`).
const HEALTH_RECHECK: Duration = Duration::from_secs(10);

/// How often a quarantined node's health check is repeated: an operator's vouch
/// (`redlock nodes mark`) or the group's (`first_sight`) is seen within this, by a client
/// that waits for the quarantine to end.
const QUARANTINED_RECHECK: Duration = Duration::from_secs(2);

/// How many requests in a row may time out on one connection before it is replaced
/// (invariant 6).
const TIMEOUTS_BEFORE_REPLACING: u32 = 3;

/// TCP keepalive on every node connection (invariant 6): an idle flow that a firewall or a moved
/// server dropped silently is noticed within about `time + retries × interval`, 25 s.
fn keepalive() -> redis::io::tcp::socket2::TcpKeepalive {
    redis::io::tcp::socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(10))
        .with_interval(Duration::from_secs(5))
        .with_retries(3)
}

/// Nanoseconds from `epoch` to `t`; 0 for instants before it, which only ever stand for "already
/// past" (every `now` we compare with is later than the node's epoch).
fn nanos_since(epoch: Instant, t: Instant) -> u64 {
    u64::try_from(t.saturating_duration_since(epoch).as_nanos()).unwrap_or(u64::MAX)
}

/// An established connection and what we know of the server behind it.
#[derive(Debug)]
struct Live {
    conn: MultiplexedConnection,
    generation: u64,
    /// The node's base instant for the two atomics below.
    epoch: Instant,
    /// [`Health::trusted_from`], in nanoseconds since `epoch`.
    trusted_from: AtomicU64,
    /// [`Health::checked_at`], in nanoseconds since `epoch`.
    checked_at: AtomicU64,
    rechecking: AtomicBool,
    /// [`Health::marker`]: what an acquisition's vote reads back from the marker key.
    marker: ArcSwapOption<String>,
    /// [`Health::may_evict`].
    may_evict: AtomicBool,
    /// [`Health::history`]: what a cluster master's vote reads back as its `master_replid`.
    history: ArcSwapOption<String>,
    /// Requests on this connection that timed out since the last reply (invariant 6).
    timeouts: AtomicU32,
    /// Set when a health recheck failed: the next request replaces the connection.
    condemned: AtomicBool,
    /// The `WAIT`s of a cluster master's votes on this connection (invariant 8).
    acks: ReplicaAcks,
    /// The server's clock as its last native fenced acquisition on this connection read it:
    /// a new connection may lead to another server, so it starts with none.
    clock: ClockEstimate,
}

impl Live {
    fn new(
        conn: MultiplexedConnection,
        generation: u64,
        epoch: Instant,
        health: &Health,
        memory: &Mutex<Memory>,
    ) -> Self {
        let live = Self {
            conn,
            generation,
            epoch,
            trusted_from: AtomicU64::new(0),
            checked_at: AtomicU64::new(0),
            rechecking: AtomicBool::new(false),
            marker: ArcSwapOption::empty(),
            may_evict: AtomicBool::new(false),
            history: ArcSwapOption::empty(),
            timeouts: AtomicU32::new(0),
            condemned: AtomicBool::new(false),
            acks: ReplicaAcks::default(),
            clock: ClockEstimate::default(),
        };
        live.set_health(health, memory);
        live
    }

    /// Records a health check's verdict, never earlier than the losses `memory` remembers. The
    /// values need not change together: each is only compared with the clock on its own.
    fn set_health(&self, health: &Health, memory: &Mutex<Memory>) {
        // A recheck that judged the node before a vote showed a loss must not undo that vote's
        // quarantine when it lands after it: the vote records the loss in the memory first, then
        // here ([`Live::lost_data`]); read under the memory's lock, the floor includes it, or
        // the vote's own raise comes after this store. Otherwise the verdict may move earlier:
        // a vouch ended a first-sight marker's pending time (`vouch`).
        let memory = lock(memory);
        let trusted_from = memory
            .floor()
            .map_or(health.trusted_from, |loss| loss.max(health.trusted_from));
        self.trusted_from
            .store(nanos_since(self.epoch, trusted_from), Ordering::Release);
        drop(memory);
        self.checked_at.store(
            nanos_since(self.epoch, health.checked_at),
            Ordering::Release,
        );
        self.marker
            .store(health.marker.as_ref().map(|m| Arc::new(m.clone())));
        self.may_evict.store(health.may_evict, Ordering::Release);
        self.history
            .store(health.history.as_ref().map(|h| Arc::new(h.clone())));
    }

    /// Evidence of a data loss on this connection (a vote read back the wrong marker): out of
    /// the vote until `until`, and checked again on the next request.
    fn lost_data(&self, until: Instant) {
        let until = nanos_since(self.epoch, until);
        self.trusted_from.fetch_max(until, Ordering::AcqRel);
        self.checked_at.store(0, Ordering::Release);
    }

    /// `now` as these atomics count time: computed once per request for both uses below.
    fn tick(&self, now: Instant) -> u64 {
        nanos_since(self.epoch, now)
    }

    /// How much longer this node is quarantined at `tick`, if it is.
    fn quarantined_for(&self, tick: u64) -> Option<Duration> {
        let left = self
            .trusted_from
            .load(Ordering::Acquire)
            .saturating_sub(tick);
        (left != 0).then(|| Duration::from_nanos(left))
    }

    /// Whether the last health check is older than [`HEALTH_RECHECK`] at `tick`
    /// ([`QUARANTINED_RECHECK`] while the node is quarantined).
    fn health_is_stale(&self, tick: u64) -> bool {
        let age = tick.saturating_sub(self.checked_at.load(Ordering::Acquire));
        let every = if self.quarantined_for(tick).is_some() {
            QUARANTINED_RECHECK
        } else {
            HEALTH_RECHECK
        };
        u128::from(age) >= every.as_nanos()
    }
}

type Connecting = Shared<BoxFuture<'static, Result<Arc<Live>, NodeError>>>;

/// One Redis server and our one connection to it.
pub(crate) struct Server {
    label: String,
    client: redis::Client,
    settings: ServerSettings,
    /// The published connection (invariants 2, 4), read lock-free by every request.
    live: ArcSwapOption<Live>,
    /// The attempt under way, if any; also serializes every write to `live` (invariant 4).
    connecting: Mutex<Option<Connecting>>,
    /// The base instant of every connection's health atomics.
    epoch: Instant,
    /// What health checks found so far, kept across reconnections (quarantine invariant 2).
    memory: Arc<Mutex<Memory>>,
    /// Held for the length of each health check: one at a time per server, so that each reads
    /// the server's counters after the last one's commands (quarantine invariant 7: two checks
    /// interleaved read a count that grew by less than a check's own commands, which looks
    /// like a reset; found by review, a mark's recheck beside a background one).
    checks: Arc<tokio::sync::Mutex<()>>,
    generations: AtomicU64,
    /// Set for a master of a Redis Cluster node.
    cluster: Option<InCluster>,
    /// Set for a server that may be the primary of a replicated node.
    replicated: Option<Arc<Replicated>>,
    /// The manager's first-sight protocol, for a plain server of a manager whose nodes are all
    /// plain servers (`first_sight` invariant 5).
    first_sight: Option<Arc<FirstSight>>,
    /// The `run_id`s the manager's servers showed, and who this server claims its own as
    /// (`aliases` invariant 1).
    claim: Option<(Arc<RunIds>, Arc<Claimant>)>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("address", &self.label)
            .finish()
    }
}

impl Server {
    /// Parses `url` (`redis://`, `rediss://`, `redis+unix://`, with user, password and db) without
    /// connecting; a `rediss://` server's certificate must chain to `tls_roots` (PEM) when given,
    /// else to the system's roots.
    pub(crate) fn new(
        url: &str,
        settings: ServerSettings,
        tls_roots: Option<&[u8]>,
    ) -> Result<Self, ConfigError> {
        let invalid = |e: RedisError| ConfigError::InvalidUrl {
            url: redact_url(url),
            reason: scrub(&e.to_string(), url),
        };
        let client = match tls_roots {
            Some(roots) if url.trim_start().starts_with("rediss://") => {
                let certificates = redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(roots.to_vec()),
                };
                redis::Client::build_with_tls(url, certificates).map_err(|e| {
                    ConfigError::InvalidSetting {
                        setting: "tls_root_certificates",
                        reason: scrub(&e.to_string(), url),
                    }
                })?
            }
            _ => redis::Client::open(url).map_err(invalid)?,
        };
        let info = client.get_connection_info().clone();
        let tcp = info.tcp_settings().clone().set_keepalive(keepalive());
        let client = redis::Client::open(info.set_tcp_settings(tcp)).map_err(invalid)?;
        let info = client.get_connection_info();
        let db = info.redis_settings().db();
        let label = if db == 0 {
            info.addr().to_string()
        } else {
            format!("{}/{db}", info.addr())
        };
        Ok(Self {
            label,
            client,
            settings,
            live: ArcSwapOption::empty(),
            connecting: Mutex::new(None),
            epoch: Instant::now(),
            memory: Arc::new(Mutex::new(Memory::default())),
            checks: Arc::new(tokio::sync::Mutex::new(())),
            generations: AtomicU64::new(0),
            cluster: None,
            replicated: None,
            first_sight: None,
            claim: None,
        })
    }

    /// Joins the manager's first-sight protocol.
    pub(crate) fn set_first_sight(&mut self, group: Arc<FirstSight>) {
        self.first_sight = Some(group);
    }

    /// Shares the manager's record of its servers' `run_id`s, in which this server claims its
    /// own as `claimant` (`aliases` invariant 1).
    pub(crate) fn set_run_ids(&mut self, run_ids: Arc<RunIds>, claimant: Claimant) {
        self.claim = Some((run_ids, Arc::new(claimant)));
    }

    /// The client this server connects with (credentials and TLS included).
    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// A server that is one master of a Redis Cluster node.
    pub(crate) fn in_cluster(
        url: &str,
        settings: ServerSettings,
        tls_roots: Option<&[u8]>,
        cluster: InCluster,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            cluster: Some(cluster),
            ..Self::new(url, settings, tls_roots)?
        })
    }

    /// A server that may be the primary of a replicated node ([`sentinels`](crate::nodes::sentinels)).
    pub(crate) fn replicated(
        url: &str,
        settings: ServerSettings,
        tls_roots: Option<&[u8]>,
        replicated: Arc<Replicated>,
    ) -> Result<Self, ConfigError> {
        Ok(Self {
            replicated: Some(replicated),
            ..Self::new(url, settings, tls_roots)?
        })
    }

    /// The part of this server that only the primary of a replicated node has.
    pub(crate) fn replication(&self) -> Option<&Replicated> {
        self.replicated.as_deref()
    }

    /// The part of this server that only a master of a Redis Cluster has.
    pub(crate) fn cluster(&self) -> Option<&InCluster> {
        self.cluster.as_ref()
    }

    /// The key that holds this server's marker.
    fn marker_key(&self) -> &str {
        self.cluster
            .as_ref()
            .map_or(MARKER_KEY, |cluster| cluster.marker_key.as_str())
    }

    /// This server's marker for its health check: a cluster master's names its owner
    /// (quarantine invariant 6).
    fn marker(&self) -> MarkerKey {
        MarkerKey {
            key: self.marker_key().to_owned(),
            owned: self.cluster.is_some(),
        }
    }

    /// The key of `group` for `resource` on this server: in the resource's slot on a cluster.
    fn group_key(&self, group: KeyGroup, resource: &str) -> String {
        match (group, &self.cluster) {
            (KeyGroup::Fence, Some(_)) => slots::in_slot_of(FENCE_PREFIX, resource),
            (KeyGroup::WriterWaiting, Some(_)) => {
                slots::in_slot_of(WRITER_WAITING_PREFIX, resource)
            }
            (KeyGroup::Marker, _) => self.marker_key().to_owned(),
            (group, None) => group.key(resource),
        }
    }

    /// The node's address without credentials, e.g. `127.0.0.1:6379` or `/run/redis.sock/2`.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// A subscriber that hears this node's lock keys freed, on a connection of its own.
    pub(crate) fn subscriber(&self, watch: Watch) -> Subscriber {
        Subscriber::new(&self.client, self.settings.connect_timeout, watch)
    }

    /// What makes two nodes the same server: the address, whatever the db.
    pub(crate) fn server_identity(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }

    /// The live connection, made (with its health check) if there is none.
    async fn live(&self) -> Result<Arc<Live>, NodeError> {
        if let Some(live) = self.live.load_full() {
            if !live.condemned.load(Ordering::Acquire) {
                return Ok(live);
            }
            self.forget(live.generation);
        }
        let attempt = {
            let mut connecting = lock(&self.connecting);
            // Published while we waited for the lock (invariant 1).
            if let Some(live) = self.live.load_full() {
                return Ok(live);
            }
            connecting
                .get_or_insert_with(|| self.connect().boxed().shared())
                .clone()
        };
        let result = attempt.clone().await;
        let mut connecting = lock(&self.connecting);
        if connecting
            .as_ref()
            .is_some_and(|current| current.ptr_eq(&attempt))
        {
            *connecting = None;
            // On an error nothing is published: the next request tries again.
            if let Ok(live) = &result {
                self.live.store(Some(Arc::clone(live)));
            }
        }
        result
    }

    /// A connection attempt: connect, check health, load scripts; bounded by the connect timeout
    /// so that a stalled server cannot leave the slot connecting forever.
    fn connect(&self) -> impl Future<Output = Result<Arc<Live>, NodeError>> + Send + 'static {
        let client = self.client.clone();
        let settings = self.settings;
        let memory = Arc::clone(&self.memory);
        let checks = Arc::clone(&self.checks);
        let generation = self.generations.fetch_add(1, Ordering::Relaxed);
        let epoch = self.epoch;
        let marker = self.marker();
        let first_sight = self.first_sight.clone();
        let claim = self.claim.clone();
        let replicated = self.replicated.clone();
        async move {
            let attempt = async {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(settings.connect_timeout))
                    // We bound every request ourselves, per round (see the module docs).
                    .set_response_timeout(None);
                let mut conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(|e| NodeError::from_redis(&e))?;
                // Best-effort: a user who may not run `SCRIPT` still gets every script by the
                // `EVAL` fallback; a connection that broke fails the health check next.
                let mut pipe = redis::pipe();
                for script in crate::nodes::scripts::all() {
                    pipe.cmd("SCRIPT").arg("LOAD").arg(script.source).ignore();
                }
                let _ = pipe.ignore_errors().query_async::<Value>(&mut conn).await;
                let _one_at_a_time = checks.lock().await;
                let health = check_health(
                    &mut conn,
                    &settings.trust,
                    &memory,
                    &marker,
                    first_sight.as_ref(),
                    claim.as_ref().map(|(ids, claimant)| (&**ids, &**claimant)),
                    replicated.as_deref(),
                )
                .await?;
                Ok(Arc::new(Live::new(
                    conn, generation, epoch, &health, &memory,
                )))
            };
            tokio::time::timeout(settings.connect_timeout, attempt)
                .await
                .unwrap_or_else(|_| {
                    Err(NodeError::Unreachable(format!(
                        "no connection within the connect timeout ({:?})",
                        settings.connect_timeout
                    )))
                })
        }
    }

    /// Repeats the health check in the background when it is older than [`HEALTH_RECHECK`] at
    /// `tick` ([`Live::tick`]).
    fn maybe_recheck(&self, live: &Arc<Live>, tick: u64) {
        if !live.health_is_stale(tick) || live.rechecking.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(self.recheck(Arc::clone(live)));
    }

    /// Repeats the health check now on the live connection, if there is one: after an
    /// operator's vouch from this very manager ([`Redlock::mark_nodes`](crate::Redlock::mark_nodes)),
    /// so that its next lock does not wait for the next recheck.
    pub(crate) async fn recheck_now(&self) {
        if let Some(live) = self.live.load_full() {
            live.rechecking.store(true, Ordering::Release);
            self.recheck(live).await;
        }
    }

    /// The health check again on `live`'s connection, its verdict recorded (`rechecking` is
    /// cleared at the end).
    fn recheck(&self, live: Arc<Live>) -> impl Future<Output = ()> + Send + 'static {
        let (trust, memory) = (self.settings.trust, Arc::clone(&self.memory));
        let checks = Arc::clone(&self.checks);
        let timeout = self.settings.connect_timeout;
        let marker = self.marker();
        let first_sight = self.first_sight.clone();
        let claim = self.claim.clone();
        let replicated = self.replicated.clone();
        async move {
            let _one_at_a_time = checks.lock().await;
            let mut conn = live.conn.clone();
            let claim = claim.as_ref().map(|(ids, claimant)| (&**ids, &**claimant));
            let check = check_health(
                &mut conn,
                &trust,
                &memory,
                &marker,
                first_sight.as_ref(),
                claim,
                replicated.as_deref(),
            );
            match tokio::time::timeout(timeout, check).await {
                Ok(Ok(health)) => live.set_health(&health, &memory),
                // A server that cannot be checked is not trusted on this connection any more:
                // the next request makes a new one, health check first (invariant 6).
                _ => live.condemned.store(true, Ordering::Release),
            }
            live.rechecking.store(false, Ordering::Release);
        }
    }

    /// Forgets a connection that broke, so the next request makes a new one.
    fn forget(&self, generation: u64) {
        let _writer = lock(&self.connecting); // invariant 4
        if self
            .live
            .load()
            .as_ref()
            .is_some_and(|live| live.generation == generation)
        {
            self.live.store(None);
        }
    }

    /// A request to this node timed out: its round's deadline passed without its reply. After
    /// [`TIMEOUTS_BEFORE_REPLACING`] in a row (no reply in between) the connection is replaced
    /// (invariant 6).
    pub(crate) fn timed_out(&self) {
        let Some(live) = self.live.load_full() else {
            return;
        };
        if live.timeouts.fetch_add(1, Ordering::AcqRel) + 1 == TIMEOUTS_BEFORE_REPLACING {
            tracing::warn!(
                node = %self.label,
                "no reply to {TIMEOUTS_BEFORE_REPLACING} requests in a row: replacing the connection"
            );
            self.forget(live.generation);
        }
    }

    /// Whether the node's `maxmemory-policy` lets it evict lock keys, as far as we know.
    pub(crate) fn may_evict(&self) -> bool {
        self.live
            .load()
            .as_ref()
            .is_some_and(|live| live.may_evict.load(Ordering::Acquire))
    }

    /// As if this client's clocks had stood still for `by` ([`ClockEstimate::stood_still`]).
    #[cfg(test)]
    pub(crate) fn clock_stood_still(&self, by: Duration) {
        if let Some(live) = self.live.load_full() {
            live.clock.stood_still(by);
        }
    }

    /// This node's quarantine, as far as we know now (`None` when trusted or not connected).
    pub(crate) fn quarantine(&self) -> Option<Quarantine> {
        let live = self.live.load_full()?;
        let now = Instant::now();
        let left = live.quarantined_for(live.tick(now))?;
        Some(self.explained(left, now))
    }

    /// The state of the marker this client's last health check saw (`None` with the quarantine
    /// off, or before the first check).
    pub(crate) fn marker_state(&self) -> Option<MarkerState> {
        let live = self.live.load_full()?;
        let value = live.marker.load_full()?;
        let trusted = live.quarantined_for(live.tick(Instant::now())).is_none();
        Some(MarkerState::of(&value, trusted))
    }

    /// A quarantine of `left` at `now`, with the reason the last verdict gave.
    fn explained(&self, left: Duration, now: Instant) -> Quarantine {
        let known = lock(&self.memory).quarantine(now);
        Quarantine {
            left,
            ..known.unwrap_or(Quarantine::new(left, QuarantineReason::LostMarker))
        }
    }

    /// The live connection, made (with its health check) if there is none, for one request:
    /// anything sent on it in the poll this returns in is queued before anything sent later
    /// (invariant 5).
    pub(crate) async fn connection(&self) -> Result<Connection<'_>, NodeError> {
        Ok(Connection {
            server: self,
            live: self.live().await?,
            vote: false,
            asking: false,
            acknowledged_by: Mutex::new(None),
            shortfall: Mutex::new(None),
        })
    }

    /// Waits, until `deadline` at most, for this server to have run every request queued on its
    /// connection so far: their replies come before that of a `PING` queued behind them
    /// (invariant 5). Without a connection, nothing is queued.
    pub(crate) async fn drain(&self, deadline: Instant) {
        let Some(live) = self.live.load_full() else {
            return;
        };
        let connection = Connection {
            server: self,
            live,
            vote: false,
            asking: false,
            acknowledged_by: Mutex::new(None),
            shortfall: Mutex::new(None),
        };
        let ping = connection.query(redis::cmd("PING"), false);
        let _ = bounded(deadline, ping).await;
    }
}

/// One request's hold on a server's live connection: what a [`node`](crate::nodes::node) sends its
/// commands through. [`Connection::finish`] ends the request once its reply is in.
pub(crate) struct Connection<'s> {
    server: &'s Server,
    live: Arc<Live>,
    /// Whether what is sent on it is a vote: on a cluster's master, each command is then
    /// followed by a `WAIT` for the shard's replicas (invariant 8).
    vote: bool,
    /// Whether each command is preceded by `ASKING` (a slot being imported: `ASK`).
    asking: bool,
    /// On a replicated primary: the replicas online in a vote's own reading, once its `WAIT`
    /// answered that every one of them acknowledged it (`succession` invariant 2).
    acknowledged_by: Mutex<Option<Vec<String>>>,
    /// On a replicated primary: why the vote sent on it did not reach the replicas it must
    /// (`coverage`), if it did not.
    shortfall: Mutex<Option<Shortfall>>,
}

impl Connection<'_> {
    /// Why the vote sent on this connection is no vote although the node answered, if so:
    /// it did not reach every replica it must (`coverage`). Weighed with
    /// [`Connection::finish`]'s verdict: a quarantined node's reply is no vote either, and its
    /// quarantine says why, with its remedy.
    pub(crate) fn uncovered(&self) -> Option<NodeError> {
        lock(&self.shortfall)
            .take()
            .map(|shortfall| NodeError::Server(shortfall.to_string()))
    }

    /// The vote sent at `sent` on this connection was done (it wrote): every replica its `WAIT`
    /// covered had every write the primary executed before `sent` (`succession` invariant 2).
    pub(crate) fn vote_done(&self, sent: Instant) {
        let (Some(replicated), Some(replicas)) = (
            self.server.replicated.as_deref(),
            lock(&self.acknowledged_by).take(),
        ) else {
            return;
        };
        let Some(history) = self.live.history.load_full() else {
            return;
        };
        let mut lineage = lock(&replicated.lineage);
        for address in &replicas {
            lineage.caught_up(address, &history, sent);
        }
    }

    /// Whether acquisitions on this connection read the marker back (the quarantine is on).
    pub(crate) fn checks_votes(&self) -> bool {
        self.server.settings.trust.enabled
    }

    /// Precedes each command with `ASKING`, in the same pipeline: this server is importing the
    /// slot and another one answered `ASK` ([`shards`](crate::nodes::shards) invariant 3).
    pub(crate) fn asking(mut self, asking: bool) -> Self {
        self.asking = asking;
        self
    }

    /// Marks what is sent on this connection as a vote (invariant 8).
    pub(crate) fn voting(mut self, vote: bool) -> Self {
        self.vote = vote;
        self
    }

    /// How many replicas a vote on this connection waits for, and how long at most
    /// (invariant 8): a cluster master's shard's, a replicated primary's (`succession`
    /// invariant 1); none for anything else, or none to wait for.
    fn waits_for(&self) -> Option<(u32, u64)> {
        if !self.vote {
            return None;
        }
        let cluster = self.server.cluster.as_ref();
        let wanted = cluster
            .map(|cluster| (cluster.replicas.load(Ordering::Acquire), cluster.wait_ms))
            .or_else(|| {
                let replicated = self.server.replicated.as_deref()?;
                Some((replicated.replicas(), replicated.wait_ms))
            });
        wanted.filter(|(replicas, _)| *replicas > 0)
    }

    /// Whether a request may go as plain commands in one pipeline, with nothing to add to it:
    /// a standalone master that no vote waits on (not a cluster's master, nor a replicated
    /// primary, whose votes go through [`Connection::query`]).
    pub(crate) fn standalone(&self) -> bool {
        self.server.cluster.is_none() && self.server.replicated.is_none()
    }

    /// Whether this connection goes to a master of a Redis Cluster node, whose scripts may
    /// only name keys of one slot (so the marker is read after a script, never inside it).
    pub(crate) fn in_cluster(&self) -> bool {
        self.server.cluster.is_some()
    }

    /// Ends the request after its reply (or its error), `now`: the one clock reading of the
    /// reply, for both the quarantine verdict it returns (how much longer the server is quarantined, if it
    /// is) and the recheck decision. A server trusted "from now" by the health check of the
    /// connection just made is not reported as quarantined. A reply came, so the connection's
    /// run of timeouts ends (invariant 6).
    pub(crate) fn finish(self, now: Instant) -> Option<Quarantine> {
        let tick = self.live.tick(now);
        if self.live.timeouts.load(Ordering::Relaxed) != 0 {
            self.live.timeouts.store(0, Ordering::Relaxed);
        }
        self.server.maybe_recheck(&self.live, tick);
        let left = self.live.quarantined_for(tick)?;
        Some(self.server.explained(left, now))
    }

    /// Sends `cmd`; when `checked`, followed on the same connection by a read of the marker,
    /// which must still hold what the health check saw (invariant 7); on a cluster's master, a
    /// vote is then followed by `WAIT` for the shard's replicas (invariant 8).
    pub(crate) async fn query(&self, cmd: Cmd, checked: bool) -> Result<Value, NodeError> {
        let mut conn = self.live.conn.clone();
        let waits_for = self.waits_for();
        // A replicated primary's vote reads back its replicas (`succession` invariant 1), unless
        // the chaos run's replaced rule trusts it.
        let replicated = self
            .server
            .replicated
            .as_deref()
            .filter(|r| self.vote && !r.trusting);
        // The replicas this vote must reach, as known before it is sent (`coverage`
        // invariant 1).
        let required = replicated.map(Replicated::required);
        // Each replica it must reach is credited only where the census found it (`coverage`
        // invariant 2): read first when none read the replicas online now.
        if let Some(census) = replicated
            .filter(|r| r.counting == Counting::ByIdentity)
            .and_then(|r| r.census_for_vote(self.server.settings.connect_timeout))
        {
            census.await;
        }
        if !checked && waits_for.is_none() && !self.asking && replicated.is_none() {
            return cmd
                .query_async(&mut conn)
                .await
                .map_err(|e| self.failed(&e));
        }
        let mut pipe = redis::pipe();
        if self.asking {
            pipe.cmd("ASKING").ignore();
        }
        pipe.add_command(cmd);
        // A cluster master's history is read back with its marker (invariant 7).
        let history = self
            .live
            .history
            .load_full()
            .filter(|_| checked || replicated.is_some());
        if checked {
            pipe.cmd("GET").arg(self.server.marker_key());
        }
        let reads_replication = history.is_some() || replicated.is_some();
        if reads_replication {
            pipe.cmd("INFO").arg("replication");
        }
        let read_after = replicated.is_some_and(|r| r.counting == Counting::ByIdentity);
        let (replies, acknowledged, after) = match waits_for {
            // Invariant 8.
            Some((replicas, wait_ms)) => self
                .live
                .acks
                .vote(&conn, pipe, replicas, wait_ms, read_after)
                .await
                .map(|(replies, acks, after)| (replies, Some((replicas, acks)), after))
                .map_err(|e| self.failed(&e))?,
            None => (
                pipe.ignore_errors()
                    .query_async::<Vec<Value>>(&mut conn)
                    .await
                    .map_err(|e| self.failed(&e))?,
                None,
                None,
            ),
        };
        let mut replies = replies.into_iter();
        let reply = replies.next();
        if checked {
            let marker = replies.next();
            // An error reply to the marker's `GET` (on a cluster, `MOVED` once the marker's slot
            // moved) says nothing about the data, so it quarantines nothing; but the vote has
            // no evidence, so it is not a vote either.
            if let Some(Value::ServerError(e)) = &marker {
                return Err(NodeError::from_redis(&RedisError::from(e.clone())));
            }
            self.check_marker(marker.as_ref());
        }
        let mut shortfall = None;
        if reads_replication {
            let read = info_text(replies.next());
            if let (Some(replicated), Some(required)) = (replicated, &required) {
                shortfall = self
                    .covered(replicated, required, read.as_deref(), after, acknowledged)
                    .err();
            }
            if let Some(expected) = history {
                self.check_history(&expected, read)?;
            }
        }
        let reply = reply
            .unwrap_or(Value::Nil)
            .extract_error()
            .map_err(|e| self.failed(&e))?;
        if let Some(shortfall) = shortfall {
            // A primary cut off from its replicas may be one deposed behind its address
            // (`endpoint` invariant 4): the next request goes through the address again.
            if self.behind_endpoint() {
                self.server.forget(self.live.generation);
            }
            // Not a vote: [`Connection::uncovered`] says so once the quarantine verdict is
            // read, unless the node is quarantined, which says it first.
            *lock(&self.shortfall) = Some(shortfall);
        }
        if let Some((wanted, acknowledged)) = acknowledged
            && acknowledged < wanted
            && replicated.is_none()
        {
            return Err(NodeError::Server(format!(
                "only {acknowledged} of the shard's {wanted} replicas acknowledged the write in \
                 time: not a vote (it might not survive a failover)"
            )));
        }
        Ok(reply)
    }

    /// Whether a replicated primary's vote reached every replica it must, each by its own
    /// acknowledgement (`coverage`): `before` is the primary's `INFO replication` right after
    /// the write, `after` the one after the `WAIT`. Both readings tell the node what its
    /// replicas are now; the replicas credited are the lineage's, once the vote is done
    /// (`succession` invariant 2).
    fn covered(
        &self,
        replicated: &Replicated,
        required: &[String],
        before: Option<&str>,
        after: Option<Value>,
        acknowledged: Option<(u32, u32)>,
    ) -> Result<(), Shortfall> {
        let before_text = before.ok_or(Shortfall::Unreadable)?;
        let before = Replicas::read(before_text);
        replicated.observe(before_text, Instant::now());
        let after_text = info_text(after);
        let after = after_text.as_deref().map(|text| {
            replicated.observe(text, Instant::now());
            Replicas::read(text)
        });
        let (waited, acknowledged) = acknowledged.unwrap_or((0, 0));
        let vote = Vote {
            required,
            floor: replicated.floor,
            before: &before,
            after: after.as_ref(),
            waited,
            acknowledged,
        };
        let credited = credit(&vote, replicated.counting, |address| {
            replicated.confirmed(address)
        })?;
        if !credited.is_empty() {
            *lock(&self.acknowledged_by) = Some(credited);
        }
        Ok(())
    }

    /// Sends `pipe`'s commands in one write and returns each one's reply, a command's error
    /// as its [`Value::ServerError`]. For requests that are more than one command on a standalone
    /// master (no `ASKING`, no `WAIT`: see [`Connection::query`] for those).
    pub(crate) async fn pipeline(
        &self,
        pipe: &mut redis::Pipeline,
    ) -> Result<Vec<Value>, NodeError> {
        debug_assert!(self.standalone() && !self.asking);
        let mut conn = self.live.conn.clone();
        pipe.ignore_errors()
            .query_async(&mut conn)
            .await
            .map_err(|e| self.failed(&e))
    }

    /// Our estimate of the server's clock at `now`, in µs, and its reading's age, if this
    /// connection read it recently.
    pub(crate) fn clock_estimate(&self, now: Instant) -> Option<(u64, Duration)> {
        self.live.clock.now(now)
    }

    /// Records the server's clock, `node_us`, read by a request sent at `asked` whose reply came
    /// at `received` (see [`ClockEstimate::saw`] for `grain_us`).
    pub(crate) fn saw_clock(&self, node_us: u64, asked: Instant, received: Instant, grain_us: u64) {
        self.live.clock.saw(node_us, asked, received, grain_us);
    }

    /// The key of `group` that goes with `resource` on this server.
    pub(crate) fn group_key(&self, group: KeyGroup, resource: &str) -> String {
        self.server.group_key(group, resource)
    }

    /// The node's marker key (quarantine invariant 2).
    pub(crate) fn marker_key(&self) -> &str {
        self.server.marker_key()
    }

    /// Whether this connection goes to a replicated node's primary behind a fixed address that
    /// moves on failover (`endpoint`).
    fn behind_endpoint(&self) -> bool {
        self.server
            .replicated
            .as_deref()
            .is_some_and(|r| r.behind_endpoint)
    }

    /// A redis-rs error on this connection: forgets the connection if it broke, or if behind a
    /// fixed address the server says it is a replica now (`endpoint` invariant 4).
    fn failed(&self, e: &RedisError) -> NodeError {
        let moved = e.code() == Some("READONLY") && self.behind_endpoint();
        if moved || e.is_unrecoverable_error() || e.is_io_error() || e.is_connection_dropped() {
            self.server.forget(self.live.generation);
        }
        NodeError::from_redis(e)
    }

    /// Compares a marker read back after a vote with the health check's: anything else is
    /// evidence of a data loss, and the vote does not count (invariant 7).
    pub(crate) fn check_marker(&self, read: Option<&Value>) {
        let expected = self.live.marker.load();
        // The common case, every vote of a node whose marker did not change: nothing to parse.
        if let (Some(Value::BulkString(read)), Some(expected)) = (read, expected.as_deref())
            && read.as_slice() == expected.as_bytes()
        {
            return;
        }
        // The same marker is the same id, whatever a vouch rewrote around it (`marker`
        // invariant 1).
        let read = match read {
            Some(Value::BulkString(read)) => std::str::from_utf8(read).ok(),
            _ => None,
        };
        let same = match (read, expected.as_deref()) {
            (Some(read), Some(expected)) => marker::id_of(read) == marker::id_of(expected),
            // No marker known: the quarantine is off (nothing is checked then).
            (_, None) => true,
            _ => false,
        };
        // But a first-sight marker whose time moved later since the health check was extended
        // by a group's first look (`first_sight` invariant 1): that group counts on no vote
        // being counted here until then, so this one is not, and the node is checked again.
        if let (true, Some(read), Some(expected)) = (same, read, expected.as_deref())
            && let Some(extended) = marker::extended(expected, read)
        {
            // Recorded in the memory first, under its lock, as a loss is: a health check judged
            // before this must not lower it when it lands after (`Live::set_health`).
            let until = Instant::now() + extended;
            lock(&self.server.memory).held_off(until);
            self.live.lost_data(until);
            return;
        }
        if !same {
            let server = self.server;
            let now = Instant::now();
            let until = lock(&server.memory).lost_data(
                &server.settings.trust,
                now,
                QuarantineReason::LostMarker,
            );
            self.live.lost_data(until);
            tracing::warn!(node = %server.label, quarantined_ms = until.saturating_duration_since(now).as_millis(), "node lost its data (marker key gone or changed)");
        }
    }

    /// Compares a cluster master's `master_replid`, read back after a vote, with the health
    /// check's: a master demoted, resynchronised from its promoted replica and promoted again
    /// (a failback) keeps our connection and shows its own marker, but not the locks the
    /// replica lacked. Another history is evidence of that loss: the vote does not count, the
    /// node is out for `max_ttl`, and checked again, which quarantines it as a promoted replica
    /// (quarantine invariant 6). An unreadable reply is no evidence either way: not a vote.
    fn check_history(&self, expected: &str, read: Option<String>) -> Result<(), NodeError> {
        let Some(read) = read else {
            return Err(NodeError::Server(
                "INFO replication gave no reply a vote could check: not a vote".to_owned(),
            ));
        };
        if info_field(&read, "master_replid") == Some(expected) {
            return Ok(());
        }
        let server = self.server;
        let now = Instant::now();
        let until = lock(&server.memory).lost_data(
            &server.settings.trust,
            now,
            QuarantineReason::Resynchronised,
        );
        self.live.lost_data(until);
        tracing::warn!(node = %server.label, quarantined_ms = until.saturating_duration_since(now).as_millis(), "node's replication history changed under our connection (a failover and a failback): its locks may be gone");
        Ok(())
    }

    /// Runs `script` on `keys` (then, for each of the script's key groups, every key's key of that
    /// group) with `value` and `tail` as arguments: `EVALSHA`, repeated once as `EVAL` on
    /// `NOSCRIPT`; checked as [`Connection::query`].
    pub(crate) async fn eval<K: AsRef<str> + redis::ToRedisArgs>(
        &self,
        checked: bool,
        script: &LuaScript,
        keys: &[K],
        value: Option<&str>,
        tail: impl redis::ToRedisArgs,
    ) -> Result<Value, NodeError> {
        let grouped: Vec<String> = script
            .groups
            .iter()
            .flat_map(|group| {
                keys.iter()
                    .map(|k| self.server.group_key(*group, k.as_ref()))
            })
            .collect();
        let (args, bytes) = keys
            .iter()
            .map(AsRef::as_ref)
            .chain(grouped.iter().map(String::as_str))
            .chain(value)
            .fold(
                (2 + tail.num_of_args(), NUMBER * (1 + tail.num_of_args())),
                |(n, b), arg| (n + 1, b + arg.len()),
            );
        let build = |verb: &str, body: &str| {
            let mut cmd = command(verb, args, body.len() + bytes);
            cmd.arg(body).arg(keys.len() + grouped.len()).arg(keys);
            cmd.arg(&grouped).arg(value).arg(&tail);
            cmd
        };
        let result = match self.query(build("EVALSHA", &script.sha), checked).await {
            Err(NodeError::Server(e)) if e.starts_with("NOSCRIPT") => {
                self.query(build("EVAL", script.source), checked).await
            }
            other => other,
        };
        let marker = checked.then_some(self.server.marker_key());
        result.map_err(|e| {
            let used = keys
                .iter()
                .map(AsRef::as_ref)
                .chain(grouped.iter().map(String::as_str));
            naming_keys(e, used.chain(marker))
        })
    }
}

/// The text of an `INFO` reply, if it is one.
fn info_text(reply: Option<Value>) -> Option<String> {
    match reply {
        Some(Value::BulkString(bytes)) => String::from_utf8(bytes).ok(),
        Some(Value::VerbatimString { text, .. }) => Some(text),
        _ => None,
    }
}

/// `request`, or a [`NodeError::Timeout`] once `deadline` passed.
pub(crate) async fn bounded<T>(
    deadline: Instant,
    request: impl Future<Output = Result<T, NodeError>>,
) -> Result<T, NodeError> {
    tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), request)
        .await
        .unwrap_or(Err(NodeError::Timeout))
}

/// A `NOPERM` about keys does not say which (Redis: "no permissions to access one of the keys
/// used as arguments"): the library does, so an operator can fix the ACL without guessing.
pub(crate) fn naming_keys<'k>(error: NodeError, keys: impl Iterator<Item = &'k str>) -> NodeError {
    match error {
        NodeError::Server(why) if why.starts_with("NOPERM") => {
            let keys: Vec<&str> = keys.take(6).collect();
            NodeError::Server(format!(
                "{why}: the request uses the keys {} (see docs/acl.md)",
                keys.join(", ")
            ))
        }
        other => other,
    }
}

/// The most digits a `u64` or `usize` argument takes.
pub(crate) const NUMBER: usize = 20;

/// A command with room for `args` more arguments of `bytes` bytes in all, so that building it
/// never grows its buffers: a `realloc` takes glibc's arena lock every time, and those were the
/// largest source of lock waits between the runtime's worker threads in `examples/bench.rs`
/// (`perf record -e context-switches`, 32 tasks).
pub(crate) fn command(verb: &str, args: usize, bytes: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(1 + args, verb.len() + bytes);
    cmd.arg(verb);
    cmd
}

/// Removes the URL's password from a message that might quote it (a parser error may echo the
/// part it could not read).
pub(crate) fn scrub(message: &str, url: &str) -> String {
    let redacted = redact_url(url);
    let mut out = message.replace(url, &redacted);
    for secret in secrets_in(url) {
        out = out.replace(&secret, "***");
    }
    out
}
