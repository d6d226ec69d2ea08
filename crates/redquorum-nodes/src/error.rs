//! The one error type of this crate.
//!
//! Every failure that depends on the operating system or on the server (a missing binary, a port
//! race, a server that never answers, a signal that could not be sent) ends up here as a value,
//! never as a panic. Each message is one line; where an underlying I/O or OS error exists it is
//! returned by [`std::error::Error::source`] and not repeated in the message, so print the chain
//! (for example with `anyhow`'s `{:#}`) to see everything.

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use crate::RedisBinary;

/// Why a node could not be started, controlled or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The `redis-server` or `redis-cli` binary does not exist where we looked.
    #[error(
        "{which} not found at `{}`: install it with `sudo apt-get install -y {}` or set {} to \
         its path",
        binary.display(),
        which.package(),
        which.env()
    )]
    BinaryNotFound {
        /// Which of the two it is; the message names its package and environment variable.
        which: RedisBinary,
        /// The path (or bare name looked up on `PATH`) that was tried.
        binary: PathBuf,
    },

    /// A binary exists but could not be started (permissions, resource limits, ...).
    #[error("could not start `{}`", binary.display())]
    Spawn {
        /// The binary we tried to run.
        binary: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },

    /// A file or directory operation failed.
    #[error("could not {action} `{}`", path.display())]
    Io {
        /// What we were doing, as a verb phrase ("create data directory").
        action: &'static str,
        /// The file or directory concerned.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },

    /// No free loopback port could be found (binding `127.0.0.1:0` failed).
    #[error("could not find a free port on 127.0.0.1")]
    NoFreePort(#[source] io::Error),

    /// The server could not listen because something else holds the port.
    ///
    /// When the port was picked by us, this only surfaces after several fresh ports all raced.
    #[error("port {port} on 127.0.0.1 is already in use")]
    PortInUse {
        /// The port redis-server tried to listen on.
        port: u16,
    },

    /// The server exited before it answered `PING`.
    #[error("redis-server on port {port} exited during startup ({status}); log: {log_tail}")]
    Exited {
        /// The port it was started on.
        port: u16,
        /// Its exit status, as the OS reports it.
        status: String,
        /// The last lines it wrote to its log file, joined with ` | `.
        log_tail: String,
    },

    /// The server is running but did not answer `PING` with `+PONG` in time.
    #[error(
        "redis-server on port {port} did not answer PING within {waited:?} \
         (last probe: {last_probe}); log: {log_tail}"
    )]
    NotReady {
        /// The port it was started on.
        port: u16,
        /// How long we waited.
        waited: Duration,
        /// What the last readiness probe saw (connection refused, `-LOADING`, ...).
        last_probe: String,
        /// The last lines it wrote to its log file, joined with ` | `.
        log_tail: String,
    },

    /// The operation needs a running server and this node has none (it was killed or exited).
    #[error("redis-server on port {port} is not running")]
    NotRunning {
        /// The node's port.
        port: u16,
    },

    /// A signal could not be delivered.
    #[error("could not send {signal} to pid {pid}")]
    Signal {
        /// The target process.
        pid: u32,
        /// The signal's name, e.g. `SIGSTOP`.
        signal: &'static str,
        /// What the operating system said.
        #[source]
        source: nix::Error,
    },

    /// Waiting for a child process failed.
    #[error("could not wait for pid {pid}")]
    Wait {
        /// The process.
        pid: u32,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },

    /// A process we signalled did not exit in time.
    #[error("pid {pid} did not exit within {waited:?} after {signal}")]
    StillRunning {
        /// The process.
        pid: u32,
        /// The last signal we sent it.
        signal: &'static str,
        /// How long we waited after sending it.
        waited: Duration,
    },

    /// `redis-cli` ran but exited with a failure (including an error reply: it runs with `-e`).
    #[error("redis-cli {args} failed ({status}): {stderr}")]
    Cli {
        /// The arguments after `-h 127.0.0.1 -p PORT`, passwords redacted.
        args: String,
        /// Its exit status, as the OS reports it.
        status: String,
        /// Its standard error (the server's error reply, if any), or its standard output when
        /// standard error was empty, as one line (lines joined with ` | `).
        stderr: String,
    },

    /// `redis-cli` did not finish in time (for example because the server is paused) and was
    /// killed.
    #[error("redis-cli {args} did not finish within {waited:?}")]
    CliTimeout {
        /// The arguments after `-h 127.0.0.1 -p PORT`, passwords redacted.
        args: String,
        /// How long we waited.
        waited: Duration,
    },

    /// A detached node's pid file exists but does not hold a pid.
    #[error("pid file `{}` does not contain a process id", path.display())]
    BadPidFile {
        /// The pid file.
        path: PathBuf,
    },

    /// The requested configuration cannot work (explained in the message).
    #[error("invalid node spec: {0}")]
    InvalidSpec(String),

    /// A Redis Cluster did not reach the state we waited for.
    #[error("the Redis Cluster did not reach {what} within {waited:?}")]
    ClusterNotReady {
        /// What we waited for.
        what: String,
        /// How long we waited.
        waited: Duration,
    },

    /// A Sentinel group did not reach the state we waited for (or its sentinels disagree).
    #[error("the Sentinel group did not reach {what} within {waited:?}")]
    SentinelNotReady {
        /// What we waited for.
        what: String,
        /// How long we waited.
        waited: Duration,
    },
}
