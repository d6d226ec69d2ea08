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
//! the same address (a new VM, a moved VIP, a switched proxy). It is emptied (`FLUSHALL`) before
//! each use, since clients write their keys and a new marker on it.
//!
//! # Invariants
//! 1. Servers listen on 127.0.0.1 only, on ports the launcher picked, and every process signalled
//!    is one this topology started (the launcher signals only its own children, by pid).
//! 2. In a failover pair the replication proxy and the client proxy point at the same node, the
//!    master; a node that comes back is made a replica of it before anything else.

use std::thread;
use std::time::{Duration, Instant};

use redquorum_nodes::{LaunchError, NodeSpec, Persistence, RedisNode};

use crate::ChaosError;
use crate::proxy::Proxy;
use crate::strategies::{Layout, TTL};

/// The replication link's delay in each direction, in a failover pair: longer than a lock's TTL
/// (see the module docs).
pub const REPLICATION_DELAY: Duration = TTL.saturating_add(Duration::from_millis(500));
/// How long the first synchronisation may take (over a link without delay).
const SYNC_TIMEOUT: Duration = Duration::from_secs(10);

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
    /// proxy.
    pub(crate) fn proxies_needed(layout: Layout) -> (usize, bool) {
        match layout {
            Layout::Independent(n) => (n, false),
            Layout::Failover => (1, true),
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
                })
            }
            (Layout::Failover, None) => Err(ChaosError::Config(
                "a failover pair needs a replication proxy".to_owned(),
            )),
        }
    }

    /// How many servers there are.
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// How many slots (client-facing proxies) there are.
    pub(crate) fn slots(&self) -> usize {
        self.proxies.len()
    }

    /// The node behind `slot` now.
    pub(crate) fn node_of(&self, slot: usize) -> usize {
        match self.failover {
            Some((_, master)) => master,
            None => slot,
        }
    }

    /// Kills the node behind `slot` with `SIGKILL`. In a failover pair, promotes the replica
    /// (`REPLICAOF NO ONE`) if it is up and points clients and the replication link at it.
    pub(crate) fn kill(&mut self, slot: usize) -> Result<Killed, LaunchError> {
        let node = self.node_of(slot);
        self.nodes[node].kill()?;
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
    pub(crate) fn bring_back(&mut self, node: usize, with_data: bool) -> Result<(), LaunchError> {
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
        Ok(())
    }

    /// Whether a crash of the master now would lose `key`: with a replica, whether the replica
    /// lacks it (the write has not reached it yet); without one, always. A replica that cannot
    /// be asked counts as having it.
    pub(crate) fn replica_lacks(&self, key: &str) -> bool {
        let Some((_, master)) = self.failover else {
            return true;
        };
        let replica = &self.nodes[1 - master];
        replica.cli(&["EXISTS", key]).is_ok_and(|n| n == "0")
    }

    /// `FLUSHALL` on the node behind `slot`, over a connection of its own (not through the
    /// proxy); returns which node.
    pub(crate) fn flush(&self, slot: usize) -> Result<usize, LaunchError> {
        let node = self.node_of(slot);
        self.nodes[node].cli(&["FLUSHALL"])?;
        Ok(node)
    }

    /// Puts `slot`'s spare, emptied, behind its proxy, closing the connections open now;
    /// returns the node the slot had. `false` when the layout has no spares.
    pub(crate) fn replace(&self, slot: usize) -> Result<Option<usize>, LaunchError> {
        let Some(spare) = self.spares.get(slot) else {
            return Ok(None);
        };
        spare.cli(&["FLUSHALL"])?;
        self.proxies[slot].set_upstream(spare.port());
        Ok(Some(self.node_of(slot)))
    }

    /// Puts `slot`'s own node back behind its proxy, closing the connections to the spare.
    pub(crate) fn restore(&self, slot: usize) {
        let node = self.node_of(slot);
        self.proxies[slot].set_upstream(self.nodes[node].port());
    }

    /// Freezes the node behind `slot` (`SIGSTOP`); returns which node.
    pub(crate) fn pause(&mut self, slot: usize) -> Result<usize, LaunchError> {
        let node = self.node_of(slot);
        self.nodes[node].pause()?;
        Ok(node)
    }

    /// Wakes `node` (`SIGCONT`).
    pub(crate) fn resume(&mut self, node: usize) -> Result<(), LaunchError> {
        self.nodes[node].resume()
    }

    /// The proxy of `slot`.
    pub(crate) fn proxy(&self, slot: usize) -> &Proxy {
        &self.proxies[slot]
    }

    /// Whether `node`'s process is alive (paused counts as alive).
    pub(crate) fn is_running(&mut self, node: usize) -> bool {
        self.nodes[node].is_running()
    }
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
