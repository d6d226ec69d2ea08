//! One node against the real `redis-server`: start, faults, `redis-cli`, cleanup, errors.

mod common;

use std::io;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::thread;
use std::time::Duration;

use common::{dies_within, is_alive, raw_ping, reap};
use redquorum_nodes::{LaunchError, NodeSpec, Persistence, RedisBinary, RedisNode};

/// Generous: these only bound how long a failing test hangs, they are not timing assertions.
const DEATH: Duration = Duration::from_secs(10);

#[test]
fn a_started_node_answers_ping() {
    let node = RedisNode::start(NodeSpec::new()).unwrap();
    assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
    assert_eq!(node.url(), format!("redis://127.0.0.1:{}", node.port()));
    assert!(node.dir().is_absolute());
    assert!(node.dir().join("redis.log").is_file());
    assert!(raw_ping(node.port(), DEATH).unwrap().starts_with("+PONG"));
}

#[test]
fn two_nodes_get_different_ports_and_dirs() {
    let a = RedisNode::start(NodeSpec::new()).unwrap();
    let b = RedisNode::start(NodeSpec::new()).unwrap();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    assert_ne!(a.pid(), b.pid());
}

#[test]
fn kill_stops_the_server_and_is_idempotent() {
    let mut node = RedisNode::start(NodeSpec::new()).unwrap();
    let pid = node.pid().unwrap();
    node.kill().unwrap();
    assert!(!node.is_running());
    assert_eq!(node.pid(), None);
    assert!(!is_alive(pid));
    let refused = TcpStream::connect((Ipv4Addr::LOCALHOST, node.port())).unwrap_err();
    assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
    node.kill().unwrap();
    let err = node.cli(&["PING"]).unwrap_err();
    assert!(matches!(err, LaunchError::Cli { .. }), "{err}");
    assert!(matches!(node.pause(), Err(LaunchError::NotRunning { .. })));
}

#[test]
fn restart_keeps_data_with_aof_always_and_restart_empty_loses_it() {
    let mut node = RedisNode::start(NodeSpec::new().persistence(Persistence::AofAlways)).unwrap();
    let port = node.port();
    let first_pid = node.pid();
    assert_eq!(node.cli(&["SET", "resource", "token-1"]).unwrap(), "OK");

    node.restart().unwrap();
    assert_eq!(node.port(), port);
    assert_ne!(node.pid(), first_pid);
    assert_eq!(node.cli(&["GET", "resource"]).unwrap(), "token-1");

    node.restart_empty().unwrap();
    assert_eq!(node.port(), port);
    assert_eq!(node.cli(&["GET", "resource"]).unwrap(), "");
    assert_eq!(node.cli(&["DBSIZE"]).unwrap(), "0");
}

#[test]
fn restart_without_persistence_comes_back_empty() {
    let mut node = RedisNode::start(NodeSpec::new()).unwrap();
    node.cli(&["SET", "k", "v"]).unwrap();
    node.kill().unwrap();
    node.restart().unwrap(); // also works on a node that is not running
    assert_eq!(node.cli(&["EXISTS", "k"]).unwrap(), "0");
}

#[test]
fn pause_stops_answers_and_resume_brings_them_back() {
    let mut node = RedisNode::start(NodeSpec::new()).unwrap();
    node.pause().unwrap();
    assert!(node.is_running(), "a paused server is still running");
    let err = raw_ping(node.port(), Duration::from_millis(300)).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ),
        "{err:?}"
    );
    node.resume().unwrap();
    assert!(raw_ping(node.port(), DEATH).unwrap().starts_with("+PONG"));
    assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
}

#[test]
fn a_paused_node_can_be_killed_and_restarted() {
    let mut node = RedisNode::start(NodeSpec::new()).unwrap();
    let pid = node.pid().unwrap();
    node.pause().unwrap();
    node.restart().unwrap();
    assert!(!is_alive(pid));
    assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
}

#[test]
fn drop_kills_the_server_and_removes_its_temporary_dir() {
    let node = RedisNode::start(NodeSpec::new()).unwrap();
    let pid = node.pid().unwrap();
    let dir = node.dir().to_path_buf();
    drop(node);
    assert!(!is_alive(pid));
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert!(!dir.exists());
}

#[test]
fn drop_of_a_paused_node_kills_it() {
    let mut node = RedisNode::start(NodeSpec::new()).unwrap();
    let pid = node.pid().unwrap();
    node.pause().unwrap();
    drop(node);
    assert!(!is_alive(pid));
}

#[test]
fn a_given_dir_is_used_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("deep").join("node");
    let node = RedisNode::start(NodeSpec::new().dir(&dir)).unwrap();
    assert_eq!(node.dir(), dir);
    assert_eq!(
        node.cli(&["CONFIG", "GET", "dir"]).unwrap(),
        format!("dir\n{}", dir.display())
    );
    drop(node);
    assert!(dir.join("redis.log").is_file());
}

#[test]
fn the_server_dies_with_the_thread_that_started_it() {
    let tmp = tempfile::tempdir().unwrap();
    let start_in_thread = |spec: NodeSpec| {
        thread::spawn(move || {
            let node = RedisNode::start(spec).unwrap();
            let pid = node.pid().unwrap();
            // Leak the node so only the kernel's parent-death signal can stop the server.
            std::mem::forget(node);
            pid
        })
        .join()
        .unwrap()
    };

    let dying = start_in_thread(NodeSpec::new().dir(tmp.path().join("a")));
    assert!(dies_within(dying, DEATH), "pid {dying} outlived its thread");
    reap(dying);

    let surviving = start_in_thread(
        NodeSpec::new()
            .dir(tmp.path().join("b"))
            .die_with_parent(false),
    );
    thread::sleep(Duration::from_millis(200));
    let survived = is_alive(surviving);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(surviving as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
    reap(surviving);
    assert!(
        survived,
        "die_with_parent(false) was killed with its thread"
    );
}

#[test]
fn a_missing_binary_says_how_to_install_it() {
    let err = RedisNode::start(NodeSpec::new().binary("/nonexistent/redis-server")).unwrap_err();
    assert!(
        matches!(
            err,
            LaunchError::BinaryNotFound {
                which: RedisBinary::Server,
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("sudo apt-get install -y redis-server"),
        "{message}"
    );
    assert!(message.contains("REDLOCK_REDIS_SERVER"), "{message}");
    assert!(message.contains("/nonexistent/redis-server"), "{message}");
}

#[test]
fn a_taken_fixed_port_is_reported() {
    let holder = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = holder.local_addr().unwrap().port();
    let err = RedisNode::start(NodeSpec::new().port(port)).unwrap_err();
    assert!(
        matches!(err, LaunchError::PortInUse { port: p } if p == port),
        "{err}"
    );
}

#[test]
fn a_bad_argument_is_reported_with_the_log() {
    let err = RedisNode::start(NodeSpec::new().arg("--no-such-option").arg("x")).unwrap_err();
    let LaunchError::Exited { log_tail, .. } = &err else {
        panic!("expected Exited, got {err:?}");
    };
    assert!(log_tail.contains("no-such-option"), "{err}");
    assert!(!err.to_string().contains('\n'), "one line: {err}");
}

#[test]
fn an_error_reply_is_an_error() {
    let node = RedisNode::start(NodeSpec::new()).unwrap();
    let err = node.cli(&["NO-SUCH-COMMAND"]).unwrap_err();
    assert!(
        matches!(&err, LaunchError::Cli { stderr, .. } if stderr.contains("unknown command")),
        "{err}"
    );
    assert!(!err.to_string().contains('\n'), "one line: {err}");
}

#[test]
fn a_password_is_used_but_never_shown() {
    let mut node = RedisNode::start(NodeSpec::new().arg("--requirepass").arg("hunter2")).unwrap();
    assert!(raw_ping(node.port(), DEATH).unwrap().starts_with("-NOAUTH"));
    assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
    node.restart().unwrap();
    assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
    assert!(!format!("{node:?}").contains("hunter2"));
    let err = node.cli(&["AUTH", "hunter2", "extra"]).unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[test]
fn a_server_that_never_answers_times_out_and_is_killed() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("redis-server");
    // Writes its pid where the test can find it, then never listens.
    std::fs::write(&fake, "#!/bin/sh\necho $$ > \"$0.pid\"\nexec sleep 30\n").unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();

    let spec = NodeSpec::new()
        .binary(&fake)
        .startup_timeout(Duration::from_millis(300));
    let err = RedisNode::start(spec).unwrap_err();
    assert!(matches!(err, LaunchError::NotReady { .. }), "{err}");
    let pid: u32 = std::fs::read_to_string(tmp.path().join("redis-server.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        !is_alive(pid),
        "a server that failed to start was left running"
    );
}

#[test]
fn a_new_server_gets_the_marker_and_an_empty_restart_loses_it() {
    let mut node = RedisNode::start(NodeSpec::new().persistence(Persistence::AofAlways)).unwrap();
    let marker = node.cli(&["GET", redquorum_nodes::MARKER_KEY]).unwrap();
    assert!(marker.starts_with("fresh-"), "{marker:?}");
    node.restart().unwrap();
    assert_eq!(
        node.cli(&["GET", redquorum_nodes::MARKER_KEY]).unwrap(),
        marker
    );
    node.restart_empty().unwrap();
    assert_eq!(
        node.cli(&["EXISTS", redquorum_nodes::MARKER_KEY]).unwrap(),
        "0"
    );

    let other = RedisNode::start(NodeSpec::new()).unwrap();
    assert_ne!(
        other.cli(&["GET", redquorum_nodes::MARKER_KEY]).unwrap(),
        marker,
        "every server's marker is its own"
    );
    let unmarked = RedisNode::start(NodeSpec::new().marked(false)).unwrap();
    assert_eq!(unmarked.cli(&["DBSIZE"]).unwrap(), "0");
}
