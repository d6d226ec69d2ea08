//! Node faults: what each does to a node's processes and data.
//!
//! A node's pause is not a fault of its own here: a paused Redis answers nothing while its clock
//! runs on, which the network already gives (a request delivered late, or never), so every
//! schedule of a pause is one of the network's.

use crate::node::{Data, Node};

/// A fault a node can suffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// The master crashes and restarts with a new `run_id`, its data kept (AOF, RDB).
    RestartKept,
    /// The master crashes and restarts with a new `run_id`, its data lost.
    RestartLost,
    /// `FLUSHALL`: the data is lost, the process runs on.
    Flush,
    /// A cluster node's replica, holding a prefix of the writes, is promoted; the old master is
    /// demoted and resynchronised from it. Twice is a failback.
    Failover,
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
}

impl FaultKinds {
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
        list
    }
}

/// Applies `fault` to `node` at node time `now`; `false` when it does not apply (a failover of
/// a node without a replica).
pub fn apply(fault: Fault, node: &mut Node, now: u16) -> bool {
    match fault {
        Fault::RestartKept | Fault::RestartLost => {
            node.master.run = node.next.run;
            node.next.run = node.next.run.wrapping_add(1);
            node.master.started = i32::from(now);
            if fault == Fault::RestartLost {
                node.master.data = Data::default();
            }
            true
        }
        Fault::Flush => {
            node.master.data = Data::default();
            true
        }
        Fault::Failover => {
            let Some(mut promoted) = node.replica else {
                return false;
            };
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
