//! Symmetry reduction: states that differ only in which client or which node is which are
//! checked once.
//!
//! # Why it is sound
//! The model treats every client alike and every node alike, so renaming them maps every run to
//! a run, and a broken guarantee to the same broken guarantee:
//! - clients share one [`Settings`](crate::client::Settings) and one behaviour (a late client
//!   differs only in its state: connections not checked yet; the process that releases a
//!   vanished holder's lock by value with other settings is no client of the model), and their
//!   lock values name them (`client × VALUES + k`, [`Client::next_value`]), so renaming a
//!   client renames its values wherever they are (keys, requests, phases);
//! - nodes start alike ([`Node::marked`](crate::node::Node::marked)) and draw their identities (`run_id`, `master_replid`,
//!   marker ids) from counters of their own, and a client compares a node's identities only
//!   with that node's (its connection to it), so renaming nodes needs no renaming of identities;
//!   a replicated node's two addresses are the node's own too, and so is what a client saw of
//!   them (its connection's [`Lineage`](crate::client::Lineage));
//! - a client's first-sight protocol steps on its nodes in any order, so its progress renames
//!   with the nodes; so do an acquisition's voters (a set of nodes, renamed bit by bit);
//! - a client whose token is issued on request differs only in its state
//!   ([`Client::on_request`]), which renames with it;
//! - the properties count holders, tokens and hand-outs, never who or where; the order of
//!   decisions that property 3 compares is a count, as is each hold's place in it.
//!
//! The checker keeps one representative per class: the renaming of the state whose hash is the
//! smallest. Any choice made from the class alone works; a hash collision between two renamings
//! of one state only spares less.

use std::hash::{DefaultHasher, Hash, Hasher};

use crate::client::{Client, Phase, Sight, VALUES};
use crate::model::State;

/// Every permutation of `0..n` (n ≤ 4 in any bound the model uses).
fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![Vec::new()];
    }
    let mut all = Vec::new();
    for smaller in permutations(n - 1) {
        for at in 0..=smaller.len() {
            let mut p = smaller.clone();
            p.insert(at, n - 1);
            all.push(p);
        }
    }
    all
}

/// `v` with element `j` moved to `q[j]`.
fn permuted<T: Clone>(v: &[T], q: &[usize]) -> Vec<T> {
    let mut out = v.to_vec();
    for (j, x) in v.iter().enumerate() {
        out[q[j]] = x.clone();
    }
    out
}

/// A value renamed by the client permutation `p` (client `i` becomes `p[i]`).
fn value(v: u8, p: &[usize]) -> u8 {
    let client = usize::from(v / VALUES);
    let renamed = p.get(client).copied().unwrap_or(client);
    u8::try_from(renamed).unwrap_or(u8::MAX) * VALUES + v % VALUES
}

/// A set of nodes (bit `j`: node `j`) renamed by the node permutation `q`.
fn nodes(set: u8, q: &[usize]) -> u8 {
    let mut out = 0;
    for (j, &to) in q.iter().enumerate() {
        if set & (1 << j) != 0 {
            out |= 1 << to;
        }
    }
    out
}

/// The set of nodes a phase names: the voters of an acquisition, or of a hold whose token is
/// issued on request.
fn voters(phase: &Phase) -> u8 {
    match phase {
        Phase::Acquiring { voters, .. } => *voters,
        Phase::Holding { fence, .. }
        | Phase::Extending { fence, .. }
        | Phase::Fencing { fence, .. }
        | Phase::FenceStoring { fence, .. } => fence.voters,
        Phase::Idle | Phase::Storing { .. } => 0,
    }
}

fn phase(phase: &Phase, p: &[usize], q: &[usize]) -> Phase {
    let mut phase = phase.clone();
    match &mut phase {
        Phase::Idle => {}
        Phase::Acquiring {
            value: v, voters, ..
        } => {
            *v = value(*v, p);
            *voters = nodes(*voters, q);
        }
        Phase::Storing { value: v, .. } => *v = value(*v, p),
        Phase::Holding {
            value: v, fence, ..
        }
        | Phase::Extending {
            value: v, fence, ..
        }
        | Phase::Fencing {
            value: v, fence, ..
        }
        | Phase::FenceStoring {
            value: v, fence, ..
        } => {
            *v = value(*v, p);
            fence.voters = nodes(fence.voters, q);
        }
    }
    phase
}

/// `s` with client `i` renamed `p[i]` and node `j` renamed `q[j]`.
pub fn renamed(s: &State, p: &[usize], q: &[usize]) -> State {
    let mut out = s.clone();
    for (i, client) in s.clients.iter().enumerate() {
        let mut c: Client = client.clone();
        for (j, conn) in client.conns.iter().enumerate() {
            c.conns[q[j]] = conn.clone();
        }
        c.phase = phase(&client.phase, p, q);
        c.sight = match &client.sight {
            Sight::Idle => Sight::Idle,
            Sight::Looking(looks) => Sight::Looking(permuted(looks, q)),
            Sight::Extending(looks, done) => {
                Sight::Extending(permuted(looks, q), permuted(done, q))
            }
            Sight::Vouching(looks, done) => Sight::Vouching(permuted(looks, q), permuted(done, q)),
        };
        if let Some(hold) = c.last_hold.as_mut() {
            hold.0 = value(hold.0, p);
        }
        out.clients[p[i]] = c;
    }
    for (j, node) in s.nodes.iter().enumerate() {
        let mut n = *node;
        for data in [
            Some(&mut n.master.data),
            n.replica.as_mut().map(|r| &mut r.data),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(key) = data.lock.as_mut() {
                key.value = value(key.value, p);
            }
        }
        out.nodes[q[j]] = n;
    }
    for m in out.net.iter_mut() {
        let (c, n) = (usize::from(m.client), usize::from(m.node));
        m.client = u8::try_from(p[c]).unwrap_or(u8::MAX);
        m.node = u8::try_from(q[n]).unwrap_or(u8::MAX);
        m.value = value(m.value, p);
    }
    out.net.sort();
    out
}

/// The class's representative. For each renaming of the clients, the nodes are put in the order
/// of a signature of everything that belongs to each (the node, each client's connection to it
/// and first-sight progress on it in the renamed clients' order, the requests to it): nodes with
/// equal signatures are interchangeable, so any order among them gives the same state (a hash
/// collision between two signatures only spares less). Of these, the renaming with
/// the smallest hash. (All `n!` node orders would give the same classes, at `n!` times the cost.)
pub fn representative(s: &State) -> State {
    let mut best: Option<(u64, State)> = None;
    for p in &permutations(s.clients.len()) {
        let mut order: Vec<(u64, usize)> = (0..s.nodes.len())
            .map(|j| (signature(s, p, j), j))
            .collect();
        order.sort_unstable();
        // q[j]: where node j goes.
        let mut q = vec![0; order.len()];
        for (to, &(_, j)) in order.iter().enumerate() {
            q[j] = to;
        }
        let candidate = renamed(s, p, &q);
        let h = hash(&candidate);
        if best.as_ref().is_none_or(|(b, _)| h < *b) {
            best = Some((h, candidate));
        }
    }
    best.map_or_else(|| s.clone(), |(_, s)| s)
}

fn hash(x: &impl Hash) -> u64 {
    let mut hasher = DefaultHasher::new();
    x.hash(&mut hasher);
    hasher.finish()
}

/// Everything of node `j`, with clients renamed by `p`, in an order that does not depend on
/// the clients' or the nodes' places.
fn signature(s: &State, p: &[usize], j: usize) -> u64 {
    let mut hasher = DefaultHasher::new();
    let mut node = s.nodes[j];
    for data in [
        Some(&mut node.master.data),
        node.replica.as_mut().map(|r| &mut r.data),
    ]
    .into_iter()
    .flatten()
    {
        if let Some(key) = data.lock.as_mut() {
            key.value = value(key.value, p);
        }
    }
    node.hash(&mut hasher);
    let mut conns: Vec<(usize, &crate::client::Conn)> = s
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| (p[i], &c.conns[j]))
        .collect();
    conns.sort_unstable_by_key(|(i, _)| *i);
    conns.hash(&mut hasher);
    // Each client's first-sight progress on this node, in the renamed clients' order.
    let mut sights: Vec<(usize, Option<crate::client::Look>, Option<bool>)> = s
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let (look, done) = match &c.sight {
                Sight::Idle => (None, None),
                Sight::Looking(looks) => (Some(looks[j]), None),
                Sight::Extending(looks, done) | Sight::Vouching(looks, done) => {
                    (Some(looks[j]), Some(done[j]))
                }
            };
            (p[i], look, done)
        })
        .collect();
    sights.sort_unstable_by_key(|(i, ..)| *i);
    sights.hash(&mut hasher);
    // Whether this node is among each client's voters, in the renamed clients' order.
    let mut voted: Vec<(usize, bool)> = s
        .clients
        .iter()
        .enumerate()
        .map(|(i, c)| (p[i], voters(&c.phase) & (1 << j) != 0))
        .collect();
    voted.sort_unstable_by_key(|(i, _)| *i);
    voted.hash(&mut hasher);
    let mut msgs: Vec<_> = s
        .net
        .iter()
        .filter(|m| usize::from(m.node) == j)
        .map(|m| {
            let mut m = *m;
            m.client = u8::try_from(p[usize::from(m.client)]).unwrap_or(u8::MAX);
            m.node = 0;
            m.value = value(m.value, p);
            m
        })
        .collect();
    msgs.sort_unstable();
    msgs.hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_permutation_once() {
        let all = permutations(3);
        assert_eq!(all.len(), 6);
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), 6);
    }

    #[test]
    fn node_sets_follow_their_nodes() {
        assert_eq!(nodes(0b011, &[2, 0, 1]), 0b101);
        assert_eq!(nodes(0b100, &[2, 0, 1]), 0b010);
        assert_eq!(nodes(0, &[2, 0, 1]), 0);
    }

    #[test]
    fn values_keep_their_attempt_and_follow_their_client() {
        assert_eq!(value(3, &[1, 0]), VALUES + 3);
        assert_eq!(value(VALUES + 5, &[1, 0]), 5);
        assert_eq!(value(VALUES + 5, &[0, 1]), VALUES + 5);
    }
}
