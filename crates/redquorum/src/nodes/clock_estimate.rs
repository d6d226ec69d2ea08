//! Our estimate of one server's clock, kept on its connection between native fenced
//! acquisitions ([`fencing`](crate::protocol::fencing) step 1): the last reading and the clock
//! reads that make and use it. What a reading is worth, and for how long, is
//! [`Reading`]'s to say.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use crate::base::sync::lock;
use crate::protocol::fencing::Reading;

/// The last [`Reading`] of one server's clock kept on a connection, if any.
#[derive(Debug, Default)]
pub(crate) struct ClockEstimate {
    reading: Mutex<Option<Reading>>,
}

impl ClockEstimate {
    /// Records the node's clock, `node_us`, read by a request sent at `asked` whose reply came at
    /// `received`, unless that round trip was too long for the grain `grain_us`
    /// ([`Reading::kept`]).
    pub(crate) fn saw(&self, node_us: u64, asked: Instant, received: Instant, grain_us: u64) {
        if Reading::kept(asked, received, grain_us) {
            *lock(&self.reading) = Some(Reading {
                node_us,
                received,
                system: SystemTime::now(),
            });
        }
    }

    /// As if this client's clocks had stood still for `by` just after the reading (a VM paused
    /// by its hypervisor): the reading looks fresh, and the node's clock is `by` ahead of it.
    #[cfg(test)]
    pub(crate) fn stood_still(&self, by: Duration) {
        let now = Instant::now();
        let mut reading = lock(&self.reading);
        if let Some(Reading {
            node_us, received, ..
        }) = *reading
        {
            let since = u64::try_from(now.saturating_duration_since(received).as_micros());
            let node_now = node_us.saturating_add(since.unwrap_or(u64::MAX));
            let by = u64::try_from(by.as_micros()).unwrap_or(u64::MAX);
            *reading = Some(Reading {
                node_us: node_now.saturating_sub(by),
                received: now,
                system: SystemTime::now(),
            });
        }
    }

    /// The node's clock at `now` as we estimate it, and the age of the reading, if that reading
    /// is recent enough and both of our clocks agree on its age ([`Reading::estimate`]).
    pub(crate) fn now(&self, now: Instant) -> Option<(u64, Duration)> {
        let reading = (*lock(&self.reading))?;
        reading.estimate(now, SystemTime::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::fencing::ESTIMATE_AGE;

    /// A quarantine's default grain: a second.
    const GRAIN_US: u64 = 1_000_000;

    #[test]
    fn an_estimate_is_the_reading_plus_the_time_since_and_expires() {
        let estimate = ClockEstimate::default();
        let asked = Instant::now();
        let received = asked + Duration::from_millis(1);
        assert_eq!(estimate.now(received), None, "nothing read yet");
        estimate.saw(1_000_000, asked, received, GRAIN_US);
        let later = received + Duration::from_millis(3);
        assert_eq!(
            estimate.now(later),
            Some((1_003_000, Duration::from_millis(3)))
        );
        let too_old = received + ESTIMATE_AGE + Duration::from_millis(1);
        assert_eq!(estimate.now(too_old), None);
    }

    #[test]
    fn a_reading_with_a_long_round_trip_is_not_kept() {
        let estimate = ClockEstimate::default();
        let asked = Instant::now();
        // A quarter of the grain is 250 ms.
        let received = asked + Duration::from_millis(251);
        estimate.saw(1_000_000, asked, received, GRAIN_US);
        assert_eq!(estimate.now(received), None);
    }
}
