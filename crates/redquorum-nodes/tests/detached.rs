//! Detached nodes: they survive their `RedisNode`, and `stop_detached` stops them by pid file.

mod common;

use std::fs;
use std::path::Path;
use std::process::Command;

use common::{is_alive, reap};
use redquorum_nodes::{LaunchError, NodeSpec, PID_FILE, RedisNode, detached_pid, stop_detached};

#[test]
fn a_detached_node_survives_drop_and_stop_detached_stops_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("node");
    let node = RedisNode::start(NodeSpec::new().dir(&dir).detached(true)).unwrap();
    let (pid, port) = (node.pid().unwrap(), node.port());
    assert_eq!(
        fs::read_to_string(dir.join(PID_FILE)).unwrap().trim(),
        pid.to_string()
    );
    drop(node);

    assert!(is_alive(pid), "a detached node was killed on drop");
    assert_eq!(detached_pid(&dir, port).unwrap(), Some(pid));
    assert_eq!(
        detached_pid(&dir, port + 1).unwrap(),
        None,
        "wrong port must not match"
    );

    assert!(stop_detached(&dir, port).unwrap());
    reap(pid); // it was our child after all
    assert!(!is_alive(pid));
    assert!(!dir.join(PID_FILE).exists());
    assert!(!stop_detached(&dir, port).unwrap());
}

/// Set for the helper process of `a_detached_node_outlives_the_process_that_started_it`.
const HELPER_DIR: &str = "REDLOCK_NODES_TEST_DETACHED_DIR";

/// Starts a detached node and reports its port. Run normally, it checks that the node answers
/// and stops it; run as a separate process by the test below (with `HELPER_DIR` set), it leaves
/// the node running in that dir when the process exits.
#[test]
fn start_detached_and_exit() {
    match std::env::var_os(HELPER_DIR) {
        Some(dir) => {
            let node = RedisNode::start(NodeSpec::new().dir(&dir).detached(true)).unwrap();
            fs::write(Path::new(&dir).join("port"), node.port().to_string()).unwrap();
        }
        None => {
            let tmp = tempfile::tempdir().unwrap();
            let node = RedisNode::start(NodeSpec::new().dir(tmp.path()).detached(true)).unwrap();
            let port = node.port();
            drop(node); // detached: dropping the handle does not stop it
            assert!(
                common::raw_ping(port, std::time::Duration::from_secs(10))
                    .unwrap()
                    .starts_with("+PONG")
            );
            assert!(stop_detached(tmp.path(), port).unwrap());
        }
    }
}

#[test]
fn a_detached_node_outlives_the_process_that_started_it() {
    let tmp = tempfile::tempdir().unwrap();
    // This test binary again, running only the helper above, which exits after starting the node.
    let helper = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "start_detached_and_exit", "--quiet"])
        .env(HELPER_DIR, tmp.path())
        .output()
        .unwrap();
    assert!(helper.status.success(), "{helper:?}");

    let port: u16 = fs::read_to_string(tmp.path().join("port"))
        .unwrap()
        .parse()
        .unwrap();
    let pid = detached_pid(tmp.path(), port)
        .unwrap()
        .expect("the node died with its starter");
    assert!(is_alive(pid));
    assert!(
        common::raw_ping(port, std::time::Duration::from_secs(10))
            .unwrap()
            .starts_with("+PONG")
    );
    assert!(stop_detached(tmp.path(), port).unwrap());
    assert!(!is_alive(pid));
}

#[test]
fn a_paused_detached_node_is_stopped_too() {
    let tmp = tempfile::tempdir().unwrap();
    let mut node = RedisNode::start(NodeSpec::new().dir(tmp.path()).detached(true)).unwrap();
    node.pause().unwrap();
    assert!(stop_detached(node.dir(), node.port()).unwrap());
    assert!(!node.is_running());
}

#[test]
fn a_detached_node_without_dir_keeps_its_temporary_dir() {
    let mut node = RedisNode::start(NodeSpec::new().detached(true)).unwrap();
    let dir = node.dir().to_path_buf();
    node.kill().unwrap();
    drop(node);
    assert!(dir.join("redis.log").is_file());
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_reused_pid_is_never_signalled() {
    let tmp = tempfile::tempdir().unwrap();
    // Our own pid: alive, but not a redis-server.
    fs::write(
        tmp.path().join(PID_FILE),
        format!("{}\n", std::process::id()),
    )
    .unwrap();
    assert_eq!(detached_pid(tmp.path(), 6379).unwrap(), None);
    assert!(!stop_detached(tmp.path(), 6379).unwrap());
}

#[test]
fn missing_and_bad_pid_files() {
    let tmp = tempfile::tempdir().unwrap();
    assert!(!stop_detached(tmp.path(), 6379).unwrap());
    fs::write(tmp.path().join(PID_FILE), "not a pid").unwrap();
    let err = stop_detached(tmp.path(), 6379).unwrap_err();
    assert!(matches!(err, LaunchError::BadPidFile { .. }), "{err}");
}
