//! Leader election: one leader at a time per election, each with a term larger than every
//! earlier term, a loss signal, and a way for anybody to see who leads.
//!
//! A leader is the holder of the election's lock, kept alive ([`Guard`]): campaigning is
//! acquiring it and waiting until that succeeds, resigning is releasing it. Nothing about the
//! algorithm is new, so neither is the argument:
//!
//! # Invariants
//! 1. **At most one leader at a time**, while each leader stops leading at its guard's loss
//!    signal: the election's lock excludes (mutual exclusion, as for any lock).
//! 2. **The term is the acquisition's fencing token** ([`fencing`](crate::protocol::fencing)):
//!    larger than every earlier term of the election, across restarts of a minority, data loss
//!    covered by the quarantine and counter expiry. A campaign therefore needs fencing on. Whatever
//!    a leader does in the world should carry its term, so that a deposed leader that has not
//!    noticed yet is refused.
//! 3. **Who leads is written in the lock value**: a campaign's value is the usual 40 random hex
//!    digits, a `:`, and the candidate's identity. The value stays unique per acquisition
//!    (`acquire` invariant 3), and an observer learns the identity from the key itself, in the same
//!    read as the value: there is no second key that could disagree with it.
//! 4. **An observer's answer is a reading, not a vote.** [`Redlock::leader`] reports the value a
//!    majority of nodes hold right now; by the time it is read, that leader may have lost its
//!    lock. Only the leader's own validity (its guard) says it may act.
//! 5. On the nodes that hold the leader's value, the election's counter is its term: a counter
//!    advances only with a `SET` that succeeded, which cannot happen on a node that holds the
//!    leader's key, and the leader's acquisition left the term there. (So a campaign's
//!    acquisition always runs the fenced script: the native one advances the counter in attempts
//!    that lose too; [`fencing`](crate::protocol::fencing) step 1. For the same reason, an
//!    election's name must be locked by campaigns only: a plain fenced `acquire` of it while
//!    somebody leads moves the counter that observers read as the term, though not the leader's own
//!    term.) [`Leader::term`] is that
//!    value when a majority agree on it, `None` otherwise (a counter expired, or a node lagging).

use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redis::Value;

use crate::base::defaults::MAX_IDENTITY;
use crate::base::error::{ConfigError, Error};
use crate::base::resources::Resources;
use crate::handles::hold::Guard;
use crate::handles::redlock::Redlock;
use crate::nodes::node_error::NodeError;
use crate::nodes::scripts::LEADER;
use crate::protocol::quorum::majority;
use crate::round::retry::Retry;
use crate::round::waiting::Waiting;

/// The leader of an election, as a majority of nodes report it ([`Redlock::leader`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The identity the leader campaigned with; for a key set by a plain lock (not a campaign),
    /// its whole value.
    pub identity: String,
    /// The leader's lock value.
    pub value: String,
    /// The leader's term (invariant 5), when a majority of the nodes holding its value agree on
    /// it.
    pub term: Option<u64>,
    /// The shortest time to live of the leader's key on the majority that holds it.
    pub ttl: Duration,
}

/// Checks a candidate's identity.
fn check_identity(identity: &str) -> Result<(), ConfigError> {
    if identity.len() > MAX_IDENTITY {
        return Err(ConfigError::InvalidSetting {
            setting: "identity",
            reason: format!(
                "{} bytes is longer than {MAX_IDENTITY}: it travels in every request",
                identity.len()
            ),
        });
    }
    Ok(())
}

/// One node's answer to the leader read: its value (if a string) with its time to live, and the
/// election's counter.
#[derive(Debug, Default)]
struct Seen {
    value: Option<(String, Duration)>,
    counter: Option<u64>,
}

/// What a majority of `seen` hold: the leader, if any (invariants 4 and 5).
fn leader_of(seen: &[Seen], nodes: usize) -> Option<Leader> {
    let quorum = majority(nodes);
    let holders: Vec<&Seen> = seen.iter().filter(|s| s.value.is_some()).collect();
    let value = holders.iter().find_map(|candidate| {
        let (value, _) = candidate.value.as_ref()?;
        let same = holders
            .iter()
            .filter(|s| s.value.as_ref().map(|(v, _)| v) == Some(value))
            .count();
        (same >= quorum).then(|| value.clone())
    })?;
    let holding: Vec<&Seen> = holders
        .into_iter()
        .filter(|s| s.value.as_ref().map(|(v, _)| v) == Some(&value))
        .collect();
    let ttl = holding
        .iter()
        .filter_map(|s| s.value.as_ref().map(|(_, ttl)| *ttl))
        .min()
        .unwrap_or_default();
    let term = holding.iter().find_map(|candidate| {
        let counter = candidate.counter?;
        let agree = holding
            .iter()
            .filter(|s| s.counter == Some(counter))
            .count();
        (agree >= quorum).then_some(counter)
    });
    Some(Leader {
        identity: crate::protocol::value::identity(&value).to_owned(),
        value,
        term,
        ttl,
    })
}

impl Redlock {
    /// Campaigns in `election` as `identity`, waiting (by the manager's [`Retry`] policy) until
    /// this candidate leads; returns the leadership as a [`Guard`] that keeps it alive.
    ///
    /// - The term is [`LockInfo::fence`](crate::LockInfo::fence): larger than every earlier
    ///   term of the election. Pass it with everything the leader does.
    /// - [`Guard::lost`] / [`Guard::lost_token`] fire the moment leadership is lost; stop acting
    ///   as leader then.
    /// - Resign with [`Guard::release`]; a leader that crashes is succeeded once its TTL runs out
    ///   (plus the [`lock_delay`](crate::Builder::lock_delay), if any).
    ///
    /// To wait for as long as it takes (a hot standby), use [`campaign_with`](Self::campaign_with)
    /// and [`Retry::forever`]. See the module docs of `election` (`docs/primitives.md`: *Leader
    /// election*) for the argument.
    ///
    /// # Errors
    /// [`Error::NotAcquired`] when the retry policy gave up; [`Error::Config`] when fencing is
    /// off (the term is a fencing token), the identity is longer than
    /// [`MAX_IDENTITY`](crate::base::defaults::MAX_IDENTITY) bytes, or
    /// the TTL leaves no validity.
    ///
    /// # Panics
    /// Outside a Tokio runtime, as [`Lock::keep_alive`](crate::Lock::keep_alive).
    pub async fn campaign(
        &self,
        election: &str,
        identity: &str,
        ttl: Duration,
    ) -> Result<Guard, Error> {
        let retry = self.engine().rules.retry.clone();
        self.campaign_with(election, identity, ttl, &retry).await
    }

    /// [`campaign`](Self::campaign) with a retry policy for this call only, e.g.
    /// [`Retry::forever`].
    pub async fn campaign_with(
        &self,
        election: &str,
        identity: &str,
        ttl: Duration,
        retry: &Retry,
    ) -> Result<Guard, Error> {
        if self.engine().rules.fence.is_none() {
            return Err(ConfigError::InvalidSetting {
                setting: "fencing",
                reason: "a leader's term is its fencing token: campaign with fencing on".into(),
            }
            .into());
        }
        check_identity(identity)?;
        let lock = self.acquire_as(election, identity, ttl, retry).await?;
        Ok(lock.keep_alive(ttl))
    }

    /// Who leads `election` now, as a majority of nodes report it (`None`: no value is held by
    /// a majority, e.g. between two leaders). A reading, not a promise (invariant 4): only the
    /// leader's own guard says it may act.
    ///
    /// # Cancel safety
    /// Read-only.
    pub async fn leader(&self, election: &str) -> Option<Leader> {
        let engine = self.engine();
        let deadline = Instant::now() + engine.rules.node_timeout;
        let seen: Vec<Seen> = join_all(engine.nodes.iter().map(|node| async move {
            node.read(&LEADER, election, deadline)
                .await
                .and_then(read_seen)
                .unwrap_or_default()
        }))
        .await;
        leader_of(&seen, engine.nodes.len())
    }

    /// A watch on `election`'s leader: [`LeaderWatch::changed`] returns each change of leader
    /// (the first call, the current one).
    pub fn observe(&self, election: &str) -> LeaderWatch {
        LeaderWatch {
            redlock: self.clone(),
            election: Resources::one(election),
            last: None,
            started: false,
            waiting: None,
        }
    }
}

/// A stream of an election's leaders ([`Redlock::observe`]). While a leader is seen, the watch is
/// woken when the election's key is freed (its resignation or expiry, through the same key
/// tracking that wakes waiters, with a poll every second as the fallback); while there is none, it
/// polls every node timeout until one shows.
#[derive(Debug)]
pub struct LeaderWatch {
    redlock: Redlock,
    election: Resources,
    last: Option<Leader>,
    started: bool,
    waiting: Option<Waiting>,
}

/// How often a watch looks while a leader is seen, should no release wake it.
const POLL_WHILE_LED: Duration = Duration::from_secs(1);

impl LeaderWatch {
    /// Waits for the next change of leader and returns it (`None`: nobody leads now). Two leaders
    /// in a row with the same identity are still a change: their values differ.
    ///
    /// # Cancel safety
    /// Read-only: dropping the future loses nothing; the next call compares with the last
    /// leader returned.
    pub async fn changed(&mut self) -> Option<Leader> {
        loop {
            let first = !self.started;
            if !first {
                self.wait().await;
            }
            let now = self.redlock.leader(self.election.first()).await;
            // Only once the reading is in: a first call dropped half-way is still a first call.
            self.started = true;
            let same = now.as_ref().map(|l| &l.value) == self.last.as_ref().map(|l| &l.value);
            if first || !same {
                self.last.clone_from(&now);
                return now;
            }
        }
    }

    /// The last leader [`changed`](Self::changed) returned.
    pub fn last(&self) -> Option<&Leader> {
        self.last.as_ref()
    }

    async fn wait(&mut self) {
        let engine = self.redlock.engine();
        if self.last.is_none() {
            tokio::time::sleep(engine.rules.node_timeout).await;
            return;
        }
        if engine.rules.notify && self.waiting.is_none() {
            // As an observer: woken with every release, never instead of a contender.
            self.waiting = Some(engine.waiters.observe(&self.election));
        }
        match &self.waiting {
            Some(waiting) => waiting.woken_or(POLL_WHILE_LED).await,
            None => tokio::time::sleep(POLL_WHILE_LED).await,
        }
    }
}

/// Reads the leader script's `{value or nil, pttl, counter or nil}`.
fn read_seen(reply: Value) -> Result<Seen, NodeError> {
    let Value::Array(items) = &reply else {
        return Err(NodeError::Server(format!(
            "unexpected leader reply: {reply:?}"
        )));
    };
    let text = |v: Option<&Value>| match v {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        _ => None,
    };
    let pttl = match items.get(1) {
        Some(Value::Int(ms)) => u64::try_from(*ms).ok().map(Duration::from_millis),
        _ => None,
    };
    Ok(Seen {
        value: text(items.first()).zip(pttl),
        counter: text(items.get(2)).and_then(|c| c.parse().ok()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANDOM: &str = "0123456789abcdef0123456789abcdef01234567";

    fn seen(value: Option<&str>, counter: Option<u64>) -> Seen {
        Seen {
            value: value.map(|v| (v.to_owned(), Duration::from_secs(5))),
            counter,
        }
    }

    #[test]
    fn the_leader_is_the_value_a_majority_holds_with_their_common_counter() {
        let a = format!("{RANDOM}:a");
        let seen_list = [
            seen(Some(&a), Some(7)),
            seen(Some("x"), Some(9)),
            seen(Some(&a), Some(7)),
        ];
        let leader = leader_of(&seen_list, 3).unwrap();
        assert_eq!((leader.identity.as_str(), leader.term), ("a", Some(7)));

        let split = [
            seen(Some(&a), Some(7)),
            seen(Some(&a), Some(8)),
            seen(None, None),
        ];
        assert_eq!(
            leader_of(&split, 3).unwrap().term,
            None,
            "no majority on the counter"
        );

        let minority = [seen(Some(&a), Some(7)), seen(None, None), seen(None, None)];
        assert_eq!(leader_of(&minority, 3), None);
    }

    #[test]
    fn identities_are_bounded() {
        assert!(check_identity(&"x".repeat(MAX_IDENTITY)).is_ok());
        assert!(check_identity(&"x".repeat(MAX_IDENTITY + 1)).is_err());
    }
}
