//! The round: the algorithm and the machinery it runs on. The manager's attempt, decide, roll
//! back and wait; the engine that sends one request to every node at once and counts the
//! replies as they come; the deadlines that end a round, the waiting for a busy lock, the retry
//! policy, and the random draws every identifier comes from. It asks the nodes, and leaves every
//! verdict to the protocol.

pub(crate) mod acquire;
pub(crate) mod deadlines;
pub(crate) mod engine;
pub mod fork;
pub(crate) mod held;
pub(crate) mod retry;
pub(crate) mod waiting;
