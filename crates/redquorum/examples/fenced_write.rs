//! A protected resource that checks fencing tokens, and why it needs to.
//!
//! Starts three local lock nodes and one storage node. Holder A takes the lock, then "pauses"
//! (sleeps) past its validity; holder B takes the lock and writes; A wakes up and writes as if it
//! still held the lock. The storage refuses A's write because its token is smaller than B's.
//!
//! Run: `cargo run -p redquorum --example fenced_write`

use std::time::Duration;

use redquorum::{Redlock, Retry};
use redquorum_nodes::{Cluster, NodeSpec, Persistence, RedisNode};

/// The storage's rule, atomically: refuse a write whose token is below the largest seen so far.
const CHECKED_WRITE: &str = include_str!("checked_write.lua");

async fn write(storage: &redis::Client, token: u64, value: &str) -> redis::RedisResult<bool> {
    let mut conn = storage.get_multiplexed_async_connection().await?;
    let applied: i64 = redis::Script::new(CHECKED_WRITE)
        .key("data")
        .key("data:fence")
        .arg(token)
        .arg(value)
        .invoke_async(&mut conn)
        .await?;
    Ok(applied == 1)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let nodes = Cluster::start(3, NodeSpec::new().persistence(Persistence::AofAlways))?;
    let storage_node = RedisNode::start(NodeSpec::new())?;
    let storage = redis::Client::open(storage_node.url())?;
    let (a, b) = (
        Redlock::builder(nodes.urls()).build()?,
        Redlock::builder(nodes.urls()).build()?,
    );

    let mut a_lock = a.try_acquire("report", Duration::from_millis(300)).await?;
    let a_token = a_lock
        .fence()
        .await
        .ok()
        .ok_or("fencing is on by default")?;
    println!(
        "A holds the lock with token {a_token}; writes: {}",
        write(&storage, a_token, "A1").await?
    );

    tokio::time::sleep(Duration::from_millis(500)).await; // A pauses past its validity
    println!("A paused; its lock is valid: {}", a_lock.is_valid());

    let retry = Retry::forever().max_wait(Duration::from_secs(10));
    let mut b_lock = b
        .acquire_with("report", Duration::from_secs(5), &retry)
        .await?;
    let b_token = b_lock
        .fence()
        .await
        .ok()
        .ok_or("fencing is on by default")?;
    println!(
        "B holds the lock with token {b_token}; writes: {}",
        write(&storage, b_token, "B1").await?
    );

    let stale = write(&storage, a_token, "A2 (stale)").await?;
    println!("A wakes up and writes with token {a_token}: accepted = {stale}");
    b_lock.release().await;
    if stale {
        return Err("the storage accepted a stale write".into());
    }
    println!("the storage refused the stale write: fencing works");
    Ok(())
}
