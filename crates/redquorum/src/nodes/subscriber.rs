//! The second connection to a node: it hears when a lock key is freed, for notified waiting.
//!
//! It watches a resource one of two ways, over one RESP3 connection ([`Watch`]):
//!
//! - **Key tracking** (Redis's server-assisted client-side caching, `CLIENT TRACKING ON`): after
//!   the connection reads a key (`EXISTS`), the server pushes an invalidation the next time
//!   anything changes that key, whoever does it: our release, another Redlock client's `DEL`, an
//!   expiry, a new holder's `SET`, an extension. The push says only that the key changed, so the
//!   task reads it again (which also watches it again) and reports it freed only if it is gone.
//!   This is how waiters that are not fair are woken, and it costs the releasing client
//!   nothing: a release is the standard compare-and-delete script, and a server with nobody
//!   tracking a key does nothing more when it is deleted.
//! - **Announcements** on `redlock-released:<resource>`, published by our fair clients' release
//!   script, naming the waiter whose turn it is: how fair waiters are woken (only the head).
//!   They ignore other changes of the key, so watching it would only load the nodes.
//!
//! It is only a hint: nothing here is ever counted as a vote, and everything it does may fail
//! without any cost but the waiter's retry delay ([`waiting`](crate::round::waiting) invariant 1).
//! That is why it needs no health check or quarantine. A server that cannot do it (older than
//! Redis 6, or an ACL that denies `HELLO 3`, `CLIENT TRACKING` or the key) leaves waiters polling;
//! one that denies only the channel leaves fair waiters polling.
//!
//! One task per node owns the connection. It is started by the first waiter, watches every
//! resource somebody waits for, and drops resources nobody has waited for during a whole sweep
//! interval (so a busy resource, whose waiters come and go all the time, is not watched and
//! dropped on every acquisition). It ends when nobody has waited for anything for a sweep, when
//! its connection breaks, or with its manager; the next waiter starts it again. After a failed
//! connection attempt or command it is not started again for a second, so such a node costs
//! waiters nothing but their delays.
//!
//! # Invariants
//! 1. At most one task per node, with one connection: a new one starts only when the last one
//!    has ended (its inbox is closed).
//! 2. The task holds its manager's waiters weakly: it never keeps a dropped manager alive.
//! 3. A watched key is read again after every invalidation, so it stays watched, and again for
//!    every waiter that registers for it; a key found missing by any of these reads is reported
//!    freed. So nothing is missed between a waiter's refusal and its registration: a key freed in
//!    between is found missing by the read its registration makes.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::mpsc;

use crate::base::resources::Resources;
use crate::base::sync::lock;

/// The channel a release of `resource` is announced on (`scripts/queue.lua`).
const CHANNEL_PREFIX: &str = "redlock-released:";

/// How often resources nobody waits for are dropped.
const SWEEP: Duration = Duration::from_secs(2);

/// How long a failed connection attempt keeps the task from starting again.
const BACKOFF: Duration = Duration::from_secs(1);

/// What a subscriber reports, to whoever waits ([`waiting`](crate::round::waiting)'s registry). A
/// trait so that the subscriber, which only hears, does not depend on how waiters are woken.
pub(crate) trait Listener: Send + Sync + 'static {
    /// `node` announced a fair client's release of `resource`, naming `head` next in line.
    fn released(&self, resource: &str, head: &str, node: usize);
    /// `node` found `resource`'s key gone.
    fn freed(&self, resource: &str, node: usize);
    /// Announcements for `resource` are heard from now on.
    fn listening(&self, resource: &str);
    /// Whether anybody still waits for `resource`.
    fn is_waited_for(&self, resource: &str) -> bool;
}

/// How a subscriber hears that a resource may be taken. A manager's subscribers are made for
/// its waiters of locks, fair or not; each resource is then watched the way its waiter asks:
/// a fair manager's waiters for what fair queueing does not cover (a semaphore's permits, a
/// read-write lock, a leader watch) ask for key tracking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// Key tracking: any change of the lock key, then a read of it (waiters that are not fair).
    Keys,
    /// The release announcements of fair clients, naming the head (fair waiters).
    Announcements,
}

/// Which server a subscriber connects to.
// One per node of a manager, made once: not worth a box.
#[allow(clippy::large_enum_variant)]
enum Source {
    /// The node's URL with RESP3 (pushes need it); `None` if it cannot be made, then waiters
    /// poll.
    Fixed(Option<redis::Client>),
    /// The server that serves the node's keys now, asked each time a task starts: a Sentinel
    /// node's primary, which a failover moves (the task's connection to the old one breaks, and
    /// the next waiter starts a task on the new one). `None` while none is known: waiters poll.
    Following(Arc<dyn Fn() -> Option<redis::Client> + Send + Sync>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Fixed(client) => f.debug_tuple("Fixed").field(client).finish(),
            Source::Following(_) => f.write_str("Following"),
        }
    }
}

/// `client`'s connection settings with RESP3, which pushes need.
fn resp3(client: &redis::Client) -> Option<redis::Client> {
    let info = client.get_connection_info().clone();
    let resp3 = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    redis::Client::open(info.set_redis_settings(resp3)).ok()
}

/// One node's subscriber.
#[derive(Debug)]
pub(crate) struct Subscriber {
    source: Source,
    connect_timeout: Duration,
    watch: Watch,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// The running task's inbox: resources to watch, and how (invariant 1).
    inbox: Option<mpsc::UnboundedSender<(String, Watch)>>,
    /// When the last connection attempt failed.
    failed_at: Option<Instant>,
}

impl Subscriber {
    /// A subscriber for the node `client` connects to, over a RESP3 connection of its own.
    pub(crate) fn new(client: &redis::Client, connect_timeout: Duration, watch: Watch) -> Self {
        Self {
            source: Source::Fixed(resp3(client)),
            connect_timeout,
            watch,
            state: Arc::default(),
        }
    }

    /// A subscriber for whichever server `current` names when a task starts (a Sentinel node's
    /// primary).
    pub(crate) fn following(
        current: Arc<dyn Fn() -> Option<redis::Client> + Send + Sync>,
        connect_timeout: Duration,
        watch: Watch,
    ) -> Self {
        Self {
            source: Source::Following(current),
            connect_timeout,
            watch,
            state: Arc::default(),
        }
    }

    /// Makes sure this node's task watches `resources`, starting it if it is not running. Never
    /// waits: the watching is set up in the background. `node` is this node's index, which its
    /// reports are counted under.
    pub(crate) fn listen(
        &self,
        node: usize,
        resources: &Resources,
        watch: Watch,
        registry: &Arc<dyn Listener>,
    ) {
        let mut state = lock(&self.state);
        let running = state.inbox.as_ref().is_some_and(|inbox| !inbox.is_closed());
        if !running {
            if state.failed_at.is_some_and(|at| at.elapsed() < BACKOFF) {
                return;
            }
            let client = match &self.source {
                Source::Fixed(client) => client.clone(),
                Source::Following(current) => current().as_ref().and_then(resp3),
            };
            let Some(client) = client else { return };
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let (inbox, requests) = mpsc::unbounded_channel();
            let task = Task {
                node,
                client,
                connect_timeout: self.connect_timeout,
                watch: self.watch,
                registry: Arc::downgrade(registry),
                state: Arc::clone(&self.state),
            };
            runtime.spawn(task.run(requests));
            state.inbox = Some(inbox);
        }
        let Some(inbox) = &state.inbox else { return };
        for resource in resources.keys() {
            // A send fails only if the task just ended; the waiter then polls (invariant 1 of
            // `waiting`), and the next waiter starts a new task.
            let _ = inbox.send((resource.clone(), watch));
        }
    }
}

/// What one subscriber task needs.
struct Task {
    node: usize,
    client: redis::Client,
    connect_timeout: Duration,
    watch: Watch,
    registry: Weak<dyn Listener>,
    /// Its subscriber's state, to record a failed connection attempt (see [`BACKOFF`]).
    state: Arc<Mutex<State>>,
}

/// Why a task ends.
enum End {
    /// Nobody waits, the manager is gone, or the connection broke: a new task may start at once.
    Done,
    /// The server refused something: back off as after a failed connection.
    Refused,
}

impl Task {
    async fn run(self, mut requests: mpsc::UnboundedReceiver<(String, Watch)>) {
        let end = match self.connect().await {
            Some((conn, pushes, tracking)) => {
                self.serve(conn, pushes, tracking, &mut requests).await
            }
            None => End::Refused,
        };
        if matches!(end, End::Refused) {
            tracing::debug!("no release notifications from a node; its waiters poll");
            lock(&self.state).failed_at = Some(Instant::now());
        }
        // A waiter that registers right now finds the inbox closed and starts a new task, or (if
        // it sent just before) polls.
        requests.close();
    }

    /// A RESP3 connection, the channel its pushes arrive on, and whether key tracking is on. A
    /// manager whose waiters watch keys needs it; a fair manager's subscriber turns it on too
    /// (for the waiters fair queueing does not cover), and works without it.
    async fn connect(
        &self,
    ) -> Option<(
        MultiplexedConnection,
        mpsc::UnboundedReceiver<PushInfo>,
        bool,
    )> {
        let (push_sender, pushes) = mpsc::unbounded_channel();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.connect_timeout))
            .set_push_sender(push_sender);
        let mut conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .ok()?;
        let tracking = redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .query_async::<()>(&mut conn)
            .await
            .is_ok();
        if !tracking && self.watch == Watch::Keys {
            return None;
        }
        Some((conn, pushes, tracking))
    }

    async fn serve(
        &self,
        mut conn: MultiplexedConnection,
        mut pushes: mpsc::UnboundedReceiver<PushInfo>,
        tracking: bool,
        requests: &mut mpsc::UnboundedReceiver<(String, Watch)>,
    ) -> End {
        let mut watched = HashSet::new();
        // The resources whose announcements we subscribed to.
        let mut subscribed = HashSet::new();
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.tick().await; // the first tick is immediate
        loop {
            tokio::select! {
                request = requests.recv() => {
                    // The manager is gone.
                    let Some((resource, watch)) = request else { return End::Done };
                    watched.insert(resource.clone());
                    let watching = match watch {
                        // Without tracking (a fair manager's server that refused it), such
                        // waiters poll.
                        Watch::Keys if !tracking => Ok(()),
                        // Read even when watched already: the key may have been freed between
                        // this waiter's refusal and now, and that push went to nobody
                        // (invariant 3).
                        Watch::Keys => self.check(&mut conn, &resource).await,
                        Watch::Announcements if subscribed.insert(resource.clone()) => {
                            let subscribed =
                                conn.subscribe(format!("{CHANNEL_PREFIX}{resource}")).await;
                            if subscribed.is_ok()
                                && let Some(registry) = self.registry.upgrade()
                            {
                                registry.listening(&resource);
                            }
                            subscribed
                        }
                        Watch::Announcements => Ok(()),
                    };
                    if watching.is_err() {
                        return End::Refused; // e.g. an ACL without this key or channel
                    }
                }
                push = pushes.recv() => {
                    let Some(push) = push else { return End::Done };
                    if !self.heard(&mut conn, push, &watched).await {
                        return End::Done;
                    }
                }
                _ = sweep.tick() => {
                    let Some(registry) = self.registry.upgrade() else { return End::Done };
                    let idle: Vec<String> = watched
                        .iter()
                        .filter(|r| !registry.is_waited_for(r))
                        .cloned()
                        .collect();
                    for resource in idle {
                        // A key stays tracked until its next change, whose push is ignored.
                        if subscribed.remove(&resource)
                            && conn.unsubscribe(format!("{CHANNEL_PREFIX}{resource}")).await.is_err()
                        {
                            return End::Done;
                        }
                        watched.remove(&resource);
                    }
                    if watched.is_empty() {
                        return End::Done; // nobody waits
                    }
                }
            }
        }
    }

    /// Handles one push: an announcement, or a change of keys. `false` when the connection or
    /// the manager is gone.
    async fn heard(
        &self,
        conn: &mut MultiplexedConnection,
        push: PushInfo,
        watched: &HashSet<String>,
    ) -> bool {
        let Some(registry) = self.registry.upgrade() else {
            return false;
        };
        match push.kind {
            PushKind::Message => {
                let mut data = push.data.iter().map(text);
                if let (Some(Some(channel)), Some(Some(head))) = (data.next(), data.next())
                    && let Some(resource) = channel.strip_prefix(CHANNEL_PREFIX)
                {
                    registry.released(resource, &head, self.node);
                }
                true
            }
            PushKind::Invalidate => {
                // One array of keys; `nil` when the server dropped every key (FLUSHALL, or its
                // tracking table was full): then every key we watch may have changed.
                let changed: Vec<String> = match push.data.first() {
                    Some(Value::Array(keys)) => keys.iter().filter_map(text).collect(),
                    _ => watched.iter().cloned().collect(),
                };
                for key in changed.iter().filter(|k| watched.contains(*k)) {
                    if self.check(conn, key).await.is_err() {
                        return false;
                    }
                }
                true
            }
            PushKind::Disconnection => false,
            _ => true,
        }
    }

    /// Reads `key` again, which watches it until its next change (invariant 3), and reports it
    /// freed if it is gone.
    async fn check(&self, conn: &mut MultiplexedConnection, key: &str) -> redis::RedisResult<()> {
        let exists: bool = redis::cmd("EXISTS").arg(key).query_async(conn).await?;
        if !exists && let Some(registry) = self.registry.upgrade() {
            registry.freed(key, self.node);
        }
        Ok(())
    }
}

/// A push field (a bulk or simple string) as text.
fn text(value: &Value) -> Option<String> {
    redis::from_redis_value_ref(value).ok()
}
