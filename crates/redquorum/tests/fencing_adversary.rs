//! Schedules an adversarial review built against the native fenced acquisition (a pipeline of
//! plain commands instead of a script): an ACL that refuses `INCR`, a pipeline the network
//! delivers long after it was built, a counter started again while its node is quarantined.
//! Tokens must increase through each (`fencing` invariants 4 and 5), or the refusal be named.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{apply_acl, as_acl_user, cluster};
use redquorum::Redlock;
use redquorum_nodes::Cluster;

/// One fenced acquisition of `lock:r` by `client` (`who`, for the failure message), released:
/// its token.
async fn fenced_token(client: &Redlock, ttl: Duration, who: &str) -> u64 {
    let mut lock = client
        .try_acquire("lock:r", ttl)
        .await
        .unwrap_or_else(|e| panic!("{who} locks: {e}"));
    let token = lock.fence().await.expect("fenced");
    lock.release().await;
    token
}

/// [`fenced_token`] with node 2 paused: a quorum of nodes 0 and 1 alone.
async fn fenced_token_without_node_2(
    cluster: &mut Cluster,
    client: &Redlock,
    ttl: Duration,
    who: &str,
) -> u64 {
    cluster.node(2).pause().unwrap();
    let lock = client.try_acquire("lock:r", ttl).await;
    cluster.node(2).resume().unwrap();
    let mut lock = lock.unwrap_or_else(|e| panic!("{who} locks on nodes 0 and 1: {e}"));
    let token = lock.fence().await.expect("fenced");
    lock.release().await;
    token
}

/// The milliseconds into the current second of this host's clock (the nodes' clock too).
fn millis_into_second() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .subsec_millis()
}

/// The full ACL the README published up to ca3c373: everything the library needed then, without
/// `+incr`. A deployment that upgrades keeps it.
const FULL_ACL_BEFORE: &str = "ACL SETUSER locker on >CHANGE-ME resetkeys ~lock:* ~redlock-fence:lock:* ~redlock-queue:lock:* ~redlock-queue-lease:lock:* ~redlock-writer-waiting:lock:* ~redlock-node-marker resetchannels &redlock-released:lock:* -@all +set +get +del +exists +pexpire +pttl +type +time +zadd +zrange +zrangebyscore +zremrangebyscore +zrem +zscore +zcard +publish +subscribe +unsubscribe +eval +evalsha +script|load +info +config|get +ping +client|tracking +hello";

/// A user without `+incr` (the ACL published before the native path): every native `INCR` is
/// refused, the refusal is taken for "not a number", every node proposes its clock rounded down
/// to a second, and the store round stores it: two acquisitions within one second get the same
/// token. Either the acquisition must fail naming `+incr`, or the tokens must increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_incr_tokens_still_increase_or_the_permission_is_named() {
    let cluster = cluster(3);
    apply_acl(&cluster, FULL_ACL_BEFORE, "pw-old");
    let redlock = as_acl_user(&cluster, "pw-old").build().expect("valid");
    let ttl = Duration::from_secs(10);
    let mut last: Option<u64> = None;
    let until = Instant::now() + Duration::from_secs(3);
    let mut n = 0;
    while Instant::now() < until && n < 20 {
        n += 1;
        match redlock.try_acquire("lock:r", ttl).await {
            Err(e) => {
                let shown = e.to_string();
                assert!(
                    shown.contains("incr"),
                    "refused, but +incr is not named: {shown}"
                );
                return;
            }
            Ok(mut lock) => {
                let token = lock.fence().await.expect("fenced");
                lock.release().await;
                if let Some(previous) = last {
                    assert!(
                        token > previous,
                        "acquisition {n}: token {token} after {previous}"
                    );
                }
                last = Some(token);
            }
        }
    }
}

/// A loopback TCP proxy to `target` whose client-to-server bytes are held for `delay` ms (read
/// when they arrive) before they are passed on, in order: a network that delivers late.
async fn delaying_proxy(target: u16, delay: std::sync::Arc<std::sync::atomic::AtomicU64>) -> u16 {
    use std::sync::atomic::Ordering;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
            let delay = delay.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match client_read.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            let due = Instant::now()
                                + Duration::from_millis(delay.load(Ordering::SeqCst));
                            if tx.send((due, buf[..n].to_vec())).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
            tokio::spawn(async move {
                while let Some((due, bytes)) = rx.recv().await {
                    tokio::time::sleep_until(due.into()).await;
                    if server_write.write_all(&bytes).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
        }
    });
    port
}

/// A native acquisition starts a missing counter at our estimate of the node's clock *when the
/// request was built*, not when the node runs it. A pipeline that the network delivers late (after
/// its attempt timed out; nothing bounds that) starts a counter that expired meanwhile at a
/// clock long past, on a majority, marked as stored: the next acquisition's quorum agrees on
/// that stale value plus one, in one round, below a token handed out in between. The script path
/// reads `TIME` when it runs and cannot do this. (Settings allowed by the builder: `max_ttl`
/// 1 s, retention 2 s = 2 × `max_ttl`, the quarantine on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_pipeline_does_not_start_a_counter_from_a_stale_estimate() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut cluster = cluster(3);
    let max_ttl = Duration::from_secs(1);
    let retention = Duration::from_secs(2);
    let ttl = Duration::from_millis(800);
    let build = |urls: Vec<String>| {
        Redlock::builder(urls)
            .max_ttl(max_ttl)
            .fence_retention(retention)
            .node_timeout(Duration::from_millis(300))
            .build()
            .expect("valid")
    };
    // Client P reaches nodes 0 and 1 through a network that may deliver late; node 2 directly.
    let delay = Arc::new(AtomicU64::new(0));
    let mut urls = Vec::new();
    for (i, node) in cluster.iter().enumerate() {
        let port = if i < 2 {
            delaying_proxy(node.port(), delay.clone()).await
        } else {
            node.port()
        };
        urls.push(format!("redis://127.0.0.1:{port}"));
    }
    let p = build(urls);
    // P acquires once: its connections read the nodes' clocks (its estimates).
    fenced_token(&p, ttl, "P").await;
    // P's next attempt is delivered 5 s late to nodes 0 and 1: it fails (node timeout).
    delay.store(5_000, Ordering::SeqCst);
    let sent = Instant::now();
    let late = p.try_acquire("lock:r", ttl).await;
    assert!(late.is_err(), "only node 2 answered in time");
    delay.store(0, Ordering::SeqCst);
    // Meanwhile the counters expire (2 s unused) and client Q gets a token from a fresh start.
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    let q = build(cluster.urls());
    let handed_out = fenced_token(&q, ttl, "Q").await;
    // The counters expire again; then P's late pipelines arrive on nodes 0 and 1.
    let arrival = sent + Duration::from_millis(5_500);
    tokio::time::sleep_until(arrival.into()).await;
    // Client Z reaches nodes 0 and 1 (node 2 is stopped): a quorum.
    let z = build(cluster.urls());
    let token = fenced_token_without_node_2(&mut cluster, &z, ttl, "Z").await;
    assert!(
        token > handed_out,
        "token {token} handed out after {handed_out}"
    );
}

/// `fencing` invariant 4: a majority that lost its data is covered because the quarantine keeps
/// it from voting for `max_ttl` "and a counter that is started again starts from a clock". A
/// native attempt starts it at once, while the nodes are quarantined, from our estimate of the
/// clock at the loss; after the quarantine the nodes only `INCR` it (no floor at the node's
/// clock, as the script had), so the first acquisition the quarantine lets through agrees, in one
/// round, on the clock of the loss plus one or two: below the tokens handed out in the grain
/// before the loss. (`FLUSHALL`: a loss the quarantine covers; a restart does the same once the
/// new connection has read the clock for any resource.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_restarted_during_the_quarantine_is_not_below_earlier_tokens() {
    let mut cluster = cluster(3);
    let max_ttl = Duration::from_secs(2);
    let ttl = Duration::from_secs(1);
    let build = |urls: Vec<String>| {
        Redlock::builder(urls)
            .max_ttl(max_ttl)
            .node_timeout(Duration::from_millis(300))
            .build()
            .expect("valid")
    };
    let q = build(cluster.urls());
    q.connect().await;
    // Early in a second of the nodes' clocks (this host's), so that everything below until the
    // loss happens within one grain (1 s).
    let deadline = Instant::now() + Duration::from_secs(3);
    while millis_into_second() > 50 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut last = 0;
    for _ in 0..30 {
        last = fenced_token(&q, ttl, "Q").await;
    }
    // A majority loses its data; Q's next attempt finds it out (the marker is gone), too late
    // for the counter.
    cluster.node(0).cli(&["FLUSHALL"]).unwrap();
    cluster.node(1).cli(&["FLUSHALL"]).unwrap();
    let refused = q.try_acquire("lock:r", ttl).await;
    assert!(refused.is_err(), "nodes 0 and 1 are quarantined");
    let restarted = common::counter_on(cluster.node(0), "lock:r");
    assert!(
        millis_into_second() < 900,
        "the schedule took too long to stay in one grain"
    );
    // A new client waits out the quarantine, then locks with nodes 0 and 1 (node 2 stopped).
    let z = build(cluster.urls());
    z.connect().await;
    tokio::time::sleep(max_ttl + Duration::from_millis(1_500)).await;
    let token = fenced_token_without_node_2(&mut cluster, &z, ttl, "Z after the quarantine").await;
    assert!(
        token > last,
        "token {token} handed out after {last} (node 0's counter restarted at {restarted:?})"
    );
}
