//! Who holds a resource, node by node: a read-only look for operators and the CLI's `status`.
//!
//! [`Redlock::status`] asks every node at once what the resource's key holds (type, value and
//! time to live, read atomically by one script, `src/scripts/inspect.lua`) and reports each
//! node's answer as it is. It does not vote and decides nothing: whether a value is held "by a
//! quorum" is the caller's reading of the list (the CLI prints it as a summary line).
//!
//! This fan-out is deliberately not the manager's voting round: it has no tally, no early exit
//! and nothing to roll back, only one answer per node, each bounded by the node timeout.

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::Value;

use crate::Shard;
use crate::manager::Redlock;
use crate::marker::MarkerState;
use crate::quarantine::Quarantine;
use crate::reply::{NodeError, Reply};
use crate::scripts::INSPECT;

/// What one node holds for a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeState {
    /// The key does not exist: the resource is free on this node.
    Free,
    /// The key is a string, as every Redlock lock is: held by whoever acquired `value`.
    Held {
        /// The stored value, the lock holder's random token (non-UTF-8 bytes are shown lossily).
        value: String,
        /// The time left before the key expires; `None` when it has no expiry (not a Redlock
        /// lock, which always has one).
        ttl: Option<Duration>,
    },
    /// The key is a sorted set: a read-write lock's readers
    /// ([`Redlock::acquire_read`](crate::Redlock::acquire_read)).
    Readers {
        /// How many reader entries it holds (entries of readers whose expiry passed count until
        /// the next writer or release sweeps them).
        count: u64,
        /// The time left before the set expires with its longest-lived reader.
        ttl: Option<Duration>,
    },
    /// The key exists with another Redis type: it is not a lock, and locking it fails with
    /// `WRONGTYPE`.
    OtherType {
        /// The Redis type, e.g. `hash` or `list`.
        kind: String,
        /// The time left before the key expires; `None` when it has no expiry.
        ttl: Option<Duration>,
    },
    /// The node could not be asked: [`Reply::Timeout`], [`Reply::Unreachable`] or
    /// [`Reply::ServerError`] (e.g. `NOAUTH`).
    Unavailable(Reply),
}

/// One node's answer to [`Redlock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The node's address, without credentials.
    pub node: String,
    /// What it holds for the resource, or why it could not be asked.
    pub state: NodeState,
    /// The node's quarantine (its grants are not votes), if it is quarantined: how much longer,
    /// and why; see [`Builder::quarantine`](crate::Builder::quarantine).
    pub quarantine: Option<Quarantine>,
    /// The node's marker as this client last saw it (`None` with the quarantine off).
    pub marker: Option<MarkerState>,
    /// Whether the node's `maxmemory-policy` lets it evict keys under memory pressure (`false`
    /// when unknown, e.g. `CONFIG` not allowed). An evicted lock key is a lock that a second
    /// client can take while its holder relies on it: lock nodes need `noeviction`.
    pub may_evict: bool,
    /// On a Redis Cluster node, the shard that serves the resource: its master and replicas.
    pub shard: Option<Shard>,
}

impl NodeStatus {
    /// Whether the node answered.
    pub fn is_reachable(&self) -> bool {
        !matches!(self.state, NodeState::Unavailable(_))
    }

    /// The lock value the node holds, if the key is a string.
    pub fn value(&self) -> Option<&str> {
        match &self.state {
            NodeState::Held { value, .. } => Some(value),
            _ => None,
        }
    }
}

impl Redlock {
    /// The nodes that are quarantined now (their grants are not votes), as far as this manager
    /// knows: each node's address, how much longer, and why. Reads what the health checks
    /// found; sends nothing. An application that waits for a lock can show this to say why.
    pub fn quarantined_nodes(&self) -> Vec<(String, Quarantine)> {
        self.engine()
            .nodes
            .iter()
            .filter_map(|node| Some((node.label().to_owned(), node.longest_quarantine()?)))
            .collect()
    }

    /// What every node holds for `resource`, in configuration order.
    ///
    /// All nodes are asked at once, each bounded by the node timeout. The connection to a node is
    /// made on first use and counts against that timeout; on a fresh manager, call
    /// [`connect`](Self::connect) first so that a slow handshake is not reported as a timeout.
    ///
    /// # Cancel safety
    /// Read-only: dropping the future leaves nothing on any server.
    pub async fn status(&self, resource: &str) -> Vec<NodeStatus> {
        let shared = self.engine();
        let deadline = Instant::now() + shared.rules.node_timeout;
        join_all(shared.nodes.iter().map(|node| async move {
            let state = node
                .read(&INSPECT, resource, deadline)
                .await
                .and_then(node_state)
                .unwrap_or_else(|e| NodeState::Unavailable(e.reply()));
            NodeStatus {
                node: node.label().to_owned(),
                state,
                quarantine: node.quarantine(resource),
                marker: node.marker_state(resource),
                may_evict: node.may_evict(),
                shard: tokio::time::timeout_at(deadline.into(), node.shard_of(resource))
                    .await
                    .ok()
                    .flatten(),
            }
        }))
        .await
    }
}

/// Reads the inspect script's `{type, value or nil, pttl}`.
fn node_state(reply: Value) -> Result<NodeState, NodeError> {
    let unexpected =
        |reply: &Value| NodeError::Server(format!("unexpected inspect reply: {reply:?}"));
    let Value::Array(items) = &reply else {
        return Err(unexpected(&reply));
    };
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let (Some(kind), Some(value), Some(Value::Int(pttl))) =
        (items.first().and_then(text), items.get(1), items.get(2))
    else {
        return Err(unexpected(&reply));
    };
    // PTTL: -1 means no expiry, -2 no key (which TYPE already said: the script is atomic).
    let ttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
    Ok(match kind.as_str() {
        "none" => NodeState::Free,
        "string" => NodeState::Held {
            value: text(value).ok_or_else(|| unexpected(&reply))?,
            ttl,
        },
        "zset" => match value {
            Value::Int(count) => NodeState::Readers {
                count: u64::try_from(*count).unwrap_or_default(),
                ttl,
            },
            _ => return Err(unexpected(&reply)),
        },
        _ => NodeState::OtherType { kind, ttl },
    })
}
