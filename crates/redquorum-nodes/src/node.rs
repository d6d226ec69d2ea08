//! One `redis-server` process we started: [`RedisNode`], and what can be done to it (kill,
//! restart, restart empty, pause, resume, `redis-cli`).
//!
//! The node owns its [`Child`] handle and, unless told otherwise, its temporary data directory;
//! dropping the node kills the server and then removes the directory. The faults a lock library
//! must survive map onto methods: a crash is [`RedisNode::kill`], a crash with a durable disk is
//! [`RedisNode::restart`], a crash that loses the disk is [`RedisNode::restart_empty`], and a
//! network partition or a long GC-like stall is [`RedisNode::pause`].
//!
//! # Invariants
//!
//! 1. `child` is `Some` exactly while the process may be alive and has not been reaped, so its pid
//!    is safe to signal (see `process.rs`, invariant 1). Whatever reaps it sets `child` to `None`.
//! 2. Once a node has answered `PING`, its port never changes: clients hold its URL, and
//!    `restart` must bring the same server back.
//! 3. A node that fails to start is killed before the error is returned, detached or not.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tempfile::TempDir;

use crate::binary::cli_binary;
use crate::probe::{self, Probe};
use crate::process::{self, POLL};
use crate::spec::redact;
use crate::{LaunchError, NodeSpec, PID_FILE, RedisBinary};

/// The log file in a node's directory; redis appends to it, and so does the node's stdout and
/// stderr, so configuration errors printed before logging starts end up there too.
pub const LOG_FILE: &str = "redis.log";

/// The config file of a sentinel node, in its directory (`NodeSpec::sentinel`).
pub const SENTINEL_CONFIG: &str = "sentinel.conf";

/// How many fresh ports to try when other processes keep grabbing the one we picked. Each race
/// needs another process to bind the same ephemeral port within milliseconds, so five in a row
/// means something is wrong rather than unlucky.
const PORT_TRIES: usize = 5;
/// How long [`RedisNode::cli`] lets `redis-cli` run; long enough for a slow CI machine, short
/// enough that a command against a paused server fails the test instead of hanging it.
const CLI_TIMEOUT: Duration = Duration::from_secs(10);
/// How many log lines an error message quotes.
const LOG_TAIL_LINES: usize = 5;
/// How much of the end of a log an error message looks at; startup failures are short.
const LOG_TAIL_BYTES: u64 = 16 * 1024;

/// A `redis-server` process on `127.0.0.1`, started by us, killed when dropped (unless detached).
///
/// ```
/// # fn main() -> Result<(), redquorum_nodes::LaunchError> {
/// use redquorum_nodes::{NodeSpec, RedisNode};
///
/// let mut node = RedisNode::start(NodeSpec::new())?;
/// assert_eq!(node.cli(&["PING"])?, "PONG");
/// node.kill()?;
/// assert!(!node.is_running());
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct RedisNode {
    spec: NodeSpec,
    port: u16,
    /// Whether the port may no longer change (invariant 2, or fixed by the spec).
    port_fixed: bool,
    dir: PathBuf,
    /// Invariant 1.
    child: Option<Child>,
    spawned_at: Instant,
    paused: bool,
    /// The log's length when the current process was spawned: only what follows is about it.
    log_offset: u64,
    /// Declared last so it is removed after `Drop::drop` has killed the server.
    tempdir: Option<TempDir>,
}

impl RedisNode {
    /// Starts a server as `spec` says and waits until it answers `PING` with `+PONG`.
    ///
    /// Waits at most the spec's startup timeout (10 s by default), probing every 10 ms; a server
    /// still loading its data (`-LOADING`) is waited for. If the port was chosen by us and another
    /// process grabs it first, starts again on a fresh port (up to 5 times).
    ///
    /// # Errors
    ///
    /// [`LaunchError::BinaryNotFound`] if the binary is missing, [`LaunchError::PortInUse`] if the
    /// port is taken, [`LaunchError::Exited`] or [`LaunchError::NotReady`] (both quoting the end of
    /// the server's log) if it does not come up, and [`LaunchError::Io`] if its directory cannot be
    /// created.
    pub fn start(spec: NodeSpec) -> Result<Self, LaunchError> {
        let port_fixed = spec.port.is_some();
        let port = match spec.port {
            Some(port) => port,
            None => one_free_port()?,
        };
        let mut node = Self::prepare(spec, port, port_fixed)?;
        node.spawn()?;
        node.await_first_ready()?;
        Ok(node)
    }

    /// Builds a node that is not running yet: checks the spec and creates the directory.
    pub(crate) fn prepare(
        spec: NodeSpec,
        port: u16,
        port_fixed: bool,
    ) -> Result<Self, LaunchError> {
        if port == 0 {
            return Err(LaunchError::InvalidSpec(
                "port 0 is not a port; leave the port unset to get a free one".to_owned(),
            ));
        }
        let (dir, tempdir) = match &spec.dir {
            Some(dir) => {
                let dir = std::path::absolute(dir).map_err(|source| LaunchError::Io {
                    action: "resolve data directory",
                    path: dir.clone(),
                    source,
                })?;
                fs::create_dir_all(&dir).map_err(|source| LaunchError::Io {
                    action: "create data directory",
                    path: dir.clone(),
                    source,
                })?;
                (dir, None)
            }
            None => {
                // RAM (/dev/shm) where there is one: an `appendfsync always` node then pays
                // nothing for its fsyncs, so durable test nodes are as fast as volatile ones and
                // a loaded CI machine's disk cannot stall them past a lock's timeouts.
                let builder = || {
                    let mut b = tempfile::Builder::new();
                    b.prefix("redlock-node-");
                    b
                };
                let tempdir = builder()
                    .tempdir_in("/dev/shm")
                    .or_else(|_| builder().tempdir())
                    .map_err(|source| LaunchError::Io {
                        action: "create temporary directory in",
                        path: std::env::temp_dir(),
                        source,
                    })?;
                (tempdir.path().to_path_buf(), Some(tempdir))
            }
        };
        Ok(Self {
            spec,
            port,
            port_fixed,
            dir,
            child: None,
            spawned_at: Instant::now(),
            paused: false,
            log_offset: 0,
            tempdir,
        })
    }

    /// Spawns the server without waiting for it, so a cluster's nodes can boot side by side.
    pub(crate) fn spawn(&mut self) -> Result<(), LaunchError> {
        let log_path = self.log_path();
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|source| LaunchError::Io {
                action: "open log file",
                path: log_path.clone(),
                source,
            })?;
        let log_err = log.try_clone().map_err(|source| LaunchError::Io {
            action: "open log file",
            path: log_path.clone(),
            source,
        })?;
        self.log_offset = log.metadata().map_or(0, |m| m.len());

        let mut command = Command::new(self.spec.binary_path());
        if self.spec.sentinel {
            // Sentinel refuses to start without a config file it can rewrite (`NodeSpec::sentinel`).
            let config = self.dir.join(SENTINEL_CONFIG);
            if !config.exists() {
                fs::write(&config, "").map_err(|source| LaunchError::Io {
                    action: "write the sentinel's config file",
                    path: config.clone(),
                    source,
                })?;
            }
            command.arg(&config).arg("--sentinel");
        }
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(&log_path)
            .args(["--daemonize", "no", "--protected-mode", "yes", "--save", ""])
            .args(self.spec.persistence.args());
        if self.spec.detached {
            command.arg("--pidfile").arg(self.dir.join(PID_FILE));
        }
        command.args(&self.spec.args).stdout(log).stderr(log_err);

        let child = process::spawn_server(command, self.spec.die_with_parent, self.spec.detached)?;
        self.child = Some(child);
        self.spawned_at = Instant::now();
        self.paused = false;
        Ok(())
    }

    /// Waits for the spawned server to be ready, moving to a fresh port when ours was taken and
    /// we are allowed to (see [`RedisNode::start`]).
    pub(crate) fn await_ready(&mut self) -> Result<(), LaunchError> {
        let mut tries = 1;
        loop {
            match self.wait_ready() {
                Err(LaunchError::PortInUse { .. }) if !self.port_fixed && tries < PORT_TRIES => {
                    tries += 1;
                    self.port = one_free_port()?;
                    self.spawn()?;
                }
                Err(e) => return Err(e),
                Ok(()) => {
                    self.port_fixed = true; // invariant 2
                    if self.spec.detached {
                        // A detached node outlives us, so its directory must too.
                        if let Some(tempdir) = self.tempdir.take() {
                            let _ = tempdir.keep();
                        }
                    }
                    return Ok(());
                }
            }
        }
    }

    /// [`await_ready`](Self::await_ready) for a server's first start, which also writes the
    /// marker key when the spec asks for it ([`NodeSpec::marked`]).
    pub(crate) fn await_first_ready(&mut self) -> Result<(), LaunchError> {
        self.await_ready()?;
        if self.spec.marked
            && !self.spec.sentinel
            && let Err(source) = probe::mark(self.port, self.spec.password())
        {
            let _ = self.kill(); // invariant 3
            return Err(LaunchError::Io {
                action: "write the marker key on the server in",
                path: self.dir.clone(),
                source,
            });
        }
        Ok(())
    }

    /// One bounded wait for `PING`; kills the server on failure (invariant 3).
    fn wait_ready(&mut self) -> Result<(), LaunchError> {
        let timeout = self.spec.startup_timeout;
        // `None` only for a timeout so large that the deadline is not representable.
        let deadline = self.spawned_at.checked_add(timeout);
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err(LaunchError::NotRunning { port: self.port });
            };
            let pid = child.id();
            let exited = match child.try_wait() {
                Ok(exited) => exited,
                Err(source) => {
                    let _ = self.kill();
                    return Err(LaunchError::Wait { pid, source });
                }
            };
            if let Some(status) = exited {
                self.child = None;
                let log = self.new_log();
                if log.contains("Address already in use") {
                    return Err(LaunchError::PortInUse { port: self.port });
                }
                return Err(LaunchError::Exited {
                    port: self.port,
                    status: status.to_string(),
                    log_tail: tail(&log),
                });
            }
            let last_probe = match probe::probe(self.port, self.spec.password(), pid) {
                Probe::Ready => return Ok(()),
                Probe::NotYet(why) => why,
            };
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                // Best effort: the timeout is the error worth reporting.
                let _ = self.kill();
                return Err(LaunchError::NotReady {
                    port: self.port,
                    waited: timeout,
                    last_probe,
                    log_tail: tail(&self.new_log()),
                });
            }
            thread::sleep(POLL);
        }
    }

    /// `redis://127.0.0.1:PORT`, without credentials even when `--requirepass` is set.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port the server listens on (on 127.0.0.1). Never changes once started.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's pid while we hold it: `None` once it was killed or seen to have exited.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The node's data directory (absolute): data files, `redis.log`, and `redis.pid` when
    /// detached.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the server with `SIGKILL` (waking it first if paused) and reaps it, so no data is
    /// flushed beyond what its persistence mode already wrote. Does nothing if it is not running.
    ///
    /// # Errors
    ///
    /// [`LaunchError::Signal`] if the signal cannot be sent and [`LaunchError::StillRunning`] if
    /// the process is not gone within 5 s.
    pub fn kill(&mut self) -> Result<(), LaunchError> {
        if let Some(child) = self.child.as_mut() {
            process::kill_and_reap(child)?;
        }
        self.child = None;
        self.paused = false;
        Ok(())
    }

    /// Kills the server if it runs, then starts it again on the same port and directory and
    /// waits until it answers `PING`. With [`Persistence::AofAlways`](crate::Persistence) the data
    /// survives; with [`Persistence::None`](crate::Persistence) it comes back empty.
    ///
    /// With [`NodeSpec::die_with_parent`], the new server dies when the *calling* thread exits.
    ///
    /// # Errors
    ///
    /// Those of [`RedisNode::kill`] and [`RedisNode::start`]; the port is never changed, so a port
    /// taken in the meantime gives [`LaunchError::PortInUse`].
    pub fn restart(&mut self) -> Result<(), LaunchError> {
        self.kill()?;
        self.spawn()?;
        self.await_ready()
    }

    /// Kills the server, deletes its data files (the append-only directory and file and
    /// `dump.rdb`, or the names set with `--appenddirname`, `--appendfilename` and
    /// `--dbfilename`), and starts it again on the same port: a node that lost its disk.
    /// The log is kept.
    ///
    /// # Errors
    ///
    /// Those of [`RedisNode::restart`], and [`LaunchError::Io`] if a data file cannot be deleted.
    pub fn restart_empty(&mut self) -> Result<(), LaunchError> {
        self.kill()?;
        self.delete_data()?;
        self.spawn()?;
        self.await_ready()
    }

    fn delete_data(&self) -> Result<(), LaunchError> {
        let name = |option: &str, default: &'static str| {
            self.dir.join(self.spec.option(option).unwrap_or(default))
        };
        let aof_dir = name("--appenddirname", "appendonlydir");
        let removals = [
            (fs::remove_dir_all(&aof_dir), aof_dir),
            // Where Redis before 7.0 kept its append-only file.
            remove_file(name("--appendfilename", "appendonly.aof")),
            remove_file(name("--dbfilename", "dump.rdb")),
        ];
        for (result, path) in removals {
            match result {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(LaunchError::Io {
                        action: "delete data file",
                        path,
                        source: e,
                    });
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Freezes the server with `SIGSTOP`: connections stay open and requests queue up unanswered,
    /// as behind a network partition. Undo with [`RedisNode::resume`].
    ///
    /// # Errors
    ///
    /// [`LaunchError::NotRunning`] if the server is not running, [`LaunchError::Signal`] if the
    /// signal cannot be sent.
    pub fn pause(&mut self) -> Result<(), LaunchError> {
        let pid = self.running_pid()?;
        process::send(pid, Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// Wakes a paused server with `SIGCONT`; harmless if it was not paused.
    ///
    /// # Errors
    ///
    /// [`LaunchError::NotRunning`] if the server is not running, [`LaunchError::Signal`] if the
    /// signal cannot be sent.
    pub fn resume(&mut self) -> Result<(), LaunchError> {
        let pid = self.running_pid()?;
        process::send(pid, Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// Whether the server process is alive (a paused server is alive). Reaps it if it has exited,
    /// which is why this takes `&mut self`.
    pub fn is_running(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            // Exited and now reaped; an error means someone else reaped it. Either way the pid
            // is no longer ours to signal (invariant 1).
            Ok(Some(_)) | Err(_) => {
                self.child = None;
                self.paused = false;
                false
            }
        }
    }

    /// Runs `redis-cli -h 127.0.0.1 -p PORT -e ARGS...` and returns its trimmed standard output.
    ///
    /// `-e` makes an error reply a failure, so `Ok` always means the command succeeded. When the
    /// spec sets `--requirepass`, the password is passed in `REDISCLI_AUTH`, never on the command
    /// line. The binary is `$REDLOCK_REDIS_CLI`, else the `redis-cli` next to the server binary,
    /// else `redis-cli` on `PATH`.
    ///
    /// # Errors
    ///
    /// [`LaunchError::Cli`] if `redis-cli` fails (its message included; a stopped server gives
    /// "Connection refused"), [`LaunchError::CliTimeout`] if it takes more than 10 s (a paused
    /// server never answers), [`LaunchError::BinaryNotFound`] if it is not installed.
    pub fn cli(&self, args: &[&str]) -> Result<String, LaunchError> {
        let binary = cli_binary(&self.spec.binary_path());
        let mut command = Command::new(&binary);
        command
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-e"])
            .args(args);
        if let Some(password) = self.spec.password() {
            command.env("REDISCLI_AUTH", password);
        }
        let shown = || redact(args).join(" ");
        match process::run_bounded(command, CLI_TIMEOUT) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(LaunchError::BinaryNotFound {
                which: RedisBinary::Cli,
                binary,
            }),
            Err(source) => Err(LaunchError::Spawn { binary, source }),
            Ok(None) => Err(LaunchError::CliTimeout {
                args: shown(),
                waited: CLI_TIMEOUT,
            }),
            Ok(Some(output)) if !output.status.success() => {
                let message = if output.stderr.trim().is_empty() {
                    &output.stdout
                } else {
                    &output.stderr
                };
                Err(LaunchError::Cli {
                    args: shown(),
                    status: output.status.to_string(),
                    stderr: one_line(message.lines()),
                })
            }
            Ok(Some(output)) => Ok(output.stdout.trim().to_owned()),
        }
    }

    /// How many commands the server has run since it started (or its statistics were reset):
    /// the sum of the `calls` of `INFO commandstats`, this `INFO` included.
    ///
    /// # Errors
    ///
    /// Those of [`cli`](Self::cli).
    pub fn commands_run(&self) -> Result<u64, LaunchError> {
        let stats = self.cli(&["INFO", "commandstats"])?;
        Ok(stats
            .lines()
            .filter_map(|l| {
                l.split("calls=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum())
    }

    fn running_pid(&mut self) -> Result<u32, LaunchError> {
        let pid = if self.is_running() { self.pid() } else { None };
        pid.ok_or(LaunchError::NotRunning { port: self.port })
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// What the log gained since the current process was spawned (at most its last 16 KiB).
    fn new_log(&self) -> String {
        read_log_since(&self.log_path(), self.log_offset).unwrap_or_default()
    }
}

impl Drop for RedisNode {
    /// Kills the server unless it is detached. Never panics; a failure to kill is ignored
    /// because there is no one left to report it to, and `die_with_parent` is the backstop.
    fn drop(&mut self) {
        if !self.spec.detached {
            let _ = self.kill();
        }
    }
}

fn one_free_port() -> Result<u16, LaunchError> {
    probe::free_ports(1)?
        .pop()
        .ok_or_else(|| LaunchError::NoFreePort(io::Error::other("no port returned")))
}

fn remove_file(path: PathBuf) -> (io::Result<()>, PathBuf) {
    (fs::remove_file(&path), path)
}

fn read_log_since(path: &Path, offset: u64) -> io::Result<String> {
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    // A log shorter than before was truncated by someone; then all of it is new.
    let start = if len < offset { 0 } else { offset };
    file.seek(SeekFrom::Start(
        start.max(len.saturating_sub(LOG_TAIL_BYTES)),
    ))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The last few non-empty lines of `log`, on one line.
fn tail(log: &str) -> String {
    let lines: Vec<_> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    one_line(
        lines[lines.len().saturating_sub(LOG_TAIL_LINES)..]
            .iter()
            .copied(),
    )
}

/// Non-empty lines, trimmed and joined with ` | `, so that errors stay on one line.
fn one_line<'a>(lines: impl Iterator<Item = &'a str>) -> String {
    let lines: Vec<_> = lines.map(str::trim).filter(|l| !l.is_empty()).collect();
    if lines.is_empty() {
        return "(empty)".to_owned();
    }
    lines.join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines_on_one_line() {
        assert_eq!(tail(""), "(empty)");
        assert_eq!(tail("a\n\n b \n"), "a | b");
        let long: String = (1..=9).map(|i| format!("{i}\n")).collect();
        assert_eq!(tail(&long), "5 | 6 | 7 | 8 | 9");
    }

    #[test]
    fn log_since_skips_what_came_before() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOG_FILE);
        fs::write(&path, "old run\nnew run\n").unwrap();
        assert_eq!(read_log_since(&path, 8).unwrap(), "new run\n");
        assert_eq!(read_log_since(&path, 1000).unwrap(), "old run\nnew run\n");
    }
}
