//! Several independent nodes started together: [`Cluster`].
//!
//! Redlock's nodes are independent masters, not a Redis Cluster; "cluster" here only means "the
//! set of servers a lock manager is given". All servers are spawned from the calling thread (so
//! `die_with_parent` ties them to that thread, see [`NodeSpec::die_with_parent`]) before any is
//! waited for, so they boot side by side and starting five costs about as much as starting one.

use std::slice;

use crate::probe;
use crate::{LaunchError, NodeSpec, RedisNode};

/// Independent `redis-server` nodes, each with its own port and directory, all killed when the
/// cluster is dropped (unless detached).
///
/// ```
/// # fn main() -> Result<(), redquorum_nodes::LaunchError> {
/// use redquorum_nodes::{Cluster, NodeSpec};
///
/// let mut cluster = Cluster::start(3, NodeSpec::new())?;
/// assert_eq!(cluster.urls().len(), 3);
/// cluster.node(0).kill()?; // one of three down: a majority is still up
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<RedisNode>,
}

impl Cluster {
    /// Starts `n` nodes from `spec` and waits until all answer `PING`.
    ///
    /// Node `i` listens on `port + i` if the spec fixes a port (else each gets a free port) and
    /// keeps its files in `dir/node-i` if the spec names a directory (else each gets its own
    /// temporary directory). If any node fails, all are killed, detached or not, and the first
    /// error is returned.
    ///
    /// # Errors
    ///
    /// [`LaunchError::InvalidSpec`] if `n` is 0 or the ports would pass 65535, else those of
    /// [`RedisNode::start`].
    pub fn start(n: usize, spec: NodeSpec) -> Result<Self, LaunchError> {
        if n == 0 {
            return Err(LaunchError::InvalidSpec(
                "a cluster needs at least one node".to_owned(),
            ));
        }
        let ports = match spec.port {
            Some(base) => (0..n)
                .map(|i| u16::try_from(i).ok().and_then(|i| base.checked_add(i)))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    LaunchError::InvalidSpec(format!("{n} ports from {base} pass 65535"))
                })?,
            None => probe::free_ports(n)?,
        };

        let mut cluster = Self {
            nodes: Vec::with_capacity(n),
        };
        let started = cluster.spawn_all(&spec, ports);
        let started = started.and_then(|()| {
            cluster
                .nodes
                .iter_mut()
                .try_for_each(RedisNode::await_first_ready)
        });
        if let Err(e) = started {
            for node in &mut cluster.nodes {
                // Best effort: the startup error is the one worth reporting.
                let _ = node.kill();
            }
            return Err(e);
        }
        Ok(cluster)
    }

    /// No nodes yet: a placeholder until [`start`](Self::start) returns.
    pub(crate) fn empty() -> Self {
        Self { nodes: Vec::new() }
    }

    fn spawn_all(&mut self, spec: &NodeSpec, ports: Vec<u16>) -> Result<(), LaunchError> {
        for (i, port) in ports.into_iter().enumerate() {
            let mut node_spec = spec.clone();
            node_spec.dir = spec.dir.as_ref().map(|dir| dir.join(format!("node-{i}")));
            let mut node = RedisNode::prepare(node_spec, port, spec.port.is_some())?;
            let spawned = node.spawn();
            // Kept even if spawning failed, so `start` cleans up uniformly.
            self.nodes.push(node);
            spawned?;
        }
        Ok(())
    }

    /// Each node's `redis://127.0.0.1:PORT`, in node order.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisNode::url).collect()
    }

    /// The URLs joined with commas, as the `redlock` CLI's `--servers` takes them.
    pub fn servers(&self) -> String {
        self.urls().join(",")
    }

    /// Node `i`, to kill, pause or restart it.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`, like slice indexing: a test asking for a node it did not start has
    /// a bug.
    pub fn node(&mut self, i: usize) -> &mut RedisNode {
        &mut self.nodes[i]
    }

    /// How many nodes there are (at least one).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Always `false`: a cluster has at least one node. Here because `len` is.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nodes in order.
    pub fn iter(&self) -> slice::Iter<'_, RedisNode> {
        self.nodes.iter()
    }

    /// The nodes in order, mutably (to kill or pause several).
    pub fn iter_mut(&mut self) -> slice::IterMut<'_, RedisNode> {
        self.nodes.iter_mut()
    }
}

impl<'a> IntoIterator for &'a Cluster {
    type Item = &'a RedisNode;
    type IntoIter = slice::Iter<'a, RedisNode>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<'a> IntoIterator for &'a mut Cluster {
    type Item = &'a mut RedisNode;
    type IntoIter = slice::IterMut<'a, RedisNode>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter_mut()
    }
}
