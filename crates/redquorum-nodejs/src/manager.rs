//! The manager, as JavaScript sees it: the library's `Redlock` and every acquisition, each a
//! promise of the runtime, cancellable through a [`Canceller`] (what `settings.signal` aborts).

use std::sync::{Mutex, PoisonError};

use napi::Env;
use napi::bindgen_prelude::{Either, Object};
use napi_derive::napi;
use redquorum::{Acquired, Kind, Redlock, Vouch};
use tokio_util::sync::CancellationToken;

use crate::errors::{Failure, Outcome, invalid};
use crate::held::Held;
use crate::runtime::promise;
use crate::settings::{ManagerSettings, RetrySettings, millis};
use crate::views::{self, NodeMark, NodeStatus, Watch};

/// Cancels the acquisitions it is given to: `index.js` calls `cancel()` when `settings.signal`
/// aborts. A cancelled acquisition's future is dropped, which is the library's cancel safety:
/// whatever it had taken is released in the background.
#[napi]
#[derive(Debug, Default)]
pub struct Canceller {
    token: CancellationToken,
}

#[napi]
impl Canceller {
    /// A canceller not yet cancelled.
    #[napi(constructor)]
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels every acquisition given this canceller, now and later.
    #[napi]
    pub fn cancel(&self) {
        self.token.cancel();
    }
}

/// What `acquire` asks for, besides the resources and the TTL.
#[napi(object)]
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `lock` (default), `read`, `write` or `campaign`.
    pub kind: Option<String>,
    /// A semaphore: how many holders at most.
    pub permits: Option<u32>,
    /// An election's candidate identity.
    pub identity: Option<String>,
    /// `using()`: keep the lock alive from the start.
    pub keep_alive: Option<bool>,
}

/// The library's manager (`index.js`'s `Redlock` wraps it).
#[napi]
#[derive(Debug)]
pub struct Manager {
    /// `None` once `quit()` closed it.
    redlock: Mutex<Option<Redlock>>,
    retry: RetrySettings,
}

impl Manager {
    fn redlock(&self) -> napi::Result<Redlock> {
        self.redlock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| invalid("this Redlock was closed by quit()"))
    }
}

#[napi]
impl Manager {
    /// A manager of `servers` (URLs), with node-redlock's settings and ours.
    #[napi(constructor)]
    pub fn new(
        servers: Vec<String>,
        settings: Option<ManagerSettings>,
        retry: Option<RetrySettings>,
    ) -> napi::Result<Self> {
        let retry = retry.unwrap_or_default();
        let _checked = retry.retry()?; // checked now, as node-redlock's constructor would
        let redlock = settings.unwrap_or_default().build(servers)?;
        Ok(Self {
            redlock: Mutex::new(Some(redlock)),
            retry,
        })
    }

    /// The nodes' addresses, without credentials.
    #[napi(getter)]
    pub fn nodes(&self) -> napi::Result<Vec<String>> {
        Ok(self.redlock()?.nodes())
    }

    /// How many nodes must grant a request.
    #[napi(getter)]
    pub fn quorum(&self) -> napi::Result<u32> {
        Ok(u32::try_from(self.redlock()?.quorum()).unwrap_or(u32::MAX))
    }

    /// Acquires: resolves with a `Held` or a `Failure` (`kind: "aborted"` when cancelled).
    #[napi(ts_return_type = "Promise<Held | Failure>")]
    pub fn acquire<'env>(
        &self,
        env: &'env Env,
        resources: Vec<String>,
        ttl: f64,
        request: Option<Request>,
        retry: Option<RetrySettings>,
        canceller: Option<&Canceller>,
    ) -> napi::Result<Object<'env>> {
        let ttl = millis("duration", ttl)?;
        crate::exit::watch(env)?;
        let request = request.unwrap_or_default();
        let settings = self.retry.with(retry.as_ref());
        let retry = settings.retry()?;
        let kind = request.kind.as_deref().unwrap_or("lock");
        let kind = Kind::named(kind, request.permits, request.identity)
            .map_err(|e| invalid(e.to_string()))?;
        let wanted = redquorum::Request::new(kind, resources, ttl).retry(retry);
        let keep_alive = request.keep_alive.unwrap_or(false);
        let redlock = self.redlock()?;
        let cancelled = canceller.map(|c| c.token.clone());
        let acquisition = move || async move {
            // Without a canceller, nothing to race against (and no `select!` to draw for).
            let acquired = match cancelled {
                Some(cancelled) => tokio::select! {
                    acquired = redlock.request(&wanted) => acquired,
                    () = cancelled.cancelled() => {
                        return Either::B(Failure::aborted());
                    }
                },
                None => redlock.request(&wanted).await,
            };
            let acquired = match acquired {
                Ok(Acquired::Lock(lock)) if keep_alive => {
                    let options = match settings.hold(lock.remaining()) {
                        Ok(options) => options,
                        Err(e) => return Either::B(Failure::config(&e.reason)),
                    };
                    Acquired::KeptAlive(lock.keep_alive_with(ttl, options))
                }
                Ok(acquired) => acquired,
                Err(e) => return Either::B(Failure::from(e)),
            };
            // The handle is made here, on the runtime's thread: the event loop's only wraps it.
            Either::A(Held::new(acquired))
        };
        promise(env, acquisition, |outcome: Outcome<Held>| outcome)
    }

    /// Who holds `resource`, node by node.
    #[napi(ts_return_type = "Promise<NodeStatus[]>")]
    pub fn status<'env>(&self, env: &'env Env, resource: String) -> napi::Result<Object<'env>> {
        let redlock = self.redlock()?;
        promise(
            env,
            move || async move { redlock.status(&resource).await },
            |statuses| {
                statuses
                    .into_iter()
                    .map(NodeStatus::from)
                    .collect::<Vec<_>>()
            },
        )
    }

    /// Whether a quorum holds `resource` now: its holder, null when free, a `Failure` when too
    /// few nodes answered to tell.
    #[napi(ts_return_type = "Promise<Holder | null | Failure>")]
    pub fn locked<'env>(&self, env: &'env Env, resource: String) -> napi::Result<Object<'env>> {
        let redlock = self.redlock()?;
        promise(
            env,
            move || async move {
                let locked = redlock.locked(&resource).await;
                views::holder(&resource, locked)
            },
            |answer| answer,
        )
    }

    /// The leader of `election`, as a majority reports it; null when nobody leads.
    #[napi(ts_return_type = "Promise<Leader | null>")]
    pub fn leader<'env>(&self, env: &'env Env, election: String) -> napi::Result<Object<'env>> {
        let redlock = self.redlock()?;
        promise(
            env,
            move || async move { redlock.leader(&election).await },
            |leader| leader.map(views::Leader::from),
        )
    }

    /// A watch of `election`'s leader.
    #[napi]
    pub fn observe(&self, election: String) -> napi::Result<Watch> {
        let redlock = self.redlock()?;
        let watch = crate::runtime::enter(|| redlock.observe(&election))?;
        Ok(Watch::new(watch))
    }

    /// Vouches for the nodes as an operator (they lost nothing), ending their quarantine.
    #[napi(ts_return_type = "Promise<NodeMark[]>")]
    pub fn mark_nodes<'env>(
        &self,
        env: &'env Env,
        force: bool,
        brand_new: bool,
    ) -> napi::Result<Object<'env>> {
        let vouch = match (force, brand_new) {
            (true, _) => Vouch::Forced,
            (false, true) => Vouch::BrandNew,
            (false, false) => Vouch::Checked,
        };
        let redlock = self.redlock()?;
        promise(
            env,
            move || async move { redlock.mark_nodes(vouch).await },
            |marks| {
                marks
                    .into_iter()
                    .map(|(node, mark)| NodeMark {
                        node,
                        marked: mark.is_marked(),
                        detail: mark.to_string(),
                    })
                    .collect::<Vec<_>>()
            },
        )
    }

    /// What to tell a caller that waits while nodes are quarantined, with the remedy in
    /// JavaScript's words; null when no node is.
    #[napi]
    pub fn quarantine_notice(&self) -> napi::Result<Option<String>> {
        Ok(self.redlock()?.quarantine_notice(redquorum::Reader::Node))
    }

    /// The nodes in quarantine now.
    #[napi]
    pub fn quarantined_nodes(&self) -> napi::Result<Vec<String>> {
        Ok(self
            .redlock()?
            .quarantined_nodes()
            .into_iter()
            .map(|(node, q)| format!("{node}: {q}"))
            .collect())
    }

    /// Closes the manager: waits for the requests still in flight, then lets its connections
    /// go once no lock of it is held any more.
    #[napi(ts_return_type = "Promise<void>")]
    pub fn quit<'env>(&self, env: &'env Env) -> napi::Result<Object<'env>> {
        let taken = self
            .redlock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        promise(
            env,
            move || async move {
                if let Some(redlock) = taken {
                    redlock.settle().await;
                }
            },
            |()| (),
        )
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        let taken = self
            .redlock
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        // Its connections' tasks are the runtime's (runtime invariant 1).
        let _ = crate::runtime::enter(|| drop(taken));
    }
}
