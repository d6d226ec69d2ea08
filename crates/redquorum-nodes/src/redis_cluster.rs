//! A local Redis Cluster: [`RedisCluster`], masters that share the 16,384 hash slots, each with
//! its replicas, for testing what happens to locks when a shard fails over.
//!
//! Not to be confused with [`Cluster`], the set of *independent* masters a Redlock manager is
//! given. A Redis Cluster is formed with the cluster commands themselves (`CLUSTER
//! SET-CONFIG-EPOCH`, `CLUSTER MEET`, `CLUSTER ADDSLOTSRANGE`, `CLUSTER REPLICATE`) through
//! [`RedisNode::cli`], so that every step is bounded and reported like any other command, and
//! then waited for until every node says `cluster_state:ok`, every replica's link to its master
//! is up, and every node describes the same topology.
//!
//! Nodes get no marker key when they start (a key must hash to a slot its node serves, which is
//! known only once the cluster is formed): [`RedisCluster::mark_masters`] writes each master's,
//! named as the lock library names it. Nodes run with a `cluster-node-timeout` of 5 s, so that a
//! killed master is replaced by its replica within seconds, and a busy one is not.

use std::thread;
use std::time::{Duration, Instant};

use crate::{Cluster, LaunchError, NodeSpec, RedisNode};

/// How many hash slots a Redis Cluster has.
pub const SLOTS: u16 = 16_384;

/// `cluster-node-timeout`: how long a master may be unreachable before its replica takes over.
/// Long enough that a loaded test machine does not fail masters over by itself.
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
    /// [`LaunchError::InvalidSpec`] for no masters or more masters than slots, or for a
    /// directory that holds an earlier cluster's state (a node that already knows other nodes
    /// from its `nodes.conf`); those of [`Cluster::start`] and [`RedisNode::cli`];
    /// [`LaunchError::ClusterNotReady`] if the cluster does not form within 30 s. On any error,
    /// the nodes this call started are stopped, detached or not: a cluster that did not form is
    /// of no use, and the caller has no value through which to stop them.
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
            .arg(NODE_TIMEOUT_MS.to_string())
            // A replica's first sync starts at once, not after the default 5 s wait for more
            // replicas to share one diskless transfer.
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        let mut cluster = Self {
            nodes: Cluster::start(total, spec)?,
            ids: Vec::with_capacity(total),
        };
        if let Err(e) = cluster.form(masters, replicas) {
            for node in cluster.nodes.iter_mut() {
                // Best effort: the forming error is the one worth reporting.
                let _ = node.kill();
            }
            return Err(e);
        }
        Ok(cluster)
    }

    fn form(&mut self, masters: usize, replicas: usize) -> Result<(), LaunchError> {
        for (i, node) in self.nodes.iter().enumerate() {
            self.ids.push(node.cli(&["CLUSTER", "MYID"])?);
            if node.cli(&["CLUSTER", "NODES"])?.lines().count() > 1 {
                return Err(LaunchError::InvalidSpec(format!(
                    "{} holds an earlier cluster's state (nodes.conf): start a new cluster in \
                     an empty directory",
                    node.dir().display()
                )));
            }
            // Distinct config epochs before the nodes meet, as `redis-cli --cluster create`
            // gives them. Left at 0, the masters settle their collision by gossip after the
            // cluster says ok, and a replica that asks for votes with its master's epoch from
            // before the settling is refused; the next election comes only 4 node-timeouts later.
            node.cli(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])?;
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

    /// Waits until every running node reports `cluster_state:ok`, every running replica's link
    /// to its master is up, and all running nodes describe the same topology (who is master,
    /// whose replica, which config epoch, which slots): right after a change, gossip has not
    /// reached every node.
    ///
    /// # Errors
    ///
    /// [`LaunchError::ClusterNotReady`] after 30 s.
    pub fn wait_until_ok(&mut self) -> Result<(), LaunchError> {
        self.wait_until("cluster_state:ok on every node", |cluster| {
            let mut seen = None;
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
                let view = topology(&node.cli(&["CLUSTER", "NODES"])?);
                match &seen {
                    None => seen = Some(view),
                    Some(first) if *first != view => return Ok(false),
                    Some(_) => {}
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

    /// The lock library's URL for this cluster as one Redlock node,
    /// `redis+cluster://127.0.0.1:PORT,…`, with every node as a seed.
    pub fn url(&self) -> String {
        self.url_with_seeds(&(0..self.nodes.len()).collect::<Vec<_>>())
    }

    /// [`RedisCluster::url`] with nodes `seeds` as the seeds, in that order.
    ///
    /// # Panics
    ///
    /// If a node index is out of range.
    pub fn url_with_seeds(&self, seeds: &[usize]) -> String {
        let urls = self.nodes.urls();
        let seeds: Vec<&str> = seeds
            .iter()
            .map(|&i| urls[i].trim_start_matches("redis://"))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
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

    /// Writes a brand-new marker on every running master (`SET … NX`): the key and value
    /// `marker` gives for the lowest slot the master serves and its `INFO` (the library's
    /// `cluster_marker`), so that clients trust the masters of a new cluster at once, as they
    /// trust a new plain node.
    ///
    /// # Errors
    ///
    /// Those of [`RedisNode::cli`].
    pub fn mark_masters(
        &mut self,
        marker: impl Fn(u16, &str) -> (String, String),
    ) -> Result<(), LaunchError> {
        for i in 0..self.nodes.len() {
            let node = self.nodes.node(i);
            if !node.is_running() || !node.cli(&["ROLE"])?.starts_with("master") {
                continue;
            }
            let nodes = node.cli(&["CLUSTER", "NODES"])?;
            let lowest = nodes
                .lines()
                .find(|line| line.contains("myself"))
                .and_then(lowest_slot);
            let Some(lowest) = lowest else { continue };
            let info = node.cli(&["INFO"])?;
            let (key, value) = marker(lowest, &info);
            node.cli(&["SET", &key, &value, "NX"])?;
        }
        Ok(())
    }

    /// Waits until every replica of master `m` has acknowledged everything `m` has written so
    /// far (its `master_repl_offset`), as `m` itself reports them in `INFO replication`.
    ///
    /// This is the check a test wants before a failover, and `WAIT` from another client cannot
    /// give it: `WAIT` counts only the writes of its own connection, so on a fresh connection
    /// (one `redis-cli` run) it returns at once whatever the replicas have.
    ///
    /// # Errors
    ///
    /// Those of [`RedisNode::cli`]; [`LaunchError::ClusterNotReady`] after 30 s.
    pub fn wait_for_replication(&mut self, m: usize) -> Result<(), LaunchError> {
        let replicas = self.replicas_of(m)?;
        self.wait_until(
            "the replicas to acknowledge the master's writes",
            |cluster| {
                let info = cluster.nodes.node(m).cli(&["INFO", "replication"])?;
                Ok(replicas_caught_up(&info, replicas))
            },
        )
    }

    /// How many running nodes replicate from master `m` with their link up, each by its own
    /// `INFO replication`: the master's `CLUSTER NODES` may still list a new replica as a master
    /// until the next gossip reaches it.
    fn replicas_of(&mut self, m: usize) -> Result<usize, LaunchError> {
        let port = format!("master_port:{}", self.nodes.node(m).port());
        let mut replicas = 0;
        for node in self.nodes.iter_mut() {
            if !node.is_running() {
                continue;
            }
            let info = node.cli(&["INFO", "replication"])?;
            let has = |wanted: &str| info.lines().any(|line| line.trim() == wanted);
            if has("role:slave") && has(&port) && has("master_link_status:up") {
                replicas += 1;
            }
        }
        Ok(replicas)
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

/// The lowest slot a `CLUSTER NODES` line lists as served.
fn lowest_slot(line: &str) -> Option<u16> {
    line.split_whitespace()
        .skip(8)
        .filter_map(|range| range.split('-').next()?.parse::<u16>().ok())
        .min()
}

/// A node's view of the cluster from its `CLUSTER NODES`: each node's id, role, master, config
/// epoch (a replica's line shows its master's) and slot ranges, sorted, without what differs
/// between observers (`myself`, failure suspicions, ping times).
fn topology(nodes: &str) -> Vec<(String, bool, String, String, Vec<String>)> {
    let mut view: Vec<_> = nodes
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (id, flags, master) = (fields.first()?, fields.get(2)?, fields.get(3)?);
            let is_master = flags.split(',').any(|flag| flag == "master");
            // The config epoch: a replica asks for failover votes with its master's, and a
            // master refuses a vote asked with an epoch older than the one it knows.
            let epoch = fields.get(6)?;
            let slots = fields.iter().skip(8).map(|s| (*s).to_owned()).collect();
            Some((
                (*id).to_owned(),
                is_master,
                (*master).to_owned(),
                (*epoch).to_owned(),
                slots,
            ))
        })
        .collect();
    view.sort();
    view
}

/// Whether `INFO replication` of a master shows at least `replicas` replicas online, each with an acknowledged
/// `offset=` at least the master's `master_repl_offset`.
fn replicas_caught_up(info: &str, replicas: usize) -> bool {
    let Some(written) = info.lines().find_map(|line| {
        line.trim()
            .strip_prefix("master_repl_offset:")?
            .parse::<u64>()
            .ok()
    }) else {
        return false;
    };
    let acknowledged: Vec<u64> = info
        .lines()
        .filter(|line| line.starts_with("slave") && line.contains("state=online"))
        .filter_map(|line| {
            line.trim()
                .split(',')
                .find_map(|part| part.strip_prefix("offset=")?.parse().ok())
        })
        .collect();
    acknowledged.len() >= replicas && acknowledged.iter().all(|offset| *offset >= written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_have_caught_up_when_each_acknowledged_the_masters_offset() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
            slave0:ip=127.0.0.1,port=7003,state=online,offset=56,lag=0\r\n\
            master_repl_offset:56\r\n";
        assert!(replicas_caught_up(info, 1));
        assert!(!replicas_caught_up(info, 2), "a replica is missing");
        assert!(replicas_caught_up(info, 0));
        let behind = info.replace("offset=56,", "offset=14,");
        assert!(!replicas_caught_up(&behind, 1));
        let syncing = info.replace("state=online", "state=wait_bgsave");
        assert!(!replicas_caught_up(&syncing, 1));
    }

    #[test]
    fn observers_agree_on_a_topology_whoever_they_are_and_whatever_they_suspect() {
        let from_a = "a 127.0.0.1:1@11 myself,master - 0 0 1 connected 0-8191\n\
                      b 127.0.0.1:2@12 master - 0 5 2 connected 8192-16383\n\
                      c 127.0.0.1:3@13 slave a 0 7 1 connected";
        let from_c = "c 127.0.0.1:3@13 myself,slave a 0 0 1 connected\n\
                      a 127.0.0.1:1@11 master - 0 9 1 connected 0-8191\n\
                      b 127.0.0.1:2@12 master,fail? - 0 8 2 connected 8192-16383";
        assert_eq!(topology(from_a), topology(from_c));
        let stale = from_c.replace("myself,slave a", "myself,master -");
        assert_ne!(
            topology(from_a),
            topology(&stale),
            "c not yet known as a's replica"
        );
        let unsettled = from_c.replace("0 9 1 connected 0-8191", "0 9 3 connected 0-8191");
        assert_ne!(
            topology(from_a),
            topology(&unsettled),
            "a's new config epoch not yet known to c"
        );
    }

    #[test]
    fn a_nodes_line_lists_single_slots_and_ranges() {
        let line =
            "abc 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460 6000 [7000->-def]";
        assert!(serves_slot(line, 0));
        assert!(serves_slot(line, 5460));
        assert!(serves_slot(line, 6000));
        assert!(!serves_slot(line, 5461));
        assert!(!serves_slot(line, 7000), "a migrating slot is not counted");
        assert_eq!(lowest_slot(line), Some(0));
        assert_eq!(
            lowest_slot("abc 127.0.0.1:7000@17000 master - 0 0 1 connected"),
            None
        );
    }
}
