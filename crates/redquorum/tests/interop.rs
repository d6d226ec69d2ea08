//! The wire format is the standard one: plain clients (here `redis-cli`, as any Redlock client in
//! another language would) and we respect each other's locks.

mod common;

use std::time::Duration;

use common::{cluster, connected, value_on};
use redquorum::Reply;

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_set_nx_px_lock_blocks_us() {
    let mut cluster = cluster(3);
    for i in 0..3 {
        let ok = cluster
            .node(i)
            .cli(&["SET", "res", "other", "NX", "PX", "10000"])
            .unwrap();
        assert_eq!(ok, "OK");
    }
    let redlock = connected(&cluster).await;
    let err = redlock.try_acquire("res", TTL).await.unwrap_err();
    assert!(err.is_busy(), "{err}");
    // And the other client's standard compare-and-delete release still works on its key:
    // we never changed it.
    for i in 0..3 {
        assert_eq!(value_on(cluster.node(i), "res").as_deref(), Some("other"));
    }
    // We can release a foreign lock when we know its value, as the CLI's `release` does.
    assert_eq!(redlock.release_value("res", "other").await.confirmed, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_lock_blocks_a_plain_set_nx() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let lock = redlock.try_acquire("res", TTL).await.unwrap();
    // The won round did not wait for the slowest node: a plain SET NX could beat ours there.
    redlock.settle().await;
    for i in 0..3 {
        let node = cluster.node(i);
        // redis-cli prints nothing for a nil reply: SET NX was refused.
        assert_eq!(
            node.cli(&["SET", "res", "other", "NX", "PX", "10000"])
                .unwrap(),
            ""
        );
        // The key is a plain string holding our random value, with a PX expiry.
        assert_eq!(node.cli(&["TYPE", "res"]).unwrap(), "string");
        assert_eq!(value_on(node, "res").as_deref(), Some(lock.value()));
    }
    // A plain client's compare-and-delete script releases our lock given our value.
    let script = r#"if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end"#;
    let value = lock.value().to_owned();
    lock.detach(); // no background release: the plain script must do it
    for i in 0..3 {
        let node = cluster.node(i);
        assert_eq!(
            node.cli(&["EVAL", script, "1", "res", &value]).unwrap(),
            "1"
        );
        assert_eq!(value_on(node, "res"), None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_reported_as_wrongtype() {
    let mut cluster = cluster(3);
    for i in 0..3 {
        cluster.node(i).cli(&["HSET", "res", "field", "v"]).unwrap();
    }
    let redlock = connected(&cluster).await;
    let err = redlock.try_acquire("res", TTL).await.unwrap_err();
    let message = err.to_string();
    assert!(message.contains("WRONGTYPE"), "{message}");
    let redquorum::Error::NotAcquired { failure, .. } = &err else {
        panic!("{err:?}");
    };
    assert!(
        failure
            .replies
            .iter()
            .all(|r| matches!(&r.reply, Reply::WrongType(e) if e.starts_with("WRONGTYPE"))),
        "{message}"
    );
    assert_eq!(
        err.cause(),
        Some(redquorum::Cause::WrongType {
            node: failure.replies[0].node.clone()
        }),
        "the library says why: {message}"
    );
    assert!(!err.is_busy(), "a hash is not a busy lock: {message}");
    for i in 0..3 {
        assert_eq!(
            cluster.node(i).cli(&["TYPE", "res"]).unwrap(),
            "hash",
            "untouched"
        );
    }
}
