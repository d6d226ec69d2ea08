//! `redlock bench --json`: exactly one line of JSON with the numbers.

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
    }
}

#[test]
fn bench_without_json_prints_percentiles() {
    let cluster = cluster(1);
    let out = run(redlock(&cluster.servers()).args(["bench", "--duration", "1s"]));
    out.expect_code(0);
    assert!(out.stdout.contains("cycles:"), "{out:#?}");
    assert!(out.stdout.contains("p99"), "{out:#?}");
}
