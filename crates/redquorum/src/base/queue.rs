//! A waiter's identity and its place in a fair queue: plain values that a node's request carries
//! (`nodes/node.rs`) and the waiting machinery (`round/waiting.rs`, whose invariants 3 and 4
//! say how places are kept and given up) hands out.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::protocol::lease::lease;

/// Identifies one waiter (one acquisition) in the queues and in release messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct WaiterId(pub(crate) u128);

impl WaiterId {
    /// A fresh random id (the thread-local CSPRNG): ids of different clients must not collide.
    pub(crate) fn new() -> Self {
        Self(u128::from_le_bytes(crate::base::fresh::bytes()))
    }
}

/// 32 hex digits, as stored in the queues and sent in messages.
impl fmt::Display for WaiterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// A waiter's place in the fair queue, the same on every node (`waiting` invariant 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueuePlace {
    pub(crate) id: WaiterId,
    /// Microseconds since the Unix epoch when the acquisition started: arrival order. Below
    /// 2^53 for the next two centuries, so Redis's double scores hold it exactly.
    pub(crate) ticket_us: u64,
    /// How long a node keeps the place without a renewal (`waiting` invariant 4).
    pub(crate) lease_ms: u64,
}

impl QueuePlace {
    /// A place for an acquisition starting now, that tries at least every `retry_delay`.
    pub(crate) fn new(retry_delay: Duration, node_timeout: Duration) -> Self {
        let ticket_us = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        Self {
            id: WaiterId::new(),
            ticket_us,
            lease_ms: crate::protocol::validity::ttl_millis(lease(retry_delay, node_timeout)),
        }
    }
}

impl QueuePlace {
    /// How long a fair waiter that a quorum put behind another may wait for its turn's
    /// announcement before it tries again anyway: a quarter of its lease (`waiting` invariant 8).
    pub(crate) fn poll_behind(&self) -> Duration {
        Duration::from_millis(self.lease_ms / 4)
    }
}
