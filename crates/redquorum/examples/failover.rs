//! How long a failover leaves clients without any lock: N Sentinel nodes (a primary, one
//! replica, three sentinels each), the first one's primary killed with SIGKILL, and a lock on a
//! fresh resource tried every 20 ms until one is granted.
//!
//! ```text
//! cargo run --release -p redquorum --example failover -- --nodes 1
//! cargo run --release -p redquorum --example failover -- --nodes 3 --max-ttl 30s
//! ```
//!
//! Two clients try: one that used the nodes before the failover (it saw the replica caught up),
//! and one that starts after it (a new manager per attempt, as a new process would be). Each
//! line gives the time from the kill to the promotion (every sentinel naming the replica, which
//! says `role:master`), and from the promotion to each client's first lock. Bounded: each wait
//! gives up after `--give-up`.

use std::time::{Duration, Instant};

use clap::Parser;
use redquorum::Redlock;
use redquorum_nodes::{NodeSpec, Persistence, SentinelGroup};

#[derive(Parser)]
struct Args {
    /// Sentinel nodes (each a primary, one replica, three sentinels).
    #[arg(long, default_value_t = 1)]
    nodes: usize,
    /// The clients' max_ttl (the restart quarantine), in seconds.
    #[arg(long, default_value = "30s", value_parser = seconds)]
    max_ttl: Duration,
    /// How long a client may wait for its first lock after the promotion.
    #[arg(long, default_value = "60s", value_parser = seconds)]
    give_up: Duration,
    /// How long the servers run before the kill: a promoted replica younger than max_ttl holds
    /// a client that starts after the failover to its uptime.
    #[arg(long, default_value = "0s", value_parser = seconds)]
    age: Duration,
}

fn seconds(text: &str) -> Result<Duration, String> {
    let number = text.strip_suffix('s').unwrap_or(text);
    number
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{text:?} is not a number of seconds"))
}

fn main() {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let spec = NodeSpec::new().persistence(Persistence::AofAlways);
    let mut groups: Vec<SentinelGroup> = (0..args.nodes)
        .map(|_| SentinelGroup::start(1, 3, spec.clone()).expect("a Sentinel group"))
        .collect();
    let urls: Vec<String> = groups.iter().map(SentinelGroup::url).collect();
    let manager = || {
        Redlock::builder(urls.clone())
            .max_ttl(args.max_ttl)
            .build()
            .expect("valid configuration")
    };
    let used = manager();
    runtime.block_on(async {
        let lock = used.acquire("warm-up", Duration::from_secs(1)).await;
        let lock = lock.expect("a first lock");
        assert!(lock.release().await.cause().is_none());
    });
    std::thread::sleep(args.age);

    let killed = Instant::now();
    groups[0].data_node(0).kill().expect("SIGKILL the primary");
    let waiting = std::thread::spawn({
        let urls = urls.clone();
        let give_up = args.give_up;
        let max_ttl = args.max_ttl;
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a Tokio runtime");
            runtime.block_on(async move {
                let fresh = || {
                    Redlock::builder(urls.clone())
                        .max_ttl(max_ttl)
                        .build()
                        .expect("valid configuration")
                };
                let first = |redlock: Option<Redlock>| {
                    let fresh = &fresh;
                    async move {
                        for i in 0u64.. {
                            if killed.elapsed() > give_up {
                                return None;
                            }
                            let redlock = redlock.clone().unwrap_or_else(fresh);
                            let resource = format!("failover:{i}");
                            if let Ok(lock) =
                                redlock.try_acquire(&resource, Duration::from_secs(1)).await
                            {
                                let at = Instant::now();
                                let _ = lock.release().await;
                                return Some(at);
                            }
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        None
                    }
                };
                let (used_at, new_at) = tokio::join!(first(Some(used)), first(None));
                (used_at, new_at)
            })
        }
    });
    let promoted = groups[0]
        .await_new_primary(0)
        .map(|_| Instant::now())
        .expect("a failover");
    let (used_at, new_at) = waiting.join().expect("the clients' thread");
    let after = |at: Option<Instant>| {
        at.map_or_else(
            || format!("none within {:?}", args.give_up),
            |at| {
                let ms = at.saturating_duration_since(promoted).as_secs_f64() * 1e3;
                let since_kill = at.saturating_duration_since(killed).as_secs_f64() * 1e3;
                format!("{ms:.0} ms after the promotion ({since_kill:.0} ms after the kill)")
            },
        )
    };
    println!(
        "nodes {}, max_ttl {:?}, servers {:?} old at the kill: promoted {:.0} ms after the kill; \
         first lock of the client that used the nodes: {}; of a client started after: {}",
        args.nodes,
        args.max_ttl,
        args.age,
        promoted.duration_since(killed).as_secs_f64() * 1e3,
        after(used_at),
        after(new_at),
    );
}
