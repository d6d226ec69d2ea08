//! `redlock nodes start|status|stop` in a temporary directory.

mod common;

use std::fs;

use common::{Output, dead_url, redlock, run};
use serde_json::Value;

/// Stops the nodes of `dir` when the test ends, also when it fails half-way: detached nodes
/// outlive the test process otherwise.
struct StopOnDrop(String);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let _ = redlock(&dead_url())
            .args(["nodes", "stop", "--dir", &self.0])
            .output();
    }
}

/// The servers a successful `nodes start` exported: its stdout is only the export line, so that
/// `eval "$(redlock nodes start)"` works.
#[track_caller]
fn exported_servers(out: &Output) -> String {
    out.expect_code(0);
    out.stdout
        .trim()
        .strip_prefix("export REDLOCK_SERVERS=")
        .unwrap_or_else(|| panic!("only the export line expected: {out:#?}"))
        .to_owned()
}

#[test]
fn start_status_stop_in_a_temporary_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nodes");
    let dir_arg = dir.to_str().unwrap();
    let unused = dead_url();
    let _stop = StopOnDrop(dir_arg.to_owned());

    let out = run(redlock(&unused).args(["nodes", "start", "--count", "3", "--dir", dir_arg]));
    let servers = exported_servers(&out);
    assert_eq!(servers.split(',').count(), 3, "{servers}");
    assert!(dir.join("nodes.json").exists());
    for i in 0..3 {
        assert!(dir.join(format!("node-{i}")).join("redis.pid").exists());
    }

    // The nodes outlived `nodes start` and take locks, with AOF on.
    let out = run(redlock(&servers).args(["acquire", "res", "--ttl", "30s"]));
    out.expect_code(0);
    let out = run(redlock(&servers).args(["status", "res"]));
    out.expect_code(0);
    assert!(out.stdout.contains("on 3/3 nodes"), "{out:#?}");

    // Starting again in the same dir is refused while they run.
    let out = run(redlock(&unused).args(["nodes", "start", "--dir", dir_arg]));
    out.expect_code(64);
    out.one_line_error("still running");

    let out = run(redlock(&unused).args(["nodes", "status", "--dir", dir_arg, "--json"]));
    out.expect_code(0);
    let status: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(status["servers"], servers.as_str());
    let nodes = status["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 3);
    let pids: Vec<u64> = nodes
        .iter()
        .map(|n| {
            assert_eq!(n["running"], true, "{n}");
            n["pid"].as_u64().unwrap()
        })
        .collect();

    let out = run(redlock(&unused).args(["nodes", "stop", "--dir", dir_arg]));
    out.expect_code(0);
    for pid in pids {
        assert!(
            !fs::exists(format!("/proc/{pid}")).unwrap()
                || fs::read_to_string(format!("/proc/{pid}/stat"))
                    .map(|s| s.contains(") Z "))
                    .unwrap_or(true),
            "pid {pid} still running"
        );
    }
    assert!(!dir.join("nodes.json").exists());

    let out = run(redlock(&unused).args(["nodes", "status", "--dir", dir_arg]));
    out.expect_code(69);
    out.one_line_error("no nodes recorded");
    // Stopping twice is harmless.
    run(redlock(&unused).args(["nodes", "stop", "--dir", dir_arg])).expect_code(0);
}

#[test]
fn status_reports_a_node_that_died() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let unused = dead_url();
    let _stop = StopOnDrop(dir.to_owned());
    run(redlock(&unused).args(["nodes", "start", "--count", "2", "--dir", dir])).expect_code(0);
    let status: Value = serde_json::from_str(
        run(redlock(&unused).args(["nodes", "status", "--dir", dir, "--json"]))
            .stdout
            .trim(),
    )
    .unwrap();
    let port = status["nodes"][0]["port"].as_u64().unwrap();
    // Shut one down behind our back (redis-cli, not a signal: nothing found by name).
    let _ = std::process::Command::new("redis-cli")
        .args(["-p", &port.to_string(), "SHUTDOWN", "NOSAVE"])
        .output();
    assert!(common::eventually(
        std::time::Duration::from_secs(10),
        || { run(redlock(&unused).args(["nodes", "status", "--dir", dir])).code() == 69 }
    ));
    let out = run(redlock(&unused).args(["nodes", "status", "--dir", dir]));
    out.one_line_error("1 of 2 nodes");
    assert!(out.stdout.contains("not running"), "{out:#?}");
    run(redlock(&unused).args(["nodes", "stop", "--dir", dir])).expect_code(0);
}

#[test]
fn clusters_start_take_locks_show_their_shards_and_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("clusters");
    let dir_arg = dir.to_str().unwrap();
    let unused = dead_url();
    let _stop = StopOnDrop(dir_arg.to_owned());

    let out = run(redlock(&unused).args([
        "nodes",
        "start",
        "--cluster",
        "--count",
        "3",
        "--shards",
        "1",
        "--replicas",
        "1",
        "--dir",
        dir_arg,
    ]));
    let servers = exported_servers(&out);
    assert_eq!(servers.matches("redis+cluster://").count(), 3, "{servers}");
    assert!(
        dir.join("cluster-2")
            .join("node-1")
            .join("redis.pid")
            .exists()
    );

    let out = run(redlock(&servers).args(["acquire", "res", "--ttl", "30s"]));
    out.expect_code(0);
    let out = run(redlock(&servers).args(["status", "res", "--json"]));
    out.expect_code(0);
    let status: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(status["held_on"], 3, "{status}");
    for node in status["nodes"].as_array().unwrap() {
        let shard = &node["shard"];
        assert!(shard["master"].is_string(), "{node}");
        assert_eq!(
            shard["replicas"].as_array().map(Vec::len),
            Some(1),
            "{node}"
        );
        assert_eq!(shard["replicas"][0]["failed"], false, "{node}");
    }

    // The status lists every server, masters and replicas; stop stops them all.
    let out = run(redlock(&unused).args(["nodes", "status", "--dir", dir_arg, "--json"]));
    out.expect_code(0);
    let listed: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(listed["servers"], servers.as_str());
    assert_eq!(listed["nodes"].as_array().map(Vec::len), Some(6));
    run(redlock(&unused).args(["nodes", "stop", "--dir", dir_arg])).expect_code(0);
    assert!(!dir.join("nodes.json").exists());

    // A stopped cluster cannot be restarted on new ports: a new start in the same directory
    // forms a new cluster in its place, without the old one's locks.
    let out = run(redlock(&unused).args(["nodes", "start", "--cluster", "--dir", dir_arg]));
    let servers = exported_servers(&out);
    let out = run(redlock(&servers).args(["status", "res", "--json"]));
    out.expect_code(0);
    let status: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(status["held_on"], 0, "{status}");
    run(redlock(&servers).args(["acquire", "res", "--ttl", "30s"])).expect_code(0);
    run(redlock(&unused).args(["nodes", "stop", "--dir", dir_arg])).expect_code(0);
}

#[test]
fn cluster_options_need_cluster() {
    let out = run(redlock(&dead_url()).args(["nodes", "start", "--shards", "3"]));
    out.expect_code(64);
}
