//! Why a node gave no usable answer to one request, as the node layer classifies a Redis error;
//! callers see it as a [`Reply`].

use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::protocol::reply::Reply;

/// Why a node gave no usable answer to one request (inside the library; callers see a [`Reply`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeError {
    Timeout,
    Unreachable(String),
    Server(String),
    WrongType(String),
    /// A release's key outlived its holder's validity and was left to the lock-delay.
    LeftToDelay,
}

impl NodeError {
    /// The [`Reply`] that reports this error to callers.
    pub(crate) fn reply(&self) -> Reply {
        match self {
            NodeError::Timeout => Reply::Timeout,
            NodeError::Unreachable(why) => Reply::Unreachable(why.clone()),
            NodeError::Server(why) => Reply::ServerError(why.clone()),
            NodeError::WrongType(why) => Reply::WrongType(why.clone()),
            NodeError::LeftToDelay => Reply::LeftToDelay,
        }
    }

    /// Classifies a redis-rs error: an error reply (typed where callers act on it), a timeout,
    /// or no connection.
    pub(crate) fn from_redis(e: &RedisError) -> Self {
        if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) {
            return NodeError::Server("NOSCRIPT".to_owned());
        }
        match e.code() {
            Some(code) => {
                let why = match e.detail() {
                    Some(detail) => format!("{code} {detail}"),
                    None => code.to_owned(),
                };
                // redis-rs has no kind of its own for it.
                if code == "WRONGTYPE" {
                    NodeError::WrongType(why)
                } else {
                    NodeError::Server(why)
                }
            }
            None if e.is_timeout() => NodeError::Timeout,
            None => NodeError::Unreachable(e.to_string()),
        }
    }
}
