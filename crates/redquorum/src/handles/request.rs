//! One acquisition as plain data, whatever the caller's language: which kind of hold, on which
//! resources, for how long, and how long to wait. The Python and Node packages and the CLI build
//! a [`Request`] from what their users typed and hand it to [`Redlock::request`]; this module is
//! the one place that reads a kind's name and checks that the resources fit the kind, so a fourth
//! language (a C ABI) is a thin file that builds the same value, not a copy of those rules.
//!
//! The typed methods ([`Redlock::acquire`], [`Redlock::acquire_permit`], ...) remain the Rust
//! caller's way in: they say at the call site what differs (a set is taken by our own scripts,
//! not the standard wire format), and both ways end in the same algorithm
//! (`round/acquire.rs`).
//!
//! [`Redlock::request`]: crate::Redlock::request
//! [`Redlock::acquire`]: crate::Redlock::acquire
//! [`Redlock::acquire_permit`]: crate::Redlock::acquire_permit

use std::fmt;
use std::time::Duration;

use crate::base::error::ConfigError;
use crate::base::resources::{Access, Resources};
use crate::base::semaphore::Permits;
use crate::handles::hold::Guard;
use crate::handles::lock::Lock;
use crate::round::acquire::Wanted;
use crate::round::retry::Retry;

/// What kind of hold an acquisition asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// An exclusive lock on one resource, or on a set taken all-or-nothing
    /// ([`Redlock::acquire_many`](crate::Redlock::acquire_many)).
    Lock,
    /// A read-write lock, as one of its readers
    /// ([`Redlock::acquire_read`](crate::Redlock::acquire_read)).
    Read,
    /// A read-write lock, as its writer ([`Redlock::acquire_write`](crate::Redlock::acquire_write)).
    Write,
    /// Any one of `permits` permits of a semaphore
    /// ([`Redlock::acquire_permit`](crate::Redlock::acquire_permit)).
    Permit {
        /// How many holders at most; every client of the semaphore passes the same number.
        permits: u32,
    },
    /// Leadership of an election, as the candidate `identity`, kept alive from the start
    /// ([`Redlock::campaign`](crate::Redlock::campaign)).
    Campaign {
        /// Who the candidate is, as observers read it.
        identity: String,
    },
}

impl Kind {
    /// The kind its name says, as the packages and the CLI spell it: `lock` (a semaphore's permit
    /// when `permits` is given), `read`, `write` or `campaign` (as `identity`, empty if `None`).
    ///
    /// # Errors
    /// [`ConfigError::InvalidSetting`] for another name, or `permits` with a kind other than
    /// `lock`.
    pub fn named(
        name: &str,
        permits: Option<u32>,
        identity: Option<String>,
    ) -> Result<Self, ConfigError> {
        let kind = match name {
            "lock" => {
                return Ok(match permits {
                    None => Kind::Lock,
                    Some(permits) => Kind::Permit { permits },
                });
            }
            "read" => Kind::Read,
            "write" => Kind::Write,
            "campaign" => Kind::Campaign {
                identity: identity.unwrap_or_default(),
            },
            other => {
                return Err(ConfigError::InvalidSetting {
                    setting: "kind",
                    reason: format!("{other:?} is not one of lock, read, write, campaign"),
                });
            }
        };
        match permits {
            None => Ok(kind),
            Some(_) => Err(ConfigError::InvalidSetting {
                setting: "permits",
                reason: format!("a {kind} takes no permits: a semaphore is a lock with permits"),
            }),
        }
    }
}

/// How errors name a kind: `lock`, `read lock`, `write lock`, `semaphore`, `campaign`.
impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Lock => "lock",
            Kind::Read => "read lock",
            Kind::Write => "write lock",
            Kind::Permit { .. } => "semaphore",
            Kind::Campaign { .. } => "campaign",
        })
    }
}

/// One acquisition, as plain data: the kind, the resources, the TTL and, if not the manager's,
/// the retry policy. Checked when [`Redlock::request`](crate::Redlock::request) takes it, before
/// anything is sent.
///
/// ```
/// # use std::time::Duration;
/// use redquorum::{Kind, Request, Retry};
///
/// let one = Request::new(Kind::Lock, ["invoice:42"], Duration::from_secs(10));
/// let pool = Request::new(Kind::Permit { permits: 3 }, ["gpu"], Duration::from_secs(30))
///     .retry(Retry::once());
/// # let _ = (one, pool);
/// ```
#[derive(Debug, Clone)]
pub struct Request {
    pub(crate) kind: Kind,
    pub(crate) resources: Vec<String>,
    pub(crate) ttl: Duration,
    pub(crate) retry: Option<Retry>,
}

impl Request {
    /// A request for `kind` on `resources` for `ttl`, retried by the manager's policy. Every
    /// kind but [`Kind::Lock`] takes exactly one resource (the semaphore's or election's name).
    pub fn new<S: Into<String>>(
        kind: Kind,
        resources: impl IntoIterator<Item = S>,
        ttl: Duration,
    ) -> Self {
        Self {
            kind,
            resources: resources.into_iter().map(Into::into).collect(),
            ttl,
            retry: None,
        }
    }

    /// The same request, retried by `retry` instead of the manager's policy
    /// ([`Retry::once`] for a single attempt).
    #[must_use]
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = Some(retry);
        self
    }

    /// The kind of hold asked for.
    pub fn kind(&self) -> &Kind {
        &self.kind
    }

    /// The resources, as given.
    pub fn resources(&self) -> &[String] {
        &self.resources
    }

    /// How long the keys live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// What the algorithm is asked for: the resources checked against the kind, once. A
    /// campaign is not an acquisition of its own (`Redlock::campaign_with` runs it).
    pub(crate) fn wanted(&self) -> Result<Wanted, ConfigError> {
        Ok(match &self.kind {
            Kind::Lock => match self.resources.as_slice() {
                [name] => Wanted::Lock(Resources::one(name)),
                names => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    Wanted::Lock(Resources::set(&names)?)
                }
            },
            Kind::Read => Wanted::Lock(Resources::read_write(self.one()?, Access::Read)),
            Kind::Write => Wanted::Lock(Resources::read_write(self.one()?, Access::Write)),
            Kind::Permit { permits } => Wanted::Permit(Permits::new(self.one()?, *permits)?),
            Kind::Campaign { .. } => {
                return Err(ConfigError::InvalidSetting {
                    setting: "kind",
                    reason: "a campaign is run by Redlock::campaign_with".into(),
                });
            }
        })
    }

    /// The one resource a kind other than [`Kind::Lock`] names.
    pub(crate) fn one(&self) -> Result<&str, ConfigError> {
        match self.resources.as_slice() {
            [name] => Ok(name),
            [] => Err(ConfigError::NoResources),
            _ => Err(ConfigError::InvalidSetting {
                setting: "resources",
                reason: format!("a {} takes exactly one resource", self.kind),
            }),
        }
    }
}

/// What an acquisition won: a lock, or a lock kept alive from the start (a campaign's
/// leadership).
#[derive(Debug)]
#[non_exhaustive]
pub enum Acquired {
    /// A lock, a reader's or writer's lock, or a semaphore's permit.
    Lock(Lock),
    /// A lock kept alive in the background: an election's leadership ([`Kind::Campaign`]).
    KeptAlive(Guard),
}
