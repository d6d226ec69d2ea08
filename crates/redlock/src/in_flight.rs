//! The requests of one round, polled together: a small, measured replacement for
//! `FuturesUnordered` (see [`InFlight`]).

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::{Context, Poll};

/// One request of a round, boxed so that the requests a won round leaves behind can be handed to
/// the [`stragglers`](crate::stragglers) driver, which needs one nameable type for all rounds.
type Request<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The requests of a round, polled together; each output is taken as soon as it is ready.
///
/// Not `FuturesUnordered`: once it has polled all of its futures in one go, which every round
/// does first, it wakes its own task and returns `Pending` (a yield, futures-rs#2333). That sends
/// every round through the scheduler once more and often wakes another worker thread: measured
/// with `examples/bench.rs`, 2.5 more context switches and about 30 µs more per lock + release
/// with one task. With the handful of nodes of a Redlock deployment, polling every request that
/// is still pending on each wake-up is cheaper.
pub(crate) struct InFlight<T> {
    slots: Vec<Slot<T>>,
}

enum Slot<T> {
    Pending(Request<T>),
    Ready(T),
    Taken,
}

impl<T> Slot<T> {
    fn take_ready(&mut self) -> Option<T> {
        match std::mem::replace(self, Slot::Taken) {
            Slot::Ready(output) => Some(output),
            other => {
                *self = other;
                None
            }
        }
    }
}

impl<T, F> FromIterator<F> for InFlight<T>
where
    F: Future<Output = T> + Send + 'static,
{
    fn from_iter<I: IntoIterator<Item = F>>(futures: I) -> Self {
        Self {
            slots: futures
                .into_iter()
                .map(|f| Slot::Pending(Box::pin(f) as Request<T>))
                .collect(),
        }
    }
}

impl<T> InFlight<T> {
    /// Whether a request has not finished yet.
    pub(crate) fn has_pending(&self) -> bool {
        self.slots
            .iter()
            .any(|slot| matches!(slot, Slot::Pending(_)))
    }

    /// Drops every future still pending (its request may or may not have reached the node).
    pub(crate) fn cancel(&mut self) {
        self.slots.clear();
    }

    /// The next output, `None` once all are taken.
    pub(crate) async fn next(&mut self) -> Option<T> {
        poll_fn(|cx| self.poll_next(cx)).await
    }

    /// An output that is ready already, without polling anything.
    pub(crate) fn take_ready(&mut self) -> Option<T> {
        self.slots.iter_mut().find_map(Slot::take_ready)
    }

    /// Hands out an output that is ready already; only when there is none, polls every pending
    /// future (so every request of a round is sent on the first call) and hands out one that
    /// became ready. A wake-up often finds several replies in: they are handed out one by one
    /// without polling the others again for each.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(output) = self.take_ready() {
            return Poll::Ready(Some(output));
        }
        let pending = self.poll_pending(cx);
        match self.take_ready() {
            Some(output) => Poll::Ready(Some(output)),
            None if pending => Poll::Pending,
            None => Poll::Ready(None),
        }
    }

    /// Polls every pending future and drops the outputs; ready once none is pending.
    pub(crate) fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if self.poll_pending(cx) {
            return Poll::Pending;
        }
        self.slots.clear();
        Poll::Ready(())
    }

    /// Polls every pending future; whether any is still pending.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> bool {
        let mut pending = false;
        for slot in &mut self.slots {
            if let Slot::Pending(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(output) => *slot = Slot::Ready(output),
                    Poll::Pending => pending = true,
                }
            }
        }
        pending
    }
}
