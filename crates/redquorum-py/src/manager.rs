//! The manager, as Python sees it: the library's `Redlock`, its settings taken by keyword, and
//! every acquisition in a blocking form and an awaitable one over the same future.
//!
//! The Python classes `redquorum.Redlock` (blocking) and `redquorum.asyncio.Redlock` (asyncio)
//! both wrap this one; only how they wait differs.

use std::sync::{Mutex, PoisonError};

use pyo3::prelude::*;
use redquorum::{Kind, Locked, Redlock, Request, Vouch};

use crate::errors::{self, Failed, OrRaise};
use crate::held::Held;
use crate::runtime::Owner;
use crate::settings::{RetrySettings, Servers, Settings, maybe_seconds, seconds, servers};
use crate::views::{Leader, NodeStatus, Watch};

/// The library's manager (`redquorum.Redlock` and `redquorum.asyncio.Redlock` wrap it).
///
/// A manager made before a fork works in the child (gunicorn `--preload`, Celery's prefork
/// pool, `multiprocessing`'s fork): the parent's engine, whose connections and tasks did not
/// survive the fork, is forgotten there (runtime invariant 2), and the child builds its own
/// from the same settings on first use. Locks are never shared: a parent's `Lock` handle stays
/// the parent's (`ProcessForked` in the child).
#[pyclass(module = "redquorum._redquorum", name = "Manager", frozen)]
pub(crate) struct Manager {
    /// What the manager is built from, to build it again in a forked child.
    recipe: (Servers, Settings),
    /// This process's engine and runtime.
    local: Mutex<Local>,
    retry: RetrySettings,
}

/// A manager's engine, with the process and runtime it belongs to.
struct Local {
    owner: Owner,
    redlock: Redlock,
}

impl Manager {
    /// This process's engine: the one built here, or in a forked child one built anew from
    /// the same settings on first use.
    fn here(&self) -> PyResult<(Owner, Redlock)> {
        let mut local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
        if !local.owner.is_here() {
            let (servers, settings) = &self.recipe;
            let (redlock, _) = settings.build(servers)?;
            let parents = std::mem::replace(
                &mut *local,
                Local {
                    owner: Owner::here()?,
                    redlock,
                },
            );
            // Runtime invariant 2: nothing of the parent's engine is dropped in a child.
            std::mem::forget(parents);
        }
        Ok((local.owner, local.redlock.clone()))
    }
}

impl Manager {
    /// What a call asks for, its TTL and retry policy, checked before anything is sent.
    #[allow(clippy::too_many_arguments)]
    fn request(
        &self,
        kind: &str,
        resources: Vec<String>,
        ttl: &Bound<'_, PyAny>,
        permits: Option<u32>,
        identity: Option<String>,
        blocking: bool,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<impl Future<Output = Result<Held, Failed>> + Send + 'static> {
        let ttl = seconds("ttl", ttl)?;
        let retry = self
            .retry
            .for_call(blocking, maybe_seconds("timeout", timeout)?);
        let kind =
            Kind::named(kind, permits, identity).map_err(|e| errors::from_error(e.into()))?;
        let request = Request::new(kind, resources, ttl).retry(retry);
        let (owner, redlock) = self.here()?;
        Ok(async move {
            let acquired = redlock.request(&request).await.map_err(Failed)?;
            Ok(Held::new(owner, acquired))
        })
    }
}

#[pymethods]
impl Manager {
    #[new]
    #[pyo3(signature = (
        servers_, *, node_timeout=None, connect_timeout=None, drift_factor=None,
        retry_attempts=None, retry_delay=None, retry_max_wait=None, max_ttl=None, lock_delay=None,
        quarantine=None, trust_durable_nodes=None, trust_first_sight=None, fencing=None, fence_retention=None,
        notify=None, fair=None, wait_for_replicas=None, tls_root_certificates=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        servers_: &Bound<'_, PyAny>,
        node_timeout: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        drift_factor: Option<f64>,
        retry_attempts: Option<u32>,
        retry_delay: Option<&Bound<'_, PyAny>>,
        retry_max_wait: Option<&Bound<'_, PyAny>>,
        max_ttl: Option<&Bound<'_, PyAny>>,
        lock_delay: Option<&Bound<'_, PyAny>>,
        quarantine: Option<bool>,
        trust_durable_nodes: Option<bool>,
        trust_first_sight: Option<bool>,
        fencing: Option<bool>,
        fence_retention: Option<&Bound<'_, PyAny>>,
        notify: Option<bool>,
        fair: Option<bool>,
        wait_for_replicas: Option<bool>,
        tls_root_certificates: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let servers: Servers = servers(servers_)?;
        let tls_root_certificates = match tls_root_certificates.filter(|v| !v.is_none()) {
            None => None,
            Some(pem) => Some(match pem.extract::<String>() {
                Ok(text) => text.into_bytes(),
                Err(_) => pem.extract::<Vec<u8>>().map_err(|_| {
                    errors::config("tls_root_certificates must be PEM text (str or bytes)")
                })?,
            }),
        };
        let settings = Settings {
            node_timeout: maybe_seconds("node_timeout", node_timeout)?,
            connect_timeout: maybe_seconds("connect_timeout", connect_timeout)?,
            drift_factor,
            retry_attempts,
            retry_delay: maybe_seconds("retry_delay", retry_delay)?,
            retry_max_wait: maybe_seconds("retry_max_wait", retry_max_wait)?,
            max_ttl: maybe_seconds("max_ttl", max_ttl)?,
            lock_delay: maybe_seconds("lock_delay", lock_delay)?,
            quarantine,
            trust_durable_nodes,
            trust_first_sight,
            fencing,
            fence_retention: maybe_seconds("fence_retention", fence_retention)?,
            notify,
            fair,
            wait_for_replicas,
            tls_root_certificates,
        };
        let (redlock, retry) = settings.build(&servers)?;
        Ok(Self {
            recipe: (servers, settings),
            local: Mutex::new(Local {
                owner: Owner::here()?,
                redlock,
            }),
            retry,
        })
    }

    /// The nodes' addresses, without credentials.
    #[getter]
    fn nodes(&self) -> PyResult<Vec<String>> {
        Ok(self.here()?.1.nodes())
    }

    /// How many nodes must grant a request.
    #[getter]
    fn quorum(&self) -> PyResult<usize> {
        Ok(self.here()?.1.quorum())
    }

    /// Acquires; blocks with the GIL released.
    #[pyo3(signature = (kind, resources, ttl, *, permits=None, identity=None, blocking=true, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire(
        &self,
        py: Python<'_>,
        kind: &str,
        resources: Vec<String>,
        ttl: &Bound<'_, PyAny>,
        permits: Option<u32>,
        identity: Option<String>,
        blocking: bool,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Held> {
        let future = self.request(kind, resources, ttl, permits, identity, blocking, timeout)?;
        let (owner, redlock) = self.here()?;
        let notice = || redlock.quarantine_notice(redquorum::Reader::Python);
        Ok(owner.wait_noticing(py, "Redlock.acquire", future, notice)??)
    }

    /// `acquire` as an awaitable.
    #[pyo3(signature = (kind, resources, ttl, *, permits=None, identity=None, blocking=true, timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn acquire_async<'py>(
        &self,
        py: Python<'py>,
        kind: &str,
        resources: Vec<String>,
        ttl: &Bound<'py, PyAny>,
        permits: Option<u32>,
        identity: Option<String>,
        blocking: bool,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let future = self.request(kind, resources, ttl, permits, identity, blocking, timeout)?;
        let (owner, _) = self.here()?;
        owner.awaitable(py, "Redlock.acquire", future)
    }

    /// Extends a lock known by its value.
    fn extend_value(
        &self,
        py: Python<'_>,
        resource: String,
        value: String,
        ttl: &Bound<'_, PyAny>,
    ) -> PyResult<f64> {
        let ttl = seconds("ttl", ttl)?;
        let (owner, redlock) = self.here()?;
        let left = owner.wait(py, "Redlock.extend_value", async move {
            redlock.extend_value(&resource, &value, ttl).await
        })?;
        let deadline = left.or_raise()?;
        Ok(deadline
            .saturating_duration_since(std::time::Instant::now())
            .as_secs_f64())
    }

    /// Releases a lock known by its value; returns how many nodes confirmed.
    fn release_value(&self, py: Python<'_>, resource: String, value: String) -> PyResult<usize> {
        let (owner, redlock) = self.here()?;
        let name = resource.clone();
        let released = owner.wait(py, "Redlock.release_value", async move {
            redlock.release_value(&resource, &value).await
        })?;
        errors::released(&name, &released)
    }

    /// Connects to every node; returns (node, reply) pairs.
    fn connect(&self, py: Python<'_>) -> PyResult<Vec<(String, String)>> {
        let (owner, redlock) = self.here()?;
        let replies = owner.wait(
            py,
            "Redlock.connect",
            async move { redlock.connect().await },
        )?;
        Ok(replies
            .into_iter()
            .map(|r| (r.node, r.reply.to_string()))
            .collect())
    }

    /// Waits for the requests still in flight in the background.
    fn settle(&self, py: Python<'_>) -> PyResult<()> {
        let (owner, redlock) = self.here()?;
        owner.wait(py, "Redlock.settle", async move { redlock.settle().await })
    }

    /// Vouches for nodes as an operator; returns (node, marked, what happened).
    #[pyo3(signature = (force=false, brand_new=false))]
    fn mark_nodes(
        &self,
        py: Python<'_>,
        force: bool,
        brand_new: bool,
    ) -> PyResult<Vec<(String, bool, String)>> {
        let vouch = match (force, brand_new) {
            (true, _) => Vouch::Forced,
            (false, true) => Vouch::BrandNew,
            (false, false) => Vouch::Checked,
        };
        let (owner, redlock) = self.here()?;
        let marks = owner.wait(py, "Redlock.mark_nodes", async move {
            redlock.mark_nodes(vouch).await
        })?;
        Ok(marks
            .into_iter()
            .map(|(node, mark)| (node, mark.is_marked(), mark.to_string()))
            .collect())
    }

    /// What to tell a caller that waits while nodes are quarantined, with the remedy in
    /// Python's words; None when no node is.
    fn quarantine_notice(&self) -> PyResult<Option<String>> {
        Ok(self.here()?.1.quarantine_notice(redquorum::Reader::Python))
    }

    /// The nodes in quarantine: (node, seconds left, why).
    fn quarantined_nodes(&self) -> PyResult<Vec<(String, f64, String)>> {
        Ok(self
            .here()?
            .1
            .quarantined_nodes()
            .into_iter()
            .map(|(node, q)| (node, q.left.as_secs_f64(), q.to_string()))
            .collect())
    }

    /// Who holds `resource`, node by node.
    fn status(&self, py: Python<'_>, resource: String) -> PyResult<Vec<NodeStatus>> {
        let (owner, redlock) = self.here()?;
        let statuses = owner.wait(py, "Redlock.status", async move {
            redlock.status(&resource).await
        })?;
        Ok(statuses.into_iter().map(NodeStatus::from).collect())
    }

    /// Whether `resource` is held by a quorum now: the seconds it stays held at least, or None
    /// when free; `Unavailable` when too few nodes answered to tell.
    fn locked(&self, py: Python<'_>, resource: String) -> PyResult<Option<f64>> {
        let (owner, redlock) = self.here()?;
        let name = resource.clone();
        let locked = owner.wait(py, "Redlock.locked", async move {
            redlock.locked(&resource).await
        })?;
        locked_answer(&name, &locked)
    }

    /// `locked` as an awaitable.
    fn locked_async<'py>(&self, py: Python<'py>, resource: String) -> PyResult<Bound<'py, PyAny>> {
        let (owner, redlock) = self.here()?;
        owner.awaitable(py, "Redlock.locked", async move {
            let locked = redlock.locked(&resource).await;
            locked_answer(&resource, &locked)
        })
    }

    /// `status` as an awaitable.
    fn status_async<'py>(&self, py: Python<'py>, resource: String) -> PyResult<Bound<'py, PyAny>> {
        let (owner, redlock) = self.here()?;
        owner.awaitable(py, "Redlock.status", async move {
            let statuses = redlock.status(&resource).await;
            PyResult::Ok(
                statuses
                    .into_iter()
                    .map(NodeStatus::from)
                    .collect::<Vec<_>>(),
            )
        })
    }

    /// The leader of `election`, as a majority reports it.
    fn leader(&self, py: Python<'_>, election: String) -> PyResult<Option<Leader>> {
        let (owner, redlock) = self.here()?;
        let leader = owner.wait(py, "Redlock.leader", async move {
            redlock.leader(&election).await
        })?;
        Ok(leader.map(Leader::from))
    }

    /// `leader` as an awaitable.
    fn leader_async<'py>(&self, py: Python<'py>, election: String) -> PyResult<Bound<'py, PyAny>> {
        let (owner, redlock) = self.here()?;
        owner.awaitable(py, "Redlock.leader", async move {
            PyResult::Ok(redlock.leader(&election).await.map(Leader::from))
        })
    }

    /// A watch of `election`'s leader.
    fn observe(&self, election: String) -> PyResult<Watch> {
        let (owner, redlock) = self.here()?;
        owner.runtime("Redlock.observe")?;
        Ok(Watch::new(owner, redlock.observe(&election)))
    }

    fn __repr__(&self) -> String {
        let local = self.local.lock().unwrap_or_else(PoisonError::into_inner);
        format!(
            "Redlock(nodes={:?}, quorum={})",
            local.redlock.nodes(),
            local.redlock.quorum()
        )
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let local = self.local.get_mut().unwrap_or_else(PoisonError::into_inner);
        if !local.owner.is_here() {
            // Runtime invariant 2: the engine's last reference is never dropped in a child.
            std::mem::forget(local.redlock.clone());
        }
    }
}

/// `locked`'s answer for Python: seconds held, None when free, `Unavailable` when unknown.
fn locked_answer(resource: &str, locked: &Locked) -> PyResult<Option<f64>> {
    match locked {
        Locked::Held { remaining, .. } | Locked::Readers { remaining } => {
            Ok(Some(remaining.as_secs_f64()))
        }
        Locked::Unknown { answered, quorum } => Err(errors::raise(
            "Unavailable",
            &format!(
                "cannot tell whether {resource:?} is locked: too few nodes answered \
                 ({answered} answered, {quorum} needed)"
            ),
            &[],
        )),
        _ => Ok(None),
    }
}
