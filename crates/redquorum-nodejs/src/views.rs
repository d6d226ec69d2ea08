//! Read-only answers as plain JavaScript objects: what each node holds for a resource, whether
//! a quorum holds it, who leads an election, an operator's marks, and a watch that reports
//! each change of leader (`index.js` makes it an async iterator).

use std::sync::Arc;

use napi::Env;
use napi::bindgen_prelude::{BigInt, Either, Object};
use napi_derive::napi;
use redquorum::{LeaderWatch, Locked};
use tokio_util::sync::CancellationToken;

use crate::errors::{Failure, Outcome};
use crate::runtime::promise;

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The leader of an election, as a majority of nodes report it.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct Leader {
    /// The identity the leader campaigned with.
    pub identity: String,
    /// The leader's lock value.
    pub value: String,
    /// The leader's term (its fencing token), when a majority agrees on it.
    pub term: Option<BigInt>,
    /// Milliseconds left on the leader's key, the shortest among the majority.
    pub ttl: f64,
}

impl From<redquorum::Leader> for Leader {
    fn from(l: redquorum::Leader) -> Self {
        Self {
            identity: l.identity,
            value: l.value,
            term: l.term.map(BigInt::from),
            ttl: ms(l.ttl),
        }
    }
}

/// What one node holds for a resource.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// The node's address, without credentials.
    pub node: String,
    /// `free`, `held`, `readers`, `other_type` or `unavailable`.
    pub state: String,
    /// The lock value, when held.
    pub value: Option<String>,
    /// Milliseconds left on the key, when it has an expiry.
    pub ttl: Option<f64>,
    /// Readers of a read-write lock.
    pub readers: Option<i64>,
    /// Why the node could not be asked, or the Redis type of a key that is not a lock.
    pub detail: Option<String>,
    /// The node's quarantine, if it is quarantined.
    pub quarantine: Option<String>,
    /// Whether the node may evict keys (lock nodes need `noeviction`).
    pub may_evict: bool,
}

impl From<redquorum::NodeStatus> for NodeStatus {
    fn from(s: redquorum::NodeStatus) -> Self {
        Self {
            state: s.state.name().to_owned(),
            value: s.state.value().map(str::to_owned),
            ttl: s.state.ttl().map(ms),
            readers: s
                .state
                .readers()
                .map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
            detail: s.state.detail(),
            node: s.node,
            quarantine: s.quarantine.map(|q| q.to_string()),
            may_evict: s.may_evict,
        }
    }
}

/// Whether a quorum holds a resource now (`locked()`'s answer when it is).
#[napi(object)]
#[derive(Debug, Clone)]
pub struct Holder {
    /// The holder's value; none for readers.
    pub value: Option<String>,
    /// Whether readers hold it (a read-write lock).
    pub readers: bool,
    /// Milliseconds a quorum keeps it at least.
    pub remaining: f64,
}

/// `locked()`'s answer: a holder, none when free, or a failure when too few nodes answered.
pub(crate) fn holder(resource: &str, locked: Locked) -> Outcome<Option<Holder>> {
    match locked {
        Locked::Held { value, remaining } => Either::A(Some(Holder {
            value: Some(value),
            readers: false,
            remaining: ms(remaining),
        })),
        Locked::Readers { remaining } => Either::A(Some(Holder {
            value: None,
            readers: true,
            remaining: ms(remaining),
        })),
        Locked::Unknown { answered, quorum } => Either::B(Failure::unavailable(
            resource,
            &format!(
                "cannot tell whether {resource:?} is locked: too few nodes answered \
                 ({answered} answered, {quorum} needed)"
            ),
        )),
        _ => Either::A(None),
    }
}

/// What an operator's vouch came to on one node.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct NodeMark {
    /// The node's address, without credentials.
    pub node: String,
    /// Whether the node is marked now.
    pub marked: bool,
    /// What happened, in words.
    pub detail: String,
}

/// One report of a [`Watch`].
#[napi(object)]
#[derive(Debug, Clone)]
pub struct LeaderChange {
    /// Whether the watch was closed (then there is no leader to report).
    pub closed: bool,
    /// The new leader; none when nobody leads.
    pub leader: Option<Leader>,
}

/// Reports each change of an election's leader.
#[napi]
#[derive(Debug)]
pub struct Watch {
    watch: Arc<tokio::sync::Mutex<LeaderWatch>>,
    closed: CancellationToken,
}

impl Watch {
    pub(crate) fn new(watch: LeaderWatch) -> Self {
        Self {
            watch: Arc::new(tokio::sync::Mutex::new(watch)),
            closed: CancellationToken::new(),
        }
    }
}

#[napi]
impl Watch {
    /// Resolves when the leader changes (at once the first time), or when the watch is closed.
    #[napi(ts_return_type = "Promise<LeaderChange>")]
    pub fn changed<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let (watch, closed) = (Arc::clone(&self.watch), self.closed.clone());
        promise(
            env,
            move || async move {
                tokio::select! {
                    leader = async { watch.lock().await.changed().await } => Some(leader),
                    () = closed.cancelled() => None,
                }
            },
            |changed: Option<Option<redquorum::Leader>>| LeaderChange {
                closed: changed.is_none(),
                leader: changed.flatten().map(Leader::from),
            },
        )
    }

    /// Ends the watch: a pending `changed()` resolves with `undefined`.
    #[napi]
    pub fn close(&self) {
        self.closed.cancel();
    }
}
