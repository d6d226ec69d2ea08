//! The injector: carries out a [`plan`](super::plan) against the run's servers, proxies and
//! clients, recording every applied event and every node's up-time. What each kind does and
//! undoes, and the invariants the injector keeps, are in the [parent module](super).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use super::{AIM_WAIT, Action, FAILBACK_AIM, FRESH, Planned, STAYS, max_impaired};
use crate::fault::Fault;
use crate::history::{FaultEvent, FaultKind};
use crate::record::Recorder;
use crate::topology::Topology;

/// A step of the injector's timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    /// Apply planned fault `i`.
    Start(usize),
    /// Undo planned fault `i`, which hit `node`.
    End(usize, usize),
}

/// Carries out `plan` against `topology`, with times relative to the record's origin, then
/// waits; returns when a message (or a hang-up) arrives on `stop`. Blocks; runs on the thread
/// that owns the servers. Faults still in force when it stops are undone where that is cheap
/// (paused nodes are resumed, proxies healed); killed nodes stay down, since the run is over.
pub(crate) fn inject<T>(
    plan: &[Planned],
    topology: &mut Topology,
    record: &Recorder,
    stop: &Receiver<T>,
) {
    let origin = record.origin();
    let mut timeline: BinaryHeap<Reverse<(Instant, Step)>> = plan
        .iter()
        .enumerate()
        .map(|(i, p)| Reverse((origin + p.at, Step::Start(i))))
        .collect();
    let mut impaired: Vec<Option<Fault>> = vec![None; topology.slots()];
    let mut paused: Vec<usize> = Vec::new();
    // Invariant 3: each planned fault pushes at most one End, so this ends; then only the stop
    // is awaited, as the servers must stay up until the clients are done.
    let mut stopped = false;
    while let Some(Reverse((due, step))) = timeline.pop() {
        stopped = wait_until(due, stop);
        if stopped {
            break;
        }
        match step {
            Step::Start(i) => {
                let fault = plan[i];
                let kind = fault.action.kind();
                let hit = fault.action.slots(topology.slots());
                let busy = impaired.iter().filter(|f| f.is_some()).count();
                let clash = hit
                    .iter()
                    .any(|&s| impaired.get(s).is_none_or(Option::is_some));
                if (kind.needs_every_node() && busy > 0)
                    || (kind.impairs() && (clash || busy >= max_impaired(topology.slots())))
                {
                    tracing::debug!(?fault, "skipped: nodes are already impaired");
                    continue;
                }
                if matches!(
                    kind,
                    Fault::Kill
                        | Fault::Restart
                        | Fault::RestartBurst
                        | Fault::Flush
                        | Fault::Replace
                        | Fault::ReplaceMarked
                ) {
                    stopped = aim(record, topology, stop);
                    if stopped {
                        break;
                    }
                }
                match start(fault.action, topology, record) {
                    Ok(Some(node)) => {
                        for &slot in &hit {
                            impaired[slot] = Some(kind);
                        }
                        if matches!(fault.action, Action::Pause { .. }) {
                            paused.push(node);
                        }
                        timeline.push(Reverse((Instant::now() + fault.lasts, Step::End(i, node))));
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(?fault, "fault not applied: {e}"),
                }
            }
            Step::End(i, node) => {
                let action = plan[i].action;
                // A failover is aimed at its promotion, a failback at its client's lock
                // (invariant 4).
                let aimed = match action {
                    Action::Failover { .. } => Some(aim(record, topology, stop)),
                    Action::Failback { client, .. } => Some(aim_at_crash(record, client, stop)),
                    _ => None,
                };
                if aimed == Some(true) {
                    stopped = true;
                    break;
                }
                paused.retain(|&p| p != node);
                if let Err(e) = end(action, node, topology, record) {
                    tracing::warn!(?action, node, "fault not undone: {e}");
                }
                for slot in action.slots(topology.slots()) {
                    impaired[slot] = None;
                }
            }
        }
    }
    if !stopped {
        // Whatever arrives (a message or a hang-up) means stop.
        let _ = stop.recv();
    }
    for node in paused {
        if topology.resume(node).is_ok() {
            record.node_up(node);
        }
    }
    topology.heal_proxies();
}

/// Sleeps until `due`; `true` if told to stop meanwhile.
fn wait_until<T>(due: Instant, stop: &Receiver<T>) -> bool {
    let left = due.saturating_duration_since(Instant::now());
    !matches!(stop.recv_timeout(left), Err(RecvTimeoutError::Timeout))
}

/// Waits (at most [`AIM_WAIT`]) for a fresh lock holder whose lock a crash would lose
/// (invariant 4); `true` if told to stop.
fn aim<T>(record: &Recorder, topology: &Topology, stop: &Receiver<T>) -> bool {
    let give_up = Instant::now() + AIM_WAIT;
    // Bounded by AIM_WAIT: every pass waits 2 ms unless stopped.
    while Instant::now() < give_up {
        let fresh = record.fresh_holds(FRESH, STAYS);
        if fresh
            .iter()
            .any(|resource| topology.replica_lacks(resource))
        {
            tracing::debug!(?fresh, "aimed");
            return false;
        }
        if wait_until(Instant::now() + Duration::from_millis(2), stop) {
            return true;
        }
    }
    tracing::debug!("nothing to aim at");
    false
}

/// Waits (at most [`FAILBACK_AIM`]) until `client`, whose crash a failback armed, has entered
/// the critical section it abandons: its lock was granted by masters whose replicas lack it
/// (invariant 4); `true` if told to stop.
fn aim_at_crash<T>(record: &Recorder, client: u32, stop: &Receiver<T>) -> bool {
    let give_up = Instant::now() + FAILBACK_AIM;
    // Bounded by FAILBACK_AIM: every pass waits 2 ms unless stopped.
    while Instant::now() < give_up {
        if !record.crash_pending(client) {
            return false;
        }
        if wait_until(Instant::now() + Duration::from_millis(2), stop) {
            return true;
        }
    }
    tracing::debug!(client, "the failback's client never entered a section");
    false
}

fn event(record: &Recorder, node: Option<usize>, kind: FaultKind, detail: String) {
    record.fault(FaultEvent {
        at_us: record.now_us(),
        node,
        client: None,
        kind,
        detail,
    });
}

/// Applies `action`; the node it hit, if it is to be undone later.
fn start(
    action: Action,
    topology: &mut Topology,
    record: &Recorder,
) -> Result<Option<usize>, crate::ChaosError> {
    match action {
        Action::Kill { slot } | Action::Restart { slot } => {
            let killed = topology.kill(slot)?;
            record.node_down(killed.node);
            let comes_back = if matches!(action, Action::Kill { .. }) {
                "back later with its data"
            } else {
                "back later without its data"
            };
            event(
                record,
                Some(killed.node),
                FaultKind::Kill,
                format!("SIGKILL node {}, {comes_back}", killed.node),
            );
            if let Some(promoted) = killed.promoted {
                event(
                    record,
                    Some(promoted),
                    FaultKind::Failover,
                    format!(
                        "REPLICAOF NO ONE on node {promoted}; clients and replication now go to it"
                    ),
                );
            }
            Ok(Some(killed.node))
        }
        Action::Pause { slot } => {
            let node = topology.pause(slot)?;
            record.node_down(node);
            event(record, Some(node), FaultKind::Pause, "SIGSTOP".to_owned());
            Ok(Some(node))
        }
        Action::Delay { slot, ms } => {
            if let Some(proxy) = topology.proxy(slot) {
                proxy.set_delay(Duration::from_millis(ms));
            }
            let detail = format!("proxy holds every chunk back {ms} ms");
            Ok(Some(proxy_event(
                topology,
                record,
                slot,
                FaultKind::Delay { ms },
                detail,
            )))
        }
        Action::Drop { slot } => {
            if let Some(proxy) = topology.proxy(slot) {
                proxy.drop_connections();
            }
            let detail = "proxy closed every open connection";
            proxy_event(topology, record, slot, FaultKind::DropConnections, detail);
            Ok(None)
        }
        Action::ClientPause { client, extra_ms } => {
            // Recorded by the client when it takes the pause, with its real length.
            record.arm_pause(client, extra_ms);
            Ok(None)
        }
        Action::ClientCrash { client } => {
            // Recorded by the client when it crashes, with the lock it abandons.
            record.arm_crash(client);
            Ok(None)
        }
        Action::ClientHandoff { client } => {
            // Recorded by the client when it hands off, with the extension's outcome.
            record.arm_handoff(client);
            Ok(None)
        }
        Action::RestartBurst { .. } => {
            // Down one after the other, then back one after the other: for a moment the
            // majority is down together, and every one of them comes back empty.
            let mut killed = Vec::new();
            for slot in action.slots(topology.slots()) {
                let node = topology.kill(slot)?.node;
                record.node_down(node);
                event(
                    record,
                    Some(node),
                    FaultKind::Kill,
                    format!("SIGKILL node {node} (restart burst), back at once without its data"),
                );
                killed.push(node);
            }
            for node in killed {
                topology.bring_back(node, false)?;
                record.node_up(node);
                event(
                    record,
                    Some(node),
                    FaultKind::Restart { with_data: false },
                    "restarted with its data deleted (restart burst)".to_owned(),
                );
            }
            Ok(None)
        }
        Action::Flush { .. } => {
            for slot in action.slots(topology.slots()) {
                let node = topology.flush(slot)?;
                event(
                    record,
                    Some(node),
                    FaultKind::Flush,
                    "FLUSHALL: the running server lost every key".to_owned(),
                );
            }
            Ok(None)
        }
        Action::Replace { first, marked, .. } => {
            let mut replaced = false;
            for slot in action.slots(topology.slots()) {
                if let Some(node) = topology.replace(slot, marked)? {
                    replaced = true;
                    let detail = if marked {
                        "proxy switched to a different, empty, long-running server, marked by \
                         hand (SET redlock-node-marker manual)"
                    } else {
                        "proxy switched to a different, empty, long-running server"
                    };
                    event(
                        record,
                        Some(node),
                        FaultKind::Replace { back: false },
                        detail.to_owned(),
                    );
                }
            }
            // A layout without spares (a failover pair) has nothing to switch back.
            Ok(replaced.then(|| topology.node_of(first)))
        }
        Action::Failover { first, .. } | Action::Failback { first, .. } => {
            let mut cut = false;
            for slot in action.slots(topology.slots()) {
                if let Some(node) = topology.cut_replica(slot)? {
                    cut = true;
                    event(
                        record,
                        Some(node),
                        FaultKind::ReplicationCut,
                        "replication to its replica cut (wrong masterauth on the replica, \
                         CLIENT KILL TYPE replica): the replica gets no write from now on"
                            .to_owned(),
                    );
                }
            }
            if let Action::Failback { client, .. } = action {
                // In a section that starts once every replica is cut, so that its lock is one
                // they never get; recorded by the client when it crashes, with the lock it
                // abandons.
                record.arm_crash_from(client, record.now_us());
            }
            // A layout without Redis Clusters has no replica to cut.
            Ok(cut.then(|| topology.node_of(first)))
        }
        Action::Partition { offset } => {
            if topology.groups() == 0 {
                // The runner gives clients ports of their own only when partitions are enabled.
                return Err(crate::ChaosError::Config(
                    "a partition needs client groups".to_owned(),
                ));
            }
            let reached = topology.partition(offset);
            let groups: Vec<String> = reached
                .iter()
                .enumerate()
                .map(|(group, slots)| format!("group {group} reaches {slots:?}"))
                .collect();
            event(
                record,
                None,
                FaultKind::Partition,
                format!(
                    "ring of majorities (client c in group c mod {}): {}; the other connections \
                     closed and refused",
                    reached.len(),
                    groups.join(", ")
                ),
            );
            Ok(Some(topology.node_of(0)))
        }
        Action::Blackhole { slot } => {
            if let Some(proxy) = topology.proxy(slot) {
                proxy.blackhole();
            }
            let detail = "proxy stopped forwarding on every open connection, which stay open";
            Ok(Some(proxy_event(
                topology,
                record,
                slot,
                FaultKind::Blackhole,
                detail,
            )))
        }
    }
}

/// Records a fault just done to the proxy of `slot` against the node behind it (in a failover
/// pair, the current master), and returns that node.
fn proxy_event(
    topology: &Topology,
    record: &Recorder,
    slot: usize,
    kind: FaultKind,
    detail: impl Into<String>,
) -> usize {
    let node = topology.node_of(slot);
    event(record, Some(node), kind, detail.into());
    node
}

/// Undoes `action`, which hit `node`.
fn end(
    action: Action,
    node: usize,
    topology: &mut Topology,
    record: &Recorder,
) -> Result<(), crate::ChaosError> {
    match action {
        Action::Kill { .. } | Action::Restart { .. } => {
            let with_data = matches!(action, Action::Kill { .. });
            topology.bring_back(node, with_data)?;
            record.node_up(node);
            let detail = if with_data {
                "restarted with its data (AOF, appendfsync always)"
            } else {
                "restarted with its data deleted"
            };
            event(
                record,
                Some(node),
                FaultKind::Restart { with_data },
                detail.to_owned(),
            );
        }
        Action::Pause { .. } => {
            if topology.is_running(node) {
                topology.resume(node)?;
                record.node_up(node);
                event(record, Some(node), FaultKind::Resume, "SIGCONT".to_owned());
            }
        }
        Action::Delay { slot, .. } | Action::Blackhole { slot } => {
            if let Some(proxy) = topology.proxy(slot) {
                proxy.heal();
            }
            let detail = if matches!(action, Action::Delay { .. }) {
                "proxy delay removed"
            } else {
                "black-holed connections closed"
            };
            event(record, Some(node), FaultKind::Heal, detail.to_owned());
        }
        Action::Partition { .. } => {
            topology.heal_partition();
            event(
                record,
                None,
                FaultKind::Heal,
                "partition healed: every client reaches every node".to_owned(),
            );
        }
        Action::Replace { .. } => {
            for slot in action.slots(topology.slots()) {
                topology.restore(slot);
                event(
                    record,
                    Some(topology.node_of(slot)),
                    FaultKind::Replace { back: true },
                    "proxy switched back to the node".to_owned(),
                );
            }
        }
        Action::Failover { .. } => {
            let slots = action.slots(topology.slots());
            // Every replica takes over first, then each is waited for: the promotions land
            // together, while the aimed holder still works.
            for &slot in &slots {
                topology.take_over(slot)?;
            }
            for &slot in &slots {
                let (old, new) = topology.promoted(slot)?;
                let how = topology.promotion();
                event(
                    record,
                    Some(new),
                    FaultKind::Failover,
                    format!(
                        "{how}: node {new}, cut off for longer than a TTL, is master; node {old} \
                         turns its replica and loses the window's writes"
                    ),
                );
            }
            for &slot in &slots {
                topology.settle(slot)?;
            }
        }
        Action::Failback { .. } => {
            let slots = action.slots(topology.slots());
            // As a failover, but the replicas' client writes are paused while they lead (so no
            // client rewrites the marker they hold), and the old masters take over again as
            // soon as they are in sync: all within the aimed holder's validity.
            for (old, new) in topology.fail_over_and_back(&slots)? {
                event(
                    record,
                    Some(new),
                    FaultKind::Failover,
                    format!(
                        "CLUSTER FAILOVER TAKEOVER: node {new}, which missed the last writes, led \
                         with its client writes paused; node {old} resynchronised from it"
                    ),
                );
                event(
                    record,
                    Some(old),
                    FaultKind::Failback,
                    format!(
                        "CLUSTER FAILOVER TAKEOVER: node {old} leads again, the same process \
                         with the data and marker of node {new}"
                    ),
                );
            }
            for &slot in &slots {
                topology.settle(slot)?;
            }
        }
        Action::Drop { .. }
        | Action::ClientPause { .. }
        | Action::ClientCrash { .. }
        | Action::ClientHandoff { .. }
        | Action::RestartBurst { .. }
        | Action::Flush { .. } => {}
    }
    Ok(())
}
