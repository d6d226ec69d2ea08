//! `redlock chaos`: bad flags are usage errors before anything starts; a run prints one JSON
//! object and exits 0 when safe, 1 when the checker finds a violation; `--report` writes a file.

mod common;

use common::{dead_url, redlock, run};

#[test]
fn bad_flags_are_usage_errors() {
    for (args, needle) in [
        (
            &["chaos", "--faults", "kill,split-brain"][..],
            "unknown fault \"split-brain\"",
        ),
        (&["chaos", "--strategy", "zookeeper"], "unknown strategy"),
        (&["chaos", "--report", "run.txt"], ".html, .svg or .json"),
        (&["chaos", "--duration", "500ms"], "between 1s and 24h"),
        (&["chaos", "--duration", "10"], "missing unit"),
        (&["chaos", "--nodes", "0"], "--nodes"),
        (&["chaos", "--clients", "65"], "--clients"),
        (&["chaos", "--seed=-1"], "--seed"),
        (&["chaos", "--permits", "0"], "--permits"),
        (&["chaos", "--permits", "65"], "--permits"),
        (&["chaos", "--permits", "two"], "--permits"),
        (
            &["chaos", "--strategy", "semaphore-counting"],
            "semaphore-counting is a semaphore: give it permits (--permits K)",
        ),
        (
            &["chaos", "--strategy", "setnx-getset", "--permits", "2"],
            "setnx-getset has no semaphore",
        ),
        (
            &["chaos", "--lock-delay", "11s"],
            "lock-delay must be at most 10s",
        ),
        (&["chaos", "--lock-delay", "1"], "missing unit"),
        (
            &[
                "chaos",
                "--strategy",
                "semaphore-counting",
                "--permits",
                "2",
                "--lock-delay",
                "1s",
            ],
            "semaphore-counting has no lock-delay",
        ),
        (&["chaos", "--check-delay", "soon"], "--check-delay"),
        (
            &["chaos", "--faults", "client-crash,partitions"],
            "unknown fault \"partitions\"",
        ),
    ] {
        let out = run(redlock(&dead_url()).args(args));
        assert_eq!(out.code(), 64, "{args:?}: {out:#?}");
        out.one_line_error(needle);
    }
}

#[test]
fn a_quiet_run_is_safe_and_says_so_in_json_and_in_the_report() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("run.json");
    let out = run(redlock(&dead_url()).args([
        "chaos",
        "--strategy",
        "setnx-getset",
        "--faults",
        "none",
        "--clients",
        "3",
        "--duration",
        "2s",
        "--seed",
        "5",
        "--json",
        "--report",
        report.to_str().unwrap(),
    ]));
    out.expect_code(0);
    common::assert_no_panic(&out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one JSON line: {out:#?}");
    let json: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(json["strategy"], "setnx-getset");
    assert_eq!(json["seed"], 5);
    assert_eq!(json["safe"], true);
    assert_eq!(json["violations"], 0);
    assert!(json["sections"].as_u64().unwrap() > 0, "{json}");
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(written["history"]["strategy"], "setnx-getset");
}

/// Seed 3 plans two kills in 6 s; each fails the master over to a replica that lags by more
/// than a TTL, aimed at a fresh lock another client waits for (see `redquorum_chaos::faults`).
#[test]
fn a_failover_run_finds_the_double_grant_and_exits_1() {
    let out = run(redlock(&dead_url()).args([
        "chaos",
        "--strategy",
        "single-with-failover",
        "--faults",
        "kill",
        "--clients",
        "6",
        "--duration",
        "6s",
        "--seed",
        "3",
    ]));
    out.expect_code(1);
    common::assert_no_panic(&out.stderr);
    assert!(out.stdout.contains("VIOLATIONS: "), "{out:#?}");
    assert!(out.stdout.contains("seed 3"), "{out:#?}");
}

/// Two clients cannot be more holders than two permits, whatever the design: the run is safe,
/// and the JSON line says how many held at once and what the history was checked against.
#[test]
fn a_semaphore_run_reports_its_permits_and_holders_in_json() {
    let out = run(redlock(&dead_url()).args([
        "chaos",
        "--strategy",
        "semaphore-counting",
        "--permits",
        "2",
        "--faults",
        "none",
        "--clients",
        "2",
        "--resources",
        "1",
        "--duration",
        "2s",
        "--seed",
        "5",
        "--check-delay",
        "1s",
        "--json",
    ]));
    out.expect_code(0);
    common::assert_no_panic(&out.stderr);
    let json: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(json["strategy"], "semaphore-counting");
    assert_eq!(json["permits"], 2);
    assert_eq!(json["over_permits"], 0);
    assert_eq!(json["lock_delay_ms"], 0);
    assert_eq!(json["checked_delay_ms"], 1000);
    assert_eq!(json["unreleased"], 0, "{json}");
    let most = json["most_holders"].as_u64().unwrap();
    assert!((1..=2).contains(&most), "{json}");
}
