//! A primary with replicas behind Redis Sentinel: it forms, every sentinel names the same
//! primary, and the sentinels fail it over when it dies or when asked.

mod common;

use redquorum_nodes::{LaunchError, NodeSpec, SentinelGroup};

#[test]
fn a_killed_primary_is_replaced_by_its_replica_and_comes_back_as_a_replica() {
    let mut group = SentinelGroup::start(1, 3, NodeSpec::new()).expect("start the group");
    let url = group.url();
    assert!(
        url.starts_with("redis+sentinel://127.0.0.1:") && url.ends_with("/redquorum"),
        "{url}"
    );
    assert_eq!(url.matches(',').count(), 2, "three sentinels: {url}");
    assert_eq!(group.primary().expect("one primary"), 0);
    // The marker and every write reach the replica.
    group.data_node(0).cli(&["SET", "k", "v"]).expect("SET");
    group
        .data_node(0)
        .cli(&["WAIT", "1", "5000"])
        .expect("WAIT");
    assert_eq!(group.data_node(1).cli(&["GET", "k"]).expect("GET"), "v");
    assert!(
        !group
            .data_node(1)
            .cli(&["GET", "redlock-node-marker"])
            .expect("GET")
            .is_empty(),
        "the primary's marker, replicated"
    );

    group.data_node(0).kill().expect("kill the primary");
    assert_eq!(group.await_new_primary(0).expect("a failover"), 1);
    assert_eq!(group.data_node(1).cli(&["GET", "k"]).expect("GET"), "v");

    // Back, it is made a replica of the new primary; asked, the sentinels fail over to it.
    group
        .data_node(0)
        .restart()
        .expect("restart the old primary");
    assert_eq!(group.failover().expect("a failover on request"), 0);
}

#[test]
fn a_group_needs_a_sentinel() {
    assert!(matches!(
        SentinelGroup::start(1, 0, NodeSpec::new()),
        Err(LaunchError::InvalidSpec(_))
    ));
}
