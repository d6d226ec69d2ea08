//! `--permits K`: a semaphore from the command line (up to K commands at once, each told its
//! permit), and `--lock-delay`: a lock left unreleased stays out of reach for the delay.

mod common;

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{cluster, finish, redlock, run};

#[test]
fn at_most_k_commands_run_at_once_each_with_its_own_permit() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let script = format!(
        "echo \"enter $REDLOCK_PERMIT $(date +%s%N) $REDLOCK_RESOURCE\" >> '{0}'; sleep 0.4; \
         echo \"exit $REDLOCK_PERMIT $(date +%s%N) $REDLOCK_RESOURCE\" >> '{0}'",
        log.display()
    );
    let started = Instant::now();
    let children: Vec<_> = (0..5)
        .map(|_| {
            redlock(&servers)
                .args(["run", "--permits", "2", "encoders", "--ttl", "5s", "--"])
                .args(["sh", "-c", &script])
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
    let mut events: Vec<(u128, &str, &str, &str)> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(parts.len(), 4, "{text}");
            (parts[2].parse().unwrap(), parts[0], parts[1], parts[3])
        })
        .collect();
    assert_eq!(events.len(), 10, "every run ran once:\n{text}");
    events.sort();
    let mut inside: Vec<&str> = Vec::new();
    let mut most = 0;
    for (_, what, permit, resource) in &events {
        assert_eq!(*resource, format!("encoders:permit:{permit}"), "{text}");
        if *what == "enter" {
            assert!(!inside.contains(permit), "permit {permit} twice:\n{text}");
            inside.push(permit);
            most = most.max(inside.len());
        } else {
            inside.retain(|p| p != permit);
        }
    }
    assert_eq!(most, 2, "two at once, never three:\n{text}");
}

#[test]
fn acquire_with_permits_names_the_permit_key_that_release_takes() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let out = run(redlock(&servers).args([
        "acquire",
        "--permits",
        "1",
        "exports",
        "--ttl",
        "30s",
        "--json",
    ]));
    out.expect_code(0);
    let json: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(json["permit"], 0, "{json}");
    assert_eq!(json["resource"], "exports:permit:0", "{json}");
    let value = json["value"].as_str().unwrap();
    // The one permit is held: another acquisition is refused.
    run(redlock(&servers).args(["acquire", "--permits", "1", "exports", "--ttl", "30s"]))
        .expect_code(75)
        .one_line_error("exports (1 permit)");
    run(redlock(&servers).args(["release", "exports:permit:0", value])).expect_code(0);
    run(redlock(&servers).args(["acquire", "--permits", "1", "exports", "--ttl", "30s"]))
        .expect_code(0);
}

#[test]
fn bad_permit_counts_and_sets_of_semaphores_are_usage_errors() {
    // ("-1" reads as an unknown flag to clap, also a one-line usage error.)
    for (bad, needle) in [
        ("0", "permit count"),
        ("-1", "'-1'"),
        ("two", "permit count"),
        ("1025", "permit count"),
    ] {
        run(redlock("redis://127.0.0.1:1").args(["run", "--permits", bad, "s", "--", "true"]))
            .expect_code(64)
            .one_line_error(needle);
    }
    run(redlock("redis://127.0.0.1:1").args(["run", "--permits", "2", "a", "b", "--", "true"]))
        .expect_code(64)
        .one_line_error("--permits takes one RESOURCE");
}

#[test]
fn an_unreleased_lock_stays_held_for_the_lock_delay_after_its_ttl() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let started = Instant::now();
    // `acquire` leaves the lock held and never releases it: as a holder that crashed.
    run(redlock(&servers).args(["acquire", "delayed", "--ttl", "1s", "--lock-delay", "2s"]))
        .expect_code(0);
    for node in cluster.iter() {
        let pttl: i64 = node.cli(&["PTTL", "delayed"]).unwrap().parse().unwrap();
        assert!(
            pttl > 1000,
            "the key outlives the TTL by the delay: {pttl} ms"
        );
    }
    run(redlock(&servers).args(["acquire", "delayed", "--ttl", "1s", "--wait", "20s"]))
        .expect_code(0);
    // The key was set after `started` and lives TTL + delay = 3 s.
    assert!(started.elapsed() >= Duration::from_secs(3));
}

#[test]
fn a_lock_delay_that_does_not_fit_under_max_ttl_is_a_usage_error() {
    run(redlock("redis://127.0.0.1:1").args([
        "acquire",
        "r",
        "--ttl",
        "50s",
        "--lock-delay",
        "20s",
    ]))
    .expect_code(64)
    .one_line_error("--lock-delay 20.0s is longer than --max-ttl");
}
