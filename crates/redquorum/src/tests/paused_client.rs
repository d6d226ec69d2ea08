//! A client whose clocks stood still (a VM paused by its hypervisor stops both the monotonic and
//! the system clock, so the check that they agree passes) while the node's went on: its estimate
//! of the node's clock is behind by the whole pause, and its age looks short. Fencing tokens must
//! still increase (`fencing` invariant 7). The clock is this crate's to shift (an injected
//! pause); the servers are real.

use std::time::Duration;

use redquorum_nodes::{Cluster, NodeSpec, Persistence};

use crate::Redlock;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_whose_clocks_stood_still_still_hands_out_larger_tokens() {
    let cluster =
        Cluster::start(3, NodeSpec::new().persistence(Persistence::AofAlways)).expect("nodes");
    // The shortest fence retention there is: twice max_ttl, at least 2 s.
    let client = || {
        Redlock::builder(cluster.urls())
            // The native path, whose counter starts from our clock estimate (invariant 7).
            .fence_on_acquire(true)
            .max_ttl(Duration::from_secs(1))
            .fence_retention(Duration::from_secs(2))
            .build()
            .expect("valid")
    };
    let ttl = Duration::from_millis(500);
    // A few attempts: the nodes fsync every write, and a loaded machine may miss the default
    // node timeout once (seen beside other builds); the lock is free all along.
    let retry = crate::Retry::new()
        .attempts(5)
        .delay(Duration::from_millis(50));
    let paused = client();
    // A first fenced acquisition gives the paused client its estimates of the nodes' clocks.
    paused
        .acquire_with("r", ttl, &retry)
        .await
        .expect("free")
        .release()
        .await;
    // Meanwhile another client takes the lock: its token is about the nodes' clock now.
    let other = client();
    let mut lock = other.acquire_with("r", ttl, &retry).await.expect("free");
    let earlier = lock.fence().await.expect("fenced");
    lock.release().await;
    // The pause: longer than the fence retention, so the counters expire, and than the trust
    // window; the paused client's clocks see none of it (its estimates fall behind by it).
    tokio::time::sleep(Duration::from_millis(2_300)).await;
    for node in &paused.engine().nodes {
        if let Some(server) = node.plain_server() {
            server.clock_stood_still(Duration::from_secs(40));
        }
    }
    let mut resumed = paused.acquire_with("r", ttl, &retry).await.expect("free");
    let later = resumed.fence().await.expect("fenced");
    resumed.release().await;
    assert!(
        later > earlier,
        "a token after the pause ({later}) is larger than one handed out during it ({earlier})"
    );
}
