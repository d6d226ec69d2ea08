//! What a server that may be the primary of a replicated node
//! ([`sentinels`](crate::nodes::sentinels)) knows of its replicas: which its votes wait for, and
//! what each reading of its `INFO replication` tells the service's
//! [`Lineage`] (`succession` invariants 1 and 2). Its own module so that the
//! [`server`](crate::nodes::server) and the [`health`](crate::nodes::health) check, which both
//! feed it, need not import each other.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::base::sync::lock;
use crate::nodes::census::{Census, Reach, Reading};
use crate::protocol::coverage::Counting;
use crate::protocol::quarantine::info_field;
use crate::protocol::succession::{Lineage, Offsets, Replicas};

/// What a server that is the primary of a replicated node ([`sentinels`](crate::nodes::sentinels))
/// does differently: a vote waits for its replicas (`server` invariant 8), reads back which are online,
/// and the server is judged by the service's [`Lineage`] when it becomes the primary
/// (`succession`).
#[derive(Debug)]
pub(crate) struct Replicated {
    /// The server's address as the sentinels name it (`ip:port`).
    pub(crate) address: String,
    /// The replicas (`ip:port`) the server listed online at its last reading, and those the
    /// sentinels listed as candidates at their last reading while they named this server the
    /// primary (`succession` invariant 1).
    pub(crate) known: Mutex<(Vec<String>, Vec<String>)>,
    /// How many replicas a vote waits for: every one of either list, once
    /// (`succession` invariant 1).
    pub(crate) wait_for: AtomicU32,
    /// The fewest replicas a vote waits for, whatever the lists say: the replicas the service
    /// keeps, as the user set them for a node behind a fixed address (`endpoint`); 0 behind
    /// Sentinel, whose candidates count instead (`succession` invariant 1).
    pub(crate) floor: u32,
    /// Whether the server is reached at a fixed address that moves to the new primary on
    /// failover (`endpoint`): a reply that says this server may no longer be the primary drops
    /// the connection, so that the next one goes through the address again.
    pub(crate) behind_endpoint: bool,
    /// The chaos run's replaced rule: votes wait for no replica, and every server that becomes
    /// the primary is taken to continue the history (`endpoint` invariant 1 and `succession`
    /// invariant 7 off).
    pub(crate) trusting: bool,
    /// How a vote's acknowledgements are judged: by each replica's own (`coverage`), unless
    /// the chaos run's replaced rule counts them by number.
    pub(crate) counting: Counting,
    /// The longest a `WAIT` may hold the connection, in milliseconds (half the node timeout).
    pub(crate) wait_ms: u64,
    /// What the client saw of the service: shared by every server of the node.
    pub(crate) lineage: Arc<Mutex<Lineage>>,
    /// This server's replication offsets of the last few seconds (`succession` invariant 2).
    pub(crate) offsets: Mutex<Offsets>,
    /// Which server answers at each address the server lists its replicas at
    /// (`coverage` invariant 2).
    census: Census,
    /// Set when a census named runs that no receipt was written for since (`endpoint`
    /// invariant 3).
    named: Arc<AtomicBool>,
    /// The replica runs this server holds a receipt for, written while its history was the one
    /// kept here (`succession` invariant 5), and those being written now.
    pub(crate) receipts: Mutex<Receipts>,
}

/// What [`Replicated::receipts`] keeps.
#[derive(Debug, Default)]
pub(crate) struct Receipts {
    /// The server's history when they were written.
    history: String,
    written: HashSet<String>,
    writing: bool,
}

impl Replicated {
    /// What a server that may be a replicated node's primary starts with: nothing known of its
    /// replicas yet, so its first vote waits for `floor` of them (its health check reads how
    /// many are online before any vote).
    pub(crate) fn new(
        address: String,
        lineage: Arc<Mutex<Lineage>>,
        floor: u32,
        behind_endpoint: bool,
        wait_ms: u64,
        reach: Reach,
    ) -> Self {
        Self {
            address,
            known: Mutex::new((Vec::new(), Vec::new())),
            wait_for: AtomicU32::new(floor),
            floor,
            behind_endpoint,
            trusting: false,
            counting: Counting::ByIdentity,
            wait_ms,
            lineage,
            offsets: Mutex::new(Offsets::default()),
            census: Census::new(reach),
            named: Arc::default(),
            receipts: Mutex::default(),
        }
    }

    /// Records what the server's `INFO replication` says of its replicas, read at `now`: how many
    /// the next vote waits for, which are away and which caught up (`succession` invariants 1,
    /// 2). Returns those online.
    pub(crate) fn observe(&self, replication: &str, now: Instant) -> Vec<String> {
        let replicas = Replicas::read(replication);
        let history = info_field(replication, "master_replid").unwrap_or_default();
        let caught_up: Vec<(&str, Instant)> = {
            let mut offsets = lock(&self.offsets);
            if let Some(offset) = replicas.primary_offset {
                offsets.record(now, offset);
            }
            // `succession` invariant 2: as of the reading its offset covers, or of the
            // acknowledgement itself if that came earlier (`lag` is in whole seconds, rounded
            // down).
            replicas
                .acknowledged
                .iter()
                .filter_map(|(address, offset, lag)| {
                    let reading = offsets.reached(*offset)?;
                    let acked = now.checked_sub(*lag + Duration::from_secs(1))?;
                    Some((address.as_str(), reading.min(acked)))
                })
                .collect()
        };
        {
            let mut lineage = lock(&self.lineage);
            lineage.online(&self.address, history, &replicas.online, now);
            for (address, at) in caught_up {
                lineage.caught_up(address, history, at);
            }
        }
        {
            // Receipts written under another history name that one (`succession` invariant 5).
            let mut receipts = lock(&self.receipts);
            if receipts.history != history {
                receipts.written.clear();
            }
        }
        let mut known = lock(&self.known);
        known.0.clone_from(&replicas.online);
        self.count(&known);
        replicas.online
    }

    /// The runs of `listed` this server holds no receipt for yet (`succession` invariant 5),
    /// unless a write is under way: the caller writes them, then calls
    /// [`receipts_written`](Self::receipts_written).
    pub(crate) fn receipts_due(&self, listed: Vec<String>) -> Vec<String> {
        let mut receipts = lock(&self.receipts);
        if receipts.writing {
            return Vec::new();
        }
        let due: Vec<String> = listed
            .into_iter()
            .filter(|run| !receipts.written.contains(run))
            .collect();
        receipts.writing = !due.is_empty();
        due
    }

    /// Whether a run of `listed` has no receipt written yet (`succession` invariant 5).
    pub(crate) fn receipts_missing(&self, listed: &[String]) -> bool {
        let receipts = lock(&self.receipts);
        listed.iter().any(|run| !receipts.written.contains(run))
    }

    /// The receipts for `runs` were written under `history`, or were not (`None`).
    pub(crate) fn receipts_written(&self, runs: Vec<String>, history: Option<String>) {
        let mut receipts = lock(&self.receipts);
        receipts.writing = false;
        if let Some(history) = history {
            if receipts.history != history {
                receipts.written.clear();
                receipts.history = history;
            }
            receipts.written.extend(runs);
        }
    }

    /// The sentinels listed `candidates` while they named this server the primary.
    pub(crate) fn candidates(&self, candidates: Vec<String>) {
        let mut known = lock(&self.known);
        known.1 = candidates;
        self.count(&known);
    }

    /// Counts the replicas of `known`, each once, and never fewer than the floor
    /// (`succession` invariant 1).
    fn count(&self, known: &(Vec<String>, Vec<String>)) {
        let (online, candidates) = known;
        let extra = candidates.iter().filter(|c| !online.contains(c)).count();
        let count = u32::try_from(online.len() + extra).unwrap_or(u32::MAX);
        let count = if self.trusting {
            0
        } else {
            count.max(self.floor)
        };
        self.wait_for.store(count, Ordering::Release);
    }

    /// The replicas the server listed online at its last reading.
    pub(crate) fn online(&self) -> Vec<String> {
        lock(&self.known).0.clone()
    }

    /// The replicas a vote must reach, by address: those online at the last reading and the
    /// sentinels' candidates (`coverage` invariant 1).
    pub(crate) fn required(&self) -> Vec<String> {
        let known = lock(&self.known);
        let (online, candidates) = &*known;
        let mut required = online.clone();
        required.extend(candidates.iter().filter(|c| !online.contains(c)).cloned());
        required
    }

    /// Whether the replica the primary lists at `address` was found there, linked to this
    /// primary, by the last census (`coverage` invariant 2).
    pub(crate) fn confirmed(&self, address: &str) -> Result<(), String> {
        self.census.confirmed(&self.online(), address)
    }

    /// Before a vote: a census of the replicas online now, when none read them yet, for the
    /// vote to wait for (`census` invariant 2). A census merely due is read in the background.
    pub(crate) fn census_for_vote(&self, timeout: Duration) -> Option<Reading> {
        self.census
            .before_vote(self.online(), |online| self.read_census(online, timeout))
    }

    /// Whether a census named runs since the last call: their receipts are due.
    pub(crate) fn named_runs(&self) -> bool {
        self.named.swap(false, Ordering::AcqRel)
    }

    /// A census of the replicas online now, if one is due (`census` invariant 2): ready once
    /// read.
    pub(crate) fn census_due(&self, timeout: Duration) -> Option<Reading> {
        let online = self.online();
        if !self.census.due(&online) {
            return None;
        }
        self.read_census(online, timeout)
    }

    /// Reads the replicas at `online` as replicas of the history the client follows (none
    /// before the first health check judged the primary), naming each run found for the
    /// lineage (`succession` invariant 7).
    fn read_census(&self, online: Vec<String>, timeout: Duration) -> Option<Reading> {
        let history = lock(&self.lineage).followed()?.to_owned();
        let lineage = Arc::clone(&self.lineage);
        let named = Arc::clone(&self.named);
        Some(self.census.read(online, history, timeout, move |runs| {
            let mut lineage = lock(&lineage);
            for (address, run) in runs {
                lineage.named(address, run);
            }
            if !runs.is_empty() {
                named.store(true, Ordering::Release);
            }
        }))
    }

    /// How many replicas a vote waits for (`succession` invariant 1).
    pub(crate) fn replicas(&self) -> u32 {
        self.wait_for.load(Ordering::Acquire)
    }
}
