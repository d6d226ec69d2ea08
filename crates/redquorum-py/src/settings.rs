//! Python arguments as the library's types: durations given in seconds (or as a
//! `datetime.timedelta`), and the manager's settings, handed to the library's `Builder`.
//!
//! Nothing is checked twice: a setting left out keeps the builder's default, and every range
//! is the builder's to refuse ([`Builder::build`](redquorum::Builder::build)), so a Python
//! manager is refused exactly where a Rust one is, with the same message. Only what Python can
//! express and Rust cannot (a negative or NaN number of seconds) is refused here.

use std::time::Duration;

use pyo3::prelude::*;
use redquorum::{Builder, Redlock, Retry};

use crate::errors::{self, OrRaise};

/// A duration argument: seconds as a number, or anything with `total_seconds()`.
pub(crate) fn seconds(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let secs: f64 = if value.hasattr("total_seconds")? {
        value.call_method0("total_seconds")?.extract()?
    } else {
        value.extract().map_err(|_| {
            errors::config(format!(
                "invalid {name}: expected seconds (a number) or a timedelta, got {}",
                value
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_else(|_| "another type".to_owned())
            ))
        })?
    };
    Duration::try_from_secs_f64(secs).map_err(|_| {
        errors::config(format!(
            "invalid {name}: {secs} s is not a duration (negative, not a number, or too large)"
        ))
    })
}

/// An optional duration argument.
pub(crate) fn maybe_seconds(
    name: &str,
    value: Option<&Bound<'_, PyAny>>,
) -> PyResult<Option<Duration>> {
    value
        .filter(|v| !v.is_none())
        .map(|v| seconds(name, v))
        .transpose()
}

/// How the manager's acquisitions wait, as Python waits: until acquired, for a lock that
/// somebody holds (`threading.Lock`, redis-py's and pottery's locks do the same), but never
/// silently through an outage.
#[derive(Debug, Clone)]
pub(crate) struct RetrySettings {
    /// `retry_attempts`: how many attempts in a row may fail for anything but a held lock
    /// (nodes unreachable or quarantined) before a wait gives up (the library's
    /// `Retry::outage_attempts`); default 3, as the library's attempts.
    pub(crate) outage_attempts: u32,
    /// `retry_delay`: the longest wait between attempts when no release wakes the waiter.
    pub(crate) delay: Option<Duration>,
    /// `retry_max_wait`: the bound of a wait that gives no `timeout`; none by default.
    pub(crate) max_wait: Option<Duration>,
}

impl RetrySettings {
    /// The policy of one call: a single attempt (`blocking=False`), or attempts until acquired,
    /// until `timeout` has passed (else the manager's `retry_max_wait`, if set), or until an
    /// outage has failed `outage_attempts` in a row.
    pub(crate) fn for_call(&self, blocking: bool, timeout: Option<Duration>) -> Retry {
        if !blocking {
            return Retry::once();
        }
        let mut retry = Retry::forever().outage_attempts(self.outage_attempts);
        if let Some(delay) = self.delay {
            retry = retry.delay(delay);
        }
        match timeout.or(self.max_wait) {
            Some(limit) => retry.max_wait(limit),
            None => retry,
        }
    }
}

/// Every keyword of `Redlock(...)`, as given.
#[derive(Debug, Default)]
pub(crate) struct Settings {
    pub(crate) node_timeout: Option<Duration>,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) drift_factor: Option<f64>,
    pub(crate) retry_attempts: Option<u32>,
    pub(crate) retry_delay: Option<Duration>,
    pub(crate) retry_max_wait: Option<Duration>,
    pub(crate) max_ttl: Option<Duration>,
    pub(crate) lock_delay: Option<Duration>,
    pub(crate) quarantine: Option<bool>,
    pub(crate) trust_durable_nodes: Option<bool>,
    pub(crate) trust_first_sight: Option<bool>,
    pub(crate) fencing: Option<bool>,
    pub(crate) fence_retention: Option<Duration>,
    pub(crate) notify: Option<bool>,
    pub(crate) fair: Option<bool>,
    pub(crate) wait_for_replicas: Option<bool>,
    pub(crate) tls_root_certificates: Option<Vec<u8>>,
}

impl Settings {
    /// The manager, built (and checked) by the library's builder.
    pub(crate) fn build(&self, servers: &Servers) -> PyResult<(Redlock, RetrySettings)> {
        let mut b: Builder = match servers {
            Servers::List(list) => Redlock::builder_from_list(list),
            Servers::Urls(urls) => Redlock::builder(urls.clone()),
        };
        let mut retry = Retry::new();
        if let Some(n) = self.retry_attempts {
            retry = retry.attempts(n);
        }
        if let Some(d) = self.retry_delay {
            retry = retry.delay(d);
        }
        if let Some(d) = self.retry_max_wait {
            retry = retry.max_wait(d);
        }
        let settings = redquorum::Settings {
            node_timeout: self.node_timeout,
            connect_timeout: self.connect_timeout,
            drift_factor: self.drift_factor,
            retry: Some(retry),
            max_ttl: self.max_ttl,
            lock_delay: self.lock_delay,
            quarantine: self.quarantine,
            trust_durable_nodes: self.trust_durable_nodes,
            trust_first_sight: self.trust_first_sight,
            fencing: self.fencing,
            // `lock.fence` is a property in Python, which must not wait for the servers (an
            // asyncio caller would block its loop): every lock gets its token with its
            // acquisition (`fencing` invariant 8's alternative), as before the tokens on request.
            fence_on_acquire: Some(true),
            fence_retention: self.fence_retention,
            notify: self.notify,
            fair: self.fair,
            wait_for_replicas: self.wait_for_replicas,
            tls_root_certificates: self.tls_root_certificates.clone(),
        };
        b = b.settings(&settings);
        let redlock = b.build().or_raise()?;
        Ok((
            redlock,
            RetrySettings {
                outage_attempts: self.retry_attempts.unwrap_or(3),
                delay: self.retry_delay,
                max_wait: self.retry_max_wait,
            },
        ))
    }
}

/// The server list: one comma-separated string (the CLI's `--servers` form) or a sequence of
/// URLs.
pub(crate) fn servers(value: &Bound<'_, PyAny>) -> PyResult<Servers> {
    if let Ok(list) = value.extract::<String>() {
        return Ok(Servers::List(list));
    }
    let urls: Vec<String> = value.extract().map_err(|_| {
        errors::config("servers must be a comma-separated string of URLs or a list of URLs")
    })?;
    Ok(Servers::Urls(urls))
}

/// How the servers were given.
#[derive(Debug)]
pub(crate) enum Servers {
    List(String),
    Urls(Vec<String>),
}
