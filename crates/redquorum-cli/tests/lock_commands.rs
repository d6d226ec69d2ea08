//! `acquire`, `status`, `extend` and `release` as separate processes, the way scripts use them.

mod common;

use common::{cluster, dead_url, redlock, run};
use serde_json::Value;

fn json(text: &str) -> Value {
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {text:?}"))
}

#[test]
fn acquire_status_extend_release_round_trip_in_json() {
    let cluster = cluster(3);
    let servers = cluster.servers();

    let out = run(redlock(&servers).args(["acquire", "job", "--ttl", "30s", "--json"]));
    out.expect_code(0);
    assert_eq!(out.stdout.lines().count(), 1, "{out:#?}");
    let acquired = json(&out.stdout);
    assert_eq!(acquired["resource"], "job");
    let value = acquired["value"].as_str().expect("value").to_owned();
    assert_eq!(value.len(), 40);
    let validity = acquired["validity_ms"].as_u64().expect("validity_ms");
    assert!(validity > 0 && validity <= 30_000, "{acquired}");
    assert_eq!(acquired["ttl_ms"], 30_000);
    let fence = acquired["fence"].as_u64().expect("a numeric fence");
    assert!(fence > 0, "{acquired}");

    // The process has exited: the lock must still be held, everywhere, by that value.
    let out = run(redlock(&servers).args(["status", "job", "--json"]));
    out.expect_code(0);
    let status = json(&out.stdout);
    assert_eq!(status["holder"], value.as_str(), "{status}");
    assert_eq!(status["held_on"], 3);
    assert_eq!(status["quorum"], 2);
    assert_eq!(status["reachable"], 3);
    assert_eq!(status["quarantined"], 0);
    let nodes = status["nodes"].as_array().expect("nodes");
    assert_eq!(nodes.len(), 3);
    for node in nodes {
        assert_eq!(node["state"], "held", "{node}");
        assert_eq!(node["value"], value.as_str());
        assert_eq!(node["reachable"], true);
        // Present, and null: AOF with fsync always is trusted at once.
        assert_eq!(node.get("quarantined_ms"), Some(&Value::Null), "{node}");
        let pttl = node["pttl_ms"].as_u64().expect("pttl_ms");
        assert!(pttl > 0 && pttl <= 30_000, "{node}");
    }

    let out = run(redlock(&servers).args(["extend", "job", &value, "--ttl", "50s", "--json"]));
    out.expect_code(0);
    let extended = json(&out.stdout);
    assert!(extended["validity_ms"].as_u64().expect("validity_ms") > 30_000);
    let status = json(&run(redlock(&servers).args(["status", "job", "--json"])).stdout);
    assert!(status["nodes"][0]["pttl_ms"].as_u64().expect("pttl_ms") > 30_000);

    let out = run(redlock(&servers).args(["release", "job", &value, "--json"]));
    out.expect_code(0);
    let released = json(&out.stdout);
    assert_eq!(released["released"], true);
    assert_eq!(released["confirmed"], 3);

    let status = json(&run(redlock(&servers).args(["status", "job", "--json"])).stdout);
    assert_eq!(status["holder"], Value::Null);
    assert!(
        status["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .all(|n| n["state"] == "free"),
        "{status}"
    );
}

#[test]
fn plain_output_is_the_bare_value_and_a_summary() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    // A generous node timeout: on a loaded machine, the third node's late OK still counts.
    let out =
        run(redlock(&servers).args(["--node-timeout", "2s", "acquire", "job", "--ttl", "30s"]));
    out.expect_code(0);
    let value = out.stdout.trim().to_owned();
    assert!(value.len() == 40 && value.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(out.stderr.is_empty(), "{out:#?}");

    let out = run(redlock(&servers).args(["status", "job"]));
    out.expect_code(0);
    let last = out.stdout.lines().last().expect("summary line");
    assert_eq!(last, format!("held by {value} on 3/3 nodes (quorum 2)"));
    assert_eq!(out.stdout.lines().count(), 4, "{out:#?}");
}

#[test]
fn fences_grow_with_each_acquisition_and_are_null_without_fencing() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let mut last = 0;
    for _ in 0..2 {
        let out = run(redlock(&servers).args(["acquire", "job", "--ttl", "10s", "--json"]));
        out.expect_code(0);
        let acquired = json(&out.stdout);
        let fence = acquired["fence"].as_u64().expect("a numeric fence");
        assert!(fence > last, "{fence} after {last}");
        last = fence;
        let value = acquired["value"].as_str().expect("value");
        run(redlock(&servers).args(["release", "job", value])).expect_code(0);
    }

    let out =
        run(redlock(&servers).args(["--no-fencing", "acquire", "job", "--ttl", "10s", "--json"]));
    out.expect_code(0);
    let acquired = json(&out.stdout);
    assert_eq!(acquired.get("fence"), Some(&Value::Null), "{acquired}");
}

#[test]
fn max_ttl_can_be_raised_for_longer_locks() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let out = run(redlock(&servers).args(["acquire", "job", "--ttl", "90s"]));
    out.expect_code(64);
    out.one_line_error("raise --max-ttl");
    let out = run(redlock(&servers).args([
        "--max-ttl",
        "2m",
        "acquire",
        "job",
        "--ttl",
        "90s",
        "--json",
    ]));
    out.expect_code(0);
    let value = json(&out.stdout)["value"]
        .as_str()
        .expect("value")
        .to_owned();
    let out = run(redlock(&servers)
        .env("REDLOCK_MAX_TTL", "2m")
        .args(["extend", "job", &value, "--ttl", "2m"]));
    out.expect_code(0);
}

#[test]
fn a_busy_resource_is_not_acquired_and_says_busy() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    run(redlock(&servers).args(["acquire", "job", "--ttl", "30s"])).expect_code(0);
    let out = run(redlock(&servers).args(["acquire", "job", "--ttl", "30s"]));
    out.expect_code(75);
    out.one_line_error("busy");
    assert!(out.stdout.is_empty());

    // --wait retries, and still gives up with 75 while the holder keeps it.
    let out = run(redlock(&servers).args(["acquire", "job", "--ttl", "30s", "--wait", "300ms"]));
    out.expect_code(75);
    out.one_line_error("busy");
}

/// A script can tell a held lock from an outage: the same single attempt exits 75 against a lock
/// someone else holds, and 69 against servers that are down (both used to be 75).
#[test]
fn one_attempt_is_75_when_the_lock_is_busy_and_69_when_the_servers_are_down() {
    let cluster = cluster(3);
    let up = cluster.servers();
    let down = format!("{},{},{}", dead_url(), dead_url(), dead_url());
    run(redlock(&up).args(["acquire", "held", "--ttl", "30s"])).expect_code(0);
    for args in [
        &["acquire", "held", "--ttl", "10s", "--wait", "0s"][..],
        &["run", "held", "--no-wait", "--", "true"],
    ] {
        let busy = run(redlock(&up).args(args));
        assert_eq!(busy.code(), 75, "{args:?}: {busy:#?}");
        busy.one_line_error("is busy, held by someone else");
        let unavailable = run(redlock(&down).args(args));
        assert_eq!(unavailable.code(), 69, "{args:?}: {unavailable:#?}");
        let line = unavailable.one_line_error("servers unreachable");
        assert!(!line.contains("busy"), "{line}");
    }
}

#[test]
fn wait_gets_the_lock_once_it_expires() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    run(redlock(&servers).args(["acquire", "job", "--ttl", "1s"])).expect_code(0);
    let out = run(redlock(&servers).args(["acquire", "job", "--ttl", "30s", "--wait", "30s"]));
    out.expect_code(0);
}

#[test]
fn release_and_extend_of_a_lock_not_held_with_that_value_fail_with_1() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let value = run(redlock(&servers).args(["acquire", "job", "--ttl", "30s"]))
        .stdout
        .trim()
        .to_owned();

    let out = run(redlock(&servers).args(["release", "job", "not-the-value"]));
    out.expect_code(1);
    out.one_line_error("not held with value");
    let out = run(redlock(&servers).args(["extend", "job", "not-the-value", "--ttl", "1m"]));
    out.expect_code(1);
    out.one_line_error("not held");
    let out = run(redlock(&servers).args(["release", "other", &value, "--json"]));
    out.expect_code(1);
    assert_eq!(json(&out.stdout)["released"], false);

    // The right value still works, once; a second release finds nothing.
    run(redlock(&servers).args(["release", "job", &value])).expect_code(0);
    let out = run(redlock(&servers).args(["release", "job", &value]));
    out.expect_code(1);
    out.one_line_error("released on 0 of 3 nodes");
}

#[test]
fn a_key_of_another_type_is_reported_as_not_a_lock() {
    let mut cluster = cluster(3);
    for i in 0..3 {
        cluster.node(i).cli(&["HSET", "job", "f", "v"]).unwrap();
    }
    let servers = cluster.servers();
    let out = run(redlock(&servers).args(["acquire", "job", "--ttl", "30s"]));
    out.expect_code(65);
    out.one_line_error("another Redis type");
    let out = run(redlock(&servers).args(["run", "job", "--no-wait", "--", "true"]));
    out.expect_code(65);
    out.one_line_error("another Redis type");
    let out = run(redlock(&servers).args(["release", "job", "v"]));
    out.expect_code(65);
    out.one_line_error("WRONGTYPE");

    let out = run(redlock(&servers).args(["status", "job", "--json"]));
    out.expect_code(0);
    let status = json(&out.stdout);
    assert_eq!(status["nodes"][0]["state"], "other_type");
    assert_eq!(status["nodes"][0]["type"], "hash");
    assert_eq!(status["nodes"][0]["pttl_ms"], Value::Null);
    assert!(status["summary"].as_str().unwrap().contains("not a lock"));
}

#[test]
fn status_with_a_node_down_still_answers_and_without_a_quorum_exits_69() {
    let mut cluster = cluster(3);
    let servers = cluster.servers();
    // The lock must reach all three nodes, so that it outlives one of them.
    let value =
        run(redlock(&servers).args(["--node-timeout", "2s", "acquire", "job", "--ttl", "30s"]))
            .stdout
            .trim()
            .to_owned();
    cluster.node(0).kill().unwrap();
    let out = run(redlock(&servers).args(["status", "job", "--json"]));
    out.expect_code(0);
    let status = json(&out.stdout);
    assert_eq!(status["holder"], value.as_str());
    assert_eq!(status["reachable"], 2);
    assert_eq!(status["nodes"][0]["state"], "unavailable");
    assert_eq!(status["nodes"][0]["reachable"], false);

    cluster.node(1).kill().unwrap();
    let out = run(redlock(&servers).args(["status", "job"]));
    out.expect_code(69);
    out.one_line_error("only 1 of 3 servers answered");
    assert!(out.stdout.contains("unknown"), "{out:#?}");
}

#[test]
fn release_with_nodes_down_that_could_have_held_it_exits_69() {
    let mut cluster = cluster(3);
    let servers = cluster.servers();
    let value = run(redlock(&servers).args(["acquire", "job", "--ttl", "30s"]))
        .stdout
        .trim()
        .to_owned();
    cluster.node(0).kill().unwrap();
    cluster.node(1).kill().unwrap();
    let out = run(redlock(&servers).args(["release", "job", &value]));
    out.expect_code(69);
    out.one_line_error("could not confirm the release");
}

#[test]
fn verbose_shows_the_library_spans_and_every_nodes_reply_on_stderr_only() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let quiet = run(redlock(&servers).args(["acquire", "quiet", "--ttl", "30s"]));
    quiet.expect_code(0);
    assert_eq!(quiet.stderr, "", "no -v: nothing on stderr");

    let out = run(redlock(&servers).args(["-v", "acquire", "job", "--ttl", "30s"]));
    out.expect_code(0);
    // stdout stays the bare value, for scripts.
    assert_eq!(out.stdout.trim().len(), 40, "{out:#?}");
    let round = out
        .stderr
        .lines()
        .find(|l| l.contains("acquire{resource=job") && l.contains("request=\"acquire\""))
        .unwrap_or_else(|| panic!("an acquisition round inside its span: {out:#?}"));
    // Every node is named with its reply; a quorum granted (the third may still be on its way).
    for node in cluster.iter() {
        assert!(
            round.contains(&format!("127.0.0.1:{}=", node.port())),
            "node {} named: {round}",
            node.port()
        );
    }
    assert!(round.matches("=granted").count() >= 2, "{round}");
    assert!(
        out.stderr.contains("time.busy"),
        "the span's timing on close: {out:#?}"
    );
    assert!(
        !out.stderr.contains("attempt{"),
        "attempts only with -vv: {out:#?}"
    );

    let out = run(redlock(&servers).args(["-vv", "acquire", "other", "--ttl", "30s"]));
    out.expect_code(0);
    assert!(out.stderr.contains("attempt n=1"), "{out:#?}");
}

/// With a lock-delay, a release that comes after the lock's validity is not one: exit 2 with one
/// line that says so, and the lock stays unavailable (another process's `acquire --wait 0s` is
/// refused). Before the fix, it printed "released on 3 of 3 nodes", exited 0, and the lock was
/// free 19 s early.
#[test]
fn a_release_after_the_validity_under_a_lock_delay_is_left_to_the_delay_and_says_so() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let delayed = |args: &[&str]| {
        let mut cmd = redlock(&servers);
        cmd.args(["--lock-delay", "20s"]).args(args);
        cmd
    };
    let out = run(&mut delayed(&["acquire", "late", "--ttl", "1s"]));
    out.expect_code(0);
    let value = out.stdout.trim().to_owned();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = run(&mut delayed(&["release", "late", &value]));
    out.expect_code(2);
    out.one_line_error("had expired before the release; left to its lock-delay");
    let out = run(&mut delayed(&[
        "acquire", "late", "--ttl", "1s", "--wait", "0s",
    ]));
    out.expect_code(75);
    out.one_line_error("busy");
}

/// An `extend` from a shell without `--lock-delay` keeps the delay of the process that took the
/// lock (engine invariant 9): every node's key still lives the TTL plus the holder's 5 s, and
/// another process's `acquire --wait 0s` is refused after the new deadline. Before the fix, the
/// keys were left with the TTL alone (PTTL 2981 of 3 s) and the lock was free 0.2 s after it.
#[test]
fn an_extend_without_lock_delay_keeps_the_holders_delay() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let out = run(redlock(&servers).args(["--lock-delay", "5s", "acquire", "job", "--ttl", "3s"]));
    out.expect_code(0);
    let value = out.stdout.trim().to_owned();
    let out = run(redlock(&servers).args(["extend", "job", &value, "--ttl", "2s", "--json"]));
    out.expect_code(0);
    let status = json(&run(redlock(&servers).args(["status", "job", "--json"])).stdout);
    for node in status["nodes"].as_array().expect("nodes") {
        let pttl = node["pttl_ms"].as_u64().expect("pttl_ms");
        assert!(
            pttl > 4_500 && pttl <= 7_000,
            "TTL plus the holder's delay: {node}"
        );
    }
    // Past the new deadline (2 s), inside the delay: nobody gets the lock.
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let out = run(redlock(&servers).args(["acquire", "job", "--ttl", "1s", "--wait", "0s"]));
    out.expect_code(75);
    out.one_line_error("busy");
}

/// A late `extend` is no extension (engine invariant 10): after the holder's deadline it exits 1
/// saying the lock is left to its lock-delay, and another process still cannot take it. Found by
/// review: the extension used to revive the lock, and a `release` after it freed it at once.
#[test]
fn a_late_extend_does_not_revive_a_lock_left_to_its_delay() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let out =
        run(redlock(&servers).args(["--lock-delay", "20s", "acquire", "late", "--ttl", "1s"]));
    out.expect_code(0);
    let value = out.stdout.trim().to_owned();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let out = run(redlock(&servers).args(["extend", "late", &value, "--ttl", "5s"]));
    out.expect_code(1);
    out.one_line_error("had expired before the extension; it is left to its lock-delay");
    let out = run(redlock(&servers).args(["release", "late", &value]));
    out.expect_code(2);
    let out = run(redlock(&servers).args(["acquire", "late", "--ttl", "1s", "--wait", "0s"]));
    out.expect_code(75);
}

/// `locked`: 1 and `free` for a free resource, 0 and the holder's value while held, 69 when the
/// servers do not answer (never "free" for an outage).
#[test]
fn locked_answers_in_its_exit_status_and_never_calls_an_outage_free() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let out = run(redlock(&servers).args(["locked", "job"]));
    out.expect_code(1);
    assert_eq!(out.stdout.trim(), "free", "{out:#?}");
    let value = run(redlock(&servers).args(["acquire", "job", "--ttl", "30s"]));
    value.expect_code(0);
    let value = value.stdout.trim().to_owned();
    let out = run(redlock(&servers).args(["locked", "job"]));
    out.expect_code(0);
    assert!(
        out.stdout
            .starts_with(&format!("held by {value} for at least ")),
        "{out:#?}"
    );
    let out = run(redlock(&servers).args(["locked", "job", "--json"]));
    out.expect_code(0);
    let json: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(json["locked"], true, "{json}");
    assert_eq!(json["value"], value.as_str(), "{json}");
    assert!(
        json["remaining_ms"].as_u64().is_some_and(|ms| ms <= 30_000),
        "{json}"
    );
    run(redlock(&servers).args(["release", "job", &value])).expect_code(0);
    run(redlock(&servers).args(["locked", "job"])).expect_code(1);
    let dead = format!("{},{},{}", dead_url(), dead_url(), dead_url());
    run(redlock(&dead).args(["locked", "job"]))
        .expect_code(69)
        .one_line_error("cannot tell whether \"job\" is locked");
}
