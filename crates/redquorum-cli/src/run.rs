//! `redlock run RESOURCE... [--ttl DUR] [--wait DUR | --no-wait] -- COMMAND [ARGS...]`: run a
//! command while holding a lock, like `flock(1)` across machines.
//!
//! Acquire (waiting until acquired by default), start COMMAND with `REDLOCK_RESOURCE`,
//! `REDLOCK_VALUE` and `REDLOCK_FENCE` (the fencing token; unset with `--no-fencing`) in its
//! environment, keep the lock extended while it runs (a [`Guard`]), release when
//! it exits, and exit with its status.
//!
//! Several resources are locked as one lock, all or none
//! ([`Redlock::acquire_many_with`](redquorum::Redlock::acquire_many_with)): a transfer between two
//! accounts holds both. The library sorts and deduplicates them, so `run a b` and `run b a` wait
//! for each other and never deadlock. One resource takes the single-resource path, whose wire
//! format every Redlock client knows. The invariants below hold for the set as for one resource:
//! the guard extends, loses and releases the set as a whole.
//!
//! # Invariants
//! 1. COMMAND starts only while the lock is held, and the lock is released only after COMMAND
//!    has exited (or could not be started): never while it may still be running.
//! 2. When the lock is lost, COMMAND is told at once (`SIGTERM`), and killed (`SIGKILL`) if it
//!    is still running `--kill-grace` later; `run` then exits 76, whatever COMMAND's own status.
//!    A loss noticed after COMMAND exited does not count: its work finished under the lock.
//! 3. We signal only what we spawned: COMMAND's own process group (or, with `--foreground`,
//!    COMMAND alone), by the id we got at spawn time, and only while it can still be ours: the
//!    child until we have reaped it, the group while any process is left in it (Linux does not
//!    hand out a pid that is still some group's id).
//! 4. `SIGINT`, `SIGTERM` and `SIGHUP` sent to `redlock` are forwarded to COMMAND; `redlock`
//!    itself keeps running until COMMAND exits, then releases the lock. A signal that arrives
//!    while still waiting for the lock ends the wait: the attempt in flight is rolled back and
//!    `run` exits 128+N without starting COMMAND.
//!
//! # Process groups
//! By default COMMAND runs in a process group of its own, like GNU `timeout` does, so that a lost
//! lock stops everything COMMAND started, not just COMMAND: a shell script's children are doing
//! the protected work too. After a loss, processes of the group still running when COMMAND exits
//! get the rest of the grace, then `SIGKILL`. (After a normal exit, leftovers are left alone.) The
//! price: COMMAND is not in the terminal's foreground group, so it cannot read from the terminal
//! (it would be stopped by `SIGTTIN`), and a Ctrl-C reaches it only through us. `--foreground`
//! keeps COMMAND in our group, for interactive commands: it then gets a terminal's Ctrl-C
//! directly as well as forwarded (so possibly twice), and only COMMAND itself is signalled.

use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use redquorum::{Error, Guard, Kind, Request, Retry};
use tokio::process::{Child as Process, Command};
use tokio::signal::unix::SignalKind;

use crate::duration;
use crate::exit::Outcome;
use crate::exit::{BUSY, CANNOT_EXECUTE, COMMAND_NOT_FOUND, Failure, LOST};
use crate::global::Global;
use crate::output;
use crate::waiting::Awaited;

const AFTER_HELP: &str = "\
Several resources are locked as one lock, all or none, in any order (duplicates are ignored):
`run a b` and `run b a` exclude each other and cannot deadlock, and so do `run a` and `run a b`.
COMMAND runs with REDLOCK_RESOURCE (the resource; for several, sorted and joined by \", \"),
REDLOCK_VALUE and REDLOCK_FENCE (the fencing token, a decimal number larger than every earlier one
for each RESOURCE; unset with --no-fencing) in its environment, while the lock is kept extended
(every third of the TTL; the TTL may not exceed --max-ttl). The lock is released when COMMAND
exits. If the lock is lost while COMMAND runs (a key deleted, servers gone), COMMAND's process
group gets SIGTERM at once and SIGKILL after --kill-grace. SIGINT, SIGTERM and SIGHUP sent to redlock are passed on to COMMAND;
the lock is released once it has exited. COMMAND runs in its own process group (so a lost lock
stops its children too) and cannot read the terminal; --foreground runs it in redlock's group.

With --permits K, RESOURCE is a semaphore: up to K commands run at once, each holding one of its
K permits (a lock on the key RESOURCE:permit:I, which REDLOCK_RESOURCE names; REDLOCK_PERMIT is I,
and REDLOCK_FENCE grows per permit). Every client of the semaphore must pass the same K.

With --shared, RESOURCE is a read-write lock taken as a reader: any number of --shared commands
run together, never with an exclusive one. --exclusive takes it as the writer: alone, and while it
waits no new reader gets in, so a stream of readers cannot starve it. Without either, the plain
lock also excludes readers and is excluded by them, but does not hold new readers off.

Examples:
  redlock run nightly-report -- ./make-report.sh --full
  redlock run --shared config -- ./read-config.sh      # readers together
  redlock run --exclusive config -- ./rewrite-config.sh
  redlock run --permits 4 encoder -- ./encode.sh in.mp4  # at most 4 encoders at once
  redlock run deploy:prod --wait 5m -- ./deploy.sh
  redlock run acct:1 acct:2 -- ./transfer.sh 1 2      # both accounts, or wait for both
  redlock run cron:cleanup --no-wait -- ./cleanup.sh || echo \"someone else is cleaning up\"
  redlock run cron:sync --no-wait --conflict-exit-code 3 -- ./sync.sh  # 3 if busy, 69 if down
  redlock run job --ttl 10s -- sh -c 'echo \"$REDLOCK_RESOURCE held as $REDLOCK_VALUE\"'
  redlock run ledger -- sh -c 'psql -c \"... WHERE fence < $REDLOCK_FENCE\"'  # refuse stale writers

Exit status: COMMAND's own (128+N if it died from signal N); 75 (or --conflict-exit-code) not
acquired, the lock is busy (held by someone else); 69 not acquired because of the servers
(unreachable, too slow, or nodes quarantined: they may have lost data recently); 76 the lock was
lost while COMMAND ran; 126/127 COMMAND could not be executed / was not found; 65 the resource has
another Redis type; 64 bad arguments (e.g. no COMMAND after --, a TTL above --max-ttl); 128+N when
signal N ended the wait for the lock.";

/// Run a command while holding a lock on one or more resources (waits for the lock by default).
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The resources to lock, as one lock: Redis keys.
    #[arg(value_name = "RESOURCE", required = true, num_args = 1.., value_parser = output::resource)]
    resources: Vec<String>,

    /// The lock's TTL; it is extended every third of it while COMMAND runs.
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "30s")]
    ttl: Duration,

    /// Wait at most this long for the lock [default: until acquired].
    #[arg(long, value_name = "DUR", value_parser = duration::parse, conflicts_with = "no_wait")]
    wait: Option<Duration>,

    /// Make one attempt; do not wait if the resource is busy.
    #[arg(long)]
    no_wait: bool,

    /// The exit status when the lock is busy (held by someone else) and not acquired, with
    /// --no-wait or once --wait has run out; 1 to 255. Servers that are unavailable still give
    /// 69.
    #[arg(long, value_name = "N", value_parser = conflict_exit_code, default_value_t = BUSY)]
    conflict_exit_code: u8,

    /// Treat RESOURCE as a semaphore with this many permits: up to K holders at once.
    #[arg(long, value_name = "K", value_parser = output::permits, conflicts_with_all = ["shared", "exclusive"])]
    permits: Option<u32>,

    /// Take RESOURCE as a reader of a read-write lock: shared with other readers.
    #[arg(long, conflicts_with = "exclusive")]
    shared: bool,

    /// Take RESOURCE as the writer of a read-write lock: alone, holding new readers off while it
    /// waits.
    #[arg(long)]
    exclusive: bool,

    /// After the lock is lost, how long COMMAND has to exit after SIGTERM before SIGKILL.
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "5s")]
    kill_grace: Duration,

    /// Run COMMAND in redlock's process group, for commands that read the terminal; signals then
    /// reach COMMAND alone, not its children.
    #[arg(long)]
    foreground: bool,

    /// The command to run, and its arguments (after --).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

/// The signals forwarded to COMMAND (invariant 4).
const FORWARDED: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Signal streams for [`FORWARDED`], installed before acquiring so a Ctrl-C while waiting for the
/// lock is ours to handle, not a sudden death with a round in flight.
pub(crate) struct Signals([tokio::signal::unix::Signal; 3]);

impl Signals {
    pub(crate) fn install() -> Result<Self, Failure> {
        let one = |signal: Signal| {
            tokio::signal::unix::signal(SignalKind::from_raw(signal as i32))
                .map_err(|e| Failure::os(format!("could not handle {signal}: {e}")))
        };
        Ok(Self([
            one(FORWARDED[0])?,
            one(FORWARDED[1])?,
            one(FORWARDED[2])?,
        ]))
    }

    /// The next signal received.
    async fn recv(&mut self) -> Signal {
        let [int, term, hup] = &mut self.0;
        tokio::select! {
            Some(()) = int.recv() => Signal::SIGINT,
            Some(()) = term.recv() => Signal::SIGTERM,
            Some(()) = hup.recv() => Signal::SIGHUP,
            // The streams end only with the runtime; then there is nothing left to forward.
            else => std::future::pending().await,
        }
    }
}

pub async fn run(args: Args, global: &Global) -> Outcome {
    let command = Child::of(&args.command)?;
    global.check_ttl(args.ttl)?;
    let retry = match (args.no_wait, args.wait) {
        (true, _) => Retry::once(),
        (false, Some(wait)) => Retry::forever().max_wait(wait),
        (false, None) => Retry::forever(),
    };
    if args.resources.len() > 1 {
        let one_only = [
            (
                args.permits.is_some(),
                "--permits takes one RESOURCE, the semaphore's name",
            ),
            (
                args.shared,
                "--shared takes one RESOURCE, the read-write lock's name",
            ),
            (
                args.exclusive,
                "--exclusive takes one RESOURCE, the read-write lock's name",
            ),
        ];
        if let Some((_, what)) = one_only.iter().find(|(set, _)| *set) {
            return Err(Failure::usage(format!(
                "{what}: several at once are not offered"
            )));
        }
    }
    let mut signals = Signals::install()?;
    let waits = !args.no_wait && args.wait.is_none_or(|wait| !wait.is_zero());
    let (manager, retry, notice) = global.for_acquiring(retry, waits, awaited(&args)).await?;
    let acquisition = async {
        let kind = match args.permits {
            Some(permits) => Kind::Permit { permits },
            None if args.shared => Kind::Read,
            None if args.exclusive => Kind::Write,
            None => Kind::Lock,
        };
        let request = Request::new(kind, &args.resources, args.ttl).retry(retry);
        let mut lock = crate::acquire::lock_of(manager.request(&request).await?)?;
        // COMMAND gets the token in REDLOCK_FENCE: issued now, while the lock is surely ours
        // (`fencing` invariant 8); without one, COMMAND does not run.
        if !global.no_fencing
            && let Err(e) = lock.fence().await
        {
            lock.release().await;
            return Err(e);
        }
        Ok(lock.keep_alive(args.ttl))
    };
    let acquired = until_signalled(acquisition, &mut signals, global).await;
    let guard = match acquired.map_err(|f| f.instead_of(BUSY, args.conflict_exit_code))? {
        Ok(guard) => guard,
        Err(status) => return Ok(status),
    };
    drop(notice);
    let options = Supervision {
        foreground: args.foreground,
        kill_grace: args.kill_grace,
    };
    run_holding(guard, command, options, &[], &mut signals).await
}

/// What the terminal's lines name while this run waits (one RESOURCE with `--permits`,
/// `--shared` or `--exclusive`: checked before).
fn awaited(args: &Args) -> Awaited {
    let first = args.resources.first().map_or("", String::as_str);
    if args.permits.is_some() {
        Awaited::other("a permit of", first)
    } else if args.shared {
        Awaited::other("a shared hold on", first)
    } else if args.exclusive {
        Awaited::other("an exclusive hold on", first)
    } else {
        Awaited::lock(&args.resources)
    }
}

/// `--conflict-exit-code N`: 1 to 255. Not 0: a busy lock must not look like success.
fn conflict_exit_code(text: &str) -> Result<u8, String> {
    match text.parse::<u8>() {
        Ok(0) => Err("0 would make a busy lock look like success: use 1 to 255".to_owned()),
        Ok(n) => Ok(n),
        Err(_) => Err("an exit status is a number from 1 to 255".to_owned()),
    }
}

/// COMMAND and its arguments, from what follows `--`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Child<'a> {
    program: &'a str,
    args: &'a [String],
}

impl<'a> Child<'a> {
    /// The command after `--`, or a usage failure when there is none.
    pub(crate) fn of(command: &'a [String]) -> Result<Self, Failure> {
        match command.split_first() {
            Some((program, args)) => Ok(Self { program, args }),
            // Everything before `--` is a resource, so `run r echo hi` lands here too.
            None => Err(Failure::usage(
                "no COMMAND given after --: every argument before -- is a resource to lock; \
                 write e.g. redlock run RESOURCE... -- ./job.sh",
            )),
        }
    }
}

/// How COMMAND is watched over while it runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Supervision {
    /// Run it in our process group (invariant 3's "COMMAND alone").
    pub(crate) foreground: bool,
    /// After a loss, how long it has between `SIGTERM` and `SIGKILL`.
    pub(crate) kill_grace: Duration,
}

/// Waits for `acquisition`, or for a signal to us, which ends the wait (invariant 4): then the
/// shell's status for it.
pub(crate) async fn until_signalled(
    acquisition: impl std::future::Future<Output = Result<Guard, Error>>,
    signals: &mut Signals,
    global: &Global,
) -> Result<Result<Guard, u8>, Failure> {
    tokio::select! {
        guard = acquisition => Ok(Ok(guard.map_err(|e| global.not_acquired(e))?)),
        signal = signals.recv() => {
            // Dropping the acquisition rolls back its round in flight, in the background; that
            // round is bounded by the node timeout, so give it that long (and a little) before
            // the runtime goes away with it.
            tokio::time::sleep(global.node_timeout() + Duration::from_millis(50)).await;
            Ok(Err(signal_status(signal)))
        }
    }
}

/// Runs COMMAND while `guard` holds, with the lock's variables and `extra` in its environment,
/// and releases once it has exited (invariants 1 to 4); COMMAND's status, or 76 on a loss.
pub(crate) async fn run_holding(
    guard: Guard,
    child: Child<'_>,
    options: Supervision,
    extra: &[(&str, String)],
    signals: &mut Signals,
) -> Outcome {
    let program = child.program;
    // Sorted and deduplicated by the library; joined as the library's own messages name a set.
    let resource = guard.resources().join(", ");
    tracing::debug!(%resource, "acquired; starting COMMAND");

    let mut command = Command::new(program);
    command
        .args(child.args)
        .env("REDLOCK_RESOURCE", &resource)
        .env("REDLOCK_VALUE", guard.value());
    match guard.permit() {
        Some(permit) => command.env("REDLOCK_PERMIT", permit.to_string()),
        None => command.env_remove("REDLOCK_PERMIT"),
    };
    // Removed when there is none, so a token inherited from an outer `redlock run` is never
    // mistaken for this lock's.
    match redquorum::LockInfo::fence(&guard) {
        Some(fence) => command.env("REDLOCK_FENCE", fence.to_string()),
        None => command.env_remove("REDLOCK_FENCE"),
    };
    for (name, value) in extra {
        command.env(name, value);
    }
    if !options.foreground {
        command.process_group(0);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            release(guard, &resource).await; // invariant 1: nothing runs
            return Err(spawn_failure(program, &e));
        }
    };
    let Some(target) = Target::of(&child, !options.foreground) else {
        // Cannot happen on Linux (an unreaped child has a pid, and pids fit an i32); should it,
        // a child we could not signal must not run unsupervised.
        let _ = child.kill().await;
        release(guard, &resource).await; // invariant 1: it has exited
        return Err(Failure::os(format!(
            "{program} started without a usable pid"
        )));
    };
    let ended = supervise(child, target, &guard, signals, options.kill_grace).await;
    let lost = match &ended {
        Ended::Exited { lost, .. } => *lost,
        Ended::Unknown(_) => guard.is_lost(),
    };
    let reason = guard.loss_reason();
    release(guard, &resource).await; // invariant 1: COMMAND has exited
    match ended {
        _ if lost => Err(Failure::new(
            LOST,
            format!(
                "the lock on {:?} was lost while {program} ran, so it was terminated ({})",
                resource,
                reason.map_or_else(|| "reason unknown".to_owned(), |r| r.to_string())
            ),
        )),
        Ended::Exited { status, .. } => Ok(exit_status(status)),
        Ended::Unknown(e) => Err(Failure::os(format!("could not wait for {program}: {e}"))),
    }
}

/// How COMMAND's run ended.
#[derive(Debug)]
enum Ended {
    /// It exited with `status`; `lost` says whether the lock was lost before that (invariant 2).
    Exited { status: ExitStatus, lost: bool },
    /// Waiting for it failed; it was killed.
    Unknown(io::Error),
}

/// Whom our signals reach (invariant 3).
#[derive(Debug, Clone, Copy)]
struct Target {
    pid: Pid,
    /// The whole process group COMMAND leads, or COMMAND alone.
    group: bool,
}

impl Target {
    fn of(child: &Process, group: bool) -> Option<Self> {
        let pid = i32::try_from(child.id()?).ok()?;
        Some(Self {
            pid: Pid::from_raw(pid),
            group,
        })
    }

    fn send(self, signal: Signal) {
        let sent = if self.group {
            killpg(self.pid, signal)
        } else {
            kill(self.pid, signal)
        };
        if let Err(e) = sent {
            // ESRCH: everything exited a moment ago, and the next wait will tell.
            tracing::debug!(%signal, error = %e, "could not signal COMMAND");
        }
    }

    /// Whether any process is left in COMMAND's group (never, without a group of its own).
    fn group_alive(self) -> bool {
        self.group && killpg(self.pid, None).is_ok()
    }
}

/// Waits for COMMAND to exit, forwarding signals and terminating it if the lock is lost.
async fn supervise(
    mut child: Process,
    target: Target,
    guard: &Guard,
    signals: &mut Signals,
    kill_grace: Duration,
) -> Ended {
    let mut lost = false;
    let mut killed = false;
    let far_future = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
    let kill_at = tokio::time::sleep_until(far_future);
    tokio::pin!(kill_at);
    let ended = loop {
        tokio::select! {
            // A loss noticed together with the exit wins: we cannot tell that COMMAND finished
            // while the lock was still ours (invariant 2).
            biased;
            () = guard.lost(), if !lost => {
                lost = true;
                tracing::warn!(resources = ?guard.resources(), "lock lost; terminating COMMAND");
                target.send(Signal::SIGTERM);
                // A grace too long to be an instant is a grace without end: no SIGKILL.
                let now = tokio::time::Instant::now();
                kill_at.as_mut().reset(now.checked_add(kill_grace).unwrap_or(far_future));
            }
            status = child.wait() => {
                break match status {
                    Ok(status) => Ended::Exited { status, lost },
                    Err(e) => {
                        // Cannot tell whether it is still running: make sure it is not.
                        let _ = child.start_kill();
                        Ended::Unknown(e)
                    }
                };
            }
            () = &mut kill_at, if lost => {
                tracing::warn!("COMMAND still running after the kill grace; killing it");
                killed = true;
                if target.group {
                    target.send(Signal::SIGKILL);
                } else {
                    // Signals only an unreaped child (invariant 3).
                    let _ = child.start_kill();
                }
                kill_at.as_mut().reset(far_future);
            }
            signal = signals.recv() => {
                tracing::debug!(%signal, "forwarding to COMMAND");
                target.send(signal);
            }
        }
    };
    // After a loss, nothing COMMAND started may go on working: what is left of its group gets the
    // rest of the grace, then SIGKILL (see the module docs).
    if lost && !killed {
        while target.group_alive() {
            if tokio::time::Instant::now() >= kill_at.deadline() {
                target.send(Signal::SIGKILL);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    ended
}

/// Releases the lock after COMMAND is done; a loss or a partial release is only logged, as the
/// exit status already says what matters.
async fn release(guard: Guard, resource: &str) {
    match guard.release().await {
        Ok(released) => match released.cause() {
            None => tracing::debug!(resource, confirmed = released.confirmed, "released"),
            // As the library's `with_lock`: COMMAND has finished; what is left expires.
            Some(cause) => tracing::warn!(
                resource,
                %cause,
                confirmed = released.confirmed,
                quorum = released.quorum,
                "release after COMMAND finished was not confirmed by a quorum; what is left expires with its TTL"
            ),
        },
        Err(Error::HoldLost { reason, .. }) => {
            tracing::debug!(resource, %reason, "released a lost lock");
        }
        Err(e) => tracing::warn!(resource, error = %e, "release failed"),
    }
}

fn spawn_failure(program: &str, error: &io::Error) -> Failure {
    let status = if error.kind() == io::ErrorKind::NotFound {
        COMMAND_NOT_FOUND
    } else {
        CANNOT_EXECUTE
    };
    Failure::new(status, format!("could not run {program}: {error}"))
}

/// The shell's status for death by `signal`: 128+N.
fn signal_status(signal: Signal) -> u8 {
    u8::try_from(128 + signal as i32).unwrap_or(255)
}

/// COMMAND's status as ours: its exit code, or 128+N for death by signal N (the shell's rule).
fn exit_status(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(255),
        (None, None) => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_pass_through_and_signals_become_128_plus_n() {
        assert_eq!(exit_status(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_status(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(exit_status(ExitStatus::from_raw(255 << 8)), 255);
        assert_eq!(exit_status(ExitStatus::from_raw(15)), 143); // SIGTERM
        assert_eq!(exit_status(ExitStatus::from_raw(9)), 137); // SIGKILL
    }

    #[test]
    fn a_missing_command_is_127_and_an_unexecutable_one_126() {
        let missing = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(spawn_failure("x", &missing).status, COMMAND_NOT_FOUND);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_failure("x", &denied).status, CANNOT_EXECUTE);
    }
}
