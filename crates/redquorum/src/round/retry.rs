//! When to try again after a failed round, and when to give up.
//!
//! Competing clients that retry in lock-step split the votes again and again, so every delay is
//! drawn at random from `[delay/2, delay]` (the reference clients' rule). The random source is
//! seedable so tests can replay a schedule exactly.
//!
//! # Invariants
//! 1. No attempt starts once `max_wait` has passed since the first one started: a wait between
//!    attempts ends by then (`Schedule::capped`), and an acquisition whose wait ended at the
//!    deadline gives up without another attempt (`Schedule::expired`).
//! 2. No duration is too long: a `max_wait` or a delay too far out to be an instant is no
//!    deadline, or a wait that only a wake-up (or `max_wait`) ends. Nothing here panics.
//! 3. **A wait for a held lock is no wait for an outage.** With
//!    [`outage_attempts`](Retry::outage_attempts), attempts that failed for anything but a lock
//!    held by someone else are counted apart, and that many in a row end the acquisition, with
//!    attempts or time left: a caller that waits "until acquired" hears of unreachable or
//!    quarantined nodes as an error, not as a silent wait. A busy attempt starts the count
//!    again.
//! 4. **A few tries are no wait for a minute.** [`Schedule::reaches`] says whether an attempt
//!    left can start once a wait of a known length is over: not when the attempts (or outages
//!    in a row) left, each after a wait of at most a given step, run out first (`manager`
//!    invariant 7). A deadline ([`Retry::max_wait`]) is not counted: a caller that gave one
//!    waits for as long as it said, since the wait may end sooner than it looks (an operator's
//!    vouch ends a quarantine at once).

use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// How often and how long [`Redlock::acquire`](crate::Redlock::acquire) tries before it gives up.
///
/// Defaults: 3 attempts, delays drawn uniformly from 100–200 ms, no overall deadline.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Retry {
    attempts: Option<u32>,
    delay: Duration,
    max_wait: Option<Duration>,
    seed: Option<u64>,
    outage_attempts: Option<u32>,
}

impl Default for Retry {
    fn default() -> Self {
        Self {
            attempts: Some(3),
            delay: Duration::from_millis(200),
            max_wait: None,
            seed: None,
            outage_attempts: None,
        }
    }
}

/// Why an attempt failed, as a [`Schedule`] counts it (invariant 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failed {
    /// Somebody else holds the lock: what waiting is for.
    Busy,
    /// Anything else: nodes unreachable or quarantined, a key of another type, no validity left.
    Otherwise,
}

impl Retry {
    /// The default policy: 3 attempts, 200 ms maximum delay, no deadline.
    pub fn new() -> Self {
        Self::default()
    }

    /// A single attempt, no retry (`flock -n`).
    pub fn once() -> Self {
        Self::default().attempts(1)
    }

    /// Keep trying until acquired, or until [`max_wait`](Self::max_wait) if one is set.
    pub fn forever() -> Self {
        Self {
            attempts: None,
            ..Self::default()
        }
    }

    /// Total number of attempts, the first one included (default 3). `0` is treated as `1`.
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.attempts = Some(attempts.max(1));
        self
    }

    /// The maximum delay between attempts (default 200 ms); each delay is drawn uniformly from
    /// `[delay/2, delay]`. Any length is accepted: a huge one (`Duration::MAX`) means "never
    /// poll", and only a release's notification or `max_wait` ends the wait.
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// An overall deadline, measured from the start of the first attempt (default: none). No
    /// attempt starts after it: the wait before the next attempt is cut short at the deadline,
    /// and if nothing woke the waiter by then the acquisition gives up. A deadline too far out
    /// to represent (`Duration::MAX`) is no deadline: wait until acquired, or until the attempts
    /// run out.
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// Gives up after `attempts` attempts in a row that failed for anything but a lock held by
    /// someone else (nodes that did not answer, quarantined nodes, a key of another type),
    /// whatever attempts or time are left (default: no such limit). `0` is treated as `1`.
    /// `Retry::forever().outage_attempts(3)` waits as long as somebody holds the lock, and
    /// reports an outage after three attempts instead of waiting it out silently: the
    /// Python package's default.
    pub fn outage_attempts(mut self, attempts: u32) -> Self {
        self.outage_attempts = Some(attempts.max(1));
        self
    }

    /// Seeds the delay jitter, for reproducible schedules in tests (default: seeded from the OS).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The configured maximum delay.
    pub fn max_delay(&self) -> Duration {
        self.delay
    }

    pub(crate) fn schedule(&self, started: Instant) -> Schedule {
        Schedule {
            attempts_left: self.attempts,
            delay: self.delay,
            // Invariant 2: a deadline too far out to be an instant is none.
            give_up_at: self.max_wait.and_then(|w| started.checked_add(w)),
            outage_attempts: self.outage_attempts,
            outages_left: self.outage_attempts,
            seed: self.seed,
            rng: None,
        }
    }
}

/// One acquisition's progress through a [`Retry`] policy.
#[derive(Debug)]
pub(crate) struct Schedule {
    attempts_left: Option<u32>,
    delay: Duration,
    give_up_at: Option<Instant>,
    /// The policy's [`Retry::outage_attempts`], and how many are left in a row (invariant 3).
    outage_attempts: Option<u32>,
    outages_left: Option<u32>,
    seed: Option<u64>,
    /// Made at the first delay: seeding it costs more than a whole uncontended acquisition's
    /// other bookkeeping, and most acquisitions never wait.
    rng: Option<StdRng>,
}

impl Schedule {
    /// Call after an attempt that ended at `now` and `failed` so: how long to wait before the
    /// next attempt, never past the deadline (invariant 1), or `None` to give up: the attempts
    /// are used up, as many outages in a row as allowed came (invariant 3), or the deadline
    /// has passed.
    pub(crate) fn next_delay(&mut self, now: Instant, failed: Failed) -> Option<Duration> {
        match failed {
            Failed::Busy => self.outages_left = self.outage_attempts,
            Failed::Otherwise => {
                if let Some(left) = self.outages_left.as_mut() {
                    *left = left.saturating_sub(1);
                    if *left == 0 {
                        return None;
                    }
                }
            }
        }
        if let Some(left) = self.attempts_left.as_mut() {
            *left = left.saturating_sub(1);
            if *left == 0 {
                return None;
            }
        }
        if self.expired(now) {
            return None;
        }
        let delay = self.jitter();
        Some(self.capped(delay, now))
    }

    /// `wait`, starting at `now`, cut short so that it ends by the deadline (invariant 1).
    pub(crate) fn capped(&self, wait: Duration, now: Instant) -> Duration {
        match self.give_up_at {
            Some(give_up_at) => wait.min(give_up_at.saturating_duration_since(now)),
            None => wait,
        }
    }

    /// How long a newcomer may wait behind its manager's waiters before its first attempt
    /// (`waiting` invariant 13): a delay drawn as between attempts, ending by half the time left
    /// before the deadline, so that the first attempt still starts before it. `None` for a
    /// policy that allows a single attempt (a try-lock never waits) or whose deadline is (all
    /// but) reached.
    pub(crate) fn deferral(&mut self, now: Instant) -> Option<Duration> {
        if self.attempts_left == Some(1) {
            return None;
        }
        let wait = self.jitter();
        let wait = match self.give_up_at {
            Some(at) => wait.min(at.saturating_duration_since(now) / 2),
            None => wait,
        };
        (!wait.is_zero()).then_some(wait)
    }

    /// Whether an attempt left can start `wait` from now or later, if every wait between
    /// attempts lasts at most `step` (or the retry delay, if longer), counting attempts only
    /// (invariant 4). Called after [`next_delay`](Self::next_delay) for the attempt that just
    /// failed.
    pub(crate) fn reaches(&self, wait: Duration, step: Duration) -> bool {
        let left = match (self.attempts_left, self.outages_left) {
            (Some(a), Some(o)) => Some(a.min(o)),
            (a, o) => a.or(o),
        };
        let step = step.max(self.delay);
        left.is_none_or(|n| step.saturating_mul(n) >= wait)
    }

    /// Whether the deadline has passed at `now`: no attempt may start (invariant 1).
    /// When the acquisition gives up (`max_wait`), if ever.
    pub(crate) fn give_up_at(&self) -> Option<Instant> {
        self.give_up_at
    }

    pub(crate) fn expired(&self, now: Instant) -> bool {
        self.give_up_at.is_some_and(|give_up_at| now >= give_up_at)
    }

    fn jitter(&mut self) -> Duration {
        let max = u64::try_from(self.delay.as_micros()).unwrap_or(u64::MAX);
        let seed = self.seed;
        let rng = self.rng.get_or_insert_with(|| match seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            // Drawn from the OS: forked workers must not retry in lockstep (`fresh`).
            None => StdRng::from_seed(crate::base::fresh::bytes()),
        });
        Duration::from_micros(rng.random_range(max / 2..=max))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_reached_only_if_an_attempt_is_left_after_it() {
        let now = Instant::now();
        let s = Duration::from_secs;
        let step = s(2);
        // The default: two attempts left after the first, each after at most 2 s.
        let mut default = Retry::new().schedule(now);
        assert!(default.next_delay(now, Failed::Otherwise).is_some());
        assert!(default.reaches(s(4), step));
        assert!(!default.reaches(s(5), step));
        // The Python package's: three outages in a row, so two more after the first.
        let mut python = Retry::forever().outage_attempts(3).schedule(now);
        assert!(python.next_delay(now, Failed::Otherwise).is_some());
        assert!(python.reaches(s(4), step) && !python.reaches(s(56), step));
        // A deadline is waited for as long as it says; no limit at all, forever.
        let mut bounded = Retry::forever().max_wait(s(30)).schedule(now);
        assert!(bounded.next_delay(now, Failed::Otherwise).is_some());
        assert!(bounded.reaches(s(60), step));
        let mut forever = Retry::forever().schedule(now);
        assert!(forever.next_delay(now, Failed::Otherwise).is_some());
        assert!(forever.reaches(Duration::MAX, step), "no limit, no panic");
        // A retry delay longer than the step is the step.
        let mut slow = Retry::new().attempts(2).delay(s(10)).schedule(now);
        assert!(slow.next_delay(now, Failed::Otherwise).is_some());
        assert!(slow.reaches(s(10), step) && !slow.reaches(s(11), step));
    }

    #[test]
    fn default_policy_makes_three_attempts() {
        let now = Instant::now();
        let mut s = Retry::new().schedule(now);
        assert!(s.next_delay(now, Failed::Busy).is_some(), "after attempt 1");
        assert!(s.next_delay(now, Failed::Busy).is_some(), "after attempt 2");
        assert_eq!(s.next_delay(now, Failed::Busy), None, "after attempt 3");
    }

    #[test]
    fn outages_in_a_row_end_a_wait_that_a_held_lock_does_not() {
        let now = Instant::now();
        let mut s = Retry::forever().outage_attempts(3).schedule(now);
        for _ in 0..100 {
            assert!(
                s.next_delay(now, Failed::Busy).is_some(),
                "a held lock is waited for"
            );
        }
        assert!(s.next_delay(now, Failed::Otherwise).is_some(), "outage 1");
        assert!(s.next_delay(now, Failed::Otherwise).is_some(), "outage 2");
        assert!(
            s.next_delay(now, Failed::Busy).is_some(),
            "busy again: the count restarts"
        );
        assert!(s.next_delay(now, Failed::Otherwise).is_some(), "outage 1");
        assert!(s.next_delay(now, Failed::Otherwise).is_some(), "outage 2");
        assert_eq!(
            s.next_delay(now, Failed::Otherwise),
            None,
            "outage 3 in a row"
        );
        let mut plain = Retry::forever().schedule(now);
        for _ in 0..100 {
            assert!(
                plain.next_delay(now, Failed::Otherwise).is_some(),
                "no limit set"
            );
        }
    }

    #[test]
    fn once_never_retries() {
        let now = Instant::now();
        assert_eq!(
            Retry::once().schedule(now).next_delay(now, Failed::Busy),
            None
        );
    }

    #[test]
    fn delays_stay_within_half_to_full_delay() {
        let now = Instant::now();
        let mut s = Retry::forever()
            .delay(Duration::from_millis(200))
            .schedule(now);
        for _ in 0..1_000 {
            let d = s.next_delay(now, Failed::Busy).unwrap();
            assert!(
                d >= Duration::from_millis(100) && d <= Duration::from_millis(200),
                "{d:?}"
            );
        }
    }

    #[test]
    fn a_seed_replays_the_same_delays() {
        let now = Instant::now();
        let draw = |seed| {
            let mut s = Retry::forever().seed(seed).schedule(now);
            (0..10)
                .map(|_| s.next_delay(now, Failed::Busy))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn no_wait_ends_after_max_wait_and_no_attempt_starts_after_it() {
        let ms = Duration::from_millis;
        let start = Instant::now();
        let mut s = Retry::forever()
            .delay(ms(200))
            .max_wait(Duration::from_secs(1))
            .schedule(start);
        let early = s.next_delay(start + ms(500), Failed::Busy).unwrap();
        assert!(early >= ms(100) && early <= ms(200), "{early:?}");
        assert!(s.next_delay(start + ms(950), Failed::Busy).unwrap() <= ms(50));
        assert_eq!(s.capped(Duration::MAX, start + ms(900)), ms(100));
        assert!(!s.expired(start + ms(999)));
        assert!(s.expired(start + ms(1000)));
        assert_eq!(s.next_delay(start + ms(1000), Failed::Busy), None);
    }

    #[test]
    fn huge_durations_mean_no_deadline_and_never_polling() {
        let now = Instant::now();
        let mut s = Retry::forever()
            .delay(Duration::MAX)
            .max_wait(Duration::MAX)
            .schedule(now);
        let far = now + Duration::from_secs(100 * 365 * 24 * 3600);
        assert!(!s.expired(far), "Duration::MAX is no deadline");
        let delay = s.next_delay(far, Failed::Busy).unwrap();
        assert!(
            delay >= Duration::from_secs(100 * 365 * 24 * 3600),
            "{delay:?}"
        );
        let mut capped = Retry::forever()
            .delay(Duration::MAX)
            .max_wait(Duration::from_secs(1))
            .schedule(now);
        assert!(capped.next_delay(now, Failed::Busy).unwrap() <= Duration::from_secs(1));
    }
}
