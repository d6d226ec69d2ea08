//! One file because every fault step is a method of the one `Topology`, across four layouts.
//!
//! The servers of one run and the proxies in front of them: starting them, and the node-level
//! operations faults are made of (kill, bring back, pause, resume, fail over).
//!
//! Clients never see a node directly: they are given one proxy per *slot*. With independent
//! masters, slot `i` is node `i`. With a failover pair, the one slot is whichever node is master
//! now, and a second proxy, with a fixed delay, carries the replication link from the replica to
//! the master, so the replica lags by that delay: a write acknowledged to a client reaches the
//! replica [`REPLICATION_DELAY`] later, or never if the master dies first.
//!
//! # Why the lag is longer than a lock's TTL
//! Asynchronous replication loses the writes of the last lag before a crash. With a short lag
//! (200 ms, say) the lock just granted is among them, but so is, under contention, the release
//! of the lock before it: the promoted replica still holds the *previous* holder's key, and
//! nobody gets the lock again until that key expires, by which time the current holder is long
//! done. The failover then costs availability, not safety, and a violation needs a resource
//! that sat free for longer than the lag, which busy resources rarely do. A lag longer than the
//! TTL takes chance out of it: every key the promoted replica has is expired, so it knows no
//! lock that anybody still relies on. That is the race of the Redlock page ("the master crashes
//! before the write to the key is transmitted to the replica"), made certain.
//!
//! Everything here blocks (processes, `redis-cli`), so it runs on the injector's own thread,
//! never on the async runtime. That thread also starts every server, which ties the servers'
//! lives to it (`PR_SET_PDEATHSIG`, see `redquorum_nodes::NodeSpec::die_with_parent`).
//!
//! # Spares
//! With independent masters, every slot also has a *spare*: a server started with the others,
//! without persistence and without the library's marker key, that the `replace` fault puts
//! behind the slot's proxy. By the time clients start it has been up for longer than a lock's
//! TTL, so its uptime says nothing: it stands for a different, long-running server moved behind
//! the same address (a new VM, a moved VIP, a switched proxy). It is emptied before each use,
//! since clients write their keys and a new marker on it, key by key (`KEYS`, `DEL`): a
//! `FLUSHALL` would show in its `INFO commandstats`, and a spare must look like what it stands
//! for, a server that never saw a client of ours, so that a client starting after the switch
//! (a late joiner) can tell it apart only by the markers of the rest of the group (the
//! library's `first_sight`).
//!
//! # Redis Clusters
//! The cluster layout has no proxy: slot `i` is Redis Cluster `i`, one master and one replica
//! (`RedisCluster::start(1, 1, …)`, with the persistence of every other node here), whose
//! masters get the library's marker (`mark_masters`), so that clients trust them at once. Its
//! servers are numbered `2i` (the first master) and `2i + 1` (its replica) in the history. Clients
//! are given one `redis+cluster://` URL per cluster, naming both servers: the library routes
//! by the cluster's slot map, which names the real addresses, so a proxy could not stand in
//! front. The `failover` fault cuts a master's replication link for longer than a TTL, then
//! promotes the replica (see [`faults`](crate::faults)).
//!
//! # A primary behind Redis Sentinel
//! The Sentinel layout has no proxy either: its one slot is a primary with one replica and
//! three sentinels (`SentinelGroup`), data nodes `0` (the first primary) and `1` in the history,
//! and clients are given its `redis+sentinel://` URL. The slot's node is whichever one the
//! sentinels name primary now. A `kill` or `pause` hits that node and lets the sentinels fail
//! over by themselves (a primary is down after a second without an answer); a `failover` cuts
//! the replica off as on the cluster layout, then asks the sentinels for a failover
//! (`SENTINEL FAILOVER`), so that the replica they promote misses more than a TTL of writes.
//!
//! # A primary behind a fixed address
//! The endpoint layout stands for a managed service's primary endpoint: a primary with two
//! replicas (data nodes `0`, the first primary, `1` and `2`), one client-facing proxy in front
//! of the primary, and clients given a `redis+replicated://…?replicas=2` URL naming the proxy:
//! every vote waits for both replicas, the setting that is safe whatever replica the service
//! promotes (with `replicas=1`, the `failover` fault below gives a lock twice: the library's
//! `endpoint` module docs).
//! The injector does what the service would: a `kill` or `restart` of the primary promotes the
//! first running replica (`REPLICAOF NO ONE`), makes the other running servers its replicas and
//! moves the proxy to it (closing the connections open to the old one); a server brought back
//! returns as a replica of the primary. A `failover` cuts the last replica off as on the cluster
//! layout (the other keeps acknowledging, so votes go on counting without it), then promotes
//! it and moves the proxy: the promoted server misses more than a TTL of writes. A `pause`
//! freezes the primary without a failover (an outage).
//!
//! # Invariants
//! 1. Servers listen on 127.0.0.1 only, on ports the launcher picked, and every process signalled
//!    is one this topology started (the launcher signals only its own children, by pid).
//! 2. In a failover pair the replication proxy and the client proxy point at the same node, the
//!    master; a node that comes back is made a replica of it before anything else.
//! 3. A cluster's replica is cut off (a wrong `masterauth`) only between
//!    [`Topology::cut_replica`] and [`Topology::promoted`], which gives it its `masterauth`
//!    back once it is master.

use std::thread;
use std::time::{Duration, Instant};

use redquorum_nodes::{
    LaunchError, MARKER_KEY, NodeSpec, Persistence, RedisCluster, RedisNode, SentinelGroup,
};

use crate::ChaosError;
use crate::proxy::Proxy;
use crate::strategies::{ClusterMarker, Layout, TTL};

/// Deletes every key of the database by name, a thousand at a time (see *Spares*).
const EMPTY_KEY_BY_KEY: &str = "local keys = redis.call('KEYS', '*') \
    for i = 1, #keys, 1000 do \
    redis.call('DEL', unpack(keys, i, math.min(i + 999, #keys))) end \
    return #keys";

/// The replication link's delay in each direction, in a failover pair: longer than a lock's TTL
/// (see the module docs).
pub const REPLICATION_DELAY: Duration = TTL.saturating_add(Duration::from_millis(500));
/// How long the first synchronisation may take (over a link without delay).
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a replica may take to report itself master after `CLUSTER FAILOVER TAKEOVER`.
const TAKEOVER_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest a promoted replica's client writes stay paused in a `failback` (`CLIENT PAUSE …
/// WRITE`; undone by `CLIENT UNPAUSE` as soon as the old master leads again).
const FAILBACK_PAUSE: Duration = Duration::from_secs(5);
/// The `masterauth` that cuts a cluster replica off: its master has no password, so every
/// handshake the replica tries fails at `AUTH`.
const CUT_OFF_AUTH: &str = "chaos-replication-cut";

/// What a kill did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Killed {
    /// The node killed.
    pub(crate) node: usize,
    /// In a failover pair: the replica promoted in its place, if it was up.
    pub(crate) promoted: Option<usize>,
}

/// The servers and proxies of one run.
#[derive(Debug)]
pub(crate) struct Topology {
    nodes: Vec<RedisNode>,
    /// One client-facing proxy per slot.
    proxies: Vec<Proxy>,
    /// The failover pair's replication proxy, and which node is master.
    failover: Option<(Proxy, usize)>,
    /// One spare per slot, for `replace` (independent masters only).
    spares: Vec<RedisNode>,
    /// The cluster layout: one Redis Cluster per slot (then `nodes` and `proxies` are empty).
    clusters: Vec<Shard>,
    /// The Sentinel layout: its one group (then `nodes`, `proxies` and `clusters` are empty),
    /// and the data node last seen primary.
    sentinel: Option<(SentinelGroup, usize)>,
    /// The endpoint layout (its servers in `nodes`, its address `proxies[0]`): see
    /// [`Endpoint`].
    endpoint: Option<Endpoint>,
}

/// What the endpoint layout keeps (module docs).
#[derive(Debug, Clone, Copy)]
struct Endpoint {
    /// The node behind the address.
    primary: usize,
    /// The replica a `failover` cut off, and the primary it was cut from, until it takes over.
    cut: Option<(usize, usize)>,
    /// The primary before the last `failover`, until it has resynchronised.
    deposed: Option<usize>,
}

/// How many replicas the endpoint layout's primary starts with, and every vote waits for: two, so
/// that a `failover` can cut one off while the other still acknowledges (which counts no vote
/// without the one cut off).
const ENDPOINT_REPLICAS: usize = 2;

/// One Redis Cluster of the cluster layout: a master and its replica.
#[derive(Debug)]
struct Shard {
    cluster: RedisCluster,
    /// The cluster's node that is master now (0 or 1).
    master: usize,
}

fn spec() -> NodeSpec {
    // Every acknowledged write survives a kill; only restart faults lose data (by deleting it).
    // A master waits 5 s by default before a diskless full sync, for more replicas to join;
    // there is only ever one here.
    NodeSpec::new()
        .persistence(Persistence::AofAlways)
        .arg("--repl-diskless-sync-delay")
        .arg("0")
}

impl Topology {
    /// The number of client-facing proxies `layout` needs, and whether it needs a replication
    /// proxy. The cluster layout needs none.
    pub(crate) fn proxies_needed(layout: Layout) -> (usize, bool) {
        match layout {
            Layout::Independent(n) => (n, false),
            Layout::Failover => (1, true),
            Layout::Clusters(_) | Layout::Sentinel => (0, false),
            Layout::Endpoint => (1, false),
        }
    }

    /// Starts the servers of `layout` and points the proxies at them (the replication proxy, if
    /// any, gets its delay here). Blocks until every server answers, and a replica has finished
    /// its first synchronisation.
    ///
    /// # Errors
    /// If a server cannot be started or configured; those already started are killed.
    pub(crate) fn start(
        layout: Layout,
        marker: ClusterMarker,
        proxies: Vec<Proxy>,
        replication: Option<Proxy>,
    ) -> Result<Self, ChaosError> {
        match (layout, replication) {
            (Layout::Independent(n), _) => {
                let mut nodes = Vec::with_capacity(n);
                let mut spares = Vec::with_capacity(n);
                for proxy in proxies.iter().take(n) {
                    let node = RedisNode::start(spec())?;
                    proxy.set_upstream(node.port());
                    nodes.push(node);
                    spares.push(RedisNode::start(NodeSpec::new().marked(false))?);
                }
                Ok(Self {
                    nodes,
                    proxies,
                    failover: None,
                    spares,
                    clusters: Vec::new(),
                    sentinel: None,
                    endpoint: None,
                })
            }
            (Layout::Failover, Some(link)) => {
                let master = RedisNode::start(spec())?;
                link.set_upstream(master.port());
                let replica = RedisNode::start(
                    spec()
                        .arg("--replicaof")
                        .arg("127.0.0.1")
                        .arg(link.port().to_string()),
                )?;
                // The handshake takes several round trips: made without the delay, it takes
                // milliseconds rather than tens of seconds. The delay applies from here on.
                wait_for_sync(&replica)?;
                link.set_delay(REPLICATION_DELAY);
                for proxy in &proxies {
                    proxy.set_upstream(master.port());
                }
                Ok(Self {
                    nodes: vec![master, replica],
                    proxies,
                    failover: Some((link, 0)),
                    spares: Vec::new(),
                    clusters: Vec::new(),
                    sentinel: None,
                    endpoint: None,
                })
            }
            (Layout::Clusters(n), _) => {
                let mut clusters = Vec::with_capacity(n);
                for _ in 0..n {
                    // Dropping those already started (on an error here) kills them.
                    let mut cluster = RedisCluster::start(1, 1, spec())?;
                    cluster.mark_masters(marker)?;
                    clusters.push(Shard { cluster, master: 0 });
                }
                Ok(Self {
                    nodes: Vec::new(),
                    proxies,
                    failover: None,
                    spares: Vec::new(),
                    clusters,
                    sentinel: None,
                    endpoint: None,
                })
            }
            (Layout::Sentinel, _) => {
                // The primary is marked at start and durable, so clients trust it at once.
                let group = SentinelGroup::start(1, 3, spec())?;
                Ok(Self {
                    nodes: Vec::new(),
                    proxies,
                    failover: None,
                    spares: Vec::new(),
                    clusters: Vec::new(),
                    sentinel: Some((group, 0)),
                    endpoint: None,
                })
            }
            (Layout::Endpoint, _) => {
                let primary = RedisNode::start(spec())?;
                let port = primary.port().to_string();
                let mut nodes = vec![primary];
                for _ in 0..ENDPOINT_REPLICAS {
                    let replica = RedisNode::start(
                        spec()
                            .marked(false)
                            .arg("--replicaof")
                            .arg("127.0.0.1")
                            .arg(&port),
                    )?;
                    wait_for_sync(&replica)?;
                    nodes.push(replica);
                }
                if let Some(proxy) = proxies.first() {
                    proxy.set_upstream(nodes[0].port());
                }
                Ok(Self {
                    nodes,
                    proxies,
                    failover: None,
                    spares: Vec::new(),
                    clusters: Vec::new(),
                    sentinel: None,
                    endpoint: Some(Endpoint {
                        primary: 0,
                        cut: None,
                        deposed: None,
                    }),
                })
            }
            (Layout::Failover, None) => Err(ChaosError::Config(
                "a failover pair needs a replication proxy".to_owned(),
            )),
        }
    }

    /// How a `failover` promotes the replica on this layout, for the record.
    pub(crate) fn promotion(&self) -> &'static str {
        if self.sentinel.is_some() {
            "SENTINEL FAILOVER"
        } else if self.endpoint.is_some() {
            "REPLICAOF NO ONE, the address moved to it"
        } else {
            "CLUSTER FAILOVER TAKEOVER"
        }
    }

    /// How many servers there are.
    pub(crate) fn node_count(&self) -> usize {
        let sentinel = self.sentinel.as_ref().map_or(0, |(g, _)| g.data_len());
        self.nodes.len() + 2 * self.clusters.len() + sentinel
    }

    /// How many slots (client-facing proxies, or Redis Clusters) there are.
    pub(crate) fn slots(&self) -> usize {
        if self.sentinel.is_some() {
            return 1;
        }
        if self.clusters.is_empty() {
            self.proxies.len()
        } else {
            self.clusters.len()
        }
    }

    /// The URLs clients are given, one per slot: the proxies', or one `redis+cluster://` URL per
    /// Redis Cluster.
    pub(crate) fn urls(&self) -> Vec<String> {
        if let Some((group, _)) = &self.sentinel {
            return vec![group.url()];
        }
        if self.endpoint.is_some() {
            return self
                .proxies
                .iter()
                .map(|proxy| {
                    format!(
                        "redis+replicated://127.0.0.1:{}?replicas={ENDPOINT_REPLICAS}",
                        proxy.port()
                    )
                })
                .collect();
        }
        if self.clusters.is_empty() {
            self.proxies.iter().map(Proxy::url).collect()
        } else {
            self.clusters
                .iter()
                .map(|shard| shard.cluster.url())
                .collect()
        }
    }

    /// The node behind `slot` now.
    pub(crate) fn node_of(&self, slot: usize) -> usize {
        if let Some((group, last)) = &self.sentinel {
            // The sentinels' word; while they disagree (a failover under way), the last seen.
            return group.primary().unwrap_or(*last);
        }
        if let Some(shard) = self.clusters.get(slot) {
            return 2 * slot + shard.master;
        }
        if let Some(endpoint) = &self.endpoint {
            return endpoint.primary;
        }
        match self.failover {
            Some((_, master)) => master,
            None => slot,
        }
    }

    /// Server `node` (numbered as in the history).
    fn server(&mut self, node: usize) -> &mut RedisNode {
        if let Some((group, _)) = &mut self.sentinel {
            return group.data_node(node);
        }
        if self.clusters.is_empty() {
            &mut self.nodes[node]
        } else {
            self.clusters[node / 2].cluster.node(node % 2)
        }
    }

    /// An error for an operation the cluster layout does not support.
    fn not_on_clusters(&self, what: &str) -> Result<(), ChaosError> {
        if self.clusters.is_empty() {
            Ok(())
        } else {
            Err(ChaosError::Config(format!(
                "{what} does not apply to the Redis Cluster layout"
            )))
        }
    }

    /// Kills the node behind `slot` with `SIGKILL`. In a failover pair, promotes the replica
    /// (`REPLICAOF NO ONE`) if it is up and points clients and the replication link at it.
    /// Not on the cluster layout.
    pub(crate) fn kill(&mut self, slot: usize) -> Result<Killed, ChaosError> {
        self.not_on_clusters("a kill")?;
        let node = self.node_of(slot);
        if let Some((group, last)) = &mut self.sentinel {
            // The sentinels promote the replica by themselves.
            *last = node;
            group.data_node(node).kill()?;
            return Ok(Killed {
                node,
                promoted: None,
            });
        }
        self.nodes[node].kill()?;
        if self.endpoint.is_some() {
            // The service promotes a running replica and moves the address to it.
            let promoted = (0..self.nodes.len())
                .filter(|&i| i != node)
                .find(|&i| self.nodes[i].is_running());
            if let Some(new) = promoted {
                self.promote(new)?;
            }
            return Ok(Killed { node, promoted });
        }
        let Some((link, master)) = &mut self.failover else {
            return Ok(Killed {
                node,
                promoted: None,
            });
        };
        let replica = 1 - node;
        if !self.nodes[replica].is_running() {
            return Ok(Killed {
                node,
                promoted: None,
            });
        }
        self.nodes[replica].cli(&["REPLICAOF", "NO", "ONE"])?;
        *master = replica;
        let port = self.nodes[replica].port();
        link.set_upstream(port);
        for proxy in &self.proxies {
            proxy.set_upstream(port);
        }
        Ok(Killed {
            node,
            promoted: Some(replica),
        })
    }

    /// Starts a killed node again, with or without its data. In a failover pair, a node that is
    /// no longer master comes back as a replica of the master (invariant 2); over the delayed
    /// link its handshake takes a while, and until it is done it has only its own old data.
    pub(crate) fn bring_back(&mut self, node: usize, with_data: bool) -> Result<(), ChaosError> {
        self.not_on_clusters("a restart")?;
        if let Some((group, _)) = &mut self.sentinel {
            // Back as it was: the sentinels make it a replica of the primary they named since.
            let server = group.data_node(node);
            if with_data {
                server.restart()?;
            } else {
                server.restart_empty()?;
            }
            return Ok(());
        }
        let server = &mut self.nodes[node];
        if with_data {
            server.restart()?;
        } else {
            server.restart_empty()?;
        }
        if let Some((link, master)) = &self.failover
            && *master != node
        {
            let port = link.port().to_string();
            server.cli(&["REPLICAOF", "127.0.0.1", &port])?;
        }
        if let Some(endpoint) = &self.endpoint
            && endpoint.primary != node
        {
            // Back as a replica of the primary, as the service would have it.
            let port = self.nodes[endpoint.primary].port().to_string();
            self.nodes[node].cli(&["REPLICAOF", "127.0.0.1", &port])?;
        }
        Ok(())
    }

    /// The endpoint layout's promotion of `new`: the primary now (its `masterauth` back, if it
    /// was cut off), every other running server its replica, and the address moved to it
    /// (closing the connections open to the old one).
    fn promote(&mut self, new: usize) -> Result<(), ChaosError> {
        self.nodes[new].cli(&["REPLICAOF", "NO", "ONE"])?;
        self.nodes[new].cli(&["CONFIG", "SET", "masterauth", ""])?;
        let port = self.nodes[new].port();
        for i in (0..self.nodes.len()).filter(|&i| i != new) {
            if self.nodes[i].is_running() {
                self.nodes[i].cli(&["REPLICAOF", "127.0.0.1", &port.to_string()])?;
            }
        }
        if let Some(proxy) = self.proxies.first() {
            proxy.set_upstream(port);
        }
        if let Some(endpoint) = &mut self.endpoint {
            endpoint.primary = new;
        }
        Ok(())
    }

    /// Whether a crash of the master now would lose `key`: with a replica, whether the replica
    /// lacks it (the write has not reached it yet); without one, always. A replica that cannot
    /// be asked counts as having it. On the cluster layout, always: a failover is aimed at its
    /// promotion, when the replicas have been cut off for longer than a TTL.
    pub(crate) fn replica_lacks(&self, key: &str) -> bool {
        if !self.clusters.is_empty() || self.sentinel.is_some() || self.endpoint.is_some() {
            return true;
        }
        let Some((_, master)) = self.failover else {
            return true;
        };
        let replica = &self.nodes[1 - master];
        replica.cli(&["EXISTS", key]).is_ok_and(|n| n == "0")
    }

    /// `FLUSHALL` on the node behind `slot`, over a connection of its own (not through the
    /// proxy); returns which node.
    pub(crate) fn flush(&mut self, slot: usize) -> Result<usize, LaunchError> {
        let node = self.node_of(slot);
        self.server(node).cli(&["FLUSHALL"])?;
        Ok(node)
    }

    /// Puts `slot`'s spare, emptied (and, if `marked`, marked by hand with the word every
    /// spare gets), behind its proxy, closing the connections open now; returns the node the
    /// slot had. `None` when the layout has no spares.
    pub(crate) fn replace(&self, slot: usize, marked: bool) -> Result<Option<usize>, LaunchError> {
        let Some(spare) = self.spares.get(slot) else {
            return Ok(None);
        };
        spare.cli(&["EVAL", EMPTY_KEY_BY_KEY, "0"])?;
        if marked {
            spare.cli(&["SET", MARKER_KEY, "manual"])?;
        }
        self.proxies[slot].set_upstream(spare.port());
        Ok(Some(self.node_of(slot)))
    }

    /// Puts `slot`'s own node back behind its proxy, closing the connections to the spare.
    pub(crate) fn restore(&self, slot: usize) {
        let node = self.node_of(slot);
        if let (Some(proxy), Some(server)) = (self.proxies.get(slot), self.nodes.get(node)) {
            proxy.set_upstream(server.port());
        }
    }

    /// Freezes the node behind `slot` (`SIGSTOP`); returns which node.
    pub(crate) fn pause(&mut self, slot: usize) -> Result<usize, LaunchError> {
        let node = self.node_of(slot);
        self.server(node).pause()?;
        Ok(node)
    }

    /// Wakes `node` (`SIGCONT`).
    pub(crate) fn resume(&mut self, node: usize) -> Result<(), LaunchError> {
        self.server(node).resume()
    }

    /// The proxy of `slot`; none on the cluster layout.
    pub(crate) fn proxy(&self, slot: usize) -> Option<&Proxy> {
        self.proxies.get(slot)
    }

    /// Removes every proxy fault, partitions included.
    pub(crate) fn heal_proxies(&self) {
        for proxy in &self.proxies {
            proxy.heal();
            proxy.rejoin_all();
        }
    }

    /// The client groups that reach the nodes through ports of their own (for partitions).
    pub(crate) fn groups(&self) -> usize {
        self.proxies.iter().map(Proxy::groups).min().unwrap_or(0)
    }

    /// Partitions the client groups into a ring of majorities (see [`ring`]) rotated by
    /// `offset`: each group is cut off from the slots outside its majority. The slots each group
    /// still reaches, by group.
    pub(crate) fn partition(&self, offset: usize) -> Vec<Vec<usize>> {
        let slots = self.proxies.len();
        let mut reached = Vec::new();
        for group in 0..self.groups() {
            let majority = ring(group, offset, slots);
            for (slot, proxy) in self.proxies.iter().enumerate() {
                if !majority.contains(&slot) {
                    proxy.cut(group);
                }
            }
            reached.push(majority);
        }
        reached
    }

    /// Ends a partition: every group reaches every slot again.
    pub(crate) fn heal_partition(&self) {
        for proxy in &self.proxies {
            proxy.rejoin_all();
        }
    }

    /// Whether `node`'s process is alive (paused counts as alive).
    pub(crate) fn is_running(&mut self, node: usize) -> bool {
        self.server(node).is_running()
    }

    /// Cuts Redis Cluster `slot`'s replica off its master: a wrong `masterauth` on the replica,
    /// then `CLIENT KILL TYPE replica` on the master; from then on every handshake the replica
    /// tries fails at `AUTH` (invariant 3). Returns the master, or `None` without clusters.
    pub(crate) fn cut_replica(&mut self, slot: usize) -> Result<Option<usize>, LaunchError> {
        if let Some(endpoint) = self.endpoint {
            let primary = endpoint.primary;
            // The last running replica: the other one keeps acknowledging.
            let Some(replica) = (0..self.nodes.len())
                .rev()
                .filter(|&i| i != primary)
                .find(|&i| self.nodes[i].is_running())
            else {
                return Ok(None);
            };
            self.nodes[replica].cli(&["CONFIG", "SET", "masterauth", CUT_OFF_AUTH])?;
            self.nodes[primary].cli(&["CLIENT", "KILL", "TYPE", "replica"])?;
            if let Some(endpoint) = &mut self.endpoint {
                endpoint.cut = Some((replica, primary));
            }
            return Ok(Some(primary));
        }
        if self.sentinel.is_some() {
            let primary = self.node_of(slot);
            let replica = 1 - primary;
            self.server(replica)
                .cli(&["CONFIG", "SET", "masterauth", CUT_OFF_AUTH])?;
            self.server(primary)
                .cli(&["CLIENT", "KILL", "TYPE", "replica"])?;
            return Ok(Some(primary));
        }
        let Some(shard) = self.clusters.get_mut(slot) else {
            return Ok(None);
        };
        let (master, replica) = (shard.master, 1 - shard.master);
        shard
            .cluster
            .node(replica)
            .cli(&["CONFIG", "SET", "masterauth", CUT_OFF_AUTH])?;
        shard
            .cluster
            .node(master)
            .cli(&["CLIENT", "KILL", "TYPE", "replica"])?;
        Ok(Some(2 * slot + master))
    }

    /// Makes Redis Cluster `slot`'s replica take over (`CLUSTER FAILOVER TAKEOVER`: no
    /// election, no handshake with the master), without waiting.
    pub(crate) fn take_over(&mut self, slot: usize) -> Result<(), ChaosError> {
        if let Some(endpoint) = self.endpoint {
            // The service promotes the replica that was cut off, and moves the address to it.
            if let Some((replica, primary)) = endpoint.cut {
                self.promote(replica)?;
                if let Some(endpoint) = &mut self.endpoint {
                    endpoint.deposed = Some(primary);
                }
            }
            return Ok(());
        }
        if let Some((group, last)) = &mut self.sentinel {
            // `SENTINEL FAILOVER`, waited for: the sentinels promote the cut-off replica.
            *last = group.primary()?;
            group.failover()?;
            return Ok(());
        }
        let shard = self.shard(slot)?;
        let replica = 1 - shard.master;
        shard
            .cluster
            .node(replica)
            .cli(&["CLUSTER", "FAILOVER", "TAKEOVER"])?;
        Ok(())
    }

    /// Waits (at most [`TAKEOVER_TIMEOUT`]) until Redis Cluster `slot`'s replica reports itself
    /// master after [`Topology::take_over`], gives it its `masterauth` back (invariant 3) and
    /// counts it as the master; returns the old master and the new one.
    pub(crate) fn promoted(&mut self, slot: usize) -> Result<(usize, usize), ChaosError> {
        if let Some(endpoint) = &mut self.endpoint {
            let (new, old) = endpoint.cut.take().ok_or_else(|| {
                ChaosError::Config("no replica was cut off before the takeover".to_owned())
            })?;
            return Ok((old, new));
        }
        if let Some((group, last)) = &mut self.sentinel {
            let old = *last;
            let new = group.await_new_primary(old)?;
            group
                .data_node(new)
                .cli(&["CONFIG", "SET", "masterauth", ""])?;
            *last = new;
            return Ok((old, new));
        }
        let shard = self.shard(slot)?;
        let (old, new) = (shard.master, 1 - shard.master);
        until_master(shard.cluster.node(new), slot)?;
        shard
            .cluster
            .node(new)
            .cli(&["CONFIG", "SET", "masterauth", ""])?;
        shard.master = new;
        Ok((2 * slot + old, 2 * slot + new))
    }

    /// The `failback` fault's promotion and failback, on every cluster of `slots` at once, over
    /// connections of its own (a `redis-cli` process per command took about 90 ms for the
    /// sequence, longer than most critical sections it is aimed at):
    /// 1. each replica's client writes are paused (`CLIENT PAUSE … WRITE`, at most
    ///    [`FAILBACK_PAUSE`]: reads, the cluster bus and replication go on), so that no client
    ///    rewrites the marker it got from its master while it leads, and it takes over
    ///    (`CLUSTER FAILOVER TAKEOVER`), missing the writes since its replication was cut;
    /// 2. once it is master it gets its `masterauth` back, and the old master turns its
    ///    replica and resynchronises from it in full, losing those writes;
    /// 3. once in sync, the old master takes over again (`TAKEOVER`: the writes of the one
    ///    leading are paused, so the handshake has nothing to add), and the other's clients
    ///    may write again.
    ///
    /// Returns, per cluster, the old master and the replica that led in between.
    pub(crate) fn fail_over_and_back(
        &mut self,
        slots: &[usize],
    ) -> Result<Vec<(usize, usize)>, ChaosError> {
        let mut links = Vec::with_capacity(slots.len());
        for &slot in slots {
            let shard = self.shard(slot)?;
            let (old, new) = (shard.master, 1 - shard.master);
            let old_link = connect(shard.cluster.node(old).port())?;
            let new_link = connect(shard.cluster.node(new).port())?;
            links.push((slot, old, new, old_link, new_link));
        }
        let pause = FAILBACK_PAUSE.as_millis().to_string();
        for (_, _, _, _, new_link) in &mut links {
            redis::pipe()
                .cmd("CLIENT")
                .arg(&["PAUSE", pause.as_str(), "WRITE"][..])
                .cmd("CLUSTER")
                .arg(&["FAILOVER", "TAKEOVER"][..])
                .exec(new_link)
                .map_err(replication)?;
        }
        for (slot, _, _, _, new_link) in &mut links {
            until_role(new_link, *slot, "master")?;
            redis::cmd("CONFIG")
                .arg(&["SET", "masterauth", ""][..])
                .exec(new_link)
                .map_err(replication)?;
        }
        for (slot, _, _, old_link, _) in &mut links {
            until_in_sync(old_link, *slot)?;
        }
        for (_, _, _, old_link, _) in &mut links {
            redis::cmd("CLUSTER")
                .arg(&["FAILOVER", "TAKEOVER"][..])
                .exec(old_link)
                .map_err(replication)?;
        }
        let mut changed = Vec::with_capacity(links.len());
        for (slot, old, new, old_link, new_link) in &mut links {
            until_role(old_link, *slot, "master")?;
            redis::cmd("CLIENT")
                .arg("UNPAUSE")
                .exec(new_link)
                .map_err(replication)?;
            changed.push((2 * *slot + *old, 2 * *slot + *new));
        }
        Ok(changed)
    }

    /// Waits until Redis Cluster `slot` is ok again: every node agrees on the new master, and
    /// the old one has resynchronised from it as its replica.
    pub(crate) fn settle(&mut self, slot: usize) -> Result<(), ChaosError> {
        if let Some(endpoint) = &mut self.endpoint {
            // The old primary, made a replica of the promoted one, resynchronised.
            if let Some(old) = endpoint.deposed.take()
                && self.nodes[old].is_running()
            {
                return wait_for_sync(&self.nodes[old]);
            }
            return Ok(());
        }
        if let Some((group, last)) = &mut self.sentinel {
            // The old primary, made a replica by the sentinels, resynchronised in full.
            let old = 1 - *last;
            return wait_for_sync(group.data_node(old));
        }
        self.shard(slot)?.cluster.wait_until_ok()?;
        Ok(())
    }

    fn shard(&mut self, slot: usize) -> Result<&mut Shard, ChaosError> {
        self.clusters
            .get_mut(slot)
            .ok_or_else(|| ChaosError::Config(format!("there is no Redis Cluster {slot}")))
    }
}

/// The slots client group `group` reaches in a ring of majorities over `slots` rotated by
/// `offset`: the majority of consecutive slots from `group + offset` on, wrapping. Neighbouring
/// groups' majorities differ by one slot, so any two share a node while three need not (with 5
/// slots: `{0,1,2}`, `{2,3,4}`, `{4,0,1}`), which is what breaks a count kept per node.
pub(crate) fn ring(group: usize, offset: usize, slots: usize) -> Vec<usize> {
    let majority = slots / 2 + 1;
    (0..majority.min(slots))
        .map(|i| (group + offset + i) % slots.max(1))
        .collect()
}

/// A connection of the fault injector's own to the server on `port`, bounded like `redis-cli`.
fn connect(port: u16) -> Result<redis::Connection, ChaosError> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).map_err(replication)?;
    let link = client
        .get_connection_with_timeout(TAKEOVER_TIMEOUT)
        .map_err(replication)?;
    link.set_read_timeout(Some(TAKEOVER_TIMEOUT))
        .map_err(replication)?;
    Ok(link)
}

fn replication(e: redis::RedisError) -> ChaosError {
    ChaosError::Replication(e.to_string())
}

/// Waits (at most [`TAKEOVER_TIMEOUT`]) until the server on `link`, of Redis Cluster `slot`,
/// reports `role` (`ROLE`'s first element), polling every millisecond.
fn until_role(link: &mut redis::Connection, slot: usize, role: &str) -> Result<(), ChaosError> {
    let give_up = Instant::now() + TAKEOVER_TIMEOUT;
    // Bounded by TAKEOVER_TIMEOUT: each pass sleeps 1 ms.
    loop {
        let reply: redis::Value = redis::cmd("ROLE").query(link).map_err(replication)?;
        let first = match &reply {
            redis::Value::Array(items) => items.first(),
            _ => None,
        };
        if matches!(first, Some(redis::Value::BulkString(b)) if b == role.as_bytes()) {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err(ChaosError::Replication(format!(
                "a node of cluster {slot} did not turn {role} within {TAKEOVER_TIMEOUT:?}"
            )));
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Waits (at most [`SYNC_TIMEOUT`]) until the server on `link`, of Redis Cluster `slot`, is a
/// replica whose link to its master is up, polling every millisecond.
fn until_in_sync(link: &mut redis::Connection, slot: usize) -> Result<(), ChaosError> {
    let give_up = Instant::now() + SYNC_TIMEOUT;
    // Bounded by SYNC_TIMEOUT: each pass sleeps 1 ms.
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(link)
            .map_err(replication)?;
        let replica = info.lines().any(|l| l.trim() == "role:slave");
        if replica && info.lines().any(|l| l.trim() == "master_link_status:up") {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err(ChaosError::Replication(format!(
                "the old master of cluster {slot} was not an in-sync replica within \
                 {SYNC_TIMEOUT:?}"
            )));
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// Waits (at most [`TAKEOVER_TIMEOUT`]) until `node` of Redis Cluster `slot` reports itself
/// master after `CLUSTER FAILOVER TAKEOVER`.
fn until_master(node: &RedisNode, slot: usize) -> Result<(), ChaosError> {
    let give_up = Instant::now() + TAKEOVER_TIMEOUT;
    // Bounded by TAKEOVER_TIMEOUT: each pass sleeps 20 ms.
    while !node.cli(&["ROLE"])?.starts_with("master") {
        if Instant::now() >= give_up {
            return Err(ChaosError::Replication(format!(
                "a node of cluster {slot} was not master {TAKEOVER_TIMEOUT:?} after \
                 CLUSTER FAILOVER TAKEOVER"
            )));
        }
        thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Waits until `replica` reports its link to the master up, polling `INFO replication`.
fn wait_for_sync(replica: &RedisNode) -> Result<(), ChaosError> {
    let give_up = Instant::now() + SYNC_TIMEOUT;
    loop {
        let info = replica.cli(&["INFO", "replication"])?;
        if info.lines().any(|l| l.trim() == "master_link_status:up") {
            return Ok(());
        }
        if Instant::now() >= give_up {
            return Err(ChaosError::Replication(format!(
                "the replica did not finish its first synchronisation within {SYNC_TIMEOUT:?}"
            )));
        }
        thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_gives_each_group_a_majority_and_no_node_to_all() {
        assert_eq!(ring(0, 0, 5), [0, 1, 2]);
        assert_eq!(ring(2, 0, 5), [2, 3, 4]);
        assert_eq!(ring(4, 1, 5), [0, 1, 2]);
        assert_eq!(ring(0, 0, 1), [0]);
        assert_eq!(ring(1, 0, 2), [1, 0]);
        for slots in 1..=7 {
            for offset in 0..slots {
                let majorities: Vec<Vec<usize>> =
                    (0..slots).map(|g| ring(g, offset, slots)).collect();
                for (a, b) in majorities.iter().zip(majorities.iter().skip(1)) {
                    assert!(a.iter().any(|s| b.contains(s)), "{slots}: {a:?} {b:?}");
                }
                if slots >= 3 {
                    // No node is in every group's majority.
                    assert!((0..slots).all(|s| majorities.iter().any(|m| !m.contains(&s))));
                }
            }
        }
    }

    /// The `failover` fault's mechanism against real servers: a write made while the replica is
    /// cut off is on neither server once the replica has taken over; one made before is on both.
    #[test]
    fn a_replica_cut_off_then_promoted_lacks_the_windows_writes() {
        let mut topology = Topology::start(
            Layout::Clusters(1),
            redquorum::cluster_marker,
            Vec::new(),
            None,
        )
        .expect("a Redis Cluster");
        assert_eq!((topology.slots(), topology.node_count()), (1, 2));
        assert!(topology.urls()[0].starts_with("redis+cluster://127.0.0.1:"));
        let master = topology.node_of(0);
        topology
            .server(master)
            .cli(&["SET", "before", "1"])
            .unwrap();
        topology
            .shard(0)
            .unwrap()
            .cluster
            .wait_for_replication(0)
            .unwrap();
        assert_eq!(topology.cut_replica(0).unwrap(), Some(master));
        for i in 0..20 {
            let key = format!("window:{i}");
            topology.server(master).cli(&["SET", &key, "1"]).unwrap();
            thread::sleep(Duration::from_millis(50));
        }
        topology.take_over(0).unwrap();
        let (old, new) = topology.promoted(0).unwrap();
        assert_eq!((old, new), (master, 1 - master));
        assert_eq!(topology.node_of(0), new);
        topology.settle(0).unwrap();
        let replica_of_new = topology.server(old).cli(&["INFO", "replication"]).unwrap();
        assert!(replica_of_new.contains("role:slave"), "{replica_of_new}");
        for node in [new, old] {
            let server = topology.server(node);
            // A replica answers reads on its own connection only after READONLY: count keys.
            assert_eq!(server.cli(&["DBSIZE"]).unwrap(), "2", "node {node}"); // before + marker
            let keys = server.cli(&["KEYS", "window:*"]).unwrap();
            assert!(keys.is_empty(), "node {node} has {keys:?}");
        }
        // Back to normal: the new master replicates to its replica, and a second failover the
        // other way works too.
        topology.server(new).cli(&["SET", "after", "1"]).unwrap();
        topology
            .shard(0)
            .unwrap()
            .cluster
            .wait_for_replication(new % 2)
            .unwrap();
        assert_eq!(topology.cut_replica(0).unwrap(), Some(new));
        topology.take_over(0).unwrap();
        assert_eq!(topology.promoted(0).unwrap(), (new, old));
        topology.settle(0).unwrap();
        assert_eq!(topology.server(old).cli(&["DBSIZE"]).unwrap(), "3");
    }
}
