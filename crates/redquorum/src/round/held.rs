//! What an acquisition holds before and after it is won: its resources and a value that may be
//! set on some nodes, and the promise to release them. An acquisition in progress holds one; the
//! [`Lock`](crate::Lock) it becomes keeps it (`handles/lock.rs`'s invariant 2 is kept here).
//!
//! # Invariants
//! 1. A `Held` that is dropped armed starts a best-effort release on every node, in the
//!    background, on the current Tokio runtime. `Drop` never blocks, never awaits, and never
//!    panics: outside a runtime it only logs, and the keys expire with their TTL.
//! 2. A release follows the acquisition's requests still in flight (engine invariant 2), and a
//!    lost lock's release keeps the keys for the lock-delay instead (engine invariant 5).

use std::sync::{Arc, PoisonError};
use std::time::Instant;

use crate::base::queue::WaiterId;
use crate::base::resources::Resources;
use crate::nodes::stragglers::LeftBehind;
use crate::round::engine::{Deadline, Engine, Released, Until};

/// Resources and a value that may be set on some nodes, released on drop unless disarmed
/// (invariant 1). Shared by an acquisition in progress and the [`Lock`] it becomes.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) shared: Arc<Engine>,
    pub(crate) resources: Resources,
    pub(crate) value: Arc<str>,
    /// The acquisition's place in the fair queue, given up by the release
    /// ([`waiting`](crate::round::waiting) invariant 4).
    pub(crate) queued: Option<WaiterId>,
    /// The acquisition's requests still in flight; a release follows them (engine invariant 2).
    pub(crate) stragglers: Option<LeftBehind>,
    /// Once a lock: until when it may be relied on, and whether it was lost before that. A
    /// release after either keeps the keys for the lock-delay instead (engine invariant 5).
    pub(crate) valid_until: Option<Instant>,
    pub(crate) lost: bool,
    pub(crate) armed: bool,
}

impl Held {
    pub(crate) fn new(
        shared: Arc<Engine>,
        resources: Resources,
        value: Arc<str>,
        queued: Option<WaiterId>,
    ) -> Self {
        Self {
            shared,
            resources,
            value,
            queued,
            stragglers: None,
            valid_until: None,
            lost: false,
            armed: true,
        }
    }

    /// Whether the lock this became was lost (its validity ran out, or it was given up).
    pub(crate) fn is_lost(&self) -> bool {
        self.lost
            || self
                .valid_until
                .is_some_and(|until| Instant::now() >= until)
    }

    /// Whether releasing now keeps the keys for the lock-delay (engine invariant 5).
    pub(crate) fn lingers(&self) -> bool {
        self.shared.rules.lock_delay_ms > 0 && self.is_lost()
    }

    /// Makes the release follow `stragglers`, the requests of the acquisition still in flight.
    pub(crate) fn follows(&mut self, stragglers: Option<LeftBehind>) {
        if stragglers.is_some() {
            self.stragglers = stragglers;
        }
    }

    pub(crate) fn value(&self) -> &Arc<str> {
        &self.value
    }

    /// Releases on every node and waits for the replies, giving up the queue place. Stays armed
    /// until the replies are in, so dropping this future half-way still releases in the
    /// background.
    pub(crate) async fn release(self) -> Released {
        if self.lingers() {
            return self.release_lost().await;
        }
        let leave = self.queued;
        self.release_leaving(leave, Until::Decided).await
    }

    /// The last rollback of an acquisition that gives up: its outcome only explains refusals,
    /// so it waits no longer than the node timeout (engine invariant 7 is for releases).
    pub(crate) async fn give_up(self) -> Released {
        let leave = self.queued;
        self.release_leaving(leave, Until::AllReplied).await
    }

    /// Rolls back a failed round: releases, but keeps the queue place for the next attempt
    /// ([`waiting`](crate::round::waiting) invariant 3).
    pub(crate) async fn roll_back(self) -> Released {
        self.release_leaving(None, Until::AllReplied).await
    }

    /// Forgets the value without releasing it: for a round that every node refused, so that it
    /// is set nowhere (a refusal is an answer: the node did not set our fresh value).
    pub(crate) fn set_nowhere(self) {
        debug_assert!(self.stragglers.is_none(), "every node answered");
        self.disarm();
    }

    /// Drops the promise to release: somebody else keeps it, or there is nothing to release.
    pub(crate) fn disarm(mut self) {
        self.armed = false;
    }

    /// Drops the promise to release, but lets the acquisition's requests still in flight land:
    /// those queued on their connections are handed to the runtime's driver, which polls them to
    /// their reply (dropped unpolled, redis-rs would skip them; `server` invariant 5).
    pub(crate) fn detach(mut self) {
        if let Some(LeftBehind::Queued(requests)) = self.stragglers.take() {
            let requests = requests
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner);
            let deadline = Instant::now() + self.shared.rules.node_timeout;
            let token = self.shared.background.token();
            drop(self.shared.stragglers.hand_off(requests, deadline, token));
        }
        self.armed = false;
    }

    /// The release of a lock that was lost, with a lock-delay: the keys are kept for the delay
    /// instead of deleted (engine invariant 5).
    pub(crate) async fn release_lost(mut self) -> Released {
        let ahead = match self.stragglers.take() {
            Some(stragglers) => stragglers.before_release().await,
            None => None,
        };
        let released = self.shared.linger(&self.resources, &self.value).await;
        drop(ahead);
        self.armed = false;
        released
    }

    async fn release_leaving(mut self, leave: Option<WaiterId>, until: Until) -> Released {
        // Taken, not borrowed: if this future is dropped while waiting, `Drop` must not await
        // the same signal again (a finished oneshot receiver panics when polled twice).
        let stragglers = self.stragglers.take();
        let released = release_after(
            &self.shared,
            &self.resources,
            &self.value,
            leave,
            stragglers,
            until,
        )
        .await;
        self.armed = false;
        released
    }
}

/// Releases `value` behind the acquisition's `stragglers` (engine invariant 2): waits for those
/// still driven (bounded by the node timeout), and keeps the queued ones until the release is
/// queued behind them.
async fn release_after(
    shared: &Arc<Engine>,
    resources: &Resources,
    value: &Arc<str>,
    leave: Option<WaiterId>,
    stragglers: Option<LeftBehind>,
    until: Until,
) -> Released {
    let ahead = match stragglers {
        Some(stragglers) => stragglers.before_release().await,
        None => None,
    };
    let released = shared
        .release(resources, value, leave, Deadline::Known, until)
        .await;
    drop(ahead);
    released
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let shared = Arc::clone(&self.shared);
                let resources = self.resources.clone();
                let value = Arc::clone(&self.value);
                let leave = self.queued;
                let stragglers = self.stragglers.take();
                let lingers = self.lingers();
                self.shared.background.spawn_on(
                    async move {
                        if lingers {
                            let ahead = match stragglers {
                                Some(stragglers) => stragglers.before_release().await,
                                None => None,
                            };
                            shared.linger(&resources, &value).await;
                            drop(ahead);
                        } else {
                            let until = Until::Decided; // a dropped lock's: a release
                            release_after(&shared, &resources, &value, leave, stragglers, until)
                                .await;
                        }
                    },
                    &runtime,
                );
            }
            Err(_) => tracing::warn!(
                resource = %self.resources,
                "lock dropped outside a Tokio runtime; it will expire with its TTL"
            ),
        }
    }
}
