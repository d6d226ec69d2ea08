//! A held lock shared by a foreign language's objects (`SharedLock`, what the Python and Node
//! packages wrap): its watch ends once, with a loss or with the handle's end, never both; a
//! release is no loss; what a binding notes about a failed extension is there before any watch
//! sees the loss; and an operation the handle's state forbids is refused, not tried.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{cluster, connected, value_on};
use redquorum::{Acquired, HandleError, HoldOptions, SharedLock, Watched};

/// Generous bound for what happens in the background on a busy machine.
const WITHIN: Duration = Duration::from_secs(10);

/// A shared handle of a fresh lock on `r`, as a binding makes one from what it acquired.
async fn shared_lock(redlock: &redquorum::Redlock, ttl: Duration) -> SharedLock {
    let lock = redlock.acquire("r", ttl).await.expect("free");
    SharedLock::new(Acquired::Lock(lock))
}

async fn watched(shared: &SharedLock) -> Watched {
    tokio::time::timeout(WITHIN, shared.watch())
        .await
        .expect("the watch ends")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_ends_with_the_loss_when_the_validity_runs_out() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let shared = shared_lock(&redlock, Duration::from_millis(300)).await;
    assert_eq!(watched(&shared).await, Watched::Lost);
    assert!(shared.info().is_lost());
    assert!(!shared.is_ended(), "a loss is not the handle's end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_ends_the_watch_is_no_loss_and_cannot_happen_twice() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let shared = shared_lock(&redlock, Duration::from_secs(10)).await;
    let watch = tokio::spawn({
        let shared = shared.clone();
        async move { watched(&shared).await }
    });
    let released = shared.release().await.expect("held").expect("released");
    assert!(released.cause().is_none(), "{released:?}");
    assert_eq!(watch.await.expect("the watch task"), Watched::Ended);
    assert_eq!(value_on(cluster.node(0), "r"), None);
    assert_eq!(
        shared.release().await.expect_err("released already"),
        HandleError::Released("r".into())
    );
    assert!(matches!(
        shared.extend(Duration::from_secs(1)).await,
        Err(HandleError::Released(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_binding_notes_about_a_failed_extension_is_there_before_the_loss_is_seen() {
    let mut cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let shared = shared_lock(&redlock, Duration::from_secs(10)).await;
    let noted: Arc<Mutex<Option<String>>> = Arc::default();
    // A watch on another task, as a binding's loss watcher runs: when it sees the loss, the
    // note must already be there.
    let watch = tokio::spawn({
        let (shared, noted) = (shared.clone(), Arc::clone(&noted));
        async move {
            let watched = watched(&shared).await;
            (watched, noted.lock().expect("note").clone())
        }
    });
    for i in 0..cluster.len() {
        cluster
            .node(i)
            .cli(&["DEL", "r"])
            .expect("somebody deletes our keys");
    }
    let extended = shared
        .extend_noting(Duration::from_secs(10), {
            let noted = Arc::clone(&noted);
            move |result, info| {
                if let (Err(e), true) = (result, info.is_lost()) {
                    *noted.lock().expect("note") = Some(e.to_string());
                }
            }
        })
        .await
        .expect("held");
    assert!(extended.is_err(), "the keys are gone");
    let (watched, note) = watch.await.expect("the watch task");
    assert_eq!(watched, Watched::Lost);
    assert!(note.is_some(), "the watch saw the loss before the note");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_handle_refuses_extensions_and_a_second_keep_alive() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let shared = shared_lock(&redlock, Duration::from_secs(1)).await;
    let runtime = tokio::runtime::Handle::current();
    shared
        .keep_alive(&runtime, Duration::from_secs(1), HoldOptions::new())
        .expect("kept alive");
    assert_eq!(
        shared.keep_alive(&runtime, Duration::from_secs(1), HoldOptions::new()),
        Err(HandleError::AlreadyKeptAlive("r".into()))
    );
    assert!(matches!(
        shared.extend(Duration::from_secs(1)).await,
        Err(HandleError::KeptAlive(_))
    ));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(!shared.info().is_lost(), "kept alive past its TTL");
    assert!(shared.extensions() >= 1);
    let watch = tokio::spawn({
        let shared = shared.clone();
        async move { watched(&shared).await }
    });
    shared.release().await.expect("held").expect("released");
    assert_eq!(
        watch.await.expect("the watch task"),
        Watched::Ended,
        "a guard's token fires on its release: that is the end, not a loss"
    );
}
