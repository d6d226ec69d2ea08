//! A Redlock node may be a whole Redis Cluster: requests go to the master serving the lock key's
//! slot, every key of a lock lives in that slot, a vote waits for the shard's replicas, and a
//! forced failover in the middle of a lease never produces a second holder.

mod common;

use std::time::Duration;

use common::{eventually, patient, redis_cluster, value_on};
use redquorum::{Cause, Error, NodeReply, NodeState, Redlock, Reply, Retry};
use redquorum_nodes::{Cluster, NodeSpec, Persistence, RedisCluster};

const TTL: Duration = Duration::from_secs(10);

fn manager(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls).build().expect("valid configuration")
}

/// For tests that look at every node after a round: connected to every master of every cluster
/// before the first lock, with a patient node timeout. A won round does not wait for the last
/// node, and a request still waiting for its connection when the round's deadline passes is
/// never sent (`stragglers` invariant 1): a fresh manager's first round on a cluster (reading
/// the slot map, connecting and checking a master) can leave that node without the key on a
/// loaded machine. Connected, every request is queued at once behind the earlier ones, and
/// `settle` waits for it.
async fn connected(urls: Vec<String>) -> Redlock {
    common::ready(
        Redlock::builder(urls)
            .node_timeout(common::PATIENT_NODE_TIMEOUT)
            .build()
            .expect("valid configuration"),
    )
    .await
}

/// The defaults, and votes wait for the shards' replicas.
fn waiting_for_replicas(urls: Vec<String>) -> Redlock {
    Redlock::builder(urls)
        .wait_for_replicas(true)
        .build()
        .expect("valid configuration")
}

/// Whether a writer waits for `resource` on the master that serves it in `cluster`: its
/// `redlock-writer-waiting:{…}resource` set there has a member.
fn writer_waits_on_owner(cluster: &mut RedisCluster, resource: &str) -> bool {
    let owner = cluster.owner_of(resource).expect("a master serves the key");
    let node = cluster.node(owner);
    let keys = node
        .cli(&["KEYS", &format!("redlock-writer-waiting:{{*}}{resource}")])
        .expect("KEYS");
    keys.lines()
        .any(|key| node.cli(&["ZCARD", key]).is_ok_and(|n| n != "0"))
}

/// `key` on the master that serves it in `cluster`.
fn on_owner(cluster: &mut RedisCluster, key: &str) -> Option<String> {
    let owner = cluster.owner_of(key).expect("a master serves the key");
    value_on(cluster.node(owner), key)
}

/// The fencing counter of `resource` on the master that serves it: the only key named
/// `redlock-fence:{…}resource` there.
fn counter_on_owner(cluster: &mut RedisCluster, resource: &str) -> Option<u64> {
    let owner = cluster.owner_of(resource).expect("a master serves the key");
    let keys = cluster
        .node(owner)
        .cli(&["KEYS", &format!("redlock-fence:*{resource}")])
        .expect("KEYS");
    let key = keys.lines().next()?;
    value_on(cluster.node(owner), key)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_extend_release_and_fence_across_three_clusters() {
    let mut clusters: Vec<RedisCluster> = (0..3).map(|_| redis_cluster(3, 1)).collect();
    let redlock = connected(clusters.iter().map(RedisCluster::url).collect()).await;
    let rival = connected(clusters.iter().map(RedisCluster::url).collect()).await;
    let mut tokens = Vec::new();
    // Names spread over the slots, so the three masters of each cluster all serve some.
    for i in 0..6 {
        let resource = format!("account:{i}");
        let mut lock = redlock.acquire(&resource, TTL).await.expect("acquired");
        let token = lock.fence().await.expect("a token on request");
        // The won rounds did not wait for the slowest cluster's reply.
        redlock.settle().await;
        let mut stored = 0;
        for cluster in &mut clusters {
            assert_eq!(
                on_owner(cluster, &resource).as_deref(),
                Some(lock.value()),
                "the lock key is the resource name, on the master serving its slot"
            );
            stored += usize::from(counter_on_owner(cluster, &resource) == Some(token));
        }
        // The token is issued on the acquisition's voters, often exactly a quorum: a won round
        // does not wait for the third cluster (`fencing` invariant 8), which then has no counter
        // (seen in CI on a loaded machine).
        assert!(stored >= 2, "the token is stored on {stored} of 3 clusters");
        let refused = rival.try_acquire(&resource, TTL).await.expect_err("held");
        assert_eq!(refused.cause(), Some(Cause::Busy), "{refused}");
        lock.extend(TTL).await.expect("extended on every cluster");
        tokens.push(lock.fence().await.expect("fenced by default"));
        assert!(lock.release().await.cause().is_none());
        for cluster in &mut clusters {
            assert_eq!(on_owner(cluster, &resource), None, "released everywhere");
        }
    }
    let mut again = redlock.acquire("account:0", TTL).await.expect("acquired");
    assert!(
        again.fence().await.ok() > tokens.first().copied(),
        "tokens increase"
    );
    assert!(again.release().await.cause().is_none());
}

/// A read-write lock's keys (the lock key, the writer-waiting key, the counter) and a
/// semaphore's permits each live in one slot, so their scripts run on a cluster master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_locks_and_permits_work_across_clusters() {
    let mut clusters: Vec<RedisCluster> = (0..3).map(|_| redis_cluster(3, 0)).collect();
    let redlock = manager(clusters.iter().map(RedisCluster::url).collect());
    // Spread over slots, one with a hash tag of its own.
    for name in ["doc:0", "doc:1", "{doc}:2", "doc:3"] {
        let mut a = redlock.try_acquire_read(name, TTL).await.expect("a reader");
        let mut b = redlock.try_acquire_read(name, TTL).await.expect("another");
        let refused = redlock
            .try_acquire_write(name, TTL)
            .await
            .expect_err("readers hold it");
        assert_eq!(refused.cause(), Some(Cause::Busy), "{refused}");
        // A writer that waits keeps new readers out, and gets in once the readers leave.
        let waiting = {
            let redlock = redlock.clone();
            let patient = Retry::forever()
                .delay(Duration::from_millis(50))
                .max_wait(Duration::from_secs(30));
            tokio::spawn(async move { redlock.acquire_write_with(name, TTL, &patient).await })
        };
        // Once the refused writer waits on a majority of the clusters, no reader can win there.
        assert!(
            eventually(Duration::from_secs(20), || {
                let waiting = clusters.iter_mut().map(|c| writer_waits_on_owner(c, name));
                waiting.filter(|&waits| waits).count() >= 2
            })
            .await,
            "the refused writer never waited"
        );
        let held_off = redlock
            .try_acquire_read(name, TTL)
            .await
            .expect_err("a writer waits");
        assert_eq!(held_off.cause(), Some(Cause::Busy), "{held_off}");
        let read_token = a.fence().await.ok().max(b.fence().await.ok());
        a.release().await;
        b.release().await;
        let mut writer = waiting.await.expect("task").expect("the writer");
        assert!(writer.fence().await.ok() > read_token);
        writer.release().await;
        let mut permit = redlock
            .try_acquire_permit(name, 2, TTL)
            .await
            .expect("a permit");
        assert!(permit.permit().is_some() && permit.fence().await.ok().is_some());
        assert!(permit.release().await.cause().is_none());
    }
}

/// With the restart quarantine off, only the vote's `WAIT` stands between a failover and a
/// second holder: a majority of the shards fail over in the middle of the lease, and the
/// promoted replicas still have the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_failover_of_a_majority_in_the_middle_of_a_lease_never_gives_the_lock_twice() {
    let mut clusters: Vec<RedisCluster> = (0..3).map(|_| redis_cluster(1, 1)).collect();
    let urls: Vec<String> = clusters.iter().map(RedisCluster::url).collect();
    // Connected first and patient (see `connected`): the key must reach both shards' masters
    // that are failed over below, not only a quorum's.
    let unquarantined = || async {
        common::ready(
            Redlock::builder(urls.clone())
                .quarantine(false)
                .node_timeout(common::PATIENT_NODE_TIMEOUT)
                .build()
                .expect("valid configuration"),
        )
        .await
    };
    let (holder, rival) = (unquarantined().await, unquarantined().await);
    let mut lock = holder.acquire("payments", TTL).await.expect("acquired");
    holder.settle().await;
    for cluster in clusters.iter_mut().take(2) {
        cluster.failover(1).expect("the replica takes over");
        assert_eq!(
            value_on(cluster.node(1), "payments").as_deref(),
            Some(lock.value()),
            "the vote waited for the replica, so the promoted replica has the key"
        );
    }
    match rival.try_acquire("payments", TTL).await {
        Err(e) => assert_eq!(e.cause(), Some(Cause::Busy), "{e}"),
        Ok(_) => panic!("a second holder after the failovers"),
    }
    // The holder's requests follow the slots to the promoted masters (MOVED).
    lock.extend(TTL)
        .await
        .expect("extended after the failovers");
    let first = lock.fence().await.ok();
    assert!(lock.release().await.cause().is_none());
    let mut next = rival
        .acquire_with("payments", TTL, &patient())
        .await
        .expect("free after the release");
    assert!(next.fence().await.ok() > first, "later tokens are larger");
    assert!(next.release().await.cause().is_none());
}

/// With the defaults (quarantine on, no `WAIT`): one shard fails over in the middle of the
/// lease. The promoted master finds its old master's marker, which names another server, so it
/// writes its own and is quarantined, for every client; the holder keeps its lock on the other
/// two, and nobody else gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promoted_master_is_quarantined_and_the_holder_keeps_its_lock() {
    let mut clusters: Vec<RedisCluster> = (0..3).map(|_| redis_cluster(1, 1)).collect();
    let urls: Vec<String> = clusters.iter().map(RedisCluster::url).collect();
    let (holder, rival) = (manager(urls.clone()), manager(urls));
    let mut lock = holder.acquire("payments", TTL).await.expect("acquired");
    clusters[0].failover(1).expect("the replica takes over");
    let refused = rival.try_acquire("payments", TTL).await.expect_err("held");
    assert_eq!(refused.cause(), Some(Cause::Busy), "{refused}");
    let promoted = clusters[0].node(1);
    let info = promoted.cli(&["INFO"]).expect("INFO");
    let run_id = info
        .lines()
        .find_map(|line| line.trim_end().strip_prefix("run_id:"))
        .expect("run_id");
    let (marker_key, _) = redquorum::cluster_marker(0, &info);
    let marker = value_on(promoted, &marker_key).expect("a marker");
    assert!(
        marker.starts_with(&format!("{run_id}.")) && !marker.ends_with(":0"),
        "the promoted master wrote a marker of its own, with a quarantine: {marker}"
    );
    let status = rival.status("payments").await;
    assert!(
        status[0].quarantine.map(|q| q.left) > Some(TTL),
        "quarantined for max_ttl: {status:?}"
    );
    // And longer than max_ttl, by the cluster's node timeout (5 s here): the old master may have
    // taken writes for that long after the promotion.
    let max_ttl = redquorum::defaults::MAX_TTL;
    assert!(
        status[0].quarantine.map(|q| q.left) > Some(max_ttl),
        "quarantined for max_ttl plus cluster-node-timeout: {status:?}"
    );
    lock.extend(TTL).await.expect("extended on the other two");
    assert!(lock.release().await.cause().is_none());
}

/// With `wait_for_replicas`, a lagging replica (here a stopped one) fails the vote's `WAIT`: a
/// write it does not have is not a vote, since a failover to it would lose the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_the_shards_replica_did_not_acknowledge_is_not_a_vote() {
    let mut clusters: Vec<RedisCluster> = (0..3).map(|_| redis_cluster(1, 1)).collect();
    let redlock = waiting_for_replicas(clusters.iter().map(RedisCluster::url).collect());
    redlock.connect().await;
    for cluster in clusters.iter_mut().take(2) {
        cluster.node(1).pause().expect("replica stopped");
    }
    let refused = redlock.try_acquire("payments", TTL).await;
    for cluster in clusters.iter_mut().take(2) {
        cluster.node(1).resume().expect("replica resumed");
    }
    // Not a vote: the `WAIT`'s own answer ("only 0 of the shard's 1 replicas…") or, since Redis
    // checks a blocked `WAIT`'s timeout only 10 times a second, the round's deadline first.
    let Err(Error::NotAcquired { failure, .. }) = refused else {
        panic!("writes no replica had were counted as votes: {refused:?}");
    };
    for reply in &failure.replies[..2] {
        assert!(
            matches!(&reply.reply, Reply::Timeout)
                || matches!(&reply.reply, Reply::ServerError(why) if why.contains("replicas acknowledged")),
            "{failure:?}"
        );
    }
    let lock = redlock
        .acquire_with("payments", TTL, &patient())
        .await
        .expect("acquired once the replicas answer again");
    assert!(lock.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_and_plain_nodes_mix_and_a_shard_without_replicas_still_votes() {
    let mut cluster = redis_cluster(3, 0);
    let plain = Cluster::start(2, NodeSpec::new().persistence(Persistence::AofAlways))
        .expect("plain nodes");
    let mut urls = vec![cluster.url()];
    urls.extend(plain.urls());
    let redlock = connected(urls).await;
    let lock = redlock.acquire("report:7", TTL).await.expect("acquired");
    redlock.settle().await;
    assert_eq!(
        on_owner(&mut cluster, "report:7").as_deref(),
        Some(lock.value())
    );
    for node in plain.iter() {
        assert_eq!(value_on(node, "report:7").as_deref(), Some(lock.value()));
    }
    assert!(lock.release().await.cause().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_on_a_cluster_needs_one_hash_tag_and_says_so() {
    let cluster = redis_cluster(3, 0);
    let redlock = manager(vec![cluster.url()]);
    let no = Retry::once();
    match redlock
        .acquire_many_with(&["order:a", "order:b"], TTL, &no)
        .await
    {
        Err(e) => assert!(e.to_string().contains("hash tag"), "{e}"),
        Ok(_) => panic!("a set across slots was locked"),
    }
    let lock = redlock
        .acquire_many(&["{order:7}:a", "{order:7}:b"], TTL)
        .await
        .expect("a set with one hash tag");
    assert!(lock.release().await.cause().is_none());
}

#[test]
fn cluster_urls_are_checked_when_the_manager_is_built() {
    let bad = |url: &str| {
        Redlock::builder([url])
            .build()
            .expect_err("refused")
            .to_string()
    };
    assert!(bad("redis+cluster://").contains("no seed"));
    assert!(bad("redis+cluster://u:secret@h:7000/1").contains("no databases"));
    assert!(!bad("redis+cluster://u:secret@h:7000/1").contains("secret"));
    assert!(bad("redis+cluster://h:notaport").contains("invalid server URL"));
}

/// Fair waiting on cluster nodes: the queue's keys are named into the lock key's slot, and the
/// release's announcement (a cluster-wide `PUBLISH`) wakes a waiter subscribed on a seed that
/// does not serve the slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_queue_in_the_lock_keys_slot_and_are_woken_by_the_release() {
    let mut clusters: Vec<RedisCluster> = (0..3).map(|_| redis_cluster(3, 0)).collect();
    let urls: Vec<String> = clusters.iter().map(RedisCluster::url).collect();
    let fair = || {
        Redlock::builder(urls.clone())
            .fair(true)
            .build()
            .expect("valid configuration")
    };
    let (holder, waiter) = (fair(), fair());
    // A resource the first seed (node 0, where waiters subscribe) does not serve.
    let resource = (0..)
        .map(|i| format!("report:{i}"))
        .find(|name| clusters[0].owner_of(name).expect("owner") != 0)
        .expect("a name on another master");
    let mut first = holder.acquire(&resource, TTL).await.expect("acquired");
    let name = resource.clone();
    let waiting = tokio::spawn(async move {
        // A retry delay far longer than the test: only the announcement can wake it in time.
        let slow = Retry::forever()
            .delay(Duration::from_secs(30))
            .max_wait(Duration::from_secs(60));
        waiter.acquire_with(&name, TTL, &slow).await
    });
    let queued = common::eventually(Duration::from_secs(10), || {
        clusters.iter_mut().all(|cluster| {
            let owner = cluster.owner_of(&resource).expect("owner");
            let keys = cluster
                .node(owner)
                .cli(&["KEYS", &format!("redlock-queue:*{resource}")])
                .unwrap_or_default();
            !keys.is_empty()
        })
    })
    .await;
    assert!(
        queued,
        "the waiter queues on the master serving the lock key"
    );
    let token = first.fence().await.ok();
    assert!(first.release().await.cause().is_none());
    let woke = common::eventually(Duration::from_secs(10), || waiting.is_finished()).await;
    assert!(
        woke,
        "woken by the release's announcement, not by its 30 s retry"
    );
    let mut second = waiting.await.expect("task").expect("the waiter got it");
    assert!(second.fence().await.ok() > token, "tokens increase");
    assert!(second.release().await.cause().is_none());
}

/// Votes on one connection share `WAIT`s (one runs at a time, the next covers every write that
/// came meanwhile): under concurrency every counted vote is on the replica, and with the replica
/// stopped none counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_votes_count_only_once_the_replica_has_them() {
    let mut shard = redis_cluster(1, 1);
    let redlock = waiting_for_replicas(vec![shard.url()]);
    redlock.connect().await;
    let attempts = |round: usize| {
        let redlock = redlock.clone();
        (0..24).map(move |task| {
            let redlock = redlock.clone();
            tokio::spawn(async move {
                let resource = format!("job:{round}:{task}");
                let lock = redlock.try_acquire(&resource, TTL).await;
                (resource, lock)
            })
        })
    };
    let mut held = Vec::new();
    for attempt in attempts(0) {
        let (resource, lock) = attempt.await.expect("task");
        held.push((resource, lock.expect("an uncontended lock is granted")));
    }
    for (resource, lock) in &held {
        let on_replica = shard.node(1).cli(&["KEYS", resource]).expect("KEYS");
        assert_eq!(on_replica, *resource, "a counted vote is on the replica");
        assert!(lock.is_valid());
    }
    shard.node(1).pause().expect("replica stopped");
    let mut granted = 0;
    for attempt in attempts(1) {
        let (_, lock) = attempt.await.expect("task");
        granted += usize::from(lock.is_ok());
    }
    shard.node(1).resume().expect("replica resumed");
    assert_eq!(
        granted, 0,
        "votes the replica did not acknowledge were counted"
    );
}

/// `docs/cluster.md`'s ACL for a cluster (its patterns with our slot tags, and `CLUSTER NODES`)
/// is enough for fenced locks with the defaults; it must be set on every server of the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_acl_for_clusters_is_enough() {
    const CLUSTER_ACL: &str = "ACL SETUSER locker on >CHANGE-ME resetkeys ~lock:* ~redlock-fence:{*}lock:* ~redlock-node-marker{*} resetchannels -@all +set +get +del +exists +pexpire +pttl +type +time +eval +evalsha +script|load +info +config|get +ping +cluster|nodes";
    let readme = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/cluster.md"
    ))
    .expect("README");
    assert!(readme.contains(CLUSTER_ACL), "the cluster ACL is published");
    let mut cluster = redis_cluster(3, 0);
    let line = CLUSTER_ACL.replace("CHANGE-ME", "pw-cluster");
    let args: Vec<&str> = line.split(' ').collect();
    for i in 0..cluster.len() {
        cluster.node(i).cli(&args).expect("ACL SETUSER");
    }
    let url = cluster
        .url()
        .replace("redis+cluster://", "redis+cluster://locker:pw-cluster@");
    let redlock = manager(vec![url]);
    for i in 0..6 {
        let resource = format!("lock:{i}");
        let mut lock = redlock.try_acquire(&resource, TTL).await.expect("locks");
        assert!(lock.fence().await.ok().is_some(), "fenced");
        assert_eq!(
            on_owner(&mut cluster, &resource).as_deref(),
            Some(lock.value())
        );
        assert!(lock.release().await.cause().is_none());
    }
}

/// Plain writes (no quarantine, no `WAIT`): only routing is under test.
fn routing_only(url: String) -> Redlock {
    Redlock::builder([url])
        .quarantine(false)
        .wait_for_replicas(false)
        .build()
        .expect("valid configuration")
}

/// A master that hangs (stopped) and is replaced by its replica (`TAKEOVER`) answers nothing,
/// not `MOVED`: timeouts send the client to read the map again, from every node at once, and it
/// finds the new master (found by review: it used to ask the hung one first, forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_master_replaced_by_its_replica_is_left_behind() {
    let mut cluster = redis_cluster(1, 1);
    let client = routing_only(cluster.url_with_seeds(&[0, 1]));
    let lock = client.acquire("before", TTL).await.expect("acquired");
    assert!(lock.release().await.cause().is_none());
    cluster.node(0).pause().expect("master stopped");
    let promoted = cluster.node(1).cli(&["CLUSTER", "FAILOVER", "TAKEOVER"]);
    let patient = Retry::forever()
        .delay(Duration::from_millis(50))
        .max_wait(Duration::from_secs(20));
    let after = match promoted {
        Ok(_) => Some(client.acquire_with("after", TTL, &patient).await),
        Err(_) => None,
    };
    cluster.node(0).resume().expect("master resumed");
    let after = after.expect("TAKEOVER accepted");
    let lock = after.expect("the promoted master is found");
    assert!(lock.release().await.cause().is_none());
}

/// A hung seed listed first holds nothing up: the map is asked of every seed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_seed_listed_first_holds_nothing_up() {
    let mut cluster = redis_cluster(1, 1);
    cluster.node(1).pause().expect("replica stopped");
    let client = routing_only(cluster.url_with_seeds(&[1, 0]));
    let patient = Retry::forever()
        .delay(Duration::from_millis(50))
        .max_wait(Duration::from_secs(10));
    let acquired = client.acquire_with("res", TTL, &patient).await;
    cluster.node(1).resume().expect("replica resumed");
    let lock = acquired.expect("acquired through the seed that answers");
    assert!(lock.release().await.cause().is_none());
}

/// `status` after a failover follows `MOVED` at once instead of reporting it until the map ages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_follows_a_failover_at_once() {
    let mut cluster = redis_cluster(1, 1);
    let client = routing_only(cluster.url());
    let lock = client.acquire("res", TTL).await.expect("acquired");
    cluster.wait_for_replication(0).expect("replicated");
    cluster.failover(1).expect("the replica takes over");
    let status = client.status("res").await;
    assert_eq!(status[0].value(), Some(lock.value()), "{status:?}");
    let shard = status[0].shard.as_ref().expect("a shard");
    assert_eq!(
        shard.master,
        cluster.urls()[1].trim_start_matches("redis://")
    );
}

/// While a slot migrates, a request for a key no longer at the source is answered `ASK`, and
/// follows it with `ASKING` to the importing master: a holder extends its lock in the middle of
/// the migration (found by review: it used to lose it), and locks follow the slot once it moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_follow_a_slot_being_migrated() {
    let mut cluster = redis_cluster(2, 0);
    let redlock = manager(vec![cluster.url()]);
    let mut held = redlock.acquire("{mig}held", TTL).await.expect("acquired");
    // Asked now, so that the counter exists and moves with the slot.
    let token = held.fence().await.expect("a token");
    let source = cluster.owner_of("{mig}held").expect("owner");
    let target = 1 - source;
    let slot = cluster.slot_of("{mig}held").expect("slot").to_string();
    let id = |cluster: &mut RedisCluster, i: usize| cluster.node(i).cli(&["CLUSTER", "MYID"]);
    let (source_id, target_id) = (
        id(&mut cluster, source).unwrap(),
        id(&mut cluster, target).unwrap(),
    );
    let target_port = cluster.node(target).port().to_string();
    let importing = ["CLUSTER", "SETSLOT", &slot, "IMPORTING", &source_id];
    cluster.node(target).cli(&importing).expect("importing");
    let migrating = ["CLUSTER", "SETSLOT", &slot, "MIGRATING", &target_id];
    cluster.node(source).cli(&migrating).expect("migrating");
    // Every key of the slot (the lock key and its fencing counter) moves to the target.
    let keys = cluster
        .node(source)
        .cli(&["CLUSTER", "GETKEYSINSLOT", &slot, "100"])
        .expect("keys");
    let keys: Vec<&str> = keys.lines().collect();
    assert!(keys.len() >= 2, "the lock key and its counter: {keys:?}");
    let mut migrate = vec![
        "MIGRATE",
        "127.0.0.1",
        &target_port,
        "",
        "0",
        "5000",
        "KEYS",
    ];
    migrate.extend(&keys);
    cluster.node(source).cli(&migrate).expect("MIGRATE");

    held.extend(TTL)
        .await
        .expect("extended on the importing master");
    // A new lock is one key: the source answers `ASK`, the importing master takes it.
    let mut early = redlock
        .try_acquire("{mig}other", TTL)
        .await
        .expect("a new lock follows ASK to the importing master");
    // Its token names two keys that exist nowhere yet: Redis answers a multi-key request in a
    // slot being imported with `TRYAGAIN` until the migration ends (not a vote).
    let refused = early
        .fence()
        .await
        .expect_err("no token while the slot moves");
    assert!(refused.to_string().contains("TRYAGAIN"), "{refused}");
    assert!(early.release().await.cause().is_none());
    for node in [source, target] {
        let done = ["CLUSTER", "SETSLOT", &slot, "NODE", &target_id];
        cluster.node(node).cli(&done).expect("migration done");
    }
    let other = redlock
        .acquire_with("{mig}other", TTL, &patient())
        .await
        .expect("a new lock once the slot moved (MOVED)");
    assert_eq!(
        held.fence().await.ok(),
        Some(token),
        "asked again: the same token"
    );
    assert!(held.release().await.cause().is_none());
    assert!(other.release().await.cause().is_none());
    assert_eq!(value_on(cluster.node(target), "{mig}held"), None);
    let mut again = redlock
        .acquire("{mig}held", TTL)
        .await
        .expect("acquired again");
    assert!(
        again.fence().await.expect("a token") > token,
        "its counter moved with the slot"
    );
    assert!(again.release().await.cause().is_none());
}

/// Waits (up to `limit`) until `node` of `cluster` reports `role` in `ROLE`; whether it did.
fn became(cluster: &mut RedisCluster, node: usize, role: &str, limit: Duration) -> bool {
    let give_up = std::time::Instant::now() + limit;
    loop {
        if cluster
            .node(node)
            .cli(&["ROLE"])
            .is_ok_and(|r| r.starts_with(role))
        {
            return true;
        }
        if std::time::Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to 30 s) until `node` of `cluster` reports `role` in `ROLE`.
fn until_role(cluster: &mut RedisCluster, node: usize, role: &str) {
    assert!(
        became(cluster, node, role, Duration::from_secs(30)),
        "node {node} never became {role}"
    );
}

/// Makes replica `node` the master: a coordinated `CLUSTER FAILOVER`, then `FORCE`, then
/// `TAKEOVER`, each given 10 s (a coordinated one that cannot finish is abandoned by Redis).
fn fail_over_to(cluster: &mut RedisCluster, node: usize) {
    for how in [
        &["CLUSTER", "FAILOVER"][..],
        &["CLUSTER", "FAILOVER", "FORCE"],
        &["CLUSTER", "FAILOVER", "TAKEOVER"],
    ] {
        if cluster.node(node).cli(how).is_ok()
            && became(cluster, node, "master", Duration::from_secs(10))
        {
            return;
        }
    }
    panic!("node {node} could not be made master");
}

/// Stops each cluster's replica and cuts its replication link: what its master grants from now
/// on, its replica never gets.
fn cut_replicas(clusters: &mut [RedisCluster]) {
    for cluster in clusters {
        cluster.node(1).pause().expect("stop the replica");
        cluster
            .node(0)
            .cli(&["CLIENT", "KILL", "TYPE", "replica"])
            .expect("cut the replication link");
    }
}

/// On each cluster at once: the master stops, its replica takes over, the old master comes back
/// as its replica, resynchronises in full, and leads again (a failback).
fn fail_back(clusters: &mut [RedisCluster]) {
    std::thread::scope(|scope| {
        for cluster in clusters.iter_mut() {
            scope.spawn(move || {
                cluster.node(0).pause().expect("stop the master");
                cluster.node(1).resume().expect("resume the replica");
                cluster
                    .node(1)
                    .cli(&["CLUSTER", "FAILOVER", "TAKEOVER"])
                    .expect("the replica takes over");
                until_role(cluster, 1, "master");
                cluster.node(0).resume().expect("the old master comes back");
                until_role(cluster, 0, "slave");
                cluster
                    .wait_for_replication(1)
                    .expect("the old master is in sync");
                fail_over_to(cluster, 0);
                cluster.wait_until_ok().expect("the cluster serves again");
            });
        }
    });
}

/// The failback (issue: "a cluster failback hands a lock out twice, with the defaults"): on two
/// of three clusters, master Y grants A's lock L without replicating it (its replica X is
/// stopped and cut off), X takes over without L while Y is stopped, Y comes back as X's replica
/// and resynchronises (getting its *own* marker back from X), then fails back and leads again:
/// the same process, its own marker, a long uptime, and no L. A new client must not count it:
/// its marker names Y's replication history before the failover, so it is quarantined as a
/// promoted replica. With a marker that names the `run_id` alone, B got L while A held it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failback_to_a_master_that_lost_a_lock_does_not_vote() {
    // Servers up for longer than max_ttl, as in the reproduction: their uptime says nothing.
    const MAX_TTL: Duration = Duration::from_secs(20);
    let mut clusters: Vec<RedisCluster> = (0..3).map(|_| redis_cluster(1, 1)).collect();
    let urls: Vec<String> = clusters.iter().map(RedisCluster::url).collect();
    let client = || {
        Redlock::builder(urls.clone())
            .max_ttl(MAX_TTL)
            .build()
            .expect("valid configuration")
    };
    tokio::time::sleep(MAX_TTL + Duration::from_millis(1500)).await;
    cut_replicas(&mut clusters[..2]);
    let a = client();
    let a_lock = a
        .acquire("ledger", MAX_TTL)
        .await
        .expect("A locks, counted on the two masters that did not replicate it");
    fail_back(&mut clusters[..2]);
    assert!(a_lock.is_valid(), "A's lock is still valid");
    let b = client();
    let err = b
        .try_acquire("ledger", MAX_TTL)
        .await
        .expect_err("the failed-back masters lost A's lock: they do not vote");
    let Error::NotAcquired { failure, .. } = &err else {
        panic!("{err}");
    };
    let promoted = failure
        .replies
        .iter()
        .filter(|r| {
            matches!(&r.reply, Reply::Quarantined(q)
                if q.reason == redquorum::QuarantineReason::Promoted)
        })
        .count();
    assert_eq!(
        promoted, 2,
        "both failed-back masters are promoted replicas: {err}"
    );
    assert!(a_lock.is_valid(), "A is the only holder");
}

/// The failback above, seen by a client that was connected before it and sent nothing while
/// it happened (its connections never saw the demoted master answer `MOVED`): its next vote on
/// a failed-back master must not count either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failback_during_a_quiet_spell_does_not_vote_for_a_client_connected_before() {
    const MAX_TTL: Duration = Duration::from_secs(20);
    let mut clusters: Vec<RedisCluster> = (0..3).map(|_| redis_cluster(1, 1)).collect();
    let urls: Vec<String> = clusters.iter().map(RedisCluster::url).collect();
    let client = || {
        Redlock::builder(urls.clone())
            .max_ttl(MAX_TTL)
            .build()
            .expect("valid configuration")
    };
    tokio::time::sleep(MAX_TTL + Duration::from_millis(1500)).await;
    let b = client();
    // B's connections and health checks are made before the failover.
    let warm = b
        .acquire("warm-up", MAX_TTL)
        .await
        .expect("B locks another resource");
    warm.release().await;
    cut_replicas(&mut clusters[..2]);
    let a = client();
    let a_lock = a
        .acquire("ledger", MAX_TTL)
        .await
        .expect("A locks, counted on the two masters that did not replicate it");
    fail_back(&mut clusters[..2]);
    assert!(a_lock.is_valid(), "A's lock is still valid");
    let err = b
        .try_acquire("ledger", MAX_TTL)
        .await
        .expect_err("B, connected before the failback, must not get A's lock");
    let Error::NotAcquired { failure, .. } = &err else {
        panic!("{err}");
    };
    // Its vote read the failed-back master's replication history back and found it changed (or,
    // had its connection broken meanwhile, a new health check found the marker of an old one).
    let changed = failure
        .replies
        .iter()
        .filter(|r| {
            matches!(&r.reply, Reply::Quarantined(q)
                if matches!(q.reason, redquorum::QuarantineReason::Resynchronised
                    | redquorum::QuarantineReason::Promoted))
        })
        .count();
    assert_eq!(
        changed, 2,
        "both failed-back masters are out of the vote: {err}"
    );
    assert!(a_lock.is_valid(), "A is the only holder");
}

/// How the alias check names a cluster node's master at `address` (`host:port`) in a refusal,
/// given the node's URL.
fn master_of(address: &str, cluster_url: &str) -> String {
    let seeds = cluster_url.trim_start_matches("redis+cluster://");
    format!("{address} of cluster({seeds})")
}

/// Which of nodes 0 and 1 (two URLs that reach one server, `names` as a refusal names each) the
/// manager refused as the other's alias when connecting, and the refusal; checks that exactly
/// one was, and that its refusal names the other. Which one is refused is a race: the first to
/// claim the server keeps it.
fn refused_alias(replies: &[NodeReply], names: [&str; 2]) -> (usize, String) {
    let refused: Vec<usize> = (0..2).filter(|&i| !replies[i].reply.is_granted()).collect();
    assert_eq!(
        refused.len(),
        1,
        "one of the two URLs is refused: {replies:?}"
    );
    assert!(replies[2].reply.is_granted(), "{replies:?}");
    let i = refused[0];
    let why = format!("the same server as {} (the same run_id)", names[1 - i]);
    let reply = replies[i].reply.to_string();
    assert!(reply.contains(&why), "the refusal names the other: {reply}");
    (i, why)
}

/// With the independent plain node (node 2) stopped, the server reached through nodes 0 and 1
/// keeps `lock` alone no more: the alias refused when connecting (`refused`, named by `why`)
/// fails the extension with the same refusal, and `status` shows it too.
async fn one_server_alone_keeps_no_lock(
    redlock: &Redlock,
    lock: &mut redquorum::Lock,
    refused: usize,
    why: &str,
) {
    let err = lock
        .extend(TTL)
        .await
        .expect_err("one server listed twice is no majority of three");
    let Error::LockLost {
        failure: Some(failure),
        ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(failure.granted(), 1, "{err}");
    let reply = failure.replies[refused].reply.to_string();
    assert!(reply.contains(why), "the round shows the refusal: {err}");
    let status = redlock.status("res").await;
    match &status[refused].state {
        NodeState::Unavailable(reply) => assert!(reply.to_string().contains(why), "{status:?}"),
        other => panic!("the refused alias is not asked: {other:?}"),
    }
}

/// Issue 44: two URLs of one Redis Cluster with different seeds pass the duplicate check (their
/// seeds differ), and each master would vote once per URL: an acquisition's two `SET NX` meet on
/// one key, but an extension succeeds through both, so with the independent plain node down the
/// one cluster alone would keep the lock. The first cluster node to show a master's `run_id`
/// claims it; the other's health check fails, naming it, and it never votes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cluster_listed_twice_with_different_seeds_votes_once() {
    let cluster = redis_cluster(1, 1);
    let mut plain = Cluster::start(1, NodeSpec::new().persistence(Persistence::AofAlways))
        .expect("a plain node");
    let (by_master, by_replica) = (cluster.url_with_seeds(&[0]), cluster.url_with_seeds(&[1]));
    let master = cluster.urls()[0].trim_start_matches("redis://").to_owned();
    let names = [
        master_of(&master, &by_master),
        master_of(&master, &by_replica),
    ];
    let redlock = Redlock::builder([by_master, by_replica, plain.urls()[0].clone()])
        .node_timeout(common::PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid: the seeds differ");
    let (refused, why) = refused_alias(&redlock.connect().await, [&names[0], &names[1]]);
    let mut lock = redlock
        .acquire("res", TTL)
        .await
        .expect("the cluster once and the plain node");
    plain.node(0).kill().expect("stop the plain node");
    one_server_alone_keeps_no_lock(&redlock, &mut lock, refused, &why).await;
}

/// Issue 44: a cluster URL and a plain URL of the master that serves the resource are one
/// server under two nodes (the duplicate check compares a cluster's seeds with cluster seeds
/// only); whichever shows its `run_id` second is refused, naming the other, and the master alone
/// keeps no lock once the independent plain node is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_and_a_plain_url_of_its_master_vote_once() {
    // One master, serving every slot: the plain URL's marker key and the resource are both its.
    let mut cluster = redis_cluster(1, 0);
    let master_url = cluster.urls()[0].clone();
    let master = master_url.trim_start_matches("redis://").to_owned();
    // The plain URL's marker (the cluster's are keys of their own): an id of 16 hex digits with
    // no time to wait for, as the node launcher writes on a brand-new server. Trusted at once,
    // so without the alias check the plain URL's grants would be votes.
    let marker = format!("{:016x}:0", cluster.node(0).port());
    cluster
        .node(0)
        .cli(&["SET", redquorum::MARKER_KEY, &marker, "NX"])
        .expect("the plain URL's marker");
    let mut plain = Cluster::start(1, NodeSpec::new().persistence(Persistence::AofAlways))
        .expect("a plain node");
    let cluster_url = cluster.url();
    let names = [master_of(&master, &cluster_url), master.clone()];
    // Fencing off: a plain URL of a cluster master cannot run our scripts over the lock key and
    // its counter (another slot: CROSSSLOT), so the lock key alone is asked.
    let redlock = Redlock::builder([cluster_url, master_url, plain.urls()[0].clone()])
        .node_timeout(common::PATIENT_NODE_TIMEOUT)
        .fencing(false)
        .build()
        .expect("valid: a cluster URL and a plain one differ");
    let (refused, why) = refused_alias(&redlock.connect().await, [&names[0], &names[1]]);
    let mut lock = redlock
        .acquire("res", TTL)
        .await
        .expect("the master once and the plain node");
    plain.node(0).kill().expect("stop the plain node");
    one_server_alone_keeps_no_lock(&redlock, &mut lock, refused, &why).await;
}
