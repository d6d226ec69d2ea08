//! The library's errors as data the JavaScript layer turns into `Error` subclasses.
//!
//! A promise of the addon never rejects with a library error: it resolves with a [`Failure`]
//! (a class, so `index.js` tells it from a value with `instanceof`), and `index.js` builds the
//! exception a caller can branch on (`ResourceLockedError`, `ExecutionError`, …). The classes
//! live in JavaScript, where subclassing `Error` and node-redlock's names are natural, as the
//! Python package's live in Python; this module only says which one and fills its fields. The
//! message is the library's own `Display` (every node named, never a password), made one line.
//!
//! Errors in a call's arguments are thrown at once, synchronously, as a `RangeError` or a
//! `TypeError` ([`invalid`]): nothing was sent to any server.

use std::time::Duration;

use napi::bindgen_prelude::Either;
use napi_derive::napi;
use redquorum::{Cause, Error, Released, RoundFailure};

/// Either what a call returns or why it failed, as a promise of the addon resolves.
pub(crate) type Outcome<T> = Either<T, Failure>;

/// One node's answer in a failed round.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct NodeReply {
    /// The node's address, without credentials.
    pub node: String,
    /// What it answered: `granted`, `held by someone else`, `timed out`, …
    pub reply: String,
    /// Whether it granted.
    pub granted: bool,
}

/// Why a call failed, for `index.js` to throw as the matching `Error` subclass: a class, so
/// that a promise's value can be told from it with `instanceof`.
#[napi]
#[derive(Debug, Clone)]
pub struct Failure {
    detail: Detail,
}

#[napi]
impl Failure {
    /// What the failure says.
    #[napi(getter)]
    pub fn detail(&self) -> Detail {
        self.detail.clone()
    }
}

/// What a [`Failure`] says.
#[napi(object)]
#[derive(Debug, Clone)]
pub struct Detail {
    /// Which class: `busy`, `unavailable`, `quarantined`, `wrong_type`, `too_slow`, `not_held`,
    /// `lost`, `config` or `other`.
    pub kind: String,
    /// The one-line message.
    pub message: String,
    /// The resource (for several, sorted and joined by `, `).
    pub resource: Option<String>,
    /// Why, by the core's stable names (`Cause::name`, `LossReason::name`): for a failed round
    /// `busy`, `unavailable`, `quarantined`, `wrong_type`, `too_slow`, `not_held` or
    /// `left_to_delay`; for a lost lock, the failed extension's, or `validity_ran_out`,
    /// `limit_reached` or `invalid`.
    pub cause: Option<String>,
    /// How many nodes make a quorum.
    pub quorum: Option<u32>,
    /// How many rounds were tried.
    pub attempts: Option<u32>,
    /// Every node's reply in the last round.
    pub replies: Vec<NodeReply>,
    /// For `quarantined`: how many nodes are, and in how many milliseconds enough of them vote
    /// again.
    pub quarantined_nodes: Option<u32>,
    /// See `quarantined_nodes`.
    pub ready_in_ms: Option<f64>,
    /// For `wrong_type`: the node whose key is of another type.
    pub node: Option<String>,
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl std::ops::Deref for Failure {
    type Target = Detail;
    fn deref(&self) -> &Detail {
        &self.detail
    }
}

impl std::ops::DerefMut for Failure {
    fn deref_mut(&mut self) -> &mut Detail {
        &mut self.detail
    }
}

impl From<Detail> for Failure {
    fn from(detail: Detail) -> Self {
        Self { detail }
    }
}

impl Failure {
    fn new(kind: &str, message: &str) -> Self {
        Self::from(Detail {
            kind: kind.to_owned(),
            message: one_line(message),
            resource: None,
            cause: None,
            quorum: None,
            attempts: None,
            replies: Vec::new(),
            quarantined_nodes: None,
            ready_in_ms: None,
            node: None,
        })
    }

    fn on(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_owned());
        self
    }

    fn because(mut self, cause: &str) -> Self {
        self.cause = Some(cause.to_owned());
        self
    }

    /// A lock that was held and cannot be relied on any more.
    pub(crate) fn lost(resource: &str, message: &str, cause: &str) -> Self {
        Self::new("lost", message).on(resource).because(cause)
    }

    /// A second release, or an extension of a released lock: the holder's mistake, but also
    /// "not held".
    pub(crate) fn released_already(resource: &str) -> Self {
        Self::new(
            "not_held",
            &format!("lock on {resource:?} was already released"),
        )
        .on(resource)
    }

    /// Too few nodes answered to tell.
    pub(crate) fn unavailable(resource: &str, message: &str) -> Self {
        Self::new("unavailable", message)
            .on(resource)
            .because("unavailable")
    }

    /// An acquisition cancelled by its `AbortSignal`.
    pub(crate) fn aborted() -> Self {
        Self::new("aborted", "the acquisition was aborted")
    }

    /// A call the lock's state refuses (extending a lock that is kept alive).
    pub(crate) fn config(message: &str) -> Self {
        Self::new("config", message)
    }

    /// A round that failed with `cause`, node by node.
    fn round(
        resource: &str,
        message: &str,
        cause: &Cause,
        quorum: usize,
        replies: &[redquorum::NodeReply],
    ) -> Self {
        let mut failure = Self::new(kind_of(cause), message)
            .on(resource)
            .because(cause.name());
        failure.quorum = Some(count(quorum));
        failure.replies = replies
            .iter()
            .map(|r| NodeReply {
                node: r.node.clone(),
                reply: r.reply.to_string(),
                granted: r.reply.is_granted(),
            })
            .collect();
        match cause {
            Cause::Quarantined {
                nodes, ready_in, ..
            } => {
                failure.quarantined_nodes = Some(count(*nodes));
                failure.ready_in_ms = Some(millis(*ready_in));
            }
            Cause::WrongType { node } => failure.node = Some(node.clone()),
            _ => {}
        }
        failure
    }

    fn of_round(resource: &str, failure: &RoundFailure, message: &str) -> Self {
        Self::round(
            resource,
            message,
            &failure.cause(),
            failure.quorum,
            &failure.replies,
        )
    }
}

/// The kind of a round that failed with `cause`: the cause's own name, but for a release left to
/// its lock-delay, which came after the lock's validity: it was lost.
fn kind_of(cause: &Cause) -> &'static str {
    match cause {
        Cause::LeftToDelay => "lost",
        cause => cause.name(),
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Self::from(&error)
    }
}

impl From<&Error> for Failure {
    fn from(error: &Error) -> Self {
        let message = error.message(redquorum::Reader::Node);
        match error {
            Error::Config(_) => Self::new("config", &message),
            Error::NotAcquired {
                resource,
                failure,
                attempts,
            } => {
                let mut failure = Self::of_round(resource, failure, &message);
                failure.attempts = Some(*attempts);
                failure
            }
            Error::LockLost {
                resource,
                failure: Some(failure),
            } => {
                let mut lost = Self::of_round(resource, failure, &message);
                // An extension refused because the value is gone says "not held"; any other
                // failed extension (nodes down, too slow) still lost the lock.
                if lost.kind != "not_held" {
                    lost.kind = "lost".to_owned();
                }
                lost
            }
            Error::LockLost {
                resource,
                failure: None,
            } => Self::lost(resource, &message, "validity_ran_out"),
            Error::HoldLost { resource, reason } => Self::lost(resource, &message, reason.name()),
            // No token for a lock (`fencing` invariant 8): its voters no longer hold it, did not
            // answer, or its validity ran out.
            Error::NotFenced {
                resource,
                failure: Some(failure),
            } => {
                let mut failure = Self::of_round(resource, failure, &message);
                failure.kind = "not_fenced".to_owned();
                failure
            }
            Error::NotFenced { .. } => Self::new("not_fenced", &message),
            _ => Self::new("other", &message),
        }
    }
}

/// A release's outcome: how many nodes confirmed, or why a quorum did not (naming `shared`'s
/// resources).
pub(crate) fn released(shared: &redquorum::SharedLock, released: &Released) -> Outcome<u32> {
    let Some(cause) = released.cause() else {
        return Either::A(count(released.confirmed));
    };
    // Named only for a failure: a name joins every resource into a new string.
    let resource = &shared.name();
    let message = format!(
        "release of {resource:?}: {cause} ({} of {} nodes confirmed, {} needed)",
        released.confirmed,
        released.replies.len(),
        released.quorum
    );
    Either::B(Failure::round(
        resource,
        &message,
        &cause,
        released.quorum,
        &released.replies,
    ))
}

/// A library result as an outcome.
pub(crate) fn outcome<T>(result: Result<T, Error>) -> Outcome<T> {
    match result {
        Ok(value) => Either::A(value),
        Err(e) => Either::B(Failure::from(e)),
    }
}

/// An argument the library refuses: thrown at once with the code `InvalidArg`, which
/// `index.js` rethrows as its `ConfigError` (a `RangeError`).
pub(crate) fn invalid(message: impl AsRef<str>) -> napi::Error {
    napi::Error::new(napi::Status::InvalidArg, one_line(message.as_ref()))
}
