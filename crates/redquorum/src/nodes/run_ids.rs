//! The manager's record of its servers' `run_id`s, shared by the health checks of all its nodes:
//! the state behind [`aliases`](crate::protocol::aliases) invariant 1, whose rule ([`Claims`])
//! is pure.

use std::sync::Mutex;

use crate::base::sync::lock;
use crate::protocol::aliases::{Claimant, Claims};

/// The `run_id` each claimant of one manager last showed, shared by every node's health checks.
#[derive(Debug, Default)]
pub(crate) struct RunIds(Mutex<Claims>);

impl RunIds {
    /// Records that `claimant` answers as `run_id`; the name of the claimant of another node
    /// that claimed the same server first, if one did ([`Claims::claim`]).
    pub(crate) fn claim(&self, claimant: &Claimant, run_id: &str) -> Result<(), String> {
        lock(&self.0).claim(claimant, run_id)
    }
}
