//! The second connection to a node: a subscriber that hears releases, for notified waiting.
//!
//! A subscribed connection can do nothing but listen, so it cannot be the node's multiplexed
//! connection ([`node`](crate::node)); this is the one other place that talks to Redis. It is
//! only a hint: nothing here is ever counted as a vote, and everything it does may fail without
//! any cost but the waiter's retry delay ([`waiting`](crate::waiting) invariant 1). That is why it
//! needs no health check or quarantine.
//!
//! One task per node owns the connection. It is started by the first waiter, listens on
//! `redlock-released:<resource>` for every resource somebody waits for, and drops channels nobody
//! has waited for during a whole sweep interval (so a busy resource, whose waiters come and go
//! all the time, is not subscribed and unsubscribed on every acquisition). It ends when nobody has
//! waited for anything for a sweep, when its connection breaks, or with its manager; the next
//! waiter starts it again. After a failed connection attempt or subscription (a node that is down,
//! an ACL that denies the channel) it is not started again for a second, so such a node costs
//! waiters nothing but their delays.
//!
//! # Invariants
//! 1. At most one task per node, with one connection: a new one starts only when the last one
//!    has ended (its inbox is closed).
//! 2. The task holds its manager's waiters weakly: it never keeps a dropped manager alive.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use redis::aio::PubSubSink;
use tokio::sync::mpsc;

use crate::resources::Resources;
use crate::sync::lock;
use crate::waiting::Registry;

/// The channel a release of `resource` is announced on (`scripts/queue.lua`).
const CHANNEL_PREFIX: &str = "redlock-released:";

/// How often channels nobody waits for are dropped.
const SWEEP: Duration = Duration::from_secs(2);

/// How long a failed connection attempt keeps the task from starting again.
const BACKOFF: Duration = Duration::from_secs(1);

/// One node's subscriber.
#[derive(Debug)]
pub(crate) struct Subscriber {
    client: redis::Client,
    connect_timeout: Duration,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    /// The running task's inbox: resources to listen for (invariant 1).
    inbox: Option<mpsc::UnboundedSender<String>>,
    /// When the last connection attempt failed.
    failed_at: Option<Instant>,
}

impl Subscriber {
    pub(crate) fn new(client: redis::Client, connect_timeout: Duration) -> Self {
        Self {
            client,
            connect_timeout,
            state: Arc::default(),
        }
    }

    /// Makes sure this node's task listens for the release of `resources`, starting it if it is
    /// not running. Never waits: the subscription is made in the background.
    /// `node` is this node's index, which its messages are counted under.
    pub(crate) fn listen(&self, node: usize, resources: &Resources, registry: &Arc<Registry>) {
        let mut state = lock(&self.state);
        let running = state.inbox.as_ref().is_some_and(|inbox| !inbox.is_closed());
        if !running {
            if state.failed_at.is_some_and(|at| at.elapsed() < BACKOFF) {
                return;
            }
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let (inbox, requests) = mpsc::unbounded_channel();
            let task = Task {
                node,
                client: self.client.clone(),
                connect_timeout: self.connect_timeout,
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
            let _ = inbox.send(resource.clone());
        }
    }
}

/// What one subscriber task needs.
struct Task {
    node: usize,
    client: redis::Client,
    connect_timeout: Duration,
    registry: Weak<Registry>,
    /// Its subscriber's state, to record a failed connection attempt (see [`BACKOFF`]).
    state: Arc<Mutex<State>>,
}

impl Task {
    async fn run(self, mut requests: mpsc::UnboundedReceiver<String>) {
        let connecting = tokio::time::timeout(self.connect_timeout, self.client.get_async_pubsub());
        let Ok(Ok(pubsub)) = connecting.await else {
            tracing::debug!("no subscriber connection; waiters fall back to their retry delay");
            lock(&self.state).failed_at = Some(Instant::now());
            requests.close();
            return;
        };
        let (mut sink, mut messages) = pubsub.split();
        let mut subscribed = HashSet::new();
        let mut sweep = tokio::time::interval(SWEEP);
        sweep.tick().await; // the first tick is immediate
        loop {
            tokio::select! {
                request = requests.recv() => {
                    let Some(resource) = request else { return }; // the manager is gone
                    if !subscribed.contains(&resource) {
                        if !self.command(&mut sink, true, &resource).await {
                            // E.g. an ACL without this channel: back off as after a failed connection.
                            lock(&self.state).failed_at = Some(Instant::now());
                            return;
                        }
                        subscribed.insert(resource);
                    }
                }
                message = messages.next() => {
                    let Some(message) = message else { return }; // the connection broke
                    let Some(registry) = self.registry.upgrade() else { return };
                    let channel = message.get_channel_name();
                    if let Some(resource) = channel.strip_prefix(CHANNEL_PREFIX) {
                        let head: String = message.get_payload().unwrap_or_default();
                        registry.released(resource, &head, self.node);
                    }
                }
                _ = sweep.tick() => {
                    let Some(registry) = self.registry.upgrade() else { return };
                    let idle: Vec<String> = subscribed
                        .iter()
                        .filter(|r| !registry.is_waited_for(r))
                        .cloned()
                        .collect();
                    for resource in idle {
                        if !self.command(&mut sink, false, &resource).await {
                            return;
                        }
                        subscribed.remove(&resource);
                    }
                    if subscribed.is_empty() {
                        // Nobody waits. A waiter that registers right now finds the inbox closed
                        // and starts a new task, or (if it sent just before) polls.
                        requests.close();
                        return;
                    }
                }
            }
        }
    }

    /// Subscribes to (or unsubscribes from) `resource`'s channel, bounded by the connect timeout.
    /// `false` when the connection no longer works.
    async fn command(&self, sink: &mut PubSubSink, subscribe: bool, resource: &str) -> bool {
        let channel = format!("{CHANNEL_PREFIX}{resource}");
        let sent = async {
            if subscribe {
                sink.subscribe(&channel).await
            } else {
                sink.unsubscribe(&channel).await
            }
        };
        matches!(
            tokio::time::timeout(self.connect_timeout, sent).await,
            Ok(Ok(()))
        )
    }
}
