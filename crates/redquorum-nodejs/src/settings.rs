//! JavaScript arguments as the library's types: milliseconds as `Duration`s, node-redlock's
//! settings mapped onto ours, and the manager built by the library's `Builder`.
//!
//! Nothing is checked twice: a setting left out keeps the builder's default, and every range
//! is the builder's to refuse, so a Node manager is refused exactly where a Rust or a Python
//! one is, with the same message. Only what JavaScript can express and Rust cannot (a negative,
//! fractional-count or NaN number) is refused here.
//!
//! # node-redlock's settings
//! - `driftFactor` is ours too (same default, 0.01).
//! - `retryCount` counts retries, `retryDelay` and `retryJitter` are milliseconds, as in
//!   node-redlock (defaults 10, 200, 100): `retryCount + 1` attempts (`-1`: until acquired, as
//!   long as the nodes answer: three attempts in a row that fail for another reason, nodes
//!   down or quarantined, end the wait with that error instead of hiding an outage),
//!   each delay drawn from `[(delay + jitter) / 2, delay + jitter]` (the reference clients'
//!   rule, which the library keeps). A release of the lock wakes a waiter at once when
//!   `notify` is on, whatever the delay.
//! - `automaticExtensionThreshold` (ms, default 500): `using()` extends at the latest when this
//!   much validity is left; the library extends earlier by default (every third of the
//!   validity), so the threshold only matters when it is larger than two thirds of it.

use std::time::Duration;

use napi_derive::napi;
use redquorum::{HoldOptions, Redlock, Retry};

use crate::errors::invalid;

/// node-redlock's default `retryCount`.
const RETRY_COUNT: i64 = 10;
/// node-redlock's default `retryDelay`, ms.
const RETRY_DELAY_MS: f64 = 200.0;
/// node-redlock's default `retryJitter`, ms.
const RETRY_JITTER_MS: f64 = 100.0;
/// With `retryCount: -1`, how many attempts in a row may fail for anything but a held lock.
const OUTAGE_ATTEMPTS: u32 = 3;
/// node-redlock's default `automaticExtensionThreshold`, ms.
const EXTENSION_THRESHOLD_MS: f64 = 500.0;

/// A duration given in milliseconds.
pub(crate) fn millis(name: &str, ms: f64) -> napi::Result<Duration> {
    if !ms.is_finite() || ms < 0.0 {
        return Err(invalid(format!(
            "invalid {name}: {ms} ms is not a duration (negative, infinite or not a number)"
        )));
    }
    Duration::try_from_secs_f64(ms / 1000.0)
        .map_err(|_| invalid(format!("invalid {name}: {ms} ms is too large")))
}

fn maybe_millis(name: &str, ms: Option<f64>) -> napi::Result<Option<Duration>> {
    ms.map(|ms| millis(name, ms)).transpose()
}

/// How an acquisition waits: node-redlock's per-call settings, and `maxWait`.
#[napi(object)]
#[derive(Debug, Clone, Default)]
pub struct RetrySettings {
    /// Retries after the first attempt (default 10); `-1`: until acquired (or `maxWait`), unless
    /// three attempts in a row fail for anything but a held lock.
    pub retry_count: Option<i64>,
    /// The base delay between attempts, ms (default 200).
    pub retry_delay: Option<f64>,
    /// Added to the delay's upper bound, ms (default 100).
    pub retry_jitter: Option<f64>,
    /// An overall bound on the wait, ms from the first attempt (default: none).
    pub max_wait: Option<f64>,
    /// `using()`: extend at the latest when this much validity is left, ms (default 500).
    pub automatic_extension_threshold: Option<f64>,
}

impl RetrySettings {
    /// These settings, with `over`'s where it gives them.
    pub(crate) fn with(&self, over: Option<&RetrySettings>) -> RetrySettings {
        let Some(over) = over else {
            return self.clone();
        };
        RetrySettings {
            retry_count: over.retry_count.or(self.retry_count),
            retry_delay: over.retry_delay.or(self.retry_delay),
            retry_jitter: over.retry_jitter.or(self.retry_jitter),
            max_wait: over.max_wait.or(self.max_wait),
            automatic_extension_threshold: over
                .automatic_extension_threshold
                .or(self.automatic_extension_threshold),
        }
    }

    /// The library's retry policy.
    pub(crate) fn retry(&self) -> napi::Result<Retry> {
        let count = self.retry_count.unwrap_or(RETRY_COUNT);
        let mut retry = match count {
            // Until acquired, but not silently through an outage: three attempts in a row that
            // fail for anything but a held lock end the wait (the Python package's rule).
            -1 => Retry::forever().outage_attempts(OUTAGE_ATTEMPTS),
            n if n >= 0 => {
                Retry::new().attempts(u32::try_from(n.saturating_add(1)).unwrap_or(u32::MAX))
            }
            n => {
                return Err(invalid(format!(
                    "invalid retryCount: {n} (a number of retries, or -1 for no limit)"
                )));
            }
        };
        let delay = millis("retryDelay", self.retry_delay.unwrap_or(RETRY_DELAY_MS))?;
        let jitter = millis("retryJitter", self.retry_jitter.unwrap_or(RETRY_JITTER_MS))?;
        retry = retry.delay(delay.saturating_add(jitter));
        if let Some(wait) = maybe_millis("maxWait", self.max_wait)? {
            retry = retry.max_wait(wait);
        }
        Ok(retry)
    }

    /// How `using()` keeps alive a lock whose validity is `validity` (what it had left when
    /// acquired): the library's defaults, but extending no later than
    /// `automaticExtensionThreshold` before the deadline.
    pub(crate) fn hold(&self, validity: Duration) -> napi::Result<HoldOptions> {
        let threshold = millis(
            "automaticExtensionThreshold",
            self.automatic_extension_threshold
                .unwrap_or(EXTENSION_THRESHOLD_MS),
        )?;
        // The library's default interval is a third of the validity.
        let latest = validity.saturating_sub(threshold);
        let options = HoldOptions::new();
        Ok(if latest < validity / 3 && !latest.is_zero() {
            options.interval(latest)
        } else {
            options
        })
    }
}

/// `new Redlock(servers, settings)`'s settings: node-redlock's, and ours. Durations in ms.
#[napi(object)]
#[derive(Debug, Clone, Default)]
pub struct ManagerSettings {
    /// node-redlock's: clock drift allowance, a fraction of the TTL (default 0.01).
    pub drift_factor: Option<f64>,
    /// How long one node may take to answer, ms (default 100).
    pub node_timeout: Option<f64>,
    /// How long connecting to a node may take, ms.
    pub connect_timeout: Option<f64>,
    /// The longest TTL a lock may ask for, and a restarted node's quarantine, ms.
    pub max_ttl: Option<f64>,
    /// How long a lock whose holder vanished stays unavailable after its TTL, ms (default 0).
    pub lock_delay: Option<f64>,
    /// Whether nodes that may have lost their data sit out `maxTtl` (default true).
    pub quarantine: Option<bool>,
    /// Whether nodes with `appendfsync always` that kept their marker are trusted at once.
    pub trust_durable_nodes: Option<bool>,
    /// Whether a group of brand-new nodes seen together is trusted at once.
    pub trust_first_sight: Option<bool>,
    /// Whether locks carry a fencing token (default true).
    pub fencing: Option<bool>,
    /// How long a resource's fencing counter is kept after its last lock, ms.
    pub fence_retention: Option<f64>,
    /// Whether a release wakes waiters at once (default true).
    pub notify: Option<bool>,
    /// Whether waiters are served in arrival order (default false).
    pub fair: Option<bool>,
    /// Whether a Redis Cluster node's vote waits for its replicas.
    pub wait_for_replicas: Option<bool>,
    /// PEM root certificates for `rediss://` nodes.
    pub tls_root_certificates: Option<String>,
}

impl ManagerSettings {
    /// The manager, built (and checked) by the library's builder.
    pub(crate) fn build(&self, servers: Vec<String>) -> napi::Result<Redlock> {
        let settings = redquorum::Settings {
            drift_factor: self.drift_factor,
            node_timeout: maybe_millis("nodeTimeout", self.node_timeout)?,
            connect_timeout: maybe_millis("connectTimeout", self.connect_timeout)?,
            max_ttl: maybe_millis("maxTtl", self.max_ttl)?,
            lock_delay: maybe_millis("lockDelay", self.lock_delay)?,
            fence_retention: maybe_millis("fenceRetention", self.fence_retention)?,
            quarantine: self.quarantine,
            trust_durable_nodes: self.trust_durable_nodes,
            trust_first_sight: self.trust_first_sight,
            fencing: self.fencing,
            notify: self.notify,
            fair: self.fair,
            wait_for_replicas: self.wait_for_replicas,
            tls_root_certificates: self.tls_root_certificates.clone().map(String::into_bytes),
            ..redquorum::Settings::default()
        };
        let b = Redlock::builder(servers).settings(&settings);
        b.build().map_err(|e| invalid(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(count: Option<i64>, delay: Option<f64>, jitter: Option<f64>) -> RetrySettings {
        RetrySettings {
            retry_count: count,
            retry_delay: delay,
            retry_jitter: jitter,
            ..RetrySettings::default()
        }
    }

    #[test]
    fn node_redlocks_defaults_map_to_eleven_attempts_of_at_most_300_ms() {
        let expected = Retry::new().attempts(11).delay(Duration::from_millis(300));
        assert_eq!(retry(None, None, None).retry().ok(), Some(expected));
    }

    #[test]
    fn retry_counts_map_to_attempts_and_minus_one_waits_bounded_by_outages() {
        let once = retry(Some(0), Some(10.0), Some(0.0)).retry().ok();
        assert_eq!(
            once,
            Some(Retry::new().attempts(1).delay(Duration::from_millis(10)))
        );
        let forever = retry(Some(-1), Some(10.0), Some(5.0)).retry().ok();
        let expected = Retry::forever()
            .outage_attempts(OUTAGE_ATTEMPTS)
            .delay(Duration::from_millis(15));
        assert_eq!(forever, Some(expected));
        for bad in [-2, -5, i64::MIN] {
            assert!(retry(Some(bad), None, None).retry().is_err(), "{bad}");
        }
    }

    #[test]
    fn durations_that_are_no_duration_are_refused() {
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::MAX] {
            assert!(millis("ttl", bad).is_err(), "{bad}");
        }
        assert_eq!(millis("ttl", 1.5).ok(), Some(Duration::from_micros(1500)));
    }

    #[test]
    fn a_call_overrides_the_managers_settings_field_by_field() {
        let manager = retry(Some(3), Some(50.0), None);
        let call = retry(None, None, Some(7.0));
        let merged = manager.with(Some(&call));
        assert_eq!(
            (merged.retry_count, merged.retry_delay, merged.retry_jitter),
            (Some(3), Some(50.0), Some(7.0))
        );
    }

    #[test]
    fn the_extension_threshold_only_ever_brings_extensions_sooner() {
        let validity = Duration::from_millis(3000);
        let with = |ms: f64| RetrySettings {
            automatic_extension_threshold: Some(ms),
            ..RetrySettings::default()
        };
        // node-redlock's default (500 ms): the library's own interval, a third of the validity.
        assert_eq!(with(500.0).hold(validity).ok(), Some(HoldOptions::new()));
        // 2.7 s: extend when 2.7 s are left, i.e. every 300 ms.
        assert_eq!(
            with(2700.0).hold(validity).ok(),
            Some(HoldOptions::new().interval(Duration::from_millis(300)))
        );
        // Beyond the validity: nothing sooner is possible than the default.
        assert_eq!(with(5000.0).hold(validity).ok(), Some(HoldOptions::new()));
    }
}
