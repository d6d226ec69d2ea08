//! `redlock elect` and `redlock leader`: one leader at a time, a standby that takes over when the
//! leader's process is killed, and who leads, as the servers say.

mod common;

use std::fs;
use std::process::Stdio;
use std::time::Duration;

use common::{cluster, eventually, redlock, run};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

/// The lines `identity term pgid` the candidates' commands wrote.
fn leaders(log: &std::path::Path) -> Vec<(String, u64, i32)> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            (
                parts[0].to_owned(),
                parts[1].parse().unwrap(),
                parts[2].parse().unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_standby_runs_its_command_only_after_the_leader_was_killed() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "echo \"$REDLOCK_LEADER $REDLOCK_TERM $$\" >> '{}'; exec sleep 60",
        log.display()
    );
    let candidate = |identity: &str| {
        redlock(&servers)
            .args(["elect", "svc", "--identity", identity, "--ttl", "3s", "--"])
            .args(["sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut a = candidate("A");
    assert!(eventually(Duration::from_secs(20), || leaders(&log).len() == 1));
    let out = run(redlock(&servers).args(["leader", "svc", "--json"]));
    out.expect_code(0);
    let shown: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let (_, a_term, a_group) = leaders(&log)[0].clone();
    assert_eq!(shown["leader"], "A");
    assert_eq!(shown["term"], a_term);

    let mut b = candidate("B");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(leaders(&log).len(), 1, "the standby waits while A leads");

    // A's redlock dies without resigning; its command (in a group of its own) is left running,
    // as after a crash, and stopped by hand below.
    a.kill().unwrap();
    a.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(20), || leaders(&log).len() == 2),
        "B took over"
    );
    let (who, b_term, b_group) = leaders(&log)[1].clone();
    assert_eq!(who, "B");
    assert!(b_term > a_term, "term {b_term} after {a_term}");
    let out = run(redlock(&servers).args(["leader", "svc"]));
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "B");

    // SIGTERM to B's redlock is forwarded to its command, which exits; B resigns.
    kill(Pid::from_raw(b.id() as i32), Signal::SIGTERM).unwrap();
    let status = b.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    let _ = killpg(Pid::from_raw(a_group), Signal::SIGKILL);
    let _ = killpg(Pid::from_raw(b_group), Signal::SIGKILL);
    run(redlock(&servers).args(["leader", "svc"]))
        .expect_code(1)
        .one_line_error("nobody leads \"svc\"");
}

#[test]
fn nobody_leads_an_election_never_held_and_terms_need_fencing() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let out = run(redlock(&servers).args(["leader", "idle", "--json"]));
    out.expect_code(1);
    let shown: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert!(shown["leader"].is_null(), "{shown}");
    run(redlock(&servers).args(["--no-fencing", "elect", "idle", "--", "true"]))
        .expect_code(64)
        .one_line_error("fencing");
    run(redlock("redis://127.0.0.1:1").args(["leader", "idle"]))
        .expect_code(69)
        .one_line_error("cannot be told");
}
