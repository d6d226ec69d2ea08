//! The runner's one error type.
//!
//! A run either produces a [`History`](crate::History) or fails for one of these reasons before
//! it could; violations found in a history are never errors, they are the checker's verdict.

use std::io;

use redquorum_nodes::LaunchError;

/// Why a chaos run could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChaosError {
    /// The configuration cannot work (e.g. no clients, a run too short for any fault).
    #[error("invalid chaos configuration: {0}")]
    Config(String),
    /// A server could not be started or controlled.
    #[error("could not start or control a redis-server")]
    Launch(#[from] LaunchError),
    /// A replica did not synchronise with its master in time.
    #[error("replication: {0}")]
    Replication(String),
    /// The lock library refused the strategy's configuration.
    #[error("the lock library refused the strategy's configuration")]
    Client(#[from] redquorum::Error),
    /// The old recipe's client could not be made.
    #[error("could not create a Redis client")]
    Redis(#[from] redis::RedisError),
    /// The operating system refused something the run needs (a port, a thread).
    #[error("could not {action}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Why it failed.
        #[source]
        source: io::Error,
    },
    /// The run was stopped (Ctrl-C, or its stop token) before its end.
    #[error("interrupted")]
    Interrupted,
}
