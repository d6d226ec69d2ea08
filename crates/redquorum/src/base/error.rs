//! The one error type, and the record of a failed round it carries (node by node: see
//! [`reply`](crate::protocol::reply)).
//!
//! A failed lock operation says *why*, node by node: "held by someone else" is a different story
//! from "node unreachable", and a caller (or the CLI's exit status) acts differently on each.
//! Server addresses are shown without credentials; passwords never reach a message.

use std::fmt;
use std::time::Duration;

use crate::protocol::cause::{Asked, Cause};
use crate::protocol::remedy::{Reader, Remedy};
use crate::protocol::reply::NodeReply;

/// The record of a round that did not reach a quorum in time.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoundFailure {
    /// How many grants a win needed.
    pub quorum: usize,
    /// Every node's reply, in configuration order.
    pub replies: Vec<NodeReply>,
    /// What the round asked, which decides what a refusal means.
    pub(crate) asked: Asked,
}

impl RoundFailure {
    /// How many nodes granted.
    pub fn granted(&self) -> usize {
        self.replies.iter().filter(|r| r.reply.is_granted()).count()
    }

    /// Why the round failed: busy, not held, unavailable, quarantined, a key of another type,
    /// or too slow to leave any validity.
    pub fn cause(&self) -> Cause {
        let replies = self.replies.iter().map(|r| (r.node.as_str(), &r.reply));
        Cause::of(self.asked, replies, self.quorum)
    }
}

impl fmt::Display for RoundFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} nodes granted, {} needed",
            self.granted(),
            self.replies.len(),
            self.quorum
        )?;
        if self.cause() == Cause::TooSlow {
            f.write_str(", but no validity was left")?;
        }
        let mut others = self.replies.iter().filter(|r| !r.reply.is_granted());
        if let Some(first) = others.next() {
            write!(f, " ({}: {}", first.node, first.reply)?;
            for r in others {
                write!(f, "; {}: {}", r.node, r.reply)?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong, in one type.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration or a call's arguments are invalid; nothing was sent to any server.
    #[error(transparent)]
    Config(#[from] ConfigError),

    /// The lock could not be acquired: busy, unreachable, or too slow to leave any validity.
    /// The failure describes the last attempt. Where quarantined nodes kept it from a quorum and
    /// a mark is right ([`Error::remedy`]), the message ends with the call that ends the wait.
    #[error("{}", not_acquired(resource, *attempts, failure, Reader::Rust))]
    NotAcquired {
        /// The resource that was asked for; for a set, its members sorted and joined by `, `.
        resource: String,
        /// How many rounds were tried.
        attempts: u32,
        /// The last round, node by node.
        failure: Box<RoundFailure>,
    },

    /// The lock is no longer ours to rely on: an extension did not reach a quorum within the
    /// validity, or the validity ran out before the extension started.
    #[error("lock on {resource:?} is lost: {}", lost_reason(.failure))]
    LockLost {
        /// The resource of the lost lock; for a set, its members sorted and joined by `, `.
        resource: String,
        /// The extension round that failed, if one was sent.
        failure: Option<Box<RoundFailure>>,
    },

    /// No fencing token could be issued for a lock ([`Lock::fence`](crate::Lock::fence)):
    /// fewer than a quorum of the nodes that voted for its acquisition still held it and
    /// answered in time, or its validity ran out first (`fencing` invariant 8). The lock itself
    /// may still be valid (the nodes may only have been slow to answer):
    /// [`is_valid`](crate::LockInfo::is_valid) says, and [`Error::is_lost`] is true when the
    /// voters no longer held it or its validity ran out.
    #[error("no fencing token for {resource:?}: {}", not_fenced_reason(.failure))]
    NotFenced {
        /// The resource of the lock; for a set, its members sorted and joined by `, `.
        resource: String,
        /// The round that failed, if one was sent.
        failure: Option<Box<RoundFailure>>,
    },

    /// A lock kept alive by a [`Guard`](crate::Guard) was lost before its holder released it:
    /// an extension failed, its validity ran out while an extension was under way, or a bound of
    /// its [`HoldOptions`](crate::HoldOptions) was reached.
    #[error("lock on {resource:?} is lost: {reason}")]
    HoldLost {
        /// The resource of the lost lock; for a set, its members sorted and joined by `, `.
        resource: String,
        /// Why the guard stopped keeping it.
        reason: LossReason,
    },

    /// A [`blocking`](crate::blocking) method was called where a Tokio runtime is current
    /// (an async task, `block_on`, `spawn_blocking`), where it would block the runtime's thread.
    /// The call sent nothing; `Lock::release` and `Guard::release` consumed their handle, which
    /// is then released in the background, as when dropped there.
    #[error(
        "redquorum::blocking::{method} would block a thread of a Tokio runtime (an async task, \
         block_on or spawn_blocking): use redquorum::{method}(..).await there"
    )]
    InsideRuntime {
        /// The method, as `Type::method`; the async one has the same name.
        method: &'static str,
    },
}

/// [`Error::NotAcquired`]'s message, its remedy (if any) in `reader`'s words.
fn not_acquired(resource: &str, attempts: u32, failure: &RoundFailure, reader: Reader) -> String {
    let mut message = format!("could not lock {resource:?} after {attempts} attempt(s): {failure}");
    if let Cause::Quarantined {
        remedy: Some(remedy),
        ..
    } = failure.cause()
    {
        message.push_str("; ");
        message.push_str(&remedy.advice(remedy.call(reader)).to_string());
    }
    message
}

fn not_fenced_reason(failure: &Option<Box<RoundFailure>>) -> String {
    match failure {
        Some(f) => format!("the lock's voters did not issue one, {f}"),
        None => "its validity ran out before one was issued".to_owned(),
    }
}

fn lost_reason(failure: &Option<Box<RoundFailure>>) -> String {
    match failure {
        Some(f) => format!("extension failed, {f}"),
        None => "its validity ran out".to_owned(),
    }
}

impl Error {
    /// The one-line message with any remedy in `reader`'s words (`remedy` invariant 3): what
    /// the Python and Node packages raise. For [`Reader::Rust`], the `Display`.
    pub fn message(&self, reader: Reader) -> String {
        match self {
            Error::NotAcquired {
                resource,
                attempts,
                failure,
            } => not_acquired(resource, *attempts, failure, reader),
            other => other.to_string(),
        }
    }

    /// What an operator can do at once about an acquisition that quarantined nodes kept from a
    /// quorum, where a mark is right: nodes that may simply be new (`remedy` invariant 1).
    pub fn remedy(&self) -> Option<Remedy> {
        match self {
            Error::NotAcquired { failure, .. } => match failure.cause() {
                Cause::Quarantined { remedy, .. } => remedy,
                _ => None,
            },
            _ => None,
        }
    }

    /// Whether a failed extension leaves the lock possibly held (too few nodes answered, or
    /// quarantined nodes, or a quorum too late), so that trying again while it is valid may
    /// keep it: not when the nodes that answered showed it gone.
    pub(crate) fn may_pass(&self) -> bool {
        matches!(
            self.cause(),
            Some(Cause::Unavailable | Cause::Quarantined { .. } | Cause::TooSlow)
        )
    }

    /// Whether the lock was not acquired because somebody else holds it (as opposed to the
    /// servers being unreachable or the configuration being wrong).
    pub fn is_busy(&self) -> bool {
        self.cause() == Some(Cause::Busy)
    }

    /// Why a round failed, for [`Error::NotAcquired`], and for [`Error::LockLost`] and
    /// [`Error::NotFenced`] when a round was sent.
    pub fn cause(&self) -> Option<Cause> {
        match self {
            Error::NotAcquired { failure, .. }
            | Error::LockLost {
                failure: Some(failure),
                ..
            }
            | Error::NotFenced {
                failure: Some(failure),
                ..
            } => Some(failure.cause()),
            _ => None,
        }
    }

    /// Whether a lock that was held can no longer be relied on ([`Error::LockLost`] from an
    /// extension, [`Error::HoldLost`] from a guard, [`Error::NotFenced`] when the lock's voters
    /// no longer held it or its validity had run out), as opposed to one that was never
    /// acquired.
    pub fn is_lost(&self) -> bool {
        match self {
            Error::LockLost { .. } | Error::HoldLost { .. } => true,
            // No token because the lock is gone, not because the nodes were slow.
            Error::NotFenced { failure, .. } => failure
                .as_ref()
                .is_none_or(|failure| failure.cause() == Cause::NotHeld),
            _ => false,
        }
    }
}

/// Why a [`Guard`](crate::Guard) stopped keeping its lock alive. Every reason means the same to
/// the holder: stop relying on the lock now.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LossReason {
    /// An extension round did not reach a quorum within the new validity (keys deleted or taken
    /// over, nodes down); every node's reply.
    ExtensionFailed(Box<RoundFailure>),
    /// No extension succeeded before the safety margin ahead of the validity deadline
    /// ([`HoldOptions::margin`](crate::HoldOptions::margin)), e.g. because the nodes stalled and
    /// the round could not finish in time.
    ValidityRanOut,
    /// A bound set in [`HoldOptions`](crate::HoldOptions) was reached. The keys were not
    /// released: they stay until the guard is released or dropped, or until they expire.
    LimitReached(Limit),
    /// The TTL or the interval cannot keep a lock alive; reported at once, before any extension
    /// was sent.
    Invalid(ConfigError),
}

impl LossReason {
    /// The reason's stable name, in `snake_case`, as every language binding reports it: the
    /// failed extension's [`Cause::name`], or `validity_ran_out`, `limit_reached`, `invalid`.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            LossReason::ExtensionFailed(failure) => failure.cause().name(),
            LossReason::ValidityRanOut => "validity_ran_out",
            LossReason::LimitReached(_) => "limit_reached",
            LossReason::Invalid(_) => "invalid",
        }
    }
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LossReason::ExtensionFailed(failure) => write!(f, "extension failed, {failure}"),
            LossReason::ValidityRanOut => f.write_str(
                "its validity ran out (to within the safety margin) before an extension succeeded",
            ),
            LossReason::LimitReached(limit) => write!(f, "{limit} reached"),
            LossReason::Invalid(e) => write!(f, "it cannot be kept alive, {e}"),
        }
    }
}

/// A bound on how long a [`Guard`](crate::Guard) keeps its lock alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// [`HoldOptions::max_extensions`](crate::HoldOptions::max_extensions): this many extensions
    /// were made and another one was due.
    Extensions(u32),
    /// [`HoldOptions::max_hold`](crate::HoldOptions::max_hold): this long has passed since the
    /// guard was created.
    Hold(Duration),
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Extensions(n) => write!(f, "the limit of {n} extension(s)"),
            Limit::Hold(d) => write!(f, "the maximum hold of {d:?}"),
        }
    }
}

/// A configuration or argument that cannot work, reported before any request is sent.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The server list is empty.
    #[error("no Redis servers given: pass at least one URL such as redis://127.0.0.1:6379")]
    NoServers,
    /// The same server appears twice; Redlock needs independent servers.
    #[error(
        "server {0} is listed more than once: every Redlock node must be a distinct, independent Redis server"
    )]
    DuplicateServer(String),
    /// A server URL could not be parsed. The URL is shown with its password masked.
    #[error("invalid server URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given, with any password replaced by `***`.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A TTL that leaves no validity after the clock-drift allowance, or does not fit Redis.
    #[error("invalid TTL {ttl:?}: {reason}")]
    InvalidTtl {
        /// The TTL asked for.
        ttl: Duration,
        /// Why it cannot work.
        reason: String,
    },
    /// A lock on several resources was asked for with an empty list.
    #[error("no resources given: a lock needs at least one resource")]
    NoResources,
    /// A resource name that the library's own keys use
    /// ([`RESERVED_PREFIXES`](crate::base::defaults::RESERVED_PREFIXES)): its lock would share a
    /// key with a fencing counter, a waiting queue or a node's marker.
    #[error(
        "the resource name {name:?} is reserved: names starting with {prefix:?} are the \
         library's own keys"
    )]
    ReservedName {
        /// The name asked for.
        name: String,
        /// The reserved prefix it starts with.
        prefix: &'static str,
    },
    /// Another setting is out of range.
    #[error("invalid {setting}: {reason}")]
    InvalidSetting {
        /// The builder setting, e.g. `node_timeout`.
        setting: &'static str,
        /// Why it cannot work.
        reason: String,
    },
}

/// Masks the password in a Redis URL, for messages and logs:
/// `redis://user:secret@host` → `redis://user:***@host`, and `?password=secret` → `?password=***`.
pub(crate) fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = out[authority_start..]
            .find(['/', '?'])
            .map_or(out.len(), |i| authority_start + i);
        if let Some(at) = out[authority_start..authority_end].rfind('@') {
            let userinfo = &out[authority_start..authority_start + at];
            let masked = match userinfo.split_once(':') {
                Some((user, _)) => format!("{user}:***"),
                None => "***".to_owned(),
            };
            out.replace_range(authority_start..authority_start + at, &masked);
        }
    }
    if let Some(query_start) = out.find('?') {
        let (head, query) = out.split_at(query_start + 1);
        let masked: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                // Every value but a few harmless ones: a misspelt password parameter
                // (`sentinel_pasword`) is still a password.
                Some((k, _))
                    if !matches!(k, "db" | "protocol" | "sentinel_username" | "replicas") =>
                {
                    format!("{k}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        out = format!("{head}{}", masked.join("&"));
    }
    out
}

/// The passwords a URL carries (userinfo and `pass`/`password` query parameters), so they can be
/// scrubbed from any message.
pub(crate) fn secrets_in(url: &str) -> Vec<String> {
    let redacted = redact_url(url);
    let mut secrets = Vec::new();
    // Walk both strings: wherever the redacted one says `***`, the original has a secret, followed
    // by the same text the redacted one has up to its next `***`.
    let mut rest_url = url;
    let mut rest_red = redacted.as_str();
    while let Some(i) = rest_red.find("***") {
        let after = &rest_red[i + 3..];
        let tail = &after[..after.find("***").unwrap_or(after.len())];
        let start = &rest_url[i..];
        let end = if tail.is_empty() {
            start.len()
        } else {
            start.find(tail).unwrap_or(start.len())
        };
        if end > 0 {
            secrets.push(start[..end].to_owned());
        }
        rest_url = &start[end..];
        rest_red = after;
    }
    secrets
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::reply::Reply;

    #[test]
    fn passwords_are_masked() {
        assert_eq!(
            redact_url("redis://alice:s3cret@db.example:6380/2"),
            "redis://alice:***@db.example:6380/2"
        );
        assert_eq!(
            redact_url("rediss://:s3cret@db.example"),
            "rediss://:***@db.example"
        );
        assert_eq!(
            redact_url("redis+unix:///run/redis.sock?db=1&pass=s3cret"),
            "redis+unix:///run/redis.sock?db=1&pass=***"
        );
        assert_eq!(redact_url("redis://127.0.0.1"), "redis://127.0.0.1");
        assert_eq!(
            redact_url("redis+sentinel://:d4ta@s1,s2/mymaster?sentinel_password=s3nt"),
            "redis+sentinel://:***@s1,s2/mymaster?sentinel_password=***"
        );
        assert_eq!(
            redact_url("redis+sentinel://s1/m?sentinel_username=app&sentinel_pasword=s3nt"),
            "redis+sentinel://s1/m?sentinel_username=app&sentinel_pasword=***"
        );
    }

    #[test]
    fn secrets_are_found_for_scrubbing() {
        assert_eq!(secrets_in("redis://alice:s3cret@h:1/2"), vec!["s3cret"]);
        assert_eq!(secrets_in("redis+unix:///x.sock?pass=pw&db=1"), vec!["pw"]);
        assert!(secrets_in("redis://h:1").is_empty());
    }

    #[test]
    fn a_failure_names_every_node_that_did_not_grant() {
        let failure = RoundFailure {
            quorum: 2,
            replies: vec![
                NodeReply {
                    node: "a:1".into(),
                    reply: Reply::Granted,
                },
                NodeReply {
                    node: "b:2".into(),
                    reply: Reply::Refused,
                },
                NodeReply {
                    node: "c:3".into(),
                    reply: Reply::Timeout,
                },
            ],
            asked: Asked::Acquire,
        };
        assert_eq!(
            failure.to_string(),
            "1 of 3 nodes granted, 2 needed (b:2: refused; c:3: timed out)"
        );
        assert_eq!(failure.cause(), Cause::Busy);
    }
}
