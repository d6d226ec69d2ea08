//! Vouching for nodes: the only places that rewrite a marker in place (keeping its id,
//! [`marker`](crate::protocol::marker) invariant 1). Two callers:
//! - the group's first-sight protocol ([`first_sight`](crate::protocol::first_sight) has the rule
//!   and its argument; this is its I/O), run at most once at a time per manager, on connections of
//!   its own to every node (one each, a few times in a process's life: the health checks it serves
//!   are in the middle of their own connection's set-up);
//! - an operator's `redlock nodes mark` ([`mark`](crate::nodes::mark), which calls [`rewrite`]),
//!   who vouches that servers lost nothing (brand-new, or known good).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared, join_all};
use redis::aio::MultiplexedConnection;

use crate::base::sync::lock;
use crate::nodes::connect::connect_once;
use crate::nodes::node_error::NodeError;
use crate::nodes::scripts::{MARKER, VOUCH};
use crate::protocol::first_sight::{Outcome, Sighting, decide, sighting};
use crate::protocol::marker::MarkerValue;
use crate::protocol::quarantine::{MARKER_KEY, info_field};

/// How long an undecided first look (a node could not be read) is kept before the next health
/// check may try again.
const LOOK_AGAIN_AFTER: Duration = Duration::from_secs(2);

/// One manager's first-sight protocol over all of its nodes (plain servers only:
/// [`first_sight`](crate::protocol::first_sight) invariant 5).
pub(crate) struct FirstSight {
    nodes: Vec<(String, redis::Client)>,
    max_ttl: Duration,
    /// How long a first-sight marker must still be pending to count as pending
    /// (`first_sight` invariant 1).
    margin: Duration,
    /// The group's fingerprint, which its vouches name (`marker` invariant 4).
    fingerprint: String,
    connect_timeout: Duration,
    state: Mutex<State>,
}

impl std::fmt::Debug for FirstSight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FirstSight")
            .field("nodes", &self.nodes.len())
            .finish()
    }
}

#[derive(Default)]
struct State {
    decided: Option<(Outcome, Instant)>,
    running: Option<Shared<BoxFuture<'static, Outcome>>>,
}

impl FirstSight {
    /// The protocol for the servers `nodes` (label, client), in the manager's order.
    pub(crate) fn new(
        nodes: Vec<(String, redis::Client)>,
        max_ttl: Duration,
        margin: Duration,
        connect_timeout: Duration,
    ) -> Self {
        let mut addresses: Vec<&str> = nodes.iter().map(|(label, _)| label.as_str()).collect();
        addresses.sort_unstable();
        // Any stable digest of the sorted addresses will do; this one is at hand.
        let digest = redis::Script::new(&addresses.join(","))
            .get_hash()
            .to_owned();
        Self {
            fingerprint: digest.chars().take(16).collect(),
            nodes,
            max_ttl,
            margin,
            connect_timeout,
            state: Mutex::default(),
        }
    }

    /// How long a health check waits for [`settle`](Self::settle): half the connect timeout,
    /// within which a connection attempt must also finish.
    pub(crate) fn patience(&self) -> Duration {
        self.connect_timeout / 2
    }

    /// The group's decision: made once (a look that could not read every node is made again
    /// after [`LOOK_AGAIN_AFTER`]); concurrent callers share one run.
    pub(crate) async fn settle(self: &Arc<Self>) -> Outcome {
        let run = {
            let mut state = lock(&self.state);
            match &state.decided {
                Some((Outcome::Undecided, at)) if at.elapsed() < LOOK_AGAIN_AFTER => {
                    return Outcome::Undecided;
                }
                Some((Outcome::Undecided, _)) | None => {}
                Some((decided, _)) => return decided.clone(),
            }
            let me = Arc::clone(self);
            state
                .running
                .get_or_insert_with(|| {
                    let run = me.run().boxed().shared();
                    // Driven to the end even if every health check waiting for it gives up
                    // first (each waits only part of its connect timeout).
                    tokio::spawn(run.clone());
                    run
                })
                .clone()
        };
        run.await
    }

    /// Records the run's outcome, for the next health checks.
    fn decided(&self, outcome: Outcome) -> Outcome {
        let mut state = lock(&self.state);
        state.running = None;
        state.decided = Some((outcome.clone(), Instant::now()));
        outcome
    }

    /// Look, decide, extend every marker, then vouch for each (`first_sight`'s rule).
    async fn run(self: Arc<Self>) -> Outcome {
        let outcome = self.look_and_vouch().await;
        self.decided(outcome)
    }

    async fn look_and_vouch(&self) -> Outcome {
        let looks = join_all(self.nodes.iter().map(|(_, client)| async {
            let mut conn = connect_once(client, self.connect_timeout).await.ok()?;
            let look = look(&mut conn, self.max_ttl, self.margin).await.ok()?;
            Some((conn, look))
        }))
        .await;
        let sightings: Vec<(String, Sighting)> = self
            .nodes
            .iter()
            .zip(&looks)
            .map(|((label, _), look)| {
                let sighting = look
                    .as_ref()
                    .map_or(Sighting::Unread, |(_, l)| l.sighting.clone());
                (label.clone(), sighting)
            })
            .collect();
        let outcome = decide(&sightings);
        if outcome != Outcome::Vouched {
            if let Outcome::Wait(why) = &outcome {
                tracing::info!("nodes seen without a marker wait out their quarantine: {why}");
            }
            return outcome;
        }
        let mut looked: Vec<(MultiplexedConnection, Look)> = looks.into_iter().flatten().collect();
        // Invariant 1 of `first_sight`: every extension before any vouch.
        let margin = self.margin_ms();
        for ((label, _), (conn, look)) in self.nodes.iter().zip(&mut looked) {
            let max_ttl_ms = u64::try_from(self.max_ttl.as_millis()).unwrap_or(u64::MAX);
            let max_ttl_ms = max_ttl_ms.to_string();
            let step = rewrite(conn, "extend", &look.id, &max_ttl_ms, false, margin, "").await;
            if matches!(&step, Ok((false, found)) if found == "vouched") {
                // Another client's protocol got there first; the health checks read its vouch.
                return Outcome::Undecided;
            }
            if !matches!(step, Ok((true, _))) {
                let why = format!("{label}: its marker changed while the group was read");
                tracing::info!("nodes seen without a marker wait out their quarantine: {why}");
                return Outcome::Wait(why);
            }
        }
        for ((label, _), (conn, look)) in self.nodes.iter().zip(&mut looked) {
            // Invariant 4 of `first_sight`: a vouch that fails leaves that marker pending.
            let group = &self.fingerprint;
            let step = rewrite(conn, "vouch", &look.id, &look.run_id, false, margin, group).await;
            if !matches!(step, Ok((true, _))) {
                let why = format!("{label}: its marker changed while the group was vouched for");
                return Outcome::Wait(why);
            }
        }
        tracing::info!(
            nodes = self.nodes.len(),
            "nodes seen for the first time, without markers, long running and clean: trusted at once"
        );
        Outcome::Vouched
    }
}

impl FirstSight {
    /// The group's fingerprint (`marker` invariant 4).
    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    fn margin_ms(&self) -> u64 {
        u64::try_from(self.margin.as_millis()).unwrap_or(u64::MAX)
    }
}

/// What the first look at one node found.
struct Look {
    sighting: Sighting,
    /// The id of its first-sight marker.
    id: String,
    run_id: String,
}

/// Reads (or writes, where there is none) a node's marker as a first-sight one, then its `INFO`:
/// read after the marker, so a loss before the read shows in the counters (`first_sight`).
async fn look(
    conn: &mut MultiplexedConnection,
    max_ttl: Duration,
    margin: Duration,
) -> Result<Look, NodeError> {
    let fresh = format!("{:016x}", crate::base::fresh::u64());
    let (value, _, node_ms): (String, u8, u64) = redis::cmd("EVAL")
        .arg(MARKER.source)
        .arg(1)
        .arg(MARKER_KEY)
        .arg(fresh)
        .arg(u64::try_from(max_ttl.as_millis()).unwrap_or(u64::MAX))
        .arg("")
        .arg("new.")
        .query_async(conn)
        .await
        .map_err(|e| NodeError::from_redis(&e))?;
    let info: String = redis::cmd("INFO")
        .arg("all")
        .query_async(conn)
        .await
        .map_err(|e| NodeError::from_redis(&e))?;
    let marker = MarkerValue::parse(&value);
    let run_id = info_field(&info, "run_id").unwrap_or_default().to_owned();
    let sighting = sighting(&value, node_ms, &info, max_ttl, margin);
    Ok(Look {
        sighting,
        id: marker.id.to_owned(),
        run_id,
    })
}

/// One step of `scripts/vouch.lua` on the node's marker: whether it was done, and what was found
/// there (`none`, `new`, `vouched` or `other`).
pub(crate) async fn rewrite(
    conn: &mut MultiplexedConnection,
    step: &str,
    id: &str,
    arg: &str,
    force: bool,
    margin_ms: u64,
    group: &str,
) -> Result<(bool, String), NodeError> {
    let (done, _, found): (u8, Option<String>, String) = redis::cmd("EVAL")
        .arg(VOUCH)
        .arg(1)
        .arg(MARKER_KEY)
        .arg(step)
        .arg(id)
        .arg(arg)
        .arg(if force { "1" } else { "0" })
        .arg(margin_ms)
        .arg(group)
        .query_async(conn)
        .await
        .map_err(|e| NodeError::from_redis(&e))?;
    Ok((done == 1, found))
}
