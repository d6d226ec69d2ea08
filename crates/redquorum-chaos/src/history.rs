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
//!
//! The fields added for semaphores and lock-delay ([`History::permits`],
//! [`History::lock_delay_us`], [`Section::permit`], [`Section::released_us`],
//! [`Section::abandoned`], [`Section::extended_by_value`]) are left out of the JSON when they
//! hold their default, and read as that default when missing, so a history of a plain mutex run
//! reads and writes as before.

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
    /// For a semaphore run with permits as lock keys, which permit the holder held; `None` for a
    /// lock, or for a semaphore design without permits (a count per node).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit: Option<u32>,
    /// When the holder sent its release; `None` if not recorded (a history from before this
    /// field: taken as at `exit_us`), or if it never released (see [`Section::abandoned`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_us: Option<u64>,
    /// The holder crashed in this section: it left at `exit_us` and never released its lock,
    /// which then lives until its keys expire (see [`Section::released_at_us`]).
    #[serde(default, skip_serializing_if = "is_false")]
    pub abandoned: bool,
    /// The holder handed its lock, as it left, to another process, which extended it by value
    /// (a `client-handoff`); then nobody released it (`abandoned` is set too). `valid_until_us`
    /// is then that extension's deadline, the one the lock's keys were last set from. A handoff
    /// whose extension failed leaves this unset: the section is a crash's, with its own deadline.
    #[serde(default, skip_serializing_if = "is_false")]
    pub extended_by_value: bool,
    /// In the read-write workload, a reader's section (shared with other readers); `false` for
    /// a writer's and in every other workload.
    #[serde(default, skip_serializing_if = "is_false")]
    pub shared: bool,
}

// `skip_serializing_if` hands the field by reference.
fn is_false(value: &bool) -> bool {
    !*value
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl Section {
    /// The end of the interval on which the holder believed itself the only holder: it left the
    /// section, or its lock deadline passed, whichever came first.
    #[must_use]
    pub fn believed_until_us(&self) -> u64 {
        self.exit_us.min(self.valid_until_us)
    }

    /// When the holder let the lock go: when it sent its release (its exit if that was not
    /// recorded), or `None` if it never did (it crashed and abandoned the lock).
    #[must_use]
    pub fn released_at_us(&self) -> Option<u64> {
        if self.abandoned {
            None
        } else {
            Some(self.released_us.unwrap_or(self.exit_us))
        }
    }

    /// Whether the section ended without a release while the holder was valid: it crashed, or
    /// it sent its release only after its own deadline (it slept past its validity). Such a
    /// lock is left to expire, which is what lock-delay is about.
    #[must_use]
    pub fn ended_unreleased(&self) -> bool {
        self.released_at_us()
            .is_none_or(|released| released > self.valid_until_us)
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
    /// A client crashed inside its critical section: it abandoned its lock without releasing
    /// it and never used it again.
    ClientCrash,
    /// A client left its critical section handing its lock to another process, which extended
    /// it by value from a manager without a lock-delay of its own; then nobody released it.
    ClientHandoff {
        /// Whether the extension won a quorum in time: the section's deadline is then the
        /// extension's ([`Section::extended_by_value`]); if not, the lock was abandoned with the
        /// holder's deadline, as by a crash.
        extended: bool,
    },
    /// Every client was cut off from a minority of the nodes, a different one each (a ring of
    /// majorities): their connections to those nodes closed, new ones refused.
    Partition,
    /// A replica was promoted in place of its primary.
    Failover,
    /// A demoted primary, resynchronised from the replica that took over, leads again.
    Failback,
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
    /// For a semaphore run, how many holders each resource allows at once; `None` for a lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u32>,
    /// The lock-delay the clients were configured with, in µs (0: none). The checker holds the
    /// history to it unless told another delay (see [`checker::check_with`]).
    ///
    /// [`checker::check_with`]: crate::checker::check_with
    #[serde(default, skip_serializing_if = "is_zero")]
    pub lock_delay_us: u64,
    /// How many times a client started over as a new process after a fault, knowing nothing
    /// of the nodes (a late joiner: the library's clients only).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub late_joins: u64,
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
                permit: None,
                released_us: Some(21),
                abandoned: false,
                extended_by_value: false,
                shared: false,
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
                FaultEvent {
                    at_us: 7,
                    node: None,
                    client: Some(0),
                    kind: FaultKind::ClientHandoff { extended: true },
                    detail: String::new(),
                },
            ],
            node_up: vec![NodeUp {
                node: 0,
                from_us: 0,
                to_us: 5,
            }],
            permits: None,
            lock_delay_us: 0,
            late_joins: 0,
        };
        let json = history.to_json();
        assert!(json.contains(r#""write": "rejected_stale""#), "{json}");
        assert!(
            json.contains(r#""type": "restart""#) && json.contains(r#""with_data": false"#),
            "{json}"
        );
        assert!(json.contains(r#""type": "client_pause""#), "{json}");
        assert!(
            json.contains(r#""type": "client_handoff""#) && json.contains(r#""extended": true"#),
            "{json}"
        );
        assert_eq!(History::from_json(&json).expect("parses"), history);
        assert!(History::from_json("{}").is_err());
        // A mutex run without lock-delay writes none of the semaphore and lock-delay fields.
        for field in ["permit", "abandoned", "extended_by_value", "lock_delay_us"] {
            assert!(!json.contains(field), "{field}: {json}");
        }
    }

    #[test]
    fn semaphore_and_lock_delay_fields_round_trip_and_default_when_missing() {
        let section = Section {
            resource: "s".to_owned(),
            client: 0,
            value: "v".to_owned(),
            fence: Some(1),
            enter_us: 10,
            exit_us: 20,
            valid_until_us: 30,
            write: WriteOutcome::NotAttempted,
            permit: Some(1),
            released_us: None,
            abandoned: true,
            extended_by_value: true,
            shared: false,
        };
        let history = History {
            strategy: "redlock".to_owned(),
            seed: 1,
            nodes: 5,
            clients: 1,
            duration_us: 100,
            sections: vec![section.clone()],
            faults: Vec::new(),
            node_up: Vec::new(),
            permits: Some(2),
            lock_delay_us: 1_000,
            late_joins: 0,
        };
        let json = history.to_json();
        assert!(json.contains(r#""permits": 2"#), "{json}");
        assert!(json.contains(r#""abandoned": true"#), "{json}");
        assert!(json.contains(r#""extended_by_value": true"#), "{json}");
        assert_eq!(History::from_json(&json).expect("parses"), history);

        // A section written before these fields: released at its exit, no permit.
        let old: Section = serde_json::from_str(
            r#"{"resource":"r","client":1,"value":"v","fence":null,"enter_us":1,
                "exit_us":5,"valid_until_us":9,"write":"not_attempted"}"#,
        )
        .expect("an old section parses");
        assert_eq!((old.permit, old.released_at_us()), (None, Some(5)));
        assert!(!old.ended_unreleased() && !old.extended_by_value);
        assert_eq!(section.released_at_us(), None);
        assert!(section.ended_unreleased());
        // Released only once its deadline had passed: as good as unreleased.
        let late = Section {
            abandoned: false,
            extended_by_value: false,
            shared: false,
            released_us: Some(31),
            ..section
        };
        assert!(late.ended_unreleased());
    }
}
