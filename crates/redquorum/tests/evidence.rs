//! Trust rests on evidence that a node kept its data, not on its configuration or on a single
//! look at it: a server replaced behind the same address, a durable node that lost its data
//! (`FLUSHALL`, a wiped directory), a flush behind a connection we kept, a connection that
//! silently stops answering. Each test builds the case against real servers and checks that no
//! second client can take a lock that a first client holds.

mod common;

use std::time::Duration;

use common::{PATIENT_NODE_TIMEOUT, cluster};
use redquorum::{Error, Redlock, Reply};
use redquorum_nodes::{Cluster, NodeSpec, RedisNode};

fn client(cluster: &Cluster, max_ttl: Duration) -> Redlock {
    Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .max_ttl(max_ttl)
        .fence_retention(max_ttl * 2)
        .build()
        .expect("valid test configuration")
}

/// The replies of a failed acquisition, and how many were quarantined grants.
fn quarantined_in(err: &Error) -> usize {
    let Error::NotAcquired { failure, .. } = err else {
        panic!("expected NotAcquired, got {err:?}");
    };
    failure
        .replies
        .iter()
        .filter(|r| matches!(r.reply, Reply::Quarantined(_)))
        .count()
}

/// The ids of the clients connected to `node`, other than the `redis-cli` that asks.
fn library_connections(node: &RedisNode) -> Vec<String> {
    let list = node
        .cli(&["CLIENT", "LIST"])
        .expect("redis-cli CLIENT LIST");
    list.lines()
        .filter(|line| !line.contains("cmd=client|list"))
        .filter_map(|line| {
            line.split(' ')
                .next()?
                .strip_prefix("id=")
                .map(str::to_owned)
        })
        .collect()
}

#[test]
fn the_library_and_the_harness_name_the_same_marker_key() {
    assert_eq!(redquorum::MARKER_KEY, redquorum_nodes::MARKER_KEY);
}

/// Item: a server replaced behind the same address (new VM, moved VIP) is quarantined for
/// `max_ttl` from the moment the change is seen, however many times we reconnect meanwhile.
/// The replacement is long-running (its uptime alone would make it trusted) and even shows the
/// old server's marker: only its `run_id` gives it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_server_stays_quarantined_across_reconnections() {
    const MAX_TTL: Duration = Duration::from_secs(8);
    let mut cluster = cluster(3);
    // Two long-running servers without persistence, to be put behind nodes 0 and 1.
    let mut spares: Vec<RedisNode> = (0..2)
        .map(|_| RedisNode::start(NodeSpec::new().marked(false)).expect("start spare"))
        .collect();
    let holder = client(&cluster, MAX_TTL);
    let other = client(&cluster, MAX_TTL);
    other.connect().await;
    // Up for longer than max_ttl: the uptime rule would trust them at once.
    tokio::time::sleep(MAX_TTL + Duration::from_millis(1500)).await;
    let held = holder
        .try_acquire("res", Duration::from_secs(7))
        .await
        .expect("the first client locks");
    for (i, spare) in spares.iter_mut().enumerate() {
        let marker = cluster
            .node(i)
            .cli(&["GET", redquorum::MARKER_KEY])
            .expect("marker");
        spare
            .cli(&["SET", redquorum::MARKER_KEY, &marker])
            .expect("copy marker");
        let port = cluster.node(i).port().to_string();
        cluster.node(i).kill().expect("kill the old server");
        spare
            .cli(&["CONFIG", "SET", "port", &port])
            .expect("move the spare to the old address");
    }
    // The other client notices the new run_ids on reconnecting...
    other.status("res").await;
    other.status("res").await;
    // ...then loses those connections again (a flapping proxy): a second look finds the same
    // new run_ids, which must not end the quarantine.
    for i in 0..2 {
        // The spares answer at the old addresses now.
        cluster
            .node(i)
            .cli(&["CLIENT", "KILL", "TYPE", "normal"])
            .expect("drop client connections");
    }
    other.status("res").await;
    other.status("res").await;
    assert!(held.is_valid(), "the first holder still relies on its lock");
    let err = other
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("the replaced servers do not vote within max_ttl of the change");
    assert_eq!(quarantined_in(&err), 2, "{err}");
    let status = other.status("res").await;
    assert!(
        status[0]
            .quarantine
            .is_some_and(|q| q.left > Duration::from_secs(3)),
        "quarantined for max_ttl from the change: {status:?}"
    );
}

/// Item: a durable-configured node that lost its data (`FLUSHALL` here) does not vote, neither
/// for a client that stayed connected through the loss (the vote's own marker read shows it,
/// with no health check in between), nor for one that connects afterwards (its health check
/// finds the marker gone and writes a new one that vouches only after `max_ttl`), nor for a
/// third that connects after that (it finds the pending marker).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_node_that_lost_its_data_does_not_vote() {
    const MAX_TTL: Duration = Duration::from_secs(15);
    let mut cluster = cluster(3); // AOF with appendfsync always: durable by configuration
    let holder = client(&cluster, MAX_TTL);
    let stayed = client(&cluster, MAX_TTL);
    stayed.connect().await;
    // Without fencing the vote is a plain `SET`, and the marker read is a command of its own.
    let stayed_plain = Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .max_ttl(MAX_TTL)
        .fencing(false)
        .build()
        .expect("valid test configuration");
    stayed_plain.connect().await;
    let held = holder
        .try_acquire("res", Duration::from_secs(12))
        .await
        .expect("the first client locks on all three");
    for i in 0..2 {
        cluster.node(i).cli(&["FLUSHALL"]).expect("FLUSHALL");
    }
    let err = stayed
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("a client connected through the flush sees it in its votes");
    assert_eq!(quarantined_in(&err), 2, "{err}");
    let err = stayed_plain
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("so does one whose votes are plain SETs");
    assert_eq!(quarantined_in(&err), 2, "{err}");

    let newcomer = client(&cluster, MAX_TTL);
    let err = newcomer
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("a client that connects after the flush finds the marker gone");
    assert_eq!(quarantined_in(&err), 2, "{err}");

    let later = client(&cluster, MAX_TTL);
    let err = later
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("a client that never saw the loss finds the marker still pending");
    assert_eq!(quarantined_in(&err), 2, "{err}");
    let status = later.status("res").await;
    assert!(
        status[0]
            .quarantine
            .is_some_and(|q| q.left > Duration::from_secs(5)),
        "{status:?}"
    );
    assert!(held.is_valid(), "the first holder is the only one");
}

/// Item: a durable node restarted with a wiped directory (a new volume) comes back without its
/// marker: quarantined, although its configuration says it cannot lose writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_node_restarted_with_a_wiped_directory_does_not_vote() {
    const MAX_TTL: Duration = Duration::from_secs(15);
    let mut cluster = cluster(3);
    let holder = client(&cluster, MAX_TTL);
    let other = client(&cluster, MAX_TTL);
    let held = holder
        .try_acquire("res", Duration::from_secs(12))
        .await
        .expect("the first client locks on all three");
    for i in 0..2 {
        cluster.node(i).restart_empty().expect("restart empty");
    }
    let err = other
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("the wiped nodes do not vote");
    assert_eq!(quarantined_in(&err), 2, "{err}");
    assert!(held.is_valid());

    // A durable node restarted *with* its data keeps its marker and is trusted at once.
    let mut kept = common::cluster(3);
    let trusting = client(&kept, MAX_TTL);
    trusting.connect().await;
    kept.node(0).restart().expect("restart with data");
    kept.node(1).restart().expect("restart with data");
    trusting.status("res").await; // finds the old connections broken
    let _held = trusting
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect("a durable restart that kept its data votes at once");
}

/// Item: a connection that stops answering (the server stalls, moves, or a firewall drops the
/// flow) is replaced after a few requests given up on, instead of holding the node in `Timeout`
/// for as long as the kernel keeps the flow open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_that_stops_answering_is_replaced() {
    let mut cluster = cluster(3);
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(Duration::from_millis(100))
        .notify(false)
        .build()
        .expect("valid test configuration");
    redlock.connect().await;
    let before = library_connections(cluster.node(0));
    assert_eq!(before.len(), 1, "one connection per node: {before:?}");
    cluster.node(0).pause().expect("pause");
    for i in 0..4 {
        // The two other nodes still give a majority; node 0's requests are given up on.
        let lock = redlock
            .try_acquire(&format!("res-{i}"), Duration::from_secs(5))
            .await
            .expect("two of three answer");
        lock.release().await;
    }
    cluster.node(0).resume().expect("resume");
    let granted = redlock
        .connect()
        .await
        .into_iter()
        .filter(|r| r.reply.is_granted())
        .count();
    assert_eq!(granted, 3, "node 0 answers again");
    let after = library_connections(cluster.node(0));
    assert!(
        !after.contains(&before[0]) && after.len() == 1,
        "the silent connection was replaced by a new one ({before:?} -> {after:?})"
    );
}

/// Item: the health check needs `INFO`; a user who may not run it gets an error naming the
/// permission, not a bare "unreachable". A user who may not run `SCRIPT` still locks (the
/// scripts come by `EVAL`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_health_check_names_the_permission_and_script_is_optional() {
    let mut cluster = cluster(1);
    let port = cluster.node(0).port();
    cluster
        .node(0)
        .cli(&[
            "ACL",
            "SETUSER",
            "noinfo",
            "on",
            ">pw-noinfo",
            "~*",
            "&*",
            "+@all",
            "-info",
        ])
        .expect("ACL SETUSER");
    cluster
        .node(0)
        .cli(&[
            "ACL",
            "SETUSER",
            "noscript",
            "on",
            ">pw-noscript",
            "~*",
            "&*",
            "+@all",
            "-script",
        ])
        .expect("ACL SETUSER");
    let no_info = Redlock::builder([format!("redis://noinfo:pw-noinfo@127.0.0.1:{port}")])
        .build()
        .expect("valid");
    let replies = no_info.connect().await;
    let shown = format!("{}", replies[0].reply);
    assert!(
        shown.contains("+info") && shown.contains("NOPERM"),
        "the missing permission is named: {shown}"
    );
    assert!(
        !shown.contains("pw-noinfo"),
        "no password in errors: {shown}"
    );

    cluster
        .node(0)
        .cli(&[
            "ACL",
            "SETUSER",
            "nomarker",
            "on",
            ">pw-nomarker",
            "~res*",
            "&*",
            "+@all",
        ])
        .expect("ACL SETUSER");
    let no_marker = Redlock::builder([format!("redis://nomarker:pw-nomarker@127.0.0.1:{port}")])
        .build()
        .expect("valid");
    let shown = format!("{}", no_marker.connect().await[0].reply);
    assert!(
        shown.contains("NOPERM") && shown.contains(redquorum::MARKER_KEY),
        "the marker key is named: {shown}"
    );

    let no_script = Redlock::builder([format!("redis://noscript:pw-noscript@127.0.0.1:{port}")])
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid");
    no_script
        .try_acquire("res", Duration::from_secs(5))
        .await
        .expect("locks without SCRIPT")
        .release()
        .await;
}

/// Item: a node that may evict lock keys under memory pressure is flagged in `status`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_may_evict_keys_is_flagged() {
    let evicting = Cluster::start(
        1,
        NodeSpec::new()
            .arg("--maxmemory")
            .arg("64mb")
            .arg("--maxmemory-policy")
            .arg("volatile-lru"),
    )
    .expect("start");
    let status = client(&evicting, Duration::from_secs(60))
        .status("res")
        .await;
    assert!(status[0].may_evict, "{status:?}");
    let plain = cluster(1);
    let status = client(&plain, Duration::from_secs(60)).status("res").await;
    assert!(!status[0].may_evict, "{status:?}");
}

/// The other side of replacing silent connections: a healthy one is kept, however many won
/// rounds leave requests behind (they are dropped unpolled once the release is queued).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_connections_are_kept_through_many_rounds() {
    let cluster = cluster(5);
    // A node that misses a few rounds' deadlines in a row is replaced: a loaded machine must not
    // look like that.
    let redlock = Redlock::builder(cluster.urls())
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .notify(false)
        .build()
        .expect("valid test configuration");
    redlock.connect().await;
    let before: Vec<Vec<String>> = cluster.iter().map(library_connections).collect();
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                for cycle in 0..50 {
                    if let Ok(lock) = redlock
                        .try_acquire(&format!("res:{task}:{cycle}"), Duration::from_secs(5))
                        .await
                    {
                        lock.release().await;
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("task");
    }
    redlock.settle().await;
    let after: Vec<Vec<String>> = cluster.iter().map(library_connections).collect();
    assert_eq!(before, after, "the same connection to every node");
}

/// Durable trust is for a server that restarted with its own disk. A replica promoted in its
/// place (behind the same address) carries the master's marker, by replication, but maybe not
/// its last keys: its configuration vouches for nothing, and it is quarantined.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_replica_behind_the_same_address_is_not_trusted_for_its_durability() {
    const MAX_TTL: Duration = Duration::from_secs(15);
    let mut cluster = cluster(3);
    let master_port = cluster.node(0).port().to_string();
    let replica = RedisNode::start(
        NodeSpec::new()
            .persistence(redquorum_nodes::Persistence::AofAlways)
            .arg("--replicaof")
            .arg("127.0.0.1")
            .arg(master_port.clone()),
    )
    .expect("start replica");
    let marker = cluster
        .node(0)
        .cli(&["GET", redquorum::MARKER_KEY])
        .expect("marker");
    let synced = common::eventually(Duration::from_secs(10), || {
        replica.cli(&["GET", redquorum::MARKER_KEY]).ok().as_deref() == Some(marker.as_str())
    })
    .await;
    assert!(synced, "the replica has the master's marker");
    let client = client(&cluster, MAX_TTL);
    client.connect().await;
    cluster.node(0).kill().expect("the master dies");
    replica
        .cli(&["REPLICAOF", "NO", "ONE"])
        .expect("promote the replica");
    replica
        .cli(&["CONFIG", "SET", "port", &master_port])
        .expect("move it to the master's address");
    client.status("res").await; // finds the old connection broken
    let status = client.status("res").await;
    assert!(
        status[0].quarantine.is_some(),
        "the promoted replica does not vote at once: {status:?}"
    );
}

/// A review's schedule 1: every server an operator marked by hand (`SET redlock-node-marker
/// manual`) carries the same marker id, so the word tells no server from another (`marker`
/// invariant 5): a health check replaces it as if it were missing, with its quarantine. Two
/// durable servers of three are then replaced behind their addresses (new servers, no data) and
/// marked by hand the same way: neither a client that knew the old ones nor a new client takes
/// them for the old ones. (Before the fix, the first did: durable, same marker id, so the new
/// `run_id` was forgiven and they voted at once; and any client trusted the word.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_written_marker_cannot_make_a_replaced_server_pass_for_the_old_one() {
    const MAX_TTL: Duration = Duration::from_secs(3);
    let mut cluster = common::cluster(3);
    for node in cluster.iter() {
        node.cli(&["SET", redquorum::MARKER_KEY, "manual"]).unwrap();
    }
    let client = client(&cluster, MAX_TTL);
    let replies = client.connect().await;
    assert!(
        replies
            .iter()
            .all(|r| matches!(r.reply, Reply::Quarantined(_))),
        "a word written by hand vouches for nothing: {replies:?}"
    );
    for node in cluster.iter() {
        let marker = node.cli(&["GET", redquorum::MARKER_KEY]).unwrap();
        assert!(
            marker != "manual" && redquorum::protocol::marker::id_of(&marker).len() >= 16,
            "replaced by a drawn one: {marker}"
        );
    }
    // Once the quarantine is over, the client trusts the servers it knows.
    tokio::time::sleep(MAX_TTL + Duration::from_millis(500)).await;
    drop(
        client
            .acquire_with("warm", Duration::from_secs(1), &common::patient())
            .await
            .expect("trusted after the quarantine"),
    );
    for i in 0..2 {
        cluster.node(i).restart_empty().expect("replaced");
        cluster
            .node(i)
            .cli(&["SET", redquorum::MARKER_KEY, "manual"])
            .unwrap();
    }
    client.status("res").await; // finds the old connections broken
    let err = client
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("the replaced servers do not vote for a client that knew the old ones");
    assert_eq!(quarantined_in(&err), 2, "{err}");
    let newcomer = self::client(&cluster, MAX_TTL);
    let err = newcomer
        .try_acquire("res", Duration::from_secs(1))
        .await
        .expect_err("nor for a new client");
    assert!(quarantined_in(&err) >= 2, "{err}");
}

/// Item: two URLs of one manager that reach the same server (`127.0.0.1` and `localhost`: the
/// written-duplicate check cannot see it) would let that server vote twice: with three URLs for
/// two servers, it alone would make the majority. The second URL to show the server's `run_id`
/// fails its health check, naming the first, and the lock needs the other server too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_listed_twice_under_two_names_votes_once() {
    let mut cluster = cluster(2);
    let port = cluster.node(0).port();
    let urls = vec![
        format!("redis://127.0.0.1:{port}"),
        format!("redis://localhost:{port}"),
        cluster.node(1).url(),
    ];
    let redlock = Redlock::builder(urls)
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid: the URLs differ as written");
    let replies = redlock.connect().await;
    let refused: Vec<String> = replies
        .iter()
        .filter(|r| !r.reply.is_granted())
        .map(|r| r.reply.to_string())
        .collect();
    assert_eq!(
        refused.len(),
        1,
        "one of the two names is refused: {replies:?}"
    );
    assert!(
        refused[0].contains("the same server as") && refused[0].contains(&port.to_string()),
        "the refusal names the other URL: {refused:?}"
    );
    // With the other server down, the one server listed twice is no majority.
    cluster.node(1).kill().expect("stop the second server");
    let err = redlock
        .try_acquire("res", Duration::from_secs(5))
        .await
        .expect_err("one server cannot make a majority of three URLs alone");
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
}

/// Breaks every library connection to `node`, so that the next request reconnects and runs the
/// health check first.
fn reconnect_to(node: &RedisNode) {
    for id in library_connections(node) {
        // A connection gone already is fine.
        let _ = node.cli(&["CLIENT", "KILL", "ID", &id]);
    }
}

/// The quarantine reason `client` reports for its first node, once it has looked again: its
/// first status after a broken connection may find the node not connected yet (no reason).
async fn reason_on_node_0(client: &Redlock) -> Option<redquorum::QuarantineReason> {
    let mut reason = None;
    for _ in 0..50 {
        reason = client.status("res").await[0].quarantine.map(|q| q.reason);
        if reason.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    reason
}

/// Makes `node`, under a 2 MB `maxmemory` and a `volatile-*` policy, evict keys with a TTL (as
/// lock keys have): one script writes past the limit (a script is checked once, at its start);
/// the next write evicts.
fn evict_keys_with_a_ttl(node: &RedisNode) {
    node.cli(&[
        "EVAL",
        "for i = 1, 4000 do redis.call('SET', 'filler:' .. i, string.rep('x', 1000), 'PX', 600000) end",
        "0",
    ])
    .expect("fill");
    let _ = node.cli(&["SET", "one-more", "x", "PX", "600000"]);
    let stats = node.cli(&["INFO", "stats"]).expect("INFO stats");
    assert!(
        !stats.contains("evicted_keys:0\r") && stats.contains("evicted_keys:"),
        "setup: the node evicted keys"
    );
}

/// Review item: a node that evicted keys since a client's last check may have evicted a lock
/// key and kept its marker (which has no TTL, so `volatile-*` policies never take it): that
/// client's next health check quarantines it. (`quarantine` invariant 7.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_evicted_keys_since_the_last_check_does_not_vote() {
    let mut cluster = cluster(3); // durable: trusted at once, until the evidence says otherwise
    let other = client(&cluster, Duration::from_secs(30));
    assert!(other.connect().await.iter().all(|r| r.reply.is_granted()));
    assert_eq!(other.status("res").await[0].quarantine, None);
    let node = cluster.node(0);
    let marker = node.cli(&["GET", redquorum::MARKER_KEY]).expect("marker");
    // Only keys with a TTL go, as lock keys do: the marker (no TTL) stays, and shows nothing.
    node.cli(&["CONFIG", "SET", "maxmemory-policy", "volatile-random"])
        .expect("policy");
    node.cli(&["CONFIG", "SET", "maxmemory", "2mb"])
        .expect("limit");
    evict_keys_with_a_ttl(node);
    node.cli(&["CONFIG", "SET", "maxmemory", "0"])
        .expect("no limit");
    assert_eq!(
        node.cli(&["GET", redquorum::MARKER_KEY]).expect("marker"),
        marker,
        "setup: the marker stayed"
    );
    reconnect_to(node);
    assert_eq!(
        reason_on_node_0(&other).await,
        Some(redquorum::QuarantineReason::Evicted)
    );
}

/// Issue 44: an eviction followed by `CONFIG RESETSTAT` reads the same `evicted_keys` as the
/// last check (0, n evicted, reset to 0). The reset still shows: `total_commands_processed`
/// went down, and on a node that may evict that is a loss. (`quarantine` invariant 7.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_hidden_by_a_reset_of_the_statistics_still_quarantines() {
    let mut cluster = cluster(3);
    // A node that may evict (a limit far above its data) when the client first checks it, and
    // that ran commands before, as a server in use has (a reset is seen by its count going
    // down: `quarantine` invariant 7).
    let node = cluster.node(0);
    node.cli(&["EVAL", "for i = 1, 5000 do redis.call('PING') end", "0"])
        .expect("a history of commands");
    node.cli(&["CONFIG", "SET", "maxmemory-policy", "volatile-random"])
        .expect("policy");
    node.cli(&["CONFIG", "SET", "maxmemory", "100mb"])
        .expect("limit");
    let other = client(&cluster, Duration::from_secs(30));
    assert!(other.connect().await.iter().all(|r| r.reply.is_granted()));
    assert_eq!(other.status("res").await[0].quarantine, None);
    let node = cluster.node(0);
    let marker = node.cli(&["GET", redquorum::MARKER_KEY]).expect("marker");
    // Squeezed, it evicts keys with a TTL (as lock keys have); the marker (none) stays.
    node.cli(&["CONFIG", "SET", "maxmemory", "2mb"])
        .expect("limit");
    evict_keys_with_a_ttl(node);
    node.cli(&["CONFIG", "SET", "maxmemory", "100mb"])
        .expect("limit");
    node.cli(&["CONFIG", "RESETSTAT"]).expect("reset");
    let stats = node.cli(&["INFO", "stats"]).expect("INFO stats");
    assert!(
        stats.contains("evicted_keys:0\r"),
        "setup: the reset took the count back to the last check's"
    );
    assert_eq!(
        node.cli(&["GET", redquorum::MARKER_KEY]).expect("marker"),
        marker,
        "setup: the marker stayed"
    );
    reconnect_to(node);
    assert_eq!(
        reason_on_node_0(&other).await,
        Some(redquorum::QuarantineReason::StatsReset)
    );
}

/// Review item: a standalone master made a replica (its full resync replaces its data, here
/// with a copy of its own marker) and promoted again (`REPLICAOF NO ONE`) is the same process
/// with the same marker, and its locks are gone: its `master_replid` changed, and a client that
/// checked it before quarantines it. (`quarantine` invariant 7.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_resynchronised_and_promoted_in_place_does_not_vote() {
    let mut cluster = cluster(3);
    let spare = RedisNode::start(NodeSpec::new().marked(false)).expect("start spare");
    let other = client(&cluster, Duration::from_secs(30));
    assert!(other.connect().await.iter().all(|r| r.reply.is_granted()));
    let holder = client(&cluster, Duration::from_secs(30));
    let held = holder
        .try_acquire("res", Duration::from_secs(20))
        .await
        .expect("the first client locks");
    let node = cluster.node(0);
    let marker = node.cli(&["GET", redquorum::MARKER_KEY]).expect("marker");
    spare
        .cli(&["SET", redquorum::MARKER_KEY, &marker])
        .expect("copy the marker");
    node.cli(&["REPLICAOF", "127.0.0.1", &spare.port().to_string()])
        .expect("REPLICAOF");
    let synced = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        node.cli(&["INFO", "replication"])
            .is_ok_and(|info| info.contains("master_link_status:up"))
    });
    assert!(synced, "setup: the resync finished");
    node.cli(&["REPLICAOF", "NO", "ONE"])
        .expect("promoted again");
    assert_eq!(
        node.cli(&["GET", "res"]).expect("GET").trim(),
        "",
        "setup: the lock is gone from node 0"
    );
    assert_eq!(
        node.cli(&["GET", redquorum::MARKER_KEY]).expect("GET"),
        marker,
        "setup: the same marker"
    );
    reconnect_to(node);
    assert_eq!(
        reason_on_node_0(&other).await,
        Some(redquorum::QuarantineReason::Resynchronised)
    );
    assert!(held.is_valid());
}
