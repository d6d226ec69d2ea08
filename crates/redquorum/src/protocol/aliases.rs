//! One server, one vote: two URLs of one manager that reach the same server.
//!
//! A manager's URLs are checked for duplicates as written ([`ConfigError::DuplicateServer`]),
//! but `127.0.0.1:6379` and `localhost:6379`, a DNS alias, or a proxy in front of a server
//! also listed directly all pass that check and reach one server. That server then votes once
//! per URL: with three URLs for two servers, one server alone makes the majority of two, and a
//! lock is granted with the other server down or held by someone else.
//!
//! # Invariants
//! 1. **A server votes through one URL only.** The health check reads each server's `run_id`
//!    (a random id a Redis process draws at start); a node whose `run_id` another node of the
//!    same manager claimed first fails its health check, naming that node, and so never votes.
//!    The first to claim keeps voting. A node that shows a new `run_id` (a restart, a
//!    replacement) gives up its old claim, and so does a refused one (two names swapped behind
//!    the manager are each taken again once the other has moved). Read with the quarantine on, which reads `INFO`
//!    anyway; a manager with the quarantine off is plain Redlock and does not check.
//!
//! [`ConfigError::DuplicateServer`]: crate::ConfigError::DuplicateServer

use std::collections::HashMap;
use std::sync::Mutex;

use crate::protocol::sync::lock;

/// The `run_id` each plain server of one manager last showed, by node label.
#[derive(Debug, Default)]
pub(crate) struct RunIds(Mutex<HashMap<String, String>>);

impl RunIds {
    /// Records that the node `label` answers as `run_id`; the label of the node that claimed
    /// the same server first, if one did (invariant 1).
    pub(crate) fn claim(&self, label: &str, run_id: &str) -> Result<(), String> {
        let mut claims = lock(&self.0);
        if let Some((other, _)) = claims.iter().find(|(l, r)| *l != label && *r == run_id) {
            let other = other.clone();
            // Its old claim goes: the server it used to reach may now be reached through
            // another label (names swapped), which must not be refused for it.
            claims.remove(label);
            return Err(other);
        }
        claims.insert(label.to_owned(), run_id.to_owned());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_url_to_claim_a_server_keeps_it() {
        let ids = RunIds::default();
        assert_eq!(ids.claim("127.0.0.1:6379", "a"), Ok(()));
        assert_eq!(ids.claim("127.0.0.1:6380", "b"), Ok(()));
        assert_eq!(
            ids.claim("localhost:6379", "a"),
            Err("127.0.0.1:6379".to_owned())
        );
        // Checked again, the first stays; a restart behind it (a new run_id) frees the old one.
        assert_eq!(ids.claim("127.0.0.1:6379", "a"), Ok(()));
        assert_eq!(ids.claim("127.0.0.1:6379", "a2"), Ok(()));
        assert_eq!(ids.claim("localhost:6379", "a"), Ok(()));
    }

    #[test]
    fn two_names_swapped_behind_the_manager_are_both_taken_again() {
        let ids = RunIds::default();
        assert_eq!(ids.claim("redis-a:6379", "s1"), Ok(()));
        assert_eq!(ids.claim("redis-b:6379", "s2"), Ok(()));
        // The names now reach each other's server: a reconnects first, then b.
        assert_eq!(
            ids.claim("redis-a:6379", "s2"),
            Err("redis-b:6379".to_owned())
        );
        assert_eq!(ids.claim("redis-b:6379", "s1"), Ok(()));
        assert_eq!(ids.claim("redis-a:6379", "s2"), Ok(()));
    }
}
