//! What one node holds for a resource, read atomically by one script
//! (`src/nodes/scripts/inspect.lua`): the key's type, value and time to live. Read by operators'
//! status ([`Redlock::status`](crate::Redlock::status)) and by an acquisition that must tell a
//! read-write lock's readers from a key of another type.

use std::time::{Duration, Instant};

use redis::Value;

use crate::nodes::node::Node;
use crate::nodes::node_error::NodeError;
use crate::nodes::scripts::INSPECT;
use crate::protocol::reply::Reply;

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

/// The same reading as plain fields, for the packages of other languages and the CLI.
impl NodeState {
    /// `free`, `held`, `readers`, `other_type` or `unavailable`: a stable name.
    pub fn name(&self) -> &'static str {
        match self {
            NodeState::Free => "free",
            NodeState::Held { .. } => "held",
            NodeState::Readers { .. } => "readers",
            NodeState::OtherType { .. } => "other_type",
            NodeState::Unavailable(_) => "unavailable",
        }
    }

    /// The lock value, when held.
    pub fn value(&self) -> Option<&str> {
        match self {
            NodeState::Held { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The time left on the key, when it exists and has an expiry.
    pub fn ttl(&self) -> Option<Duration> {
        match self {
            NodeState::Held { ttl, .. }
            | NodeState::Readers { ttl, .. }
            | NodeState::OtherType { ttl, .. } => *ttl,
            NodeState::Free | NodeState::Unavailable(_) => None,
        }
    }

    /// How many reader entries a read-write lock's key holds.
    pub fn readers(&self) -> Option<u64> {
        match self {
            NodeState::Readers { count, .. } => Some(*count),
            _ => None,
        }
    }

    /// Why the node could not be asked, or the Redis type of a key that is not a lock.
    pub fn detail(&self) -> Option<String> {
        match self {
            NodeState::OtherType { kind, .. } => Some(kind.clone()),
            NodeState::Unavailable(reply) => Some(reply.to_string()),
            _ => None,
        }
    }
}

/// What `node` holds for `resource`, or why it could not be asked, by `deadline`.
pub(crate) async fn inspect(node: &Node, resource: &str, deadline: Instant) -> NodeState {
    node.read(&INSPECT, resource, deadline)
        .await
        .and_then(node_state)
        .unwrap_or_else(|e| NodeState::Unavailable(e.reply()))
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
