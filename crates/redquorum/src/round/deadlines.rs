//! Round deadlines, watched by one thread instead of a Tokio timer per round.
//!
//! Every round is bounded by the node timeout ([`engine`](crate::round::engine) invariant 1), but
//! almost no round ever reaches it: the replies come first. A Tokio timer for each round was
//! still paid in full (its timer-wheel entry, and a kernel timer armed whenever a worker went to
//! sleep waiting for replies): about 3 µs per lock + release, measured in
//! `docs/performance.md`'s *Hand-made parts*.
//!
//! Here a round's [`Alarm`] puts its deadline and waker in a slot of one process-wide table
//! (a lock, a push, and a pop when the round ends), and a single thread sleeps until the nearest
//! deadline and wakes the rounds whose deadline has passed. It is started on first use and,
//! when nothing has been registered for a while, waits without a deadline (no CPU while idle).
//!
//! # Invariants
//! 1. An alarm is ready once its deadline has passed, by the monotonic clock, and never before:
//!    the thread only wakes it, the alarm reads the clock itself.
//! 2. A registered alarm is woken no earlier than its deadline and, unless the machine stalls,
//!    soon after it: the thread is told whenever a new deadline comes before the one it sleeps
//!    until.
//! 3. A dropped alarm leaves the table, so the thread never wakes a finished round.
//! 4. A process forked from one whose thread ran starts a thread of its own: a child inherits
//!    the table but not the thread, and its rounds would never time out (a node that does not
//!    answer would stall them for good). The parent's entries, wakers of tasks whose runtime
//!    has no threads in the child, are forgotten there, never woken or dropped.
//! 5. **No thread holds the table's lock across a fork.** `fork()` copies the lock as it is
//!    and no thread but the forking one: a lock another thread held at that moment stays held
//!    in the child for good, and the child's first round waits on it forever. Measured from
//!    Python (16 threads locking, a child forked and locking, 2,000 times): 12 children hung,
//!    each in `Watchdog::register`. So the forking thread takes the lock just before the fork
//!    and lets it go just after, in the parent and in the child ([`crate::round::fork`]; Python's
//!    package registers both with `os.register_at_fork`). Every holder keeps it for a few
//!    table operations and never waits for anything else meanwhile, so taking it before a fork
//!    waits for microseconds.

use std::cell::RefCell;
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use crate::base::sync::lock;

/// How long the thread keeps a deadline of its own after the table emptied, before it sleeps
/// with none: between back-to-back rounds the table is empty for a moment, and a round that
/// registers while the thread sleeps with no deadline has to wake it (a system call).
const LINGER: Duration = Duration::from_millis(50);

/// A round's deadline. Poll it from the round's task.
#[derive(Debug)]
pub(crate) struct Alarm {
    deadline: Instant,
    /// The table slot and the entry's id, once registered (a slot is reused once its entry has
    /// fired or left, so the id tells whether it is still ours).
    slot: Option<(usize, u64)>,
    /// The waker the table holds for us, so that polls with the same one skip the table's lock.
    registered: Option<Waker>,
}

impl Alarm {
    pub(crate) fn new(deadline: Instant) -> Self {
        Self {
            deadline,
            slot: None,
            registered: None,
        }
    }

    /// Ready once the deadline has passed (invariant 1); otherwise makes sure the thread will
    /// wake this task at the deadline.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        // The entry can only have fired once the deadline passed, which the check above sees:
        // while the waker is the same, the table already holds what it needs.
        if !self
            .registered
            .as_ref()
            .is_some_and(|known| known.will_wake(cx.waker()))
        {
            WATCHDOG.register(&mut self.slot, self.deadline, cx.waker());
            self.registered = Some(cx.waker().clone());
        }
        Poll::Pending
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        if let Some((slot, id)) = self.slot {
            WATCHDOG.unregister(slot, id); // invariant 3
        }
    }
}

static WATCHDOG: LazyLock<Watchdog> = LazyLock::new(Watchdog::default);

thread_local! {
    /// The table's lock, held by the thread that forks, across the fork (invariant 5).
    static ACROSS_FORK: RefCell<Option<MutexGuard<'static, Table>>> = const { RefCell::new(None) };
}

/// Just before `fork()`, on the forking thread: takes the table's lock (invariant 5).
pub(crate) fn before_fork() {
    let guard = lock(&WATCHDOG.table);
    ACROSS_FORK.with(|held| *held.borrow_mut() = Some(guard));
}

/// Just after `fork()`, on the forking thread, in the parent and in the child: lets it go.
pub(crate) fn after_fork() {
    let guard = ACROSS_FORK.with(|held| held.borrow_mut().take());
    drop(guard);
}

#[derive(Default)]
struct Watchdog {
    table: Mutex<Table>,
    /// Tells the thread that a deadline came before the one it sleeps until (invariant 2).
    earlier: Condvar,
}

/// One registered alarm: its id, deadline and waker.
type Entry = (u64, Instant, Waker);

#[derive(Default)]
struct Table {
    slots: Vec<Option<Entry>>,
    free: Vec<usize>,
    next_id: u64,
    /// What the thread sleeps until: `None` while it waits with no deadline (or has not started).
    target: Option<Instant>,
    /// The process that started the thread (invariant 4).
    started_by: Option<u32>,
}

impl Watchdog {
    fn register(&'static self, slot: &mut Option<(usize, u64)>, deadline: Instant, waker: &Waker) {
        let mut table = lock(&self.table);
        // Polled again while still registered: only a different waker needs writing.
        if let Some((i, id)) = *slot
            && let Some(Some((entry_id, _, known))) = table.slots.get_mut(i)
            && *entry_id == id
        {
            if !known.will_wake(waker) {
                let old = std::mem::replace(known, waker.clone());
                drop(table);
                drop(old); // outside the lock, as in `unregister`
            }
            return;
        }
        // New, or its entry fired early (a spurious wake-up): a fresh entry.
        let id = table.next_id;
        table.next_id += 1;
        let entry = Some((id, deadline, waker.clone()));
        let i = match table.free.pop() {
            Some(i) => {
                table.slots[i] = entry;
                i
            }
            None => {
                table.slots.push(entry);
                table.slots.len() - 1
            }
        };
        *slot = Some((i, id));
        let pid = std::process::id();
        if table.started_by.is_some_and(|by| by != pid) {
            // A forked child (invariant 4): the parent's alarms are not ours to wake or drop.
            std::mem::forget(std::mem::take(&mut table.slots));
            table.free.clear();
            table.target = None;
            table.started_by = None;
            table.slots.push(Some((id, deadline, waker.clone())));
            *slot = Some((0, id));
        }
        if table.started_by.is_none() {
            // Until it starts, a round still ends with its last reply or its decision; only one
            // waiting for a node that never answers would wait for the next registration to
            // try again, and the thread then wakes every round already past its deadline.
            let spawned = std::thread::Builder::new()
                .name("redlock-deadlines".into())
                .spawn(|| WATCHDOG.run());
            match spawned {
                Ok(_) => table.started_by = Some(pid),
                Err(e) => tracing::error!(error = %e, "cannot start the deadline thread yet"),
            }
        }
        if table.target.is_none_or(|target| deadline < target) {
            table.target = Some(deadline);
            self.earlier.notify_one();
        }
    }

    fn unregister(&self, slot: usize, id: u64) {
        let mut table = lock(&self.table);
        let removed = table
            .slots
            .get_mut(slot)
            .filter(|entry| entry.as_ref().is_some_and(|(entry_id, ..)| *entry_id == id))
            .and_then(Option::take);
        if removed.is_some() {
            table.free.push(slot);
        }
        drop(table);
        // Its waker is dropped outside the lock: dropping a waker may drop a task, and with it
        // another alarm, which takes the lock.
        drop(removed);
    }

    /// The thread: wakes every round whose deadline has passed, then sleeps until the nearest
    /// deadline left (or a little while, or for good when nothing is left).
    fn run(&self) {
        let mut table = lock(&self.table);
        let mut was_empty = false;
        loop {
            let now = Instant::now();
            let mut nearest: Option<Instant> = None;
            let mut due = Vec::new();
            for i in 0..table.slots.len() {
                match &table.slots[i] {
                    Some((_, deadline, _)) if *deadline <= now => {
                        if let Some((_, _, waker)) = table.slots[i].take() {
                            due.push(waker);
                        }
                        table.free.push(i);
                    }
                    Some((_, deadline, _)) => {
                        nearest = Some(nearest.map_or(*deadline, |n| n.min(*deadline)));
                    }
                    None => {}
                }
            }
            let empty = nearest.is_none();
            table.target = match nearest {
                Some(deadline) => Some(deadline),
                None if was_empty => None,
                None => Some(now + LINGER),
            };
            was_empty = empty;
            drop(table);
            for waker in due {
                waker.wake();
            }
            table = lock(&self.table);
            // A registration may have come in meanwhile and lowered the target.
            table = match table.target {
                Some(target) => {
                    let wait = target.saturating_duration_since(Instant::now());
                    self.earlier
                        .wait_timeout(table, wait)
                        .map_or_else(|poisoned| poisoned.into_inner().0, |(t, _)| t)
                }
                None => self
                    .earlier
                    .wait(table)
                    .unwrap_or_else(std::sync::PoisonError::into_inner),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;

    async fn alarm(after: Duration) {
        let mut alarm = Alarm::new(Instant::now() + after);
        poll_fn(|cx| alarm.poll(cx)).await;
    }

    #[tokio::test]
    async fn an_alarm_is_ready_only_after_its_deadline() {
        let start = Instant::now();
        let wait = Duration::from_millis(30);
        tokio::time::timeout(Duration::from_secs(30), alarm(wait))
            .await
            .expect("woken");
        assert!(start.elapsed() >= wait);
    }

    #[tokio::test]
    async fn an_earlier_deadline_is_not_kept_waiting_behind_a_later_one() {
        let late = tokio::spawn(alarm(Duration::from_secs(600)));
        tokio::time::sleep(Duration::from_millis(20)).await; // the thread now sleeps 600 s
        tokio::time::timeout(Duration::from_secs(30), alarm(Duration::from_millis(10)))
            .await
            .expect("the earlier alarm was woken");
        assert!(!late.is_finished());
        late.abort();
    }

    #[test]
    fn a_dropped_alarm_leaves_the_table() {
        let waker = Waker::noop();
        let mut cx = Context::from_waker(waker);
        let mut alarm = Alarm::new(Instant::now() + Duration::from_secs(600));
        assert!(alarm.poll(&mut cx).is_pending());
        let (_, id) = alarm.slot.expect("registered");
        let ours = |table: &Table| {
            table
                .slots
                .iter()
                .flatten()
                .any(|(entry_id, _, _)| *entry_id == id)
        };
        assert!(ours(&lock(&WATCHDOG.table)));
        drop(alarm);
        assert!(!ours(&lock(&WATCHDOG.table)));
    }
}
