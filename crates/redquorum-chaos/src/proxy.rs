//! A loopback TCP proxy in front of one node, so that network faults can be injected without
//! touching anything but our own sockets.
//!
//! Clients (and, for the failover strategy, the replica's replication link) connect to the
//! proxy's port instead of the node's; every accepted connection gets its own connection to the
//! current upstream port, and bytes are pumped both ways. At run time, from any thread:
//!
//! - [`Proxy::set_delay`]: every chunk read afterwards is held back for this long before it is
//!   written on. Chunks are delayed, not throttled: a pipeline of requests keeps its throughput
//!   and simply arrives later, as behind a slow link.
//! - [`Proxy::drop_connections`]: every connection open now is closed at once (both sides);
//!   new ones are accepted as usual.
//! - [`Proxy::set_upstream`]: new connections go to another port (a failover), current ones are
//!   dropped.
//! - [`Proxy::blackhole`]: every connection open now stops forwarding in both directions but
//!   stays open (a server that moved, a firewall that silently drops a flow); new ones are
//!   accepted and forwarded as usual.
//! - [`Proxy::heal`]: no more delay, and the black-holed connections are closed.
//! - [`Proxy::cut`] / [`Proxy::rejoin`]: for the partition fault, a proxy may listen on more
//!   ports, one per *group* of clients ([`Proxy::listen_for_group`]), forwarding exactly as its
//!   main port does. Cutting a group closes its open connections and closes every new one at
//!   once, until it rejoins: those clients see the node refuse them while the others reach it.
//!
//! # Invariants
//! 1. Bytes of one connection and direction are written in the order they were read, whatever
//!    the delay does in between (one queue, one writer per direction).
//! 2. A connection ends as a whole: when either side closes or fails, or on a drop, both sockets
//!    are closed, so a client sees a dead node as a closed connection, never a half-open one.
//! 3. Every task of a proxy ends when its shutdown token is cancelled; nothing outlives the run.
//! 4. The proxy listens on 127.0.0.1 only and connects to 127.0.0.1 only.
//! 5. A cut group forwards nothing: its connections open at the cut are closed, and a connection
//!    accepted while it is cut is closed before anything is forwarded.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long connecting to the upstream node may take. A stopped (`SIGSTOP`) node still
/// completes TCP handshakes from its backlog, so this only bounds a truly unreachable port.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The largest chunk read at once.
const CHUNK: usize = 16 * 1024;
/// Chunks queued per direction while they wait out their delay; a full queue stops reading, so
/// a slow link pushes back instead of buffering without bound.
const QUEUE: usize = 256;

/// A running proxy. Cheap to clone; all clones control the same proxy.
#[derive(Debug, Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    port: u16,
    /// The node's port; 0 while there is none (connections are then closed at once).
    upstream: AtomicU16,
    delay_ms: AtomicU64,
    /// Cancelled to drop every connection open now; replaced by a fresh one each time.
    generation: Mutex<Generation>,
    /// Black-holed generations, closed by the next heal.
    black_holed: Mutex<Vec<CancellationToken>>,
    /// The client groups with a port of their own, by group number.
    groups: Mutex<Vec<Group>>,
    shutdown: CancellationToken,
}

/// A group of clients with a port of its own (invariant 5).
#[derive(Debug)]
struct Group {
    /// Whether it is cut off: new connections are closed at once.
    cut: bool,
    /// Cancelled to close the group's open connections; replaced by a fresh one each time.
    closed: CancellationToken,
}

/// The connections accepted since the last drop or black hole.
#[derive(Debug, Clone)]
struct Generation {
    /// Cancelled to close them.
    dropped: CancellationToken,
    /// Set to stop forwarding on them while they stay open.
    frozen: Arc<AtomicBool>,
}

impl Generation {
    fn new(shutdown: &CancellationToken) -> Self {
        Self {
            dropped: shutdown.child_token(),
            frozen: Arc::new(AtomicBool::new(false)),
        }
    }
}

impl Proxy {
    /// Binds a free port on 127.0.0.1 and starts accepting, forwarding to `upstream` (a port on
    /// 127.0.0.1; 0 for "not yet", see [`set_upstream`](Self::set_upstream)). The proxy stops,
    /// and closes all its connections, when `shutdown` is cancelled.
    ///
    /// # Errors
    /// If the port cannot be bound.
    ///
    /// # Cancel safety
    /// Nothing is started before the port is bound, so dropping the future leaves nothing behind.
    pub async fn start(upstream: u16, shutdown: CancellationToken) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let inner = Arc::new(Inner {
            port,
            upstream: AtomicU16::new(upstream),
            delay_ms: AtomicU64::new(0),
            generation: Mutex::new(Generation::new(&shutdown)),
            black_holed: Mutex::new(Vec::new()),
            groups: Mutex::new(Vec::new()),
            shutdown,
        });
        tokio::spawn(accept_loop(listener, Arc::clone(&inner), None));
        Ok(Self { inner })
    }

    /// Binds one more free port on 127.0.0.1 for a new group of clients, numbered from 0 in the
    /// order of these calls; its connections are forwarded as the main port's are, and can be
    /// cut off on their own ([`cut`](Self::cut)). Returns the port.
    ///
    /// # Errors
    /// If the port cannot be bound.
    ///
    /// # Cancel safety
    /// As [`start`](Self::start): the group exists only once its port is bound.
    pub async fn listen_for_group(&self) -> io::Result<u16> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let port = listener.local_addr()?.port();
        let group = {
            let mut groups = lock(&self.inner.groups);
            groups.push(Group {
                cut: false,
                closed: self.inner.shutdown.child_token(),
            });
            groups.len() - 1
        };
        tokio::spawn(accept_loop(listener, Arc::clone(&self.inner), Some(group)));
        Ok(port)
    }

    /// Cuts group `group` off (invariant 5): its open connections are closed, new ones are
    /// closed at once until it [rejoins](Self::rejoin). An unknown group is ignored.
    pub fn cut(&self, group: usize) {
        if let Some(g) = lock(&self.inner.groups).get_mut(group) {
            g.cut = true;
            std::mem::replace(&mut g.closed, self.inner.shutdown.child_token()).cancel();
        }
    }

    /// Lets group `group` connect again.
    pub fn rejoin(&self, group: usize) {
        if let Some(g) = lock(&self.inner.groups).get_mut(group) {
            g.cut = false;
        }
    }

    /// How many groups have a port of their own.
    #[must_use]
    pub fn groups(&self) -> usize {
        lock(&self.inner.groups).len()
    }

    /// Lets every group connect again.
    pub fn rejoin_all(&self) {
        for g in lock(&self.inner.groups).iter_mut() {
            g.cut = false;
        }
    }

    /// The port clients connect to.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.inner.port
    }

    /// `redis://127.0.0.1:PORT` for this proxy.
    #[must_use]
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.inner.port)
    }

    /// Delays every chunk read from now on by `delay`, in both directions.
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.inner.delay_ms.store(ms, Ordering::Relaxed);
    }

    /// Closes every connection open now, both sides (invariant 2).
    pub fn drop_connections(&self) {
        self.next_generation().dropped.cancel();
    }

    /// Stops forwarding on every connection open now, in both directions, and keeps them open
    /// until the next [`heal`](Self::heal); new connections are forwarded as usual.
    pub fn blackhole(&self) {
        let old = self.next_generation();
        old.frozen.store(true, Ordering::Relaxed);
        lock(&self.inner.black_holed).push(old.dropped);
    }

    /// Starts a new generation of connections; returns the old one.
    fn next_generation(&self) -> Generation {
        let fresh = Generation::new(&self.inner.shutdown);
        std::mem::replace(&mut *self.inner.generation(), fresh)
    }

    /// Sends new connections to `port` on 127.0.0.1 and drops the current ones.
    pub fn set_upstream(&self, port: u16) {
        self.inner.upstream.store(port, Ordering::Relaxed);
        self.drop_connections();
    }

    /// Removes the delay and closes the black-holed connections. Dropped connections are not
    /// restored: clients reconnect by themselves.
    pub fn heal(&self) {
        self.set_delay(Duration::ZERO);
        for dropped in std::mem::take(&mut *lock(&self.inner.black_holed)) {
            dropped.cancel();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Inner {
    fn generation(&self) -> std::sync::MutexGuard<'_, Generation> {
        lock(&self.generation)
    }

    fn delay(&self) -> Duration {
        Duration::from_millis(self.delay_ms.load(Ordering::Relaxed))
    }
}

/// Accepts on `listener`, the main port or `group`'s.
async fn accept_loop(listener: TcpListener, inner: Arc<Inner>, group: Option<usize>) {
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = inner.shutdown.cancelled() => return, // invariant 3
        };
        let Ok((client, _)) = accepted else {
            // E.g. too many open files: back off a little rather than spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        // The group's token, or none while it is cut: dropping `client` closes it (invariant 5).
        let closed = match group {
            None => None,
            Some(group) => match lock(&inner.groups).get(group) {
                Some(g) if !g.cut => Some(g.closed.clone()),
                _ => continue,
            },
        };
        let generation = inner.generation().clone();
        tokio::spawn(connection(client, Arc::clone(&inner), generation, closed));
    }
}

/// One proxied connection, from accept to close (invariant 2); `closed`, its group's token.
async fn connection(
    client: TcpStream,
    inner: Arc<Inner>,
    generation: Generation,
    closed: Option<CancellationToken>,
) {
    let Generation { dropped, frozen } = generation;
    // A connection of the main port closes with its generation only.
    let closed = closed.unwrap_or_default();
    let port = inner.upstream.load(Ordering::Relaxed);
    if port == 0 {
        return;
    }
    let upstream = tokio::select! {
        connected = tokio::time::timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port))),
        ) => match connected {
            Ok(Ok(upstream)) => upstream,
            _ => return, // dropping `client` closes it: the node looks down, as it is
        },
        () = dropped.cancelled() => return,
        () = closed.cancelled() => return,
    };
    // Redis requests are small; without this, Nagle would add its own delay on top of ours.
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    tokio::select! {
        () = pump(client_read, upstream_write, &inner, &frozen) => {}
        () = pump(upstream_read, client_write, &inner, &frozen) => {}
        () = dropped.cancelled() => {}
        () = closed.cancelled() => {}
    }
    // Returning drops all four halves, which closes both sockets.
}

/// Copies `from` to `to`, each chunk held back by the delay in force when it was read. Ends when
/// `from` closes or either side fails, after writing out what was already read. Once `frozen`,
/// what is read is thrown away and nothing more is written: the other side sees silence.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, inner: &Inner, frozen: &AtomicBool) {
    let (queue, mut queued) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let read = async move {
        let mut buf = vec![0; CHUNK];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let due = Instant::now() + inner.delay();
                    if queue.send((due, buf[..n].to_vec())).await.is_err() {
                        return;
                    }
                }
            }
        }
        // `queue` is dropped here, which ends the writer once it has drained (invariant 1).
    };
    let write = async move {
        while let Some((due, chunk)) = queued.recv().await {
            // Not even a timer without a delay: tokio's timer would round up to the next ms.
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            if frozen.load(Ordering::Relaxed) {
                continue;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
    };
    tokio::join!(read, write);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-connection echo server; returns its port.
    async fn echo() -> u16 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = socket.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        port
    }

    async fn round_trip(stream: &mut TcpStream, message: &[u8]) -> io::Result<Vec<u8>> {
        stream.write_all(message).await?;
        let mut got = vec![0; message.len()];
        stream.read_exact(&mut got).await?;
        Ok(got)
    }

    #[tokio::test]
    async fn forwards_delays_drops_and_repoints() {
        let shutdown = CancellationToken::new();
        let proxy = Proxy::start(echo().await, shutdown.clone()).await.unwrap();
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        assert_eq!(round_trip(&mut stream, b"ping").await.unwrap(), b"ping");

        proxy.set_delay(Duration::from_millis(100));
        let started = std::time::Instant::now();
        assert_eq!(round_trip(&mut stream, b"slow").await.unwrap(), b"slow");
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200),
            "two delayed legs, took {took:?}"
        );
        proxy.heal();

        proxy.drop_connections();
        let mut buf = [0; 1];
        let closed = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0) | Err(_))),
            "a dropped connection reads as closed: {closed:?}"
        );

        proxy.set_upstream(echo().await);
        let mut again = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        assert_eq!(round_trip(&mut again, b"back").await.unwrap(), b"back");

        // A black hole: the open connection goes silent but stays open; a new one works.
        proxy.blackhole();
        let silent =
            tokio::time::timeout(Duration::from_millis(300), round_trip(&mut again, b"hole")).await;
        assert!(
            silent.is_err(),
            "no answer through a black hole: {silent:?}"
        );
        let mut fresh = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        assert_eq!(round_trip(&mut fresh, b"new!").await.unwrap(), b"new!");
        proxy.heal();
        let closed = tokio::time::timeout(Duration::from_secs(5), again.read(&mut buf)).await;
        assert!(
            matches!(closed, Ok(Ok(0) | Err(_))),
            "healing closes the black-holed connection: {closed:?}"
        );
        assert_eq!(round_trip(&mut fresh, b"kept").await.unwrap(), b"kept");
        shutdown.cancel();
    }

    async fn closed_within(stream: &mut TcpStream) -> bool {
        let mut buf = [0; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        matches!(read, Ok(Ok(0) | Err(_)))
    }

    #[tokio::test]
    async fn a_cut_group_is_refused_while_the_others_get_through() {
        let shutdown = CancellationToken::new();
        let proxy = Proxy::start(echo().await, shutdown.clone()).await.unwrap();
        let ports = [
            proxy.listen_for_group().await.unwrap(),
            proxy.listen_for_group().await.unwrap(),
        ];
        let connect = |port: u16| TcpStream::connect(("127.0.0.1", port));
        let mut zero = connect(ports[0]).await.unwrap();
        let mut one = connect(ports[1]).await.unwrap();
        assert_eq!(round_trip(&mut zero, b"grp0").await.unwrap(), b"grp0");
        assert_eq!(round_trip(&mut one, b"grp1").await.unwrap(), b"grp1");

        proxy.cut(0);
        assert!(
            closed_within(&mut zero).await,
            "open connections are closed"
        );
        let mut again = connect(ports[0]).await.unwrap();
        assert!(
            closed_within(&mut again).await,
            "new ones are closed at once"
        );
        assert_eq!(round_trip(&mut one, b"kept").await.unwrap(), b"kept");
        let mut main = connect(proxy.port()).await.unwrap();
        assert_eq!(round_trip(&mut main, b"main").await.unwrap(), b"main");

        // Group ports share the proxy's faults.
        proxy.set_delay(Duration::from_millis(100));
        let started = std::time::Instant::now();
        assert_eq!(round_trip(&mut one, b"slow").await.unwrap(), b"slow");
        assert!(started.elapsed() >= Duration::from_millis(200));
        proxy.heal();

        proxy.rejoin(0);
        let mut back = connect(ports[0]).await.unwrap();
        assert_eq!(round_trip(&mut back, b"back").await.unwrap(), b"back");
        proxy.cut(1);
        proxy.rejoin_all();
        let mut both = connect(ports[1]).await.unwrap();
        assert_eq!(round_trip(&mut both, b"both").await.unwrap(), b"both");
        shutdown.cancel();
    }

    #[tokio::test]
    async fn a_dead_upstream_closes_the_client() {
        let shutdown = CancellationToken::new();
        let dead = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let proxy = Proxy::start(dead, shutdown.clone()).await.unwrap();
        let mut stream = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        let mut buf = [0; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
        assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
        shutdown.cancel();
    }
}
