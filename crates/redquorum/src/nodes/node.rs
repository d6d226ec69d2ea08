//! One Redlock node: what each request of a round means in commands and replies.
//!
//! The [`engine`](crate::round::engine) sends every node the same [`Request`] and counts the
//! [`Answer`]s; this module turns a request into the standard `SET` or one of our scripts
//! ([`scripts`](crate::nodes::scripts)), sends it on the node's [`Server`] connection, and reads
//! the reply back into an answer. Nothing here knows how bytes reach Redis, and the engine knows
//! nothing of commands: that is the seam a node that is a whole Redis Cluster goes behind
//! (a node whose requests go to the master serving the lock key's slot, each master a
//! [`Server`] with its own health and quarantine), without touching the algorithm.
//!
//! # Invariants
//! 1. Only an acquisition, an extension or a fencing round is a vote ([`Request::is_vote`]), and
//!    a vote's answer carries the quarantine verdict read *after* its reply
//!    ([`server`](crate::nodes::server) invariant 7): a grant from a node quarantined at that
//!    moment is reported as [`Reply::Quarantined`], never counted.
//! 2. A request is queued on its connection in the poll that passes [`Node::send`]'s wait for
//!    the connection, and runs in the order it was queued ([`server`](crate::nodes::server)
//!    invariant 5): a release queued after a won round's stragglers runs after them.

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use redis::Value;

use crate::base::queue::{QueuePlace, WaiterId};
use crate::base::resources::{Access, Resources};
use crate::base::telemetry::{NodeMetrics, RequestKind};
use crate::nodes::endpoint::Endpoint;
use crate::nodes::node_error::NodeError;
use crate::nodes::scripts::{
    ACQUIRE_FENCED, ACQUIRE_FENCED_MARKED, ACQUIRE_MANY, ACQUIRE_MANY_FENCED, ACQUIRE_QUEUED,
    ACQUIRE_QUEUED_FENCED, EXTEND, EXTEND_FENCED, EXTEND_MANY, EXTEND_MANY_FENCED, FENCE,
    FENCE_HELD, FENCE_MANY, KeyGroup, LINGER, LuaScript, RELEASE, RELEASE_MANY, RELEASE_STANDARD,
    RELEASE_TIMELY, RW_ACQUIRE, RW_EXTEND, RW_FENCE, RW_LINGER, RW_RELEASE, one_or_many,
};
use crate::nodes::sentinels::Sentinels;
use crate::nodes::server::{Connection, NUMBER, Server, bounded, command, naming_keys};
use crate::nodes::shards::Shards;
use crate::nodes::subscriber::{Subscriber, Watch};
use crate::nodes::vouch::FirstSight;
use crate::protocol::aliases::{Claimant, RunIds};
use crate::protocol::cause::Asked;
use crate::protocol::fencing::{Advance, Proposal};
use crate::protocol::marker::MarkerState;
use crate::protocol::quarantine::{MARKER_KEY, Quarantine};
use crate::protocol::reply::Reply;
use crate::protocol::slots::{slot_of, slot_tag};

/// One request of a round, the same for every node. Each applies to all the resources of a
/// lock at once: on a set, a node does it for every key or for none (except a release, which
/// deletes every key that still holds our value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// `SET key value NX PX ttl_ms`; for a set, a script that sets every key only if none exists.
    Set { ttl_ms: u64 },
    /// `SET NX PX`, also advancing the fencing counters to the node's proposal for the token,
    /// in the same step: a pipeline of plain commands for one resource on a standalone
    /// master, else a script ([`fencing`](crate::protocol::fencing) step 1).
    /// `scripted` when it must be the script all the same: a campaign's, whose counter must
    /// advance only with a `SET` that succeeded (`handles/election.rs`
    /// invariant 5).
    SetFenced {
        ttl_ms: u64,
        advance: Advance,
        scripted: bool,
    },
    /// As a fair waiter: join or keep `place` in the resources' queues, and set the keys if they
    /// are free and it is our turn; fenced as [`Request::SetFenced`] when `advance` is given.
    SetQueued {
        ttl_ms: u64,
        advance: Option<Advance>,
        place: QueuePlace,
    },
    /// As a reader or the writer of a read-write lock (the resources say which,
    /// [`Access`]): take it if its rules allow, fenced when `advance` is given; a writer refused
    /// because of readers keeps new readers out for `hold_off_ms`
    /// ([`rwlock`](crate::protocol::rwlock)).
    SetReadWrite {
        ttl_ms: u64,
        advance: Option<Advance>,
        hold_off_ms: u64,
        /// A writer's id among the waiting writers.
        writer: Option<WaiterId>,
    },
    /// Store a fencing token while the lock still holds our value.
    Fence { token: u64, retention_ms: u64 },
    /// Advance the fencing counters to the node's proposal while the lock still holds our
    /// value: a token on request ([`fencing`](crate::protocol::fencing) invariant 8).
    FenceHeld { advance: Advance },
    /// The compare-and-PEXPIRE script; with fencing on (`retention_ms`), it also keeps the
    /// fencing counters for their retention from now. With `late_ms` (an extension by value of
    /// one resource under a lock-delay: `engine` invariant 10), a key with no more than that
    /// left is not extended but left to its delay; 0 for none (the holder's own extensions, sets
    /// and read-write locks, which are never extended by value).
    Extend {
        ttl_ms: u64,
        retention_ms: Option<u64>,
        late_ms: u64,
    },
    /// The compare-and-delete script; also takes `leave` out of the waiting queue. When
    /// `announce`, whatever it frees is announced to the resource's queued waiters; otherwise a
    /// single resource gets the standard script, byte for byte.
    Release {
        leave: Option<WaiterId>,
        announce: bool,
        /// Under a lock-delay, the remaining time (ms) at or below which a key of ours outlived
        /// its holder's validity and is left to expire ([`engine`](crate::round::engine)
        /// invariant 6); 0 without one (then a single resource gets the standard script).
        late_ms: u64,
    },
    /// Instead of a release, for a lock that was lost while a lock-delay is set: keep our keys
    /// for at least `ttl_ms` (the delay) from now ([`engine`](crate::round::engine) invariant 5).
    Linger { ttl_ms: u64 },
    /// Establish the connection (health check and scripts included).
    Connect,
}

impl Request {
    /// What a refusal of this request means: somebody else's value is there (an acquisition),
    /// or ours is not (anything else).
    pub(crate) fn asked(self) -> Asked {
        match self {
            Request::Set { .. }
            | Request::SetFenced { .. }
            | Request::SetQueued { .. }
            | Request::SetReadWrite { .. }
            | Request::Connect => Asked::Acquire,
            Request::Fence { .. }
            | Request::FenceHeld { .. }
            | Request::Extend { .. }
            | Request::Release { .. }
            | Request::Linger { .. } => Asked::Keep,
        }
    }

    /// What the request does, as metrics and spans name it.
    pub(crate) fn kind(self) -> RequestKind {
        match self {
            Request::Set { .. }
            | Request::SetFenced { .. }
            | Request::SetQueued { .. }
            | Request::SetReadWrite { .. } => RequestKind::Acquire,
            Request::Fence { .. } | Request::FenceHeld { .. } => RequestKind::Fence,
            Request::Extend { .. } => RequestKind::Extend,
            Request::Release { .. } | Request::Linger { .. } => RequestKind::Release,
            Request::Connect => RequestKind::Connect,
        }
    }

    /// Whether a reply to this request is a vote, which a quarantined node may not cast.
    pub(crate) fn is_vote(self) -> bool {
        matches!(
            self,
            Request::Set { .. }
                | Request::SetFenced { .. }
                | Request::SetQueued { .. }
                | Request::SetReadWrite { .. }
                | Request::Fence { .. }
                | Request::FenceHeld { .. }
                | Request::Extend { .. }
        )
    }
}

/// A node's answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answer {
    /// The node did what we asked.
    pub(crate) done: bool,
    /// How much longer the node is quarantined, if it is (its votes do not count).
    pub(crate) quarantined_for: Option<Quarantine>,
    /// For a fenced acquisition: the node's proposal for the token, its counters' new value
    /// ([`fencing`](crate::protocol::fencing) step 1).
    pub(crate) proposal: Option<Proposal>,
    /// For [`Request::SetQueued`]: refused because another waiter is ahead in the queue.
    pub(crate) behind: bool,
}

/// Turns a node's answer (or error) to `request` into the [`Reply`] reported to callers. A
/// quarantined node's grant is reported as such where it would have been a vote, and on
/// connecting (so callers can tell which nodes may vote); a release is simply done.
pub(crate) fn reply_of(request: Request, result: &Result<Answer, NodeError>) -> Reply {
    match result {
        Ok(Answer {
            done: true,
            quarantined_for: Some(left),
            ..
        }) if !matches!(request, Request::Release { .. }) => Reply::Quarantined(*left),
        Ok(Answer { done: true, .. }) => Reply::Granted,
        Ok(Answer { done: false, .. }) => Reply::Refused,
        Err(e) => e.reply(),
    }
}

/// One Redlock node: one Redis server, a whole Redis Cluster ([`shards`](crate::nodes::shards)),
/// or a primary with replicas behind Redis Sentinel ([`sentinels`](crate::nodes::sentinels)) or
/// behind a fixed address ([`endpoint`](crate::nodes::endpoint)).
#[derive(Debug)]
pub(crate) struct Node {
    target: Target,
    metrics: NodeMetrics,
}

/// The server that carries a node's marker ([`Node::marker_carrier`]).
pub(crate) enum Carrier<'a> {
    /// A plain node's own server.
    Own(&'a Server),
    /// The primary the sentinels named.
    Named(Arc<Server>),
}

impl std::ops::Deref for Carrier<'_> {
    type Target = Server;

    fn deref(&self) -> &Server {
        match self {
            Carrier::Own(server) => server,
            Carrier::Named(server) => server,
        }
    }
}

#[derive(Debug)]
// One per node of a manager, made once: the plain server inline saves its requests a pointer.
#[allow(clippy::large_enum_variant)]
enum Target {
    Plain(Server),
    Cluster(Shards),
    Sentinel(Sentinels),
    Endpoint(Endpoint),
}

impl Node {
    /// A node that is one plain Redis server.
    pub(crate) fn plain(server: Server) -> Self {
        let metrics = NodeMetrics::new(server.label());
        Self {
            target: Target::Plain(server),
            metrics,
        }
    }

    /// A node that is a Redis Cluster.
    pub(crate) fn cluster(shards: Shards) -> Self {
        let metrics = NodeMetrics::new(shards.label());
        Self {
            target: Target::Cluster(shards),
            metrics,
        }
    }

    /// A node that is a primary with replicas behind Redis Sentinel.
    pub(crate) fn sentinel(sentinels: Sentinels) -> Self {
        let metrics = NodeMetrics::new(sentinels.label());
        Self {
            target: Target::Sentinel(sentinels),
            metrics,
        }
    }

    /// A node that is a primary with replicas behind a fixed address.
    pub(crate) fn endpoint(endpoint: Endpoint) -> Self {
        let metrics = NodeMetrics::new(endpoint.label());
        Self {
            target: Target::Endpoint(endpoint),
            metrics,
        }
    }

    /// The node's address, without credentials.
    pub(crate) fn label(&self) -> &str {
        match &self.target {
            Target::Plain(server) => server.label(),
            Target::Cluster(shards) => shards.label(),
            Target::Sentinel(sentinels) => sentinels.label(),
            Target::Endpoint(endpoint) => endpoint.label(),
        }
    }

    /// A subscriber that hears this node's lock keys freed.
    pub(crate) fn subscriber(&self, watch: Watch) -> Subscriber {
        match &self.target {
            Target::Plain(server) => server.subscriber(watch),
            Target::Cluster(shards) => shards.subscriber(watch),
            Target::Sentinel(sentinels) => sentinels.subscriber(watch),
            Target::Endpoint(endpoint) => endpoint.server().subscriber(watch),
        }
    }

    /// What makes two nodes the same: their server's address, whatever the db (a cluster's
    /// seeds).
    pub(crate) fn server_identity(&self) -> String {
        match &self.target {
            Target::Plain(server) => server.server_identity(),
            Target::Cluster(shards) => shards.identity(),
            Target::Sentinel(sentinels) => sentinels.identity(),
            Target::Endpoint(endpoint) => endpoint.identity(),
        }
    }

    /// On a Redis Cluster node, the shard that serves `key`.
    pub(crate) async fn shard_of(&self, key: &str) -> Option<crate::nodes::shards::Shard> {
        match &self.target {
            Target::Plain(_) | Target::Sentinel(_) | Target::Endpoint(_) => None,
            Target::Cluster(shards) => shards.shard_of(key).await,
        }
    }

    /// The servers this node has sent requests to besides a plain one: a cluster's masters, the
    /// primaries the sentinels named.
    fn servers(&self) -> Vec<Arc<Server>> {
        match &self.target {
            Target::Plain(_) => Vec::new(),
            Target::Cluster(shards) => shards.servers(),
            Target::Sentinel(sentinels) => sentinels.servers(),
            Target::Endpoint(endpoint) => vec![Arc::clone(endpoint.server())],
        }
    }

    /// A request to this node for `resources` timed out: its round's deadline passed without
    /// its reply ([`server`](crate::nodes::server) invariant 6).
    pub(crate) fn timed_out(&self, resources: &Resources) {
        match &self.target {
            Target::Plain(server) => server.timed_out(),
            Target::Cluster(shards) => {
                if let Ok(slot) = Shards::slot(resources)
                    && let Some(server) = shards.owner_now(slot)
                {
                    server.timed_out();
                }
                shards.timed_out();
            }
            Target::Sentinel(sentinels) => {
                if let Some(server) = sentinels.primary_now() {
                    server.timed_out();
                }
                sentinels.saw(&NodeError::Timeout);
            }
            Target::Endpoint(endpoint) => endpoint.server().timed_out(),
        }
        self.metrics.failed(&Reply::Timeout);
    }

    /// Whether the node's `maxmemory-policy` lets it evict lock keys, as far as we know (any
    /// master, for a cluster).
    pub(crate) fn may_evict(&self) -> bool {
        match &self.target {
            Target::Plain(server) => server.may_evict(),
            Target::Endpoint(endpoint) => endpoint.server().may_evict(),
            Target::Cluster(_) | Target::Sentinel(_) => {
                self.servers().iter().any(|s| s.may_evict())
            }
        }
    }

    /// How much longer this node is quarantined for `key`, as far as we know now (`None` when
    /// trusted or not connected; for a cluster, the master serving `key`'s slot).
    pub(crate) fn quarantine(&self, key: &str) -> Option<Quarantine> {
        self.on_server(key, Server::quarantine)
    }

    /// The longest quarantine among this node's servers (one, or a cluster's masters).
    pub(crate) fn longest_quarantine(&self) -> Option<Quarantine> {
        match &self.target {
            Target::Plain(server) => server.quarantine(),
            Target::Cluster(shards) => shards.longest_quarantine(),
            Target::Sentinel(sentinels) => sentinels.longest_quarantine(),
            Target::Endpoint(endpoint) => endpoint.server().quarantine(),
        }
    }

    /// The state of the marker this client last saw on the server that serves `key`.
    pub(crate) fn marker_state(&self, key: &str) -> Option<MarkerState> {
        self.on_server(key, Server::marker_state)
    }

    /// `read` of the server that serves `key`, if it is known.
    fn on_server<T>(&self, key: &str, read: impl Fn(&Server) -> Option<T>) -> Option<T> {
        match &self.target {
            Target::Plain(server) => read(server),
            Target::Cluster(shards) => read(&*shards.owner_now(slot_of(key.as_bytes()))?),
            Target::Sentinel(sentinels) => read(&*sentinels.primary_now()?),
            Target::Endpoint(endpoint) => read(endpoint.server()),
        }
    }

    /// Shares the manager's record of its servers' `run_id`s: a plain server claims its own
    /// under its label, each master of a cluster under its address and the cluster's label
    /// (`aliases` invariant 1).
    pub(crate) fn share_run_ids(&mut self, run_ids: &Arc<RunIds>) {
        match &mut self.target {
            Target::Plain(server) => {
                let claimant = Claimant::plain(server.label());
                server.set_run_ids(Arc::clone(run_ids), claimant);
            }
            Target::Cluster(shards) => shards.share_run_ids(run_ids),
            Target::Sentinel(sentinels) => sentinels.share_run_ids(run_ids),
            Target::Endpoint(endpoint) => {
                let claimant = Claimant::plain(endpoint.label());
                if let Some(server) = endpoint.server_mut() {
                    server.set_run_ids(Arc::clone(run_ids), claimant);
                }
            }
        }
    }

    /// Joins the manager's first-sight protocol (a plain server only).
    pub(crate) fn join_first_sight(&mut self, group: &Arc<FirstSight>) {
        if let Target::Plain(server) = &mut self.target {
            server.set_first_sight(Arc::clone(group));
        }
    }

    /// The one server that carries this node's marker, for an operator's mark: a plain
    /// server, or the primary the sentinels name now (asked first). `None` for a Redis Cluster
    /// node, whose masters carry one each.
    pub(crate) async fn marker_carrier(&self) -> Option<Result<Carrier<'_>, NodeError>> {
        match &self.target {
            Target::Plain(server) => Some(Ok(Carrier::Own(server))),
            Target::Sentinel(sentinels) => Some(sentinels.primary().await.map(Carrier::Named)),
            Target::Endpoint(endpoint) => Some(Ok(Carrier::Own(endpoint.server()))),
            Target::Cluster(_) => None,
        }
    }

    /// The plain server this node is, if it is one (not a Redis Cluster node).
    pub(crate) fn plain_server(&self) -> Option<&Server> {
        match &self.target {
            Target::Plain(server) => Some(server),
            Target::Cluster(_) | Target::Sentinel(_) | Target::Endpoint(_) => None,
        }
    }

    /// Waits, until `deadline` at most, for this node to have run every request queued so far
    /// (invariant 2).
    pub(crate) async fn drain(&self, deadline: Instant) {
        match &self.target {
            Target::Plain(server) => server.drain(deadline).await,
            Target::Endpoint(endpoint) => endpoint.server().drain(deadline).await,
            Target::Cluster(_) | Target::Sentinel(_) => {
                let servers = self.servers();
                join_all(servers.iter().map(|s| s.drain(deadline))).await;
            }
        }
    }

    /// Runs a read-only `script` on `key` (not checked against the marker), bounded by
    /// `deadline`: for operators' reads such as [`Redlock::status`](crate::Redlock::status).
    pub(crate) async fn read(
        &self,
        script: &LuaScript,
        key: &str,
        deadline: Instant,
    ) -> Result<Value, NodeError> {
        bounded(deadline, async {
            match &self.target {
                Target::Plain(server) => read_on(server, false, script, key).await,
                Target::Endpoint(endpoint) => read_on(endpoint.server(), false, script, key).await,
                Target::Cluster(shards) => {
                    let read = |server: Arc<Server>, asking| async move {
                        read_on(&server, asking, script, key).await
                    };
                    shards.on_owner(slot_of(key.as_bytes()), read, |_| {}).await
                }
                Target::Sentinel(sentinels) => {
                    let server = sentinels.primary().await?;
                    let read = read_on(&server, false, script, key).await;
                    if let Err(e) = &read {
                        sentinels.saw(e);
                    }
                    read
                }
            }
        })
        .await
    }

    /// Performs `request`, sent at `sent` (its round's start, for its latency). Not bounded in
    /// time here: the caller bounds the whole round (see [`server`](crate::nodes::server)).
    /// `queued` is called once the request no longer waits for a connection: from then on it is
    /// queued on one (or has failed), and any later request to this node is queued behind it
    /// (invariant 2).
    pub(crate) async fn send(
        &self,
        request: Request,
        resources: &Resources,
        value: &str,
        sent: Instant,
        queued: impl FnOnce(),
    ) -> Result<Answer, NodeError> {
        let shards = match &self.target {
            Target::Plain(server) => {
                return self
                    .send_to(server, false, request, resources, value, sent, queued)
                    .await;
            }
            Target::Cluster(shards) => shards,
            Target::Endpoint(endpoint) => {
                let server = endpoint.server();
                let mut result = self
                    .send_to(server, false, request, resources, value, sent, queued)
                    .await;
                // The first request after a failover fails on the connection to the old primary,
                // which it dropped: it goes once more, through the address, within the same
                // deadline (`endpoint` invariant 4).
                if result.as_ref().is_err_and(Endpoint::moved) {
                    result = self
                        .send_to(server, false, request, resources, value, sent, || {})
                        .await;
                }
                endpoint.after_request(); // `endpoint` invariant 2
                return result;
            }
            Target::Sentinel(sentinels) => {
                let server = match sentinels.primary().await {
                    Ok(server) => server,
                    Err(e) => {
                        queued(); // never sent: nothing is queued behind it
                        self.metrics.failed(&e.reply());
                        return Err(e);
                    }
                };
                let result = self
                    .send_to(&server, false, request, resources, value, sent, queued)
                    .await;
                let Err(e) = &result else {
                    return result;
                };
                // The first request after a failover fails on the old primary: it goes once
                // more, to the one the sentinels name now (`sentinels` invariant 2).
                let (server, result) = match sentinels.moved_from(&server, e).await {
                    Some(primary) => {
                        let again = self
                            .send_to(&primary, false, request, resources, value, sent, || {})
                            .await;
                        (primary, again)
                    }
                    None => (server, result),
                };
                // Which server failed: the node's label names only the sentinels.
                return result.map_err(|e| match e {
                    NodeError::Unreachable(why) => {
                        NodeError::Unreachable(format!("the primary {}: {why}", server.label()))
                    }
                    other => other,
                });
            }
        };
        if request == Request::Connect {
            // Every master of the cluster, not only the one a resource would go to.
            queued();
            let connected = shards.connect_all().await;
            if let Err(e) = &connected {
                self.metrics.failed(&e.reply());
            }
            return connected.map(|()| Answer {
                done: true,
                quarantined_for: shards.longest_quarantine(),
                proposal: None,
                behind: false,
            });
        }
        let mut queued = Some(queued);
        let result = match Shards::slot(resources) {
            Ok(slot) => {
                let attempt = |server: Arc<Server>, asking| {
                    let on_queue = queued.take();
                    async move {
                        let queued = || on_queue.map_or((), |queued| queued());
                        self.send_to(&server, asking, request, resources, value, sent, queued)
                            .await
                    }
                };
                let failed = |e: &NodeError| self.metrics.failed(&e.reply());
                shards.on_owner(slot, attempt, failed).await
            }
            Err(e) => {
                self.metrics.failed(&e.reply());
                Err(e)
            }
        };
        if let Some(queued) = queued.take() {
            queued(); // never sent: nothing is queued behind it
        }
        result
    }

    #[allow(clippy::too_many_arguments)] // the request's own four, and where and how it goes
    async fn send_to(
        &self,
        server: &Server,
        asking: bool,
        request: Request,
        resources: &Resources,
        value: &str,
        sent: Instant,
        queued: impl FnOnce(),
    ) -> Result<Answer, NodeError> {
        let connection = server.connection().await;
        queued();
        let connection = connection
            .inspect_err(|e| self.metrics.failed(&e.reply()))?
            .voting(request.is_vote())
            .asking(asking);
        // Outside Tokio's cooperative budget: a task whose budget is spent would otherwise see its
        // first poll return before the command is queued (redis-rs queues it through a Tokio
        // channel, whose permit counts against the budget), and invariant 2 needs it queued.
        let outcome =
            tokio::task::unconstrained(perform(&connection, request, resources, value)).await;
        if let Ok((true, ..)) = &outcome {
            connection.vote_done(sent);
        }
        let answered = Instant::now();
        let quarantined_for = connection.finish(answered); // invariant 1: read after the reply
        let (done, proposal, behind) = match outcome {
            Ok(outcome) => {
                self.metrics
                    .answered(request.kind(), sent, answered, quarantined_for);
                outcome
            }
            Err(e) => {
                self.metrics.failed(&e.reply());
                return Err(e);
            }
        };
        Ok(Answer {
            done,
            quarantined_for,
            proposal,
            behind,
        })
    }
}

/// The hash tag the queue's keys take (`scripts/queue.lua`): on a Redis Cluster master, one
/// that hashes to the resources' slot (they share one), so that the keys the script names itself
/// are in the slot of the keys it was given; none on a standalone master.
fn queue_tag(connection: &Connection<'_>, resources: &Resources) -> String {
    if connection.in_cluster() {
        format!("{{{}}}", slot_tag(slot_of(resources.first().as_bytes())))
    } else {
        String::new()
    }
}

/// Runs a read-only `script` on `key` on `server` (not checked against the marker), after
/// `ASKING` when `asking`.
async fn read_on(
    server: &Server,
    asking: bool,
    script: &LuaScript,
    key: &str,
) -> Result<Value, NodeError> {
    let connection = server.connection().await?.asking(asking);
    let none: &[u64] = &[];
    let reply = connection.eval(false, script, &[key], None, none).await;
    connection.finish(Instant::now());
    reply
}

/// Sends `request` on `connection`: whether it was done, the fenced acquire's proposal, and whether a
/// queued acquire was refused because another waiter's turn came first.
async fn perform(
    connection: &Connection<'_>,
    request: Request,
    resources: &Resources,
    value: &str,
) -> Result<(bool, Option<Proposal>, bool), NodeError> {
    let keys = resources.keys();
    let many = keys.len() > 1;
    // An acquisition's vote reads the marker back (quarantine invariant 2, server invariant 7).
    let checked = connection.checks_votes()
        && matches!(
            request,
            Request::Set { .. }
                | Request::SetFenced { .. }
                | Request::SetQueued { .. }
                | Request::SetReadWrite { .. }
        );
    if resources.access() != Access::Exclusive {
        return perform_read_write(connection, checked, request, resources, value).await;
    }
    Ok(match request {
        // Plain `SET NX PX` for one resource: the standard format other clients expect.
        Request::Set { ttl_ms } if !many => {
            let key = resources.first();
            let mut cmd = command("SET", 5, key.len() + value.len() + 4 + NUMBER);
            cmd.arg(key).arg(value).arg("NX").arg("PX").arg(ttl_ms);
            let marker = checked.then_some(MARKER_KEY);
            let reply = connection.query(cmd, checked).await;
            match reply.map_err(|e| naming_keys(e, std::iter::once(key).chain(marker)))? {
                Value::Okay => (true, None, false),
                Value::SimpleString(s) if s == "OK" => (true, None, false),
                Value::Nil => (false, None, false),
                other => return Err(unexpected("SET", &other)),
            }
        }
        Request::Set { ttl_ms } => {
            match connection
                .eval(checked, &ACQUIRE_MANY, keys, Some(value), &[ttl_ms])
                .await?
            {
                Value::Nil => (false, None, false),
                reply => (int_reply(&reply)? == 1, None, false),
            }
        }
        Request::SetFenced {
            ttl_ms,
            advance,
            scripted: false,
        } if !many && connection.standalone() => {
            let key = resources.first();
            set_fenced_natively(connection, checked, key, value, ttl_ms, advance).await?
        }
        Request::SetFenced {
            ttl_ms, advance, ..
        } => {
            // One resource on a standalone master (a campaign's): the script reads the marker
            // itself, which costs no command of its own. Not on a cluster, where the marker is in
            // another slot than the lock key, nor for a set.
            let marked = checked && !many && connection.standalone();
            let script = if marked {
                &ACQUIRE_FENCED_MARKED
            } else {
                one_or_many(resources, &ACQUIRE_FENCED, &ACQUIRE_MANY_FENCED)
            };
            let reply = connection
                .eval(
                    checked && !marked,
                    script,
                    keys,
                    Some(value),
                    &[ttl_ms, advance.retention_ms, advance.grain_us],
                )
                .await?;
            match reply {
                Value::Nil => (false, None, false),
                reply => {
                    if marked && let Value::Array(items) = &reply {
                        connection.check_marker(items.get(1));
                    }
                    (true, Some(proposal(&reply)?), false)
                }
            }
        }
        Request::SetQueued {
            ttl_ms,
            advance,
            place,
        } => {
            let script: &LuaScript = if advance.is_some() {
                &ACQUIRE_QUEUED_FENCED
            } else {
                &ACQUIRE_QUEUED
            };
            let tail = (
                ttl_ms,
                place.id.to_string(),
                place.ticket_us,
                place.lease_ms,
                keys.len(),
                advance.map_or(0, |a| a.retention_ms),
                (
                    advance.map_or(0, |a| a.grain_us),
                    queue_tag(connection, resources),
                ),
            );
            match connection
                .eval(checked, script, keys, Some(value), tail)
                .await?
            {
                Value::Nil => (false, None, false),
                // Refused: another waiter's turn (the script's 0).
                Value::Int(0) => (false, None, true),
                reply if advance.is_some() => (true, Some(proposal(&reply)?), false),
                reply => (int_reply(&reply)? == 1, None, false),
            }
        }
        Request::Fence {
            token,
            retention_ms,
        } => {
            let script = one_or_many(resources, &FENCE, &FENCE_MANY);
            let reply = connection
                .eval(checked, script, keys, Some(value), &[token, retention_ms])
                .await?;
            (int_reply(&reply)? == 1, None, false)
        }
        Request::FenceHeld { advance } => {
            let reply = connection
                .eval(
                    checked,
                    &FENCE_HELD,
                    keys,
                    Some(value),
                    &[advance.retention_ms, advance.grain_us],
                )
                .await?;
            match reply {
                Value::Nil => (false, None, false),
                reply => (true, Some(proposal(&reply)?), false),
            }
        }
        Request::Extend {
            ttl_ms,
            retention_ms: None,
            late_ms,
        } => {
            let script = one_or_many(resources, &EXTEND, &EXTEND_MANY);
            let args: &[u64] = match late_ms {
                0 => &[ttl_ms],
                late_ms => &[ttl_ms, late_ms],
            };
            let reply = connection
                .eval(checked, script, keys, Some(value), args)
                .await?;
            (released(&reply)?, None, false)
        }
        Request::Extend {
            ttl_ms,
            retention_ms: Some(retention_ms),
            late_ms,
        } => {
            let script = one_or_many(resources, &EXTEND_FENCED, &EXTEND_MANY_FENCED);
            let args: &[u64] = match late_ms {
                0 => &[ttl_ms, retention_ms],
                late_ms => &[ttl_ms, retention_ms, late_ms],
            };
            let reply = connection
                .eval(checked, script, keys, Some(value), args)
                .await?;
            (released(&reply)?, None, false)
        }
        // Done when at least one key still held our value: the keys of a set are set and
        // extended together, so they expire together, and all or none were still ours.
        Request::Release {
            leave,
            announce,
            late_ms,
        } => {
            let reply = match (leave, announce, late_ms) {
                (None, false, 0) if !many => {
                    let none: &[u64] = &[];
                    connection
                        .eval(checked, &RELEASE_STANDARD, keys, Some(value), none)
                        .await?
                }
                (None, false, late_ms) if late_ms > 0 => {
                    connection
                        .eval(checked, &RELEASE_TIMELY, keys, Some(value), &[late_ms])
                        .await?
                }
                _ => {
                    let script = one_or_many(resources, &RELEASE, &RELEASE_MANY);
                    let leave = leave.map(|id| id.to_string()).unwrap_or_default();
                    // The queue's tag goes last (`scripts/queue.lua`).
                    let tail = (
                        leave,
                        u8::from(announce),
                        late_ms,
                        queue_tag(connection, resources),
                    );
                    connection
                        .eval(checked, script, keys, Some(value), tail)
                        .await?
                }
            };
            (released(&reply)?, None, false)
        }
        Request::Linger { ttl_ms } => {
            let reply = connection
                .eval(checked, &LINGER, keys, Some(value), &[ttl_ms])
                .await?;
            (int_reply(&reply)? >= 1, None, false)
        }
        Request::SetReadWrite { .. } | Request::Connect => (true, None, false),
    })
}

/// [`perform`] for a read-write lock's reader or writer: our own scripts for every request, since
/// the key may be a set of readers ([`rwlock`](crate::protocol::rwlock)).
async fn perform_read_write(
    connection: &Connection<'_>,
    checked: bool,
    request: Request,
    resources: &Resources,
    value: &str,
) -> Result<(bool, Option<Proposal>, bool), NodeError> {
    let keys = resources.keys();
    Ok(match request {
        Request::SetReadWrite {
            ttl_ms,
            advance,
            hold_off_ms,
            writer,
        } => {
            let mode = if resources.access() == Access::Write {
                "w"
            } else {
                "r"
            };
            let tail = (
                ttl_ms,
                advance.map_or(0, |a| a.retention_ms),
                advance.map_or(1, |a| a.grain_us),
                mode,
                hold_off_ms,
                writer.map(|id| id.to_string()).unwrap_or_default(),
            );
            match connection
                .eval(checked, &RW_ACQUIRE, keys, Some(value), tail)
                .await?
            {
                Value::Nil => (false, None, false),
                // A reader held off by waiting writers (`rwlock` invariant 2).
                Value::Int(0) => (false, None, true),
                reply if advance.is_some() => (true, Some(proposal(&reply)?), false),
                _ => (true, None, false),
            }
        }
        Request::Fence {
            token,
            retention_ms,
        } => {
            let reply = connection
                .eval(
                    checked,
                    &RW_FENCE,
                    keys,
                    Some(value),
                    &[token, retention_ms],
                )
                .await?;
            (int_reply(&reply)? == 1, None, false)
        }
        Request::Extend {
            ttl_ms,
            retention_ms,
            ..
        } => {
            let tail = [ttl_ms, retention_ms.unwrap_or(0)];
            let reply = connection
                .eval(checked, &RW_EXTEND, keys, Some(value), &tail)
                .await?;
            (int_reply(&reply)? == 1, None, false)
        }
        Request::Release { leave, late_ms, .. } => {
            // A writer giving up leaves the waiting writers under its id.
            let leave = leave.map(|id| id.to_string()).unwrap_or_default();
            let reply = connection
                .eval(checked, &RW_RELEASE, keys, Some(value), (leave, late_ms))
                .await?;
            (released(&reply)?, None, false)
        }
        Request::Linger { ttl_ms } => {
            let reply = connection
                .eval(checked, &RW_LINGER, keys, Some(value), &[ttl_ms])
                .await?;
            (int_reply(&reply)? >= 1, None, false)
        }
        // A read-write lock is never taken by the other acquisitions (the manager sends
        // `SetReadWrite`), and its token comes with it; refused, should one ever come.
        Request::Set { .. }
        | Request::SetFenced { .. }
        | Request::SetQueued { .. }
        | Request::FenceHeld { .. } => (false, None, false),
        Request::Connect => (true, None, false),
    })
}

fn unexpected(what: &str, reply: &Value) -> NodeError {
    NodeError::Server(format!("unexpected reply to {what}: {reply:?}"))
}

/// Reads a release's or an extension's script reply: done (positive), not ours (0), or left to
/// the lock-delay (negative: our key outlived its holder's validity,
/// [`engine`](crate::round::engine) invariants 6 and 10).
fn released(reply: &Value) -> Result<bool, NodeError> {
    match int_reply(reply)? {
        n if n < 0 => Err(NodeError::LeftToDelay),
        n => Ok(n >= 1),
    }
}

fn int_reply(reply: &Value) -> Result<i64, NodeError> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected("script", other)),
    }
}

/// Reads a fenced acquire script's `{proposal, ...}`: the node's proposal for the token, which
/// the script stored.
fn proposal(reply: &Value) -> Result<Proposal, NodeError> {
    let first = match reply {
        Value::Array(items) => items.first(),
        _ => None,
    };
    match first {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        _ => None,
    }
    .map(|value| Proposal {
        value,
        stored: true,
    })
    .ok_or_else(|| unexpected("fenced SET", reply))
}

/// A fenced acquisition of one resource on a standalone master, natively
/// ([`fencing`](crate::protocol::fencing) step 1): one pipeline of `SET NX PX`, the counter's start
/// (when we know the node's clock well enough to start it), `INCR`, `PEXPIRE`, `TIME` (when our
/// reading of the node's clock is over a second old), then the marker's `GET` when the vote is
/// `checked`. Whether the lock was set, and the node's proposal if it was.
///
/// Not a script, which costs the server twice as much, nor a `MULTI` transaction, which costs
/// both sides more (measured: `docs/performance.md`'s *The defaults, and what each option
/// costs*). Fencing invariant 2 needs the `INCR` to run before a later holder's `SET NX` can
/// succeed on this node, and it does. Ours runs right after our `SET` on the same connection, before its reply;
/// a later `SET NX` needs our key gone, which takes our release (sent after the reply) or our
/// TTL. If the `INCR` ran only after our key expired, the reply came later than the TTL after
/// the round began, so this node's grant was never part of a quorum that won: the round is
/// decided on replies that came within the validity.
async fn set_fenced_natively(
    connection: &Connection<'_>,
    checked: bool,
    key: &str,
    value: &str,
    ttl_ms: u64,
    advance: Advance,
) -> Result<(bool, Option<Proposal>, bool), NodeError> {
    let counter = connection.group_key(KeyGroup::Fence, key);
    let asked = Instant::now();
    // Invariant 6: without a grain, no counter is started from an estimate, and the clock is
    // read every time.
    let estimate = advance
        .starts_counters()
        .then(|| connection.clock_estimate(asked))
        .flatten();
    let start = estimate.map(|(clock, _)| advance.initial_counter(clock));
    let mut pipe = redis::Pipeline::with_capacity(6);
    let mut set = command("SET", 5, key.len() + value.len() + 4 + NUMBER);
    set.arg(key).arg(value).arg("NX").arg("PX").arg(ttl_ms);
    pipe.add_command(set);
    if let Some(start) = start {
        let mut init = command("SET", 5, counter.len() + 4 + 2 * NUMBER);
        init.arg(&counter).arg(start).arg("NX").arg("PX");
        init.arg(advance.retention_ms);
        pipe.add_command(init);
    }
    let mut incr = command("INCR", 1, counter.len());
    incr.arg(&counter);
    pipe.add_command(incr);
    let mut expire = command("PEXPIRE", 2, counter.len() + NUMBER);
    expire.arg(&counter).arg(advance.retention_ms);
    pipe.add_command(expire);
    // The node's clock, read with every acquisition: the trust window is checked against it,
    // never against our estimate (fencing invariant 7).
    pipe.add_command(command("TIME", 0, 0));
    if checked {
        let marker = connection.marker_key();
        let mut get = command("GET", 1, marker.len());
        get.arg(marker);
        pipe.add_command(get);
    }
    let named = |e| {
        let marker = checked.then(|| connection.marker_key());
        naming_keys(e, [key, counter.as_str()].into_iter().chain(marker))
    };
    let replies = connection.pipeline(&mut pipe).await.map_err(named)?;
    let received = Instant::now();
    let mut replies = replies.into_iter();
    let mut next = |what: &str| {
        replies.next().ok_or_else(|| {
            NodeError::Server(format!("no reply to the fenced acquisition's {what}"))
        })
    };
    // A refused command (`NOPERM`: an ACL without `+incr`, say) is this node's error, naming
    // the keys; only a counter that holds no number is read as such.
    let refused = |reply: Value| match reply {
        Value::ServerError(e) => Err(named(NodeError::from_redis(&e.into()))),
        reply => Ok(reply),
    };
    let set = refused(next("SET")?)?;
    if start.is_some() {
        refused(next("start of the counter")?)?;
    }
    let incr = match next("INCR")? {
        Value::ServerError(e) if e.details().is_some_and(|d| d.contains("not an integer")) => {
            Value::Nil
        }
        reply => refused(reply)?,
    };
    refused(next("PEXPIRE")?)?;
    let time = refused(next("TIME")?)?;
    if checked {
        // As `Connection::query` reads it (server invariant 7).
        let marker = refused(next("marker")?)?;
        connection.check_marker(Some(&marker));
    }
    // The node's clock after our commands ran (fencing invariant 4 compares the counter with
    // it); it also refreshes our estimate for the next start.
    let clock_us = clock_of(&time).ok_or_else(|| unexpected("TIME", &time))?;
    connection.saw_clock(clock_us, asked, received, advance.grain_us);
    let granted = match set {
        Value::Okay => true,
        Value::SimpleString(s) if s == "OK" => true,
        Value::Nil => false,
        other => return Err(unexpected("SET", &other)),
    };
    // Not a number (the key held something else): the node proposes its clock (step 1).
    let counter = match incr {
        Value::Int(n) => u64::try_from(n).ok(),
        _ => None,
    };
    let proposal = granted.then(|| advance.proposal(counter, clock_us));
    Ok((granted, proposal, false))
}

/// A `TIME` reply in µs.
fn clock_of(time: &Value) -> Option<u64> {
    let Value::Array(parts) = time else {
        return None;
    };
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match parts.as_slice() {
        [seconds, micros] => number(seconds)?
            .checked_mul(1_000_000)?
            .checked_add(number(micros)?),
        _ => None,
    }
}
