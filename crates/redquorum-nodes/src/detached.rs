//! Finding and stopping detached nodes that an earlier process started (`redlock nodes stop`).
//!
//! Such a node is no child of ours: all we have is the `redis.pid` file it wrote in its
//! directory. A pid file can be stale (the server was `SIGKILL`ed, the machine rebooted) and its
//! pid reused by an unrelated process, so before any signal we check that `/proc/PID/cmdline` is a
//! `redis-server` listening on the expected port. A pid reused in the few microseconds between that
//! check and the signal would still be hit; closing that gap needs pidfds, which is not worth it
//! for a development tool.

use std::fs;
use std::io;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::LaunchError;
use crate::process::{self, POLL, REAP_TIMEOUT};

/// The pid file a detached node writes in its directory (`--pidfile`).
pub const PID_FILE: &str = "redis.pid";

/// How long a node may take to shut down cleanly after `SIGTERM` (it flushes its append-only
/// file) before we `SIGKILL` it.
const TERM_TIMEOUT: Duration = Duration::from_secs(10);

/// The pid of the detached node in `dir`, if one is running and listening on `port`.
///
/// Reads `dir/redis.pid` and checks `/proc/PID`: `Ok(None)` when there is no pid file, the process
/// is gone, or the pid now belongs to something that is not a `redis-server` on `port`.
///
/// # Errors
///
/// [`LaunchError::Io`] when the pid file exists but cannot be read, and
/// [`LaunchError::BadPidFile`] when it does not hold a pid.
pub fn detached_pid(dir: &Path, port: u16) -> Result<Option<u32>, LaunchError> {
    let path = dir.join(PID_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(LaunchError::Io {
                action: "read pid file",
                path,
                source,
            });
        }
    };
    let pid = match text.trim().parse::<u32>() {
        Ok(pid) if pid > 1 => pid,
        _ => return Err(LaunchError::BadPidFile { path }),
    };
    Ok(is_our_server(pid, port).then_some(pid))
}

/// Stops the detached node in `dir` that listens on `port`: `SIGTERM`, up to 10 s for a clean
/// shutdown, then `SIGKILL`. Returns whether it was running.
///
/// Signals only the verified pid (see [`detached_pid`]), never anything found by name. A node
/// that is paused (`SIGSTOP`) is woken first so it can act on `SIGTERM`.
///
/// # Errors
///
/// Those of [`detached_pid`], [`LaunchError::Signal`] if a signal cannot be sent (for example to
/// another user's process), and [`LaunchError::StillRunning`] if the process survives `SIGKILL`.
pub fn stop_detached(dir: &Path, port: u16) -> Result<bool, LaunchError> {
    let Some(pid) = detached_pid(dir, port)? else {
        return Ok(false);
    };
    process::send(pid, Signal::SIGCONT)?;
    process::send(pid, Signal::SIGTERM)?;
    if !gone_within(pid, TERM_TIMEOUT) {
        // Check again: after 10 s the pid could in theory belong to someone else.
        if is_our_server(pid, port) {
            process::send(pid, Signal::SIGKILL)?;
        }
        if !gone_within(pid, REAP_TIMEOUT) {
            return Err(LaunchError::StillRunning {
                pid,
                signal: Signal::SIGKILL.as_str(),
                waited: REAP_TIMEOUT,
            });
        }
    }
    // A clean shutdown removes the pid file itself; after SIGKILL it is stale.
    let _ = fs::remove_file(dir.join(PID_FILE));
    Ok(true)
}

fn is_our_server(pid: u32, port: u16) -> bool {
    process::is_alive(pid)
        && process::cmdline(pid).is_some_and(|cmdline| process::is_redis_on_port(&cmdline, port))
}

fn gone_within(pid: u32, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while process::is_alive(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(POLL);
    }
    true
}
