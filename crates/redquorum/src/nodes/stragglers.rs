//! The requests a won round leaves behind ("stragglers"), and how they still land.
//!
//! A won round returns at once (engine invariant 2), but the nodes that had not answered yet
//! must still get their request: a late `OK` becomes part of the lock, and `Redlock::settle`
//! waits for it. The common case costs nothing: every straggler is already queued on its node's
//! connection, which runs it before anything queued later ([`server`](crate::nodes::server)
//! invariant 5). The lock just keeps those requests, unpolled ([`LeftBehind::Queued`]), until its
//! release is queued behind them; no task drives them and the release does not wait (driving them
//! all cost 4–12 µs of client CPU per cycle at N = 5: `docs/performance.md`'s *Hand-made parts*).
//!
//! Requests that were still waiting for a connection (a node's first request, or one after a
//! reconnection) are not queued anywhere yet, and a release must not overtake them
//! ([`LeftBehind::Driven`]). They go to one long-lived task per runtime, the [`Driver`], as a
//! [`Batch`]: it polls only the batches whose requests woke it, enforces all their deadlines
//! with a single timer, and batches the wake-ups of many rounds into one poll. What the lock's
//! release waits for is [`Finished`], the closing of a oneshot channel whose sender the batch
//! holds. Rounds that set no lock key (fencing, extension) send all their stragglers there.
//!
//! # Invariants
//! 1. A batch is dropped, which closes its [`Finished`], only once each of its requests has
//!    finished or its round's node deadline has passed, or when its runtime shuts down. Requests
//!    dropped unfinished are cancelled: one that was never queued on its connection is never
//!    sent, so it cannot overtake a later release either.
//! 2. A batch is driven on the runtime of the round that made it, by that runtime's driver. A
//!    driver on another runtime might never run again (a `block_on` that has returned), and a
//!    release waiting for the batch would wait with it.
//! 3. A driver never keeps its manager alive: the manager holds the only senders of the drivers'
//!    inboxes, and a driver ends once its inbox is closed and its last batch dropped. (A batch's
//!    requests hold the manager, but only until their deadline, invariant 1.)
//! 4. Each batch holds a token of the manager's task tracker until it is dropped, so `settle`
//!    waits for it like for any other background work.

use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::Instant;
use std::{fmt, future::Future, pin::Pin};

use futures_util::FutureExt;
use tokio::runtime::{self, Handle};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Sleep;
use tokio_util::task::task_tracker::TaskTrackerToken;

use crate::base::sync::lock;

/// The requests of a won round still on their way, each recording its own reply.
pub(crate) type Requests = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The drivers of one manager, one per runtime it has run a round on (invariant 2).
pub(crate) struct Stragglers {
    inboxes: Mutex<Vec<Inbox>>,
}

struct Inbox {
    runtime: runtime::Id,
    sender: mpsc::UnboundedSender<Batch>,
}

impl fmt::Debug for Stragglers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stragglers")
            .field("drivers", &lock(&self.inboxes).len())
            .finish()
    }
}

impl Stragglers {
    pub(crate) fn new() -> Self {
        Self {
            inboxes: Mutex::new(Vec::new()),
        }
    }

    /// Hands `requests`, those of a won round still on their way, to the current runtime's
    /// driver, which finishes them by `deadline` (invariant 1); `settle` waits for them while
    /// `token` lives (invariant 4). Outside a Tokio runtime they are cancelled.
    pub(crate) fn hand_off(
        &self,
        requests: Requests,
        deadline: Instant,
        token: TaskTrackerToken,
    ) -> Finished {
        let (done, finished) = oneshot::channel();
        let mut batch = Batch {
            requests,
            deadline,
            _done: done,
            _token: token,
        };
        let Ok(runtime) = Handle::try_current() else {
            return Finished(finished);
        };
        let id = runtime.id(); // invariant 2
        let mut inboxes = lock(&self.inboxes);
        if let Some(inbox) = inboxes.iter().find(|inbox| inbox.runtime == id) {
            match inbox.sender.send(batch) {
                Ok(()) => return Finished(finished),
                // That driver went down with an earlier runtime whose id this one reuses.
                Err(mpsc::error::SendError(returned)) => batch = returned,
            }
        }
        inboxes.retain(|inbox| !inbox.sender.is_closed());
        let (sender, receiver) = mpsc::unbounded_channel();
        // Cannot fail: the receiver is right here. Dropping the batch would only cancel it.
        let _ = sender.send(batch);
        runtime.spawn(Driver::new(receiver));
        inboxes.push(Inbox {
            runtime: id,
            sender,
        });
        Finished(finished)
    }
}

/// The requests a won round left behind, as the lock's release must treat them.
pub(crate) enum LeftBehind {
    /// Every one is queued on its node's connection, so a release queued later runs after it
    /// ([`server`](crate::nodes::server) invariant 5). Kept, unpolled, until that release is
    /// queued: redis-rs skips a queued command whose reply nobody waits for any more, and the late
    /// `SET` would not land. No task has to drive them, and the release does not wait for them.
    /// (The `Mutex` is never locked, only reached through `&mut`: it makes the lock `Sync`.)
    Queued(Mutex<Requests>),
    /// Some were still waiting for a connection: the runtime's driver finishes them, and the
    /// release waits for that first.
    Driven(Finished),
}

impl fmt::Debug for LeftBehind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Queued(_) => "Queued",
            Self::Driven(_) => "Driven",
        })
    }
}

impl LeftBehind {
    /// Waits until a release may be queued; what it returns must be kept until then.
    pub(crate) async fn before_release(self) -> Option<Requests> {
        match self {
            Self::Queued(requests) => {
                let mut requests = requests
                    .into_inner()
                    .unwrap_or_else(PoisonError::into_inner);
                // One more poll queues a request that was still waiting for room on its
                // connection (redis-rs's queue was full), ahead of the release.
                let _ = (&mut requests).now_or_never();
                Some(requests)
            }
            Self::Driven(finished) => {
                finished.wait().await;
                None
            }
        }
    }
}

/// Closed once a round's stragglers are all done (invariant 1). What a release waits for.
#[derive(Debug)]
pub(crate) struct Finished(oneshot::Receiver<()>);

impl Finished {
    /// Waits until the batch is dropped; bounded by its round's node deadline.
    pub(crate) async fn wait(self) {
        // The sender is never used, only dropped: an error is the signal.
        let _ = self.0.await;
    }
}

/// The stragglers of one round.
struct Batch {
    requests: Requests,
    deadline: Instant,
    /// Dropped with the batch: that closes its [`Finished`].
    _done: oneshot::Sender<()>,
    _token: TaskTrackerToken,
}

/// The batches whose requests woke the driver since it last looked, and the driver's waker.
#[derive(Default)]
struct Woken {
    state: Mutex<WokenState>,
}

#[derive(Default)]
struct WokenState {
    slots: Vec<usize>,
    /// Set only while the driver waits with nothing left to poll, so that a burst of replies
    /// wakes its task once.
    driver: Option<Waker>,
}

/// The waker a batch's requests get: it names the batch's slot.
struct SlotWaker {
    slot: usize,
    woken: Arc<Woken>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let driver = {
            let mut state = lock(&self.woken.state);
            state.slots.push(self.slot);
            state.driver.take()
        };
        if let Some(driver) = driver {
            driver.wake();
        }
    }
}

/// The task that drives a runtime's stragglers, for every round of one manager.
///
/// Batches live in slots, each with a waker of its own, so a reply polls only its own batch;
/// a slot is reused once its batch is dropped (a late wake-up of the old batch then polls the
/// new one once, which is harmless).
struct Driver {
    inbox: mpsc::UnboundedReceiver<Batch>,
    closed: bool,
    slots: Vec<Option<Batch>>,
    free: Vec<usize>,
    wakers: Vec<Waker>,
    woken: Arc<Woken>,
    /// The woken slots being polled; kept to reuse its allocation.
    polling: Vec<usize>,
    /// Fires at the earliest deadline of the batches it was set for; `None` when there are none.
    timer: Option<Pin<Box<Sleep>>>,
}

impl Driver {
    fn new(inbox: mpsc::UnboundedReceiver<Batch>) -> Self {
        Self {
            inbox,
            closed: false,
            slots: Vec::new(),
            free: Vec::new(),
            wakers: Vec::new(),
            woken: Arc::default(),
            polling: Vec::new(),
            timer: None,
        }
    }

    fn admit(&mut self, batch: Batch) {
        let slot = self.free.pop().unwrap_or_else(|| {
            let slot = self.slots.len();
            self.slots.push(None);
            self.wakers.push(Waker::from(Arc::new(SlotWaker {
                slot,
                woken: Arc::clone(&self.woken),
            })));
            slot
        });
        let deadline = tokio::time::Instant::from_std(batch.deadline);
        match &mut self.timer {
            Some(timer) if timer.deadline() <= deadline => {}
            Some(timer) => timer.as_mut().reset(deadline),
            None => self.timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
        }
        self.slots[slot] = Some(batch);
        // The first poll registers the slot's waker with every request.
        self.poll_slot(slot);
    }

    fn poll_slot(&mut self, slot: usize) {
        let (Some(entry), Some(waker)) = (self.slots.get_mut(slot), self.wakers.get(slot)) else {
            return;
        };
        let Some(batch) = entry else {
            return; // a late wake-up of a batch already dropped
        };
        if batch
            .requests
            .as_mut()
            .poll(&mut Context::from_waker(waker))
            .is_ready()
        {
            *entry = None;
            self.free.push(slot);
        }
    }

    /// Drops the batches whose deadline has passed (invariant 1) and sets the timer for the
    /// earliest one left.
    fn expire(&mut self, cx: &mut Context<'_>) {
        while let Some(timer) = &mut self.timer {
            if timer.as_mut().poll(cx).is_pending() {
                return;
            }
            let now = Instant::now();
            let mut next = None;
            for (slot, entry) in self.slots.iter_mut().enumerate() {
                match entry {
                    Some(batch) if batch.deadline <= now => {
                        *entry = None;
                        self.free.push(slot);
                    }
                    Some(batch) => {
                        next = Some(next.map_or(batch.deadline, |n: Instant| n.min(batch.deadline)))
                    }
                    None => {}
                }
            }
            match next {
                Some(next) => timer.as_mut().reset(next.into()),
                None => self.timer = None,
            }
        }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        while !this.closed {
            match this.inbox.poll_recv(cx) {
                Poll::Ready(Some(batch)) => this.admit(batch),
                Poll::Ready(None) => this.closed = true,
                Poll::Pending => break,
            }
        }
        loop {
            {
                let mut state = lock(&this.woken.state);
                if state.slots.is_empty() {
                    // Nothing left to poll: wake the task on the next reply.
                    if !state
                        .driver
                        .as_ref()
                        .is_some_and(|w| w.will_wake(cx.waker()))
                    {
                        state.driver = Some(cx.waker().clone());
                    }
                    break;
                }
                std::mem::swap(&mut state.slots, &mut this.polling);
            }
            let mut polling = std::mem::take(&mut this.polling);
            for slot in polling.drain(..) {
                this.poll_slot(slot);
            }
            this.polling = polling;
        }
        this.expire(cx);
        if this.closed && this.free.len() == this.slots.len() {
            return Poll::Ready(()); // invariant 3
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use tokio_util::task::TaskTracker;

    use super::*;

    /// Requests that finish when `gate` fires (or never, if it is dropped), noting in `dropped`
    /// when they are dropped.
    fn gated(gate: oneshot::Receiver<()>, dropped: Arc<AtomicBool>) -> Requests {
        struct OnDrop(Arc<AtomicBool>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        // Made before the future, so that dropping it unpolled (a driver that never got to it)
        // also counts as cancelling it.
        let on_drop = OnDrop(dropped);
        Box::pin(async move {
            let _on_drop = on_drop;
            if gate.await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }

    const LONG: Duration = Duration::from_secs(60);
    const BOUND: Duration = Duration::from_secs(10);

    #[tokio::test]
    async fn a_batch_is_finished_once_its_requests_are() {
        let (stragglers, tracker) = (Stragglers::new(), TaskTracker::new());
        let (gate, gated_on) = oneshot::channel();
        let dropped = Arc::new(AtomicBool::new(false));
        let finished = stragglers.hand_off(
            gated(gated_on, Arc::clone(&dropped)),
            Instant::now() + LONG,
            tracker.token(),
        );
        let mut wait = std::pin::pin!(finished.wait());
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            futures_util::poll!(wait.as_mut()).is_pending(),
            "not finished while the request is on its way"
        );
        gate.send(()).unwrap();
        tokio::time::timeout(BOUND, wait).await.unwrap();
        assert!(dropped.load(Ordering::SeqCst));
        tracker.close();
        tokio::time::timeout(BOUND, tracker.wait()).await.unwrap();
    }

    #[tokio::test]
    async fn a_batch_is_dropped_at_its_deadline() {
        let (stragglers, tracker) = (Stragglers::new(), TaskTracker::new());
        let (_gate, gated_on) = oneshot::channel();
        let dropped = Arc::new(AtomicBool::new(false));
        let start = Instant::now();
        let finished = stragglers.hand_off(
            gated(gated_on, Arc::clone(&dropped)),
            start + Duration::from_millis(20),
            tracker.token(),
        );
        tokio::time::timeout(BOUND, finished.wait()).await.unwrap();
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(dropped.load(Ordering::SeqCst), "the request is cancelled");
        tracker.close();
        tokio::time::timeout(BOUND, tracker.wait()).await.unwrap();
    }

    #[test]
    fn a_runtime_that_shut_down_takes_its_batches_and_the_next_gets_a_driver() {
        let (stragglers, tracker) = (Stragglers::new(), TaskTracker::new());
        let dropped = Arc::new(AtomicBool::new(false));
        let first = tokio::runtime::Runtime::new().unwrap();
        let (_gate, gated_on) = oneshot::channel();
        let finished = first.block_on(async {
            stragglers.hand_off(
                gated(gated_on, Arc::clone(&dropped)),
                Instant::now() + LONG,
                tracker.token(),
            )
        });
        drop(first);
        assert!(dropped.load(Ordering::SeqCst), "cancelled with its runtime");
        let second = tokio::runtime::Runtime::new().unwrap();
        second.block_on(async {
            tokio::time::timeout(BOUND, finished.wait()).await.unwrap();
            let (gate, gated_on) = oneshot::channel();
            let finished = stragglers.hand_off(
                gated(gated_on, Arc::new(AtomicBool::new(false))),
                Instant::now() + LONG,
                tracker.token(),
            );
            gate.send(()).unwrap();
            tokio::time::timeout(BOUND, finished.wait()).await.unwrap();
        });
    }

    #[tokio::test]
    async fn a_driver_ends_with_its_manager() {
        let metrics = Handle::current().metrics();
        let stragglers = Stragglers::new();
        let (gate, gated_on) = oneshot::channel();
        let finished = stragglers.hand_off(
            gated(gated_on, Arc::new(AtomicBool::new(false))),
            Instant::now() + LONG,
            TaskTracker::new().token(),
        );
        assert_eq!(metrics.num_alive_tasks(), 1, "the driver");
        drop(stragglers);
        gate.send(()).unwrap();
        tokio::time::timeout(BOUND, finished.wait()).await.unwrap();
        for _ in 0..100 {
            if metrics.num_alive_tasks() == 0 {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the driver is still running");
    }
}
