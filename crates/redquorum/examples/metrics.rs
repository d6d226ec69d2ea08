//! The library's metrics served in Prometheus format, as an application would do it: install a
//! recorder from `metrics-exporter-prometheus`, build the manager, lock away.
//!
//! ```text
//! cargo run -p redquorum --example metrics                       # 3 local nodes of its own
//! cargo run -p redquorum --example metrics -- --servers redis://10.0.0.1,redis://10.0.0.2,redis://10.0.0.3
//! curl -s http://127.0.0.1:9464/metrics | grep redquorum_         # while it serves
//! ```
//!
//! It takes `--cycles` locks (half of them on a resource that is busy, to show both outcomes),
//! then keeps serving the figures for `--serve-for` and exits.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use metrics_exporter_prometheus::PrometheusBuilder;
use redquorum::Redlock;
use redquorum_nodes::{Cluster, NodeSpec, Persistence};

#[derive(Debug, Parser)]
#[command(about = "Serves redquorum's metrics in Prometheus format while locking")]
struct Args {
    /// Redis masters, comma-separated; default: 3 local nodes started for the run
    #[arg(long, env = "REDLOCK_SERVERS", hide_env_values = true)]
    servers: Option<String>,
    /// Where the Prometheus page is served
    #[arg(long, default_value = "127.0.0.1:9464")]
    listen: SocketAddr,
    /// Lock + release cycles to run (every other one finds the lock busy)
    #[arg(long, default_value_t = 200)]
    cycles: u32,
    /// How long to keep serving after the cycles, in seconds
    #[arg(long, default_value_t = 30)]
    serve_for: u64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    PrometheusBuilder::new()
        .with_http_listener(args.listen)
        .install()?;
    // Local nodes unless servers were named; stopped when this returns.
    let (_local, servers) = match args.servers {
        Some(servers) => (None, servers),
        None => {
            let cluster = Cluster::start(3, NodeSpec::new().persistence(Persistence::AofAlways))?;
            let servers = cluster.servers();
            (Some(cluster), servers)
        }
    };
    let manager = Redlock::from_list(&servers)?;
    let ttl = Duration::from_secs(10);
    let held = manager.acquire("metrics-example:held", ttl).await?;
    for i in 0..args.cycles {
        let resource = if i % 2 == 0 {
            format!("metrics-example:{i}")
        } else {
            "metrics-example:held".to_owned()
        };
        if let Ok(lock) = manager.try_acquire(&resource, ttl).await {
            lock.release().await;
        }
    }
    held.release().await;
    println!(
        "{} cycles done; serving http://{}/metrics for {} s",
        args.cycles, args.listen, args.serve_for
    );
    tokio::time::sleep(Duration::from_secs(args.serve_for)).await;
    Ok(())
}
