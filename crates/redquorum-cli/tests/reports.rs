//! What the CLI reports when the servers' state is not simple: a leader whose majority includes
//! a silent node, and a plain lock refused by a read-write lock's readers.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{cluster, eventually, redlock, run};

/// `redlock leader` help: "1 nobody leads (no value on a majority ...); 69 too few servers
/// answered to tell". A leader holds its key on nodes 0 and 2 (a majority: its lock is valid);
/// node 2 does not answer. Nodes 0 and 1 answer (a quorum of answers), but they disagree, and
/// the silent node may complete the majority (here it does): the CLI cannot tell, yet it says
/// "nobody leads" (exit 1).
#[test]
fn leader_does_not_say_nobody_leads_when_a_silent_node_could_make_the_majority() {
    let mut cluster = cluster(3);
    let servers = cluster.servers();
    let value = "0123456789abcdef0123456789abcdef01234567:host-a";
    for i in [0, 2] {
        cluster
            .node(i)
            .cli(&["SET", "svc", value, "PX", "60000"])
            .unwrap();
    }
    run(redlock(&servers).args(["leader", "svc"])).expect_code(0);
    cluster.node(2).pause().unwrap();
    let out = run(redlock(&servers).args(["leader", "svc"]));
    cluster.node(2).resume().unwrap();
    assert_ne!(
        out.code(),
        1,
        "host-a holds a majority (nodes 0 and 2), node 2 is silent: {out:#?}"
    );
}

/// `run --help`: "Without either [--shared/--exclusive], the plain lock also excludes readers
/// and is excluded by them". Exit 65 means "the resource exists with another Redis type
/// (WRONGTYPE): it is not a lock". A plain `run` that waits while readers hold the read-write
/// lock of the same name is busy (75), yet it ends with 65 and "not a lock".
#[test]
fn a_plain_run_refused_by_readers_is_busy_not_wrong_type() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let mut reader = redlock(&servers)
        .args(["run", "--shared", "cfg", "--ttl", "10s", "--", "sleep", "8"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first = cluster.iter().next().unwrap();
    assert!(eventually(Duration::from_secs(20), || {
        first.cli(&["TYPE", "cfg"]).unwrap() == "zset"
    }));
    let out = run(redlock(&servers).args(["run", "cfg", "--wait", "1s", "--", "true"]));
    let _ = reader.kill();
    let _ = reader.wait();
    assert_eq!(out.code(), 75, "busy, as readers hold it: {out:#?}");
}
