//! Read-write locks: readers together, a writer alone, writers not starved by a stream of
//! readers, tokens that order conflicting holders, and readers that die leaving nothing behind.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{cluster, connected, keeping_alive, patient, value_on};
use redquorum::{Cause, Retry};

const TTL: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_share_and_a_writer_is_alone() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        let mut reader = redlock.try_acquire_read("doc", TTL).await.unwrap();
        assert!(reader.is_read() && reader.fence().await.ok().is_some());
        readers.push(reader);
    }
    let refused = redlock.try_acquire_write("doc", TTL).await.unwrap_err();
    assert!(refused.is_busy(), "{refused}");
    // A plain lock of the same name is refused too, as another client's `SET NX` would be; the
    // readers hold it, so it is busy (not a key of another type).
    let plain = redlock.try_acquire("doc", TTL).await.unwrap_err();
    assert_eq!(plain.cause(), Some(Cause::Busy), "{plain}");

    for reader in readers {
        assert_eq!(reader.release().await.cause(), None);
    }
    // The last reader's release removes the key: nothing is left behind.
    for node in cluster.iter() {
        assert_eq!(node.cli(&["EXISTS", "doc"]).unwrap(), "0");
    }
    let writer = redlock.try_acquire_write("doc", TTL).await.unwrap();
    assert!(!writer.is_read());
    // The writer's key is a lock's key: the standard format, holding its value (on every node,
    // once the won round's request to the slowest one has landed).
    redlock.settle().await;
    for node in cluster.iter() {
        assert_eq!(value_on(node, "doc").as_deref(), Some(writer.value()));
    }
    assert!(
        redlock
            .try_acquire_read("doc", TTL)
            .await
            .unwrap_err()
            .is_busy()
    );
    assert!(
        redlock
            .try_acquire_write("doc", TTL)
            .await
            .unwrap_err()
            .is_busy()
    );
    writer.release().await;
    let reader = redlock.try_acquire_read("doc", TTL).await.unwrap();
    reader.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_never_overlap_under_contention() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let readers = Arc::new(AtomicUsize::new(0));
    let writers = Arc::new(AtomicUsize::new(0));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for task in 0..8 {
        let (redlock, readers, writers, most_readers) = (
            redlock.clone(),
            Arc::clone(&readers),
            Arc::clone(&writers),
            Arc::clone(&most_readers),
        );
        tasks.push(tokio::spawn(async move {
            for round in 0..12 {
                let write = (task + round) % 4 == 0;
                if write {
                    let lock = redlock
                        .acquire_write_with("shared", TTL, &patient())
                        .await
                        .unwrap();
                    assert_eq!(writers.fetch_add(1, Ordering::SeqCst), 0, "two writers");
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer with readers");
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    assert_eq!(readers.load(Ordering::SeqCst), 0, "a writer with readers");
                    writers.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(lock.release().await.cause(), None);
                } else {
                    let lock = redlock
                        .acquire_read_with("shared", TTL, &patient())
                        .await
                        .unwrap();
                    let now = readers.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now, Ordering::SeqCst);
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                    tokio::time::sleep(Duration::from_millis(4)).await;
                    assert_eq!(writers.load(Ordering::SeqCst), 0, "a reader with a writer");
                    readers.fetch_sub(1, Ordering::SeqCst);
                    assert_eq!(lock.release().await.cause(), None);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(
        most_readers.load(Ordering::SeqCst) >= 2,
        "readers really shared the lock"
    );
}

/// Readers that keep the lock held without a gap (each takes it before the previous one leaves)
/// would starve a writer that only tries when it is free; the waiting writer keeps new readers
/// out, so the readers drain and it gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_of_readers_does_not_starve_a_writer() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let stop = Arc::new(AtomicBool::new(false));
    let reading = Arc::new(AtomicUsize::new(0));
    let mut streams = Vec::new();
    for stream in 0..3u64 {
        let (redlock, stop, reading) = (redlock.clone(), Arc::clone(&stop), Arc::clone(&reading));
        streams.push(tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(40 * stream)).await;
            let every_5ms = Retry::forever()
                .delay(Duration::from_millis(5))
                .max_wait(Duration::from_secs(30));
            let mut reads = 0;
            while !stop.load(Ordering::SeqCst) && reads < 2000 {
                let Ok(lock) = redlock.acquire_read_with("hot", TTL, &every_5ms).await else {
                    break;
                };
                reading.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(120)).await;
                reading.fetch_sub(1, Ordering::SeqCst);
                lock.release().await;
                reads += 1;
            }
            reads
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let writer = redlock
        .acquire_write_with("hot", TTL, &patient())
        .await
        .expect("the writer gets in while readers keep coming");
    let waited = started.elapsed();
    assert_eq!(
        reading.load(Ordering::SeqCst),
        0,
        "a reader inside with the writer"
    );
    writer.release().await;
    stop.store(true, Ordering::SeqCst);
    let mut reads = 0;
    for stream in streams {
        reads += stream.await.unwrap();
    }
    assert!(reads >= 3, "the readers read: {reads}");
    // Generous: the readers drain within their 120 ms hold; a starved writer waits the minute.
    assert!(
        waited < Duration::from_secs(20),
        "the writer waited {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_order_every_writer_after_the_readers_before_it_and_the_other_way_round() {
    let cluster = cluster(3);
    let redlock = connected(&cluster).await;
    let mut first_writer = redlock.try_acquire_write("ledger", TTL).await.unwrap();
    let w1 = first_writer.fence().await.unwrap();
    first_writer.release().await;
    let mut a = redlock.try_acquire_read("ledger", TTL).await.unwrap();
    let mut b = redlock.try_acquire_read("ledger", TTL).await.unwrap();
    let (ra, rb) = (a.fence().await.unwrap(), b.fence().await.unwrap());
    assert!(ra >= w1 && rb >= w1, "readers {ra}, {rb} after writer {w1}");
    a.release().await;
    b.release().await;
    let mut second_writer = redlock.try_acquire_write("ledger", TTL).await.unwrap();
    let w2 = second_writer.fence().await.unwrap();
    assert!(
        w2 > ra && w2 > rb && w2 > w1,
        "writer {w2} after {ra}, {rb}, {w1}"
    );
    second_writer.release().await;
    let mut c = redlock.try_acquire_read("ledger", TTL).await.unwrap();
    assert!(c.fence().await.unwrap() >= w2);
    c.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_is_kept_alive_and_a_dead_reader_only_blocks_for_its_ttl() {
    let cluster = cluster(3);
    // A short TTL of a second, with its node timeout: any extension that fails is a loss.
    let redlock = keeping_alive(&cluster).await;
    let short = Duration::from_secs(1);
    let kept = redlock
        .try_acquire_read("rw", short)
        .await
        .unwrap()
        .keep_alive(short);
    // A reader that dies: never released, never extended.
    let dead = redlock
        .try_acquire_read("rw", short)
        .await
        .unwrap()
        .detach();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        kept.is_valid() && kept.extensions() >= 2,
        "{:?}",
        kept.loss_reason()
    );
    // The dead reader's entry is expired; the kept one holds the lock alone.
    assert!(dead.is_lost());
    assert!(
        redlock
            .try_acquire_write("rw", TTL)
            .await
            .unwrap_err()
            .is_busy()
    );
    kept.release().await.unwrap();
    // With both gone, the writer gets in at once, and the set is gone.
    let writer = redlock.try_acquire_write("rw", TTL).await.unwrap();
    redlock.settle().await;
    for node in cluster.iter() {
        assert_eq!(node.cli(&["TYPE", "rw"]).unwrap(), "string");
    }
    writer.release().await;
}
