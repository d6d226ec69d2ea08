//! One Redlock node: the requests of a round, and the server each one goes to.
//!
//! The [`engine`](crate::round::engine) sends every node the same [`Request`] and counts the
//! [`Answer`]s; this module sends a request on the connection of the node's [`Server`] (for a
//! node of several servers, the one that serves it now), where
//! [`commands`](crate::nodes::commands) turns it into the standard `SET` or one of our scripts
//! and reads the reply back into an answer. Nothing here knows how bytes reach Redis, and the
//! engine knows nothing of commands: that is the seam a node that is a whole Redis Cluster goes
//! behind (a node whose requests go to the master serving the lock key's slot, each master a
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

use crate::base::resources::Resources;
use crate::base::telemetry::NodeMetrics;
use crate::nodes::commands::{perform, read_on};
use crate::nodes::endpoint::Endpoint;
use crate::nodes::node_error::NodeError;
use crate::nodes::request::Request;
use crate::nodes::run_ids::RunIds;
use crate::nodes::scripts::LuaScript;
use crate::nodes::sentinels::Sentinels;
use crate::nodes::server::{Server, bounded};
use crate::nodes::shards::Shards;
use crate::nodes::subscriber::{Subscriber, Watch};
use crate::nodes::vouch::FirstSight;
use crate::protocol::aliases::Claimant;
use crate::protocol::fencing::Proposal;
use crate::protocol::marker::MarkerState;
use crate::protocol::quarantine::Quarantine;
use crate::protocol::reply::Reply;
use crate::protocol::slots::slot_of;

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

impl Target {
    /// The node's address, without credentials.
    fn label(&self) -> &str {
        match self {
            Target::Plain(server) => server.label(),
            Target::Cluster(shards) => shards.label(),
            Target::Sentinel(sentinels) => sentinels.label(),
            Target::Endpoint(endpoint) => endpoint.label(),
        }
    }
}

impl Node {
    /// A node that is `target`, its metrics named by its label.
    fn new(target: Target) -> Self {
        let metrics = NodeMetrics::new(target.label());
        Self { target, metrics }
    }

    /// A node that is one plain Redis server.
    pub(crate) fn plain(server: Server) -> Self {
        Self::new(Target::Plain(server))
    }

    /// A node that is a Redis Cluster.
    pub(crate) fn cluster(shards: Shards) -> Self {
        Self::new(Target::Cluster(shards))
    }

    /// A node that is a primary with replicas behind Redis Sentinel.
    pub(crate) fn sentinel(sentinels: Sentinels) -> Self {
        Self::new(Target::Sentinel(sentinels))
    }

    /// A node that is a primary with replicas behind a fixed address.
    pub(crate) fn endpoint(endpoint: Endpoint) -> Self {
        Self::new(Target::Endpoint(endpoint))
    }

    /// The node's address, without credentials.
    pub(crate) fn label(&self) -> &str {
        self.target.label()
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
        let outgoing = Outgoing {
            request,
            resources,
            value,
            sent,
        };
        let shards = match &self.target {
            Target::Plain(server) => {
                return self.send_to(server, false, outgoing, queued).await;
            }
            Target::Cluster(shards) => shards,
            Target::Endpoint(endpoint) => {
                let server = endpoint.server();
                let mut result = self.send_to(server, false, outgoing, queued).await;
                // The first request after a failover fails on the connection to the old primary,
                // which it dropped: it goes once more, through the address, within the same
                // deadline (`endpoint` invariant 4).
                if result.as_ref().is_err_and(Endpoint::moved) {
                    result = self.send_to(server, false, outgoing, || {}).await;
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
                let result = self.send_to(&server, false, outgoing, queued).await;
                let Err(e) = &result else {
                    return result;
                };
                // The first request after a failover fails on the old primary: it goes once
                // more, to the one the sentinels name now (`sentinels` invariant 2).
                let (server, result) = match sentinels.moved_from(&server, e).await {
                    Some(primary) => {
                        let again = self.send_to(&primary, false, outgoing, || {}).await;
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
                        self.send_to(&server, asking, outgoing, queued).await
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

    /// Sends `outgoing` to `server`, after `ASKING` when `asking` (a Redis Cluster's `ASK`).
    async fn send_to(
        &self,
        server: &Server,
        asking: bool,
        outgoing: Outgoing<'_>,
        queued: impl FnOnce(),
    ) -> Result<Answer, NodeError> {
        let Outgoing {
            request,
            resources,
            value,
            sent,
        } = outgoing;
        let connection = server.connection().await;
        queued();
        let connection = connection
            .inspect_err(|e| self.metrics.failed(&e.reply()))?
            .voting(request.waits_for_replicas())
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
        let uncovered = connection.uncovered();
        let quarantined_for = connection.finish(answered); // invariant 1: read after the reply
        let outcome = match uncovered {
            // A quarantined node's reply is no vote already, and says why first.
            Some(shortfall) if quarantined_for.is_none() => Err(shortfall),
            _ => outcome,
        };
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

/// One request on its way to a node ([`Node::send`]): what it asks, of which resources and for
/// which value, and when its round began (for its latency).
#[derive(Clone, Copy)]
struct Outgoing<'a> {
    request: Request,
    resources: &'a Resources,
    value: &'a str,
    sent: Instant,
}
