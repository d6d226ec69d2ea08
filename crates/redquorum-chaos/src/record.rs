//! What a run has seen so far, shared by the clients and the fault injector, and turned into a
//! [`History`] at the end.
//!
//! It also holds the little live state the two sides exchange: which client is inside a critical
//! section of which resource since when, and which resource each client is trying to acquire (so
//! that a crash can be aimed at a freshly taken lock somebody else is waiting for), and which
//! client has a pause, a crash or a handoff of its own waiting for it. Everything here is plain data behind short-held locks and atomics,
//! usable from the runtime's tasks and from the injector's thread alike.
//!
//! # Invariants
//! 1. Every time is read from one monotonic clock and given in µs since [`Recorder::origin`], the
//!    start of the workload, so times from different clients and from the injector compare
//!    directly.
//! 2. A node's up-time is a sequence of disjoint intervals: [`Recorder::node_down`] closes the
//!    open one, [`Recorder::node_up`] opens a new one; calling either twice in a row is harmless.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::history::{FaultEvent, History, NodeUp, Section};

/// The value of `entered_us` while a client is outside any critical section.
const OUTSIDE: u64 = u64::MAX;

/// A client's live state, as the injector sees it.
#[derive(Debug)]
struct ClientState {
    /// When it entered its current critical section, [`OUTSIDE`] if it is in none.
    entered_us: AtomicU64,
    /// When it plans to be done with its current section's work.
    work_until_us: AtomicU64,
    /// A pause waiting for its next critical section: extra ms past its validity; 0 for none.
    pause_extra_ms: AtomicU64,
    /// A crash waiting for its next critical section.
    crash: AtomicBool,
    /// The earliest a critical section that takes the crash may have started, in µs.
    crash_from_us: AtomicU64,
    /// A handoff waiting for its next critical section.
    handoff: AtomicBool,
    /// The resource of its current (or last) critical section.
    resource: Mutex<String>,
    /// The resource it is trying to acquire now, if any.
    wants: Mutex<Option<String>>,
}

/// The run's shared record.
#[derive(Debug)]
pub(crate) struct Recorder {
    origin: Instant,
    sections: Mutex<Vec<Section>>,
    faults: Mutex<Vec<FaultEvent>>,
    /// Per node: closed up-intervals and, while up, when the current one started.
    up: Mutex<Vec<(Vec<NodeUp>, Option<u64>)>>,
    clients: Vec<ClientState>,
    /// Clients that started over as new processes after a fault (late joiners).
    late_joins: AtomicU64,
    /// Woken at every fault, so that clients waiting for a lock start over as late joiners.
    fault_applied: tokio::sync::Notify,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing under these locks can panic half-way; recover rather than propagate a poison.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Recorder {
    /// A record whose clock starts at `origin`, with `nodes` nodes (all up) and `clients` clients.
    pub(crate) fn new(origin: Instant, nodes: usize, clients: u32) -> Self {
        Self {
            origin,
            sections: Mutex::new(Vec::new()),
            faults: Mutex::new(Vec::new()),
            up: Mutex::new((0..nodes).map(|_| (Vec::new(), Some(0))).collect()),
            late_joins: AtomicU64::new(0),
            fault_applied: tokio::sync::Notify::new(),
            clients: (0..clients)
                .map(|_| ClientState {
                    entered_us: AtomicU64::new(OUTSIDE),
                    work_until_us: AtomicU64::new(0),
                    pause_extra_ms: AtomicU64::new(0),
                    crash: AtomicBool::new(false),
                    crash_from_us: AtomicU64::new(0),
                    handoff: AtomicBool::new(false),
                    resource: Mutex::new(String::new()),
                    wants: Mutex::new(None),
                })
                .collect(),
        }
    }

    /// The start of the workload: time 0 of the history.
    pub(crate) fn origin(&self) -> Instant {
        self.origin
    }

    /// `at` in µs since the origin (0 for instants before it).
    pub(crate) fn us(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX)
    }

    /// Now, in µs since the origin.
    pub(crate) fn now_us(&self) -> u64 {
        self.us(Instant::now())
    }

    /// A client started over as a new process (a late joiner).
    pub(crate) fn joined_late(&self) {
        self.late_joins.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn section(&self, section: Section) {
        lock(&self.sections).push(section);
    }

    pub(crate) fn fault(&self, event: FaultEvent) {
        tracing::debug!(?event, "fault");
        lock(&self.faults).push(event);
        self.fault_applied.notify_waiters();
    }

    /// Completes at the next fault recorded after it was made.
    pub(crate) fn next_fault(&self) -> tokio::sync::futures::Notified<'_> {
        self.fault_applied.notified()
    }

    pub(crate) fn sections_so_far(&self) -> usize {
        lock(&self.sections).len()
    }

    pub(crate) fn faults_so_far(&self) -> usize {
        lock(&self.faults).len()
    }

    /// Node `node` stopped being up and reachable now (invariant 2).
    pub(crate) fn node_down(&self, node: usize) {
        let now = self.now_us();
        if let Some((closed, open)) = lock(&self.up).get_mut(node)
            && let Some(from_us) = open.take()
        {
            closed.push(NodeUp {
                node,
                from_us,
                to_us: now,
            });
        }
    }

    /// Node `node` is up and reachable again from now on (invariant 2).
    pub(crate) fn node_up(&self, node: usize) {
        let now = self.now_us();
        if let Some((_, open)) = lock(&self.up).get_mut(node) {
            open.get_or_insert(now);
        }
    }

    /// Client `client` is trying to acquire `resource` now (`None`: no longer).
    pub(crate) fn wants(&self, client: u32, resource: Option<&str>) {
        if let Some(state) = self.client(client) {
            *lock(&state.wants) = resource.map(str::to_owned);
        }
    }

    /// Client `client` entered a critical section of `resource` at `entered_us` and plans to
    /// work until `work_until`.
    pub(crate) fn enter(&self, client: u32, resource: &str, entered_us: u64, work_until: Instant) {
        if let Some(state) = self.client(client) {
            resource.clone_into(&mut lock(&state.resource));
            state
                .work_until_us
                .store(self.us(work_until), Ordering::Relaxed);
            state.entered_us.store(entered_us, Ordering::Release);
        }
    }

    /// Client `client` left its critical section.
    pub(crate) fn leave(&self, client: u32) {
        if let Some(state) = self.client(client) {
            state.entered_us.store(OUTSIDE, Ordering::Release);
        }
    }

    /// The resources of clients that entered a critical section at most `max_age` ago, plan to
    /// stay in it for at least `min_left` more, and that another client is trying to acquire:
    /// the moment a crash hurts most.
    pub(crate) fn fresh_holds(&self, max_age: Duration, min_left: Duration) -> Vec<String> {
        let now = self.now_us();
        let (max_age, min_left) = (micros(max_age), micros(min_left));
        let wanted: Vec<String> = self
            .clients
            .iter()
            .filter_map(|state| lock(&state.wants).clone())
            .collect();
        self.clients
            .iter()
            .filter(|state| {
                let entered = state.entered_us.load(Ordering::Acquire);
                entered != OUTSIDE
                    && now.saturating_sub(entered) <= max_age
                    && state.work_until_us.load(Ordering::Relaxed) >= now.saturating_add(min_left)
            })
            .map(|state| lock(&state.resource).clone())
            .filter(|resource| wanted.contains(resource))
            .collect()
    }

    /// Makes client `client` pause in its next critical section, for its validity plus
    /// `extra_ms` (at least 1).
    pub(crate) fn arm_pause(&self, client: u32, extra_ms: u64) {
        if let Some(state) = self.client(client) {
            state
                .pause_extra_ms
                .store(extra_ms.max(1), Ordering::Relaxed);
        }
    }

    /// The pause armed for `client`, if any, disarming it.
    pub(crate) fn take_pause(&self, client: u32) -> Option<u64> {
        let state = self.client(client)?;
        match state.pause_extra_ms.swap(0, Ordering::Relaxed) {
            0 => None,
            extra => Some(extra),
        }
    }

    /// Makes client `client` crash in its next critical section.
    pub(crate) fn arm_crash(&self, client: u32) {
        self.arm_crash_from(client, 0);
    }

    /// Makes client `client` crash in its next critical section that starts at `from_us` or
    /// later (a section already under way keeps going).
    pub(crate) fn arm_crash_from(&self, client: u32, from_us: u64) {
        if let Some(state) = self.client(client) {
            state.crash_from_us.store(from_us, Ordering::Relaxed);
            state.crash.store(true, Ordering::Release);
        }
    }

    /// Whether a crash is armed for `client` and not taken yet (it has not entered the critical
    /// section it abandons).
    pub(crate) fn crash_pending(&self, client: u32) -> bool {
        self.client(client)
            .is_some_and(|state| state.crash.load(Ordering::Relaxed))
    }

    /// Whether a crash was armed for `client`'s critical section that started at `enter_us`,
    /// disarming it.
    pub(crate) fn take_crash(&self, client: u32, enter_us: u64) -> bool {
        self.client(client).is_some_and(|state| {
            state.crash.load(Ordering::Acquire)
                && enter_us >= state.crash_from_us.load(Ordering::Relaxed)
                && state.crash.swap(false, Ordering::Relaxed)
        })
    }

    /// Makes client `client` hand its lock off in its next critical section.
    pub(crate) fn arm_handoff(&self, client: u32) {
        if let Some(state) = self.client(client) {
            state.handoff.store(true, Ordering::Release);
        }
    }

    /// Whether a handoff was armed for `client`, disarming it.
    pub(crate) fn take_handoff(&self, client: u32) -> bool {
        self.client(client)
            .is_some_and(|state| state.handoff.swap(false, Ordering::AcqRel))
    }

    fn client(&self, client: u32) -> Option<&ClientState> {
        self.clients.get(usize::try_from(client).ok()?)
    }

    /// Takes the history recorded so far. Its duration is `duration_us`, or the last recorded
    /// time if something happened later (a fault undone while the run stopped); node intervals
    /// still open are closed then.
    pub(crate) fn take_history(
        &self,
        strategy: String,
        seed: u64,
        clients: u32,
        duration_us: u64,
    ) -> History {
        let sections = std::mem::take(&mut *lock(&self.sections));
        let faults = std::mem::take(&mut *lock(&self.faults));
        let up = std::mem::take(&mut *lock(&self.up));
        let duration_us = sections
            .iter()
            .map(|s| s.exit_us)
            .chain(faults.iter().map(|f| f.at_us))
            .fold(duration_us, u64::max);
        let nodes = up.len();
        let mut node_up = Vec::new();
        for (node, (closed, open)) in up.into_iter().enumerate() {
            node_up.extend(closed);
            if let Some(from_us) = open {
                node_up.push(NodeUp {
                    node,
                    from_us,
                    to_us: duration_us.max(from_us),
                });
            }
        }
        History {
            strategy,
            seed,
            nodes,
            clients,
            duration_us,
            sections,
            faults,
            node_up,
            permits: None,
            lock_delay_us: 0,
            late_joins: self.late_joins.load(Ordering::Relaxed),
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_intervals_are_closed_and_reopened() {
        let origin = Instant::now() - Duration::from_secs(1);
        let record = Recorder::new(origin, 2, 1);
        record.node_down(0);
        record.node_down(0); // twice: harmless
        record.node_up(0);
        record.node_up(0);
        let history = record.take_history("s".into(), 1, 1, 5_000_000);
        let zero: Vec<_> = history.node_up.iter().filter(|u| u.node == 0).collect();
        assert_eq!(zero.len(), 2, "{zero:?}");
        assert_eq!(zero[0].from_us, 0);
        assert!(zero[0].to_us >= 1_000_000);
        assert_eq!(zero[1].to_us, 5_000_000);
        let one: Vec<_> = history.node_up.iter().filter(|u| u.node == 1).collect();
        assert_eq!((one[0].from_us, one[0].to_us), (0, 5_000_000));
    }

    #[test]
    fn a_fresh_holder_is_one_that_just_entered_and_stays() {
        let record = Recorder::new(Instant::now() - Duration::from_secs(10), 1, 2);
        let long = Duration::from_secs(60);
        assert!(
            record.fresh_holds(long, Duration::ZERO).is_empty(),
            "nobody inside"
        );
        record.enter(
            1,
            "r",
            record.now_us(),
            Instant::now() + Duration::from_secs(1),
        );
        assert!(
            record.fresh_holds(long, Duration::ZERO).is_empty(),
            "nobody else wants it"
        );
        record.wants(0, Some("r"));
        assert_eq!(record.fresh_holds(long, Duration::from_millis(500)), ["r"]);
        assert!(
            record.fresh_holds(long, Duration::from_secs(5)).is_empty(),
            "leaves too soon"
        );
        record.leave(1);
        assert!(record.fresh_holds(long, Duration::ZERO).is_empty());
        let a_second_ago = record.now_us().saturating_sub(1_000_000);
        record.enter(
            0,
            "r",
            a_second_ago,
            Instant::now() + Duration::from_secs(1),
        );
        assert!(
            record
                .fresh_holds(Duration::from_millis(100), Duration::ZERO)
                .is_empty(),
            "entered too long ago"
        );
    }

    #[test]
    fn a_pause_is_taken_once() {
        let record = Recorder::new(Instant::now(), 1, 2);
        assert_eq!(record.take_pause(0), None);
        record.arm_pause(0, 300);
        assert_eq!(record.take_pause(1), None);
        assert_eq!(record.take_pause(0), Some(300));
        assert_eq!(record.take_pause(0), None);
        assert_eq!(record.take_pause(7), None, "unknown clients have no pause");
    }

    #[test]
    fn a_crash_is_taken_once() {
        let record = Recorder::new(Instant::now(), 1, 2);
        assert!(!record.take_crash(0, 0));
        record.arm_crash(1);
        assert!(!record.take_crash(0, 0));
        assert!(record.take_crash(1, 0));
        assert!(!record.take_crash(1, 0));
        record.arm_crash(7);
        assert!(!record.take_crash(7, 0), "unknown clients do not crash");
        // A crash armed from 100 µs on spares a section that started before.
        record.arm_crash_from(0, 100);
        assert!(!record.take_crash(0, 99), "a section under way keeps going");
        assert!(record.take_crash(0, 100));
    }

    #[test]
    fn a_handoff_is_taken_once_and_apart_from_a_crash() {
        let record = Recorder::new(Instant::now(), 1, 2);
        assert!(!record.take_handoff(0));
        record.arm_handoff(1);
        assert!(!record.take_handoff(0));
        assert!(!record.take_crash(1, 0), "a handoff is no crash");
        assert!(record.take_handoff(1));
        assert!(!record.take_handoff(1));
        record.arm_crash(0);
        assert!(!record.take_handoff(0), "a crash is no handoff");
        record.arm_handoff(7);
        assert!(!record.take_handoff(7), "unknown clients hand nothing off");
    }
}
