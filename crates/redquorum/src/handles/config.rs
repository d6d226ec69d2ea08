//! The builder: every setting with its documented default, checked once in [`Builder::build`].
//!
//! A configuration that cannot work (no servers, the same server twice, an unparsable URL, a
//! drift factor that leaves no validity, a timeout too long to mean anything) is an error here,
//! before any request is sent, never a panic and never a surprise at the first lock. Where a
//! huge duration has a meaning ("forever": a `fence_retention`, or a [`Retry`]'s delay and
//! `max_wait`), it is taken as that instead of refused.

use std::sync::Arc;
use std::time::Duration;

use crate::base::defaults::{
    CONNECT_TIMEOUT, DRIFT_FACTOR, FENCE_RETENTION, LONGEST_CONNECT_TIMEOUT,
    LONGEST_FENCE_RETENTION, MAX_TTL, NODE_TIMEOUT, SHORTEST_FENCE_RETENTION,
};
use crate::base::error::{ConfigError, Error};
use crate::handles::redlock::Redlock;
use crate::nodes::sentinels::is_sentinel_url;
use crate::nodes::shards::is_cluster_url;
use crate::protocol::coverage::Counting;
use crate::protocol::fencing::{self, Advance};
use crate::protocol::quarantine::TrustPolicy;
use crate::protocol::validity;
use crate::round::engine::{Engine, Rules, Settings};
use crate::round::retry::Retry;

/// Builds a [`Redlock`] manager. Create one with [`Redlock::builder`] or
/// [`Redlock::builder_from_list`].
#[derive(Debug, Clone)]
#[must_use]
pub struct Builder {
    servers: Vec<String>,
    node_timeout: Duration,
    connect_timeout: Duration,
    drift_factor: f64,
    retry: Retry,
    max_ttl: Duration,
    lock_delay: Duration,
    quarantine: bool,
    trust_durable_nodes: bool,
    trust_first_sight: bool,
    marker_names_history: bool,
    hand_markers_vouch: bool,
    sentinel_trusts_primary: bool,
    endpoint_trusts_address: bool,
    replicas_counted_by_number: bool,
    release_ignores_delay: bool,
    fencing: bool,
    fence_on_acquire: bool,
    fence_retention: Duration,
    notify: bool,
    fair: bool,
    wait_for_replicas: Option<bool>,
    metrics_resource_label: bool,
    tls_root_certificates: Option<Vec<u8>>,
}

impl Builder {
    pub(crate) fn new(servers: Vec<String>) -> Self {
        Self {
            servers,
            node_timeout: NODE_TIMEOUT,
            connect_timeout: CONNECT_TIMEOUT,
            drift_factor: DRIFT_FACTOR,
            retry: Retry::default(),
            max_ttl: MAX_TTL,
            lock_delay: Duration::ZERO,
            quarantine: true,
            trust_durable_nodes: true,
            trust_first_sight: false,
            marker_names_history: true,
            hand_markers_vouch: false,
            sentinel_trusts_primary: false,
            endpoint_trusts_address: false,
            replicas_counted_by_number: false,
            release_ignores_delay: false,
            fencing: true,
            fence_on_acquire: false,
            fence_retention: FENCE_RETENTION,
            notify: true,
            fair: false,
            wait_for_replicas: None,
            metrics_resource_label: false,
            tls_root_certificates: None,
        }
    }

    /// The certificate authorities (PEM, one or more certificates) that `rediss://` servers'
    /// certificates must chain to, instead of the system's roots (the default): for servers with
    /// certificates from a private CA. Checked at [`build`](Self::build): a PEM that holds no
    /// certificate is an [`Error::Config`]. A server whose certificate does not chain to them, or
    /// has expired, is refused on connection with an error that says so; it is never trusted
    /// without verification.
    pub fn tls_root_certificates(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificates = Some(pem.into());
        self
    }

    /// How long each node has to answer one request (default [`NODE_TIMEOUT`], 100 ms).
    /// A node that does not answer in time counts as no vote. Must be greater than zero and at
    /// most `max_ttl`: a reply later than that cannot count toward any lock, whose validity has
    /// run out by then.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// How long establishing a connection may take (default [`CONNECT_TIMEOUT`], 1 s).
    /// Must be greater than zero and at most [`LONGEST_CONNECT_TIMEOUT`] (an hour).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The clock drift factor (default [`DRIFT_FACTOR`], 0.01): a lock of TTL `t` is
    /// trusted for `t − elapsed − (t × factor + 2 ms)`. Must be in `[0, 1)`.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// The retry policy of [`Redlock::acquire`] (default [`Retry::default`]: 3 attempts, delays
    /// of 100–200 ms, no deadline).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// The largest TTL any client of these servers uses (default [`MAX_TTL`], 60 s).
    /// Locks and extensions longer than this are refused, and it is the length of the restart
    /// quarantine: configure the same value on every client.
    pub fn max_ttl(mut self, max_ttl: Duration) -> Self {
        self.max_ttl = max_ttl;
        self
    }

    /// Whether a node that restarted less than `max_ttl` ago, or whose `run_id` changed under us,
    /// is quarantined: still sent every request, but not counted toward a majority (default
    /// `true`). Turning it off gives plain Redlock, which can hand out a lock twice when a node
    /// restarts without its data.
    pub fn quarantine(mut self, on: bool) -> Self {
        self.quarantine = on;
        self
    }

    /// **Unsafe; for `redlock chaos` only** (feature `replaced-rules`): a Redis Cluster master's
    /// marker names its `run_id` alone, the rule that a failback defeats (`quarantine`
    /// invariant 6), so that the chaos run can show the failback fault catching it.
    #[cfg(feature = "replaced-rules")]
    pub fn replaced_rule_marker_names_process_only(mut self) -> Self {
        self.marker_names_history = false;
        self
    }

    /// **Unsafe; for `redlock chaos` only** (feature `replaced-rules`): a Sentinel node trusts
    /// whatever server the sentinels name, as a plain client of a replicated primary would: its
    /// votes wait for no replica, and a promoted replica is never judged by what the client saw
    /// of the old primary (`succession` invariants 1 to 4 off), so that the chaos run can show
    /// its Sentinel faults catching that.
    #[cfg(feature = "replaced-rules")]
    pub fn replaced_rule_sentinel_trusts_its_primary(mut self) -> Self {
        self.sentinel_trusts_primary = true;
        self
    }

    /// **Unsafe; for `redlock chaos` only** (feature `replaced-rules`): a node behind a fixed
    /// address (`redis+replicated://`) trusts whatever server answers there, as a plain client
    /// of a managed endpoint would if a new server there were not quarantined as a restart: its
    /// votes wait for no replica, and a new server behind the address is taken to continue the
    /// history (`endpoint` invariant 1 and `succession` invariant 7 off), so that the chaos run
    /// can show its faults catching that.
    #[cfg(feature = "replaced-rules")]
    pub fn replaced_rule_endpoint_trusts_its_address(mut self) -> Self {
        self.endpoint_trusts_address = true;
        self
    }

    /// **Unsafe; for `redlock chaos` only** (feature `replaced-rules`): a vote on a replicated
    /// node's primary (Sentinel, or behind a fixed address) counts when `WAIT` answered as many
    /// acknowledgements as the replicas it must reach, whichever replicas sent them
    /// (`coverage` invariant 1 off): the rule under which a replica that may never be promoted
    /// acknowledged in place of the one that was, so that the chaos run can show its
    /// `candidate-cut` fault catching it.
    #[cfg(feature = "replaced-rules")]
    pub fn replaced_rule_replicas_counted_by_number(mut self) -> Self {
        self.replicas_counted_by_number = true;
        self
    }

    /// **Unsafe; for `redlock chaos` only** (feature `replaced-rules`): a marker written by
    /// hand (an id not drawn) vouches like any other (`marker` invariant 5 off), the rule a
    /// replacement marked by hand the same way defeats, so that the chaos run's
    /// `replace-marked` fault can show it.
    #[cfg(feature = "replaced-rules")]
    pub fn replaced_rule_hand_markers_vouch(mut self) -> Self {
        self.hand_markers_vouch = true;
        self
    }

    /// **Unsafe; for `redlock chaos` only** (feature `replaced-rules`): a release frees the lock
    /// whenever it comes, even after the holder's validity under a lock-delay (`engine`
    /// invariant 6 off), the rule a late release defeats.
    #[cfg(feature = "replaced-rules")]
    pub fn replaced_rule_release_ignores_delay(mut self) -> Self {
        self.release_ignores_delay = true;
        self
    }

    /// Whether a node configured so that it cannot lose acknowledged writes (`appendonly yes`
    /// and `appendfsync always`, read with `CONFIG GET`) is trusted at once, even right after a
    /// restart (default `true`). A node where `CONFIG` is not allowed is never taken as durable.
    pub fn trust_durable_nodes(mut self, on: bool) -> Self {
        self.trust_durable_nodes = on;
        self
    }

    /// Whether a group of servers seen for the first time without markers is trusted at once
    /// when every one of them shows, by its own `INFO`, that it has been a clean master for
    /// longer than `max_ttl` (default `false`: such servers wait out the quarantine once, or an
    /// operator marks them). Turn it on only where no server's clock can step forward after the
    /// server starts: Redis's uptime is a wall-clock difference, so a server that restarted
    /// empty a moment ago on a host whose clock then stepped forward (started before time
    /// sync, a VM restored from a snapshot) looks long-running, and is trusted while a lock it
    /// held is still valid elsewhere (`docs/guarantees.md`'s *First use and the restart
    /// quarantine*; the rule is in `first_sight.rs`).
    pub fn trust_first_sight(mut self, on: bool) -> Self {
        self.trust_first_sight = on;
        self
    }

    /// How long a lock whose holder did not release it stays unavailable after its validity
    /// ends (default zero: off), like Chubby's and Consul's lock-delay. Every key this manager
    /// sets or extends lives `lock_delay` longer on the servers than the holder's validity
    /// counts on, and a release deletes it at once: a holder that crashed, lost its network or
    /// paused keeps everybody else out until `lock_delay` after its deadline, while a clean
    /// release frees the lock immediately. For a resource that cannot check fencing tokens, this
    /// is what keeps a holder's last writes, still in flight when its validity ended, from
    /// meeting the next holder's, as long as they land within `lock_delay` of the deadline
    /// (`docs/primitives.md`'s *Lock-delay*). The TTL plus `lock_delay` may not exceed
    /// `max_ttl` (the quarantine must outlast every key). Other clients' locks are not delayed.
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Whether locks have fencing tokens (default `true`): a number larger than every token
    /// handed out for the resource before, for the protected resource to refuse a paused
    /// holder's late writes. A lock's token is issued when it is first asked for
    /// ([`Lock::fence`](crate::Lock::fence), one round trip, or two when the nodes' counters
    /// disagree), so a caller that never asks pays nothing; read-write locks, campaigns and
    /// fair waiters get theirs with the acquisition (their scripts advance the counters
    /// anyway). Off: no counter is ever kept, and asking is an error.
    pub fn fencing(mut self, on: bool) -> Self {
        self.fencing = on;
        self
    }

    /// Whether every lock gets its fencing token with its acquisition, in the same round trip
    /// (default `false`: on request, [`fencing`](Self::fencing)). For a caller that fences every
    /// lock: it spares the token's own round trip, and costs every acquisition the counter's
    /// commands (four more per node; `docs/performance.md`). No effect with fencing off.
    pub fn fence_on_acquire(mut self, on: bool) -> Self {
        self.fence_on_acquire = on;
        self
    }

    /// How long a resource's fencing counter is kept after its last use (default
    /// [`FENCE_RETENTION`], one day). Tokens stay increasing across an expired counter as long
    /// as the nodes' clocks differ by less than half of it minus the clock grain (see
    /// `docs/guarantees.md`'s *Fencing tokens increase*). Must be at least twice `max_ttl`;
    /// anything beyond [`LONGEST_FENCE_RETENTION`] (100 years, e.g. `Duration::MAX` for
    /// "forever") is taken as that, and anything under [`SHORTEST_FENCE_RETENTION`] (2 s) as
    /// that.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// Whether a waiter for a busy lock is woken by its release (default `true`). The manager
    /// keeps one more connection per node while anybody waits, on which the server tells it when
    /// a waited-for lock key changes (key tracking, Redis 6 and later); the waiter tries again at
    /// once when a quorum of nodes has the key gone, instead of sleeping its whole retry delay.
    /// Any release wakes it, ours or another client's, and so does an expiry; releases cost
    /// nothing more. The retry delay stays as the fallback (lost messages, a server or ACL that
    /// does not allow tracking). Off: plain random-delay polling.
    pub fn notify(mut self, on: bool) -> Self {
        self.notify = on;
        self
    }

    /// Whether waiters are served in arrival order (default `false`). On: every attempt goes
    /// through a per-resource queue on each node that only lets the waiter at its head *try*, so a
    /// client that releases and locks again at once goes to the back instead of winning forever.
    /// Safety still rests on `SET NX` on a quorum alone. It costs a Lua script instead of a plain
    /// `SET` per acquisition; clients that do not use the queue (other libraries, or ours with
    /// this off) are not held back by it. A fair client's release announces itself naming the
    /// head of the queue, and fair waiters are woken by those announcements only (so that the
    /// others do not try in vain). See `docs/library.md`'s *Waiting for a busy lock*.
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// Whether a vote on a Redis Cluster node waits for every replica of its shard (`WAIT`)
    /// before it counts. Default: on when the quarantine is off, off when it is on. A promoted
    /// replica may lack the last keys of its old master; the quarantine keeps a newly promoted
    /// master out of the vote for `max_ttl` (its marker names another server), which covers it
    /// whatever the replicas had; without the quarantine, `WAIT` for every replica is what does.
    /// See `docs/cluster.md`, *Redis Cluster nodes*.
    pub fn wait_for_replicas(mut self, on: bool) -> Self {
        self.wait_for_replicas = Some(on);
        self
    }

    /// Whether the acquisition metrics carry a `resource` label with the resource's name
    /// (default `false`). Off, every label has a small fixed set of values
    /// (`docs/library.md`'s *Metrics and tracing*); on, each resource is a time series of its
    /// own in the application's metrics backend, so turn it on only for a bounded set of
    /// resource names.
    pub fn metrics_resource_label(mut self, on: bool) -> Self {
        self.metrics_resource_label = on;
        self
    }

    /// Checks the configuration and creates the manager. No connection is made yet: each node
    /// connects on first use, so this works outside a runtime and while servers are down.
    pub fn build(self) -> Result<Redlock, Error> {
        if self.servers.is_empty() {
            return Err(ConfigError::NoServers.into());
        }
        positive("node_timeout", self.node_timeout)?;
        positive("connect_timeout", self.connect_timeout)?;
        at_most(
            "connect_timeout",
            self.connect_timeout,
            ("the limit", LONGEST_CONNECT_TIMEOUT),
            "a connection not made within minutes is not coming",
        )?;
        if !(0.0..1.0).contains(&self.drift_factor) {
            return Err(ConfigError::InvalidSetting {
                setting: "drift_factor",
                reason: format!("{} is not in [0, 1)", self.drift_factor),
            }
            .into());
        }
        positive("max_ttl", self.max_ttl)?;
        if self.max_ttl > Duration::from_secs(365 * 24 * 60 * 60) {
            return Err(ConfigError::InvalidSetting {
                setting: "max_ttl",
                reason: "longer than a year: a restarted node would never vote again".into(),
            }
            .into());
        }
        at_most(
            "node_timeout",
            self.node_timeout,
            ("max_ttl", self.max_ttl),
            "a reply that late cannot count toward any lock",
        )?;
        if self.lock_delay >= self.max_ttl {
            return Err(ConfigError::InvalidSetting {
                setting: "lock_delay",
                reason: format!(
                    "{:?} leaves no room for a TTL under max_ttl ({:?}): a TTL plus the delay may not exceed it",
                    self.lock_delay, self.max_ttl
                ),
            }
            .into());
        }
        if self.fence_retention < self.max_ttl.saturating_mul(2) {
            return Err(ConfigError::InvalidSetting {
                setting: "fence_retention",
                reason: format!(
                    "must be at least twice max_ttl ({:?}) so a counter outlives every lock that used it",
                    self.max_ttl
                ),
            }
            .into());
        }
        if let Some(pem) = &self.tls_root_certificates {
            check_certificates(pem)?;
        }
        let settings = Settings {
            first_sight: self.trust_first_sight,
            servers: self.servers,
            tls_root_certificates: self.tls_root_certificates,
            trust: TrustPolicy {
                enabled: self.quarantine,
                max_ttl: self.max_ttl,
                trust_durable: self.trust_durable_nodes,
                owner_history: self.marker_names_history,
                hand_markers_vouch: self.hand_markers_vouch,
            },
            rules: Rules {
                node_timeout: self.node_timeout,
                connect_timeout: self.connect_timeout,
                drift_factor: self.drift_factor,
                retry: self.retry,
                max_ttl: self.max_ttl,
                lock_delay_ms: validity::ttl_millis(self.lock_delay),
                release_ignores_delay: self.release_ignores_delay,
                fence: self.fencing.then(|| {
                    let grain_us = fencing::clock_grain(self.max_ttl, self.quarantine);
                    Advance {
                        retention_ms: validity::ttl_millis(
                            self.fence_retention
                                .clamp(SHORTEST_FENCE_RETENTION, LONGEST_FENCE_RETENTION),
                        ),
                        grain_us,
                        window_us: fencing::trust_window(self.max_ttl, grain_us),
                    }
                }),
                fence_on_acquire: self.fence_on_acquire,
                notify: self.notify,
                fair: self.fair,
                wait_for_replicas: self.wait_for_replicas.unwrap_or(!self.quarantine),
                resource_label: self.metrics_resource_label,
            },
            sentinel_trusts_primary: self.sentinel_trusts_primary,
            endpoint_trusts_address: self.endpoint_trusts_address,
            counting: if self.replicas_counted_by_number {
                Counting::ByNumber
            } else {
                Counting::ByIdentity
            },
        };
        Ok(Redlock::new(Arc::new(Engine::new(settings)?)))
    }
}

impl Redlock {
    /// A builder over these servers, one URL per independent Redis master:
    /// `redis://[user:password@]host[:port][/db]`, `rediss://…` for TLS,
    /// `redis+unix:///path/to/socket[?db=N&pass=…]`.
    pub fn builder<I, S>(servers: I) -> Builder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Builder::new(servers.into_iter().map(Into::into).collect())
    }

    /// A builder over a comma-separated list of URLs, the form of the CLI's `--servers` and of
    /// the `REDLOCK_SERVERS` environment variable.
    pub fn builder_from_list(list: &str) -> Builder {
        Builder::new(split_list(list))
    }

    /// A manager with default settings over a comma-separated list of URLs.
    pub fn from_list(list: &str) -> Result<Self, Error> {
        Self::builder_from_list(list).build()
    }
}

fn positive(setting: &'static str, value: Duration) -> Result<(), ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::InvalidSetting {
            setting,
            reason: "must be greater than zero".to_owned(),
        });
    }
    Ok(())
}

/// Refuses `value` above the bound `(name, bound)`, saying which bound it is and why.
fn at_most(
    setting: &'static str,
    value: Duration,
    (name, bound): (&str, Duration),
    why: &str,
) -> Result<(), ConfigError> {
    if value > bound {
        return Err(ConfigError::InvalidSetting {
            setting,
            reason: format!("{value:?} is longer than {name} ({bound:?}): {why}"),
        });
    }
    Ok(())
}

/// Splits a comma-separated server list (the CLI's `--servers` and `REDLOCK_SERVERS` form),
/// ignoring blanks around commas. A Redis Cluster node's seeds are comma-separated too: an
/// entry without a scheme (`host:port`) after a `redis+cluster://` entry is one more of its
/// seeds (every node URL has a scheme, so nothing else is joined).
pub(crate) fn split_list(list: &str) -> Vec<String> {
    let mut servers: Vec<String> = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match servers.last_mut() {
            Some(cluster)
                if (is_cluster_url(cluster) || is_sentinel_url(cluster))
                    && !entry.contains("://") =>
            {
                cluster.push(',');
                cluster.push_str(entry);
            }
            _ => servers.push(entry.to_owned()),
        }
    }
    servers
}

/// Refuses a PEM that holds no certificate, or one that cannot be read: redis-rs would take it
/// as an empty set of roots, and every TLS connection would fail later, less clearly.
fn check_certificates(pem: &[u8]) -> Result<(), ConfigError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let invalid = |reason: String| ConfigError::InvalidSetting {
        setting: "tls_root_certificates",
        reason,
    };
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(format!("not a PEM certificate list: {e}")))?;
    if certificates.is_empty() {
        return Err(invalid(
            "holds no certificate (expected PEM: -----BEGIN CERTIFICATE-----)".to_owned(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_split_on_commas_and_ignore_blanks() {
        assert_eq!(
            split_list(" redis://a:1 ,redis://b:2,, "),
            vec!["redis://a:1", "redis://b:2"]
        );
        assert!(split_list(" , ").is_empty());
    }

    #[test]
    fn a_clusters_seeds_stay_together_in_a_list() {
        assert_eq!(
            split_list("redis+cluster://a:1, b:2,redis://c:3,redis+cluster://d:4,e:5"),
            vec![
                "redis+cluster://a:1,b:2",
                "redis://c:3",
                "redis+cluster://d:4,e:5"
            ]
        );
        // A bare address after a plain node is its own (invalid) entry, reported as such.
        assert_eq!(split_list("redis://a:1,b:2"), vec!["redis://a:1", "b:2"]);
    }
}
