//! Several nodes started together.

mod common;

use std::collections::HashSet;

use common::{is_alive, raw_ping};
use redquorum_nodes::{Cluster, LaunchError, NodeSpec};

#[test]
fn nodes_get_their_own_ports_and_all_answer() {
    let cluster = Cluster::start(5, NodeSpec::new()).unwrap();
    assert_eq!(cluster.len(), 5);
    assert!(!cluster.is_empty());
    let ports: HashSet<_> = cluster.iter().map(|n| n.port()).collect();
    assert_eq!(ports.len(), 5);
    let dirs: HashSet<_> = cluster.iter().map(|n| n.dir().to_path_buf()).collect();
    assert_eq!(dirs.len(), 5);
    for node in &cluster {
        assert_eq!(node.cli(&["PING"]).unwrap(), "PONG");
    }
    assert_eq!(cluster.servers(), cluster.urls().join(","));
    assert!(
        cluster
            .urls()
            .iter()
            .all(|u| u.starts_with("redis://127.0.0.1:"))
    );
}

#[test]
fn killing_one_node_leaves_the_others_up() {
    let mut cluster = Cluster::start(3, NodeSpec::new()).unwrap();
    cluster.node(1).kill().unwrap();
    assert!(!cluster.node(1).is_running());
    assert!(raw_ping(cluster.node(0).port(), std::time::Duration::from_secs(5)).is_ok());
    assert!(cluster.node(2).is_running());
}

#[test]
fn a_given_dir_gets_one_subdirectory_per_node() {
    let tmp = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(2, NodeSpec::new().dir(tmp.path())).unwrap();
    for (i, node) in cluster.iter().enumerate() {
        assert_eq!(node.dir(), tmp.path().join(format!("node-{i}")));
    }
}

#[test]
fn dropping_the_cluster_kills_every_node() {
    let mut cluster = Cluster::start(3, NodeSpec::new()).unwrap();
    let pids: Vec<u32> = cluster.iter_mut().map(|n| n.pid().unwrap()).collect();
    drop(cluster);
    for pid in pids {
        assert!(!is_alive(pid), "pid {pid} survived");
    }
}

#[test]
fn an_empty_cluster_is_refused() {
    let err = Cluster::start(0, NodeSpec::new()).unwrap_err();
    assert!(matches!(err, LaunchError::InvalidSpec(_)), "{err}");
}

#[test]
fn ports_past_65535_are_refused() {
    let err = Cluster::start(3, NodeSpec::new().port(65534)).unwrap_err();
    assert!(matches!(err, LaunchError::InvalidSpec(_)), "{err}");
}

#[test]
fn a_failing_node_takes_the_others_down() {
    // Every node gets the bad argument, so the first to be waited for fails; all must be killed.
    let err = Cluster::start(2, NodeSpec::new().arg("--no-such-option").arg("x")).unwrap_err();
    assert!(matches!(err, LaunchError::Exited { .. }), "{err}");
}
