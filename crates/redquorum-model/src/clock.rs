//! Time: one real time, and each process's own clock.
//!
//! Real time advances in steps of one millisecond (`Tick`). Every process (client or node)
//! reads its own clock, which is real time minus how far that process has fallen behind: a
//! `Lag` step advances real time while one process's clock stands still, within a drift budget
//! (the bounds). So clocks run at rates that differ by at most the budget over a run, and a
//! client that takes no step for a while is a paused client: its clock runs on.
//!
//! The library's rules take [`Instant`]s; [`instant`] maps a clock reading in ms onto one
//! `Instant` taken once per process, far enough ahead of the machine's boot that an uptime of an
//! hour can be subtracted from it.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// A node's clock in µs at reading 0 ms: a realistic Unix time (late 2025), above the old
/// counter floor (2^50 µs), and a multiple of every grain the model uses.
pub const EPOCH_US: u64 = 1_764_000_000_000_000;

/// The `Instant` of clock reading `ms`.
pub fn instant(ms: u16) -> Instant {
    static BASE: OnceLock<Instant> = OnceLock::new();
    let base = *BASE.get_or_init(|| {
        let now = Instant::now();
        now.checked_add(Duration::from_secs(365 * 24 * 3600))
            .unwrap_or(now)
    });
    base + Duration::from_millis(u64::from(ms))
}

/// The clock reading in ms of an `Instant` made by [`instant`], rounded up (`None` before 0).
pub fn ms_of(at: Instant) -> Option<u16> {
    let since = at.checked_duration_since(instant(0))?;
    let ms = since.as_micros().div_ceil(1000);
    Some(u16::try_from(ms).unwrap_or(u16::MAX))
}

/// A node's clock in µs at reading `ms`.
pub fn node_us(ms: u16) -> u64 {
    EPOCH_US + u64::from(ms) * 1000
}

/// A node's clock in ms (Unix time) at reading `ms`, as `TIME` gives a script.
pub fn node_unix_ms(ms: u16) -> u64 {
    EPOCH_US / 1000 + u64::from(ms)
}
