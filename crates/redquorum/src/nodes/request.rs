//! One request of a round, the same for every node: what the algorithm asks (`round/`), before
//! [`commands`](crate::nodes::commands) says what it means in commands and
//! [`node`](crate::nodes::node) where it goes.

use crate::base::queue::{QueuePlace, WaiterId};
use crate::base::telemetry::RequestKind;
use crate::protocol::cause::Asked;
use crate::protocol::fencing::Advance;

/// One request of a round, the same for every node. Each applies to all the resources of a
/// lock at once: on a set, a node does it for every key or for none (except a release, which
/// deletes every key that still holds our value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// `SET key value NX PX ttl_ms`; for a set, a script that sets every key only if none exists.
    Set { ttl_ms: u64 },
    /// `SET NX PX`, also advancing the fencing counters to the node's proposal for the token,
    /// in the same step: a pipeline of plain commands for one resource on a standalone
    /// master, else a script ([`fencing`](crate::protocol::fencing) step 1).
    /// `scripted` when it must be the script all the same: a campaign's, whose counter must
    /// advance only with a `SET` that succeeded (`handles/election.rs`
    /// invariant 5).
    SetFenced {
        ttl_ms: u64,
        advance: Advance,
        scripted: bool,
    },
    /// As a fair waiter: join or keep `place` in the resources' queues, and set the keys if they
    /// are free and it is our turn; fenced as [`Request::SetFenced`] when `advance` is given.
    SetQueued {
        ttl_ms: u64,
        advance: Option<Advance>,
        place: QueuePlace,
    },
    /// As a reader or the writer of a read-write lock (the resources say which,
    /// [`Access`](crate::base::resources::Access)): take it if its rules allow, fenced when
    /// `advance` is given; a writer refused because of readers keeps new readers out for
    /// `hold_off_ms` ([`rwlock`](crate::protocol::rwlock)).
    SetReadWrite {
        ttl_ms: u64,
        advance: Option<Advance>,
        hold_off_ms: u64,
        /// A writer's id among the waiting writers.
        writer: Option<WaiterId>,
    },
    /// Store a fencing token while the lock still holds our value.
    Fence { token: u64, retention_ms: u64 },
    /// Advance the fencing counters to the node's proposal while the lock still holds our
    /// value: a token on request ([`fencing`](crate::protocol::fencing) invariant 8).
    FenceHeld { advance: Advance },
    /// The compare-and-PEXPIRE script; with fencing on (`retention_ms`), it also keeps the
    /// fencing counters for their retention from now. With `late_ms` (an extension by value of
    /// one resource under a lock-delay: `engine` invariant 10), a key with no more than that
    /// left is not extended but left to its delay; 0 for none (the holder's own extensions, sets
    /// and read-write locks, which are never extended by value).
    Extend {
        ttl_ms: u64,
        retention_ms: Option<u64>,
        late_ms: u64,
    },
    /// The compare-and-delete script; also takes `leave` out of the waiting queue. When
    /// `announce`, whatever it frees is announced to the resource's queued waiters; otherwise a
    /// single resource gets the standard script, byte for byte.
    Release {
        leave: Option<WaiterId>,
        announce: bool,
        /// Under a lock-delay, the remaining time (ms) at or below which a key of ours outlived
        /// its holder's validity and is left to expire ([`engine`](crate::round::engine)
        /// invariant 6); 0 without one (then a single resource gets the standard script).
        late_ms: u64,
    },
    /// Instead of a release, for a lock that was lost while a lock-delay is set: keep our keys
    /// for at least `ttl_ms` (the delay) from now ([`engine`](crate::round::engine) invariant 5).
    Linger { ttl_ms: u64 },
    /// Establish the connection (health check and scripts included).
    Connect,
}

impl Request {
    /// What a refusal of this request means: somebody else's value is there (an acquisition),
    /// or ours is not (anything else).
    pub(crate) fn asked(self) -> Asked {
        match self {
            Request::Set { .. }
            | Request::SetFenced { .. }
            | Request::SetQueued { .. }
            | Request::SetReadWrite { .. }
            | Request::Connect => Asked::Acquire,
            Request::Fence { .. }
            | Request::FenceHeld { .. }
            | Request::Extend { .. }
            | Request::Release { .. }
            | Request::Linger { .. } => Asked::Keep,
        }
    }

    /// What the request does, as metrics and spans name it.
    pub(crate) fn kind(self) -> RequestKind {
        match self {
            Request::Set { .. }
            | Request::SetFenced { .. }
            | Request::SetQueued { .. }
            | Request::SetReadWrite { .. } => RequestKind::Acquire,
            Request::Fence { .. } | Request::FenceHeld { .. } => RequestKind::Fence,
            Request::Extend { .. } => RequestKind::Extend,
            Request::Release { .. } | Request::Linger { .. } => RequestKind::Release,
            Request::Connect => RequestKind::Connect,
        }
    }

    /// Whether it must reach the replicas of a replicated primary or a cluster master before
    /// it counts (`server` invariant 8, `succession` invariant 1): every vote, and a linger,
    /// which promises a lost lock's keys the lock-delay from now (`engine` invariant 5), a
    /// promise a failover to a replica without it would break.
    pub(crate) fn waits_for_replicas(self) -> bool {
        self.is_vote() || matches!(self, Request::Linger { .. })
    }

    /// Whether a reply to this request is a vote, which a quarantined node may not cast.
    pub(crate) fn is_vote(self) -> bool {
        matches!(
            self,
            Request::Set { .. }
                | Request::SetFenced { .. }
                | Request::SetQueued { .. }
                | Request::SetReadWrite { .. }
                | Request::Fence { .. }
                | Request::FenceHeld { .. }
                | Request::Extend { .. }
        )
    }
}
