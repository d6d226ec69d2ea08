//! One file because invariant 2 runs from parsing `CLUSTER NODES` through the map to each vote.
//!
//! A Redlock node that is a whole Redis Cluster: each request goes to the master that serves its
//! lock key's slot, and a failover of that slot's shard does not give a lock twice.
//!
//! A cluster node is named by `redis+cluster://[user:password@]host:port[,host:port…]` (or
//! `rediss+cluster://` for TLS): a few seed addresses, from which the slot map is read with
//! `CLUSTER NODES`. Every master in that map is a [`Server`] of its own, with everything a plain
//! node has: one multiplexed connection, the health check before its first vote, the restart
//! quarantine, the marker read back after each acquisition, and its `run_id` claimed against the
//! manager's other nodes (`127.0.0.1:7001 of cluster(127.0.0.1:7000)`,
//! [`aliases`](crate::protocol::aliases) invariant 1: the same cluster listed twice, or one of
//! its masters listed plain as well, would otherwise vote twice). The engine sees one node, whose
//! answer is that of the master that owns the slot.
//!
//! We route by hand rather than through redis-rs's cluster client because each master must be
//! judged (health check, quarantine, marker) before any reply from it counts, and a vote must be
//! followed by `WAIT` on the very connection that carried it; redis-rs's cluster connection
//! opens and replaces its per-node connections behind our back, with no hook for either. What
//! the routing needs is small: a slot map, refreshed when a reply says it is out of date.
//!
//! # Invariants
//! 1. **All keys of a request are in one slot.** The lock keys of one lock must hash to one slot
//!    (a set needs a common hash tag, refused otherwise with a message that says so), and every
//!    other key a script is given is named into that slot ([`slots`](crate::protocol::slots)).
//! 2. **A failover of a shard does not give a lock twice.** With the quarantine on, a master
//!    newly serving a slot (a promoted replica, or a slot moved to it) finds a marker that names
//!    another server and is quarantined for `max_ttl`, by every client
//!    ([`quarantine`](crate::protocol::quarantine) invariant 6): every lock counted on the old
//!    master has expired before the new one votes, provided the old master stopped granting before
//!    the promotion (Redis Cluster's own failovers; not an operator's `TAKEOVER` while the old
//!    master still serves clients). With `wait_for_replicas` (the default when the quarantine is
//!    off), each vote is also followed by `WAIT n` for the `n` replicas the cluster knows for
//!    the shard, failed ones included, and for [`REPLICA_MEMORY`] as many as a map listed
//!    before (a new master does not list its demoted master at once); fewer acknowledgements
//!    within half the node timeout and it is not a vote ([`server`](crate::nodes::server) invariant
//!    8): a failover promotes one of those replicas, which has the key. The argument, and what
//!    each mechanism does not cover, is in `docs/cluster.md`, *Redis Cluster nodes*.
//! 3. **A stale map costs a round, never safety.** A request sent to a server that no longer
//!    serves the slot is answered `MOVED` (or fails), which is an error, not a vote; the map is
//!    read again and the request sent once more to the new owner, within the same deadline. A
//!    request answered `ASK` (the slot is migrating and the key is not at the source) goes to
//!    the importing master with `ASKING` in the same pipeline, where Redis itself decides:
//!    the key if it was moved, `TRYAGAIN` for a multi-key request on keys not all there.
//! 4. **A master that takes over a slot is judged like a new node.** It gets a [`Server`] of its
//!    own on first sight, whose health check runs before its first vote; its marker key is named
//!    into a slot it serves, and when it no longer serves that slot the server is replaced, so
//!    that a marker moved with its slot is never mistaken for the new owner's own.
//! 5. **Reading the map never blocks a round past its deadline, and never storms the cluster.**
//!    It runs as a task of its own, shared by every request that needs it (a round that gives
//!    up does not cancel it), asks every seed and known master at once, each bounded by the
//!    connect timeout, and keeps the answer with the largest config epoch among those in within
//!    [`MAP_GRACE`] of the first (a node cut off from the others may describe an old
//!    configuration, and a hung one cannot hold the read up). It happens at most every
//!    [`MAP_READ_INTERVAL`], and the map is marked fresh only once a new one is stored.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;

use crate::base::error::{ConfigError, redact_url};
use crate::base::resources::Resources;
use crate::base::sync::lock;
use crate::nodes::connect::connect_once;
use crate::nodes::node_error::NodeError;
use crate::nodes::run_ids::RunIds;
use crate::nodes::server::{InCluster, Server, ServerSettings, scrub};
use crate::nodes::shared_reading::{self, SharedReading};
use crate::nodes::subscriber::{Subscriber, Watch};
use crate::nodes::urls;
use crate::protocol::aliases::Claimant;
use crate::protocol::quarantine::{Quarantine, cluster_marker_key};
use crate::protocol::slots::{self, slot_of};

/// The URL schemes that name a Redis Cluster node, and the scheme of its servers.
const SCHEMES: [(&str, &str); 2] = [
    ("redis+cluster://", "redis"),
    ("rediss+cluster://", "rediss"),
];

/// How old a slot map may get before a request reads it again: a topology change that sends no
/// `MOVED` our way (a replica added to a shard) is seen within this.
const MAP_REFRESH: Duration = Duration::from_secs(10);

/// The shortest time between two map reads, however many replies say the map is out of date
/// (a dead shard answers every request with an error): invariant 5.
const MAP_READ_INTERVAL: Duration = Duration::from_millis(100);

/// The address in an `ASK <slot> <host:port>` error.
fn asked_to(why: &str) -> Option<&str> {
    let mut words = why.strip_prefix("ASK ")?.split_whitespace();
    let _slot = words.next()?;
    words.next()
}

/// How long a range's replicas count is remembered after a map listed them (invariant 2): a
/// shard that lost a replica for good (`CLUSTER FORGET`) votes again without it after this.
const REPLICA_MEMORY: Duration = Duration::from_secs(60);

/// How long the other nodes asked for the map may still answer after the first did: the answer
/// with the largest config epoch wins (a node cut off from the others may describe an old
/// configuration).
const MAP_GRACE: Duration = Duration::from_millis(20);

/// Whether `url` names a Redis Cluster node.
pub(crate) fn is_cluster_url(url: &str) -> bool {
    urls::scheme_of(url.trim_start(), &SCHEMES).is_some()
}

/// A cluster URL, taken apart: its servers' scheme, the credentials, and the seed addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ClusterUrl {
    scheme: &'static str,
    /// `user:password@`, or empty.
    userinfo: String,
    /// `host:port` of each seed.
    seeds: Vec<String>,
}

impl ClusterUrl {
    fn parse(url: &str) -> Result<Self, String> {
        let url = url.trim();
        let (prefix, scheme) = urls::scheme_of(url, &SCHEMES)
            .ok_or("a Redis Cluster URL starts with redis+cluster:// or rediss+cluster://")?;
        let rest = &url[prefix.len()..];
        if let Some(i) = rest.find(['/', '?']) {
            return Err(format!(
                "a Redis Cluster node takes only addresses, not {:?} (a cluster has no databases)",
                &rest[i..]
            ));
        }
        let (userinfo, hosts) = urls::userinfo_and_hosts(rest);
        let seeds = urls::addresses(hosts, 6379);
        if seeds.is_empty() {
            return Err("no seed address (redis+cluster://host:port[,host:port…])".to_owned());
        }
        Ok(Self {
            scheme,
            userinfo,
            seeds,
        })
    }

    /// The URL of the server at `address` (`host:port`), with the cluster's credentials.
    fn server_url(&self, address: &str) -> String {
        format!("{}://{}{address}", self.scheme, self.userinfo)
    }
}

/// One range of slots as `CLUSTER NODES` lists it: its master, and the master's replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    low: u16,
    high: u16,
    /// `host:port` of the master.
    master: String,
    replicas: u32,
    /// Each replica's `host:port` (or its id, without an address) and whether the cluster
    /// marked it failed.
    replica_states: Vec<(String, bool)>,
}

/// The shard that serves a resource on a Redis Cluster node, as the slot map last read says:
/// for [`Redlock::status`](crate::Redlock::status).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shard {
    /// The resource's hash slot.
    pub slot: u16,
    /// The master that serves it, `host:port`.
    pub master: String,
    /// Its replicas, `host:port`, each with whether the cluster marked it failed.
    pub replicas: Vec<(String, bool)>,
}

/// The slot map: which master serves which slots.
#[derive(Debug)]
struct SlotMap {
    /// Sorted by `low`, not overlapping.
    shards: Vec<(Range, Arc<Server>)>,
    read_at: Instant,
}

impl SlotMap {
    fn shard(&self, slot: u16) -> Option<&(Range, Arc<Server>)> {
        let i = self.shards.partition_point(|(range, _)| range.high < slot);
        self.shards.get(i).filter(|(range, _)| range.low <= slot)
    }

    fn owner(&self, slot: u16) -> Option<&Arc<Server>> {
        self.shard(slot).map(|(_, server)| server)
    }
}

/// A master's server and the slot its marker key is named into.
#[derive(Debug)]
struct Master {
    server: Arc<Server>,
    marker_slot: u16,
}

/// A Redlock node that is one Redis Cluster.
pub(crate) struct Shards {
    /// Shared with the background task that reads the map (invariant 5).
    inner: Arc<Inner>,
    /// A client for the first seed: the subscriber's connection.
    seed_client: redis::Client,
}

struct Inner {
    url: ClusterUrl,
    /// `cluster(seed,…)`: the node's label.
    label: String,
    settings: ServerSettings,
    tls_roots: Option<Vec<u8>>,
    /// How long a vote's `WAIT` may block, in ms: half the node timeout, so that replicas that
    /// do not answer are reported as such within the round rather than as a timeout, and the
    /// connection (which a blocked `WAIT` holds up for every request behind it) is free again
    /// before the round ends. `None`: votes do not wait for replicas.
    wait_ms: Option<u64>,
    map: ArcSwapOption<SlotMap>,
    /// The masters of the last map, by address (invariant 4).
    masters: Mutex<HashMap<String, Master>>,
    /// The map read under way, if any (invariant 5).
    reading: Mutex<Option<SharedReading<SlotMap>>>,
    /// Set by a reply that says the map is out of date (invariant 3); cleared only once a new
    /// map is stored.
    stale: AtomicBool,
    /// For each range (by its first slot), the most replicas a map listed for it and when
    /// (invariant 2).
    replicas_seen: Mutex<HashMap<u16, (u32, Instant)>>,
    /// The manager's record of its servers' `run_id`s, set once before the first map is read:
    /// each master claims its own in it (`aliases` invariant 1).
    run_ids: OnceLock<Arc<RunIds>>,
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards")
            .field("seeds", &self.inner.url.seeds)
            .finish()
    }
}

impl Shards {
    /// Parses a `redis+cluster://` URL (without connecting). With `wait_for`, votes wait that
    /// long at most (the node timeout) for the shard's replicas (invariant 2).
    pub(crate) fn new(
        url: &str,
        settings: ServerSettings,
        tls_roots: Option<&[u8]>,
        wait_for: Option<Duration>,
    ) -> Result<Self, ConfigError> {
        let invalid = |reason: String| ConfigError::InvalidUrl {
            url: redact_url(url),
            reason,
        };
        let parsed = ClusterUrl::parse(url).map_err(invalid)?;
        // Each seed must be a valid server URL on its own (port, host, credentials).
        for seed in &parsed.seeds {
            Server::new(&parsed.server_url(seed), settings, tls_roots)?;
        }
        let seed_client = redis::Client::open(parsed.server_url(&parsed.seeds[0]))
            .map_err(|e| invalid(e.to_string()))?;
        Ok(Self {
            seed_client,
            inner: Arc::new(Inner {
                label: format!("cluster({})", parsed.seeds.join(",")),
                url: parsed,
                settings,
                tls_roots: tls_roots.map(<[u8]>::to_vec),
                wait_ms: wait_for.map(|timeout| {
                    u64::try_from(timeout.as_millis() / 2)
                        .unwrap_or(u64::MAX)
                        .max(1)
                }),
                map: ArcSwapOption::empty(),
                masters: Mutex::new(HashMap::new()),
                reading: Mutex::new(None),
                stale: AtomicBool::new(false),
                replicas_seen: Mutex::new(HashMap::new()),
                run_ids: OnceLock::new(),
            }),
        })
    }

    /// `cluster(host:port,…)`: the seeds, without credentials.
    pub(crate) fn label(&self) -> &str {
        &self.inner.label
    }

    /// Shares the manager's record of its servers' `run_id`s, in which each master claims its
    /// own (`aliases` invariant 1). Only the first record shared is kept.
    pub(crate) fn share_run_ids(&self, run_ids: &Arc<RunIds>) {
        let _ = self.inner.run_ids.set(Arc::clone(run_ids));
    }

    /// What makes two cluster nodes the same: their seeds.
    pub(crate) fn identity(&self) -> String {
        let mut seeds = self.inner.url.seeds.clone();
        seeds.sort();
        format!("cluster:{}", seeds.join(","))
    }

    /// A subscriber on the first seed. Only a hint (the subscriber's invariants): for keys the
    /// seed does not serve its reads fail, and those waiters poll.
    pub(crate) fn subscriber(&self, watch: Watch) -> Subscriber {
        Subscriber::new(
            &self.seed_client,
            self.inner.settings.connect_timeout,
            watch,
        )
    }

    /// The masters of the last map.
    pub(crate) fn servers(&self) -> Vec<Arc<Server>> {
        lock(&self.inner.masters)
            .values()
            .map(|m| Arc::clone(&m.server))
            .collect()
    }

    /// Reads the map if we have none, then connects to every master (health checks included).
    pub(crate) async fn connect_all(&self) -> Result<(), NodeError> {
        self.owner(0).await?;
        let servers = self.servers();
        let connected = join_all(servers.iter().map(|server| server.connection())).await;
        for connection in connected {
            connection?.finish(Instant::now());
        }
        Ok(())
    }

    /// The longest quarantine among the masters, if any is quarantined.
    pub(crate) fn longest_quarantine(&self) -> Option<Quarantine> {
        self.servers()
            .iter()
            .filter_map(|server| server.quarantine())
            .max_by_key(|q| q.left)
    }

    /// The slot all of `resources`' keys hash to (invariant 1).
    pub(crate) fn slot(resources: &Resources) -> Result<u16, NodeError> {
        let keys = resources.keys();
        let slot = slot_of(resources.first().as_bytes());
        if keys.iter().any(|k| slot_of(k.as_bytes()) != slot) {
            return Err(NodeError::Server(
                "CROSSSLOT the resources of one lock must hash to one slot on a Redis Cluster \
                 node: give them a common hash tag, e.g. {order:7}:a and {order:7}:b"
                    .to_owned(),
            ));
        }
        Ok(slot)
    }

    /// The shard that serves `key`, reading the map if we have none yet.
    pub(crate) async fn shard_of(&self, key: &str) -> Option<Shard> {
        let slot = slot_of(key.as_bytes());
        self.owner(slot).await.ok()?;
        let map = self.inner.map.load_full()?;
        let (range, _) = map.shard(slot)?;
        Some(Shard {
            slot,
            master: range.master.clone(),
            replicas: range.replica_states.clone(),
        })
    }

    /// Runs `attempt` on the master serving `slot` (with `false`: no `ASKING`), as invariant 3
    /// says: after a reply that says the map is out of date, once more on the owner in the map
    /// read again (the first error stands if that is the same master); after `ASK`, on the
    /// importing master with `true` (`ASKING` before the request). `routing_failed` hears the
    /// errors that come from finding the owner, not from an attempt.
    pub(crate) async fn on_owner<T, Fut>(
        &self,
        slot: u16,
        mut attempt: impl FnMut(Arc<Server>, bool) -> Fut,
        routing_failed: impl Fn(&NodeError),
    ) -> Result<T, NodeError>
    where
        Fut: Future<Output = Result<T, NodeError>>,
    {
        let mut first: Option<(Arc<Server>, NodeError)> = None;
        for _ in 0..2 {
            let server = self.owner(slot).await.inspect_err(&routing_failed)?;
            if let Some((before, error)) = first.take()
                && Arc::ptr_eq(&before, &server)
            {
                return Err(error); // the same master again: its error stands
            }
            let result = attempt(Arc::clone(&server), false).await;
            // `ASK`: the slot is being migrated and the key is not (or no longer) here; the
            // importing master takes the request when `ASKING` precedes it.
            if let Err(NodeError::Server(why)) = &result
                && let Some(importing) = asked_to(why).and_then(|to| self.master_at(to))
            {
                return attempt(importing, true).await;
            }
            match result {
                Err(e) if self.saw(&e) => first = Some((server, e)),
                result => return result,
            }
        }
        Err(first.map_or_else(
            || NodeError::Server("the cluster's slot map changed twice during one request".into()),
            |(_, error)| error,
        ))
    }

    /// The master at `address` (`host:port`), if the map we hold has it: where an `ASK` sends
    /// a request (a master importing a slot serves others already).
    pub(crate) fn master_at(&self, address: &str) -> Option<Arc<Server>> {
        lock(&self.inner.masters)
            .get(address)
            .map(|master| Arc::clone(&master.server))
    }

    /// The master that serves `slot` as the map we hold says, without reading it.
    pub(crate) fn owner_now(&self, slot: u16) -> Option<Arc<Server>> {
        self.inner.map.load().as_ref()?.owner(slot).cloned()
    }

    /// The master that serves `slot`, reading the map first when we have none, when a reply
    /// said it is out of date (invariant 3), or when it is older than [`MAP_REFRESH`]; but not
    /// more often than every [`MAP_READ_INTERVAL`] (invariant 5).
    pub(crate) async fn owner(&self, slot: u16) -> Result<Arc<Server>, NodeError> {
        let inner = &self.inner;
        let fresh = inner.map.load_full().filter(|map| {
            let age = map.read_at.elapsed();
            age < MAP_READ_INTERVAL || (!inner.stale.load(Ordering::Acquire) && age < MAP_REFRESH)
        });
        let map = match fresh {
            Some(map) => map,
            None => self.read_map().await?,
        };
        map.owner(slot).cloned().ok_or_else(|| {
            inner.stale.store(true, Ordering::Release);
            NodeError::Server(format!("CLUSTERDOWN no master serves slot {slot}"))
        })
    }

    /// Whether a request's error says the map may be out of date (or its server gone): the
    /// next request reads the map again first.
    pub(crate) fn saw(&self, error: &NodeError) -> bool {
        let outdated = match error {
            NodeError::Server(why) => ["MOVED", "ASK", "CLUSTERDOWN", "TRYAGAIN", "READONLY"]
                .iter()
                .any(|code| why.starts_with(code)),
            NodeError::Unreachable(_) => true,
            NodeError::Timeout | NodeError::WrongType(_) | NodeError::LeftToDelay => false,
        };
        if outdated {
            self.inner.stale.store(true, Ordering::Release);
        }
        outdated
    }

    /// A request timed out: the master may have been replaced behind our back (a hung master
    /// whose replica took over answers nothing, not `MOVED`), so the map is read again, at most
    /// every [`MAP_READ_INTERVAL`].
    pub(crate) fn timed_out(&self) {
        self.inner.stale.store(true, Ordering::Release);
    }

    /// The map read under way, or a new one started in the background (invariant 5).
    async fn read_map(&self) -> Result<Arc<SlotMap>, NodeError> {
        let reading = {
            let mut reading = lock(&self.inner.reading);
            reading
                .get_or_insert_with(|| {
                    let inner = Arc::clone(&self.inner);
                    let read = async move {
                        let result = inner.read().await;
                        *lock(&inner.reading) = None;
                        result
                    };
                    shared_reading::spawn(read, "reading the slot map")
                })
                .clone()
        };
        reading.await
    }
}

impl Inner {
    /// Reads the map from every known master and seed at once and keeps the answer that shows
    /// the newest configuration (invariant 5).
    async fn read(&self) -> Result<Arc<SlotMap>, NodeError> {
        let mut candidates: Vec<String> = self.url.seeds.clone();
        for master in lock(&self.masters).keys() {
            if !candidates.contains(master) {
                candidates.push(master.clone());
            }
        }
        let mut asks: FuturesUnordered<_> = candidates
            .iter()
            .map(|address| async move {
                let asked = self.slots_from(address);
                tokio::time::timeout(self.settings.connect_timeout, asked)
                    .await
                    .unwrap_or(Err(NodeError::Timeout))
                    .and_then(|(ranges, epoch)| {
                        if ranges.is_empty() {
                            Err(NodeError::Server(format!(
                                "CLUSTERDOWN {address} knows no master serving slots"
                            )))
                        } else {
                            Ok((ranges, epoch))
                        }
                    })
            })
            .collect();
        let mut best: Option<(Vec<Range>, u64)> = None;
        let mut last = NodeError::Unreachable("no seed address".to_owned());
        let mut grace_until = None;
        loop {
            let next = match grace_until {
                // Once one answered, the others get a moment to show a newer configuration.
                Some(until) => match tokio::time::timeout_at(until, asks.next()).await {
                    Ok(next) => next,
                    Err(_) => break,
                },
                None => asks.next().await,
            };
            let Some(answer) = next else { break };
            match answer {
                Ok((ranges, epoch)) => {
                    if best.as_ref().is_none_or(|(_, best)| epoch > *best) {
                        best = Some((ranges, epoch));
                    }
                    grace_until.get_or_insert_with(|| tokio::time::Instant::now() + MAP_GRACE);
                }
                Err(e) => last = e,
            }
        }
        let (ranges, _) = best.ok_or(last)?;
        let map = Arc::new(self.build_map(&ranges)?);
        self.map.store(Some(Arc::clone(&map)));
        self.stale.store(false, Ordering::Release);
        Ok(map)
    }

    /// How many replicas a vote in `range` waits for: the most any map listed for it over the
    /// last [`REPLICA_MEMORY`]. Right after a failover the new master's `CLUSTER NODES` does not
    /// list its old master as its replica yet; waiting for none then would count writes that a
    /// failback to the old master (cut off, or not yet caught up) loses (found by `redlock
    /// chaos`, `redlock-cluster-wait`). Waiting for as many as the shard had costs votes until
    /// the old master is back as a replica, never safety.
    fn replicas_to_wait_for(&self, range: &Range) -> u32 {
        let now = Instant::now();
        let mut seen = lock(&self.replicas_seen);
        let entry = seen.entry(range.low).or_insert((range.replicas, now));
        if now.duration_since(entry.1) >= REPLICA_MEMORY || range.replicas >= entry.0 {
            *entry = (range.replicas, now);
        }
        entry.0
    }

    /// `CLUSTER NODES` from `address`: its slot ranges, and the largest config epoch it knows.
    async fn slots_from(&self, address: &str) -> Result<(Vec<Range>, u64), NodeError> {
        let url = self.url.server_url(address);
        let client = urls::client(&url, self.url.scheme, self.tls_roots.as_deref())
            // An address the cluster announced may not make a valid URL; the error must not show
            // the credentials it was joined with.
            .map_err(|e| NodeError::Server(scrub(&e.to_string(), &url)))?;
        let mut conn = connect_once(&client, self.settings.connect_timeout)
            .await
            .map_err(|e| NodeError::from_redis(&e))?;
        let reply: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query_async(&mut conn)
            .await
            .map_err(|e| NodeError::from_redis(&e))?;
        let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
        let prefer_hostnames = self.url.scheme == "rediss";
        parse_nodes(&reply, host, prefer_hostnames).ok_or_else(|| {
            NodeError::Server(format!(
                "unexpected reply to CLUSTER NODES: {}",
                reply.lines().next().unwrap_or_default()
            ))
        })
    }

    /// The map for `ranges`: each master's server, made on first sight, or again when it no
    /// longer serves its marker's slot (invariant 4), and claiming its `run_id` under its
    /// address and this node's label (`aliases` invariant 1); masters no longer in the map are
    /// forgotten.
    fn build_map(&self, ranges: &[Range]) -> Result<SlotMap, NodeError> {
        let mut masters = lock(&self.masters);
        masters.retain(|address, _| ranges.iter().any(|r| r.master == *address));
        let mut shards = Vec::with_capacity(ranges.len());
        for range in ranges {
            let of_master = || ranges.iter().filter(|r| r.master == range.master);
            let serves = |slot: u16| of_master().any(|r| (r.low..=r.high).contains(&slot));
            let lowest = of_master().map(|r| r.low).min().unwrap_or(range.low);
            let keep = masters
                .get(&range.master)
                .is_some_and(|m| serves(m.marker_slot));
            if !keep {
                let cluster = InCluster {
                    marker_key: cluster_marker_key(lowest),
                    replicas: AtomicU32::new(0),
                    wait_ms: self.wait_ms.unwrap_or(0),
                };
                let url = self.url.server_url(&range.master);
                let mut server =
                    Server::in_cluster(&url, self.settings, self.tls_roots.as_deref(), cluster)
                        .map_err(|e| NodeError::Server(e.to_string()))?;
                if let Some(run_ids) = self.run_ids.get() {
                    let claimant = Claimant::master(&range.master, &self.label);
                    server.set_run_ids(Arc::clone(run_ids), claimant);
                }
                masters.insert(
                    range.master.clone(),
                    Master {
                        server: Arc::new(server),
                        marker_slot: lowest,
                    },
                );
            }
            let Some(master) = masters.get(&range.master) else {
                continue;
            };
            if let Some(cluster) = master.server.cluster() {
                let replicas = if self.wait_ms.is_some() {
                    self.replicas_to_wait_for(range)
                } else {
                    0 // no `WAIT`
                };
                cluster.replicas.store(replicas, Ordering::Release);
            }
            shards.push((range.clone(), Arc::clone(&master.server)));
        }
        shards.sort_by_key(|(range, _)| range.low);
        Ok(SlotMap {
            shards,
            read_at: Instant::now(),
        })
    }
}

/// Reads a `CLUSTER NODES` reply: each master's slot ranges, with how many replicas the
/// cluster knows for it, failed ones included (invariant 2: a replica the cluster marked failed
/// may still be promoted once it is back, before it has caught up, so a vote waits for it too).
/// `CLUSTER SLOTS` is not enough: it leaves out replicas it deems unavailable (failed, or that
/// never acknowledged any write), and a vote would not wait for them. An empty host means the
/// one we asked (`asked_host`); with `prefer_hostnames` (TLS, whose certificates name hosts) a
/// node's announced hostname is used where it has one. Also returns the largest config epoch
/// of a master that serves slots. A master without an address yet is left out (its slots are
/// down for us until it has one), not the whole map.
fn parse_nodes(reply: &str, asked_host: &str, prefer_hostnames: bool) -> Option<(Vec<Range>, u64)> {
    struct Line<'a> {
        id: &'a str,
        address: Option<String>,
        master_of: Option<&'a str>,
        failed: bool,
        epoch: u64,
        slots: Vec<(u16, u16)>,
    }
    let mut lines = Vec::new();
    for line in reply.lines().filter(|l| !l.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 {
            return None;
        }
        let flags: Vec<&str> = fields[2].split(',').collect();
        let is_master = flags.contains(&"master");
        let is_replica = flags.contains(&"slave") || flags.contains(&"replica");
        // `ip:port@cport[,hostname]`; `:0@0` for a node without an address yet.
        let endpoint = fields[1].split(['@', ',']).next()?;
        let hostname = fields[1]
            .split_once(',')
            .map(|(_, hostname)| hostname)
            .filter(|h| prefer_hostnames && !h.is_empty());
        let address = endpoint.rsplit_once(':').and_then(|(host, port)| {
            let port: u16 = port.parse().ok().filter(|p| *p != 0)?;
            let host = hostname.unwrap_or(if host.is_empty() { asked_host } else { host });
            Some(if host.contains(':') && !host.starts_with('[') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            })
        });
        let mut slots = Vec::new();
        if is_master {
            // `N` or `LOW-HIGH`; `[N->-id]` and `[N-<-id]` are slots on the move, not served.
            for range in fields.iter().skip(8).filter(|r| !r.starts_with('[')) {
                let mut bounds = range.splitn(2, '-').map(str::parse::<u16>);
                let (low, high) = match (bounds.next(), bounds.next()) {
                    (Some(Ok(low)), None) => (low, low),
                    (Some(Ok(low)), Some(Ok(high))) => (low, high),
                    _ => return None,
                };
                if low > high || high >= slots::SLOTS {
                    return None;
                }
                slots.push((low, high));
            }
        }
        lines.push(Line {
            id: fields[0],
            address,
            master_of: is_replica.then_some(fields[3]),
            failed: flags.contains(&"fail") || flags.contains(&"fail?"),
            epoch: fields[6].parse().ok()?,
            slots,
        });
    }
    let mut ranges = Vec::new();
    let mut epoch = 0;
    for master in lines.iter().filter(|l| !l.slots.is_empty()) {
        epoch = epoch.max(master.epoch);
        let Some(master_address) = master.address.clone() else {
            continue;
        };
        let replica_states: Vec<(String, bool)> = lines
            .iter()
            .filter(|l| l.master_of == Some(master.id))
            .map(|l| {
                (
                    l.address.clone().unwrap_or_else(|| l.id.to_owned()),
                    l.failed,
                )
            })
            .collect();
        let replicas = u32::try_from(replica_states.len()).ok()?;
        for &(low, high) in &master.slots {
            ranges.push(Range {
                low,
                high,
                master: master_address.clone(),
                replicas,
                replica_states: replica_states.clone(),
            });
        }
    }
    Some((ranges, epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_url_names_seeds_with_shared_credentials() {
        let url = ClusterUrl::parse("redis+cluster://u:p@10.0.0.1:7000, 10.0.0.2:7001,h").unwrap();
        assert_eq!(url.seeds, ["10.0.0.1:7000", "10.0.0.2:7001", "h:6379"]);
        assert_eq!(url.server_url("10.0.0.3:7002"), "redis://u:p@10.0.0.3:7002");
        let tls = ClusterUrl::parse("rediss+cluster://[::1]:7000").unwrap();
        assert_eq!(tls.server_url("[::1]:7000"), "rediss://[::1]:7000");
    }

    #[test]
    fn a_cluster_url_without_seeds_or_with_a_database_is_refused_with_the_reason() {
        let none = ClusterUrl::parse("redis+cluster://").unwrap_err();
        assert!(none.contains("no seed"), "{none}");
        let db = ClusterUrl::parse("redis+cluster://h:7000/2").unwrap_err();
        assert!(db.contains("no databases"), "{db}");
    }

    #[test]
    fn the_nodes_reply_gives_each_range_its_master_and_every_replica_failed_or_not() {
        let reply = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5000 6000 [7000->-b1]
b1 :7001@17001,host-b master - 0 0 2 connected 5001-5999 6001-16383
r1 127.0.0.1:7003@17003 slave a1 0 0 1 connected
r2 127.0.0.1:7004@17004 slave,fail a1 0 0 1 disconnected
r3 ::1:7005@17005 slave b1 0 0 2 connected
m9 127.0.0.1:7009@17009 master - 0 0 9 connected
";
        let (ranges, epoch) = parse_nodes(reply, "10.1.1.1", false).unwrap();
        assert_eq!(epoch, 2);
        let a_replicas = vec![
            ("127.0.0.1:7003".to_owned(), false),
            ("127.0.0.1:7004".to_owned(), true),
        ];
        let b_replicas = vec![("[::1]:7005".to_owned(), false)];
        let range = |low, high, master: &str, replica_states: &Vec<(String, bool)>| Range {
            low,
            high,
            master: master.to_owned(),
            replicas: u32::try_from(replica_states.len()).unwrap(),
            replica_states: replica_states.clone(),
        };
        assert_eq!(
            ranges,
            [
                range(0, 5000, "127.0.0.1:7000", &a_replicas),
                range(6000, 6000, "127.0.0.1:7000", &a_replicas),
                range(5001, 5999, "10.1.1.1:7001", &b_replicas),
                range(6001, 16383, "10.1.1.1:7001", &b_replicas),
            ]
        );
        assert!(parse_nodes("garbage", "h", false).is_none());
        assert!(parse_nodes("a 1.2.3.4:1@2 master - 0 0 1 connected 5-x", "h", false).is_none());
        // TLS: the announced hostname, which the certificate names.
        let (tls, _) = parse_nodes(reply, "10.1.1.1", true).unwrap();
        assert_eq!(tls[2].master, "host-b:7001");
        // A master without an address leaves out its own slots only.
        let noaddr = reply.replace(":7001@17001,host-b", ":0@0");
        let (ranges, _) = parse_nodes(&noaddr, "10.1.1.1", false).unwrap();
        assert_eq!(ranges.len(), 2);
    }
}
