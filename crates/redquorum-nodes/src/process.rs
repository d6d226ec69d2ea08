//! Operating-system processes: spawning `redis-server` and `redis-cli`, signals, bounded waits.
//!
//! # Invariants
//!
//! 1. We signal a pid only while we hold its unreaped [`Child`] (or, for detached nodes of an
//!    earlier run, right after checking `/proc/PID/cmdline`). An unreaped child keeps its pid even
//!    after it exits (as a zombie), so the pid cannot have been reused by an unrelated process.
//! 2. Every wait is bounded: we poll `try_wait` against a deadline and report
//!    [`LaunchError::StillRunning`] or [`LaunchError::CliTimeout`] instead of blocking forever.
//! 3. This file holds the crate's only `unsafe` block: the `pre_exec` hook that sets
//!    `PR_SET_PDEATHSIG` in the child between `fork` and `exec`.

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use crate::{LaunchError, RedisBinary};

/// How often bounded waits look again. Short enough not to slow tests down, long enough not to
/// burn one of CI's two cores.
pub(crate) const POLL: Duration = Duration::from_millis(10);
/// How long a `SIGKILL`ed process may take to be reaped. The kernel normally needs microseconds;
/// only a process stuck in uninterruptible I/O takes longer, and then we report it.
pub(crate) const REAP_TIMEOUT: Duration = Duration::from_secs(5);

/// Spawns `command` with no standard input; the caller sets stdout and stderr.
///
/// `die_with_parent` arranges a `SIGKILL` when the spawning thread exits; `detached` puts the
/// process in its own process group so terminal signals aimed at us do not reach it.
pub(crate) fn spawn_server(
    mut command: Command,
    die_with_parent: bool,
    detached: bool,
) -> Result<Child, LaunchError> {
    command.stdin(Stdio::null());
    if detached {
        command.process_group(0);
    } else if die_with_parent {
        set_parent_death_signal(&mut command);
    }
    command.spawn().map_err(|source| {
        let binary = command.get_program().into();
        if source.kind() == io::ErrorKind::NotFound {
            LaunchError::BinaryNotFound {
                which: RedisBinary::Server,
                binary,
            }
        } else {
            LaunchError::Spawn { binary, source }
        }
    })
}

/// Makes the kernel send `SIGKILL` to the child when the thread that spawns it exits.
fn set_parent_death_signal(command: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before `exec`, where only async-signal-safe
    // operations are allowed. It makes two raw syscalls (`prctl`, `getppid`) and, on failure,
    // builds an `io::Error` from an errno, which does not allocate. It touches no lock, no heap
    // and no state shared with other threads of the parent.
    #[allow(unsafe_code)]
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            // The parent may have died between `fork` and `prctl`; then no signal will ever come.
            if nix::unistd::getppid() != parent {
                return Err(io::Error::from(Errno::ESRCH));
            }
            Ok(())
        });
    }
}

/// The pid as nix wants it. Linux pids are at most 2^22 (`pid_max`), so the cast is lossless.
pub(crate) fn nix_pid(pid: u32) -> Pid {
    Pid::from_raw(pid as i32)
}

/// Sends `signal` to `pid`; a process that is already gone is not an error.
pub(crate) fn send(pid: u32, signal: Signal) -> Result<(), LaunchError> {
    match signal::kill(nix_pid(pid), signal) {
        Ok(()) | Err(Errno::ESRCH) => Ok(()),
        Err(source) => Err(LaunchError::Signal {
            pid,
            signal: signal.as_str(),
            source,
        }),
    }
}

/// Waits up to `timeout` for `child` to exit and reaps it.
///
/// Returns `Ok(None)` if it is still running at the deadline.
pub(crate) fn wait_bounded(child: &mut Child, timeout: Duration) -> io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        thread::sleep(POLL);
    }
}

/// `SIGCONT` (a stopped process cannot act on anything but `SIGKILL`, and waking it keeps
/// tracers and job control consistent), then `SIGKILL`, then reap within [`REAP_TIMEOUT`].
pub(crate) fn kill_and_reap(child: &mut Child) -> Result<(), LaunchError> {
    let pid = child.id();
    send(pid, Signal::SIGCONT)?;
    send(pid, Signal::SIGKILL)?;
    match wait_bounded(child, REAP_TIMEOUT) {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(LaunchError::StillRunning {
            pid,
            signal: Signal::SIGKILL.as_str(),
            waited: REAP_TIMEOUT,
        }),
        Err(source) => Err(LaunchError::Wait { pid, source }),
    }
}

/// What a finished `redis-cli` run printed.
pub(crate) struct Output {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Runs `command` to completion with captured output, killing it if it takes longer than
/// `timeout`. `Ok(None)` means it was killed at the deadline.
pub(crate) fn run_bounded(mut command: Command, timeout: Duration) -> io::Result<Option<Output>> {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (Some(mut out), Some(mut err)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = kill_and_reap(&mut child);
        return Err(io::Error::other("child has no output pipes"));
    };
    // The pipes are drained on their own threads so a chatty child cannot block on a full pipe
    // while we wait for it; they end when the child exits or is killed.
    thread::scope(|scope| {
        let stdout = scope.spawn(move || read_all(&mut out));
        let stderr = scope.spawn(move || read_all(&mut err));
        let status = match wait_bounded(&mut child, timeout) {
            Ok(Some(status)) => Some(status),
            Ok(None) => {
                // Best effort: a SIGKILLed redis-cli closes its pipes, which ends the readers.
                let _ = kill_and_reap(&mut child);
                None
            }
            Err(e) => {
                let _ = kill_and_reap(&mut child);
                return Err(e);
            }
        };
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default();
        Ok(status.map(|status| Output {
            status,
            stdout,
            stderr,
        }))
    })
}

fn read_all(r: &mut impl Read) -> String {
    let mut bytes = Vec::new();
    // A read error only truncates what we report; the exit status still tells success.
    let _ = r.read_to_end(&mut bytes);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Whether `pid` is a process that has not finished exiting.
///
/// A zombie (`Z`) or dead (`X`) thread-group leader whose other threads are gone is finished:
/// it only waits to be reaped and holds no sockets. Redis runs several threads, and when it
/// exits the leader turns zombie first while the others are still tearing down (and may still
/// hold the listening socket), so a zombie leader with other tasks left counts as alive.
pub(crate) fn is_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    let state = stat
        .rfind(')')
        .and_then(|end| stat[end + 1..].split_whitespace().next());
    match state {
        None => false,
        Some("Z" | "X") => {
            std::fs::read_dir(format!("/proc/{pid}/task")).is_ok_and(|tasks| tasks.count() > 1)
        }
        Some(_) => true,
    }
}

/// The NUL-separated `/proc/PID/cmdline`, joined with spaces; `None` if there is no such process.
pub(crate) fn cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let words: Vec<_> = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(String::from_utf8_lossy)
        .collect();
    Some(words.join(" "))
}

/// Whether `cmdline` (as returned by [`cmdline`]) is a redis-server for `127.0.0.1:port`.
///
/// Redis rewrites its command line to its process title, `redis-server 127.0.0.1:PORT` by
/// default; with `set-proc-title no` the original `--port PORT` arguments remain.
pub(crate) fn is_redis_on_port(cmdline: &str, port: u16) -> bool {
    let mut words = cmdline.split_whitespace();
    let Some(program) = words.next() else {
        return false;
    };
    let is_redis = Path::new(program)
        .file_name()
        .is_some_and(|name| name.to_string_lossy().starts_with("redis-server"));
    let title = format!("127.0.0.1:{port}");
    let port = port.to_string();
    let words: Vec<_> = words.collect();
    let listens = words.contains(&title.as_str())
        || words
            .windows(2)
            .any(|pair| pair[0] == "--port" && pair[1] == port);
    is_redis && listens
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_redis_by_title_or_arguments() {
        assert!(is_redis_on_port("redis-server 127.0.0.1:7000", 7000));
        assert!(is_redis_on_port(
            "/usr/bin/redis-server 127.0.0.1:7000",
            7000
        ));
        assert!(is_redis_on_port(
            "/usr/bin/redis-server --port 7000 --bind 127.0.0.1",
            7000
        ));
        assert!(!is_redis_on_port("redis-server 127.0.0.1:7001", 7000));
        assert!(!is_redis_on_port("redis-server 127.0.0.1:70001", 7000));
        assert!(!is_redis_on_port("sleep 127.0.0.1:7000", 7000));
        assert!(!is_redis_on_port("", 7000));
    }

    #[test]
    fn our_own_process_is_alive_and_a_bogus_pid_is_not() {
        assert!(is_alive(std::process::id()));
        assert!(!is_alive(u32::MAX));
        assert!(cmdline(std::process::id()).is_some());
    }

    #[test]
    fn run_bounded_kills_a_slow_command() {
        let mut sleep = Command::new("sleep");
        sleep.arg("30");
        let started = Instant::now();
        assert!(
            run_bounded(sleep, Duration::from_millis(100))
                .unwrap()
                .is_none()
        );
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn run_bounded_captures_output() {
        let mut echo = Command::new("sh");
        echo.args(["-c", "echo out; echo err >&2; exit 3"]);
        let output = run_bounded(echo, Duration::from_secs(10)).unwrap().unwrap();
        assert_eq!(output.stdout, "out\n");
        assert_eq!(output.stderr, "err\n");
        assert_eq!(output.status.code(), Some(3));
    }
}
