//! One file because the model is one state machine: every step and helper acts on one `State`.
//!
//! The model's steps: how every action moves the state ([`state`](crate::state)), within the
//! bounds. A plain [`stateright::Model`] state machine (see the crate docs for why not actors).

use std::time::{Duration, Instant};

use redquorum::protocol::fencing::{Advance, Proposal, Proposals, clock_grain, trust_window};
use redquorum::protocol::first_sight::{Outcome, Sighting, decide, sighting};
use redquorum::protocol::mark::{Vouch, refused};
use redquorum::protocol::quarantine::TrustPolicy;
use redquorum::protocol::quorum::{Decision, Tally};
use redquorum::protocol::validity::{drift, late_release_bound};
use stateright::{Model, Property};

use crate::client::{self, Client, Conn, Fence, Look, Phase, Settings, Sight};
use crate::clock::instant;
use crate::faults::{self, Fault};
use crate::node::{AcquireReply, Found, MarkerId, Node};
use crate::properties;
use crate::rules::Rules;
pub use crate::state::{Action, Bounds, Msg, Protocol, Request, State};
use crate::state::{Broken, Seen};

impl Protocol {
    /// The model of `bounds` under `rules`.
    pub fn new(bounds: Bounds, rules: Rules) -> Self {
        let max_ttl = Duration::from_millis(u64::from(bounds.ttl_ms + bounds.lock_delay_ms));
        let grain_us = clock_grain(max_ttl, rules.quarantine);
        let advance = Advance {
            retention_ms: 2 * u64::from(bounds.ttl_ms + bounds.lock_delay_ms),
            grain_us,
            window_us: trust_window(max_ttl, grain_us),
        };
        let drift_factor = 0.01;
        let node_timeout = Duration::from_millis(u64::from(bounds.node_timeout_ms));
        // What `engine::release` sends: the holder knows its deadline.
        let release_bound_ms = if rules.release_bound_covers_lag {
            let bound = late_release_bound(
                u64::from(bounds.lock_delay_ms),
                true,
                node_timeout,
                max_ttl,
                drift_factor,
            );
            u16::try_from(bound).unwrap_or(u16::MAX)
        } else {
            bounds.lock_delay_ms
        };
        let settings = Settings {
            ttl_ms: bounds.ttl_ms,
            lock_delay_ms: bounds.lock_delay_ms,
            node_timeout,
            release_bound_ms,
            drift_factor,
            policy: TrustPolicy {
                enabled: rules.quarantine,
                max_ttl,
                trust_durable: bounds.durable,
                owner_history: rules.marker_names_replid,
                hand_markers_vouch: !rules.undrawn_marker_replaced,
            },
            advance,
            cluster: bounds.cluster,
            sentinel: bounds.sentinel,
            first_sight: rules.quarantine
                && !bounds.cluster
                && (bounds.trust_first_sight || !rules.first_sight_opt_in),
            sight_margin_ms: u64::try_from(drift(max_ttl, drift_factor).as_millis())
                .unwrap_or(u64::MAX)
                + 1,
            // `Rules::carried` of the holder's engine.
            carried: redquorum::protocol::value::Carried {
                late_bound_ms: late_release_bound(
                    u64::from(bounds.lock_delay_ms),
                    false,
                    node_timeout,
                    max_ttl,
                    drift_factor,
                ),
                lock_delay_ms: u64::from(bounds.lock_delay_ms),
            },
        };
        Self {
            bounds,
            rules,
            settings,
        }
    }

    fn n(&self) -> usize {
        usize::from(self.bounds.nodes)
    }

    /// Whether the nodes have replicas (cluster or replicated nodes).
    fn replicas(&self) -> bool {
        self.bounds.cluster || self.bounds.sentinel
    }

    /// A replicated node's `WAIT` after a vote (`succession` invariant 1): a yes (`yes`) from
    /// node `n`'s primary to client `c`, in reply to a request the client still waits for, is a
    /// vote only once the replica acknowledged it. The model lets the replica acknowledge in the
    /// same step (it catches up: it then holds this write and every one before it), and records
    /// it caught up as of the round's start (`Connection::vote_done`); a `WAIT` that times out
    /// is a reply not counted, as the network's timeout gives. With the rule removed the
    /// primary's yes counts alone. Other nodes: the yes as it is.
    fn acknowledged(&self, s: &mut State, c: usize, n: usize, yes: bool) -> bool {
        if !(self.bounds.sentinel && self.rules.vote_waits_for_replicas && yes) {
            return yes;
        }
        faults::replicate(&mut s.nodes[n]);
        let Some(replica) = s.nodes[n].replica else {
            return yes;
        };
        let sent = match s.clients[c].phase {
            Phase::Acquiring { start, .. }
            | Phase::Storing { start, .. }
            | Phase::Extending { start, .. }
            | Phase::Fencing { start, .. }
            | Phase::FenceStoring { start, .. } => start,
            Phase::Idle | Phase::Holding { .. } => s.clients[c].clock(s.t),
        };
        let conn = &mut s.clients[c].conns[n];
        if let Some((_, history)) = conn.server {
            conn.lineage.caught_up(replica.addr, history, sent);
        }
        yes
    }

    /// Counts one reply of a round in the library's `tally` (and `votes`, the grants counted),
    /// and decides: the library's decision, or `N/2` grants with the rule off.
    fn decide(&self, tally: &mut Tally, votes: &mut u8, vote: bool) -> Decision {
        let decided = tally.record(vote);
        if vote {
            *votes += 1;
        }
        if self.rules.strict_majority {
            decided
        } else {
            client::decision(tally, *votes, self.n(), &self.rules)
        }
    }

    /// Client `c` waits for no reply to value `value` any more (its round was decided).
    fn stop_waiting(s: &mut State, c: usize, value: u8) {
        for m in s.net.iter_mut() {
            if usize::from(m.client) == c && m.value == value {
                m.awaited = false;
            }
        }
    }

    /// A token is issued for the acquisition decided `order`th: it must be above every token
    /// issued before (property 2), and above every token of an earlier acquisition and below
    /// every token of a later one (property 3).
    fn issue(s: &mut State, order: u8, token: u64) {
        if s.issued.iter().any(|&(_, t)| token <= t) {
            s.broken.tokens_not_increasing = true;
        }
        for &(o, t) in &s.issued {
            if (o < order && t >= token) || (o > order && t <= token) {
                s.broken.tokens_out_of_order = true;
            }
        }
        s.issued.push((order, token));
        s.issued.sort_unstable();
    }

    /// Once no decided acquisition waits for its token (none in a store round, none holding
    /// without a token it may still ask for), every token issued later belongs to an
    /// acquisition decided later than all those issued: property 3 then compares it with their
    /// largest alone, as property 2 does. So the order of decisions starts again, and only that
    /// largest token is kept (with order 0, below every later one): states that differ only in
    /// how they got there are one, and a check with every client fencing eagerly explores no
    /// more states than before property 3.
    fn forget_orders(s: &mut State) {
        let waiting = s.clients.iter().any(|c| match &c.phase {
            Phase::Storing { .. } | Phase::Fencing { .. } | Phase::FenceStoring { .. } => true,
            Phase::Holding { fence, .. } | Phase::Extending { fence, .. } => fence.askable(),
            Phase::Idle | Phase::Acquiring { .. } => false,
        });
        if !waiting {
            s.decided = 0;
            if let Some(largest) = s.issued.iter().map(|&(_, t)| t).max() {
                s.issued = vec![(0, largest)];
            }
        }
    }

    /// A holder's hand-out, with its token if it came with the acquisition (decided `order`th):
    /// nobody else may be a valid holder; nobody may win inside another's lock-delay.
    fn hand_out(
        &self,
        s: &mut State,
        c: usize,
        value: u8,
        deadline: std::time::Instant,
        fence: Fence,
        order: u8,
    ) {
        if let Some(token) = fence.token {
            Self::issue(s, order, token);
        }
        let delay = Duration::from_millis(u64::from(self.bounds.lock_delay_ms));
        for (other, client) in s.clients.iter().enumerate() {
            if other == c {
                continue;
            }
            if client.valid(client.clock(s.t)) {
                s.broken.two_holders = true;
            }
            if let Some((_, their_deadline, released)) = client.last_hold
                && !released
                && self.bounds.lock_delay_ms > 0
            {
                if instant(client.clock(s.t)) < their_deadline + delay {
                    s.broken.lock_delay_cut_short = true;
                } else {
                    s.seen.lock_delay_ended = true;
                }
            }
        }
        s.clients[c].phase = Phase::Holding {
            value,
            deadline,
            fence,
        };
        s.clients[c].last_hold = Some((value, deadline, false));
        s.handouts = s.handouts.saturating_add(1);
        s.clients[c].hold_since = s.handouts;
        if s.faults_left == 0 {
            s.acquired_after_faults = true;
        }
    }

    /// Sends `request` from client `c` to every node in `to`.
    fn send(
        &self,
        s: &mut State,
        c: usize,
        value: u8,
        to: &[usize],
        request: Request,
        awaited: bool,
    ) {
        for &n in to {
            let server = s.clients[c].conns[n]
                .server
                .unwrap_or_else(|| s.nodes[n].server());
            let request = match request {
                Request::Acquire { .. } => Request::Acquire {
                    estimate_us: crate::clock::node_us(s.nodes[n].clock(s.t)),
                },
                other => other,
            };
            s.net.push(Msg {
                client: u8::try_from(c).unwrap_or(u8::MAX),
                node: u8::try_from(n).unwrap_or(u8::MAX),
                server,
                value,
                request,
                awaited,
            });
        }
        s.net.sort();
    }

    /// A round that did not win: roll back on every node, and let the client try again.
    ///
    /// The release is not sent to a node where it can only be a no-op, to spare the checker
    /// its deliveries: one that already ran this round's request and holds no key of this
    /// value, on its master or its replica. Values are never reused, so no key of this value
    /// can appear there any more; and a lost round's value was never handed out, so its
    /// release bears on no property.
    fn roll_back(&self, s: &mut State, c: usize, value: u8) {
        let ours = |m: &Msg| usize::from(m.client) == c && m.value == value;
        let to: Vec<usize> = (0..self.n())
            .filter(|&n| {
                let pending = s.net.iter().any(|m| {
                    ours(m)
                        && usize::from(m.node) == n
                        && !matches!(m.request, Request::Release { .. })
                });
                let node = &s.nodes[n];
                let holds = [Some(node.master), node.replica]
                    .into_iter()
                    .flatten()
                    .any(|p| p.data.lock.is_some_and(|k| k.value == value));
                pending || holds
            })
            .collect();
        self.send(
            s,
            c,
            value,
            &to,
            Request::Release {
                bound_ms: 0,
                by_value: false,
            },
            false,
        );
        for m in s.net.iter_mut() {
            if usize::from(m.client) == c
                && m.value == value
                && !matches!(m.request, Request::Release { .. })
            {
                m.awaited = false;
            }
        }
        s.clients[c].phase = Phase::Idle;
    }

    /// Client `c`, if it holds a lock, starts a round of `request` on every node: `round` turns
    /// the hold (its value, deadline and fence) and the client's clock now into the round's
    /// phase, or refuses it. `None`, changing nothing, when it does not hold or `round` refuses.
    fn start_round(
        &self,
        s: &mut State,
        c: u8,
        request: Request,
        round: impl FnOnce(u8, Instant, Fence, u16) -> Option<Phase>,
    ) -> Option<()> {
        let c = usize::from(c);
        let Phase::Holding {
            value,
            deadline,
            fence,
        } = s.clients[c].phase
        else {
            return None;
        };
        let client = &mut s.clients[c];
        client.phase = round(value, deadline, fence, client.clock(s.t))?;
        let all: Vec<usize> = (0..self.n()).collect();
        self.send(s, c, value, &all, request, true);
        Some(())
    }

    /// The client counts one reply (`vote` or not) of its current round.
    fn count(
        &self,
        s: &mut State,
        c: usize,
        value_in: u8,
        vote: bool,
        proposal: Option<(Proposal, bool)>,
    ) {
        let now = s.clients[c].clock(s.t);
        let n = self.n();
        let mut phase = s.clients[c].phase.clone();
        let Some((tally, votes, proposals)) = phase.round_mut(value_in) else {
            return;
        };
        // As in the library's rounds, every proposal that came back is added, counted or not:
        // a fence round's agreement is the counted ones', the largest any node's (a larger
        // token, stored on a quorum of voters all the same).
        if let (Some(proposals), Some((p, counted))) = (proposals, proposal) {
            proposals.add(p, counted);
        }
        let mut decided = self.decide(tally, votes, vote);
        if let Phase::Extending { votes, .. } = phase
            && !self.rules.extension_needs_quorum
            && votes > 0
        {
            // The rule removed: one node that extended is enough.
            decided = Decision::Won;
        }
        if decided == Decision::Open {
            // Undecided: the round goes on with this reply counted.
            s.clients[c].phase = phase;
            return;
        }
        let won = decided == Decision::Won;
        match phase {
            Phase::Acquiring {
                value,
                start,
                proposals,
                voters,
                ..
            } => {
                let on_request = s.clients[c].on_request;
                let deadline = client::round_deadline(&self.settings, &self.rules, start);
                match (deadline, proposals.token()) {
                    // A plain `SET`: the lock without a token, which its holder may ask for
                    // later, counted on these voters.
                    (Some(deadline), _) if won && on_request && instant(now) < deadline => {
                        Self::stop_waiting(s, c, value);
                        s.decided = s.decided.saturating_add(1);
                        let order = s.decided;
                        let fence = Fence {
                            token: None,
                            voters,
                            order,
                        };
                        self.hand_out(s, c, value, deadline, fence, order);
                    }
                    (Some(deadline), Some(token))
                        if won && !on_request && instant(now) < deadline =>
                    {
                        Self::stop_waiting(s, c, value);
                        s.decided = s.decided.saturating_add(1);
                        let order = s.decided;
                        if token.stored {
                            let fence = Fence::issued(token.value);
                            self.hand_out(s, c, value, deadline, fence, order);
                        } else {
                            let all: Vec<usize> = (0..n).collect();
                            self.send(
                                s,
                                c,
                                value,
                                &all,
                                Request::Store { token: token.value },
                                true,
                            );
                            s.clients[c].phase = Phase::Storing {
                                value,
                                start,
                                token: token.value,
                                tally: Tally::new(n),
                                votes: 0,
                                order,
                            };
                        }
                    }
                    _ => self.roll_back(s, c, value),
                }
            }
            Phase::Storing {
                value,
                start,
                token,
                order,
                ..
            } => match client::round_deadline(&self.settings, &self.rules, start) {
                Some(deadline) if won && instant(now) < deadline => {
                    Self::stop_waiting(s, c, value);
                    let fence = Fence::issued(token);
                    self.hand_out(s, c, value, deadline, fence, order);
                }
                _ => self.roll_back(s, c, value),
            },
            Phase::Extending {
                value,
                deadline,
                fence,
                start,
                ..
            } => {
                let holding = |deadline| Phase::Holding {
                    value,
                    deadline,
                    fence,
                };
                // `engine::deadline_if_won`: the new deadline from the round's start, if it is
                // still ahead; else the lock keeps the deadline it had.
                match client::round_deadline(&self.settings, &self.rules, start) {
                    Some(new) if won && instant(now) < new => {
                        if s.handouts != s.clients[c].hold_since {
                            s.broken.extended_across_another = true;
                        }
                        s.clients[c].phase = holding(new);
                        if let Some(hold) = s.clients[c].last_hold.as_mut() {
                            hold.1 = new;
                        }
                    }
                    _ => s.clients[c].phase = holding(deadline),
                }
                Self::stop_waiting(s, c, value);
            }
            Phase::Fencing {
                value,
                deadline,
                fence,
                proposals,
                ..
            } => {
                match proposals.token() {
                    // Still valid when the round is decided: steps 2 and 3.
                    Some(token) if won && instant(now) < deadline => {
                        if token.stored {
                            Self::issue(s, fence.order, token.value);
                            s.seen.fenced_on_request = true;
                            s.clients[c].phase = Phase::Holding {
                                value,
                                deadline,
                                fence: Fence::issued(token.value),
                            };
                        } else {
                            Self::stop_waiting(s, c, value);
                            let all: Vec<usize> = (0..n).collect();
                            let request = Request::Store { token: token.value };
                            self.send(s, c, value, &all, request, true);
                            s.clients[c].phase = Phase::FenceStoring {
                                value,
                                deadline,
                                start: now,
                                fence,
                                token: token.value,
                                tally: Tally::new(n),
                                votes: 0,
                            };
                            return;
                        }
                    }
                    // Refused, or won too late: no token; the holder asks again only with
                    // `fence_again`.
                    _ => s.clients[c].phase = self.fence_failed(value, deadline, fence),
                }
                Self::stop_waiting(s, c, value);
            }
            Phase::FenceStoring {
                value,
                deadline,
                fence,
                token,
                ..
            } => {
                if won && instant(now) < deadline {
                    Self::issue(s, fence.order, token);
                    s.seen.fenced_on_request = true;
                    s.seen.fenced_by_store = true;
                    s.clients[c].phase = Phase::Holding {
                        value,
                        deadline,
                        fence: Fence::issued(token),
                    };
                } else {
                    s.clients[c].phase = self.fence_failed(value, deadline, fence);
                }
                Self::stop_waiting(s, c, value);
            }
            Phase::Idle | Phase::Holding { .. } => {}
        }
    }

    /// Client `c`'s first-sight protocol takes its step on node `n` (`vouch::FirstSight`): a
    /// look (`marker.lua` with the `new.` tag, `INFO`, the library's `first_sight::sighting`),
    /// and after the last look the library's `first_sight::decide`; an extension; a vouch. A
    /// step that fails ends the protocol (the nodes wait out their quarantine); the last vouch
    /// has the client's health checks read the vouched markers.
    fn sight(&self, s: &mut State, c: usize, n: usize) {
        let node_now = s.nodes[n].clock(s.t);
        let node_ms = crate::clock::node_unix_ms(node_now);
        let max_ttl = self.settings.policy.max_ttl;
        let max_ttl_ms = u64::try_from(max_ttl.as_millis()).unwrap_or(u64::MAX);
        let margin = self.settings.sight_margin_ms;
        let sight = std::mem::replace(&mut s.clients[c].sight, Sight::Idle);
        // The health checks that waited for the group read the markers again (`health::check`).
        let recheck = |s: &mut State, looks: &[Look]| {
            for (conn, look) in s.clients[c].conns.iter_mut().zip(looks) {
                if matches!(look, Look::Unmarked(..)) {
                    conn.server = None;
                }
            }
        };
        match sight {
            Sight::Looking(mut looks) => {
                let fresh = s.nodes[n].next.marker;
                let (marker, written) =
                    s.nodes[n].marker_script(node_now, None, fresh, max_ttl_ms, true, None);
                if written != 0 {
                    s.nodes[n].next.marker = fresh.wrapping_add(1);
                }
                let run = s.nodes[n].master.run;
                let info = s.nodes[n].info(node_now);
                let margin = Duration::from_millis(margin);
                looks[n] = match sighting(&marker.value(), node_ms, &info, max_ttl, margin) {
                    Sighting::Unmarked { .. } => Look::Unmarked(marker.id, run),
                    _ => Look::Excluded,
                };
                if looks.contains(&Look::Unread) {
                    s.clients[c].sight = Sight::Looking(looks);
                    return;
                }
                let proceed = if self.rules.first_sight_needs_group {
                    let sightings: Vec<(String, Sighting)> = looks
                        .iter()
                        .enumerate()
                        .map(|(i, look)| {
                            let sighting = match look {
                                Look::Unmarked(..) => Sighting::Unmarked { id: String::new() },
                                _ => Sighting::Excluded(String::new()),
                            };
                            (i.to_string(), sighting)
                        })
                        .collect();
                    decide(&sightings) == Outcome::Vouched
                } else {
                    looks.iter().any(|l| matches!(l, Look::Unmarked(..)))
                };
                if proceed {
                    let done = looks.iter().map(|l| *l == Look::Excluded).collect();
                    s.clients[c].sight = Sight::Extending(looks, done);
                }
            }
            Sight::Extending(looks, mut done) => {
                let Look::Unmarked(id, _) = looks[n] else {
                    return;
                };
                match s.nodes[n].vouch_extend(node_now, id, max_ttl_ms, margin) {
                    (true, _) => {
                        done[n] = true;
                        s.clients[c].sight = if done.iter().all(|d| *d) {
                            let done = looks.iter().map(|l| *l == Look::Excluded).collect();
                            Sight::Vouching(looks, done)
                        } else {
                            Sight::Extending(looks, done)
                        };
                    }
                    // Another client's protocol vouched: the health checks read its vouch.
                    (false, Found::Vouched) => recheck(s, &looks),
                    (false, _) => {}
                }
            }
            Sight::Vouching(looks, mut done) => {
                let Look::Unmarked(id, run) = looks[n] else {
                    return;
                };
                if s.nodes[n].vouch_group(node_now, id, run, margin).0 {
                    done[n] = true;
                    if done.iter().all(|d| *d) {
                        recheck(s, &looks);
                    } else {
                        s.clients[c].sight = Sight::Vouching(looks, done);
                    }
                }
            }
            Sight::Idle => {}
        }
    }

    /// What a holder's fence round that failed leaves (refused, or won too late): holding `value`
    /// until `deadline` without a token and, with `fence_again`, the voters to ask again;
    /// otherwise nothing (the holder asks at most once).
    fn fence_failed(&self, value: u8, deadline: Instant, fence: Fence) -> Phase {
        let fence = if self.bounds.fence_again {
            fence
        } else {
            Fence::default()
        };
        Phase::Holding {
            value,
            deadline,
            fence,
        }
    }

    /// Whether a reply of node `n` to client `c`'s fence round or its store round (`yes`: it
    /// proposed, or stored) came back, and whether it counts. It comes back within the node
    /// timeout of the round's start, with the marker read back as with every vote (the library
    /// checks every request's reply: a node that lost its data is no vote, and is quarantined);
    /// it counts if it is also from one of the lock's voters (with `fence_counts_voters_only`;
    /// off, any node where our key is).
    fn fence_reply(&self, s: &mut State, c: usize, n: usize, value: u8, yes: bool) -> (bool, bool) {
        let now = s.clients[c].clock(s.t);
        let (start, voters) = match s.clients[c].phase {
            Phase::Fencing {
                value: v,
                start,
                fence,
                ..
            }
            | Phase::FenceStoring {
                value: v,
                start,
                fence,
                ..
            } if v == value => (start, fence.voters),
            _ => return (false, false),
        };
        if instant(now) > instant(start) + self.settings.node_timeout {
            return (false, false);
        }
        // As the library: a fence or store reply reads no marker back (`commands::perform` checks
        // acquisitions only); our key is the evidence.
        let server = s.nodes[n].server();
        let vote = client::unchecked_vote(&s.clients[c].conns[n], server, yes, now);
        let counted = vote && (voters & (1 << n) != 0 || !self.rules.fence_counts_voters_only);
        (vote, counted)
    }

    /// The node runs `m`; its reply reaches the client if it still waits for it.
    fn deliver(&self, s: &mut State, m: Msg) {
        let (c, n) = (usize::from(m.client), usize::from(m.node));
        let node_now = s.nodes[n].clock(s.t);
        let client_now = s.clients[c].clock(s.t);
        if s.nodes[n].server().0 != m.server.0 {
            // The connection broke (a restart), or reaches a process that no longer leads the
            // slot (a failover: `MOVED`): nothing ran. A failback leads it back to the same
            // process, where it runs again, as Redis keeps a connection across a change of role.
            if m.awaited {
                self.count(s, c, m.value, false, None);
            }
            return;
        }
        match m.request {
            Request::Acquire { .. } | Request::Set => {
                // A reply after the node timeout is no vote: the client stopped waiting.
                let in_time = match s.clients[c].phase {
                    Phase::Acquiring { value, start, .. } if value == m.value => {
                        instant(client_now) <= instant(start) + self.settings.node_timeout
                    }
                    _ => true,
                };
                let advance = self.settings.advance;
                let initial = |estimate_us| {
                    advance
                        .starts_counters()
                        .then(|| advance.initial_counter(estimate_us))
                };
                let life = self.bounds.ttl_ms + self.bounds.lock_delay_ms;
                let reply: AcquireReply = match m.request {
                    Request::Acquire { estimate_us } => s.nodes[n].acquire(
                        node_now,
                        m.value,
                        life,
                        initial(estimate_us),
                        advance.grain_us,
                        self.bounds.cluster,
                    ),
                    _ => s.nodes[n].set_plain(node_now, m.value, life),
                };
                if m.awaited && !in_time {
                    self.count(s, c, m.value, false, None);
                } else if m.awaited {
                    let granted = self.acknowledged(s, c, n, reply.granted);
                    let server = s.nodes[n].server();
                    let counted = client::vote(
                        &mut s.clients[c].conns[n],
                        server,
                        reply.marker.as_ref(),
                        granted,
                        client_now,
                        &self.settings,
                        &self.rules,
                    );
                    if counted && s.clients[c].conns[n].quarantined {
                        s.seen.quarantine_ended = true;
                    }
                    if counted && self.bounds.sentinel && s.nodes[n].master.previous.is_some() {
                        s.seen.promoted_voted = true;
                    }
                    if counted
                        && s.clients[c].conns[n]
                            .marker
                            .is_some_and(|m| matches!(m.tag, crate::node::MarkerTag::Group { .. }))
                    {
                        s.seen.vouched_by_group = true;
                    }
                    // A plain `SET` proposes nothing; its client keeps its voters.
                    let plain = m.request == Request::Set;
                    if let Phase::Acquiring { voters, value, .. } = &mut s.clients[c].phase
                        && plain
                        && counted
                        && *value == m.value
                    {
                        *voters |= 1 << n;
                    }
                    let proposal = (reply.granted && !plain)
                        .then(|| (client::proposal(&reply, &advance, &self.rules), counted));
                    self.count(s, c, m.value, counted, proposal);
                }
            }
            Request::Extend => {
                let in_time = match s.clients[c].phase {
                    Phase::Extending { value, start, .. } if value == m.value => {
                        instant(client_now) <= instant(start) + self.settings.node_timeout
                    }
                    _ => true,
                };
                let life = self.bounds.ttl_ms + self.bounds.lock_delay_ms;
                let done = s.nodes[n].extend(node_now, m.value, life);
                if m.awaited && !in_time {
                    self.count(s, c, m.value, false, None);
                } else if m.awaited {
                    // As the library: an extension reads no marker back (`commands::perform` checks
                    // acquisitions only); our key is the evidence.
                    let done = self.acknowledged(s, c, n, done);
                    let server = s.nodes[n].server();
                    let conn = &s.clients[c].conns[n];
                    let counted = client::unchecked_vote(conn, server, done, client_now);
                    self.count(s, c, m.value, counted, None);
                }
            }
            Request::Linger => {
                s.nodes[n].linger(node_now, m.value, self.bounds.lock_delay_ms);
            }
            Request::FenceHeld => {
                let proposal = s.nodes[n].fence_held(
                    node_now,
                    m.value,
                    self.settings.advance.grain_us,
                    self.rules.fence_needs_held_key,
                );
                if m.awaited {
                    let yes = self.acknowledged(s, c, n, proposal.is_some());
                    let (back, counted) = self.fence_reply(s, c, n, m.value, yes);
                    let proposal = proposal.filter(|_| back).map(|value| {
                        let stored = true; // the script's advance
                        (Proposal { value, stored }, counted)
                    });
                    self.count(s, c, m.value, counted, proposal);
                }
            }
            Request::Store { token }
                if matches!(s.clients[c].phase,
                    Phase::FenceStoring { value, .. } if value == m.value) =>
            {
                let stored = s.nodes[n].store(m.value, token);
                if m.awaited {
                    let stored = self.acknowledged(s, c, n, stored);
                    let (_, counted) = self.fence_reply(s, c, n, m.value, stored);
                    self.count(s, c, m.value, counted, None);
                }
            }
            Request::Store { token } => {
                let stored = s.nodes[n].store(m.value, token);
                if m.awaited {
                    let stored = self.acknowledged(s, c, n, stored);
                    let conn = &s.clients[c].conns[n];
                    let trusted = conn.trusted_from.is_some_and(|f| instant(client_now) >= f);
                    self.count(s, c, m.value, stored && trusted, None);
                }
            }
            Request::Release { bound_ms, by_value } => {
                let bound = if self.rules.release_honours_delay {
                    bound_ms
                } else {
                    0
                };
                let (_, left) = s.nodes[n].release(node_now, m.value, bound);
                let holder = &mut s.clients[c];
                if let Some((value, deadline, released)) = holder.last_hold.as_mut()
                    && *value == m.value
                {
                    let drift = drift(
                        Duration::from_millis(u64::from(self.bounds.ttl_ms)),
                        self.settings.drift_factor,
                    );
                    let now = instant(client_now);
                    // In time for the node to delete it: the key, set at most a node timeout
                    // after the round began, has more than the bound left (`engine` invariant 6:
                    // a release nearer the deadline may be judged late, the safe side).
                    let margin = if self.rules.release_bound_covers_lag {
                        self.settings.node_timeout
                    } else {
                        Duration::ZERO
                    };
                    // (A sender by value does not know the deadline: its bound is larger, the
                    // safe side, and this guarantee is the holder's own release's.)
                    if now + margin < *deadline && left && !by_value {
                        s.broken.timely_release_kept = true;
                    }
                    // In time as the node can tell: within the drift allowance of the deadline.
                    if now < *deadline + drift {
                        *released = true;
                    }
                }
            }
        }
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let mut nodes: Vec<Node> = (0..self.bounds.nodes)
            .map(|_| {
                if self.bounds.sentinel {
                    Node::sentinel(self.bounds.markers)
                } else {
                    Node::marked(
                        self.bounds.cluster,
                        self.rules.marker_names_replid,
                        self.bounds.markers,
                    )
                }
            })
            .collect();
        let mut clients = Vec::new();
        let early = self.bounds.clients.saturating_sub(self.bounds.late_clients);
        for index in 0..self.bounds.clients {
            let mut conns = Vec::new();
            for node in nodes.iter_mut() {
                let mut conn = Conn {
                    server: None,
                    memory: Default::default(),
                    trusted_from: None,
                    marker: None,
                    quarantined: false,
                    lineage: client::Lineage::default(),
                };
                if index < early {
                    let id = node.next.marker;
                    client::health_check(&mut conn, node, 0, 0, &self.settings, &self.rules, id);
                }
                conns.push(conn);
            }
            // A client that saw the nodes before the run ran its first sight then.
            let sight = if self.settings.first_sight && index >= early {
                Sight::Looking(vec![Look::Unread; self.n()])
            } else {
                Sight::Idle
            };
            clients.push(Client {
                lag: 0,
                attempts_left: self.bounds.attempts,
                phase: Phase::Idle,
                conns,
                last_hold: None,
                extensions_left: if index < self.bounds.extending_clients {
                    self.bounds.extensions
                } else {
                    0
                },
                hold_since: 0,
                sight,
                late: index >= early,
                on_request: index < self.bounds.fence_on_request,
            });
        }
        vec![State {
            t: 0,
            clients,
            nodes,
            net: Vec::new(),
            faults_left: self.bounds.faults,
            drift_left: self.bounds.drift,
            decided: 0,
            issued: Vec::new(),
            handouts: 0,
            by_value_left: self.bounds.by_value,
            marks_left: self.bounds.marks,
            broken: Broken::default(),
            acquired_after_faults: false,
            seen: Seen::default(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.broken != Broken::default() {
            return; // a counterexample already: nothing after it is explored
        }
        let waiting = (self.bounds.prompt_rounds && s.net.iter().any(|m| m.awaited))
            || (self.bounds.prompt_network && !s.net.is_empty());
        if s.t < self.bounds.horizon && !waiting {
            actions.push(Action::Tick);
            if s.drift_left > 0 {
                for c in 0..self.bounds.clients {
                    actions.push(Action::LagClient(c));
                }
                for n in 0..self.bounds.nodes {
                    actions.push(Action::LagNode(n));
                }
            }
        }
        for (c, client) in s.clients.iter().enumerate() {
            let c8 = u8::try_from(c).unwrap_or(u8::MAX);
            if client.late {
                if !self.bounds.late_after_faults || s.faults_left == 0 {
                    actions.push(Action::Arrive(c8));
                }
                continue;
            }
            let now = crate::clock::instant(client.clock(s.t));
            for (n, conn) in client.conns.iter().enumerate() {
                let quarantined = conn.trusted_from.is_some_and(|from| from > now);
                if conn.server.map(|s| s.0) != Some(s.nodes[n].server().0)
                    || (self.bounds.rechecks && quarantined)
                {
                    actions.push(Action::Check(c8, u8::try_from(n).unwrap_or(u8::MAX)));
                }
            }
            for n in 0..self.bounds.nodes {
                let due = match &client.sight {
                    Sight::Idle => false,
                    Sight::Looking(looks) => looks[usize::from(n)] == Look::Unread,
                    Sight::Extending(_, done) | Sight::Vouching(_, done) => !done[usize::from(n)],
                };
                if due {
                    actions.push(Action::Sight(c8, n));
                }
            }
            match client.phase {
                Phase::Idle if client.attempts_left > 0 => actions.push(Action::Acquire(c8)),
                Phase::Holding { fence, .. } => {
                    let valid = client.valid(client.clock(s.t));
                    // At most once per hold (unless `fence_again`), while it is valid
                    // (`LockInfo::issue_fence` refuses at once otherwise).
                    if client.on_request && fence.askable() && valid {
                        actions.push(Action::Fence(c8));
                    }
                    if self.bounds.releases && valid {
                        actions.push(Action::Release(c8));
                    }
                    if self.bounds.lost_releases && !valid {
                        actions.push(Action::ReleaseLost(c8));
                    }
                    if s.by_value_left > 0 {
                        actions.push(Action::ReleaseByValue(c8));
                    }
                    // `acquire` invariant 4: a lock whose validity ran out is not extended.
                    if client.extensions_left > 0 && valid {
                        actions.push(Action::Extend(c8));
                    }
                    // A holder with no attempts left that vanishes can do nothing the holder
                    // that stays cannot: every schedule after it runs from the holding state
                    // too, and breaks at least the same guarantees there (a holder counts in
                    // every check a vanished one does). So only a holder that may try again
                    // vanishes, to spare the checker those states.
                    if client.attempts_left > 0 {
                        actions.push(Action::Abandon(c8));
                    }
                }
                _ => {}
            }
        }
        for m in &s.net {
            actions.push(Action::Deliver(*m));
            if m.awaited && self.bounds.late_delivery {
                actions.push(Action::Timeout(*m));
            }
        }
        if s.faults_left > 0 {
            for fault in self.bounds.kinds.list() {
                for n in 0..self.bounds.nodes {
                    let needs_replica = matches!(fault, Fault::Failover | Fault::ReplicaRestart);
                    if !needs_replica || self.replicas() {
                        actions.push(Action::Fault(fault, n));
                    }
                }
            }
        }
        // `mark::mark_nodes` refuses cluster nodes (`Mark::Cluster`).
        if s.marks_left > 0 && !self.bounds.cluster {
            for n in 0..self.bounds.nodes {
                actions.push(Action::Mark(n));
            }
        }
        if self.replicas() {
            for (n, node) in s.nodes.iter().enumerate() {
                if node.replica.is_some_and(|r| r.data != node.master.data) {
                    actions.push(Action::Replicate(u8::try_from(n).unwrap_or(u8::MAX)));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick | Action::LagClient(_) | Action::LagNode(_) => {
                s.t += 1;
                match action {
                    Action::LagClient(c) => {
                        s.drift_left -= 1;
                        s.clients[usize::from(c)].lag += 1;
                    }
                    Action::LagNode(n) => {
                        s.drift_left -= 1;
                        s.nodes[usize::from(n)].lag += 1;
                    }
                    _ => {}
                }
                let t = s.t;
                for node in s.nodes.iter_mut() {
                    let now = node.clock(t);
                    node.expire(now);
                }
            }
            Action::Check(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                let node_now = s.nodes[n].clock(s.t);
                let now = s.clients[c].clock(s.t);
                let id = s.nodes[n].next.marker;
                client::health_check(
                    &mut s.clients[c].conns[n],
                    &mut s.nodes[n],
                    node_now,
                    now,
                    &self.settings,
                    &self.rules,
                    id,
                );
            }
            Action::Acquire(c) => {
                let c = usize::from(c);
                let client = &mut s.clients[c];
                client.attempts_left -= 1;
                let value = client.next_value(c);
                let start = client.clock(s.t);
                client.phase = Phase::Acquiring {
                    value,
                    start,
                    tally: Tally::new(self.n()),
                    votes: 0,
                    proposals: Proposals::default(),
                    voters: 0,
                };
                let request = if client.on_request {
                    Request::Set
                } else {
                    Request::Acquire { estimate_us: 0 }
                };
                let all: Vec<usize> = (0..self.n()).collect();
                self.send(&mut s, c, value, &all, request, true);
            }
            Action::Extend(c) => {
                let n = self.n();
                self.start_round(
                    &mut s,
                    c,
                    Request::Extend,
                    |value, deadline, fence, start| {
                        Some(Phase::Extending {
                            value,
                            deadline,
                            fence,
                            start,
                            tally: Tally::new(n),
                            votes: 0,
                        })
                    },
                )?;
                s.clients[usize::from(c)].extensions_left -= 1;
            }
            Action::Fence(c) => {
                let n = self.n();
                self.start_round(
                    &mut s,
                    c,
                    Request::FenceHeld,
                    |value, deadline, fence, start| {
                        fence.askable().then(|| Phase::Fencing {
                            value,
                            deadline,
                            start,
                            fence,
                            tally: Tally::new(n),
                            votes: 0,
                            proposals: Proposals::default(),
                        })
                    },
                )?;
            }
            Action::Release(c) => {
                let c = usize::from(c);
                let Phase::Holding { value, .. } = s.clients[c].phase else {
                    return None;
                };
                let all: Vec<usize> = (0..self.n()).collect();
                let bound = self.settings.release_bound_ms;
                self.send(
                    &mut s,
                    c,
                    value,
                    &all,
                    Request::Release {
                        bound_ms: bound,
                        by_value: false,
                    },
                    false,
                );
                s.clients[c].phase = Phase::Idle;
            }
            Action::ReleaseLost(c) => {
                let c = usize::from(c);
                let Phase::Holding { value, .. } = s.clients[c].phase else {
                    return None;
                };
                let all: Vec<usize> = (0..self.n()).collect();
                // `engine::release` of a lost lock: `linger.lua` under a lock-delay; with the
                // rule removed, the standard compare-and-delete.
                let request = if self.rules.lost_release_lingers && self.bounds.lock_delay_ms > 0 {
                    Request::Linger
                } else {
                    Request::Release {
                        bound_ms: 0,
                        by_value: false,
                    }
                };
                self.send(&mut s, c, value, &all, request, false);
                s.clients[c].phase = Phase::Idle;
            }
            Action::ReleaseByValue(c) => {
                let c = usize::from(c);
                let Phase::Holding { value, .. } = s.clients[c].phase else {
                    return None;
                };
                s.by_value_left -= 1;
                let all: Vec<usize> = (0..self.n()).collect();
                let request = Request::Release {
                    bound_ms: self.settings.by_value_bound_ms(value, &self.rules),
                    by_value: true,
                };
                self.send(&mut s, c, value, &all, request, false);
                s.clients[c].phase = Phase::Idle;
            }
            Action::Abandon(c) => {
                s.clients[usize::from(c)].phase = Phase::Idle;
            }
            Action::Deliver(m) => {
                let i = s.net.iter().position(|x| *x == m)?;
                s.net.remove(i);
                self.deliver(&mut s, m);
            }
            Action::Timeout(m) => {
                let i = s.net.iter().position(|x| *x == m)?;
                s.net[i].awaited = false;
                s.net.sort();
                self.count(&mut s, usize::from(m.client), m.value, false, None);
            }
            Action::Fault(fault, n) => {
                let n = usize::from(n);
                let now = s.nodes[n].clock(s.t);
                if !faults::apply(fault, &mut s.nodes[n], now) {
                    return None;
                }
                s.faults_left -= 1;
            }
            Action::Arrive(c) => s.clients[usize::from(c)].late = false,
            Action::Sight(c, n) => self.sight(&mut s, usize::from(c), usize::from(n)),
            Action::Mark(n) => {
                let n = usize::from(n);
                let node_now = s.nodes[n].clock(s.t);
                let info = s.nodes[n].info(node_now);
                let max_ttl = self.settings.policy.max_ttl;
                if self.rules.mark_checks_uptime
                    && refused(&info, Vouch::Checked, max_ttl).is_some()
                {
                    return None; // refused: nothing changes
                }
                // `mark::mark_nodes`: a node without a marker, or with a first-sight one, in a
                // group whose other nodes show one is new to the group (`NewToGroup`).
                let group_marked = s
                    .nodes
                    .iter()
                    .any(|other| other.peek_marked(other.clock(s.t)));
                if group_marked && !s.nodes[n].peek_marked(node_now) {
                    return None;
                }
                let fresh = s.nodes[n].next.marker;
                if !s.nodes[n].vouch_mark(node_now, fresh, false) {
                    return None;
                }
                if s.nodes[n].master.data.marker.map(|m| m.id) == Some(MarkerId::Drawn(fresh)) {
                    s.nodes[n].next.marker = fresh.wrapping_add(1);
                }
                s.marks_left -= 1;
            }
            Action::Replicate(n) => {
                if !faults::replicate(&mut s.nodes[usize::from(n)]) {
                    return None;
                }
            }
        }
        Self::forget_orders(&mut s);
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }

    fn within_boundary(&self, s: &State) -> bool {
        // A state that broke a guarantee is a counterexample already: nothing after it is
        // explored.
        s.t <= self.bounds.horizon
    }
}
