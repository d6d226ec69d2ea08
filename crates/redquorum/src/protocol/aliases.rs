//! One server, one vote: two URLs of one manager that reach the same server.
//!
//! A manager's URLs are checked for duplicates as written ([`ConfigError::DuplicateServer`]),
//! but `127.0.0.1:6379` and `localhost:6379`, a DNS alias, or a proxy in front of a server
//! also listed directly all pass that check and reach one server. That server then votes once
//! per URL wherever a request can succeed twice: with three URLs for two servers, an extension
//! (or a release) succeeds through both URLs of one server, and keeps a lock alive on that one
//! server's say with the other server down. (Two `SET NX` of one acquisition on one key cannot
//! both win, so exclusion holds; failure independence, the point of N servers, does not.)
//!
//! A Redis Cluster node is no exception: two URLs of one cluster with different seeds pass that
//! check too (their seeds differ), and so does a cluster URL beside a plain URL of one of its
//! masters.
//!
//! # Invariants
//! 1. **A server votes through one node only.** The health check reads each server's `run_id`
//!    (a random id a Redis process draws at start) and claims it for a [`Claimant`]: a plain
//!    server, named by its label (`127.0.0.1:6379`), or a master of a Redis Cluster node, named
//!    by its address in the node's slot map and the node's label
//!    (`127.0.0.1:7001 of cluster(127.0.0.1:7000)`). A server whose `run_id` a claimant of
//!    *another* node claimed first fails its health check, naming that claimant, and so never
//!    votes. The first to claim keeps voting. Claimants of one cluster node never refuse each
//!    other: the node sends each request to the one master its map names for the slot, so a
//!    master it meets again, under the same name once its server was replaced (a slot moved:
//!    [`shards`](crate::nodes::shards) invariant 4) or under another address (a map read from a
//!    peer that knows it by another), is still one vote. A claimant that shows a new `run_id`
//!    (a restart, a replacement) gives up its old claim, and so does a refused one (two names
//!    swapped behind the manager are each taken again once the other has moved). Read with the
//!    quarantine on, which reads `INFO` anyway; a manager with the quarantine off is plain
//!    Redlock and does not check.
//!
//! [`ConfigError::DuplicateServer`]: crate::ConfigError::DuplicateServer

use std::collections::HashMap;
use std::fmt;

/// Who claims a server's `run_id` (invariant 1): the manager's node it votes for and, on a Redis
/// Cluster node, the master's address.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Claimant {
    /// The node's label: a plain server's address, or `cluster(seed,…)`.
    node: String,
    /// A Redis Cluster master's `host:port`.
    master: Option<String>,
}

impl Claimant {
    /// A plain server, named by its label.
    pub(crate) fn plain(label: &str) -> Self {
        Self {
            node: label.to_owned(),
            master: None,
        }
    }

    /// The master at `address` of the Redis Cluster node labelled `cluster`.
    pub(crate) fn master(address: &str, cluster: &str) -> Self {
        Self {
            node: cluster.to_owned(),
            master: Some(address.to_owned()),
        }
    }
}

impl fmt::Display for Claimant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.master {
            Some(master) => write!(f, "{master} of {}", self.node),
            None => f.write_str(&self.node),
        }
    }
}

/// The `run_id` each claimant of one manager last showed: the record invariant 1 judges a claim
/// against. Its nodes' health checks share one, behind a mutex (the node layer's `RunIds`).
#[derive(Debug, Default)]
pub(crate) struct Claims(HashMap<Claimant, String>);

impl Claims {
    /// Records that `claimant` answers as `run_id`; the name of the claimant of another node
    /// that claimed the same server first, if one did (invariant 1).
    pub(crate) fn claim(&mut self, claimant: &Claimant, run_id: &str) -> Result<(), String> {
        let claims = &mut self.0;
        let first = claims
            .iter()
            .find(|(other, r)| other.node != claimant.node && *r == run_id);
        if let Some((other, _)) = first {
            let other = other.to_string();
            // Its old claim goes: the server it used to reach may now be reached through
            // another name (names swapped), which must not be refused for it.
            claims.remove(claimant);
            return Err(other);
        }
        claims.insert(claimant.clone(), run_id.to_owned());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(label: &str) -> Claimant {
        Claimant::plain(label)
    }

    #[test]
    fn the_first_url_to_claim_a_server_keeps_it() {
        let mut ids = Claims::default();
        assert_eq!(ids.claim(&plain("127.0.0.1:6379"), "a"), Ok(()));
        assert_eq!(ids.claim(&plain("127.0.0.1:6380"), "b"), Ok(()));
        assert_eq!(
            ids.claim(&plain("localhost:6379"), "a"),
            Err("127.0.0.1:6379".to_owned())
        );
        // Checked again, the first stays; a restart behind it (a new run_id) frees the old one.
        assert_eq!(ids.claim(&plain("127.0.0.1:6379"), "a"), Ok(()));
        assert_eq!(ids.claim(&plain("127.0.0.1:6379"), "a2"), Ok(()));
        assert_eq!(ids.claim(&plain("localhost:6379"), "a"), Ok(()));
    }

    #[test]
    fn two_names_swapped_behind_the_manager_are_both_taken_again() {
        let mut ids = Claims::default();
        assert_eq!(ids.claim(&plain("redis-a:6379"), "s1"), Ok(()));
        assert_eq!(ids.claim(&plain("redis-b:6379"), "s2"), Ok(()));
        // The names now reach each other's server: a reconnects first, then b.
        assert_eq!(
            ids.claim(&plain("redis-a:6379"), "s2"),
            Err("redis-b:6379".to_owned())
        );
        assert_eq!(ids.claim(&plain("redis-b:6379"), "s1"), Ok(()));
        assert_eq!(ids.claim(&plain("redis-a:6379"), "s2"), Ok(()));
    }

    #[test]
    fn one_master_seen_by_two_cluster_nodes_or_listed_plain_votes_once() {
        let mut ids = Claims::default();
        let (first, second) = ("cluster(127.0.0.1:7000)", "cluster(127.0.0.1:7001)");
        let master = Claimant::master("127.0.0.1:7001", first);
        assert_eq!(ids.claim(&master, "m"), Ok(()));
        // The same master under the same address, through a cluster node with another seed.
        assert_eq!(
            ids.claim(&Claimant::master("127.0.0.1:7001", second), "m"),
            Err("127.0.0.1:7001 of cluster(127.0.0.1:7000)".to_owned())
        );
        // Listed as a plain server too.
        assert_eq!(
            ids.claim(&plain("127.0.0.1:7001"), "m"),
            Err("127.0.0.1:7001 of cluster(127.0.0.1:7000)".to_owned())
        );
        // Within one cluster node it is one vote, whatever server or address the map gives it.
        assert_eq!(ids.claim(&master, "m"), Ok(()));
        assert_eq!(
            ids.claim(&Claimant::master("localhost:7001", first), "m"),
            Ok(())
        );
    }
}
