//! The recorded history of one chaos run: what every client believed about its locks, what
//! faults were injected, and when each node was up.
//!
//! This is the contract between the runner (which records) and the [`checker`](crate::checker)
//! (which judges). It holds only facts observed by the clients and the fault injector, never
//! conclusions: whether two sections overlapped is for the checker to decide.
//!
//! # Time
//!
//! All times are microseconds since the run started, read from one monotonic clock. All clients
//! run in one process, so their times are directly comparable; there is no clock skew to model.
//!
//! # Format
//!
//! A history is serialised as a single JSON document (serde on the whole [`History`]), see
//! [`History::to_json`] and [`History::from_json`]. Enums use `snake_case` names; [`FaultKind`]
//! is tagged with a `"type"` field, e.g. `{"type":"delay","ms":200}`.

use serde::{Deserialize, Serialize};

/// One critical section: a client held (or believed it held) a lock on a resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Section {
    /// The locked resource (the Redis key).
    pub resource: String,
    /// The client that held the lock.
    pub client: u32,
    /// The lock value; it identifies the acquisition.
    pub value: String,
    /// The fencing token, if the strategy has one.
    pub fence: Option<u64>,
    /// When the client entered the critical section.
    pub enter_us: u64,
    /// When the client left the critical section.
    pub exit_us: u64,
    /// The holder's own lock deadline. It believes itself valid on
    /// `[enter_us, min(exit_us, valid_until_us))`, see [`Section::believed_until_us`].
    pub valid_until_us: u64,
    /// What the fenced protected resource did with this section's write.
    pub write: WriteOutcome,
}

impl Section {
    /// The end of the interval on which the holder believed itself the only holder: it left the
    /// section, or its lock deadline passed, whichever came first.
    #[must_use]
    pub fn believed_until_us(&self) -> u64 {
        self.exit_us.min(self.valid_until_us)
    }
}

/// What the fenced protected resource did with a section's write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteOutcome {
    /// The write carried a token newer than any seen before and was applied.
    Accepted,
    /// Fencing refused the write: its token was not newer than one already seen.
    RejectedStale,
    /// The write carried no token and was accepted blindly.
    Unfenced,
    /// The section made no write.
    NotAttempted,
}

/// One injected fault (or its undoing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultEvent {
    /// When the fault was injected.
    pub at_us: u64,
    /// The node it hit, if it hit a node.
    pub node: Option<usize>,
    /// The client it hit, if it hit a client.
    pub client: Option<u32>,
    /// What was done.
    pub kind: FaultKind,
    /// Free-form detail for the report (e.g. the command run).
    pub detail: String,
}

/// The kinds of fault the runner injects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FaultKind {
    /// The node's process was killed.
    Kill,
    /// The node was started again, keeping its data or not.
    Restart {
        /// Whether the node came back with the data it had when it was killed.
        with_data: bool,
    },
    /// The node was paused (`SIGSTOP`): it holds connections but answers nothing.
    Pause,
    /// A paused node was resumed.
    Resume,
    /// Traffic to the node is delayed.
    Delay {
        /// The added delay in milliseconds.
        ms: u64,
    },
    /// Open connections to the node were dropped.
    DropConnections,
    /// Network faults on the node were removed.
    Heal,
    /// A client was stopped for a while (a GC pause, a slow scheduler).
    ClientPause {
        /// How long the client was stopped, in milliseconds.
        ms: u64,
    },
    /// A replica was promoted in place of its primary.
    Failover,
    /// The node lost every key while running (`FLUSHALL`).
    Flush,
    /// A different, empty server was put behind the node's address, or the node put back.
    Replace {
        /// Whether the node itself was put back.
        back: bool,
    },
    /// The node's open connections stopped forwarding but stay open.
    Blackhole,
    /// A master stopped replicating to its replica: the replica gets no write until it is
    /// promoted (a [`FaultKind::Failover`] follows).
    ReplicationCut,
}

/// An interval during which a node was up and reachable: `[from_us, to_us)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUp {
    /// The node's index, `0..History::nodes`.
    pub node: usize,
    /// When the node became up.
    pub from_us: u64,
    /// When the node stopped being up (or the run ended).
    pub to_us: u64,
}

/// Everything recorded during one chaos run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The name of the locking strategy under test.
    pub strategy: String,
    /// The seed that drove the fault schedule and the clients.
    pub seed: u64,
    /// The number of Redis nodes.
    pub nodes: usize,
    /// The number of lock clients.
    pub clients: u32,
    /// How long the run lasted.
    pub duration_us: u64,
    /// Every critical section, in any order.
    pub sections: Vec<Section>,
    /// Every injected fault, in any order.
    pub faults: Vec<FaultEvent>,
    /// The intervals during which each node was up and reachable.
    pub node_up: Vec<NodeUp>,
}

impl History {
    /// Serialises the history as one pretty-printed JSON document.
    #[must_use]
    pub fn to_json(&self) -> String {
        // Serialising plain structs with string keys cannot fail.
        serde_json::to_string_pretty(self).expect("a History always serialises")
    }

    /// Parses a history written by [`History::to_json`].
    ///
    /// # Errors
    ///
    /// If `json` is not a valid history document.
    pub fn from_json(json: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_and_shape() {
        let history = History {
            strategy: "redlock".to_owned(),
            seed: 7,
            nodes: 3,
            clients: 2,
            duration_us: 1_000,
            sections: vec![Section {
                resource: "r".to_owned(),
                client: 1,
                value: "v".to_owned(),
                fence: Some(4),
                enter_us: 10,
                exit_us: 20,
                valid_until_us: 15,
                write: WriteOutcome::RejectedStale,
            }],
            faults: vec![
                FaultEvent {
                    at_us: 5,
                    node: Some(0),
                    client: None,
                    kind: FaultKind::Restart { with_data: false },
                    detail: String::new(),
                },
                FaultEvent {
                    at_us: 6,
                    node: None,
                    client: Some(1),
                    kind: FaultKind::ClientPause { ms: 200 },
                    detail: "gc".to_owned(),
                },
            ],
            node_up: vec![NodeUp {
                node: 0,
                from_us: 0,
                to_us: 5,
            }],
        };
        let json = history.to_json();
        assert!(json.contains(r#""write": "rejected_stale""#), "{json}");
        assert!(
            json.contains(r#""type": "restart""#) && json.contains(r#""with_data": false"#),
            "{json}"
        );
        assert!(json.contains(r#""type": "client_pause""#), "{json}");
        assert_eq!(History::from_json(&json).expect("parses"), history);
        assert!(History::from_json("{}").is_err());
    }
}
