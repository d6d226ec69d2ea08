//! A Redlock node that is a primary with replicas behind one fixed address that moves to the new
//! primary on failover: a managed service's primary endpoint (a DNS name, a load balancer, a
//! proxy), without Sentinel. Its votes wait for the replicas, and a new server behind the address
//! is judged by its replication history, not as a restart: a failover costs neither a lock given
//! twice nor, in the common case, the restart quarantine's minute without locks.
//!
//! It is named by `redis+replicated://[user:password@]host:port[/DB]?replicas=R`
//! (`rediss+replicated://` for TLS): the address, and `R`, the replicas the service keeps.
//!
//! The node is one [`Server`] at that address, built as a replicated primary
//! ([`Replicated`]): its health check reads `INFO replication` and judges a new server there by
//! what the client saw of the service ([`succession`](crate::protocol::succession)). That is
//! where the safety argument lives; this module reads what Sentinel would otherwise say.
//!
//! # Invariants
//! 1. **A vote waits for every replica online, and never for fewer than `R`.** The user says how
//!    many replicas the service keeps; a vote counts once `WAIT max(online, R)` answered that
//!    many (`succession` invariant 1, with `R` in place of the sentinels' candidates, which a
//!    managed service does not publish). A primary cut off from its replicas (a partition, or
//!    deposed by a failover it has not heard of) sees fewer than `R` online, and its votes wait
//!    in vain. `R` is at least 1: a node without replicas is a plain `redis://` node.
//! 2. **Each replica's run is read from the replica itself**, by the
//!    [`census`](crate::nodes::census): at the address its primary lists it at, kept only from
//!    a server linked to the history the client follows and announcing that address
//!    (`succession` invariant 7). Read when the primary's list of replicas changed since the
//!    last reading, and every [`CENSUS_PERIOD`] while the node is used (a replica restarted at
//!    the same address is a new run); a vote credits a replica only at an address the census
//!    confirmed for the list the vote reads (`coverage` invariant 2). A replica that cannot be
//!    reached leaves its run unknown: a promotion of it is judged by the ordinary rules.
//! 3. **Receipts for the runs read** are written on the primary after each reading
//!    (`succession` invariant 5), as behind Sentinel.
//! 4. **A reply that says the server may have moved drops the connection**: `READONLY` (the
//!    server is a replica now), and a vote its replicas did not acknowledge (a primary cut
//!    off, perhaps deposed): the next request connects through the address again, and its
//!    health check judges whichever server answers there before it votes. A request that
//!    failed on a broken connection or on `READONLY` goes once more at once, within its round's
//!    deadline: neither ran it (a broken connection may have, and then a retried acquisition
//!    finds its own key and is refused, which costs the round, never safety).
//!
//! What it cannot see (in `docs/sentinel.md`): with `R` lower than the replicas the service
//! keeps, a replica that dropped out (without a restart) while votes counted without it, then
//! promoted before it caught up, judged by a client that did not see it away or that starts
//! after (nothing on it tells: its uptime is long, its receipt older than its absence). Found by
//! `redlock chaos --strategy redlock-replicated` run with `replicas=1` over two replicas: its
//! `failover` fault gave 10 violations in 20 s. With `R` equal to the replicas kept, no vote
//! counts without any of them, and the same run is safe.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::base::error::{ConfigError, redact_url};
use crate::base::sync::lock;
use crate::nodes::census::Reach;
use crate::nodes::node_error::NodeError;
use crate::nodes::receipts;
use crate::nodes::replicated::Replicated;
use crate::nodes::server::{Server, ServerSettings, scrub};
use crate::nodes::urls;
use crate::protocol::coverage::Counting;
use crate::protocol::succession::Lineage;

/// The URL schemes that name a node behind a fixed address, and the scheme of its servers.
const SCHEMES: [(&str, &str); 2] = [
    ("redis+replicated://", "redis"),
    ("rediss+replicated://", "rediss"),
];

/// Whether `url` names a node behind a fixed address.
pub(crate) fn is_endpoint_url(url: &str) -> bool {
    SCHEMES
        .iter()
        .any(|(scheme, _)| has_scheme(url.trim_start(), scheme))
}

/// Whether `url` starts with `scheme`, in any case (schemes are case-insensitive).
fn has_scheme(url: &str, scheme: &str) -> bool {
    url.get(..scheme.len())
        .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
}

/// A `redis+replicated://` URL, taken apart. Its `Debug` hides the credentials.
#[derive(Clone, PartialEq, Eq)]
struct EndpointUrl {
    scheme: &'static str,
    /// `user:password@`, or empty.
    userinfo: String,
    /// `host:port`.
    address: String,
    /// `/DB`, or empty.
    db: String,
    /// The replicas the service keeps (invariant 1).
    replicas: u32,
}

impl std::fmt::Debug for EndpointUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointUrl")
            .field("scheme", &self.scheme)
            .field("address", &self.address)
            .field("db", &self.db)
            .field("replicas", &self.replicas)
            .finish_non_exhaustive()
    }
}

impl EndpointUrl {
    fn parse(url: &str) -> Result<Self, String> {
        let url = url.trim();
        let (prefix, scheme) = SCHEMES
            .iter()
            .find(|(prefix, _)| has_scheme(url, prefix))
            .ok_or(
                "a replicated node's URL starts with redis+replicated:// or rediss+replicated://",
            )?;
        let rest = &url[prefix.len()..];
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, db) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, address) = urls::userinfo_and_hosts(authority);
        if address.is_empty() {
            return Err(
                "no address (redis+replicated://host:port?replicas=R, the service's primary \
                 endpoint)"
                    .to_owned(),
            );
        }
        let port = match address.rsplit_once(':') {
            Some((_, port)) if !address.ends_with(']') => port,
            _ => "6379",
        };
        if !port.parse::<u16>().is_ok_and(|p| p > 0) {
            return Err(format!(
                "address {address:?}: the port must be a number from 1 to 65535"
            ));
        }
        if !db.is_empty() && db.parse::<u16>().is_err() {
            return Err(format!("{db:?} is not a database number"));
        }
        let mut replicas = None;
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("replicas", _)) if replicas.is_some() => {
                    return Err("replicas= is given twice: give it once".to_owned());
                }
                Some(("replicas", n)) => {
                    replicas = Some(n.parse::<u32>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        format!(
                            "replicas={n}: say how many replicas the service keeps, 1 or more \
                             (a primary without replicas is a plain redis:// node)"
                        )
                    })?);
                }
                _ => {
                    let key = pair.split_once('=').map_or(pair, |(k, _)| k);
                    return Err(format!(
                        "unknown parameter {key:?} (a replicated node's URL takes replicas=R)"
                    ));
                }
            }
        }
        let replicas = replicas.ok_or(
            "no replicas=R: say how many replicas the service keeps, as in \
             redis+replicated://host:6379?replicas=2 (every vote waits for that many)",
        )?;
        Ok(Self {
            scheme,
            userinfo,
            address: address.to_owned(),
            db: if db.is_empty() {
                String::new()
            } else {
                format!("/{db}")
            },
            replicas,
        })
    }

    /// The URL of the data server at `address`, with the data servers' credentials and db.
    fn server_url(&self, address: &str) -> String {
        format!("{}://{}{address}{}", self.scheme, self.userinfo, self.db)
    }
}

/// A node behind a fixed address. Its `Debug` shows its label, without credentials.
pub(crate) struct Endpoint {
    label: String,
    url: EndpointUrl,
    server: Arc<Server>,
    settings: ServerSettings,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

impl Endpoint {
    /// Parses a `redis+replicated://` URL (without connecting). Votes wait up to half of
    /// `node_timeout` for the replicas; with `trusting` (the chaos run's replaced rule) they wait
    /// for none, and every server behind the address is taken to continue the history.
    pub(crate) fn new(
        url: &str,
        settings: ServerSettings,
        tls_roots: Option<&[u8]>,
        node_timeout: Duration,
        trusting: bool,
        counting: Counting,
    ) -> Result<Self, ConfigError> {
        let parsed = EndpointUrl::parse(url).map_err(|reason| ConfigError::InvalidUrl {
            url: redact_url(url),
            reason: scrub(&reason, url),
        })?;
        let db = parsed.db.clone();
        let label = format!("replicated({}){db}", parsed.address);
        let wait_ms = u64::try_from(node_timeout.as_millis() / 2)
            .unwrap_or(u64::MAX)
            .max(1);
        // `succession` invariant 7: the label is no replica's `ip:port`, so a new primary is
        // found among the replicas by its run.
        let mut replicated = Replicated::new(
            label.clone(),
            Arc::new(Mutex::new(Lineage::default())),
            parsed.replicas,
            true,
            wait_ms,
            reach(&parsed, tls_roots),
        );
        // The chaos run's replaced rule (`Builder::replaced_rule_endpoint_trusts_its_address`).
        replicated.trusting = trusting;
        replicated.counting = counting;
        let replicated = Arc::new(replicated);
        let server = Server::replicated(
            &parsed.server_url(&parsed.address),
            settings,
            tls_roots,
            replicated,
        )?;
        Ok(Self {
            label,
            url: parsed,
            server: Arc::new(server),
            settings,
        })
    }

    /// `replicated(host:port)`: without credentials.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// What makes two such nodes the same: their address and database.
    pub(crate) fn identity(&self) -> String {
        format!("replicated:{}{}", self.url.address, self.url.db)
    }

    /// The server at the address.
    pub(crate) fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// The server, to set up before first use (`None` once it is shared).
    pub(crate) fn server_mut(&mut self) -> Option<&mut Server> {
        Arc::get_mut(&mut self.server)
    }

    /// Whether a request's error says the server behind the address may have changed, and the
    /// connection was dropped (invariant 4): the connection broke, or the server is a replica
    /// now. Neither ran the request (a broken connection may have: then a retried acquisition
    /// finds its own key and is refused, which costs the round, never safety).
    pub(crate) fn moved(error: &NodeError) -> bool {
        match error {
            NodeError::Unreachable(_) => true,
            NodeError::Server(why) => why.starts_with("READONLY"),
            NodeError::Timeout | NodeError::WrongType(_) | NodeError::LeftToDelay => false,
        }
    }

    /// After a request: reads the replicas' runs in the background when they are due
    /// (invariant 2), then writes their receipts (invariant 3).
    pub(crate) fn after_request(&self) {
        let settings = self.settings;
        let Some(replicated) = self.server.replication().filter(|_| settings.trust.enabled) else {
            return;
        };
        let server = Arc::clone(&self.server);
        let write_receipts = move |server: &Arc<Server>| {
            if let Some(replicated) = server.replication() {
                replicated.named_runs();
                let runs = lock(&replicated.lineage).runs_listed();
                receipts::write(server, runs, settings);
            }
        };
        match replicated.census_due(settings.connect_timeout) {
            Some(census) => {
                tokio::spawn(async move {
                    census.await;
                    write_receipts(&server);
                });
            }
            // A census a vote waited for named runs (`census` invariant 2).
            None if replicated.named_runs() => write_receipts(&server),
            None => {}
        }
    }
}

/// How the census reaches the replica at an address: with the data servers' credentials, TLS
/// and db.
fn reach(url: &EndpointUrl, tls_roots: Option<&[u8]>) -> Reach {
    let url = url.clone();
    let tls_roots = tls_roots.map(<[u8]>::to_vec);
    Arc::new(move |address: &str| {
        urls::client(&url.server_url(address), url.scheme, tls_roots.as_deref()).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replicated_url_names_the_address_the_replicas_and_the_credentials() {
        let url = EndpointUrl::parse("redis+replicated://app:secret@db.example:6380/2?replicas=2")
            .expect("valid");
        assert_eq!(url.address, "db.example:6380");
        assert_eq!(url.replicas, 2);
        assert_eq!(
            url.server_url("10.0.0.7:6379"),
            "redis://app:secret@10.0.0.7:6379/2"
        );
        let tls = EndpointUrl::parse("rediss+replicated://h:1?replicas=1").expect("valid");
        assert_eq!(tls.server_url("h:1"), "rediss://h:1");
        // Schemes are case-insensitive; the credentials never show in `Debug`.
        let upper = EndpointUrl::parse("REDIS+Replicated://u:pw@h:1?replicas=1").expect("valid");
        assert_eq!(upper.server_url("h:1"), "redis://u:pw@h:1");
        assert!(is_endpoint_url("REDIS+REPLICATED://h:1?replicas=1"));
        assert!(!format!("{url:?}").contains("secret"));
        assert!(!format!("{upper:?}").contains("pw"));
    }

    #[test]
    fn a_replicated_url_without_its_replicas_or_with_unknown_parameters_is_refused() {
        for (url, says) in [
            ("redis+replicated://h:6379", "no replicas=R"),
            ("redis+replicated://h:6379?replicas=0", "1 or more"),
            ("redis+replicated://h:6379?replicas=two", "1 or more"),
            ("redis+replicated://?replicas=1", "no address"),
            (
                "redis+replicated://h:6379/x?replicas=1",
                "not a database number",
            ),
            (
                "redis+replicated://h:6379?replicas=1&wait=1",
                "unknown parameter",
            ),
            ("redis+replicated://h:6379?replicas=1&replicas=2", "twice"),
            ("redis+replicated://h:notaport?replicas=1", "port must be"),
            ("redis+replicated://h:0?replicas=1", "port must be"),
        ] {
            let why = EndpointUrl::parse(url).expect_err(url);
            assert!(why.contains(says), "{url}: {why}");
        }
    }
}
