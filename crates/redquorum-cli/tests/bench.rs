//! `redlock bench --json`: exactly one line of JSON with the numbers, and for the contended
//! workload how the lock changed hands.

mod common;

use common::{cluster, redlock, run};
use serde_json::Value;

#[test]
fn bench_prints_exactly_one_json_line_for_each_workload() {
    let cluster = cluster(3);
    for workload in ["uncontended", "contended"] {
        let out = run(redlock(&cluster.servers()).args([
            "bench",
            "--workload",
            workload,
            "--concurrency",
            "3",
            "--duration",
            "1s",
            "--json",
        ]));
        out.expect_code(0);
        assert_eq!(out.stdout.lines().count(), 1, "{out:#?}");
        let report: Value = serde_json::from_str(out.stdout.trim()).unwrap();
        assert_eq!(report["workload"], workload);
        assert_eq!(report["concurrency"], 3);
        assert_eq!(report["nodes"], 3);
        assert!(report["cycles"].as_u64().unwrap() > 0, "{report}");
        assert!(report["cycles_per_sec"].as_f64().unwrap() > 0.0, "{report}");
        assert_eq!(report["errors"], 0, "{report}");
        let latency = &report["latency_us"];
        let (p50, p99, max) = (
            latency["p50"].as_u64().unwrap(),
            latency["p99"].as_u64().unwrap(),
            latency["max"].as_u64().unwrap(),
        );
        assert!(0 < p50 && p50 <= p99 && p99 <= max, "{report}");
        assert_waiting_keys(&report);
        if workload == "uncontended" {
            assert_eq!(report["handoffs"], 0, "one worker per resource: {report}");
        }
    }
}

/// The keys about waiting are there and consistent with each other; returns the hand-offs.
#[track_caller]
fn assert_waiting_keys(report: &Value) -> u64 {
    assert_eq!(report["notify"], true, "{report}");
    assert_eq!(report["fair"], false, "{report}");
    let cycles = report["cycles"].as_u64().unwrap();
    let handoffs = report["handoffs"].as_u64().unwrap();
    assert!(
        handoffs < cycles,
        "the first acquisition is nobody's hand-off: {report}"
    );
    assert!(
        report["handoffs_per_sec"].as_f64().unwrap() >= 0.0,
        "{report}"
    );
    let wait = &report["wait_us"];
    let (p50, p90, p99, max) = (
        wait["p50"].as_u64().unwrap(),
        wait["p90"].as_u64().unwrap(),
        wait["p99"].as_u64().unwrap(),
        wait["max"].as_u64().unwrap(),
    );
    assert!(
        0 < p50 && p50 <= p90 && p90 <= p99 && p99 <= max,
        "{report}"
    );
    assert!(wait["mean"].as_f64().unwrap() > 0.0, "{report}");
    // A wait is part of its cycle.
    assert!(
        max <= report["latency_us"]["max"].as_u64().unwrap(),
        "{report}"
    );
    let per_worker = &report["per_worker"];
    let (min, most) = (
        per_worker["min"].as_u64().unwrap(),
        per_worker["max"].as_u64().unwrap(),
    );
    let workers = report["concurrency"].as_u64().unwrap();
    assert!(
        min <= most && min * workers <= cycles && cycles <= most * workers,
        "{report}"
    );
    let share = per_worker["min_share"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&share), "{report}");
    handoffs
}

#[test]
fn contended_bench_reports_hand_offs_waits_and_fairness() {
    let cluster = cluster(3);
    let out = run(redlock(&cluster.servers()).args([
        "bench",
        "--workload",
        "contended",
        "--concurrency",
        "4",
        "--duration",
        "2s",
        "--json",
    ]));
    out.expect_code(0);
    assert_eq!(out.stdout.lines().count(), 1, "{out:#?}");
    let report: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(report["errors"], 0, "{report}");
    let handoffs = assert_waiting_keys(&report);
    assert!(
        handoffs > 0,
        "four workers on one lock, and it never changed hands: {report}"
    );
}

#[test]
fn bench_without_json_prints_percentiles() {
    let cluster = cluster(1);
    let out = run(redlock(&cluster.servers()).args(["bench", "--duration", "1s"]));
    out.expect_code(0);
    assert!(out.stdout.contains("cycles:"), "{out:#?}");
    assert!(out.stdout.contains("p99"), "{out:#?}");
    assert!(out.stdout.contains("wait for the lock"), "{out:#?}");
    assert!(out.stdout.contains("cycles per worker: min"), "{out:#?}");

    let out = run(redlock(&cluster.servers()).args([
        "--fair",
        "bench",
        "--workload",
        "contended",
        "--duration",
        "1s",
    ]));
    out.expect_code(0);
    assert!(out.stdout.contains("fair on"), "{out:#?}");
    assert!(out.stdout.contains("hand-offs: "), "{out:#?}");
}
