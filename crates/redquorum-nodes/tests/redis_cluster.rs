//! A real Redis Cluster: formed from cluster-enabled nodes, every slot served, keys redirected to
//! their shard, and a shard's replica taking over, by force or when its master dies.

mod common;

use std::fs;

use redquorum_nodes::{LaunchError, NodeSpec, PID_FILE, RedisCluster};

/// The keys' owner, and another master that must redirect them.
fn owner_and_other(cluster: &mut RedisCluster, key: &str) -> (usize, usize) {
    let owner = cluster.owner_of(key).unwrap();
    let other = (0..3).find(|m| *m != owner).unwrap();
    (owner, other)
}

#[test]
fn three_masters_with_a_replica_each_serve_every_slot_and_redirect_keys() {
    let mut cluster = RedisCluster::start(3, 1, NodeSpec::new()).unwrap();
    assert_eq!(cluster.len(), 6);
    for i in 0..6 {
        let info = cluster.node(i).cli(&["CLUSTER", "INFO"]).unwrap();
        assert!(info.contains("cluster_state:ok"), "node {i}: {info}");
        assert!(
            info.contains("cluster_slots_assigned:16384"),
            "node {i}: {info}"
        );
        let role = cluster.node(i).cli(&["ROLE"]).unwrap();
        let expected = if i < 3 { "master" } else { "slave" };
        assert!(role.starts_with(expected), "node {i}: {role}");
    }
    let (owner, other) = owner_and_other(&mut cluster, "lock:1");
    assert_eq!(
        cluster.node(owner).cli(&["SET", "lock:1", "v"]).unwrap(),
        "OK"
    );
    // Any other master answers MOVED with the slot and the owner's address.
    let moved = cluster.node(other).cli(&["GET", "lock:1"]).unwrap_err();
    let port = cluster.node(owner).port();
    assert!(
        matches!(&moved, LaunchError::Cli { stderr, .. }
            if stderr.contains("MOVED") && stderr.contains(&port.to_string())),
        "{moved}"
    );
}

#[test]
fn a_forced_failover_promotes_the_replica_with_the_data_it_had() {
    let mut cluster = RedisCluster::start(3, 1, NodeSpec::new()).unwrap();
    let (owner, _) = owner_and_other(&mut cluster, "lock:1");
    assert_eq!(
        cluster.node(owner).cli(&["SET", "lock:1", "v"]).unwrap(),
        "OK"
    );
    // Acknowledged by the master's replica before the failover.
    cluster.wait_for_replication(owner).unwrap();
    let replica = 3 + owner;
    cluster.failover(replica).unwrap();
    assert_eq!(cluster.owner_of("lock:1").unwrap(), replica);
    assert_eq!(cluster.node(replica).cli(&["GET", "lock:1"]).unwrap(), "v");
    let demoted = cluster.node(owner).cli(&["ROLE"]).unwrap();
    assert!(demoted.starts_with("slave"), "{demoted}");
}

#[test]
fn a_killed_master_is_replaced_by_its_replica() {
    let mut cluster = RedisCluster::start(3, 1, NodeSpec::new()).unwrap();
    let (owner, _) = owner_and_other(&mut cluster, "lock:1");
    cluster.node(owner).kill().unwrap();
    cluster.wait_until_ok().unwrap();
    assert_eq!(cluster.owner_of("lock:1").unwrap(), 3 + owner);
}

#[test]
fn a_cluster_needs_a_master() {
    assert!(matches!(
        RedisCluster::start(0, 1, NodeSpec::new()),
        Err(LaunchError::InvalidSpec(_))
    ));
}

#[test]
fn a_directory_with_an_earlier_clusters_state_is_refused_and_nothing_is_left_running() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = || NodeSpec::new().dir(tmp.path()).detached(true);
    let mut first = RedisCluster::start(1, 1, spec()).unwrap();
    let first_pids: Vec<u32> = (0..2).map(|i| first.node(i).pid().unwrap()).collect();
    for i in 0..2 {
        first.node(i).kill().unwrap();
    }
    drop(first);

    // Each node's nodes.conf still names the other: the new nodes cannot form a new cluster.
    let refused = RedisCluster::start(1, 1, spec()).unwrap_err();
    assert!(
        matches!(&refused, LaunchError::InvalidSpec(m) if m.contains("earlier cluster")),
        "{refused}"
    );
    // Detached nodes outlive their handles: the refused start must have stopped its own.
    for i in 0..2 {
        let pid_file = tmp.path().join(format!("node-{i}")).join(PID_FILE);
        let pid: u32 = fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(!first_pids.contains(&pid), "node {i} was not started again");
        assert!(
            !common::is_alive(pid),
            "node {i} of the refused start still runs"
        );
    }
}
