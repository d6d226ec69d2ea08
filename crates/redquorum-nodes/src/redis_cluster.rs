//! A local Redis Cluster: [`RedisCluster`], masters that share the 16,384 hash slots, each with
//! its replicas, for testing what happens to locks when a shard fails over.
//!
//! Not to be confused with [`Cluster`], the set of *independent* masters a Redlock manager is
//! given. A Redis Cluster is formed with the cluster commands themselves (`CLUSTER MEET`,
//! `CLUSTER ADDSLOTSRANGE`, `CLUSTER REPLICATE`) through [`RedisNode::cli`], so that every step
//! is bounded and reported like any other command, and then waited for until every node says
//! `cluster_state:ok` and every replica's link to its master is up.
//!
//! Nodes get no marker key (a key must hash to a slot its node serves; the library decides how a
//! cluster shows it lost its data), and a `cluster-node-timeout` of 5 s, so that a killed master
//! is replaced by its replica within seconds, and a busy one is not.

use std::thread;
use std::time::{Duration, Instant};

use crate::{Cluster, LaunchError, NodeSpec, RedisNode};

/// How many hash slots a Redis Cluster has.
pub const SLOTS: u16 = 16_384;

/// `cluster-node-timeout`: how long a master may be unreachable before its replica takes over.
/// Long enough that a loaded test machine does not fail masters over by itself: with 1 s, a
/// forced failover under the full test suite once left the promoted replica without a key it
/// had acknowledged; a failover of the cluster's own in between is the likely cause (not
/// reproduced since).
const NODE_TIMEOUT_MS: u64 = 5_000;

/// The longest wait for the cluster to form, or for a failover to complete.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// Masters sharing the hash slots evenly (in node order), each followed by its replicas: node
/// `m` is master `m` for `m < masters`, and node `masters + m * replicas + r` is replica `r` of
/// master `m`. All are killed when the value is dropped.
///
/// ```no_run
/// # fn main() -> Result<(), redquorum_nodes::LaunchError> {
/// use redquorum_nodes::{NodeSpec, RedisCluster};
///
/// let mut cluster = RedisCluster::start(3, 1, NodeSpec::new())?;
/// let owner = cluster.owner_of("lock:1")?; // the node serving the key's slot
/// cluster.node(owner).cli(&["SET", "lock:1", "v"])?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Cluster,
    /// Each node's cluster id (`CLUSTER MYID`), in node order.
    ids: Vec<String>,
}

impl RedisCluster {
    /// Starts `masters × (1 + replicas)` cluster-enabled nodes from `spec` (its port, directory,
    /// persistence and arguments apply to each), forms the cluster, and waits until it serves
    /// every slot and every replica follows its master.
    ///
    /// # Errors
    ///
    /// [`LaunchError::InvalidSpec`] for no masters or more masters than slots; those of
    /// [`Cluster::start`] and [`RedisNode::cli`]; [`LaunchError::ClusterNotReady`] if the
    /// cluster does not form within 30 s.
    pub fn start(masters: usize, replicas: usize, spec: NodeSpec) -> Result<Self, LaunchError> {
        if masters == 0 || masters > usize::from(SLOTS) {
            return Err(LaunchError::InvalidSpec(format!(
                "a Redis Cluster needs 1 to {SLOTS} masters, not {masters}"
            )));
        }
        let total = masters
            .checked_mul(replicas + 1)
            .ok_or_else(|| LaunchError::InvalidSpec("too many cluster nodes".to_owned()))?;
        let spec = spec
            .marked(false)
            .arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-node-timeout")
            .arg(NODE_TIMEOUT_MS.to_string());
        let mut cluster = Self {
            nodes: Cluster::start(total, spec)?,
            ids: Vec::with_capacity(total),
        };
        cluster.form(masters, replicas)?;
        Ok(cluster)
    }

    fn form(&mut self, masters: usize, replicas: usize) -> Result<(), LaunchError> {
        for node in self.nodes.iter() {
            self.ids.push(node.cli(&["CLUSTER", "MYID"])?);
        }
        let first = self.nodes.node(0).port();
        for node in self.nodes.iter().skip(1) {
            node.cli(&["CLUSTER", "MEET", "127.0.0.1", &first.to_string()])?;
        }
        let per_master = usize::from(SLOTS).div_ceil(masters);
        for m in 0..masters {
            let low = m * per_master;
            let high = ((m + 1) * per_master).min(usize::from(SLOTS)) - 1;
            self.nodes.node(m).cli(&[
                "CLUSTER",
                "ADDSLOTSRANGE",
                &low.to_string(),
                &high.to_string(),
            ])?;
        }
        let total = self.nodes.len();
        self.wait_until("every node knows every other", |cluster| {
            Ok(cluster.nodes.iter().all(|node| {
                node.cli(&["CLUSTER", "NODES"])
                    .is_ok_and(|nodes| nodes.lines().count() == total)
            }))
        })?;
        for m in 0..masters {
            for r in 0..replicas {
                let replica = masters + m * replicas + r;
                let master_id = self.ids[m].clone();
                self.nodes
                    .node(replica)
                    .cli(&["CLUSTER", "REPLICATE", &master_id])?;
            }
        }
        self.wait_until_ok()
    }

    /// Waits until every running node reports `cluster_state:ok` and every running replica's
    /// link to its master is up.
    ///
    /// # Errors
    ///
    /// [`LaunchError::ClusterNotReady`] after 30 s.
    pub fn wait_until_ok(&mut self) -> Result<(), LaunchError> {
        self.wait_until("cluster_state:ok on every node", |cluster| {
            for node in cluster.nodes.iter_mut() {
                if !node.is_running() {
                    continue;
                }
                let info = node.cli(&["CLUSTER", "INFO"])?;
                if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
                    return Ok(false);
                }
                let replication = node.cli(&["INFO", "replication"])?;
                let replica = replication.lines().any(|l| l.trim() == "role:slave");
                let linked = replication
                    .lines()
                    .any(|l| l.trim() == "master_link_status:up");
                if replica && !linked {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    fn wait_until(
        &mut self,
        what: &str,
        mut done: impl FnMut(&mut Self) -> Result<bool, LaunchError>,
    ) -> Result<(), LaunchError> {
        let start = Instant::now();
        loop {
            // A node still joining may refuse a command; only the deadline is an error.
            if let Ok(true) = done(self) {
                return Ok(());
            }
            if start.elapsed() > FORM_TIMEOUT {
                return Err(LaunchError::ClusterNotReady {
                    what: what.to_owned(),
                    waited: FORM_TIMEOUT,
                });
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Every node's `redis://127.0.0.1:PORT`, in node order: seeds for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.urls()
    }

    /// Node `i` (see [`RedisCluster`] for the order).
    ///
    /// # Panics
    ///
    /// If `i` is out of range.
    pub fn node(&mut self, i: usize) -> &mut RedisNode {
        self.nodes.node(i)
    }

    /// How many nodes, masters and replicas.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always `false`: a Redis Cluster has at least one master.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The hash slot of `key` (`CLUSTER KEYSLOT`, asked of a running node).
    ///
    /// # Errors
    ///
    /// Those of [`RedisNode::cli`]; [`LaunchError::ClusterNotReady`] if no node answers.
    pub fn slot_of(&mut self, key: &str) -> Result<u16, LaunchError> {
        let reply = self.ask_any(&["CLUSTER", "KEYSLOT", key])?;
        reply.parse().map_err(|_| LaunchError::ClusterNotReady {
            what: format!("a slot number for {key:?}, not {reply:?}"),
            waited: Duration::ZERO,
        })
    }

    /// `args` answered by the first running node that answers.
    fn ask_any(&mut self, args: &[&str]) -> Result<String, LaunchError> {
        let mut last = None;
        for node in self.nodes.iter_mut() {
            if !node.is_running() {
                continue;
            }
            match node.cli(args) {
                Ok(reply) => return Ok(reply),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| LaunchError::ClusterNotReady {
            what: "a running node".to_owned(),
            waited: Duration::ZERO,
        }))
    }

    /// The node that serves `key`'s slot now, as a running node sees the cluster.
    ///
    /// # Errors
    ///
    /// Those of [`RedisNode::cli`]; [`LaunchError::ClusterNotReady`] if no running master
    /// serves the slot.
    pub fn owner_of(&mut self, key: &str) -> Result<usize, LaunchError> {
        let slot = self.slot_of(key)?;
        for i in 0..self.nodes.len() {
            let node = self.nodes.node(i);
            if !node.is_running() {
                continue;
            }
            let role = node.cli(&["ROLE"])?;
            if !role.starts_with("master") {
                continue;
            }
            // Its own line of CLUSTER NODES ("myself") lists the slot ranges it serves.
            let nodes = node.cli(&["CLUSTER", "NODES"])?;
            let serves = nodes
                .lines()
                .find(|line| line.contains("myself"))
                .is_some_and(|line| serves_slot(line, slot));
            if serves {
                return Ok(i);
            }
        }
        Err(LaunchError::ClusterNotReady {
            what: format!("a running master serving slot {slot}"),
            waited: Duration::ZERO,
        })
    }

    /// Makes replica `i` take over from its master at once (`CLUSTER FAILOVER FORCE`: no
    /// handshake with the master, which may be down), and waits until the cluster is ok again.
    ///
    /// # Errors
    ///
    /// Those of [`RedisNode::cli`] (on a master: "You should send CLUSTER FAILOVER to a
    /// replica"), [`LaunchError::ClusterNotReady`] if it is not master within 30 s.
    pub fn failover(&mut self, i: usize) -> Result<(), LaunchError> {
        self.nodes.node(i).cli(&["CLUSTER", "FAILOVER", "FORCE"])?;
        self.wait_until("the replica to become master", |cluster| {
            Ok(cluster.nodes.node(i).cli(&["ROLE"])?.starts_with("master"))
        })?;
        self.wait_until_ok()
    }
}

/// Whether a `CLUSTER NODES` line lists `slot` among its ranges (fields 9 onwards: `N` or
/// `LOW-HIGH`; importing and migrating entries in brackets are not served).
fn serves_slot(line: &str, slot: u16) -> bool {
    line.split_whitespace().skip(8).any(|range| {
        let mut bounds = range.splitn(2, '-').map(str::parse::<u16>);
        match (bounds.next(), bounds.next()) {
            (Some(Ok(low)), None) => low == slot,
            (Some(Ok(low)), Some(Ok(high))) => (low..=high).contains(&slot),
            _ => false,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_line_lists_single_slots_and_ranges() {
        let line =
            "abc 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 6000 [7000->-def]";
        assert!(serves_slot(line, 0));
        assert!(serves_slot(line, 5460));
        assert!(serves_slot(line, 6000));
        assert!(!serves_slot(line, 5461));
        assert!(!serves_slot(line, 7000), "a migrating slot is not counted");
    }
}
