//! The guarantees, checked in every reachable state within the bounds.
//!
//! 1. **At most one holder** whose validity has not run out by its own clock (`two holders`).
//! 2. **Fencing tokens strictly increase** in the order they are handed out: a resource that
//!    refuses any token not above the largest it saw accepts every holder's writes in turn.
//!    Checked whenever a token is issued, with the acquisition's or on request.
//! 3. **Tokens follow the acquisitions**: for two holds of the same resource, if hold B's
//!    acquisition was decided after hold A's, any token issued for B is larger than any issued
//!    for A, whenever either is issued (`fencing` invariant 8: a token on request is issued
//!    after the acquisition, possibly after later acquisitions' tokens were, so the order of
//!    hand-outs is not enough). Checked whenever a token is issued, against every token issued
//!    for an earlier or a later acquisition.
//! 4. **A lock released in time is free at once**: a release that reaches a node more than a
//!    node timeout before its holder's deadline deletes the key there. Nearer the deadline the
//!    node may judge it late and leave the key to expire (`engine` invariant 6: the key's write
//!    may have run up to a node timeout after its round began, so the node cannot tell a
//!    release just before the deadline from one just after it; the safe side). With the rule
//!    `release_bound_covers_lag` off (the old bound, the delay alone) the margin is 0: every
//!    release before the deadline must delete.
//! 5. **A lock its holder did not release stays unavailable for the lock-delay**: nobody wins
//!    before the last holder's deadline plus the delay, by that holder's clock, unless a release
//!    of it reached a node in time, as a node can tell: before the deadline plus the drift
//!    allowance (`engine` invariant 6: the node judges from the key's remaining time, which at
//!    the holder's deadline is the delay plus that allowance).
//! 6. **An extension continues the holder's own hold**: when an extension wins, nobody else
//!    won the lock since the hold began (`acquire` invariant 4: no resurrection), so the work
//!    done before and after it is one hold's.
//! 7. **Liveness within the bounds**: once the faults stop (the budget is spent), some client
//!    acquires, on some schedule (`sometimes`).

use stateright::Property;

use crate::state::{Protocol, State};

/// Property name: a validity ran out.
pub const VALIDITY_RAN_OUT: &str = "a holder's validity runs out";
/// Property name: a lock-delay ended.
pub const LOCK_DELAY_ENDED: &str = "a client wins once another's lock-delay is over";
/// Property name: a quarantine ended.
pub const QUARANTINE_ENDED: &str = "a quarantined node votes again";
/// Property name: first sight vouched and a vote counted on it.
pub const FIRST_SIGHT_TRUSTED: &str = "a node a group vouched for on first sight votes";
/// Property name: a token was issued on request.
pub const FENCED_ON_REQUEST: &str = "a holder gets its token on request";
/// Property name: a token was issued on request through the store round.
pub const FENCED_BY_STORE: &str = "a holder gets its token on request through the store round";
/// Property name: a replicated node's promoted replica counted a vote (with every rule on, a
/// failover does not merely take the node out).
pub const PROMOTED_VOTES: &str = "a promoted replica votes";
/// The witnesses of tokens on request.
pub const FENCE_WITNESSES: [&str; 2] = [FENCED_ON_REQUEST, FENCED_BY_STORE];
/// The witnesses of time passing.
pub const WITNESSES: [&str; 3] = [VALIDITY_RAN_OUT, LOCK_DELAY_ENDED, QUARANTINE_ENDED];

/// Property name: at most one holder.
pub const ONE_HOLDER: &str = "at most one valid holder";
/// Property name: tokens increase.
pub const TOKENS_INCREASE: &str = "fencing tokens strictly increase";
/// Property name: tokens follow the order of the acquisitions.
pub const TOKENS_FOLLOW_ACQUISITIONS: &str =
    "a later acquisition's token is above every earlier acquisition's";
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
        Property::always(TOKENS_FOLLOW_ACQUISITIONS, |_, s: &State| {
            !s.broken.tokens_out_of_order
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
        Property::sometimes(FENCED_ON_REQUEST, |_, s: &State| s.seen.fenced_on_request),
        Property::sometimes(FENCED_BY_STORE, |_, s: &State| s.seen.fenced_by_store),
        Property::sometimes(PROMOTED_VOTES, |_, s: &State| s.seen.promoted_voted),
    ]
}
