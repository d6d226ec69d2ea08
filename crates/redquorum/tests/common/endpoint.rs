//! A primary with replicas behind one fixed address that the test moves on failover, as a
//! managed service's primary endpoint does: real `redis-server` processes, and a loopback TCP
//! proxy in front of them whose target the test re-points.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use redquorum::Redlock;
use redquorum_nodes::{NodeSpec, Persistence, RedisNode};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// The `max_ttl` of the managers these tests make.
pub const MAX_TTL: Duration = Duration::from_secs(30);

/// A manager of one node at `url`, with [`MAX_TTL`] and the patient node timeout (a vote's
/// `WAIT` gets half of it).
pub fn manager(url: &str) -> Redlock {
    Redlock::builder(vec![url.to_owned()])
        .max_ttl(MAX_TTL)
        .node_timeout(super::PATIENT_NODE_TIMEOUT)
        .build()
        .expect("valid configuration")
}

/// A loopback TCP proxy to one port at a time. Every accepted connection gets a connection of
/// its own to the current target; [`point`](Self::point) moves new connections, and either
/// keeps or drops the open ones. Its tasks end with the test's runtime, or on drop.
#[derive(Debug)]
pub struct Proxy {
    port: u16,
    target: Arc<AtomicU16>,
    /// Cancelled to drop the connections open now; replaced on each drop.
    open: Arc<Mutex<CancellationToken>>,
    shutdown: CancellationToken,
}

impl Proxy {
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a port");
        let port = listener.local_addr().expect("its address").port();
        let proxy = Self {
            port,
            target: Arc::new(AtomicU16::new(target)),
            open: Arc::new(Mutex::new(CancellationToken::new())),
            shutdown: CancellationToken::new(),
        };
        let (target, open, shutdown) = (
            Arc::clone(&proxy.target),
            Arc::clone(&proxy.open),
            proxy.shutdown.clone(),
        );
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    () = shutdown.cancelled() => return,
                    accepted = listener.accept() => accepted,
                };
                let Ok((mut client, _)) = accepted else {
                    continue;
                };
                let to = target.load(Ordering::SeqCst);
                let dropped = open.lock().expect("not poisoned").clone();
                let shutdown = shutdown.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", to)).await else {
                        return; // the client sees its connection closed
                    };
                    tokio::select! {
                        () = dropped.cancelled() => {}
                        () = shutdown.cancelled() => {}
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                    }
                });
            }
        });
        proxy
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// New connections go to `target`; with `drop_open`, the open ones are closed (a load
    /// balancer that resets its flows), else they stay with the old target.
    pub fn point(&self, target: u16, drop_open: bool) {
        self.target.store(target, Ordering::SeqCst);
        if drop_open {
            let mut open = self.open.lock().expect("not poisoned");
            open.cancel();
            *open = CancellationToken::new();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A primary and its replicas (node 0 the first primary), behind a [`Proxy`].
#[derive(Debug)]
pub struct Endpoint {
    pub nodes: Vec<RedisNode>,
    pub proxy: Proxy,
    /// The node the proxy points to.
    pub primary: usize,
}

impl Endpoint {
    /// A primary with `replicas` replicas (AOF, `appendfsync always`; only the primary is
    /// marked), every replica online, and a proxy in front of the primary.
    pub async fn start(replicas: usize) -> Self {
        let spec = NodeSpec::new()
            .persistence(Persistence::AofAlways)
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        let primary = RedisNode::start(spec.clone()).expect("the primary");
        let port = primary.port().to_string();
        let mut nodes = vec![primary];
        for _ in 0..replicas {
            let replica = spec
                .clone()
                .marked(false)
                .arg("--replicaof")
                .arg("127.0.0.1")
                .arg(&port);
            nodes.push(RedisNode::start(replica).expect("a replica"));
        }
        let endpoint = Self {
            proxy: Proxy::start(nodes[0].port()).await,
            nodes,
            primary: 0,
        };
        endpoint.await_replicas(replicas).await;
        endpoint
    }

    /// The node's URL: the proxy's address, `replicas` the replicas the service keeps.
    pub fn url(&self, replicas: usize) -> String {
        format!(
            "redis+replicated://127.0.0.1:{}?replicas={replicas}",
            self.proxy.port()
        )
    }

    /// Waits until the primary lists `n` replicas online.
    pub async fn await_replicas(&self, n: usize) {
        let primary = &self.nodes[self.primary];
        let what = format!("{n} replicas online at the primary");
        super::await_replication(primary, &what, |info| {
            info.matches("state=online").count() >= n
        })
        .await;
    }

    /// What a managed service does on failover: node `to` is made the primary, every other
    /// running node its replica, and the address moves to it (`drop_open`: closing the flows
    /// open to the old one).
    pub fn fail_over(&mut self, to: usize, drop_open: bool) {
        self.promote(to);
        self.proxy.point(self.nodes[to].port(), drop_open);
        self.primary = to;
    }

    /// Node `to` is made the primary and every other running node but the old primary its
    /// replica; the address has not moved yet (a DNS record not yet updated, a load balancer
    /// not yet told).
    pub fn promote(&mut self, to: usize) {
        self.nodes[to]
            .cli(&["REPLICAOF", "NO", "ONE"])
            .expect("promote");
        let port = self.nodes[to].port().to_string();
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if i != to && node.is_running() && i != self.primary {
                node.cli(&["REPLICAOF", "127.0.0.1", &port])
                    .expect("follow the new primary");
            }
        }
    }
}
