//! `redlock run`: mutual exclusion between processes, exit statuses, a lost lock, signals, and
//! all of that for a lock on several resources.

mod common;

use std::fs;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{cluster, dead_url, eventually, finish, redlock, run};

/// A shell command that logs its critical section, with timestamps, to `log`.
fn critical_section(log: &Path) -> String {
    format!(
        "echo \"enter $$ $(date +%s%N)\" >> '{0}'; sleep 0.3; echo \"exit $$ $(date +%s%N)\" >> '{0}'",
        log.display()
    )
}

/// Runs `redlock run RESOURCES... -- critical_section` once per entry of `runs`, all at once,
/// and checks that every run succeeded and that no two critical sections overlapped.
#[track_caller]
fn assert_runs_are_serial(servers: &str, runs: &[&[&str]]) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = critical_section(&log);

    let started = Instant::now();
    let children: Vec<_> = runs
        .iter()
        .map(|resources| {
            redlock(servers)
                .arg("run")
                .args(*resources)
                .args(["--ttl", "5s", "--", "sh", "-c", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        finish(child, started).expect_code(0);
    }

    let text = fs::read_to_string(&log).unwrap();
    let events: Vec<(&str, &str, u128)> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(parts.len(), 3, "{text}");
            (parts[0], parts[1], parts[2].parse().unwrap())
        })
        .collect();
    assert_eq!(
        events.len(),
        2 * runs.len(),
        "every run ran exactly once:\n{text}"
    );
    for (i, pair) in events.chunks(2).enumerate() {
        let [(enter, who, t_in), (exit, who_out, t_out)] = pair else {
            unreachable!()
        };
        assert_eq!(
            (*enter, *exit, who),
            ("enter", "exit", who_out),
            "section {i} interleaved:\n{text}"
        );
        assert!(t_in <= t_out, "{text}");
    }
    for window in events.windows(2) {
        assert!(window[0].2 <= window[1].2, "timestamps go back:\n{text}");
    }
}

#[test]
fn concurrent_runs_never_overlap_and_all_succeed() {
    let cluster = cluster(3);
    assert_runs_are_serial(&cluster.servers(), &[&["shared"], &["shared"], &["shared"]]);
}

#[test]
fn sets_in_any_order_never_overlap_and_all_finish() {
    let cluster = cluster(3);
    // Listed in both orders (no deadlock), with a duplicate, and against a single-resource lock
    // on a member of the set: every pair shares a key, so no two may run at once.
    assert_runs_are_serial(
        &cluster.servers(),
        &[
            &["acct:1", "acct:2"],
            &["acct:2", "acct:1"],
            &["acct:2", "acct:1", "acct:2"],
            &["acct:1"],
        ],
    );
}

#[test]
fn a_set_is_held_as_a_whole_while_the_command_runs() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    // Exits with the number of the first check that failed.
    let check = format!(
        r#"test "$REDLOCK_RESOURCE" = "acct:1, acct:2" || exit 10
test ${{#REDLOCK_VALUE}} -eq 40 && test -n "$REDLOCK_FENCE" || exit 11
for r in acct:1 acct:2; do
  {bin} status "$r" | tail -n 1 | grep -q "held by $REDLOCK_VALUE" || exit 12
done
{bin} run acct:2 --no-wait -- true 2>/dev/null; test $? -eq 75 || exit 13
{bin} run acct:3 acct:1 --no-wait -- true 2>/dev/null; test $? -eq 75 || exit 14
{bin} run acct:3 --no-wait -- true || exit 15
"#,
        bin = env!("CARGO_BIN_EXE_redlock")
    );
    run(redlock(&servers).args(["run", "acct:2", "acct:1", "--", "sh", "-c", &check]))
        .expect_code(0);
    for resource in ["acct:1", "acct:2", "acct:3"] {
        let out = run(redlock(&servers).args(["status", resource]));
        assert!(out.stdout.ends_with("free on 3/3 nodes\n"), "{out:#?}");
    }
}

#[test]
fn a_set_with_one_key_lost_terminates_the_command_with_status_76() {
    // One key of the set gone on a majority: the set is no longer held there.
    lost_lock_ends_the_command(
        &["a", "b"],
        "b",
        "the lock on \"a, b\" was lost while sleep ran",
    );
}

#[test]
fn no_wait_on_a_busy_resource_exits_75_without_running_the_command() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    run(redlock(&servers).args(["acquire", "busy", "--ttl", "30s"])).expect_code(0);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");

    let out = run(redlock(&servers).args([
        "run",
        "busy",
        "--no-wait",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]));
    out.expect_code(75);
    out.one_line_error("busy");
    assert!(!marker.exists(), "the command ran without the lock");
    // Prompt: one round, not a wait. Generous bound for a loaded machine.
    assert!(out.elapsed < Duration::from_secs(10), "{out:#?}");

    let out = run(redlock(&servers).args(["run", "busy", "--wait", "300ms", "--", "true"]));
    out.expect_code(75);
    out.one_line_error("busy");
}

/// `--conflict-exit-code N` (as `flock -E`): N instead of 75 when the lock is busy, with
/// `--no-wait` or once `--wait` has run out; servers that are down still give 69; 0 (a conflict
/// that looks like success) and anything above 255 are usage errors.
#[test]
fn conflict_exit_code_replaces_75_for_a_busy_lock_only() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    run(redlock(&servers).args(["acquire", "busy", "--ttl", "30s"])).expect_code(0);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = ["--", "touch", marker.to_str().unwrap()];
    for wait in [&["--no-wait"][..], &["--wait", "300ms"]] {
        let out = run(redlock(&servers)
            .args(["run", "busy", "--conflict-exit-code", "3"])
            .args(wait)
            .args(touch));
        assert_eq!(out.code(), 3, "{wait:?}: {out:#?}");
        out.one_line_error("busy");
    }
    assert!(!marker.exists(), "the command ran without the lock");
    let down = format!("{},{},{}", dead_url(), dead_url(), dead_url());
    let out = run(redlock(&down)
        .args(["run", "busy", "--no-wait", "--conflict-exit-code", "3"])
        .args(touch));
    out.expect_code(69);
    out.one_line_error("servers unreachable");
    // Acquired: COMMAND's own status, whatever N is.
    let out = run(redlock(&servers).args([
        "run",
        "free",
        "--no-wait",
        "--conflict-exit-code",
        "3",
        "--",
        "sh",
        "-c",
        "exit 7",
    ]));
    out.expect_code(7);
    for (n, needle) in [
        ("0", "0 would make a busy lock look like success"),
        ("256", "a number from 1 to 255"),
        ("-1", "a number from 1 to 255"),
        ("x", "a number from 1 to 255"),
    ] {
        let flag = format!("--conflict-exit-code={n}");
        let out = run(redlock(&servers).args(["run", "busy", &flag, "--", "true"]));
        assert_eq!(out.code(), 64, "{n}: {out:#?}");
        out.one_line_error(needle);
    }
}

#[test]
fn the_command_status_is_passed_through_and_the_lock_released() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    run(redlock(&servers).args(["run", "job", "--", "sh", "-c", "exit 7"])).expect_code(7);
    run(redlock(&servers).args(["run", "job", "--", "true"])).expect_code(0);
    run(redlock(&servers).args(["run", "job", "--", "sh", "-c", "kill -KILL $$"])).expect_code(137);
    run(redlock(&servers).args(["run", "job", "--foreground", "--", "sh", "-c", "exit 5"]))
        .expect_code(5);

    // The command sees the lock in its environment, and holds it while it runs.
    let check = format!(
        "test \"$REDLOCK_RESOURCE\" = job && test ${{#REDLOCK_VALUE}} -eq 40 && \
         {} status job | tail -n 1 | grep -q \"held by $REDLOCK_VALUE\"",
        env!("CARGO_BIN_EXE_redlock")
    );
    run(redlock(&servers).args(["run", "job", "--", "sh", "-c", &check])).expect_code(0);

    let out = run(redlock(&servers).args(["status", "job"]));
    out.expect_code(0);
    assert!(out.stdout.ends_with("free on 3/3 nodes\n"), "{out:#?}");
}

#[test]
fn the_command_gets_a_growing_fencing_token_unless_fencing_is_off() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fence");
    let script = format!("echo $REDLOCK_FENCE > '{}'", file.display());
    let fence = || -> u64 {
        let text = fs::read_to_string(&file).unwrap();
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("REDLOCK_FENCE {text:?}: {e}"))
    };
    run(redlock(&servers).args(["run", "job", "--", "sh", "-c", &script])).expect_code(0);
    let first = fence();
    run(redlock(&servers).args(["run", "job", "--", "sh", "-c", &script])).expect_code(0);
    let second = fence();
    assert!(second > first, "{second} after {first}");

    // Off: unset, even when redlock itself was started with one (an outer `redlock run`).
    let script = format!("echo ${{REDLOCK_FENCE-unset}} > '{}'", file.display());
    run(redlock(&servers).env("REDLOCK_FENCE", "12345").args([
        "--no-fencing",
        "run",
        "job",
        "--",
        "sh",
        "-c",
        &script,
    ]))
    .expect_code(0);
    assert_eq!(fs::read_to_string(&file).unwrap().trim(), "unset");
}

#[test]
fn a_command_that_cannot_run_is_127_or_126_and_the_lock_is_released() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let out = run(redlock(&servers).args(["run", "job", "--", "redlock-test-no-such-command"]));
    out.expect_code(127);
    out.one_line_error("could not run redlock-test-no-such-command");
    let dir = tempfile::tempdir().unwrap();
    let out = run(redlock(&servers).args(["run", "job", "--", dir.path().to_str().unwrap()]));
    out.expect_code(126);
    out.one_line_error("could not run");
    let out = run(redlock(&servers).args(["status", "job"]));
    assert!(out.stdout.ends_with("free on 3/3 nodes\n"), "{out:#?}");
}

#[test]
fn a_lost_lock_terminates_the_command_with_status_76() {
    lost_lock_ends_the_command(&["lost"], "lost", "was lost while sleep ran");
}

/// Runs `sleep 30` under a lock on `resources`, deletes `deleted` on a majority once the lock is
/// taken, and checks that the next extension fails: `sleep` is stopped, `redlock` exits 76 with
/// `message`, and our keys are released everywhere afterwards.
fn lost_lock_ends_the_command(resources: &[&str], deleted: &str, message: &str) {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let started = Instant::now();
    let child = redlock(&servers)
        .arg("run")
        .args(resources)
        .args(["--ttl", "1s", "--", "sleep", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let all_held = resources.len().to_string();
    let mut exists_args = vec!["EXISTS"];
    exists_args.extend(resources);
    let held_on = |node: &redquorum_nodes::RedisNode| node.cli(&exists_args).unwrap();
    assert!(
        eventually(Duration::from_secs(20), || {
            cluster.iter().all(|node| held_on(node) == all_held)
        }),
        "the lock was never taken"
    );
    for node in cluster.iter().take(2) {
        node.cli(&["DEL", deleted]).unwrap();
    }
    let out = finish(child, started);
    out.expect_code(76);
    out.one_line_error(message);
    assert!(
        out.elapsed < Duration::from_secs(25),
        "sleep 30 was not terminated: {out:#?}"
    );
    // Our value is gone everywhere (released after the command was stopped).
    assert!(eventually(Duration::from_secs(5), || {
        cluster.iter().all(|node| held_on(node) == "0")
    }));
}

#[test]
fn a_kill_grace_of_duration_max_never_kills_and_never_panics() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let started = Instant::now();
    let child = redlock(&servers)
        .args([
            "run",
            "graceful",
            "--ttl",
            "1s",
            "--kill-grace",
            "18446744073709551615s",
            "--",
            "sleep",
            "30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || {
        cluster
            .iter()
            .all(|node| node.cli(&["EXISTS", "graceful"]).unwrap() == "1")
    }));
    for node in cluster.iter() {
        node.cli(&["DEL", "graceful"]).unwrap();
    }
    // SIGTERM ends `sleep`; nothing is left for a SIGKILL.
    let out = finish(child, started);
    out.expect_code(76);
    out.one_line_error("was lost while sleep ran");
}

#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let mut cluster = cluster(3);
    let servers = cluster.servers();
    let started = Instant::now();
    let child = redlock(&servers)
        .args([
            "run",
            "lost",
            "--ttl",
            "1s",
            "--kill-grace",
            "500ms",
            "--",
            "sh",
            "-c",
            "trap '' TERM; sleep 30 & wait; sleep 30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || {
        (0..3).all(|i| cluster.node(i).cli(&["EXISTS", "lost"]).unwrap() == "1")
    }));
    for i in 0..3 {
        cluster.node(i).cli(&["DEL", "lost"]).unwrap();
    }
    let out = finish(child, started);
    out.expect_code(76);
    assert!(out.elapsed < Duration::from_secs(25), "{out:#?}");
}

#[test]
fn sigterm_to_redlock_is_forwarded_and_the_lock_released_after_the_command_exits() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("ready");
    let got = dir.path().join("got-term");
    let script = format!(
        "trap 'touch \"{got}\"; exit 3' TERM; touch \"{ready}\"; while :; do sleep 0.05; done",
        got = got.display(),
        ready = ready.display()
    );
    let started = Instant::now();
    let child = redlock(&servers)
        .args(["run", "job", "--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(20), || ready.exists()));
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let out = finish(child, started);
    out.expect_code(3);
    assert!(got.exists(), "COMMAND did not get SIGTERM");
    let out = run(redlock(&servers).args(["status", "job"]));
    assert!(out.stdout.ends_with("free on 3/3 nodes\n"), "{out:#?}");
}

#[test]
fn a_signal_while_waiting_ends_the_wait_without_running_the_command() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    run(redlock(&servers).args(["acquire", "job", "--ttl", "30s"])).expect_code(0);
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let connections = || {
        let node = cluster.iter().next().unwrap();
        let stats = node.cli(&["INFO", "stats"]).unwrap();
        stats
            .lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap()
    };
    let before = connections();
    let started = Instant::now();
    let child = redlock(&servers)
        .args(["run", "job", "--", "touch", marker.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until it has connected (so it waits for the lock): its signal handler is installed
    // before it connects. A fixed sleep hoped a loaded machine got that far in 500 ms.
    assert!(eventually(Duration::from_secs(20), || connections() > before));
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let out = finish(child, started);
    out.expect_code(130);
    assert!(!marker.exists());
}

/// A child killed and reaped if the test ends without waiting for it (a panic), so that no
/// `redlock` outlives its test.
struct Reaped(Option<std::process::Child>);

impl Reaped {
    fn take(&mut self) -> std::process::Child {
        self.0.take().expect("not taken yet")
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A holder that keeps `resource` until `release` exists (a minute at most).
fn hold_until(servers: &str, resource: &str, release: &Path) -> Reaped {
    let wait = format!(
        "for i in $(seq 1200); do [ -e '{}' ] && exit 0; sleep 0.05; done; exit 1",
        release.display()
    );
    let holder = redlock(servers)
        .args(["run", resource, "--", "sh", "-c", &wait])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the holder");
    Reaped(Some(holder))
}

/// A pseudo-terminal whose two ends no child inherits but the one given the slave.
fn terminal() -> nix::pty::OpenptyResult {
    use nix::fcntl::{F_SETFD, FdFlag, fcntl};
    let pty = nix::pty::openpty(None, None).expect("a pseudo-terminal");
    for fd in [&pty.master, &pty.slave] {
        fcntl(fd, F_SETFD(FdFlag::FD_CLOEXEC)).expect("close on exec");
    }
    pty
}

#[test]
fn a_wait_for_a_busy_lock_says_so_in_a_terminal_and_nothing_elsewhere() {
    let cluster = cluster(1);
    let servers = cluster.servers();
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let mut holder = hold_until(&servers, "busy-job", &release);
    assert!(
        eventually(common::LIMIT, || {
            cluster
                .iter()
                .all(|node| node.cli(&["EXISTS", "busy-job"]).is_ok_and(|n| n == "1"))
        }),
        "the holder never took the lock"
    );

    // Two waiters, each giving up within a minute: one whose stderr is a terminal, one whose
    // stderr is a pipe (a script's).
    let pty = terminal();
    let started = Instant::now();
    let waiter = |stderr: Stdio, stdout: Stdio| {
        let child = redlock(&servers)
            .args(["run", "busy-job", "--wait", "60s", "--", "true"])
            .stdout(stdout)
            .stderr(stderr)
            .spawn()
            .expect("start a waiter");
        Reaped(Some(child))
    };
    let mut in_terminal = waiter(Stdio::from(pty.slave), Stdio::null());
    let mut in_script = waiter(Stdio::piped(), Stdio::piped());
    // The terminal shows what the wait is for, once it has lasted a second, and how to see who
    // holds it.
    let (lines, screen) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut terminal = fs::File::from(pty.master);
        let mut chunk = [0u8; 4096];
        // Ends with EIO once the waiter, the only process with the terminal open, has exited.
        while let Ok(n @ 1..) = terminal.read(&mut chunk) {
            if lines.send(chunk[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let said = [
        "busy-job is held elsewhere",
        "status -- busy-job` shows which",
        "waiting for busy-job: ",
    ];
    while !said
        .iter()
        .all(|s| String::from_utf8_lossy(&seen).contains(s))
    {
        match screen.recv_timeout(Duration::from_secs(1)) {
            Ok(bytes) => seen.extend(bytes),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => assert!(
                started.elapsed() < common::LIMIT,
                "the terminal showed no wait: {:?}",
                String::from_utf8_lossy(&seen)
            ),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!(
                "the terminal closed without showing the wait: {:?}",
                String::from_utf8_lossy(&seen)
            ),
        }
    }

    fs::write(&release, "").unwrap();
    let terminal_waiter = common::exit_status(in_terminal.take(), started);
    assert!(terminal_waiter.success(), "{terminal_waiter:?}");
    let script_waiter = finish(in_script.take(), started);
    script_waiter.expect_code(0);
    assert!(
        script_waiter.stderr.is_empty(),
        "a script's stderr got the terminal's lines: {script_waiter:#?}"
    );
    assert!(common::exit_status(holder.take(), started).success());
}
