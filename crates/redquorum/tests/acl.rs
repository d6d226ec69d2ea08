//! Running as an ACL user allowed exactly what the library needs: the two ACLs `docs/acl.md`
//! publishes (plain locks; every feature) are enough, each tested here verbatim, and a user
//! missing a permission gets an error that names what is missing.

mod common;

use std::time::Duration;

use common::{PATIENT_NODE_TIMEOUT, apply_acl, as_acl_user, cluster, eventually};
use redquorum::Retry;

/// What `docs/acl.md` publishes for plain locks on resources `lock:*` (fencing, notification and
/// fair waiting off; the quarantine on, as by default).
const PLAIN_ACL: &str = "ACL SETUSER locker on >CHANGE-ME resetkeys ~lock:* ~redlock-node-marker resetchannels -@all +set +get +del +exists +pexpire +pttl +type +time +eval +evalsha +script|load +info +config|get +ping";

/// What `docs/acl.md` publishes for every feature on resources `lock:*`: fencing tokens,
/// notification of releases, fair waiting.
const FULL_ACL: &str = "ACL SETUSER locker on >CHANGE-ME resetkeys ~lock:* ~redlock-fence:lock:* ~redlock-queue:lock:* ~redlock-queue-lease:lock:* ~redlock-writer-waiting:lock:* ~redlock-node-marker resetchannels &redlock-released:lock:* -@all +set +get +del +exists +pexpire +pttl +type +time +incr +zadd +zrange +zrangebyscore +zremrangebyscore +zrem +zscore +zcard +publish +subscribe +unsubscribe +eval +evalsha +script|load +info +config|get +ping +client|tracking +hello";

#[test]
fn the_readme_publishes_these_acls_verbatim() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/acl.md"))
        .expect("README");
    assert!(readme.contains(PLAIN_ACL), "the plain ACL is published");
    assert!(readme.contains(FULL_ACL), "the full ACL is published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_acl_is_enough_for_plain_locks() {
    let cluster = cluster(3);
    apply_acl(&cluster, PLAIN_ACL, "pw-plain");
    // The guard below keeps a 2 s lock alive, and any extension that fails is a loss: a node
    // timeout of a second is above any answer a healthy node gives on a loaded machine, and the
    // first extension (a third into the 1.98 s validity) still ends by 1.66 s, before the lock is
    // given up a tenth of the validity before its deadline (1.78 s).
    let redlock = as_acl_user(&cluster, "pw-plain")
        .node_timeout(Duration::from_secs(1))
        .fencing(false)
        .notify(false)
        .build()
        .expect("valid");
    // Connected first: then every node's `SET` is queued before the round is decided, and the
    // status below may expect the lock on all three (a won round does not wait for a node
    // still connecting).
    let connected = redlock.connect().await;
    assert!(
        connected.iter().all(|r| r.reply.is_granted()),
        "the user passes every node's health check: {connected:?}"
    );
    let mut lock = redlock
        .try_acquire("lock:1", Duration::from_secs(5))
        .await
        .expect("locks");
    lock.extend(Duration::from_secs(5)).await.expect("extends");
    let status = redlock.status("lock:1").await;
    assert!(
        status.iter().all(|s| s.value() == Some(lock.value())),
        "{status:?}"
    );
    assert_eq!(lock.release().await.confirmed, 3);
    let guard = redlock
        .try_acquire("lock:2", Duration::from_secs(2))
        .await
        .expect("locks")
        .keep_alive(Duration::from_secs(2));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!guard.is_lost(), "{:?}", guard.loss_reason());
    guard.release().await.expect("kept and released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_full_acl_is_enough_for_every_feature() {
    let cluster = cluster(3);
    apply_acl(&cluster, FULL_ACL, "pw-full");
    let redlock = as_acl_user(&cluster, "pw-full")
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .fair(true)
        .build()
        .expect("valid");
    let mut first = redlock
        .try_acquire("lock:job", Duration::from_secs(10))
        .await
        .expect("locks");
    assert!(first.fence().await.ok().is_some(), "fenced");
    // A waiter that only hears about the release (its retry delay is far longer than the test).
    let waiter = redlock.clone();
    let waiting = tokio::spawn(async move {
        let slow = Retry::forever()
            .delay(Duration::from_secs(30))
            .max_wait(Duration::from_secs(60));
        waiter
            .acquire_with("lock:job", Duration::from_secs(10), &slow)
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the lock is busy");
    let first_token = first.fence().await.ok();
    first.release().await;
    let woke = eventually(Duration::from_secs(10), || waiting.is_finished()).await;
    assert!(
        woke,
        "the waiter was woken by the release, not by its 30 s retry"
    );
    let mut second = waiting.await.expect("task").expect("the waiter got it");
    assert!(second.fence().await.ok() > first_token, "tokens increase");
    second.release().await;

    // The other primitives, under names the ACL's patterns cover.
    let ttl = Duration::from_secs(10);
    let reader = redlock
        .try_acquire_read("lock:doc", ttl)
        .await
        .expect("a reader");
    let refused = redlock
        .try_acquire_write("lock:doc", ttl)
        .await
        .expect_err("readers hold it");
    assert!(refused.is_busy(), "{refused}");
    reader.release().await;
    let writer = redlock
        .try_acquire_write("lock:doc", ttl)
        .await
        .expect("the writer");
    writer.release().await;
    let permit = redlock
        .try_acquire_permit("lock:pool", 2, ttl)
        .await
        .expect("a permit");
    permit.release().await;
    let mut leading = redlock
        .campaign("lock:leader", "me", ttl)
        .await
        .expect("leads");
    let seen = redlock
        .leader("lock:leader")
        .await
        .expect("a leader is seen");
    assert_eq!(
        (seen.identity.as_str(), seen.term),
        ("me", leading.fence().await.ok())
    );
    leading.release().await.expect("resigned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_permission_is_named() {
    let cluster = cluster(3);
    // Fencing on (the default), but the user may not touch the fencing counters.
    let no_fence = FULL_ACL.replace(" ~redlock-fence:lock:*", "");
    apply_acl(&cluster, &no_fence, "pw-nofence");
    let redlock = as_acl_user(&cluster, "pw-nofence")
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid");
    // The acquisition touches no counter (`fencing` invariant 8): the token, asked for, is
    // refused.
    let mut lock = redlock
        .try_acquire("lock:1", Duration::from_secs(5))
        .await
        .expect("the lock alone is allowed");
    let err = lock
        .fence()
        .await
        .expect_err("the fencing counter is refused");
    lock.release().await;
    assert!(matches!(err, redquorum::Error::NotFenced { .. }), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("NOPERM") && shown.contains("redlock-fence:lock:1"),
        "the refused key is named: {shown}"
    );
    assert!(!shown.contains("pw-nofence"), "no password: {shown}");

    // The quarantine's health check needs INFO.
    let no_info = FULL_ACL.replace(" +info", "");
    apply_acl(&cluster, &no_info, "pw-noinfo");
    let redlock = as_acl_user(&cluster, "pw-noinfo")
        .node_timeout(PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid");
    let err = redlock
        .try_acquire("lock:1", Duration::from_secs(5))
        .await
        .expect_err("INFO is refused");
    let shown = err.to_string();
    assert!(shown.contains("+info"), "the permission is named: {shown}");
}
