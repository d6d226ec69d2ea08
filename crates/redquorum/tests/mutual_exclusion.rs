//! Many contenders, one lock: a non-atomic read–modify–write inside the lock never loses an
//! update, and no two holders are ever inside at once.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::{cluster, manager, patient};

const TASKS: u64 = 8;
const ROUNDS: u64 = 25;

async fn contend(nodes: usize) {
    let cluster = cluster(nodes);
    let counter = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));

    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        // Each task has its own manager, as separate processes would.
        let redlock = manager(&cluster);
        let (counter, inside, overlaps) = (counter.clone(), inside.clone(), overlaps.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let lock = redlock
                    .acquire_with("counter", Duration::from_secs(10), &patient())
                    .await
                    .expect("acquire eventually");
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                // Read, yield to let others run, write back: loses updates without the lock.
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_micros(200)).await;
                counter.store(seen + 1, Ordering::SeqCst);
                inside.fetch_sub(1, Ordering::SeqCst);
                let released = lock.release().await;
                assert!(
                    released.confirmed > nodes / 2,
                    "release confirmed on a majority: {released:?}"
                );
            }
        }));
    }
    for task in tasks {
        task.await.expect("contender finished");
    }
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two holders overlapped");
    assert_eq!(
        counter.load(Ordering::SeqCst),
        TASKS * ROUNDS,
        "updates were lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_instance_counter_is_exact() {
    contend(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_counter_is_exact() {
    contend(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_counter_is_exact() {
    contend(5).await;
}
