//! What the model is made of: its bounds, the state of every client, node and message, the
//! actions that move it, and the records of guarantees broken and witnesses seen on the way. Apart
//! from the steps ([`model`](crate::model)) so that the [`properties`](crate::properties), which
//! read a state, and the steps, which check them, need not import each other.

use crate::client::{Client, Settings};
use crate::faults::{Fault, FaultKinds};
use crate::node::{Markers, Node};
use crate::rules::Rules;

/// How far the checker looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Clients.
    pub clients: u8,
    /// Nodes.
    pub nodes: u8,
    /// Cluster nodes (a master and a replica each; markers name their owner).
    pub cluster: bool,
    /// Replicated nodes instead (`redis+sentinel://`: a primary and one replica each behind
    /// Sentinel; plain markers, replicated; votes wait for the replica, a promotion is judged
    /// by the client's lineage: [`Rules::vote_waits_for_replicas`],
    /// [`Rules::promotion_judged_by_lineage`]). Not with `cluster`.
    pub sentinel: bool,
    /// Acquisitions each client may start.
    pub attempts: u8,
    /// Whether a holder may release (off: a scenario that needs no release, kept small).
    pub releases: bool,
    /// Extensions each client may start while it holds.
    pub extensions: u8,
    /// How many clients (the first ones) may extend at all; `u8::MAX` for every client (a
    /// scenario whose hole needs one holder's extension spares the checker the others').
    pub extending_clients: u8,
    /// Releases by value in a run: a holder vanishes and another process, configured without
    /// the lock-delay, releases its lock by value (`redlock release --value`).
    pub by_value: u8,
    /// The markers the nodes start with.
    pub markers: Markers,
    /// Clients that first see the nodes during the run (they arrive, then their health checks
    /// are steps), the last ones of the list; the others saw them before it began.
    pub late_clients: u8,
    /// Late clients arrive only once the faults are spent: a reduction for the holes' searches,
    /// which drops every schedule with a fault between a late client's steps (the checks with
    /// every rule on that cover those run without it).
    pub late_after_faults: bool,
    /// The deployment says no server's clock steps forward after it starts
    /// (`Builder::trust_first_sight`).
    pub trust_first_sight: bool,
    /// Unforced operator marks (`redlock nodes mark`) in a run.
    pub marks: u8,
    /// A client checks a quarantined node's health again at any time (the library does, every
    /// few seconds, to see an operator's mark or a group's vouch).
    pub rechecks: bool,
    /// A holder whose validity ran out may release the lock it lost (a guard that saw the loss,
    /// a `with` block that ends late).
    pub lost_releases: bool,
    /// The nodes are configured not to lose acknowledged writes (AOF, `appendfsync always`),
    /// and clients trust such a node that kept its marker at once after a restart
    /// (`Builder::trust_durable`, `quarantine` invariant 4). A restart that loses the data is
    /// then a server whose configuration lied, or another server behind the address.
    pub durable: bool,
    /// Faults in a run, of the kinds allowed.
    pub faults: u8,
    /// The kinds of faults.
    pub kinds: FaultKinds,
    /// How many `Lag` steps (1 ms of drift each) a run may take.
    pub drift: u8,
    /// The last real time (ms) explored.
    pub horizon: u16,
    /// Whether requests may time out and be delivered late.
    pub late_delivery: bool,
    /// How many clients (the first ones) acquire with the plain `SET NX PX` and have their token
    /// issued on request (`fencing` invariant 8): a holder among them may, once per hold, at
    /// any time, start a fence round. The others fence with the acquisition (the eager path,
    /// `Builder::fence_on_acquire`).
    pub fence_on_request: u8,
    /// A holder whose fence round failed may ask again, while its lock is valid (the library's
    /// `fence_on_request` runs up to three rounds when nodes did not answer, and a caller may
    /// call `Lock::fence` again after an error). Off: at most once per hold.
    pub fence_again: bool,
    /// The lock's TTL (ms).
    pub ttl_ms: u16,
    /// The lock-delay (ms), 0 for none.
    pub lock_delay_ms: u16,
    /// The node timeout (ms): the longest an acquisition's request may lag and still count as a
    /// vote. A reply that reaches its client later than this after the round began is no vote
    /// (the client stopped waiting), though the node ran it. With prompt rounds every reply
    /// comes within the millisecond it was sent, so this bounds only rounds that are not prompt.
    pub node_timeout_ms: u16,
    /// Time does not pass while a request a client waits for is in flight: each round's
    /// requests run within the millisecond they were sent (late deliveries of requests nobody
    /// waits for still happen at any time). Off, the network may hold any request for as long
    /// as the horizon allows.
    pub prompt_rounds: bool,
    /// Time does not pass while any request is in flight: every request, a release or a
    /// roll-back included, runs within the millisecond it was sent (in any order, or, with
    /// `late_delivery`, after its sender stopped waiting, within that millisecond). The checks
    /// that let time pass far use it; late requests are the holes' and the deep run's.
    pub prompt_network: bool,
}

impl Bounds {
    /// The bounds CI checks with every rule on, exhaustively: two clients, three nodes, one
    /// attempt each, one fault of any kind a standalone node suffers (a restart that keeps or
    /// loses the data, `FLUSHALL`), every order of every request, and time passing for 6 ms:
    /// with a TTL of 3 ms (0.97 ms of validity after the 2.03 ms drift allowance) and a
    /// lock-delay of 1 ms (so `max_ttl` 4 ms), far enough for a validity to run out, a
    /// lock-delay to end, and a node quarantined at 2 ms to vote again (the test asserts each
    /// happens). Requests run within the millisecond they are sent (`prompt_network`); late
    /// ones are the holes' and the deep run's. Two faults do not fit in CI (`docs/model.md`
    /// has the measured counts).
    pub const CI: Bounds = Bounds {
        clients: 2,
        nodes: 3,
        cluster: false,
        sentinel: false,
        attempts: 1,
        releases: true,
        extensions: 0,
        extending_clients: u8::MAX,
        by_value: 0,
        markers: Markers::Drawn,
        late_clients: 0,
        late_after_faults: false,
        trust_first_sight: false,
        marks: 0,
        rechecks: false,
        durable: false,
        lost_releases: false,
        faults: 1,
        kinds: FaultKinds {
            restart_kept: true,
            restart_lost: true,
            flush: true,
            ..FaultKinds::NONE
        },
        drift: 0,
        horizon: 6,
        late_delivery: false,
        fence_on_request: 0,
        fence_again: false,
        ttl_ms: 3,
        lock_delay_ms: 1,
        node_timeout_ms: 2,
        prompt_rounds: true,
        prompt_network: true,
    };
}

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Request {
    /// The acquisition (the native pipeline, or a cluster master's script), with the client's
    /// estimate of the node's clock (µs) when the request was built.
    Acquire {
        /// The estimate.
        estimate_us: u64,
    },
    /// A plain acquisition, `SET NX PX` alone (a lock whose token is issued on request).
    Set,
    /// A holder's fence round (`scripts/fence_held.lua`).
    FenceHeld,
    /// The store round (`scripts/fence.lua`), of an acquisition or of a fence round.
    Store {
        /// The token.
        token: u64,
    },
    /// The extension (`scripts/extend.lua`).
    Extend,
    /// The release of a lock its holder knows it lost, under a lock-delay (`scripts/linger.lua`):
    /// keys of ours are kept for at least the delay from now.
    Linger,
    /// The release (`scripts/release_timely.lua` under a lock-delay).
    Release {
        /// The bound in ms.
        bound_ms: u16,
        /// Sent by value, by a sender that does not know the holder's deadline.
        by_value: bool,
    },
}

/// A request in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Msg {
    /// From which client.
    pub client: u8,
    /// To which node.
    pub node: u8,
    /// The server the connection reaches (`run_id`, `master_replid`).
    pub server: (u8, u8),
    /// The lock value.
    pub value: u8,
    /// The request.
    pub request: Request,
    /// Whether the client still waits for its reply (false once it timed out).
    pub awaited: bool,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time, ms.
    pub t: u16,
    /// The clients.
    pub clients: Vec<Client>,
    /// The nodes.
    pub nodes: Vec<Node>,
    /// Requests in flight.
    pub net: Vec<Msg>,
    /// Faults left.
    pub faults_left: u8,
    /// `Lag` steps left.
    pub drift_left: u8,
    /// How many acquisitions were decided (won, within their validity): each one's place in
    /// that order is its [`Fence::order`](crate::client::Fence::order).
    pub decided: u8,
    /// Every token issued, with its acquisition's place in the order of decisions, sorted.
    pub issued: Vec<(u8, u64)>,
    /// How many locks were handed out.
    pub handouts: u8,
    /// Releases by value left.
    pub by_value_left: u8,
    /// Operator marks left.
    pub marks_left: u8,
    /// Broken guarantees seen on the way (see [`properties`](crate::properties)).
    pub broken: Broken,
    /// Whether a client acquired after the last fault.
    pub acquired_after_faults: bool,
    /// What time passing made happen (witnesses that the bounds reach it).
    pub seen: Seen,
}

/// A step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Real time advances 1 ms.
    Tick,
    /// Real time advances 1 ms, but this client's clock does not.
    LagClient(u8),
    /// Real time advances 1 ms, but this node's clock does not.
    LagNode(u8),
    /// A client (re)connects to a node and checks its health.
    Check(u8, u8),
    /// A client starts an acquisition.
    Acquire(u8),
    /// A holder starts an extension.
    Extend(u8),
    /// A holder asks for its token (a fence round).
    Fence(u8),
    /// A holder releases.
    Release(u8),
    /// A holder whose validity ran out releases the lock it lost (`engine` invariant 5).
    ReleaseLost(u8),
    /// A holder vanishes, and another process releases its lock by value.
    ReleaseByValue(u8),
    /// A holder gives the lock up without releasing (it vanished, or its validity ran out).
    Abandon(u8),
    /// The node runs the request, and its reply reaches the client.
    Deliver(Msg),
    /// The client stops waiting for this request (the node timeout); it may still arrive.
    Timeout(Msg),
    /// A fault strikes a node.
    Fault(Fault, u8),
    /// A late client arrives: from now on it acts.
    Arrive(u8),
    /// A client's first-sight protocol takes its next step on a node.
    Sight(u8, u8),
    /// An operator marks a node (`redlock nodes mark`, unforced).
    Mark(u8),
    /// A cluster node's or a replicated node's replica catches up.
    Replicate(u8),
}

/// The model: bounds, rules, and the settings derived from them.
#[derive(Debug, Clone)]
pub struct Protocol {
    /// The bounds.
    pub bounds: Bounds,
    /// The rules.
    pub rules: Rules,
    /// The clients' settings.
    pub settings: Settings,
}

/// A guarantee broken on the way to a state, recorded when it happened (a hand-out, a
/// release), so that the property can be checked on the state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Broken {
    /// Two valid holders at once.
    pub two_holders: bool,
    /// A token handed out not above an earlier one.
    pub tokens_not_increasing: bool,
    /// A token issued for an acquisition decided later not above one issued for an earlier
    /// acquisition.
    pub tokens_out_of_order: bool,
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
    /// A token was issued on request (a fence round).
    pub fenced_on_request: bool,
    /// A token was issued on request through the store round (the fence round's counted
    /// proposals disagreed).
    pub fenced_by_store: bool,
    /// A replicated node's promoted replica counted a vote.
    pub promoted_voted: bool,
}
