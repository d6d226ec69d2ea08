//! Who holds a resource, node by node: a read-only look for operators and the CLI's `status`.
//!
//! [`Redlock::status`] asks every node at once what the resource's key holds (type, value and
//! time to live, read atomically by one script, `src/nodes/scripts/inspect.lua`) and reports each
//! node's answer as it is. It does not vote. [`Redlock::locked`] reads the same answers as a
//! quorum would: held when a quorum shows one value, free when no value could reach a quorum
//! even with every silent node on its side, and "cannot tell" in between, never a guess.
//!
//! This fan-out is deliberately not the manager's voting round: it has no tally, no early exit
//! and nothing to roll back, only one answer per node, each bounded by the node timeout.

use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::handles::redlock::Redlock;
use crate::nodes::inspect::{NodeState, inspect};
use crate::nodes::shards::Shard;
use crate::protocol::marker::MarkerState;
use crate::protocol::quarantine::Quarantine;
use crate::protocol::remedy::{Reader, Remedy};
use crate::protocol::validity;

/// One node's answer to [`Redlock::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The node's address, without credentials.
    pub node: String,
    /// What it holds for the resource, or why it could not be asked.
    pub state: NodeState,
    /// The node's quarantine (its grants are not votes), if it is quarantined: how much longer,
    /// and why; see [`Builder::quarantine`](crate::Builder::quarantine).
    pub quarantine: Option<Quarantine>,
    /// The node's marker as this client last saw it (`None` with the quarantine off).
    pub marker: Option<MarkerState>,
    /// Whether the node's `maxmemory-policy` lets it evict keys under memory pressure (`false`
    /// when unknown, e.g. `CONFIG` not allowed). An evicted lock key is a lock that a second
    /// client can take while its holder relies on it: lock nodes need `noeviction`.
    pub may_evict: bool,
    /// On a Redis Cluster node, the shard that serves the resource: its master and replicas.
    pub shard: Option<Shard>,
}

impl NodeStatus {
    /// Whether the node answered.
    pub fn is_reachable(&self) -> bool {
        !matches!(self.state, NodeState::Unavailable(_))
    }

    /// The lock value the node holds, if the key is a string.
    pub fn value(&self) -> Option<&str> {
        match &self.state {
            NodeState::Held { value, .. } => Some(value),
            _ => None,
        }
    }
}

impl Redlock {
    /// The nodes that are quarantined now (their grants are not votes), as far as this manager
    /// knows: each node's address, how much longer, and why. Reads what the health checks
    /// found; sends nothing. An application that waits for a lock can show this to say why.
    pub fn quarantined_nodes(&self) -> Vec<(String, Quarantine)> {
        self.engine()
            .nodes
            .iter()
            .filter_map(|node| Some((node.label().to_owned(), node.longest_quarantine()?)))
            .collect()
    }

    /// What to tell a caller waiting for a lock while quarantined nodes keep a quorum from
    /// voting, in `reader`'s words, or `None` when they do not (none is quarantined, or enough
    /// others remain: the wait is then for something else, a busy lock): each quarantined node,
    /// why and how much longer, and where a mark is right, the call that ends the wait
    /// (`remedy` invariant 1). Sends nothing.
    pub fn quarantine_notice(&self, reader: Reader) -> Option<String> {
        let quarantined = self.quarantined_nodes();
        let voters = self.engine().nodes.len() - quarantined.len();
        if quarantined.is_empty() || voters >= self.quorum() {
            return None;
        }
        let mut notice = String::from("waiting for quarantined nodes: ");
        for (i, (node, quarantine)) in quarantined.iter().enumerate() {
            let gap = if i == 0 { "" } else { "; " };
            notice.push_str(&format!("{gap}{node} ({quarantine})"));
        }
        let nodes = self.engine().nodes.len();
        if let Some(remedy) = Remedy::of(quarantined.iter().map(|(_, q)| q), nodes) {
            notice.push_str(&format!("; {}", remedy.advice(remedy.call(reader))));
        }
        Some(notice)
    }

    /// What every node holds for `resource`, in configuration order.
    ///
    /// All nodes are asked at once, each bounded by the node timeout. The connection to a node is
    /// made on first use and counts against that timeout; on a fresh manager, call
    /// [`connect`](Self::connect) first so that a slow handshake is not reported as a timeout.
    ///
    /// # Cancel safety
    /// Read-only: dropping the future leaves nothing on any server.
    pub async fn status(&self, resource: &str) -> Vec<NodeStatus> {
        let shared = self.engine();
        let deadline = Instant::now() + shared.rules.node_timeout;
        join_all(shared.nodes.iter().map(|node| async move {
            let state = inspect(node, resource, deadline).await;
            NodeStatus {
                node: node.label().to_owned(),
                state,
                quarantine: node.quarantine(resource),
                marker: node.marker_state(resource),
                may_evict: node.may_evict(),
                shard: tokio::time::timeout_at(deadline.into(), node.shard_of(resource))
                    .await
                    .ok()
                    .flatten(),
            }
        }))
        .await
    }
}

/// Whether a resource is held right now, as [`Redlock::locked`] reads it from its nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Locked {
    /// No lock is held on a quorum of nodes, and the nodes that did not answer could not make
    /// one: an acquisition now would find it free (unless somebody takes it first).
    Free,
    /// Held with `value` on a quorum of nodes, for at least `remaining` more: the time until
    /// fewer than a quorum of them keep the key, less the clock-drift allowance.
    Held {
        /// The holder's value (for a leader, `<random>:<identity>`; `value.rs` has the form).
        value: String,
        /// How long a quorum keeps it at least, by the nodes' own clocks, less the drift.
        remaining: Duration,
    },
    /// A read-write lock held by readers on a quorum of nodes (no writer can take it).
    Readers {
        /// How long a quorum keeps a reader at least, less the drift.
        remaining: Duration,
    },
    /// Too few nodes answered to tell: those that did not could be holding it.
    Unknown {
        /// How many nodes answered.
        answered: usize,
        /// How many make a quorum.
        quorum: usize,
    },
}

impl Locked {
    /// Whether a quorum holds it (as a lock or as readers).
    pub fn is_locked(&self) -> bool {
        matches!(self, Locked::Held { .. } | Locked::Readers { .. })
    }

    /// What `statuses` (every node's, from [`Redlock::status`]) say, with `quorum` nodes needed
    /// and the manager's `drift_factor`: held only where a quorum shows the same value; free
    /// only where no value could reach a quorum even with every silent node on its side. A
    /// quarantined node counts as silent, as the CLI's `status` summary does not count it.
    pub(crate) fn of(statuses: &[NodeStatus], quorum: usize, drift_factor: f64) -> Self {
        // A quarantined node's answer says nothing either way (it may have restarted without the
        // keys it held, and its grants are not votes): it counts as silent.
        let counts = |s: &&NodeStatus| s.is_reachable() && s.quarantine.is_none();
        let silent = statuses.iter().filter(|s| !counts(s)).count();
        // The time a quorum keeps a key: the quorum-th longest TTL among the holders (a key with
        // no expiry is not a Redlock lock's, and is counted as lasting).
        let kept_by_quorum = |mut ttls: Vec<Duration>| -> Option<Duration> {
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let kept = *ttls.get(quorum.checked_sub(1)?)?;
            Some(kept.saturating_sub(validity::drift(kept, drift_factor)))
        };
        let mut values: Vec<(&str, Vec<Duration>)> = Vec::new();
        let mut readers = Vec::new();
        for status in statuses.iter().filter(counts) {
            match &status.state {
                NodeState::Held { value, ttl } => {
                    let ttl = ttl.unwrap_or(Duration::MAX);
                    match values.iter_mut().find(|(v, _)| v == value) {
                        Some((_, ttls)) => ttls.push(ttl),
                        None => values.push((value, vec![ttl])),
                    }
                }
                NodeState::Readers { count, ttl } if *count > 0 => {
                    readers.push(ttl.unwrap_or(Duration::MAX));
                }
                _ => {}
            }
        }
        let most = values.iter().map(|(_, t)| t.len()).max().unwrap_or(0);
        if let Some((value, ttls)) = values.into_iter().find(|(_, t)| t.len() >= quorum)
            && let Some(remaining) = kept_by_quorum(ttls)
        {
            return Locked::Held {
                value: value.to_owned(),
                remaining,
            };
        }
        if readers.len() >= quorum
            && let Some(remaining) = kept_by_quorum(readers.clone())
        {
            return Locked::Readers { remaining };
        }
        if most.max(readers.len()) + silent >= quorum {
            return Locked::Unknown {
                answered: statuses.len() - silent,
                quorum,
            };
        }
        Locked::Free
    }
}

impl Redlock {
    /// Whether `resource` is held right now: by a quorum of nodes with one value, and for how
    /// long at least ([`Locked::Held`]); by readers ([`Locked::Readers`]); free; or
    /// [`Locked::Unknown`] when too few nodes answered to tell (a quarantined node's answer
    /// does not count: it may have lost what it held). One read of every node, as
    /// [`status`](Self::status) (a key of another type reads as not held: acquiring it fails
    /// with `WrongType`). The answer is a snapshot: a lock seen free may be taken a moment
    /// later, so take the lock rather than test it first when the outcome matters.
    ///
    /// # Cancel safety
    /// Read-only: dropping the future leaves nothing on any server.
    pub async fn locked(&self, resource: &str) -> Locked {
        let statuses = self.status(resource).await;
        Locked::of(&statuses, self.quorum(), self.engine().rules.drift_factor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::reply::Reply;

    fn node(state: NodeState) -> NodeStatus {
        NodeStatus {
            node: "n".into(),
            state,
            quarantine: None,
            marker: None,
            may_evict: false,
            shard: None,
        }
    }

    fn held(value: &str, secs: u64) -> NodeStatus {
        node(NodeState::Held {
            value: value.into(),
            ttl: Some(Duration::from_secs(secs)),
        })
    }

    fn silent() -> NodeStatus {
        node(NodeState::Unavailable(Reply::Timeout))
    }

    #[test]
    fn held_by_a_quorum_for_as_long_as_its_quorum_th_longest_key() {
        let statuses = [held("v", 10), held("v", 4), held("v", 7)];
        match Locked::of(&statuses, 2, 0.01) {
            Locked::Held { value, remaining } => {
                assert_eq!(value, "v");
                // The second longest, 7 s, less the drift allowance.
                assert!(remaining < Duration::from_secs(7), "{remaining:?}");
                assert!(remaining > Duration::from_millis(6_900), "{remaining:?}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn free_only_when_silent_nodes_could_not_make_a_quorum() {
        let free = node(NodeState::Free);
        assert_eq!(
            Locked::of(&[free.clone(), free.clone(), silent()], 2, 0.01),
            Locked::Free
        );
        assert_eq!(
            Locked::of(&[held("v", 5), free.clone(), silent()], 2, 0.01),
            Locked::Unknown {
                answered: 2,
                quorum: 2
            },
            "the silent node may hold v too"
        );
        assert_eq!(
            Locked::of(&[held("v", 5), held("w", 5), free], 2, 0.01),
            Locked::Free,
            "two values, neither on a quorum"
        );
        assert!(matches!(
            Locked::of(&[silent(), silent(), held("v", 5)], 2, 0.01),
            Locked::Unknown { answered: 1, .. }
        ));
    }

    #[test]
    fn a_quarantined_nodes_answer_counts_for_nothing() {
        let mut forgetful = node(NodeState::Free);
        forgetful.quarantine = Some(Quarantine {
            left: Duration::from_secs(30),
            reason: crate::protocol::quarantine::QuarantineReason::Restarted,
            up: None,
            young: false,
            first_sight: false,
        });
        assert!(matches!(
            Locked::of(&[forgetful, held("v", 5), node(NodeState::Free)], 2, 0.01),
            Locked::Unknown { answered: 2, .. }
        ));
    }

    #[test]
    fn readers_on_a_quorum_hold_it() {
        let reader = |secs| {
            node(NodeState::Readers {
                count: 2,
                ttl: Some(Duration::from_secs(secs)),
            })
        };
        assert!(matches!(
            Locked::of(&[reader(5), reader(6), node(NodeState::Free)], 2, 0.01),
            Locked::Readers { .. }
        ));
    }
}
