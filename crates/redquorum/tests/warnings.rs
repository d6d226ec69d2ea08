//! What the library warns an operator about, as the log shows it. One test in this binary: the
//! subscriber is global to the process.

mod common;

use std::time::Duration;

use common::{Captured, redis_cluster};
use redquorum::Redlock;

/// The cluster ACL of `docs/cluster.md`, with the password the test sets.
const CLUSTER_ACL: &str = "ACL SETUSER locker on >pw-cluster resetkeys ~lock:* ~redlock-fence:{*}lock:* ~redlock-node-marker{*} resetchannels -@all +set +get +del +exists +pexpire +pttl +type +time +eval +evalsha +script|load +info +config|get +ping +cluster|nodes";

/// Review item: a Redis Cluster master whose `CONFIG GET` is refused hides its
/// `cluster-node-timeout`, which lengthens the quarantine after a failover: the library assumes
/// Redis's default and says so once per master, naming `+config|get`. With the permission, not a
/// word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_that_hides_its_node_timeout_is_reported_once() {
    let captured = Captured::default();
    tracing_subscriber::fmt()
        .with_env_filter("redquorum=warn")
        .with_writer(captured.clone())
        .with_ansi(false)
        .init();
    let mut cluster = redis_cluster(3, 0);
    let warnings = |text: &str| {
        text.lines()
            .filter(|l| l.contains("cluster-node-timeout") && l.contains("+config|get"))
            .count()
    };
    for (user, acl) in [
        ("locker", CLUSTER_ACL.to_owned()),
        (
            "noconfig",
            CLUSTER_ACL
                .replace(" +config|get", "")
                .replace("SETUSER locker", "SETUSER noconfig"),
        ),
    ] {
        let args: Vec<&str> = acl.split(' ').collect();
        for i in 0..cluster.len() {
            cluster.node(i).cli(&args).expect("ACL SETUSER");
        }
        let url = cluster.url().replace(
            "redis+cluster://",
            &format!("redis+cluster://{user}:pw-cluster@"),
        );
        let redlock = Redlock::builder([url]).build().expect("valid");
        let look_at_every_master = || async {
            for i in 0..9 {
                redlock.status(&format!("lock:{i}")).await;
            }
        };
        look_at_every_master().await;
        let seen = warnings(&captured.text());
        // Looked at again: no more warnings.
        look_at_every_master().await;
        assert_eq!(warnings(&captured.text()), seen, "{}", captured.text());
        match user {
            "locker" => {
                assert_eq!(seen, 0, "{}", captured.text());
                let lock = redlock
                    .try_acquire("lock:0", Duration::from_secs(5))
                    .await
                    .expect("durable by its configuration, read");
                assert!(lock.release().await.cause().is_none());
            }
            _ => assert!(
                (1..=3).contains(&seen),
                "at most one per master: {}",
                captured.text()
            ),
        }
    }
}
