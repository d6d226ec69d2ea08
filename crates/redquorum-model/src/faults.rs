//! Node faults: what each does to a node's processes and data.
//!
//! A node's pause is not a fault of its own here: a paused Redis answers nothing while its clock
//! runs on, which the network already gives (a request delivered late, or never), so every
//! schedule of a pause is one of the network's.

use crate::node::{Data, MarkerId, MarkerKey, Node};

/// A fault a node can suffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// The master crashes and restarts with a new `run_id`, its data kept (AOF, RDB).
    RestartKept,
    /// The master crashes and restarts with a new `run_id`, its data lost.
    RestartLost,
    /// `FLUSHALL`: the data is lost, the process runs on.
    Flush,
    /// A cluster node's or a replicated node's replica, holding a prefix of the writes, is
    /// promoted (a new `master_replid`; its `master_replid2` the history it followed); the old
    /// master is demoted and resynchronised from it (Sentinel reconfigures it as a replica of the
    /// new primary once it is back). Twice is a failback.
    Failover,
    /// Another server, long running and never marked, behind the node's address.
    Replace,
    /// Another server, long running, behind the node's address, carrying the same marker
    /// written by hand (`manual:0`) as the deployment's provisioning writes on every server.
    ReplaceHandMarked,
    /// The master restarts empty, and its host's clock steps forward after it started (started
    /// before time sync, a VM restored from a snapshot): its uptime reads an hour.
    RestartStepped,
    /// The replica (of a cluster node or a replicated node) restarts from an old snapshot: a new
    /// `run_id`, uptime 0, and the data of the snapshot: the marker it had, and nothing written
    /// after it (no lock key, no counter), until it catches up. A prefix of the writes whenever
    /// the marker is older than every lock written since (every bound with markers drawn before
    /// the run). Promoted before it catches up, it lacks locks whose votes waited for it.
    ReplicaRestart,
}

/// Which faults the bounds allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultKinds {
    /// Restarts that keep the data.
    pub restart_kept: bool,
    /// Restarts that lose it.
    pub restart_lost: bool,
    /// `FLUSHALL`.
    pub flush: bool,
    /// Failover and failback (cluster nodes only).
    pub failover: bool,
    /// A server replaced behind the address.
    pub replace: bool,
    /// A server replaced behind the address by one marked by hand.
    pub replace_hand_marked: bool,
    /// A restart whose uptime lies.
    pub restart_stepped: bool,
    /// A replica's restart from an old snapshot (nodes with a replica only).
    pub replica_restart: bool,
}

impl FaultKinds {
    /// No faults.
    pub const NONE: FaultKinds = FaultKinds {
        restart_kept: false,
        restart_lost: false,
        flush: false,
        failover: false,
        replace: false,
        replace_hand_marked: false,
        restart_stepped: false,
        replica_restart: false,
    };

    /// The faults allowed, in a fixed order.
    pub fn list(&self) -> Vec<Fault> {
        let mut list = Vec::new();
        if self.restart_kept {
            list.push(Fault::RestartKept);
        }
        if self.restart_lost {
            list.push(Fault::RestartLost);
        }
        if self.flush {
            list.push(Fault::Flush);
        }
        if self.failover {
            list.push(Fault::Failover);
        }
        if self.replace {
            list.push(Fault::Replace);
        }
        if self.replace_hand_marked {
            list.push(Fault::ReplaceHandMarked);
        }
        if self.restart_stepped {
            list.push(Fault::RestartStepped);
        }
        if self.replica_restart {
            list.push(Fault::ReplicaRestart);
        }
        list
    }
}

/// Applies `fault` to `node` at node time `now`; `false` when it does not apply (a failover, or
/// a replica's restart, on a node without a replica).
pub fn apply(fault: Fault, node: &mut Node, now: u16) -> bool {
    match fault {
        Fault::RestartKept | Fault::RestartLost => {
            node.master.run = node.next.run;
            node.next.run = node.next.run.wrapping_add(1);
            node.master.started = i32::from(now);
            node.master.flushed = false;
            if fault == Fault::RestartLost {
                node.master.data = Data::default();
            }
            true
        }
        Fault::Replace | Fault::ReplaceHandMarked | Fault::RestartStepped => {
            node.master.run = node.next.run;
            node.next.run = node.next.run.wrapping_add(1);
            node.master.started = i32::from(now) - 3_600_000;
            node.master.flushed = false;
            node.master.data = Data::default();
            if fault == Fault::ReplaceHandMarked {
                node.master.data.marker = Some(MarkerKey {
                    id: MarkerId::Hand,
                    ..MarkerKey::plain(None, 0, 0)
                });
            }
            true
        }
        Fault::Flush => {
            node.master.data = Data::default();
            node.master.flushed = true;
            true
        }
        Fault::Failover => {
            let Some(mut promoted) = node.replica else {
                return false;
            };
            promoted.previous = Some(promoted.replid);
            promoted.replid = node.next.replid;
            node.next.replid = node.next.replid.wrapping_add(1);
            let mut demoted = node.master;
            // A full resynchronisation: the demoted master takes the new master's data and
            // replication id.
            demoted.data = promoted.data;
            demoted.replid = promoted.replid;
            node.master = promoted;
            node.replica = Some(demoted);
            true
        }
        Fault::ReplicaRestart => {
            let Some(replica) = node.replica.as_mut() else {
                return false;
            };
            replica.run = node.next.run;
            node.next.run = node.next.run.wrapping_add(1);
            replica.started = i32::from(now);
            replica.flushed = false;
            replica.data = Data {
                marker: replica.data.marker,
                ..Data::default()
            };
            true
        }
    }
}

/// The replica catches up with its master (asynchronous replication: until it does, it holds a
/// prefix of the writes).
pub fn replicate(node: &mut Node) -> bool {
    match node.replica.as_mut() {
        Some(replica) if replica.data != node.master.data => {
            replica.data = node.master.data;
            true
        }
        _ => false,
    }
}
