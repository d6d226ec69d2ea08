//! What to start: [`NodeSpec`], a small builder whose setters each state their default.
//!
//! A spec is plain data; nothing touches the OS until [`RedisNode::start`](crate::RedisNode::start)
//! or [`Cluster::start`](crate::Cluster::start) reads it. A node keeps its spec so that
//! `restart` starts the very same server again.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// How a node keeps its data across a restart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Persistence {
    /// Memory only: `--save "" --appendonly no`. A restart comes back empty.
    #[default]
    None,
    /// Append-only file fsynced on every write: `--appendonly yes --appendfsync always --save ""`.
    ///
    /// Every acknowledged write survives a `SIGKILL`, so [`RedisNode::restart`](crate::RedisNode::restart)
    /// keeps the data and [`RedisNode::restart_empty`](crate::RedisNode::restart_empty) models a
    /// node that lost its disk.
    AofAlways,
}

impl Persistence {
    pub(crate) fn args(self) -> &'static [&'static str] {
        match self {
            Self::None => &["--appendonly", "no"],
            Self::AofAlways => &["--appendonly", "yes", "--appendfsync", "always"],
        }
    }
}

/// How long `start` waits for a new server to answer `PING`, unless
/// [`NodeSpec::startup_timeout`] says otherwise. Generous because CI machines have 2 noisy cores
/// and an AOF replay takes time; a healthy server answers in milliseconds.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);

/// What to start: port, persistence, data directory and lifetime of one `redis-server`.
///
/// ```
/// use redquorum_nodes::{NodeSpec, Persistence};
///
/// let spec = NodeSpec::new().persistence(Persistence::AofAlways).arg("--maxmemory").arg("64mb");
/// # let _ = spec;
/// ```
#[must_use]
#[derive(Clone)]
pub struct NodeSpec {
    pub(crate) port: Option<u16>,
    pub(crate) persistence: Persistence,
    pub(crate) dir: Option<PathBuf>,
    pub(crate) die_with_parent: bool,
    pub(crate) detached: bool,
    pub(crate) args: Vec<String>,
    pub(crate) binary: Option<PathBuf>,
    pub(crate) startup_timeout: Duration,
    pub(crate) marked: bool,
    pub(crate) sentinel: bool,
}

impl NodeSpec {
    /// A spec with every default: a free port, no persistence, a fresh temporary directory, killed
    /// with its parent, not detached.
    pub fn new() -> Self {
        Self {
            port: None,
            persistence: Persistence::None,
            dir: None,
            die_with_parent: true,
            detached: false,
            args: Vec::new(),
            binary: None,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            marked: true,
            sentinel: false,
        }
    }

    /// Run a Redis Sentinel rather than a data server (default `false`): `redis-server
    /// DIR/sentinel.conf --sentinel`, the rest of the command line as for any node (give the
    /// masters to monitor with [`arg`](Self::arg): `--sentinel monitor NAME HOST PORT QUORUM`).
    /// Sentinel requires a config file of its own, which it rewrites with what it learns (the
    /// replicas, the other sentinels, the current master): the launcher writes it empty before
    /// the first start, and a restart reads what Sentinel wrote there. It is the only config
    /// file a node of ours reads. A sentinel gets no marker key.
    pub fn sentinel(mut self, sentinel: bool) -> Self {
        self.sentinel = sentinel;
        self
    }

    /// Whether [`RedisNode::start`](crate::RedisNode::start) writes the library's marker key
    /// ([`MARKER_KEY`](crate::MARKER_KEY)) on the new server (default `true`): a brand-new
    /// server has lost nothing, and the marker lets clients trust it at once. Off for a server
    /// that should look like one that lost its data (the chaos checker's `replace` fault).
    /// Restarts never write it: a restart that lost the data must show it.
    pub fn marked(mut self, marked: bool) -> Self {
        self.marked = marked;
        self
    }

    /// Listen on this port (on 127.0.0.1). Default: a free port chosen at start, and a new one if
    /// another process grabs it first.
    ///
    /// A fixed port is never changed: if it is taken, `start` fails with
    /// [`LaunchError::PortInUse`](crate::LaunchError::PortInUse). In a
    /// [`Cluster`](crate::Cluster), node `i` listens on `port + i`.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// How data survives a restart. Default: [`Persistence::None`].
    pub fn persistence(mut self, persistence: Persistence) -> Self {
        self.persistence = persistence;
        self
    }

    /// Keep data, log (`redis.log`) and pid file (`redis.pid`, detached only) in this directory,
    /// created if missing and never removed by us. Default: a fresh temporary directory (in RAM,
    /// `/dev/shm`, where there is one), removed when the node is dropped (kept if the node is
    /// detached). In a [`Cluster`](crate::Cluster),
    /// node `i` uses `dir/node-i`.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Ask the kernel to `SIGKILL` the server when the thread that started it exits, so servers do
    /// not outlive a test run that was itself killed. Default: `true`. Ignored for detached nodes,
    /// which are meant to outlive us.
    ///
    /// Linux delivers this signal when the *thread* that spawned the server exits, not the
    /// process (`prctl(2)`, `PR_SET_PDEATHSIG`). Start and restart nodes from a thread that lives
    /// as long as they should: a test's own thread is right; a `spawn_blocking` worker or a
    /// short-lived helper thread is not (the server would die with it).
    pub fn die_with_parent(mut self, die: bool) -> Self {
        self.die_with_parent = die;
        self
    }

    /// Let the server outlive this process: it is not killed when the
    /// [`RedisNode`](crate::RedisNode) is dropped, it runs in its own process group (so a Ctrl-C
    /// in our terminal does not reach it), it writes its pid to `redis.pid` in its directory, and
    /// a temporary directory is kept rather than removed. Stop it later with
    /// [`stop_detached`](crate::stop_detached). Default: `false`.
    pub fn detached(mut self, detached: bool) -> Self {
        self.detached = detached;
        self
    }

    /// Append one argument to the `redis-server` command line, after ours, so it overrides our
    /// defaults. Options take their value as a separate argument:
    /// `.arg("--requirepass").arg("secret")`. Default: none.
    ///
    /// With `--requirepass`, the readiness probe and [`RedisNode::cli`](crate::RedisNode::cli)
    /// authenticate with that password; it never appears in `Debug` output or errors.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Run this `redis-server` binary. Default: [`server_binary`](crate::server_binary) at start
    /// time (`REDLOCK_REDIS_SERVER`, else `redis-server` on `PATH`).
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> Self {
        self.binary = Some(binary.into());
        self
    }

    /// Give up on a server that does not answer `PING` within this time after it was spawned.
    /// Default: [`DEFAULT_STARTUP_TIMEOUT`] (10 s).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// The value of a redis-server option given with [`arg`](Self::arg), if any (the last one
    /// wins, as in redis). `name` includes the dashes: `"--requirepass"`.
    pub(crate) fn option(&self, name: &str) -> Option<&str> {
        self.args
            .windows(2)
            .rev()
            .find(|pair| pair[0].eq_ignore_ascii_case(name))
            .map(|pair| pair[1].as_str())
    }

    /// The password given with `--requirepass`, if any.
    pub(crate) fn password(&self) -> Option<&str> {
        self.option("--requirepass")
            .filter(|password| !password.is_empty())
    }

    pub(crate) fn binary_path(&self) -> PathBuf {
        self.binary.clone().unwrap_or_else(crate::server_binary)
    }
}

impl Default for NodeSpec {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for NodeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeSpec")
            .field("port", &self.port)
            .field("persistence", &self.persistence)
            .field("dir", &self.dir)
            .field("die_with_parent", &self.die_with_parent)
            .field("detached", &self.detached)
            .field("args", &redact(&self.args))
            .field("binary", &self.binary)
            .field("startup_timeout", &self.startup_timeout)
            .field("sentinel", &self.sentinel)
            .finish()
    }
}

/// Replaces secrets in a command line with `***`: the value after a password option, and
/// everything after an `AUTH` command word.
pub(crate) fn redact<S: AsRef<str>>(args: &[S]) -> Vec<String> {
    const PASSWORD_OPTIONS: [&str; 4] = ["--requirepass", "--masterauth", "-a", "--pass"];
    let mut out = Vec::with_capacity(args.len());
    let mut hide_next = false;
    let mut hide_rest = false;
    for arg in args.iter().map(AsRef::as_ref) {
        if hide_next || hide_rest {
            out.push("***".to_owned());
            hide_next = false;
            continue;
        }
        hide_next = PASSWORD_OPTIONS.iter().any(|o| arg.eq_ignore_ascii_case(o));
        hide_rest = arg.eq_ignore_ascii_case("auth");
        out.push(arg.to_owned());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_is_the_last_requirepass_value() {
        let spec = NodeSpec::new()
            .arg("--requirepass")
            .arg("one")
            .arg("--requirepass")
            .arg("two");
        assert_eq!(spec.password(), Some("two"));
        assert_eq!(NodeSpec::new().password(), None);
        assert_eq!(
            NodeSpec::new().arg("--requirepass").arg("").password(),
            None
        );
    }

    #[test]
    fn debug_hides_passwords() {
        let spec = NodeSpec::new().arg("--requirepass").arg("hunter2");
        let shown = format!("{spec:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("--requirepass"), "{shown}");
    }

    #[test]
    fn redact_hides_option_values_and_auth_arguments() {
        assert_eq!(redact(&["-a", "pw", "GET", "k"]), ["-a", "***", "GET", "k"]);
        assert_eq!(redact(&["AUTH", "user", "pw"]), ["AUTH", "***", "***"]);
        assert_eq!(redact(&["SET", "k", "v"]), ["SET", "k", "v"]);
    }
}
