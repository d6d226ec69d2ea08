//! A node that has just started without persistence is quarantined: `status` shows it, and
//! acquisitions say why they fail instead of calling the resource busy.

mod common;

use common::{redlock, run};
use redquorum_nodes::{NodeSpec, RedisNode};
use serde_json::Value;

/// One fresh node with no persistence (a restart would lose its keys), so it is quarantined for
/// `--max-ttl` after it started; 30 s leaves the test plenty of time on a slow machine.
fn volatile_node() -> RedisNode {
    RedisNode::start(NodeSpec::new()).expect("start redis-server")
}

const MAX_TTL: [&str; 2] = ["--max-ttl", "30s"];

#[test]
fn a_fresh_volatile_node_shows_as_quarantined_and_cannot_vote() {
    let node = volatile_node();
    let servers = node.url();

    let out = run(redlock(&servers)
        .args(MAX_TTL)
        .args(["status", "r", "--json"]));
    // Nobody can tell who holds the resource while the only node is quarantined.
    out.expect_code(69);
    out.one_line_error("1 node is quarantined (");
    assert!(
        out.stderr.contains("started") && out.stderr.contains("s left"),
        "{out:#?}"
    );
    let status: Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(status["quarantined"], 1, "{status}");
    assert_eq!(status["reachable"], 1, "{status}");
    let left = status["nodes"][0]["quarantined_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("quarantined_ms: {status}"));
    assert!(left > 0 && left <= 30_000, "{status}");
    let summary = status["summary"].as_str().expect("summary");
    assert!(summary.ends_with(", 1 quarantined"), "{summary}");

    let out = run(redlock(&servers).args(MAX_TTL).args(["status", "r"]));
    out.expect_code(69);
    let first = out.stdout.lines().next().expect("a node line");
    assert!(
        first.contains("free; marker present; quarantined: started"),
        "{out:#?}"
    );

    for args in [
        &["acquire", "r", "--ttl", "10s"][..],
        &["run", "r", "--no-wait", "--", "true"],
    ] {
        let out = run(redlock(&servers).args(MAX_TTL).args(args));
        // Not busy (75): the servers are the reason, as for `status` above.
        assert_eq!(out.code(), 69, "{args:?}: {out:#?}");
        let line = out.one_line_error("1 node is quarantined (");
        assert!(!line.contains("busy"), "{line}");
    }
    let out = run(redlock(&servers)
        .args(MAX_TTL)
        .args(["bench", "--duration", "1s"]));
    out.expect_code(69);
    out.one_line_error("0 of 1 nodes can vote");

    // Plain Redlock counts it: the lock is taken, and status sees no quarantine.
    let out = run(redlock(&servers).args(["--no-quarantine", "acquire", "r", "--ttl", "10s"]));
    out.expect_code(0);
    let value = out.stdout.trim().to_owned();
    let out = run(redlock(&servers).args(["--no-quarantine", "status", "r", "--json"]));
    out.expect_code(0);
    let status: Value = serde_json::from_str(out.stdout.trim()).expect("JSON");
    assert_eq!(status["holder"], value.as_str(), "{status}");
    assert_eq!(
        status["nodes"][0]["quarantined_ms"],
        Value::Null,
        "{status}"
    );
}
