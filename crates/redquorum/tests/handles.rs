//! The handle API: what a `Lock` and a `Guard` know about themselves is one `LockInfo`, and a
//! lock handed to another process with `detach` stays held, on every node, until released by
//! value.

mod common;

use std::time::Duration;

use common::{cluster, connected, value_on};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_lock_stays_held_on_every_node_until_released_by_value() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let lock = redlock.acquire("res", TTL).await.unwrap();
    let info = lock.detach();
    assert!(info.is_valid(), "detaching changes nothing on the servers");
    // The handle is gone and nothing released it: after the acquisition's stragglers land, every
    // node holds the value.
    redlock.settle().await;
    for i in 0..3 {
        assert_eq!(
            value_on(cluster.node(i), "res").as_deref(),
            Some(info.value()),
            "node {i}"
        );
    }
    let other = connected(&cluster).await;
    let err = other.try_acquire("res", TTL).await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    // Another process that knows the value releases it.
    let released = other.release_value(info.resource(), info.value()).await;
    assert_eq!(released.confirmed, 3);
    assert_eq!(released.cause(), None, "a quorum confirmed");
    assert!(other.try_acquire("res", TTL).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_and_its_guard_tell_the_same_story_through_one_info() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut lock = redlock.acquire_many(&["b", "a"], TTL).await.unwrap();
    let fence = Some(lock.fence().await.expect("a token, issued on request"));
    let (value, resources) = (lock.value().to_owned(), lock.resources().to_vec());
    assert_eq!(resources, ["a", "b"]);
    assert!(
        lock.lost_token().is_none(),
        "nobody keeps a plain lock alive"
    );
    let guard = lock.keep_alive(TTL);
    assert_eq!(guard.value(), value);
    // The token issued to the lock is the guard's, without asking again.
    assert_eq!(redquorum::LockInfo::fence(&guard), fence);
    assert_eq!(guard.resources(), resources);
    assert!(guard.is_valid() && !guard.is_lost());
    let info = redquorum::LockInfo::clone(&guard);
    let token = info.lost_token().expect("a kept-alive lock has a token");
    assert!(!token.is_cancelled());
    guard.release().await.unwrap();
    assert!(
        token.is_cancelled() && info.is_lost(),
        "a released guard's info is over"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_found_nothing_says_not_held() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let released = redlock.release_value("res", "not-a-value").await;
    assert_eq!(released.confirmed, 0);
    assert_eq!(released.cause(), Some(redquorum::Cause::NotHeld));
}
