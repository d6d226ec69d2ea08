//! Every manager setting as plain data, for the packages of other languages: each fills a
//! [`Settings`] from its users' keywords (Python's seconds, Node's milliseconds) and hands it to
//! [`Builder::settings`], which applies each setting given through the builder method of the
//! same name. The builder then checks them all, as for a Rust caller, so one set of rules says
//! what is valid whatever the language, and a fourth binding adds no copy of the list.

use std::time::Duration;

use crate::handles::config::Builder;
use crate::round::retry::Retry;

/// Every manager setting, each `None` for the builder's default (the [`Builder`] method of the
/// same name says what it does). Build one with `..Settings::default()`: fields may be added.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Settings {
    /// [`Builder::node_timeout`].
    pub node_timeout: Option<Duration>,
    /// [`Builder::connect_timeout`].
    pub connect_timeout: Option<Duration>,
    /// [`Builder::drift_factor`].
    pub drift_factor: Option<f64>,
    /// [`Builder::retry`].
    pub retry: Option<Retry>,
    /// [`Builder::max_ttl`].
    pub max_ttl: Option<Duration>,
    /// [`Builder::lock_delay`].
    pub lock_delay: Option<Duration>,
    /// [`Builder::quarantine`].
    pub quarantine: Option<bool>,
    /// [`Builder::trust_durable_nodes`].
    pub trust_durable_nodes: Option<bool>,
    /// [`Builder::trust_first_sight`].
    pub trust_first_sight: Option<bool>,
    /// [`Builder::fencing`].
    pub fencing: Option<bool>,
    /// [`Builder::fence_on_acquire`].
    pub fence_on_acquire: Option<bool>,
    /// [`Builder::fence_retention`].
    pub fence_retention: Option<Duration>,
    /// [`Builder::notify`].
    pub notify: Option<bool>,
    /// [`Builder::fair`].
    pub fair: Option<bool>,
    /// [`Builder::wait_for_replicas`].
    pub wait_for_replicas: Option<bool>,
    /// [`Builder::tls_root_certificates`] (PEM).
    pub tls_root_certificates: Option<Vec<u8>>,
}

impl Builder {
    /// Applies every setting that `settings` gives; the others keep their current value.
    pub fn settings(self, settings: &Settings) -> Self {
        /// Applies `value` with `method` when it is given.
        fn given<T: Clone>(
            b: Builder,
            value: &Option<T>,
            method: fn(Builder, T) -> Builder,
        ) -> Builder {
            match value {
                Some(value) => method(b, value.clone()),
                None => b,
            }
        }
        let s = settings;
        let b = given(self, &s.node_timeout, Builder::node_timeout);
        let b = given(b, &s.connect_timeout, Builder::connect_timeout);
        let b = given(b, &s.drift_factor, Builder::drift_factor);
        let b = given(b, &s.retry, Builder::retry);
        let b = given(b, &s.max_ttl, Builder::max_ttl);
        let b = given(b, &s.lock_delay, Builder::lock_delay);
        let b = given(b, &s.quarantine, Builder::quarantine);
        let b = given(b, &s.trust_durable_nodes, Builder::trust_durable_nodes);
        let b = given(b, &s.trust_first_sight, Builder::trust_first_sight);
        let b = given(b, &s.fencing, Builder::fencing);
        let b = given(b, &s.fence_on_acquire, Builder::fence_on_acquire);
        let b = given(b, &s.fence_retention, Builder::fence_retention);
        let b = given(b, &s.notify, Builder::notify);
        let b = given(b, &s.fair, Builder::fair);
        let b = given(b, &s.wait_for_replicas, Builder::wait_for_replicas);
        given(b, &s.tls_root_certificates, |b, pem| {
            b.tls_root_certificates(pem)
        })
    }
}
