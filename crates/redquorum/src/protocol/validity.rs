//! Deadline arithmetic: how long a lock may be trusted.
//!
//! This module is pure: it takes instants and durations and never reads a clock itself, so the
//! rule can be unit-tested exactly.
//!
//! # Invariants
//! 1. Time is measured from a monotonic instant taken **before the first request** of a round is
//!    sent. Every key of the round was written after that instant, so it lives at least until
//!    `start + ttl` on its node's clock.
//! 2. Clocks may run at slightly different rates and Redis expires keys with millisecond
//!    precision, so we give up `drift = ttl × drift_factor + 2 ms` (the reference client's rule: 1 ms
//!    for Redis' expiry precision, 1 ms minimum drift for small TTLs).
//! 3. Hence the lock is trusted until `deadline = start + ttl − drift`. Validity at any moment is
//!    `deadline − now`; at the end of the round this is `ttl − elapsed − drift`, the spec's rule.
//! 4. A round whose deadline is not in the future when it is decided has failed, whatever the votes.

use std::time::{Duration, Instant};

/// The fixed part of the clock drift allowance (invariant 2).
pub const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// The clock drift allowance for a lock of `ttl` (invariant 2).
pub fn drift(ttl: Duration, drift_factor: f64) -> Duration {
    ttl.mul_f64(drift_factor) + DRIFT_FLOOR
}

/// The instant until which a round started at `start` may trust a lock of `ttl` (invariant 3),
/// or `None` when the drift allowance eats the whole TTL.
pub fn deadline(start: Instant, ttl: Duration, drift_factor: f64) -> Option<Instant> {
    let usable = ttl.checked_sub(drift(ttl, drift_factor))?;
    if usable.is_zero() {
        return None;
    }
    start.checked_add(usable)
}

/// The remaining time (ms) at or under which a node judges a release late under a lock-delay of
/// `lock_delay_ms` (`engine` invariant 6): at the holder's deadline a key has the delay, the
/// drift allowance, and the lag of the write that set it (at most `node_timeout` after its
/// round's start) left. A sender that knows the deadline tests against the delay and the lag;
/// one that does not (a release by value) adds the drift allowance of `max_ttl`, the largest any
/// lock may have. Without a delay, nothing is late (0).
pub fn late_release_bound(
    lock_delay_ms: u64,
    knows_deadline: bool,
    node_timeout: Duration,
    max_ttl: Duration,
    drift_factor: f64,
) -> u64 {
    if lock_delay_ms == 0 {
        return 0;
    }
    let bound = lock_delay_ms.saturating_add(ttl_millis(node_timeout));
    if knows_deadline {
        bound
    } else {
        bound.saturating_add(ttl_millis(drift(max_ttl, drift_factor)))
    }
}

/// The whole milliseconds sent as `PX`: Redis takes whole milliseconds, and we round down so the
/// key never lives longer than the caller asked for.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_is_late_within_the_delay_plus_the_lag_of_the_write_and_by_value_the_drift() {
        let (timeout, max_ttl) = (Duration::from_millis(100), Duration::from_secs(60));
        assert_eq!(late_release_bound(0, true, timeout, max_ttl, 0.01), 0);
        assert_eq!(
            late_release_bound(5_000, true, timeout, max_ttl, 0.01),
            5_100
        );
        // 60 s × 0.01 + 2 ms of drift allowance on top.
        assert_eq!(
            late_release_bound(5_000, false, timeout, max_ttl, 0.01),
            5_702
        );
    }

    #[test]
    fn drift_follows_the_reference_rule() {
        assert_eq!(
            drift(Duration::from_secs(10), 0.01),
            Duration::from_millis(102)
        );
        assert_eq!(
            drift(Duration::from_millis(100), 0.01),
            Duration::from_millis(3)
        );
        assert_eq!(
            drift(Duration::from_secs(10), 0.0),
            Duration::from_millis(2)
        );
    }

    #[test]
    fn deadline_subtracts_drift_from_the_start_instant() {
        let start = Instant::now();
        let d = deadline(start, Duration::from_secs(10), 0.01).unwrap();
        assert_eq!(d - start, Duration::from_millis(9_898));
    }

    #[test]
    fn validity_at_decision_time_is_ttl_minus_elapsed_minus_drift() {
        let start = Instant::now();
        let ttl = Duration::from_millis(1_000);
        let d = deadline(start, ttl, 0.01).unwrap();
        let decided = start + Duration::from_millis(40);
        // 1000 − 40 − (10 + 2) = 948
        assert_eq!(d - decided, Duration::from_millis(948));
    }

    #[test]
    fn a_ttl_that_drift_eats_has_no_deadline() {
        let start = Instant::now();
        assert_eq!(deadline(start, Duration::ZERO, 0.01), None);
        assert_eq!(deadline(start, Duration::from_millis(2), 0.01), None);
        assert!(deadline(start, Duration::from_millis(3), 0.01).is_some());
        assert_eq!(deadline(start, Duration::from_secs(1), 1.0), None);
    }

    #[test]
    fn px_is_whole_milliseconds_rounded_down() {
        assert_eq!(ttl_millis(Duration::from_micros(1_999)), 1);
        assert_eq!(ttl_millis(Duration::from_secs(30)), 30_000);
    }
}
