//! What one node answered to one request: the per-node record every failure carries, so a
//! caller can tell "held by someone else" from "node unreachable", node by node. Plain data:
//! the node layer turns a Redis error into a [`Reply`] (`nodes::node_error`).

use std::fmt;

use crate::protocol::quarantine::Quarantine;

/// What one node answered in one round of requests.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// The node did what we asked: `SET NX` stored our value, or the compare-and-delete /
    /// compare-and-expire script found our value and acted on it.
    Granted,
    /// For an acquisition: the key already exists (another holder, or a key of another kind).
    /// For an extension or release: the key does not hold our value (expired, or taken over).
    Refused,
    /// No reply within the per-node timeout.
    Timeout,
    /// No connection to the node (refused, dropped, or could not be established).
    Unreachable(String),
    /// The node answered with an error, e.g. `NOAUTH` or `NOPERM`.
    ServerError(String),
    /// The key exists on the node with another Redis type (`WRONGTYPE`): it is not a lock.
    WrongType(String),
    /// The round was decided before this node answered.
    Pending,
    /// The node did what we asked, but it may have lost its data less than `max_ttl` ago and is
    /// quarantined (for how long, and why): its grant is not a vote.
    Quarantined(Quarantine),
    /// A release under a lock-delay: the node holds our value, but the lock's validity had run
    /// out (the key has no more than the delay left), so the key is left to expire: the lock
    /// stays unavailable for its delay, as if nobody had released it.
    LeftToDelay,
}

impl Reply {
    /// Whether the node did what we asked.
    pub fn is_granted(&self) -> bool {
        matches!(self, Reply::Granted)
    }
}

impl fmt::Display for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reply::Granted => f.write_str("granted"),
            Reply::Refused => f.write_str("refused"),
            Reply::Timeout => f.write_str("timed out"),
            Reply::Unreachable(why) => write!(f, "unreachable ({why})"),
            Reply::ServerError(why) => write!(f, "error reply ({why})"),
            Reply::WrongType(why) => write!(f, "another Redis type ({why})"),
            Reply::Pending => f.write_str("not waited for"),
            Reply::LeftToDelay => {
                f.write_str("the lock had expired before the release: left to its lock-delay")
            }
            Reply::Quarantined(quarantine) => {
                write!(f, "granted, but quarantined: {quarantine} (not a vote)")
            }
        }
    }
}

/// One node's reply, with the node it came from (its address, without credentials).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeReply {
    /// The node's address, e.g. `127.0.0.1:6379`.
    pub node: String,
    /// What it answered.
    pub reply: Reply,
}

impl NodeReply {
    /// `node`'s `reply` (for tests of code that reads replies).
    pub fn new(node: impl Into<String>, reply: Reply) -> Self {
        Self {
            node: node.into(),
            reply,
        }
    }
}
