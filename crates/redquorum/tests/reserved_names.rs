//! Names the library's own keys use are not resources: a lock named `redlock-fence:x` would be
//! overwritten by a fenced acquisition of `x` (its counter key), one named after a node's marker
//! would be taken for the node's evidence. Every kind of acquisition refuses them before
//! sending anything, and the names stay untouched on the servers.

mod common;

use std::time::Duration;

use redquorum::{ConfigError, Error, Retry};

const TTL: Duration = Duration::from_secs(5);

fn reserved(result: Result<redquorum::Lock, Error>) -> &'static str {
    match result {
        Err(Error::Config(ConfigError::ReservedName { prefix, .. })) => prefix,
        other => panic!("not refused as reserved: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acquisition_refuses_the_library_s_own_key_names() {
    let mut cluster = common::cluster(1);
    let manager = common::connected(&cluster).await;
    assert_eq!(
        reserved(manager.try_acquire("redlock-fence:x", TTL).await),
        "redlock-fence:"
    );
    assert_eq!(
        reserved(
            manager
                .try_acquire_many(&["a", "redlock-queue:b"], TTL)
                .await
        ),
        "redlock-queue:"
    );
    assert_eq!(
        reserved(
            manager
                .try_acquire_read("redlock-writer-waiting:c", TTL)
                .await
        ),
        "redlock-writer-waiting:"
    );
    assert_eq!(
        reserved(
            manager
                .try_acquire_write("redlock-queue-lease:d", TTL)
                .await
        ),
        "redlock-queue-lease:"
    );
    assert_eq!(
        reserved(
            manager
                .try_acquire_permit("redlock-node-marker", 2, TTL)
                .await
        ),
        "redlock-node-marker"
    );
    let campaign = manager
        .campaign_with("redlock-fence:e", "me", TTL, &Retry::once())
        .await
        .map(|_| ());
    assert!(
        matches!(
            campaign,
            Err(Error::Config(ConfigError::ReservedName { .. }))
        ),
        "{campaign:?}"
    );
    // Nothing was sent: the node's own keys are as they were.
    let marker = cluster
        .node(0)
        .cli(&["GET", "redlock-node-marker"])
        .unwrap();
    assert!(!marker.is_empty(), "the marker is intact");
    for key in [
        "redlock-fence:x",
        "redlock-queue:b",
        "redlock-writer-waiting:c",
    ] {
        assert_eq!(cluster.node(0).cli(&["EXISTS", key]).unwrap(), "0", "{key}");
    }
    // A name that merely looks like ours is a resource.
    manager
        .try_acquire("redlock-demo", TTL)
        .await
        .expect("not reserved")
        .release()
        .await;
}
