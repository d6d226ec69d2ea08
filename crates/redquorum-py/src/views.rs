//! Read-only answers as small Python objects: who leads an election, what each node holds for
//! a resource, and a watch that reports each change of leader.

use std::sync::Arc;

use pyo3::prelude::*;
use redquorum::LeaderWatch;

use crate::runtime::Owner;

/// The leader of an election, as a majority of nodes report it.
#[pyclass(module = "redquorum._redquorum", frozen, get_all, skip_from_py_object)]
#[derive(Debug, Clone)]
pub(crate) struct Leader {
    /// The identity the leader campaigned with.
    identity: String,
    /// The leader's lock value.
    value: String,
    /// The leader's term (its fencing token), when a majority agrees on it.
    term: Option<u64>,
    /// Seconds left on the leader's key, the shortest among the majority.
    ttl: f64,
}

impl From<redquorum::Leader> for Leader {
    fn from(l: redquorum::Leader) -> Self {
        Self {
            identity: l.identity,
            value: l.value,
            term: l.term,
            ttl: l.ttl.as_secs_f64(),
        }
    }
}

#[pymethods]
impl Leader {
    fn __repr__(&self) -> String {
        format!(
            "Leader(identity={:?}, term={}, ttl={:.3})",
            self.identity,
            self.term
                .map_or_else(|| "None".to_owned(), |t| t.to_string()),
            self.ttl
        )
    }
}

/// What one node holds for a resource.
#[pyclass(module = "redquorum._redquorum", frozen, get_all, skip_from_py_object)]
#[derive(Debug, Clone)]
pub(crate) struct NodeStatus {
    /// The node's address, without credentials.
    node: String,
    /// `free`, `held`, `readers`, `other_type` or `unavailable`.
    state: String,
    /// The lock value, when held.
    value: Option<String>,
    /// Seconds left on the key, when it has an expiry.
    ttl: Option<f64>,
    /// Readers of a read-write lock.
    readers: Option<u64>,
    /// Why the node could not be asked, or the Redis type of a key that is not a lock.
    detail: Option<String>,
    /// The node's quarantine, if it is quarantined.
    quarantine: Option<String>,
    /// Whether the node may evict keys (lock nodes need `noeviction`).
    may_evict: bool,
}

impl From<redquorum::NodeStatus> for NodeStatus {
    fn from(s: redquorum::NodeStatus) -> Self {
        Self {
            state: s.state.name().to_owned(),
            value: s.state.value().map(str::to_owned),
            ttl: s.state.ttl().map(|d| d.as_secs_f64()),
            readers: s.state.readers(),
            detail: s.state.detail(),
            node: s.node,
            quarantine: s.quarantine.map(|q| q.to_string()),
            may_evict: s.may_evict,
        }
    }
}

#[pymethods]
impl NodeStatus {
    fn __repr__(&self) -> String {
        format!("NodeStatus(node={:?}, state={:?})", self.node, self.state)
    }
}

/// Reports each change of an election's leader.
#[pyclass(module = "redquorum._redquorum", frozen)]
pub(crate) struct Watch {
    owner: Owner,
    watch: Arc<tokio::sync::Mutex<LeaderWatch>>,
}

impl Watch {
    pub(crate) fn new(owner: Owner, watch: LeaderWatch) -> Self {
        Self {
            owner,
            watch: Arc::new(tokio::sync::Mutex::new(watch)),
        }
    }
}

#[pymethods]
impl Watch {
    /// Blocks until the leader changes (at once the first time); `None`: nobody leads.
    fn changed(&self, py: Python<'_>) -> PyResult<Option<Leader>> {
        let watch = Arc::clone(&self.watch);
        let leader = self.owner.wait(py, "Watch.changed", async move {
            watch.lock().await.changed().await
        })?;
        Ok(leader.map(Leader::from))
    }

    /// `changed` as an awaitable.
    fn changed_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let watch = Arc::clone(&self.watch);
        self.owner.awaitable(py, "Watch.changed", async move {
            PyResult::Ok(watch.lock().await.changed().await.map(Leader::from))
        })
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if !self.owner.is_here() {
            std::mem::forget(Arc::clone(&self.watch)); // runtime invariant 2
        }
    }
}
