//! Which server answers at each address a replicated primary lists its replicas at: read from
//! the replicas themselves, because the primary's listing names a replica only by the address
//! it announces, which another replica can announce too (`coverage` invariant 2).
//!
//! Shared by the nodes whose votes wait for replicas: behind Sentinel
//! ([`sentinels`](crate::nodes::sentinels)) and behind a fixed address
//! ([`endpoint`](crate::nodes::endpoint)). The first names the runs it finds for the lineage
//! (`succession` invariant 7); both credit a replica's acknowledgement only at an address the
//! census confirmed.
//!
//! # Invariants
//! 1. **A replica is confirmed at an address only by the server there.** The client connects to
//!    each address the primary lists (the data servers' credentials and TLS), reads `INFO
//!    server`, `INFO replication` and its `replica-announce-*` settings, and confirms it only if
//!    that server is a replica of the history the client follows, linked and in sync now (so
//!    that the acknowledgements listed at its address are its own), and announces the very
//!    address it is listed at (its own port, or its `replica-announce-port` and `-ip`; its own
//!    port when its settings cannot be read). Found by review: two replicas announcing each
//!    other's port swapped runs in the record; a replica restarted from an old snapshot, its
//!    link down, was named where the primary still listed its previous run's acknowledgement;
//!    and behind Sentinel, a replica that announced a candidate's port while the candidate was
//!    cut off acknowledged in its place, and the candidate was promoted without the lock.
//! 2. **A confirmation holds for the list it read.** It is kept with the primary's list of
//!    replicas online at the reading, and is worth nothing for another list: a vote whose
//!    readings list other replicas is no vote, and the next one reads them first. It is read
//!    again every [`CENSUS_PERIOD`] while the node is used (a replica restarted at the same
//!    address is a new run). One reading at a time; it runs as a task of its own, so a vote
//!    that gives up waiting for it does not waste it.
//!
//! What it cannot see: two replicas that announce one address and trade places between two
//! readings of the primary's list, the one cut off as the other links, so that the list reads
//! the same (a misconfiguration, and a race within it): the next reading, within
//! [`CENSUS_PERIOD`], finds it. A replica the client cannot reach at the address the primary
//! lists (a network that lets the sentinels reach it and not the client) is never confirmed:
//! the votes of a node that must reach it do not count, and say which address failed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared, join_all};
use redis::Value;

use crate::base::sync::lock;
use crate::nodes::connect::connect_once;
use crate::nodes::fields::fields;
use crate::nodes::node_error::NodeError;
use crate::protocol::quarantine::info_field;

/// How often the replicas are read again while the node is used (invariant 2): as often as the
/// health check reads the primary.
pub(crate) const CENSUS_PERIOD: Duration = Duration::from_secs(10);

/// How to reach the server at an address: a client with the data servers' credentials and TLS.
pub(crate) type Reach = Arc<dyn Fn(&str) -> Option<redis::Client> + Send + Sync>;

/// A reading under way, shared by every vote that waits for it.
pub(crate) type Reading = Shared<BoxFuture<'static, ()>>;

/// The census of one primary's replicas.
pub(crate) struct Census {
    reach: Reach,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Census {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Census").finish_non_exhaustive()
    }
}

/// For each address read, the run confirmed there, or what the server there is instead.
type Found = Vec<(String, Result<String, String>)>;

#[derive(Default)]
struct State {
    /// The last reading done: when it began, the list it read (sorted), and what it found at
    /// each address of that list (invariant 2).
    last: Option<(Instant, Vec<String>, Found)>,
    /// The reading under way, and the list it reads (sorted).
    reading: Option<(Vec<String>, Reading)>,
}

impl Census {
    pub(crate) fn new(reach: Reach) -> Self {
        Self {
            reach,
            state: Arc::default(),
        }
    }

    /// Whether the last reading read `online` (in any order) and confirmed the replica at
    /// `address` (invariants 1, 2); if not, why not.
    pub(crate) fn confirmed(&self, online: &[String], address: &str) -> Result<(), String> {
        let state = lock(&self.state);
        let Some((_, list, read)) = &state.last else {
            return Err("not read there yet".to_owned());
        };
        if !same_list(list, online) {
            return Err("the replicas online changed since they were read".to_owned());
        }
        match read.iter().find(|(a, _)| a == address) {
            Some((_, Ok(_))) => Ok(()),
            Some((_, Err(why))) => Err(why.clone()),
            None => Err("not read there yet".to_owned()),
        }
    }

    /// What a vote on a primary whose replicas online are `online` waits for, if anything: a
    /// reading of `online` when the last one read another list (the one under way, or a new
    /// one), and none when it read this list, though one is started in the background when
    /// the last is older than [`CENSUS_PERIOD`] (invariant 2).
    pub(crate) fn before_vote(
        &self,
        online: Vec<String>,
        start: impl FnOnce(Vec<String>) -> Option<Reading>,
    ) -> Option<Reading> {
        let (current, under_way) = {
            let state = lock(&self.state);
            let current = state
                .last
                .as_ref()
                .map(|(at, list, _)| (same_list(list, &online), at.elapsed() >= CENSUS_PERIOD));
            (current, state.reading.as_ref().map(|(_, r)| r.clone()))
        };
        match (current, under_way) {
            (Some((true, stale)), under_way) => {
                if stale && under_way.is_none() {
                    drop(start(online));
                }
                None
            }
            (_, Some(under_way)) => Some(under_way),
            (_, None) => start(online),
        }
    }

    /// Whether a reading is due for `online`: none under way, and none read it yet, or the
    /// last is older than [`CENSUS_PERIOD`].
    pub(crate) fn due(&self, online: &[String]) -> bool {
        let state = lock(&self.state);
        state.reading.is_none()
            && state.last.as_ref().is_none_or(|(at, list, _)| {
                !same_list(list, online) || at.elapsed() >= CENSUS_PERIOD
            })
    }

    /// Reads the replicas at `online`, each within `timeout`, as replicas of `history`, in a
    /// task of its own (or joins the reading under way): ready once its findings are recorded.
    /// `found` is told the runs confirmed, each at its address.
    pub(crate) fn read(
        &self,
        online: Vec<String>,
        history: String,
        timeout: Duration,
        found: impl FnOnce(&[(String, String)]) + Send + 'static,
    ) -> Reading {
        let mut state = lock(&self.state);
        if let Some((_, reading)) = &state.reading {
            return reading.clone();
        }
        let mut list = online;
        list.sort();
        let clients: Vec<(String, Option<redis::Client>)> = list
            .iter()
            .map(|address| (address.clone(), (self.reach)(address)))
            .collect();
        let shared = Arc::clone(&self.state);
        let began = Instant::now();
        let read_list = list.clone();
        let task = tokio::spawn(async move {
            let read = join_all(clients.iter().map(|(address, client)| {
                let history = history.as_str();
                async move {
                    let run = match client {
                        Some(client) => {
                            let read = run_of(client, address, history, timeout);
                            tokio::time::timeout(timeout, read)
                                .await
                                .unwrap_or_else(|_| Err("no answer there in time".to_owned()))
                        }
                        None => Err("no client for that address".to_owned()),
                    };
                    (address.clone(), run)
                }
            }))
            .await;
            let runs: Vec<(String, String)> = read
                .iter()
                .filter_map(|(address, run)| Some((address.clone(), run.clone().ok()?)))
                .collect();
            found(&runs);
            let mut state = lock(&shared);
            state.last = Some((began, read_list, read));
            state.reading = None;
        });
        let reading = async move {
            // A task that panicked or was cancelled with its runtime records nothing: the
            // next vote reads again.
            if task.await.is_err() {
                tracing::debug!("a census of the replicas ended without a reading");
            }
        }
        .boxed()
        .shared();
        state.reading = Some((list, reading.clone()));
        reading
    }
}

/// Whether `sorted` and `other` list the same addresses, as many times each.
fn same_list(sorted: &[String], other: &[String]) -> bool {
    if sorted.len() != other.len() {
        return false;
    }
    let mut other = other.to_vec();
    other.sort();
    sorted == other.as_slice()
}

/// The `run_id` of the server `client` reaches at `address`, if it is the replica the primary
/// lists there, and replicates `history` now (invariant 1); otherwise what the server there is
/// instead, in words for an operator.
async fn run_of(
    client: &redis::Client,
    address: &str,
    history: &str,
    timeout: Duration,
) -> Result<String, String> {
    let mut conn = connect_once(client, timeout)
        .await
        .map_err(|e| format!("unreachable there ({})", NodeError::from_redis(&e).reply()))?;
    let (server, replication, announced): (String, String, redis::Value) = redis::pipe()
        .cmd("INFO")
        .arg("server")
        .cmd("INFO")
        .arg("replication")
        .cmd("CONFIG")
        .arg("GET")
        .arg("replica-announce-*")
        .ignore_errors()
        .query_async(&mut conn)
        .await
        .map_err(|e| format!("no INFO there ({})", NodeError::from_redis(&e).reply()))?;
    let field = |name: &str| info_field(&replication, name);
    // Linked and in sync now: the acknowledgements listed at its address are its own.
    if field("role") != Some("slave") {
        return Err("the server there is no replica".to_owned());
    }
    if field("master_replid") != Some(history) {
        return Err("the server there replicates another primary's history".to_owned());
    }
    if field("master_link_status") != Some("up") || field("master_sync_in_progress") != Some("0") {
        return Err("the replica there is not linked to the primary".to_owned());
    }
    if !announces(&announced, info_field(&server, "tcp_port"), address) {
        return Err(
            "the replica there announces another address (another replica announces this one: \
             check their replica-announce-ip and -port)"
                .to_owned(),
        );
    }
    info_field(&server, "run_id")
        .map(str::to_owned)
        .ok_or_else(|| "the server there names no run".to_owned())
}

/// Whether a replica whose `CONFIG GET replica-announce-*` reply is `announced` and whose
/// `tcp_port` is `tcp_port` is the one its primary lists at `address` (`ip:port`): the primary
/// lists the port a replica announces, its own unless `replica-announce-port` says otherwise,
/// and the address it sees it from unless `replica-announce-ip` does. Found by review: two
/// replicas that announced each other's port made the client name each run at the other's
/// address, and credit a replica cut off with the other's acknowledgements. A replica whose
/// settings cannot be read counts as listed here only if its own port is the one listed (a port
/// mapping behind a refused `CONFIG` leaves its run unknown).
fn announces(announced: &Value, tcp_port: Option<&str>, address: &str) -> bool {
    let Some((ip, port)) = address.rsplit_once(':') else {
        return false;
    };
    let pairs = fields(announced);
    if pairs.is_empty() {
        return tcp_port == Some(port);
    }
    let setting = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let announced_port = setting("replica-announce-port").filter(|p| *p != "0");
    let announced_ip = setting("replica-announce-ip").filter(|ip| !ip.is_empty());
    announced_port.or(tcp_port) == Some(port)
        && announced_ip.is_none_or(|announced| announced == ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_the_same_in_any_order_and_only_with_as_many_of_each() {
        let list = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(same_list(&list(&["a", "b"]), &list(&["b", "a"])));
        assert!(!same_list(&list(&["a", "b"]), &list(&["a"])));
        assert!(!same_list(&list(&["a", "a"]), &list(&["a", "b"])));
    }

    #[test]
    fn a_replica_is_named_at_the_address_it_announces_and_nowhere_else() {
        let config = crate::nodes::fields::flat;
        let unset = config(&[("replica-announce-ip", ""), ("replica-announce-port", "0")]);
        assert!(announces(&unset, Some("7001"), "10.0.0.1:7001"));
        assert!(!announces(&unset, Some("7001"), "10.0.0.1:7002"));
        // It announces another port: listed there, not at its own.
        let mapped = config(&[
            ("replica-announce-ip", ""),
            ("replica-announce-port", "9001"),
        ]);
        assert!(announces(&mapped, Some("7001"), "10.0.0.1:9001"));
        assert!(!announces(&mapped, Some("7001"), "10.0.0.1:7001"));
        // It announces an address: listed at that one only.
        let ip = config(&[
            ("replica-announce-ip", "1.2.3.4"),
            ("replica-announce-port", "0"),
        ]);
        assert!(announces(&ip, Some("7001"), "1.2.3.4:7001"));
        assert!(!announces(&ip, Some("7001"), "10.0.0.1:7001"));
        // Settings refused (an ACL, a renamed CONFIG): its own port must be the one listed.
        let refused = Value::Nil; // anything but a list of settings
        assert!(announces(&refused, Some("7001"), "10.0.0.1:7001"));
        assert!(!announces(&refused, Some("7001"), "10.0.0.1:9001"));
        assert!(!announces(&refused, None, "10.0.0.1:7001"));
    }
}
