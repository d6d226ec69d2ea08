//! How long a waiter's claim on a node outlives its last renewal: a fair waiter's queue place
//! (`waiting` invariant 4) and a waiting writer's hold on new readers (`rwlock` invariant 2).

use std::time::Duration;

/// How long a queue place outlives its last renewal: four retry delays and a round, and at least
/// a second, so that a live waiter, which renews it on every attempt, never loses it to a slow
/// scheduler, while a dead one blocks the queue only briefly. At most [`LONGEST_LEASE`].
pub(crate) fn lease(retry_delay: Duration, node_timeout: Duration) -> Duration {
    retry_delay
        .saturating_mul(4)
        .saturating_add(node_timeout)
        .clamp(Duration::from_secs(1), LONGEST_LEASE)
}

/// The longest lease: a day. A retry delay of hours (or `Duration::MAX`, "never poll") must still
/// give a lease that Redis can store as an expiry, and a dead waiter should not close the queue
/// for longer than that. A live waiter that polls less often than this may lose its place between
/// attempts; it gets it back at its next attempt, with the same ticket (`waiting` invariant 3).
const LONGEST_LEASE: Duration = Duration::from_secs(24 * 60 * 60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_outlast_several_retries_and_at_least_a_second() {
        let ms = Duration::from_millis;
        assert_eq!(lease(ms(5), ms(100)), Duration::from_secs(1));
        assert_eq!(lease(ms(500), ms(100)), ms(2100));
    }

    #[test]
    fn huge_delays_and_timeouts_give_a_day_long_lease_not_a_panic() {
        assert_eq!(lease(Duration::MAX, Duration::MAX), LONGEST_LEASE);
        assert_eq!(
            lease(Duration::MAX, Duration::from_millis(100)),
            LONGEST_LEASE
        );
    }
}
