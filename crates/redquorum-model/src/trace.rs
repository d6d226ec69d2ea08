//! Counterexamples in readable form: who did what, on which node, at which clock; as text and as
//! structured steps (for replaying a schedule with `redlock chaos`).

use std::fmt;

use stateright::Path;

use crate::model::{Action, Request, State};

/// One step of a counterexample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Real time (ms) when it happened.
    pub real_ms: u16,
    /// Who acted: `client 0`, `node 2`, `net`, `time`.
    pub actor: String,
    /// What it did.
    pub action: String,
    /// The node it concerned, if any.
    pub node: Option<u8>,
    /// The client it concerned, if any.
    pub client: Option<u8>,
    /// Every process's clock (ms) before the step: clients first, then nodes.
    pub clocks: Vec<(String, u16)>,
    /// What it led to, when it matters (a vote, a hand-out, a broken guarantee).
    pub outcome: String,
}

/// A counterexample: the steps from the initial state to the one that breaks the property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The property broken.
    pub property: String,
    /// The steps; ticks of time are folded into the next step's `real_ms`.
    pub steps: Vec<Step>,
}

impl Trace {
    /// The trace of `path`, which breaks `property`.
    pub fn of(property: &str, path: Path<State, Action>) -> Self {
        let mut steps = Vec::new();
        let pairs = path.into_vec();
        for i in 0..pairs.len() {
            let (state, action) = &pairs[i];
            let Some(action) = *action else { continue };
            if matches!(action, Action::Tick) {
                continue;
            }
            let next = pairs.get(i + 1).map(|(s, _)| s);
            steps.push(step(state, action, next));
        }
        Trace {
            property: property.to_owned(),
            steps,
        }
    }
}

fn clocks(s: &State) -> Vec<(String, u16)> {
    let clients = s
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("c{i}"), c.clock(s.t)));
    let nodes = s
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("n{i}"), n.clock(s.t)));
    clients.chain(nodes).collect()
}

fn step(s: &State, action: Action, next: Option<&State>) -> Step {
    let (actor, what, node, client) = match action {
        Action::Tick => ("time".into(), "1 ms passes".into(), None, None),
        Action::LagClient(c) => (
            format!("client {c}"),
            "its clock stands still for 1 ms (drift)".into(),
            None,
            Some(c),
        ),
        Action::LagNode(n) => (
            format!("node {n}"),
            "its clock stands still for 1 ms (drift)".into(),
            Some(n),
            None,
        ),
        Action::Check(c, n) => (
            format!("client {c}"),
            "health check (INFO, marker script, verdict)".into(),
            Some(n),
            Some(c),
        ),
        Action::Acquire(c) => (
            format!("client {c}"),
            "starts an acquisition (requests to every node)".into(),
            None,
            Some(c),
        ),
        Action::Extend(c) => (
            format!("client {c}"),
            "starts an extension (requests to every node)".into(),
            None,
            Some(c),
        ),
        Action::Fence(c) => (
            format!("client {c}"),
            "asks for its token: a fence round (requests to every node)".into(),
            None,
            Some(c),
        ),
        Action::Release(c) => (
            format!("client {c}"),
            "releases, within its validity".into(),
            None,
            Some(c),
        ),
        Action::ReleaseLost(c) => (
            format!("client {c}"),
            "releases the lock it knows it lost (its validity ran out)".into(),
            None,
            Some(c),
        ),
        Action::ReleaseByValue(c) => (
            format!("client {c}"),
            "vanishes; another process, without the lock-delay, releases its lock by value".into(),
            None,
            Some(c),
        ),
        Action::Abandon(c) => (
            format!("client {c}"),
            "gives the lock up without a release (vanishes)".into(),
            None,
            Some(c),
        ),
        Action::Deliver(m) => {
            let what = match m.request {
                Request::Acquire { .. } => "runs the acquisition",
                Request::Set => "runs the plain acquisition (SET NX PX)",
                Request::FenceHeld => "runs the fence (fence_held.lua)",
                Request::Store { .. } => "runs the token store",
                Request::Extend => "runs the extension",
                Request::Linger => "runs the release of a lost lock (linger)",
                Request::Release {
                    by_value: false, ..
                } => "runs the release",
                Request::Release { by_value: true, .. } => "runs the release by value",
            };
            let late = if m.awaited {
                ""
            } else {
                " (late: nobody waits)"
            };
            (
                format!("node {}", m.node),
                format!("{what} of client {} (value {}){late}", m.client, m.value),
                Some(m.node),
                Some(m.client),
            )
        }
        Action::Timeout(m) => (
            format!("client {}", m.client),
            format!(
                "times out on its request (value {}); it stays in flight",
                m.value
            ),
            Some(m.node),
            Some(m.client),
        ),
        Action::Arrive(c) => (
            format!("client {c}"),
            "arrives: it has never seen the nodes".into(),
            None,
            Some(c),
        ),
        Action::Sight(c, n) => (
            format!("client {c}"),
            "first sight: its group's next step on this node (look, extend or vouch)".into(),
            Some(n),
            Some(c),
        ),
        Action::Mark(n) => (
            "operator".into(),
            "marks the node (redlock nodes mark, unforced)".into(),
            Some(n),
            None,
        ),
        Action::Fault(f, n) => (format!("node {n}"), format!("fault: {f:?}"), Some(n), None),
        Action::Replicate(n) => (
            format!("node {n}"),
            "its replica catches up with the master".into(),
            Some(n),
            None,
        ),
    };
    Step {
        real_ms: s.t,
        actor,
        action: what,
        node,
        client,
        clocks: clocks(s),
        outcome: next.map(|n| outcome(s, n)).unwrap_or_default(),
    }
}

/// What changed that a reader needs: hand-outs and broken guarantees.
fn outcome(before: &State, after: &State) -> String {
    let mut out = Vec::new();
    for (i, (b, a)) in before.clients.iter().zip(&after.clients).enumerate() {
        use crate::client::Phase;
        if let Phase::Holding { fence, .. } = a.phase
            && !matches!(b.phase, Phase::Holding { .. } | Phase::Fencing { .. })
            && !matches!(b.phase, Phase::FenceStoring { .. })
        {
            match fence.token {
                Some(token) => out.push(format!("client {i} holds the lock, token {token}")),
                None => out.push(format!(
                    "client {i} holds the lock, no token yet (voters {:#05b}, decided #{})",
                    fence.voters, fence.order
                )),
            }
        }
        if let Phase::Holding { fence, .. } = a.phase
            && matches!(b.phase, Phase::Fencing { .. } | Phase::FenceStoring { .. })
        {
            match fence.token {
                Some(token) => out.push(format!("client {i} gets its token on request: {token}")),
                None => out.push(format!("client {i}'s fence round fails: no token")),
            }
        }
    }
    if after.broken != before.broken {
        out.push(format!("BROKEN: {:?}", after.broken));
    }
    out.join("; ")
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "counterexample to \"{}\":", self.property)?;
        for step in &self.steps {
            let clocks: Vec<String> = step
                .clocks
                .iter()
                .map(|(who, ms)| format!("{who}={ms}"))
                .collect();
            write!(
                f,
                "  t={:>2}ms  {:<9} {}  [{}]",
                step.real_ms,
                step.actor,
                step.action,
                clocks.join(" ")
            )?;
            if !step.outcome.is_empty() {
                write!(f, "  => {}", step.outcome)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}
