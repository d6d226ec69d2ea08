//! One file because every round runs on its private machinery, and its invariants are cited widely.
//!
//! The round engine: one request to every node at once, the replies counted as they come in,
//! the round decided as soon as its outcome is known. And what every lock shares with its
//! manager: the nodes, the settings, the work left in the background.
//!
//! The algorithm ([`acquire`](crate::round::acquire)) says *which* rounds to run and what to make
//! of them; this module only runs them. A round does not know whether it acquires, extends or
//! releases beyond the one [`Until`] rule that says how long it waits.
//!
//! # Invariants
//! 1. A round sends its request to **every** node at the same instant and measures time from an
//!    instant taken before the first request ([`validity`] invariant 1).
//! 2. A round is decided as soon as the outcome is known ([`quorum`](crate::protocol::quorum)
//!    invariant 3). A won round returns at once, and its requests still in flight land all the
//!    same: a late `OK` simply becomes part of the lock (release and extension go to every node
//!    anyway). A request already queued on its node's connection is kept by the lock, unpolled,
//!    until the release is queued behind it: the node runs it first
//!    ([`server`](crate::nodes::server) invariant 5). Requests still waiting for a connection (a
//!    node's first request, or one after a reconnection) are finished in the background
//!    ([`stragglers`](crate::nodes::stragglers)), and the release waits for those: one that
//!    overtook such a `SET` would leave the key behind until its TTL. A round that can no longer be
//!    won still collects every reply, bounded by the node timeout, so that its rollback follows
//!    every late `SET`.
//! 3. A quarantined node ([`quarantine`](crate::protocol::quarantine)) still gets every request,
//!    but its grants are not votes. No lock or extension is longer than `max_ttl`, the quarantine
//!    length.
//! 4. Unless fairness or a lock-delay is on, a single resource's release is the standard
//!    compare-and-delete script, byte for byte, and costs exactly what it costs other clients:
//!    waiters learn of it from the server's key tracking. A fair client's release also announces itself to the queued
//!    waiters ([`waiting`](crate::round::waiting)).
//! 5. **Lock-delay.** Every key an acquisition or extension sets lives `lock_delay` longer on
//!    its node than the TTL the holder's deadline is computed from (`validity`), and the key's
//!    whole life (TTL plus delay) is at most `max_ttl`. So on every node of the holder's quorum
//!    its key outlives the holder's deadline by at least the delay (each node starts the key's
//!    clock after the round's start, and clocks run at about the same rate), and no other `SET
//!    NX` can win a quorum before then, unless the holder releases, which deletes the keys at
//!    once. A holder that releases a lock it already lost (its validity ran out, an extension
//!    failed, its guard gave it up) does not delete: its keys are kept for the delay from then
//!    (`scripts/linger.lua`), as if it had not released, since its last writes may still be in
//!    flight. On a replicated primary or a cluster master a linger waits for the replicas as a
//!    vote does (`succession` invariant 1): one they lack would not survive a failover, and the
//!    node does not confirm it.
//! 6. **A late release is no release, whoever sends it.** Under a lock-delay, a release that
//!    reaches a node after the holder's validity (the key has no more than the delay left)
//!    leaves the key to expire, and the node says so (`Reply::LeftToDelay`): the lock stays
//!    unavailable until validity plus delay, whether the release comes from the holder, from
//!    another process by value ([`Redlock::release_value`](crate::Redlock::release_value), the
//!    CLI's `release`), or from a holder that does not know it is late. The node judges from
//!    the key's own remaining time. The key was set (or extended) for the TTL plus the delay
//!    when the vote's write ran, which is at most a node timeout after its round began (a reply
//!    after the round's deadline is no vote), while the deadline counts from the round's start:
//!    at the holder's deadline the key has the delay, plus the drift allowance, plus that lag
//!    (at most the node timeout) left. So a sender that knows the deadline (the holder, whose own
//!    late release lingers anyway) tests against the delay plus the node timeout, and one that
//!    does not against the delay plus the drift allowance of `max_ttl`, the longest any lock may
//!    have, plus the node timeout: the holder's, carried in the lock's value, or its own if
//!    larger (`value` invariant 1; a sender without a lock-delay of its own still judges by the
//!    holder's). A release near the deadline may then be judged late: the safe
//!    side (a release by value of a lock whose TTL is shorter than that allowance plus the node
//!    timeout, 702 ms at the defaults, is always judged late). The model checker found the lag
//!    (`docs/model.md`): without it, a release that reached a node after the deadline freed a
//!    key whose write had run late. Such a release is not a success: [`Released::cause`] is
//!    [`Cause::LeftToDelay`](crate::Cause::LeftToDelay).
//! 7. **A release waits for the answers it needs.** The node timeout bounds a vote because a
//!    late vote is worth nothing; a late answer to a release is worth as much as an early one.
//!    So a release round whose outcome is still open at the node timeout (fewer than a quorum
//!    confirmed, and enough nodes still out to make one) goes on waiting for those nodes, up to
//!    [`RELEASE_PATIENCE`] from its start (or the node timeout, if longer), and stops as soon as
//!    the outcome is decided (a quorum confirmed, or too few nodes can). It waits for the
//!    requests already sent, never sends one again: a compare-and-delete sent twice would find
//!    its own first copy's work done and answer "not held". A node that answers within the
//!    patience is not counted as timed out (`server` invariant 6). Measured on a loaded 2-core
//!    machine running the debug build: releases on three healthy local nodes
//!    answered after the 100 ms node timeout, and a `with` block's release raised
//!    `Unavailable` out of a worker thread whose work had succeeded.
//! 8. **A holder's release hands the lock over in this process** once its request is queued on
//!    every node's connection (or the round ended): that wakes the waiter it would wake, before
//!    any node answered ([`waiting`](crate::round::waiting) invariant 12). Checked after each
//!    poll of the requests, never inside one, so every request counted as queued has been
//!    handed to its connection when the waiter runs (the exceptions, and why they cost only a
//!    refused attempt, are in that invariant).
//! 9. **An extension by value keeps the holder's lock-delay, whoever sends it**
//!    ([`Redlock::extend_value`](crate::Redlock::extend_value), the CLI's `extend`, the
//!    bindings' `extend_value`). Invariant 5 holds for the holder's own extensions; a process
//!    that extends by value may have no lock-delay of its own, or another one. So it takes the
//!    delay the holder carried in the value (`value` invariant 2), exactly: the keys get the
//!    TTL plus the holder's delay, which outlives the new deadline by that delay as invariant 5
//!    says, and leaves a release by value judging late exactly as invariant 6 says (a delay of
//!    the sender's own, longer, would leave a late release more than the holder's bound to find,
//!    and it would delete). Invariant 6 also needs the write's lag within the bound the value
//!    carries: that bound minus the delay is what the holder allows the lag and the drift
//!    allowance together, so this round counts only votes that come within it, less this TTL's
//!    drift allowance (the extender's node timeout if shorter; with the holder's settings, the
//!    node timeout itself). A value that carries no delay (another client's, or none was set)
//!    is extended with the sender's own settings, as the holder's own extensions are.
//! 10. **A late extension is no extension, whoever sends it.** An extension by value that
//!     reaches a node after the holder's validity (the key has no more than the late-release
//!     bound of invariant 6 left) does not extend the key: the node leaves it to its delay and
//!     says so (`Reply::LeftToDelay`), as for a late release. Otherwise a process could revive a
//!     lock its holder left unreleased inside the delay, and its release would then free the
//!     lock at once (found by review: `redlock extend` 0.5 s after a 2 s lock's deadline, then
//!     `redlock release`, let another client in 4.4 s before the 5 s delay ended). The holder
//!     never extends a lock its own clock says is lost (`lock` invariant 1), so its extensions
//!     carry no bound. As with releases, an extension by value near the deadline may be judged
//!     late (the safe side): one of a lock whose TTL is shorter than the bound is always refused.

use std::collections::HashSet;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::join_all;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::base::defaults::RELEASE_PATIENCE;
use crate::base::error::{ConfigError, Error, RoundFailure};
use crate::base::queue::WaiterId;
use crate::base::resources::{Access, Resources};
use crate::base::sync::lock;
use crate::base::telemetry;
use crate::nodes::endpoint::{Endpoint, is_endpoint_url};
use crate::nodes::node::{Answer, Node, reply_of};
use crate::nodes::node_error::NodeError;
use crate::nodes::request::Request;
use crate::nodes::run_ids::RunIds;
use crate::nodes::sentinels::{Sentinels, is_sentinel_url};
use crate::nodes::server::{Server, ServerSettings};
use crate::nodes::shards::{Shards, is_cluster_url};
use crate::nodes::stragglers::{LeftBehind, Stragglers};
use crate::nodes::subscriber::Watch;
use crate::nodes::vouch::FirstSight;
use crate::protocol::cause::{Asked, Cause};
use crate::protocol::coverage::Counting;
use crate::protocol::fencing::{Advance, Proposals, Voters};
use crate::protocol::quarantine::TrustPolicy;
use crate::protocol::quorum::{Decision, Tally};
use crate::protocol::reply::{NodeReply, Reply};
use crate::protocol::validity;
use crate::protocol::value::{self, Carried};
use crate::round::deadlines::Alarm;
use crate::round::retry::Retry;
use crate::round::waiting::Waiters;

/// What a release did, node by node.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Released {
    /// How many nodes held our value and deleted it.
    pub confirmed: usize,
    /// How many confirmations make a release certain: `N/2 + 1`.
    pub quorum: usize,
    /// Every node's reply: `Granted` (deleted), `Refused` (did not hold our value, e.g. already
    /// expired), or why it could not be asked.
    pub replies: Vec<NodeReply>,
}

impl Released {
    /// Whether a quorum confirmed the release: the lock was ours up to it, and is free now.
    pub fn is_confirmed(&self) -> bool {
        self.confirmed >= self.quorum
    }

    /// `None` when a quorum confirmed the release; otherwise why not: the lock was not held
    /// with this value ([`Cause::NotHeld`](crate::Cause::NotHeld)), too few nodes answered to
    /// tell, or the key holds another Redis type.
    pub fn cause(&self) -> Option<Cause> {
        (self.confirmed < self.quorum).then(|| {
            let replies = self.replies.iter().map(|r| (r.node.as_str(), &r.reply));
            Cause::of(Asked::Keep, replies, self.quorum)
        })
    }

    /// After work that has finished under the lock, a release that a quorum did not confirm
    /// changes nothing the caller can act on (whatever is left expires with its TTL): it is
    /// logged as a warning, not returned as a failure (`docs/library.md`'s *Releasing*).
    pub(crate) fn warn_if_unconfirmed(&self, resource: &str) {
        if let Some(cause) = self.cause() {
            tracing::warn!(
                resource,
                %cause,
                confirmed = self.confirmed,
                quorum = self.quorum,
                "release after the work finished was not confirmed by a quorum; what is left expires with its TTL"
            );
        }
    }
}

/// Whether a release's or an extension's sender knows the lock's deadline (invariants 6, 9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// The holder: it lingers on its own once its validity ran out, and its settings are the
    /// lock's.
    Known,
    /// A release or an extension by value, from a process that may not know when the lock was
    /// taken, nor under which settings.
    Unknown,
}

/// Every setting of a manager, validated by the [`Builder`](crate::Builder): what the engine
/// is built from. (No `Debug`: the server URLs may hold passwords.)
pub(crate) struct Settings {
    pub(crate) servers: Vec<String>,
    pub(crate) tls_root_certificates: Option<Vec<u8>>,
    pub(crate) trust: TrustPolicy,
    /// Whether a group seen without markers may be trusted on first sight
    /// ([`Builder::trust_first_sight`](crate::Builder::trust_first_sight)).
    pub(crate) first_sight: bool,
    pub(crate) rules: Rules,
    /// The replaced rule, for the chaos run only: Sentinel nodes trust the server the sentinels
    /// name (`succession` off).
    pub(crate) sentinel_trusts_primary: bool,
    /// The replaced rule, for the chaos run only: nodes behind a fixed address trust whatever
    /// server answers there (no `WAIT`, every new run a continuation).
    pub(crate) endpoint_trusts_address: bool,
    /// How a replicated node's votes count their replicas' acknowledgements: by identity,
    /// unless the chaos run's replaced rule counts them by number (`coverage`).
    pub(crate) counting: Counting,
}

/// The settings every round and every lock follows, kept by the engine.
#[derive(Debug)]
pub(crate) struct Rules {
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) drift_factor: f64,
    pub(crate) retry: Retry,
    pub(crate) max_ttl: Duration,
    /// How much longer than its TTL every key lives on the servers
    /// ([`Builder::lock_delay`](crate::Builder::lock_delay)), in whole milliseconds; 0: off.
    pub(crate) lock_delay_ms: u64,
    /// The replaced rule, for the chaos run only: a release frees the lock whenever it comes
    /// (invariant 6 off).
    pub(crate) release_ignores_delay: bool,
    /// What fenced acquisitions tell the nodes (counter retention, clock grain), worked out once
    /// at build; `None`: fencing is off.
    pub(crate) fence: Option<Advance>,
    /// Whether an exclusive lock's token comes with its acquisition rather than on request
    /// ([`Builder::fence_on_acquire`](crate::Builder::fence_on_acquire)).
    pub(crate) fence_on_acquire: bool,
    /// Whether waiters are woken by releases ([`Builder::notify`](crate::Builder::notify)).
    pub(crate) notify: bool,
    /// Whether waiters queue in arrival order ([`Builder::fair`](crate::Builder::fair)).
    pub(crate) fair: bool,
    /// Whether votes on a Redis Cluster wait for the shard's replicas
    /// ([`Builder::wait_for_replicas`](crate::Builder::wait_for_replicas)).
    pub(crate) wait_for_replicas: bool,
    /// Whether acquisition metrics name the resource
    /// ([`Builder::metrics_resource_label`](crate::Builder::metrics_resource_label)).
    pub(crate) resource_label: bool,
}

impl Rules {
    /// The late-release bound for a sender that does not know a lock's deadline, from these
    /// settings (invariant 6); 0 without a lock-delay. Our lock values carry it (`value`
    /// invariant 1).
    pub(crate) fn value_bound_ms(&self) -> u64 {
        validity::late_release_bound(
            self.lock_delay_ms,
            false,
            self.node_timeout,
            self.max_ttl,
            self.drift_factor,
        )
    }

    /// What a lock value carries from these settings (`value` invariants 1 and 2).
    pub(crate) fn carried(&self) -> Carried {
        Carried {
            late_bound_ms: self.value_bound_ms(),
            lock_delay_ms: self.lock_delay_ms,
        }
    }
}

/// How many fence rounds a token on request may take when nodes do not answer in time.
const FENCE_ATTEMPTS: u32 = 3;

/// The round engine, and what every lock handle shares with its manager.
#[derive(Debug)]
pub(crate) struct Engine {
    pub(crate) nodes: Vec<Node>,
    pub(crate) rules: Rules,
    /// The waiters of this manager and the subscribers that wake them.
    pub(crate) waiters: Waiters,
    /// Requests still in flight after their caller moved on: stragglers of won rounds, releases
    /// of dropped locks. Each is bounded by the node timeout. See [`Redlock::settle`](crate::Redlock::settle).
    pub(crate) background: TaskTracker,
    /// Drives the stragglers of won rounds (tracked by `background`).
    pub(crate) stragglers: Stragglers,
}

/// How long a round waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// Return at the first decisive reply if it is a win (an acquisition's `SET`). The requests
    /// still in flight land all the same, so their keys become part of the lock, and come back
    /// with the round for the lock's release to follow (invariant 2). A loss still waits for
    /// every reply, so that the rollback follows every late `SET`.
    Won,
    /// As [`Won`](Self::Won), for rounds that set no lock key (fencing, extension): the requests
    /// still in flight are finished in the background, and nothing waits for them.
    WonThenDriven,
    /// Wait for every node or its timeout (connect), to report them all.
    AllReplied,
    /// As [`AllReplied`](Self::AllReplied), and past the timeout, while the outcome is still
    /// open, go on waiting for the nodes still out, until it is decided or up to
    /// [`RELEASE_PATIENCE`] from the start (a release: invariant 7).
    Decided,
}

/// One round of requests, as decided.
#[derive(Debug)]
pub(crate) struct Round {
    start: Instant,
    /// What the round asked, which decides what a refusal means in its failure.
    asked: Asked,
    pub(crate) decision: Decision,
    /// The requests of a won round still in flight.
    pub(crate) stragglers: Option<LeftBehind>,
    /// What the nodes that granted proposed as the token (fenced acquisitions).
    pub(crate) proposals: Proposals,
    /// How many nodes said another waiter's turn comes first (fair acquisitions).
    pub(crate) behind: usize,
    pub(crate) quorum: usize,
    pub(crate) replies: Vec<Reply>,
    /// The nodes whose replies counted toward the decision: a won acquisition's voters
    /// (`fencing` invariant 8).
    pub(crate) voted: Voters,
}

impl Round {
    pub(crate) fn failure(self, shared: &Engine) -> RoundFailure {
        RoundFailure {
            quorum: self.quorum,
            replies: shared.label(self.replies),
            asked: self.asked,
        }
    }
}

/// The replies of a round so far.
struct Count {
    request: Request,
    tally: Tally,
    /// Emptied when the round is decided: stragglers are not recorded any more.
    replies: Vec<Reply>,
    /// What the nodes that granted proposed as the token (fenced acquisitions).
    proposals: Proposals,
    /// How many nodes refused a fair acquisition because another waiter was ahead.
    behind: usize,
    /// The only nodes whose replies may count, when the round is restricted to an
    /// acquisition's voters (`fencing` invariant 8).
    among: Option<Voters>,
    /// The nodes whose replies counted so far.
    voted: Voters,
}

impl Count {
    fn new(request: Request, nodes: usize, among: Option<Voters>) -> Self {
        Self {
            request,
            tally: Tally::new(nodes),
            replies: vec![Reply::Pending; nodes],
            proposals: Proposals::default(),
            behind: 0,
            among,
            voted: Voters::default(),
        }
    }

    /// Records node `i`'s answer, unless the round is decided already.
    fn record(&mut self, i: usize, result: &Result<Answer, NodeError>) {
        let Some(reply) = self.replies.get_mut(i) else {
            return;
        };
        *reply = reply_of(self.request, result);
        // In a round restricted to an acquisition's voters, another node's grant is no answer
        // for this lock (`fencing` invariant 8): reported as a refusal, so that the failure's
        // cause counts the voters alone.
        if self.among.is_some_and(|voters| !voters.has(i))
            && matches!(reply, Reply::Granted | Reply::Quarantined(_))
        {
            *reply = Reply::Refused;
        }
        let counts = match result {
            Ok(answer) if answer.done => {
                // Invariant 3: a quarantined node's vote does not count; nor, in a round
                // restricted to an acquisition's voters, another node's (`fencing` invariant 8).
                let counts = (!self.request.is_vote() || answer.quarantined_for.is_none())
                    && self.among.is_none_or(|voters| voters.has(i));
                if let Some(proposal) = answer.proposal {
                    self.proposals.add(proposal, counts);
                }
                if counts {
                    self.voted.add(i);
                }
                counts
            }
            Ok(answer) => {
                self.behind += usize::from(answer.behind);
                false
            }
            Err(_) => false,
        };
        self.tally.record(counts);
    }

    /// Every node that has not answered timed out.
    /// Records every request still pending as timed out, telling `timed_out` which node's.
    fn time_out_the_rest(&mut self, mut timed_out: impl FnMut(usize)) {
        for (i, reply) in self.replies.iter_mut().enumerate() {
            if matches!(reply, Reply::Pending) {
                *reply = Reply::Timeout;
                self.tally.record(false);
                timed_out(i);
            }
        }
    }
}

/// What every request of a round shares, owned so that a won round can leave its stragglers to
/// the background: one reference count per request rather than one per manager, resources and
/// value.
struct Fanout {
    shared: Arc<Engine>,
    request: Request,
    resources: Resources,
    value: Arc<str>,
    /// Written by each request as its reply comes in, read by the round after each poll.
    count: Mutex<Count>,
    /// How many requests still wait for their node's connection: not queued on it yet.
    unqueued: AtomicUsize,
    /// When the round started: every request is sent then, so it is each one's start too.
    start: Instant,
}

impl Fanout {
    fn count(&self) -> MutexGuard<'_, Count> {
        lock(&self.count)
    }

    /// Node `i`'s request, its reply recorded as soon as it is in.
    async fn send(self: Arc<Self>, i: usize) {
        if let Some(node) = self.shared.nodes.get(i) {
            let queued = || {
                self.unqueued.fetch_sub(1, Ordering::Relaxed);
            };
            let result = node
                .send(
                    self.request,
                    &self.resources,
                    &self.value,
                    self.start,
                    queued,
                )
                .await;
            self.count().record(i, &result);
        }
    }
}

impl Engine {
    /// Builds the engine: a node for each server (parsed, not connected) and a subscriber for
    /// each.
    ///
    /// # Errors
    /// An unparsable URL, or the same server twice.
    pub(crate) fn new(settings: Settings) -> Result<Self, ConfigError> {
        let node_settings = ServerSettings {
            connect_timeout: settings.rules.connect_timeout,
            trust: settings.trust,
        };
        let mut nodes = Vec::with_capacity(settings.servers.len());
        let mut seen = HashSet::new();
        for url in &settings.servers {
            let tls_roots = settings.tls_root_certificates.as_deref();
            let node = if is_cluster_url(url) {
                let wait_ms = settings
                    .rules
                    .wait_for_replicas
                    .then_some(settings.rules.node_timeout);
                let shards = Shards::new(url, node_settings, tls_roots, wait_ms)?;
                Node::cluster(shards)
            } else if is_sentinel_url(url) {
                let node_timeout = settings.rules.node_timeout;
                let sentinels = Sentinels::new(url, node_settings, tls_roots, node_timeout)?;
                Node::sentinel(
                    sentinels
                        .trusting(settings.sentinel_trusts_primary)
                        .counting(settings.counting),
                )
            } else if is_endpoint_url(url) {
                let node_timeout = settings.rules.node_timeout;
                let trusting = settings.endpoint_trusts_address;
                Node::endpoint(Endpoint::new(
                    url,
                    node_settings,
                    tls_roots,
                    node_timeout,
                    trusting,
                    settings.counting,
                )?)
            } else {
                Node::plain(Server::new(url.trim(), node_settings, tls_roots)?)
            };
            if !seen.insert(node.server_identity()) {
                return Err(ConfigError::DuplicateServer(node.server_identity()));
            }
            nodes.push(node);
        }
        let run_ids = Arc::new(RunIds::default());
        for node in &mut nodes {
            node.share_run_ids(&run_ids); // `aliases` invariant 1
        }
        let plain: Option<Vec<&Server>> = nodes.iter().map(Node::plain_server).collect();
        if let (true, true, Some(servers)) = (settings.trust.enabled, settings.first_sight, plain) {
            // `first_sight` invariants 5 and 7: only a group of plain servers, with the
            // quarantine on, and only where the deployment says uptimes cannot lie.
            let group = Arc::new(FirstSight::new(
                servers
                    .iter()
                    .map(|s| (s.label().to_owned(), s.client().clone()))
                    .collect(),
                settings.trust.max_ttl,
                // `first_sight` invariant 1: a client that trusts a first-sight marker when its
                // time comes may vote up to a clock drift early.
                validity::drift(settings.trust.max_ttl, settings.rules.drift_factor)
                    + Duration::from_millis(100),
                settings.rules.connect_timeout,
            ));
            for node in &mut nodes {
                node.join_first_sight(&group);
            }
        }
        let watch = if settings.rules.fair {
            Watch::Announcements
        } else {
            Watch::Keys
        };
        Ok(Self {
            waiters: Waiters::new(nodes.iter().map(|node| node.subscriber(watch)).collect()),
            nodes,
            rules: settings.rules,
            background: TaskTracker::new(),
            stragglers: Stragglers::new(),
        })
    }

    /// Sends `request` for `resources` and `value` to every node at once (invariant 1), all
    /// bounded by one deadline `timeout` from now, and counts the replies.
    pub(crate) async fn round(
        self: &Arc<Self>,
        until: Until,
        request: Request,
        resources: &Resources,
        value: &Arc<str>,
        timeout: Duration,
    ) -> Round {
        self.round_among(until, request, resources, value, timeout, None)
            .await
    }

    /// [`round`](Self::round), counting only the replies of `among`, when given: an
    /// acquisition's voters (`fencing` invariant 8). The others are sent the request all the
    /// same (it changes nothing that could harm: a counter only grows), and reported.
    pub(crate) async fn round_among(
        self: &Arc<Self>,
        until: Until,
        request: Request,
        resources: &Resources,
        value: &Arc<str>,
        timeout: Duration,
        among: Option<Voters>,
    ) -> Round {
        // Invariant 8: a holder's release (not a rollback's, nor a reader's) hands the lock to
        // a waiter of this process.
        let mut hands_over = matches!(request, Request::Release { .. })
            && until == Until::Decided
            && resources.access() == Access::Exclusive;
        let start = Instant::now();
        let node_deadline = start + timeout;
        let fanout = Arc::new(Fanout {
            shared: Arc::clone(self),
            request,
            resources: resources.clone(),
            value: Arc::clone(value),
            count: Mutex::new(Count::new(request, self.nodes.len(), among)),
            unqueued: AtomicUsize::new(self.nodes.len()),
            start,
        });
        // `join_all`: one allocation for a handful of nodes, and each poll counts every reply
        // that is in. Not `FuturesUnordered`, which yields after polling all its futures at once
        // (futures-rs#2333): 30 µs more per cycle (`docs/performance.md`'s *Hand-made parts*).
        let mut requests =
            join_all((0..self.nodes.len()).map(|i| Fanout::send(Arc::clone(&fanout), i)));
        // One deadline for the round, not one per request: they would all share it; watched by
        // the deadline thread, not a Tokio timer ([`deadlines`](crate::round::deadlines)).
        let mut deadline = Alarm::new(node_deadline);
        // Whether a release's deadline has been moved to its patience already (invariant 7).
        let mut patient = false;
        let time_out = |fanout: &Fanout| {
            fanout.count().time_out_the_rest(|i| {
                if let Some(node) = self.nodes.get(i) {
                    node.timed_out(&fanout.resources); // server invariant 6
                }
            });
        };
        // Invariant 8: once every request is queued on its connection, which happens in a poll
        // of `requests` (node invariant 2), a waiter's attempt made from now on runs after it.
        // At the latest when the round ends: a request never queued was dropped unsent.
        let mut hand_over = |fanout: &Fanout, ended: bool| {
            if hands_over && (ended || fanout.unqueued.load(Ordering::Relaxed) == 0) {
                hands_over = false;
                self.waiters.handed_over(&fanout.resources);
            }
        };
        // Whether requests are left on their way: only when the round was won before they all
        // replied.
        let left_behind = poll_fn(|cx| {
            // A reply that is in counts, even at the deadline.
            let all_in = Pin::new(&mut requests).poll(cx).is_ready();
            hand_over(&fanout, false);
            if all_in {
                return Poll::Ready(false);
            }
            let waits_for_all = matches!(until, Until::AllReplied | Until::Decided);
            if !waits_for_all && fanout.count().tally.decision() == Decision::Won {
                return Poll::Ready(true); // invariant 2
            }
            if patient && fanout.count().tally.decision() != Decision::Open {
                // Invariant 7: decided within the patience (a quorum confirmed, or too few
                // can): the nodes still out are not waited for.
                time_out(&fanout);
                return Poll::Ready(false);
            }
            if deadline.poll(cx).is_ready() && until == Until::Decided && !patient {
                patient = true;
                if fanout.count().tally.decision() == Decision::Open {
                    deadline = Alarm::new(start + timeout.max(RELEASE_PATIENCE)); // invariant 7
                }
            }
            if deadline.poll(cx).is_ready() {
                time_out(&fanout);
                return Poll::Ready(false); // the requests still pending are cancelled
            }
            Poll::Pending
        })
        .await;
        hand_over(&fanout, true);
        // Decided: replies that come in from now on are not recorded.
        let (decision, quorum, proposals, behind, replies, voted) = {
            let mut count = fanout.count();
            let replies = std::mem::take(&mut count.replies);
            (
                count.tally.decision(),
                count.tally.quorum(),
                count.proposals,
                count.behind,
                replies,
                count.voted,
            )
        };
        // Invariant 2. All polls of the round ran on this task, so the count is current.
        let stragglers = left_behind.then(|| {
            let requests = Box::pin(requests.map(drop));
            let unqueued = fanout.unqueued.load(Ordering::Relaxed) > 0;
            if until == Until::Won && !unqueued {
                LeftBehind::Queued(Mutex::new(requests))
            } else {
                LeftBehind::Driven(self.stragglers.hand_off(
                    requests,
                    node_deadline,
                    self.background.token(),
                ))
            }
        });
        telemetry::round(request.kind(), start);
        tracing::debug!(
            request = request.kind().name(),
            decision = ?decision,
            quorum,
            replies = %NodeReplies(&self.nodes, &replies),
            took_us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX),
            "round"
        );
        Round {
            start,
            asked: request.asked(),
            decision,
            proposals,
            behind,
            stragglers,
            quorum,
            replies,
            voted,
        }
    }

    /// Runs the compare-and-delete script on every node and waits for all of them; `leave`
    /// gives up that waiter's place in the fair queue. `deadline` says whether the sender knows
    /// the lock's deadline (its holder) or not (a release by value): see invariant 6.
    pub(crate) async fn release(
        self: &Arc<Self>,
        resources: &Resources,
        value: &Arc<str>,
        leave: Option<WaiterId>,
        deadline: Deadline,
        until: Until,
    ) -> Released {
        let span = tracing::debug_span!("release", resource = %resources);
        let late_ms = match deadline {
            _ if self.rules.release_ignores_delay => 0,
            Deadline::Known => validity::late_release_bound(
                self.rules.lock_delay_ms,
                true,
                self.rules.node_timeout,
                self.rules.max_ttl,
                self.rules.drift_factor,
            ),
            // `value` invariant 1: the holder's bound, whatever ours.
            Deadline::Unknown => value::release_bound_by_value(self.rules.value_bound_ms(), value),
        };
        let release = Request::Release {
            leave,
            // Invariant 4: only fair waiters need announcements.
            announce: self.rules.fair,
            late_ms,
        };
        self.release_round(until, release, resources, value, span)
            .await
    }

    /// What a release becomes for a lock that was lost while a lock-delay is set (invariant 5):
    /// every node keeps our keys for at least the delay from now, instead of deleting them.
    pub(crate) async fn linger(
        self: &Arc<Self>,
        resources: &Resources,
        value: &Arc<str>,
    ) -> Released {
        let span = tracing::debug_span!("release", resource = %resources, lingering = true);
        let linger = Request::Linger {
            ttl_ms: self.rules.lock_delay_ms,
        };
        self.release_round(Until::Decided, linger, resources, value, span)
            .await
    }

    /// A release round (`request` is a release or a linger): every node's answer awaited, up to
    /// the node timeout ([`Until::AllReplied`], a failed attempt's rollback, whose outcome
    /// nobody reads) or as long as the outcome needs them ([`Until::Decided`], invariant 7).
    async fn release_round(
        self: &Arc<Self>,
        until: Until,
        request: Request,
        resources: &Resources,
        value: &Arc<str>,
        span: tracing::Span,
    ) -> Released {
        let round = self
            .round(until, request, resources, value, self.rules.node_timeout)
            .instrument(span)
            .await;
        self.released(round)
    }

    /// A lock's fencing token on request (`fencing` invariant 8): the counters advanced where
    /// every key still holds `value`, counted on `voters` only, a quorum of them; then, when
    /// their proposals disagree, the largest stored on a quorum of them. Rounds are tried again
    /// only while the lock lasts (`valid_until`); whether it still does once the token is in
    /// (`acquire` invariant 1) is the caller's to judge, with a guard's margin.
    pub(crate) async fn fence_on_request(
        self: &Arc<Self>,
        resources: &Resources,
        value: &Arc<str>,
        voters: Voters,
        valid_until: Instant,
    ) -> Result<u64, Error> {
        let not_fenced = |failure: Option<RoundFailure>| Error::NotFenced {
            resource: resources.to_string(),
            failure: failure.map(Box::new),
        };
        let Some(advance) = self.rules.fence else {
            return Err(not_fenced(None));
        };
        let timeout = self.rules.node_timeout;
        // Both rounds counted on the voters only.
        let among_voters = |request| {
            let among = Some(voters);
            self.round_among(
                Until::WonThenDriven,
                request,
                resources,
                value,
                timeout,
                among,
            )
        };
        let mut attempts = 0;
        let token = loop {
            attempts += 1;
            let round = among_voters(Request::FenceHeld { advance }).await;
            if let (Decision::Won, Some(token)) = (round.decision, round.proposals.token()) {
                break token;
            }
            // Slow or unreachable nodes may answer the next round, while the lock lasts (a round
            // only ever advances counters where our keys are); voters that no longer hold our
            // value never will again (`fencing` invariant 8).
            let failure = round.failure(self);
            let again = failure.cause() == Cause::Unavailable
                && attempts < FENCE_ATTEMPTS
                && valid_until > Instant::now() + timeout;
            if !again {
                return Err(not_fenced(Some(failure)));
            }
        };
        if !token.stored {
            let store = Request::Fence {
                token: token.value,
                retention_ms: advance.retention_ms,
            };
            let round = among_voters(store).await;
            if round.decision != Decision::Won {
                return Err(not_fenced(Some(round.failure(self))));
            }
        }
        // The caller hands it out only if the lock is still valid (`LockInfo::issue_fence`).
        Ok(token.value)
    }

    /// Runs the compare-and-PEXPIRE script on every node; returns the new deadline. `sender`
    /// says whether the holder extends, or a process by value (invariant 9).
    pub(crate) async fn extend(
        self: &Arc<Self>,
        resources: &Resources,
        value: &Arc<str>,
        ttl: Duration,
        sender: Deadline,
    ) -> Result<Instant, Error> {
        let Terms {
            delay,
            timeout,
            late_ms,
        } = self.extension_terms(value, ttl, sender)?;
        let ttl_ms = self.check_ttl_with(ttl, delay)?;
        let span = tracing::debug_span!("extend", resource = %resources, ttl_ms);
        let round = self
            .round(
                Until::WonThenDriven,
                Request::Extend {
                    ttl_ms,
                    retention_ms: self.rules.fence.map(|a| a.retention_ms),
                    late_ms,
                },
                resources,
                value,
                timeout,
            )
            .instrument(span)
            .await;
        let deadline = self.deadline_if_won(&round, ttl);
        telemetry::extended(deadline.is_some());
        match deadline {
            Some(deadline) => Ok(deadline),
            None => Err(Error::LockLost {
                resource: resources.to_string(),
                failure: Some(Box::new(round.failure(self))),
            }),
        }
    }

    /// How an extension of `value` to `ttl` goes (invariants 9 and 10): the holder's own
    /// (`Deadline::Known`) with its settings and no late bound; by value, with what the value
    /// carries of its holder's, else with the sender's settings and bound. The value is read
    /// only by value: the holder's keep-alive pays nothing for it.
    fn extension_terms(
        &self,
        value: &str,
        ttl: Duration,
        sender: Deadline,
    ) -> Result<Terms, ConfigError> {
        let own = |late_ms| Terms {
            delay: LockDelay::Own(self.rules.lock_delay_ms),
            timeout: self.rules.node_timeout,
            late_ms,
        };
        if sender == Deadline::Known {
            return Ok(own(0));
        }
        let Some(carried) = value::carried(value) else {
            // Invariant 10, judged by the sender's own bound, as a release by value is.
            return Ok(own(value::release_bound_by_value(
                self.rules.value_bound_ms(),
                value,
            )));
        };
        // What the holder's bound allows the write's lag and the drift allowance together.
        let allowance = carried.late_bound_ms.saturating_sub(carried.lock_delay_ms);
        let lag = Duration::from_millis(allowance)
            .saturating_sub(validity::drift(ttl, self.rules.drift_factor));
        let timeout = self.rules.node_timeout.min(lag);
        if timeout.is_zero() {
            return Err(ConfigError::InvalidTtl {
                ttl,
                reason: format!(
                    "its clock-drift allowance is longer than the lock's holder allows for a late \
                     release ({allowance} ms, carried in the lock's value); use a shorter TTL"
                ),
            });
        }
        // Invariant 10 by the holder's bound: the keys are the holder's shape (invariant 9).
        Ok(Terms {
            delay: LockDelay::Holders(carried.lock_delay_ms),
            timeout,
            late_ms: carried.late_bound_ms,
        })
    }

    /// Invariant 3: the deadline, if the round was won and it is still in the future.
    pub(crate) fn deadline_if_won(&self, round: &Round, ttl: Duration) -> Option<Instant> {
        if round.decision != Decision::Won {
            return None;
        }
        validity::deadline(round.start, ttl, self.rules.drift_factor)
            .filter(|d| *d > Instant::now())
    }

    /// The TTL the servers' keys get, in whole milliseconds: the lock's own plus the lock-delay
    /// (invariant 5), if it leaves any validity after the drift allowance.
    pub(crate) fn check_ttl(&self, ttl: Duration) -> Result<u64, ConfigError> {
        self.check_ttl_with(ttl, LockDelay::Own(self.rules.lock_delay_ms))
    }

    /// [`check_ttl`](Self::check_ttl) with the lock-delay `delay`.
    fn check_ttl_with(&self, ttl: Duration, delay: LockDelay) -> Result<u64, ConfigError> {
        let ttl_ms = validity::ttl_millis(ttl);
        let invalid = |reason: String| ConfigError::InvalidTtl { ttl, reason };
        if ttl_ms == 0 {
            return Err(invalid(
                "Redis expiries are whole milliseconds, at least 1 ms".into(),
            ));
        }
        if ttl > self.rules.max_ttl {
            return Err(invalid(format!(
                "longer than max_ttl ({:?}), the restart quarantine; raise max_ttl on every client of these servers",
                self.rules.max_ttl
            )));
        }
        let (delay_ms, whose) = match delay {
            LockDelay::Own(ms) => (ms, "the lock-delay"),
            LockDelay::Holders(ms) => (ms, "the holder's lock-delay, carried in the lock's value,"),
        };
        let delay = Duration::from_millis(delay_ms);
        if ttl.saturating_add(delay) > self.rules.max_ttl {
            return Err(invalid(format!(
                "with {whose} ({delay:?}) longer than max_ttl ({:?}), the restart quarantine; use a shorter TTL or raise max_ttl on every client of these servers",
                self.rules.max_ttl
            )));
        }
        if validity::deadline(Instant::now(), ttl, self.rules.drift_factor).is_none() {
            let drift = validity::drift(ttl, self.rules.drift_factor);
            return Err(invalid(format!(
                "the clock-drift allowance ({drift:?}) leaves no validity; use a longer TTL"
            )));
        }
        Ok(ttl_ms.saturating_add(delay_ms))
    }

    /// What a release round (or a lost lock's lingering one) did, node by node.
    fn released(&self, round: Round) -> Released {
        Released {
            confirmed: round.replies.iter().filter(|r| r.is_granted()).count(),
            quorum: round.quorum,
            replies: self.label(round.replies),
        }
    }

    pub(crate) fn label(&self, replies: Vec<Reply>) -> Vec<NodeReply> {
        self.nodes
            .iter()
            .zip(replies)
            .map(|(node, reply)| NodeReply {
                node: node.label().to_owned(),
                reply,
            })
            .collect()
    }
}

/// How an extension goes (invariants 9 and 10).
struct Terms {
    /// The lock-delay its keys get.
    delay: LockDelay,
    /// How long its votes may take.
    timeout: Duration,
    /// The late bound the nodes judge it by; 0 for none.
    late_ms: u64,
}

/// The lock-delay a round's keys get past their TTL, in milliseconds, and whose it is.
#[derive(Debug, Clone, Copy)]
enum LockDelay {
    /// The sender's own settings.
    Own(u64),
    /// The holder's, carried in the lock's value (invariant 9).
    Holders(u64),
}

/// A round's replies, node by node (`address=word`), for its `debug` event: formatted only
/// when that event is enabled.
struct NodeReplies<'a>(&'a [Node], &'a [Reply]);

impl std::fmt::Display for NodeReplies<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (node, reply)) in self.0.iter().zip(self.1).enumerate() {
            let gap = if i == 0 { "" } else { " " };
            write!(f, "{gap}{}={}", node.label(), telemetry::reply_word(reply))?;
        }
        Ok(())
    }
}
