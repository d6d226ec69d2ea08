//! Fencing tokens: a number that grows with every acquisition of a resource, across clients,
//! processes and independent masters.
//!
//! A lock alone cannot stop a holder that paused (GC, swap, a stopped VM) past its validity from
//! writing after the next holder got the lock. A fencing token can: every acquisition carries a
//! larger token than all before it, and the protected resource refuses any write whose token is
//! smaller than the largest it has seen. [`LockInfo::fence`](crate::LockInfo::fence) is that token.
//!
//! # How a token is chosen
//! 1. Every fenced acquisition advances, on each node it reaches, the node's counter for the
//!    resource (key `redlock-fence:<resource>`) with its `SET NX PX`, before the lock's key can
//!    be gone there. The new counter is the node's *proposal*. It is made in one of two ways:
//!    - **Natively** (one resource on a standalone master: the default path). One pipeline of
//!      plain commands: `SET NX PX` of the lock, `SET NX` of the counter to
//!      [`Advance::initial_counter`] (our estimate of the node's clock in µs, rounded down to
//!      the grain, when we have one: [`Reading::estimate`]), `INCR` of the counter, `PEXPIRE` of it
//!      to the retention, and the node's `TIME` (invariant 7). The proposal is the
//!      `INCR`'s value. Not atomic, and it need not be: the `INCR` runs before the lock's key
//!      can be gone (`commands::set_fenced_natively` says why). The proposal counts as *stored*
//!      only if the counter is within the [`trust_window`] of the node's clock after the
//!      commands ran (read with them, or estimated when the reply came). A counter further
//!      behind was started by `INCR` alone (it was missing and we had no estimate to start it
//!      from), or from a clock long past (a request that arrived late, a counter started
//!      while its node was quarantined), or simply not used for a while: such a node proposes
//!      its clock rounded down to the grain instead, not stored (invariant 4 says why that is
//!      enough). Plain commands cost the server about half of what a script does
//!      (`docs/performance.md`'s *The defaults, and what each option costs*), which is why
//!      this path is not a script.
//!    - **By a script** (sets, fair waiting, read-write locks, campaigns, cluster masters;
//!      `scripts/fence_advance.lua`): to `max(counter + 1, the node's clock in µs rounded down to
//!      the grain)`, only when the `SET` succeeded.
//! 2. When every vote of the winning quorum proposed the same stored value, that value is the
//!    token, and it is already stored on that quorum: the lock is handed out at once. This is
//!    the steady state: nodes that saw the same acquisitions hold the same counters, and a
//!    counter they start together starts from the same rounded clock unless their clocks
//!    straddle a grain boundary.
//! 3. Otherwise (a node lost its counter or let it expire, missed acquisitions while it was
//!    away, advanced it in an attempt that lost, started it on the other side of a grain
//!    boundary, or proposed a clock that is not stored) the token is the largest proposal of
//!    any node that granted. A second round stores it (counter := max(counter, token)) on the
//!    nodes we locked, with a script that applies only while the lock still holds our value,
//!    and the lock is handed out only once a quorum stored it, within the validity. Otherwise
//!    the attempt fails and is rolled back.
//!
//! A lock on a set of resources gets one token: step 1 advances every counter of the set to one
//! value above the largest of them, and step 3 stores the token in the counter of every resource
//! of the set, while all of its keys still hold our value. The invariants below then hold for
//! each resource of the set.
//!
//! # Invariants (why tokens increase)
//! 1. A token handed out is stored on a quorum `S` of nodes before anybody may use it: by the
//!    acquisition itself on the quorum of votes that all proposed it as stored (step 2), or by
//!    the store round (step 3).
//! 2. A later acquisition of the same resource (alone or in a set) wins on a quorum `M` of
//!    votes; `S` and `M` share a node (two majorities always do), and that node's `SET NX`
//!    succeeded only after the earlier lock's key was gone there, so after the earlier token was
//!    stored there (in the same pipeline or script, or by a store that required the earlier
//!    key). Its counter was at least the earlier token, so its proposal is larger (the counter
//!    plus one, or more), and so is the later token: the agreed proposal of `M` (step 2) or the
//!    largest proposal (step 3), which is at least that node's.
//! 3. The store applies only while the lock value is ours, so a holder whose lock expired before
//!    the store cannot leave a token behind that a later holder did not see. A counter advanced
//!    by an attempt that then lost (natively, every attempt advances it) only makes later
//!    proposals larger.
//! 4. What can break it: a node of `S` that loses its data, if that leaves fewer than a quorum
//!    holding the token. The restart quarantine keeps such a node from voting for `max_ttl`
//!    after the loss, so its later vote in `M` runs at least `max_ttl` after the earlier token
//!    was stored. Two facts then order the tokens:
//!    - *No counter is ever ahead of the clocks* by more than an estimate's 50 ms: a script
//!      writes at most `max(counter + 1, its node's clock)`, a native start at most our estimate
//!      (never ahead by more than that), a store writes a token, and a counter grows by one per
//!      attempt, so it stays behind the clocks while a resource is attempted fewer than a
//!      million times a second (a Redis server runs a few hundred thousand commands a second in
//!      all). So the earlier token is at most the clock at the time it was handed out, plus
//!      50 ms, plus the difference between node clocks.
//!    - *A vote's proposal is at least its node's clock minus the grain, or minus the trust
//!      window*: the script's clock term; a native proposal not within the window of the clock
//!      is replaced by the rounded clock, unstored; one within it is at least the clock minus
//!      the window, minus the estimate's error when the clock was estimated (at most a quarter
//!      of the grain, 50 ms of drift and [`CLOCKS_DISAGREE`] behind).
//!
//!    Whatever the counter of the node that lost its data was started from, then (nothing,
//!    a clock long past, a value written while it was quarantined), a later token is larger as
//!    long as node clocks differ by less than `max_ttl − window − grain / 4 − 200 ms`, that is
//!    `(max_ttl + grain) / 2 − grain / 4 − 200 ms` ≥ `max_ttl / 2 − 200 ms` when quarantine is on,
//!    even if a majority lost its data at once. With the quarantine off, nothing keeps the two
//!    acquisitions that far apart, and invariant 6 takes over: no counter is started from an
//!    estimate and the clock is exact, so tokens increase while node clocks differ by less than
//!    the time between the two acquisitions.
//! 5. Counters expire after the fence retention (a day by default, never less than two seconds
//!    nor less than `2 × max_ttl`, whatever any client of the servers configured) without use;
//!    the next vote on such a node runs at least the retention after the earlier token was
//!    stored, and the same two facts make the later token larger as long as node clocks differ
//!    by less than `retention − window − grain / 4 − 200 ms` ≥ `1.5 × max_ttl − 200 ms` (and, for
//!    the script path, less than `(retention − grain) / 2`: half a second at the shortest
//!    retention and the coarsest grain).
//! 6. **Without the quarantine, the exact clock.** Nothing then keeps a node that lost its counter
//!    from voting at once, and within one grain such a node and one that missed the last
//!    acquisition would both propose the rounded clock that the last token was: the same token
//!    twice. So a manager with the quarantine off rounds to 1 µs and never starts a counter from
//!    its estimate: a node whose counter is gone proposes its exact clock, not stored, so the
//!    acquisition takes the store round, and a node that lost its counter is covered as before
//!    this design, while node clocks differ by less than the time between the two tokens (the
//!    two acquisitions', or, for a token on request, its request's: invariant 8).
//! 7. **A start is judged by the node's clock, never by our estimate.** A client whose clocks
//!    stood still while the nodes' went on (a VM paused by its hypervisor stops the monotonic and
//!    the system clock alike, so the check that they agree on a reading's age passes) holds an
//!    estimate behind the node by the whole pause, whose age looks short. If the pause outlasted
//!    the fence retention, the counters expired, and a counter started from that estimate is as
//!    far behind: judged against the estimate it would pass the trust window, and the token
//!    would go below those handed out during the pause. So every native pipeline reads `TIME`
//!    (it used to, about once a second), and the window is checked against that: a start more
//!    than the window behind is replaced by the node's clock, unstored, as in invariant 4. The
//!    estimate only chooses the start. The price is one short command in the same round trip;
//!    measured against plain Redlock (fresh names, one node, 32 tasks, with the quarantine), the
//!    throughput ratio stayed within this machine's noise (0.58 and 0.66 before, 0.66 and 0.55
//!    after; a second round trip for `TIME` instead measured 0.52 and 0.50).
//!
//! 8. **A token on request.** Most callers never fence, and step 1's counter commands were the
//!    largest part of an acquisition's cost (four commands where a plain vote is one: 1.5–1.6×
//!    plain Redlock's CPU per cycle, `docs/performance.md`). So by default an exclusive lock (one
//!    resource, a set, a semaphore's permit; not a campaign, a fair waiter's or a read-write
//!    hold, whose scripts advance the counters anyway) is acquired with the standard `SET NX PX`
//!    (or the set's script), touching
//!    no counter, and its token is issued when the holder first asks for it
//!    ([`Lock::fence`](crate::Lock::fence)): a round of `scripts/fence_held.lua`, which on a
//!    node where every key of the lock still holds our value advances the counters as step 1's
//!    script does and returns the new value, a stored proposal; elsewhere it changes nothing.
//!    **Only the lock's voters count** ([`Voters`]): the nodes whose `SET` the acquisition
//!    counted. A quorum of them must propose; then steps 2 and 3 as for an acquisition, the
//!    store round also counted on the voters only, and the token is handed out only if the lock
//!    is still valid when the last round is decided. Why tokens still increase, in the order of
//!    the acquisitions (not of the requests):
//!    - Our value is written on a node once, by the acquisition's one `SET` there (every
//!      attempt draws a fresh value: `acquire` invariant 3), and a voter's `SET` ran before the
//!      acquisition was decided. So once a voter lost our key (expiry, release, a flush), it
//!      never holds it again; a non-voter may get it later (a `SET` that landed after the
//!      round), which is why only voters count.
//!    - The token is stored on a quorum `S` of voters while our keys are there (the fence
//!      round, or the store round: both check the value). A later acquisition wins on a quorum
//!      `M`, which shares a node with `S`, whose `SET NX` ran after our key was gone there, so
//!      after our token was stored there: its own proposal there, eager (step 1) or on request
//!      (after its `SET`), is larger, and so is its token (invariant 2).
//!    - A holder that lost its lock to a later acquisition `M` cannot get a token at all: our
//!      key is gone from every voter in `M` and never comes back, and the voters outside `M`
//!      are fewer than a quorum. So a holder that paused past its deadline and asks only then
//!      is refused ([`Error::NotFenced`](crate::Error::NotFenced)), rather than given a token
//!      newer than its successor's.
//!    - An earlier acquisition's token, issued at any time, is smaller than ours by the same
//!      argument with the roles swapped. A node that lost its data lost our key: it refuses, and
//!      invariant 4 covers its counter.
//!
//!    Asked once, the token is kept by the handle. **Its price in availability:** the voters
//!    are the votes the round counted before it was decided, often exactly a quorum (a won
//!    round does not wait for the rest), so a token asked for after one of them failed is
//!    refused although a quorum still holds the lock (found by review: with one node of three
//!    paused after the acquisition, 13 of 30 requests were refused); so is one asked for after
//!    an extension counted on other nodes than the voters (a late `SET`'s node), which left a
//!    voter to let our key expire (found by the model: `docs/model.md`). Asking at once, before
//!    the work (the CLI does), leaves only the round trip's window; a caller that fences every
//!    lock can have the token with the acquisition as before
//!    ([`Builder::fence_on_acquire`](crate::Builder::fence_on_acquire); so does
//!    [`Redlock::with_lock`](crate::Redlock::with_lock)'s work, which has no handle to ask
//!    with), which also spares the round trip, and then tolerates what extensions tolerate. Counting
//!    the votes that land after the decision, within the node timeout, would restore that
//!    tolerance, but rests on the timing assumption this argument avoids; not done.
//!
//! This is where a clock assumption enters, and the only place: invariants 4–6. The grain
//! trades a little of their margin (at most a second, at most half of `max_ttl`) for nodes that
//! agree when they start a counter, and the trust window trades half of what is left for
//! counters that stay trusted (a counter used for longer than the window without a clock term
//! takes one store round, which brings it back to the clock); every client of the same servers
//! must use the same `max_ttl`, as the quarantine already requires.
//!
//! Tokens are microsecond timestamps in practice (about 2^51 today), below 2^53, so the Lua
//! scripts compare them exactly as numbers, and `INCR` (64-bit) counts them exactly.

use std::time::{Duration, Instant, SystemTime};

/// The clock grain, in µs, for a manager whose largest TTL (and quarantine) is `max_ttl`: a
/// second, or half of `max_ttl` if that is shorter (invariant 4); with the quarantine off, 1 µs,
/// the exact clock (invariant 6).
pub fn clock_grain(max_ttl: Duration, quarantine: bool) -> u64 {
    if !quarantine {
        return 1;
    }
    let grain = Duration::from_secs(1).min(max_ttl / 2);
    u64::try_from(grain.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// How far behind the node's clock a counter may be and still be a stored proposal on the
/// native path (invariant 4): `(max_ttl − grain) / 2`, half of what the quarantine leaves after
/// the grain.
pub fn trust_window(max_ttl: Duration, grain_us: u64) -> u64 {
    let max_ttl = u64::try_from(max_ttl.as_micros()).unwrap_or(u64::MAX);
    max_ttl.saturating_sub(grain_us) / 2
}

/// The nodes whose votes an acquisition counted, by index (invariant 8): what a token on
/// request may be counted on. At most [`Voters::MAX_NODES`] nodes; a manager with more fences
/// on acquisition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Voters(u64);

impl Voters {
    /// The most nodes a set of voters can name.
    pub const MAX_NODES: usize = 64;

    /// Adds node `i` (ignored past [`Voters::MAX_NODES`]).
    pub fn add(&mut self, i: usize) {
        if i < Self::MAX_NODES {
            self.0 |= 1 << i;
        }
    }

    /// Whether node `i` voted.
    pub fn has(self, i: usize) -> bool {
        i < Self::MAX_NODES && self.0 & (1 << i) != 0
    }

    /// How many nodes voted.
    pub fn len(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether no node voted.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// What a fenced acquisition tells the nodes about the counters: how long to keep them, the
/// clock grain, and the trust window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advance {
    /// How long a counter is kept without use, in ms.
    pub retention_ms: u64,
    /// The clock grain, in µs ([`clock_grain`]).
    pub grain_us: u64,
    /// [`trust_window`].
    pub window_us: u64,
}

impl Advance {
    /// Whether a native acquisition may start a missing counter from our estimate of the node's
    /// clock: only with a grain, that is with the quarantine on (invariant 6).
    pub fn starts_counters(&self) -> bool {
        self.grain_us > 1
    }

    /// The value a native acquisition starts a missing counter at (step 1): the node's clock as
    /// we estimate it, rounded down to the grain, so that nodes whose clocks agree to within the
    /// grain start at the same value.
    pub fn initial_counter(&self, estimate_us: u64) -> u64 {
        estimate_us - estimate_us % self.grain_us.max(1)
    }

    /// A native acquisition's proposal (step 1): the counter after its `INCR` (`None` if the key
    /// held no number), and the node's clock in µs after it ran (read in the same pipeline, or
    /// estimated when the reply came).
    pub fn proposal(&self, counter: Option<u64>, clock_us: u64) -> Proposal {
        let rounded = clock_us - clock_us % self.grain_us.max(1);
        match counter {
            Some(value) if value.saturating_add(self.window_us) >= clock_us => Proposal {
                value,
                stored: true,
            },
            // Started by `INCR` alone, not a number, or based on a clock older than the window
            // (invariant 4): the rounded clock, to be stored.
            counter => Proposal {
                value: counter.unwrap_or(0).max(rounded),
                stored: false,
            },
        }
    }
}

/// One granting node's proposal for the token (step 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    /// The proposed token.
    pub value: u64,
    /// The node's counter holds `value` now: a script's advance, or a native `INCR` of a counter
    /// within the trust window of the node's clock. A node that proposes its clock in place of
    /// its counter has not stored it.
    pub stored: bool,
}

/// The longest a clock reading is used for an estimate ([`Reading::estimate`]): five seconds, so
/// that even clocks whose rates differ by the drift factor's 1% put an estimate at most 50 ms
/// ahead of the node's clock (invariant 4).
pub(crate) const ESTIMATE_AGE: Duration = Duration::from_secs(5);

/// How much the system clock and the monotonic clock may disagree about a reading's age before
/// the reading is dropped: 100 ms. The monotonic clock stops while the machine is suspended, and
/// an estimate built on it would then be behind by the whole suspension; a system clock stepped
/// by NTP drops it too, which only costs a `TIME`.
const CLOCKS_DISAGREE: Duration = Duration::from_millis(100);

/// What we know of one node's clock (step 1's start): its `TIME` from a native acquisition on a
/// connection, and when that reply came, by our monotonic and our system clock. The estimate is
/// the reading plus the time since. It is never ahead of the node's clock by more than the two
/// clocks' rates can differ in [`ESTIMATE_AGE`] (50 ms at the drift factor's 1%), unless the
/// node's clock is set back; and, at the moment it is made, never behind by more than that plus
/// the reading's round trip (at most a quarter of the grain for the reading to be kept:
/// [`Reading::kept`]) plus [`CLOCKS_DISAGREE`]. A request built on an estimate may still run
/// much later (a network that delivers late, a client paused before it wrote): invariant 4's
/// trust window, not the estimate, covers that. The node layer keeps the last reading of each
/// connection and reads our clocks; these are the rules it keeps and uses it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// The node's clock, in µs.
    pub(crate) node_us: u64,
    /// When its reply came, by our monotonic clock.
    pub(crate) received: Instant,
    /// The same moment by our system clock.
    pub(crate) system: SystemTime,
}

impl Reading {
    /// Whether a reading of the node's clock by a request sent at `asked`, whose reply came at
    /// `received`, is kept: only if that round trip was at most a quarter of the grain
    /// `grain_us`.
    pub(crate) fn kept(asked: Instant, received: Instant, grain_us: u64) -> bool {
        let round_trip = received.saturating_duration_since(asked);
        round_trip.as_micros() <= u128::from(grain_us / 4)
    }

    /// The node's clock at `now` (`system_now` by our system clock) as we estimate it from this
    /// reading, and the reading's age, if the reading is recent enough ([`ESTIMATE_AGE`]) and
    /// both of our clocks agree on its age ([`CLOCKS_DISAGREE`]).
    pub(crate) fn estimate(&self, now: Instant, system_now: SystemTime) -> Option<(u64, Duration)> {
        let age = now.checked_duration_since(self.received)?;
        let system_age = system_now.duration_since(self.system).ok()?;
        let disagree = system_age.abs_diff(age);
        let since = u64::try_from(age.as_micros()).unwrap_or(u64::MAX);
        (age <= ESTIMATE_AGE && disagree <= CLOCKS_DISAGREE)
            .then(|| (self.node_us.saturating_add(since), age))
    }
}

/// What the nodes that granted an acquisition proposed as its token (step 1), gathered as their
/// replies come in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Proposals {
    /// The largest proposal of any node that granted, vote or not (step 3).
    largest: Option<u64>,
    /// The smallest and largest proposal among the votes, and whether all of them are stored.
    votes: Option<(u64, u64, bool)>,
}

/// An acquisition's token, and whether it still needs the store round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Token {
    /// The token.
    pub value: u64,
    /// Already stored on the quorum of votes (step 2, invariant 1): no store round.
    pub stored: bool,
}

impl Proposals {
    /// Adds one granting node's proposal; `vote` when its grant counts toward the quorum (a
    /// quarantined node's does not).
    pub fn add(&mut self, proposal: Proposal, vote: bool) {
        let Proposal { value, stored } = proposal;
        self.largest = self.largest.max(Some(value));
        if vote {
            self.votes = Some(match self.votes {
                None => (value, value, stored),
                Some((low, high, all)) => (low.min(value), high.max(value), all && stored),
            });
        }
    }

    /// The token, once the round is won on the votes added: their common proposal when they all
    /// agree and stored it (step 2), else the largest proposal, to be stored (step 3).
    pub fn token(&self) -> Option<Token> {
        match self.votes {
            Some((low, high, true)) if low == high => Some(Token {
                value: low,
                stored: true,
            }),
            _ => self.largest.map(|value| Token {
                value,
                stored: false,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored_as(value: u64, stored: bool) -> Token {
        Token { value, stored }
    }

    fn proposals(list: &[(u64, bool)]) -> Proposals {
        let mut p = Proposals::default();
        for &(value, vote) in list {
            p.add(
                Proposal {
                    value,
                    stored: true,
                },
                vote,
            );
        }
        p
    }

    #[test]
    fn votes_that_agree_give_a_token_already_stored() {
        let token = proposals(&[(7, true), (7, true), (7, true)]).token();
        assert_eq!(token, Some(stored_as(7, true)));
    }

    #[test]
    fn votes_that_disagree_give_the_largest_to_store() {
        let token = proposals(&[(7, true), (9, true), (8, true)]).token();
        assert_eq!(token, Some(stored_as(9, false)));
    }

    #[test]
    fn a_larger_proposal_outside_the_votes_does_not_stop_agreement() {
        // A quarantined node's counter is no vote: the agreed value is stored on the quorum,
        // which every later quorum meets (invariant 2).
        let token = proposals(&[(7, true), (12, false), (7, true)]).token();
        assert_eq!(token, Some(stored_as(7, true)));
    }

    #[test]
    fn the_grain_is_a_second_or_half_of_max_ttl_and_exact_without_quarantine() {
        assert_eq!(clock_grain(Duration::from_secs(60), true), 1_000_000);
        assert_eq!(clock_grain(Duration::from_millis(500), true), 250_000);
        assert_eq!(clock_grain(Duration::from_nanos(1), true), 1, "never zero");
        assert_eq!(
            clock_grain(Duration::from_secs(60), false),
            1,
            "the exact clock"
        );
    }

    #[test]
    fn without_votes_the_largest_proposal_is_stored() {
        let token = proposals(&[(12, false)]).token();
        assert_eq!(token, Some(stored_as(12, false)));
        assert_eq!(Proposals::default().token(), None);
    }

    const GRAIN: Advance = Advance {
        retention_ms: 120_000,
        grain_us: 1_000_000,
        window_us: 29_500_000,
    };

    #[test]
    fn a_counter_within_the_window_is_a_stored_proposal() {
        let clock = 1_764_000_123_456_789;
        let counter = clock - GRAIN.window_us;
        assert_eq!(
            GRAIN.proposal(Some(counter), clock),
            Proposal {
                value: counter,
                stored: true,
            },
            "it holds every token stored on the node since it last took the clock"
        );
    }

    #[test]
    fn a_counter_older_than_the_window_gives_way_to_the_rounded_clock_unstored() {
        let clock = 1_764_000_123_456_789;
        let stale = clock - GRAIN.window_us - 1;
        for counter in [Some(1), Some(stale), None] {
            assert_eq!(
                GRAIN.proposal(counter, clock),
                Proposal {
                    value: 1_764_000_123_000_000,
                    stored: false,
                },
                "{counter:?}"
            );
        }
    }

    #[test]
    fn the_window_is_half_of_what_the_quarantine_leaves_after_the_grain() {
        let window = |max_ttl| trust_window(max_ttl, clock_grain(max_ttl, true));
        assert_eq!(window(Duration::from_secs(60)), 29_500_000);
        assert_eq!(window(Duration::from_secs(1)), 250_000);
    }

    #[test]
    fn votes_that_agree_on_an_unstored_clock_still_take_the_store_round() {
        let mut p = proposals(&[(7, true)]);
        p.add(
            Proposal {
                value: 7,
                stored: false,
            },
            true,
        );
        assert_eq!(p.token(), Some(stored_as(7, false)));
    }

    #[test]
    fn counters_start_at_the_rounded_estimate_and_only_with_a_grain() {
        assert_eq!(
            GRAIN.initial_counter(1_764_000_123_456_789),
            1_764_000_123_000_000
        );
        assert!(GRAIN.starts_counters());
        let exact = Advance {
            retention_ms: 2_000,
            grain_us: 1,
            window_us: 1_000_000,
        };
        assert!(!exact.starts_counters(), "invariant 6");
    }

    /// A reading of 1 s on the node's clock, received now.
    fn a_second_into_the_node_s_clock() -> Reading {
        Reading {
            node_us: 1_000_000,
            received: Instant::now(),
            system: SystemTime::UNIX_EPOCH + Duration::from_secs(1_764_000_000),
        }
    }

    #[test]
    fn an_estimate_is_the_reading_plus_the_time_since_and_expires() {
        let reading = a_second_into_the_node_s_clock();
        let Reading {
            received, system, ..
        } = reading;
        let after = |d: Duration| reading.estimate(received + d, system + d);
        assert_eq!(
            after(Duration::from_millis(3)),
            Some((1_003_000, Duration::from_millis(3)))
        );
        assert_eq!(after(ESTIMATE_AGE), Some((6_000_000, ESTIMATE_AGE)));
        assert_eq!(after(ESTIMATE_AGE + Duration::from_millis(1)), None);
        assert_eq!(
            reading.estimate(received - Duration::from_millis(1), system),
            None,
            "a moment before the reply"
        );
    }

    #[test]
    fn an_estimate_needs_both_of_our_clocks_to_agree_on_the_reading_s_age() {
        let reading = a_second_into_the_node_s_clock();
        let Reading {
            received, system, ..
        } = reading;
        let now = received + Duration::from_millis(200);
        // The machine was suspended (the monotonic clock stood still) or NTP stepped the
        // system clock: the estimate is dropped.
        let stepped = |by: Duration| system + Duration::from_millis(200) + by;
        assert!(reading.estimate(now, stepped(CLOCKS_DISAGREE)).is_some());
        let suspended = stepped(CLOCKS_DISAGREE + Duration::from_millis(1));
        assert_eq!(reading.estimate(now, suspended), None);
        assert_eq!(reading.estimate(now, system - Duration::from_secs(1)), None);
    }

    #[test]
    fn a_reading_with_a_long_round_trip_is_not_kept() {
        let asked = Instant::now();
        // A quarter of the grain is 250 ms.
        let at = |ms| asked + Duration::from_millis(ms);
        assert!(Reading::kept(asked, at(250), GRAIN.grain_us));
        assert!(!Reading::kept(asked, at(251), GRAIN.grain_us));
    }
}
