//! The guarantees, checked in every reachable state within the bounds.
//!
//! 1. **At most one holder** whose validity has not run out by its own clock (`two holders`).
//! 2. **Fencing tokens strictly increase** in the order they are handed out: a resource that
//!    refuses any token not above the largest it saw accepts every holder's writes in turn.
//! 3. **A lock released in time is free at once**: a release that reaches a node more than a
//!    node timeout before its holder's deadline deletes the key there. Nearer the deadline the
//!    node may judge it late and leave the key to expire (`engine` invariant 6: the key's write
//!    may have run up to a node timeout after its round began, so the node cannot tell a
//!    release just before the deadline from one just after it; the safe side). With the rule
//!    `release_bound_covers_lag` off (the old bound, the delay alone) the margin is 0: every
//!    release before the deadline must delete.
//! 4. **A lock its holder did not release stays unavailable for the lock-delay**: nobody wins
//!    before the last holder's deadline plus the delay, by that holder's clock, unless a release
//!    of it reached a node in time, as a node can tell: before the deadline plus the drift
//!    allowance (`engine` invariant 6: the node judges from the key's remaining time, which at
//!    the holder's deadline is the delay plus that allowance).
//! 5. **An extension continues the holder's own hold**: when an extension wins, nobody else
//!    won the lock since the hold began (`manager` invariant 4: no resurrection), so the work
//!    done before and after it is one hold's.
//! 6. **Liveness within the bounds**: once the faults stop (the budget is spent), some client
//!    acquires, on some schedule (`sometimes`).

use stateright::Property;

use crate::model::{Protocol, State};

/// A guarantee broken on the way to a state, recorded when it happened (a hand-out, a
/// release), so that the property can be checked on the state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Broken {
    /// Two valid holders at once.
    pub two_holders: bool,
    /// A token handed out not above an earlier one.
    pub tokens_not_increasing: bool,
    /// A release in time left the key.
    pub timely_release_kept: bool,
    /// Somebody won inside another holder's lock-delay.
    pub lock_delay_cut_short: bool,
    /// An extension won after somebody else had won the lock since the hold began.
    pub extended_across_another: bool,
}

/// What the bounds let time do, recorded when it happens: witnesses (`sometimes` properties)
/// that a check's horizon reaches past each time-bound rule.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Seen {
    /// A client won after another's unreleased lock's deadline plus the lock-delay.
    pub lock_delay_ended: bool,
    /// A node counted a vote after a quarantine.
    pub quarantine_ended: bool,
    /// A node counted a vote on a marker a group's first sight vouched for.
    pub vouched_by_group: bool,
}

/// Property name: a validity ran out.
pub const VALIDITY_RAN_OUT: &str = "a holder's validity runs out";
/// Property name: a lock-delay ended.
pub const LOCK_DELAY_ENDED: &str = "a client wins once another's lock-delay is over";
/// Property name: a quarantine ended.
pub const QUARANTINE_ENDED: &str = "a quarantined node votes again";
/// Property name: first sight vouched and a vote counted on it.
pub const FIRST_SIGHT_TRUSTED: &str = "a node a group vouched for on first sight votes";
/// The witnesses of time passing.
pub const WITNESSES: [&str; 3] = [VALIDITY_RAN_OUT, LOCK_DELAY_ENDED, QUARANTINE_ENDED];

/// Property name: at most one holder.
pub const ONE_HOLDER: &str = "at most one valid holder";
/// Property name: tokens increase.
pub const TOKENS_INCREASE: &str = "fencing tokens strictly increase";
/// Property name: a timely release frees at once.
pub const RELEASE_FREES: &str = "a lock released in time is free at once";
/// Property name: the lock-delay holds.
pub const LOCK_DELAY: &str = "an unreleased lock stays unavailable for the lock-delay";
/// Property name: an extended hold is one hold.
pub const EXTENSION_CONTINUES: &str = "an extension continues the holder's own hold";
/// Property name: liveness.
pub const LIVENESS: &str = "some client acquires after the faults stop";

/// The number of holders whose validity has not run out, by their own clocks.
pub fn valid_holders(s: &State) -> usize {
    s.clients.iter().filter(|c| c.valid(c.clock(s.t))).count()
}

/// Every property of the model.
pub fn all() -> Vec<Property<Protocol>> {
    vec![
        Property::always(ONE_HOLDER, |_, s: &State| {
            valid_holders(s) <= 1 && !s.broken.two_holders
        }),
        Property::always(TOKENS_INCREASE, |_, s: &State| {
            !s.broken.tokens_not_increasing
        }),
        Property::always(RELEASE_FREES, |_, s: &State| !s.broken.timely_release_kept),
        Property::always(LOCK_DELAY, |_, s: &State| !s.broken.lock_delay_cut_short),
        Property::always(EXTENSION_CONTINUES, |_, s: &State| {
            !s.broken.extended_across_another
        }),
        Property::sometimes(LIVENESS, |_, s: &State| s.acquired_after_faults),
        Property::sometimes(VALIDITY_RAN_OUT, |_, s: &State| {
            s.clients.iter().any(|c| {
                matches!(c.phase, crate::client::Phase::Holding { .. }) && !c.valid(c.clock(s.t))
            })
        }),
        Property::sometimes(LOCK_DELAY_ENDED, |_, s: &State| s.seen.lock_delay_ended),
        Property::sometimes(QUARANTINE_ENDED, |_, s: &State| s.seen.quarantine_ended),
        Property::sometimes(FIRST_SIGHT_TRUSTED, |_, s: &State| s.seen.vouched_by_group),
    ]
}
