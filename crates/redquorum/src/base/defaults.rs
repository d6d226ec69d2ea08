//! The defaults of the [`Builder`](crate::Builder)'s settings, and the bounds it enforces: one
//! place to read what a manager does when nobody configured it.

use std::time::Duration;

use crate::protocol::quarantine::MARKER_KEY;

/// Default bound on each node's reply within a round.
///
/// 100 ms: well above a loopback or LAN round trip even on a loaded 2-core machine, and still
/// only 1% of a 10 s TTL. It is also the longest a stopped or partitioned node can delay a round
/// that needs its reply. Lower it for TTLs under a few seconds.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(100);

/// How long a release may wait for the answers that decide it (engine invariant 7): one whose
/// outcome is still open at the node timeout (fewer than a quorum confirmed, enough nodes still
/// out) goes on waiting for those nodes up to this long from its start, or the node timeout if
/// that is longer, and returns as soon as it is decided (a quorum confirmed, or too few nodes
/// can): only a release that needs an unreachable node waits this long. A failed attempt's
/// rollback, whose outcome nobody reads, waits the node timeout only.
///
/// 1 s: ten default node timeouts, so a healthy node slowed down by a loaded host answers
/// within it, and short enough that the end of a `with` block, or of `redlock run`, does not
/// hang on a partitioned node. What such a node holds expires with its TTL.
pub const RELEASE_PATIENCE: Duration = Duration::from_secs(1);

/// Default bound on establishing a connection (TCP, TLS, AUTH, SELECT).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Default clock drift factor: the reference clients' 1%.
pub const DRIFT_FACTOR: f64 = 0.01;

/// Default largest TTL, and so the restart quarantine: one minute. Locks and extensions longer
/// than this are refused; a node restarted less than this long ago does not vote.
pub const MAX_TTL: Duration = Duration::from_secs(60);

/// Default time a resource's fencing counter is kept after its last use: one day.
pub const FENCE_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest `connect_timeout`: an hour. A connection that is not made within minutes (TCP
/// gives up on an unanswered connect within about two) is not coming, and the bound keeps every
/// deadline derived from it representable.
pub const LONGEST_CONNECT_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The shortest time a fencing counter is kept after its last use: two seconds, twice the
/// coarsest clock grain any client rounds its fencing proposals to (see `docs/guarantees.md`'s
/// *Fencing tokens increase*), so that a counter one client let expire cannot take another
/// client's token back. A shorter `fence_retention` is taken as this.
pub const SHORTEST_FENCE_RETENTION: Duration = Duration::from_secs(2);
/// The longest fencing counter retention: 100 years, which is forever in practice. A longer
/// `fence_retention` (`Duration::MAX` included) is taken as this, since Redis needs a finite
/// expiry.
pub const LONGEST_FENCE_RETENTION: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// The most permits a semaphore may have
/// ([`Redlock::acquire_permit`](crate::Redlock::acquire_permit)). An acquisition that finds them
/// all held tries every one, a round each, before it waits, so very large counts make waiting
/// costly.
pub const MAX_PERMITS: u32 = 1024;

/// The longest identity a leader-election candidate may give
/// ([`Redlock::campaign`](crate::Redlock::campaign)), in bytes: it travels in the lock value,
/// with every request.
pub const MAX_IDENTITY: usize = 256;

/// What a read-write lock's writer-waiting key starts with.
pub(crate) const WRITER_WAITING_PREFIX: &str = "redlock-writer-waiting:";

/// What a fencing counter's key starts with.
pub(crate) const FENCE_PREFIX: &str = "redlock-fence:";

/// What the library's own keys start with (`nodes/scripts.rs`, `scripts/queue.lua`, the marker): a
/// resource named so would share a key with them, so acquisitions refuse such names
/// ([`check_resource`](crate::check_resource)).
pub const RESERVED_PREFIXES: [&str; 5] = [
    FENCE_PREFIX,
    "redlock-queue:",
    "redlock-queue-lease:",
    WRITER_WAITING_PREFIX,
    MARKER_KEY,
];
