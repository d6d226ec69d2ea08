//! The Redlock algorithm, top to bottom: attempt (a `SET` round, then a fencing round when the
//! votes did not agree on the token), decide, roll back, wait, attempt again. The rounds
//! themselves (fan-out, count, deadline) are the [`engine`](crate::round::engine)'s; waiting for a
//! turn is [`waiting`](crate::round::waiting)'s.
//!
//! # Invariants
//! 1. A lock is handed out only if a quorum granted **and** the deadline is still in the future
//!    when the round is decided.
//! 2. A failed acquisition round is rolled back on **all** nodes, also those that refused or did
//!    not answer: a timed-out `SET` may still have been applied. Only then do we wait and retry.
//!    The one exception: a round that every node refused set nothing anywhere (a refusal is an
//!    answer, and our value is fresh), so it has nothing to roll back. That spares a busy lock's
//!    waiters a round per attempt.
//! 3. Every acquisition uses a fresh random value, so a rolled-back or expired attempt can never
//!    be mistaken for a later one, ours or anybody's.
//! 4. An extension counts only with a quorum within the new validity; a lock whose validity has
//!    run out is never extended (no resurrection: we never `SET NX` again to paper over it).
//! 5. With fencing on, a lock is handed out only once its token is stored on a quorum: by the
//!    acquisition round itself when every vote proposed the same token, else by a round of its
//!    own ([`fencing`](crate::protocol::fencing) explains why that makes tokens increase).
//! 6. **A quarantine is waited out, not polled.** When quarantined nodes made the difference
//!    ([`Cause::Quarantined`]), the next attempt comes when enough of their quarantines end for
//!    a quorum, or after [`QUARANTINE_POLL`] if that is sooner (the nodes' health is checked
//!    again meanwhile, so an operator's vouch is seen), never sooner than the retry delay; and
//!    no release wakes it: our own rollback frees the key, and a waiter woken by that tried
//!    again at once, over a thousand attempts a second for the whole quarantine.
//! 7. **A quarantine that a few tries cannot outlast is not waited for, and one that is waited
//!    for is waited for aloud.** When quarantined nodes are so many that the others cannot make
//!    a quorum (not merely when they made the difference: a node that timed out may answer
//!    next time, found by review) and the attempts left cannot reach the end of their
//!    quarantine ([`retry`](crate::round::retry) invariant
//!    4: each wait lasts at most [`QUARANTINE_POLL`]), the acquisition gives up at once, and its
//!    error says how long is left and, where the nodes may simply be new, how to vouch for them
//!    ([`remedy`](crate::protocol::remedy)): with a retry policy of attempts (every package's
//!    default), a first lock on a new server fails in milliseconds with the one call that ends
//!    the wait, not after seconds of silence. A caller that gave a deadline (`max_wait`) waits
//!    for as long as it said, since a vouch ends the quarantine at once and is seen within
//!    [`QUARANTINE_POLL`]; its wait begins with one warning that says the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::base::error::{Error, RoundFailure};
use crate::base::fresh;
use crate::base::resources::{Access, Resources};
use crate::base::semaphore::Permits;
use crate::base::telemetry::{Acquisition, Waiting};
use crate::nodes::inspect::{NodeState, inspect};
use crate::nodes::request::Request;
use crate::nodes::scripts::check_resource;
use crate::protocol::cause::Cause;
use crate::protocol::fencing::Voters;
use crate::protocol::quorum::Decision;
use crate::protocol::remedy::Reader;
use crate::protocol::reply::Reply;
use crate::protocol::rwlock;
use crate::protocol::value::{self, Carried};
use crate::round::engine::{Engine, Released, Until};
use crate::round::held::Held;
use crate::round::retry::{Failed, Retry};
use crate::round::waiting::Turn;

/// What an acquisition is for: one lock (a resource, or a set all-or-nothing), or any one permit
/// of a semaphore ([`semaphore`](crate::base::semaphore)).
pub(crate) enum Wanted {
    Lock(Resources),
    /// A lock whose token comes with its acquisition, whatever the manager's
    /// `fence_on_acquire`: for a caller that takes the token at once (`with_lock`), which spares
    /// it the token's own round trip (`fencing` invariant 8).
    FencedLock(Resources),
    Permit(Permits),
    /// An election's lock, with the candidate's identity (`election` invariant 3).
    Campaign(Resources, String),
}

impl Wanted {
    /// How spans and metrics name it: the resources, or the semaphore's name.
    pub(crate) fn named(&self) -> &Resources {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => resources,
            Wanted::Permit(permits) => permits.named(),
        }
    }

    /// Whether the token comes with the acquisition rather than on request.
    fn fences_now(&self) -> bool {
        matches!(self, Wanted::FencedLock(_) | Wanted::Campaign(..))
    }

    /// The candidate's identity, for an election.
    fn identity(&self) -> Option<&str> {
        match self {
            Wanted::Campaign(_, identity) => Some(identity),
            _ => None,
        }
    }

    /// The keys whose release wakes a waiter: the lock's, or every permit's.
    fn watched(&self) -> &Resources {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => resources,
            Wanted::Permit(permits) => permits.watched(),
        }
    }

    /// The one key of a plain exclusive lock (not a set, a semaphore's permits or a read-write
    /// lock's side): what `waiting` invariant 13 lets a newcomer queue behind.
    fn single_exclusive(&self) -> Option<&str> {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _)
                if resources.access() == Access::Exclusive && resources.keys().len() == 1 =>
            {
                Some(resources.first())
            }
            _ => None,
        }
    }

    /// The keys a last release of a fresh value goes to, to tell a key of another type from a
    /// busy one.
    fn probed(&self) -> &Resources {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => resources,
            Wanted::Permit(permits) => permits.first_key(),
        }
    }

    /// Whether waiters queue in arrival order: for locks and elections, not for semaphores'
    /// permits or read-write locks.
    fn queues(&self, fair: bool) -> bool {
        fair && match self {
            Wanted::Lock(r) | Wanted::FencedLock(r) => r.access() == Access::Exclusive,
            Wanted::Campaign(..) => true,
            Wanted::Permit(_) => false,
        }
    }
}

/// How errors name what was asked for: `a`, `a, b`, or `jobs (3 permits)`.
impl std::fmt::Display for Wanted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => resources.fmt(f),
            Wanted::Permit(permits) => permits.fmt(f),
        }
    }
}

/// The longest wait between two attempts held up by a quarantine (invariant 6): each attempt
/// costs the nodes a `SET`, a marker read and a rollback, and triggers their health checks,
/// which see a vouch (`redlock nodes mark`) within two seconds.
const QUARANTINE_POLL: Duration = Duration::from_secs(2);

/// Whether the quarantined nodes of a round are so many that the others cannot make a quorum
/// whatever they answer next (invariant 7): only then does waiting for the quarantine's end
/// decide the acquisition. With fewer, a node that timed out or refused may grant next time.
fn quarantine_blocks_quorum(failure: &RoundFailure) -> bool {
    let quarantined = failure
        .replies
        .iter()
        .filter(|r| matches!(r.reply, Reply::Quarantined(_)))
        .count();
    failure.replies.len() - quarantined < failure.quorum
}

/// `a:1 (first seen without a marker, 58 s left); b:2 (…)`: the quarantined nodes of a round.
fn quarantined_nodes(failure: &RoundFailure) -> String {
    let mut listed = String::new();
    for reply in &failure.replies {
        if let Reply::Quarantined(quarantine) = &reply.reply {
            if !listed.is_empty() {
                listed.push_str("; ");
            }
            listed.push_str(&format!("{} ({quarantine})", reply.node));
        }
    }
    listed
}

/// What every attempt of one acquisition shares.
struct Tries<'a> {
    ttl: Duration,
    ttl_ms: u64,
    /// A candidate's identity, which its lock values carry (`election` invariant 3).
    identity: Option<&'a str>,
    /// Whether the token comes with the acquisition (`fencing` invariant 8).
    fence_now: bool,
    /// When the retry policy's `max_wait` ends: no further permit is tried after it.
    give_up_at: Option<Instant>,
    /// For a read-write lock's writer: how long a refusal keeps new readers out.
    hold_off_ms: u64,
    turn: &'a Turn,
}

/// A lost attempt: its keys (to roll back), its failure, and what the wait before the next
/// one depends on.
struct LostAttempt {
    held: Held,
    failure: RoundFailure,
    /// Every node refused: nothing to roll back (invariant 2).
    set_nowhere: bool,
    /// A quorum put another fair waiter first.
    behind: bool,
}

/// A won acquisition, for the [`Lock`](crate::Lock) it becomes: its keys and value, until when
/// it may be relied on, its fencing token if one came with it, the nodes that voted when the
/// token is issued on request, and a semaphore's permit.
pub(crate) struct Won {
    pub(crate) held: Held,
    pub(crate) deadline: Instant,
    pub(crate) fence: Option<u64>,
    pub(crate) voters: Option<Voters>,
    pub(crate) permit: Option<u32>,
}

impl Engine {
    /// The acquisition loop, for one resource or a set ([`Resources`] decides the wire format),
    /// or a semaphore's permits: attempt, and until one wins, roll back, wait, and attempt
    /// again. `seen` is the acquisition as telemetry sees it: its span learns how many attempts
    /// it took, and the retry schedule counts from its start.
    pub(crate) async fn acquire(
        self: &Arc<Self>,
        wanted: Wanted,
        ttl: Duration,
        retry: &Retry,
        seen: &Acquisition,
    ) -> Result<Won, Error> {
        let engine = self;
        let ttl_ms = engine.check_ttl(ttl)?;
        // The library's own key names are not resources.
        for name in wanted.named().keys() {
            check_resource(name)?;
        }
        let mut schedule = retry.schedule(seen.started());
        // Fair waiters queue from their first attempt, in one place for the whole acquisition
        // (`waiting` invariant 3).
        let mut turn = Turn::new(
            wanted.queues(engine.rules.fair),
            retry.max_delay(),
            engine.rules.node_timeout,
        );
        let writer = matches!(&wanted, Wanted::Lock(r) if r.access() == Access::Write);
        if writer {
            // A read-write lock's writer names itself among the waiting writers, and leaves
            // them when it gives up (`rwlock` invariant 2).
            turn = turn.named();
        }
        // Gives the place up if this future is dropped between rounds (`waiting` invariant 4; a
        // writer's place among the waiting writers likewise): a release of a fresh value nobody
        // holds (invariant 3), which only leaves the queue.
        let place_kept = turn.id().map(|id| {
            let resources = wanted.named().clone();
            Held::new(
                Arc::clone(engine),
                resources,
                value::new(fresh::bytes(), Carried::NONE),
                Some(id),
            )
        });
        // How long a refused writer keeps new readers out (`rwlock` invariant 2).
        let hold_off_ms = if writer {
            let rules = &engine.rules;
            rwlock::hold_off(retry.max_delay(), rules.node_timeout, rules.max_ttl)
        } else {
            0
        };
        // `waiting` invariant 13: not ahead of this manager's waiters for the same lock.
        if engine.rules.notify
            && !engine.rules.fair
            && let Some(resource) = wanted.single_exclusive()
            && engine.waiters.is_contended(resource)
            && let Some(wait) = schedule.deferral(Instant::now())
        {
            // A wait like any other: counted in the waiters gauge.
            let _waiting = Waiting::start();
            turn.wait(
                Some(&engine.waiters),
                wanted.watched(),
                wait,
                false,
                |wait| wait,
            )
            .await;
        }
        let mut told_quarantine = false;
        loop {
            let attempts = seen.attempt();
            tracing::trace!(n = attempts, "attempt");
            let tries = Tries {
                ttl,
                ttl_ms,
                identity: wanted.identity(),
                fence_now: wanted.fences_now(),
                give_up_at: schedule.give_up_at(),
                hold_off_ms,
                turn: &turn,
            };
            let lost = match self.attempt_wanted(&wanted, &tries).await {
                Ok(lock) => {
                    if let Some(place) = place_kept {
                        place.disarm(); // the lock's release leaves the queue
                    }
                    return Ok(lock);
                }
                Err(lost) => lost,
            };
            let LostAttempt {
                held,
                mut failure,
                set_nowhere,
                behind,
            } = *lost;
            let failed = if failure.cause() == Cause::Busy {
                Failed::Busy
            } else {
                Failed::Otherwise
            };
            let mut next = schedule.next_delay(Instant::now(), failed);
            // Invariant 7: a quarantine that keeps a quorum from voting and ends after the last
            // attempt is not waited for.
            if let (Some(_), Cause::Quarantined { ready_in, .. }) = (next, failure.cause())
                && quarantine_blocks_quorum(&failure)
                && !schedule.reaches(ready_in, QUARANTINE_POLL)
            {
                next = None;
            }
            // Invariant 2; the last rollback also gives up the queue place (`waiting` invariant
            // 4) and tells a key of another type from a busy one.
            match next {
                Some(_) if set_nowhere => held.set_nowhere(),
                Some(_) => drop(held.roll_back().await),
                None => {
                    let rollback = held.give_up().await;
                    self.explain_refusals(&mut failure, &rollback, wanted.probed())
                        .await;
                }
            }
            let not_acquired = |failure| Error::NotAcquired {
                resource: wanted.to_string(),
                attempts,
                failure: Box::new(failure),
            };
            let Some(delay) = next else {
                if let Some(place) = place_kept {
                    place.disarm(); // the last rollback left the queue
                }
                return Err(not_acquired(failure));
            };
            let waiters = engine.rules.notify.then_some(&engine.waiters);
            let waiting = Waiting::start();
            match failure.cause() {
                // Invariant 6: a quarantine is waited out quietly, not polled.
                Cause::Quarantined {
                    ready_in, remedy, ..
                } => {
                    if !told_quarantine {
                        told_quarantine = true;
                        let advice = remedy
                            .map(|r| format!("; {}", r.advice(r.call(Reader::Rust))))
                            .unwrap_or_default();
                        tracing::warn!(
                            resource = %wanted,
                            ready_in_s = ready_in.as_secs_f64().ceil(),
                            "waiting for quarantined nodes: {}{advice}",
                            quarantined_nodes(&failure)
                        );
                    }
                    let wait = ready_in.min(QUARANTINE_POLL).max(delay);
                    tokio::time::sleep(schedule.capped(wait, Instant::now())).await;
                }
                _ => {
                    turn.wait(waiters, wanted.watched(), delay, behind, |wait| {
                        schedule.capped(wait, Instant::now())
                    })
                    .await;
                }
            }
            drop(waiting);
            if schedule.expired(Instant::now()) {
                // Nothing woke us before the deadline: give up without another attempt. The
                // round was rolled back; a release of a fresh value (the queue place's, if
                // any) gives up the queue place and tells a key of another type from a busy
                // one, as the last rollback does.
                let last = place_kept.unwrap_or_else(|| {
                    let probed = wanted.probed().clone();
                    Held::new(
                        Arc::clone(engine),
                        probed,
                        value::new(fresh::bytes(), Carried::NONE),
                        None,
                    )
                });
                let rollback = last.give_up().await;
                self.explain_refusals(&mut failure, &rollback, wanted.probed())
                    .await;
                return Err(not_acquired(failure));
            }
        }
    }

    /// One attempt at what is wanted: the lock, or the semaphore's permits one at a time from a
    /// random one, keeping the first won (`semaphore` invariant 4: the others are rolled back in
    /// the background, so the next is tried at once). A lost attempt at permits is the last
    /// permit's.
    async fn attempt_wanted(
        self: &Arc<Self>,
        wanted: &Wanted,
        tries: &Tries<'_>,
    ) -> Result<Won, Box<LostAttempt>> {
        let permits = match wanted {
            Wanted::Lock(resources)
            | Wanted::FencedLock(resources)
            | Wanted::Campaign(resources, _) => {
                return self.attempt(resources, tries).await;
            }
            Wanted::Permit(permits) => permits,
        };
        let ((mut permit, mut resources), mut rest) =
            permits.from(u32::from_le_bytes(fresh::bytes()));
        loop {
            let lost = match self.attempt(resources, tries).await {
                Ok(won) => {
                    return Ok(Won {
                        permit: Some(permit),
                        ..won
                    });
                }
                Err(lost) => lost,
            };
            // The next permit only if this one is busy (a quorum holds it): when nodes did not
            // answer, the next round would wait for them as long, and `max_wait` still holds.
            let busy = lost.failure.cause() == Cause::Busy;
            let out_of_time = tries.give_up_at.is_some_and(|at| Instant::now() >= at);
            let next = match rest.next() {
                Some(next) if busy && !out_of_time => next,
                _ => return Err(lost),
            };
            let LostAttempt {
                held, set_nowhere, ..
            } = *lost;
            if set_nowhere {
                held.set_nowhere();
            } else {
                drop(held); // released in the background (`lock` invariant 2)
            }
            (permit, resources) = next;
        }
    }

    /// One attempt: the `SET` round, then (fencing on, when the votes did not agree on the
    /// token) the round that stores it. Returns the lock, or what the loop needs to roll the
    /// attempt back and wait.
    async fn attempt(
        self: &Arc<Self>,
        resources: &Resources,
        tries: &Tries<'_>,
    ) -> Result<Won, Box<LostAttempt>> {
        let &Tries {
            ttl,
            ttl_ms,
            identity,
            fence_now,
            hold_off_ms,
            turn,
            ..
        } = tries;
        let engine = self;
        let advance = engine.rules.fence;
        // Armed before the first request: dropping this future mid-round releases (invariant 3
        // keeps that release from touching anybody else's lock).
        let value = match identity {
            // `value` invariant 1: the holder's late-release bound travels with the value.
            None => value::new(fresh::bytes(), engine.rules.carried()),
            Some(identity) => value::campaign(fresh::bytes(), identity, engine.rules.carried()),
        };
        let mut held = Held::new(Arc::clone(engine), resources.clone(), value, turn.id());
        let set = match (turn.place(), resources.access()) {
            (Some(place), _) => Request::SetQueued {
                ttl_ms,
                advance,
                place,
            },
            (None, Access::Read | Access::Write) => Request::SetReadWrite {
                ttl_ms,
                advance,
                hold_off_ms,
                writer: turn.id(),
            },
            (None, Access::Exclusive) => match advance {
                // `fencing` invariant 8: a lock's token is issued on request, unless the
                // manager fences every acquisition, or the caller takes it at once, or the lock
                // is a campaign's (whose counter must advance with its `SET`: `election`
                // invariant 5).
                Some(advance)
                    if fence_now
                        || engine.rules.fence_on_acquire
                        || engine.nodes.len() > Voters::MAX_NODES =>
                {
                    Request::SetFenced {
                        ttl_ms,
                        advance,
                        scripted: identity.is_some(),
                    }
                }
                _ => Request::Set { ttl_ms },
            },
        };
        let on_request = matches!(set, Request::Set { .. }) && advance.is_some();
        let mut round = engine
            .round(
                Until::Won,
                set,
                resources,
                held.value(),
                engine.rules.node_timeout,
            )
            .await;
        // A release must not overtake a `SET` still on its way (engine invariant 2).
        held.follows(round.stragglers.take());
        // Invariant 2's exception: every node answered, and none set our value.
        let set_nowhere = round.replies.iter().all(|r| *r == Reply::Refused);
        // A quorum puts another waiter first: we cannot win before a release names us.
        let behind = round.behind >= round.quorum;
        let mut deadline = engine.deadline_if_won(&round, ttl);
        let mut fence = None;
        if let (Some(valid_until), Some(advance), Some(token)) =
            (deadline, advance, round.proposals.token())
        {
            // Invariant 5 (`fencing` invariant 1): the token is stored on a quorum before anybody
            // may use it, by the acquisition itself when its votes agree, else by a round of its
            // own.
            if !token.stored {
                let store = Request::Fence {
                    token: token.value,
                    retention_ms: advance.retention_ms,
                };
                round = engine
                    .round(
                        Until::WonThenDriven,
                        store,
                        resources,
                        held.value(),
                        engine.rules.node_timeout,
                    )
                    .await;
                let stored = round.decision == Decision::Won && valid_until > Instant::now();
                deadline = stored.then_some(valid_until);
            }
            fence = Some(token.value);
        }
        let voters = on_request.then_some(round.voted);
        match deadline {
            Some(deadline) => Ok(Won {
                held,
                deadline,
                fence,
                voters,
                permit: None,
            }),
            None => Err(Box::new(LostAttempt {
                held,
                failure: round.failure(engine),
                set_nowhere,
                behind,
            })),
        }
    }
}

impl Engine {
    /// A key of another type makes `SET NX` fail like a held lock; the rollback's script tells
    /// the two apart, at no extra cost, so the failure's cause is
    /// [`Cause::WrongType`](crate::Cause) rather than busy. Except for a read-write lock's
    /// readers (a sorted set at the key): they hold the lock, so a lock they refused is busy. Only
    /// then, on a failure already reported as of another type, are the nodes read once more.
    async fn explain_refusals(
        &self,
        failure: &mut RoundFailure,
        rollback: &Released,
        resources: &Resources,
    ) {
        let mut other_type = false;
        for (reply, rolled) in failure.replies.iter_mut().zip(&rollback.replies) {
            if let (Reply::Refused | Reply::Pending, Reply::WrongType(_)) =
                (&reply.reply, &rolled.reply)
            {
                reply.reply = rolled.reply.clone();
                other_type = true;
            }
        }
        if !other_type || resources.keys().len() != 1 || resources.access() != Access::Exclusive {
            return;
        }
        let deadline = Instant::now() + self.rules.node_timeout;
        let states = join_all(
            self.nodes
                .iter()
                .map(|node| inspect(node, resources.first(), deadline)),
        )
        .await;
        for (reply, state) in failure.replies.iter_mut().zip(states) {
            if matches!(reply.reply, Reply::WrongType(_))
                && matches!(state, NodeState::Readers { .. })
            {
                reply.reply = Reply::Refused;
            }
        }
    }
}
