//! The counting rules of semaphores and read-write locks, in a model of their own: who may hold
//! at once, decided by the library's quorum ([`Tally`]) over what each node grants.
//!
//! The rest of a semaphore's permit or a read-write lock's hold is a lock's (validity, fencing,
//! quarantine: the main [`model`](crate::model)); what differs is only who a node lets in, and
//! how many grants make a holder. So this model has no time and no faults: clients start
//! acquisitions, nodes grant or refuse in any order of delivery, winners hold until they release,
//! losers roll back; the property is the counting rule.
//!
//! - **Semaphore** (`base::semaphore`): `k` permits, each a lock key of its own; an
//!   acquisition tries one permit (any: the library starts from a random one) and needs a
//!   majority, as a lock does. At most `k` holders (invariant 1). Switch
//!   [`CountingRules::permits_are_keys`]: off, each node keeps a count ("room for k more") and
//!   a grant under it is a vote, the design the module explains is unsafe for `k ≥ 2`.
//! - **Read-write lock** (`protocol::rwlock`): a node grants a reader unless a writer holds it,
//!   a writer only when nobody does; both need a majority (invariant 1). A writer excludes
//!   everyone. Switch [`CountingRules::readers_need_quorum`]: off, a reader holds with one grant
//!   (read-one, write-majority), which lets a reader and a writer hold at once.

use redquorum::protocol::quorum::{Decision, Tally};
use stateright::{Model, Property};

/// Which primitive, and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Primitive {
    /// A semaphore of `permits` permits.
    Semaphore {
        /// `k`.
        permits: u8,
    },
    /// A read-write lock.
    ReadWrite,
}

/// The rules the counting model can remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountingRules {
    /// A semaphore's permits are lock keys of their own (`semaphore` invariant 1).
    pub permits_are_keys: bool,
    /// A reader needs a majority, as a writer does (`rwlock` invariant 1).
    pub readers_need_quorum: bool,
}

impl CountingRules {
    /// Every rule on.
    pub const ALL: CountingRules = CountingRules {
        permits_are_keys: true,
        readers_need_quorum: true,
    };
}

/// What a client asks a node for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Want {
    /// A semaphore's permit `p` (with permits as keys; 0 for a count).
    Permit(u8),
    /// A read hold.
    Read,
    /// A write hold.
    Write,
}

/// A client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Holder {
    /// Not holding, not trying; acquisitions left.
    Idle(u8),
    /// Acquiring `want` with the library's tally.
    Acquiring(Want, Tally, u8),
    /// Holding `want`.
    Holding(Want, u8),
}

/// A request in flight: client, node, what, and whether it is a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Request {
    client: u8,
    node: u8,
    want: Want,
    release: bool,
}

/// The state: who holds what on each node, the clients, the requests in flight.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CountingState {
    /// Per node, the grants it holds: (client, what).
    pub nodes: Vec<Vec<(u8, Want)>>,
    /// The clients.
    pub clients: Vec<Holder>,
    /// Requests in flight.
    pub net: Vec<Request>,
}

/// A step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// A client starts an acquisition of `want` (a request to every node).
    Acquire(u8, Want),
    /// A node runs a request.
    Deliver(Request),
    /// A holder releases (a request to every node).
    Release(u8),
}

/// The counting model.
#[derive(Debug, Clone)]
pub struct Counting {
    /// Which primitive.
    pub primitive: Primitive,
    /// Nodes.
    pub nodes: u8,
    /// Clients.
    pub clients: u8,
    /// Acquisitions each client may start (a grant is known by its client and what it asked,
    /// so bounds that matter here keep one).
    pub attempts: u8,
    /// The rules.
    pub rules: CountingRules,
}

/// Property name: the counting rule.
pub const COUNT_HOLDS: &str = "no more holders than the primitive allows";

impl Counting {
    /// Whether `node`'s grants admit `want` from a new holder (the node's side: `SET NX` on a
    /// permit key, a count under `k`, `rw_acquire.lua`).
    fn grants(&self, node: &[(u8, Want)], want: Want) -> bool {
        match (self.primitive, want) {
            (Primitive::Semaphore { permits }, Want::Permit(p)) => {
                if self.rules.permits_are_keys {
                    !node.iter().any(|(_, w)| *w == Want::Permit(p))
                } else {
                    node.len() < usize::from(permits)
                }
            }
            (_, Want::Read) => !node.iter().any(|(_, w)| *w == Want::Write),
            (_, Want::Write) => node.is_empty(),
            _ => false,
        }
    }

    /// What a client may ask for.
    fn wants(&self) -> Vec<Want> {
        match self.primitive {
            Primitive::Semaphore { permits } if self.rules.permits_are_keys => {
                (0..permits).map(Want::Permit).collect()
            }
            Primitive::Semaphore { .. } => vec![Want::Permit(0)],
            Primitive::ReadWrite => vec![Want::Read, Want::Write],
        }
    }

    /// Whether the holders in `s` break the counting rule.
    pub fn broken(&self, s: &CountingState) -> bool {
        let holding: Vec<Want> = s
            .clients
            .iter()
            .filter_map(|c| match c {
                Holder::Holding(w, _) => Some(*w),
                _ => None,
            })
            .collect();
        match self.primitive {
            Primitive::Semaphore { permits } => {
                let twice = |p: &Want| holding.iter().filter(|w| *w == p).count() > 1;
                holding.len() > usize::from(permits)
                    || (self.rules.permits_are_keys && holding.iter().any(twice))
            }
            Primitive::ReadWrite => holding.contains(&Want::Write) && holding.len() > 1,
        }
    }

    fn send(&self, s: &mut CountingState, client: u8, want: Want, release: bool) {
        for node in 0..self.nodes {
            s.net.push(Request {
                client,
                node,
                want,
                release,
            });
        }
        s.net.sort();
    }
}

impl Model for Counting {
    type State = CountingState;
    type Action = Step;

    fn init_states(&self) -> Vec<CountingState> {
        vec![CountingState {
            nodes: vec![Vec::new(); usize::from(self.nodes)],
            clients: vec![Holder::Idle(self.attempts); usize::from(self.clients)],
            net: Vec::new(),
        }]
    }

    fn actions(&self, s: &CountingState, actions: &mut Vec<Step>) {
        if self.broken(s) {
            return;
        }
        for (c, client) in s.clients.iter().enumerate() {
            let c = u8::try_from(c).unwrap_or(u8::MAX);
            match client {
                Holder::Idle(left) if *left > 0 => {
                    for want in self.wants() {
                        actions.push(Step::Acquire(c, want));
                    }
                }
                Holder::Holding(..) => actions.push(Step::Release(c)),
                _ => {}
            }
        }
        for r in &s.net {
            actions.push(Step::Deliver(*r));
        }
    }

    fn next_state(&self, last: &CountingState, step: Step) -> Option<CountingState> {
        let mut s = last.clone();
        match step {
            Step::Acquire(c, want) => {
                let Holder::Idle(left) = s.clients[usize::from(c)] else {
                    return None;
                };
                s.clients[usize::from(c)] =
                    Holder::Acquiring(want, Tally::new(usize::from(self.nodes)), left - 1);
                self.send(&mut s, c, want, false);
            }
            Step::Release(c) => {
                let Holder::Holding(want, left) = s.clients[usize::from(c)] else {
                    return None;
                };
                s.clients[usize::from(c)] = Holder::Idle(left);
                self.send(&mut s, c, want, true);
            }
            Step::Deliver(r) => {
                let i = s.net.iter().position(|x| *x == r)?;
                s.net.remove(i);
                let node = &mut s.nodes[usize::from(r.node)];
                if r.release {
                    node.retain(|(c, w)| !(*c == r.client && *w == r.want));
                    return Some(s);
                }
                let granted = self.grants(node, r.want);
                if granted {
                    node.push((r.client, r.want));
                    node.sort();
                }
                let client = &mut s.clients[usize::from(r.client)];
                if let Holder::Acquiring(want, mut tally, left) = client.clone()
                    && want == r.want
                {
                    let decision = match tally.record(granted) {
                        // Read-one: a reader holds with its first grant (the rule removed).
                        _ if granted && want == Want::Read && !self.rules.readers_need_quorum => {
                            Decision::Won
                        }
                        d => d,
                    };
                    match decision {
                        Decision::Open => *client = Holder::Acquiring(want, tally, left),
                        Decision::Won => *client = Holder::Holding(want, left),
                        Decision::Lost => {
                            *client = Holder::Idle(left);
                            self.send(&mut s, r.client, want, true);
                        }
                    }
                } else if granted && !matches!(client, Holder::Holding(w, _) if *w == r.want) {
                    // A grant its client no longer waits for, and does not hold by: rolled back
                    // (a winner's late grants are its hold's, released with it).
                    s.net.push(Request { release: true, ..r });
                    s.net.sort();
                }
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![Property::always(COUNT_HOLDS, |m: &Counting, s| {
            !m.broken(s)
        })]
    }
}
