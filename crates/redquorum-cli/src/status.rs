//! `redlock status RESOURCE`: who holds a resource, node by node, and what that adds up to.
//!
//! The per-node facts come from [`Redlock::status`](redquorum::Redlock::status) (one atomic read per
//! node). The summary line is this file's reading of them, a pure function tested below: a value
//! held on a quorum is "held"; a resource free on every node that answered is "free"; anything
//! else (a lock that expired on some nodes, a failed attempt not yet rolled back, a key of another
//! type) is described as it is.
//!
//! A node in restart quarantine is shown with what it holds, but the summary does not count it,
//! just as its grants are not votes: it may have restarted without the locks it held, so neither
//! "held" nor "free" there says anything about the lock. The summary says how many there are.

use std::collections::HashMap;
use std::time::Duration;

use redquorum::NodeState;
use serde::Serialize;

use crate::duration;
use crate::exit::Outcome;
use crate::exit::{Failure, OK, Quarantine, UNAVAILABLE};
use crate::global::Global;
use crate::output::{self, LookedAt};

const AFTER_HELP: &str = "\
Prints one line per server (free, held by VALUE with its remaining time, another Redis type, or
unreachable; whether it is quarantined because it may have lost its data (a restart, a flush, a
missing marker key), for how much longer; and whether its maxmemory-policy may evict lock keys)
and a summary,
e.g. `held by 3f2a... on 3/5 nodes (quorum 3), 1 quarantined`. Quarantined nodes are not counted
in the summary: their grants are not votes. With --json, one object: {\"resource\", \"quorum\",
\"reachable\", \"quarantined\", \"holder\", \"held_on\", \"summary\", \"nodes\": [{\"node\",
\"reachable\", \"state\" (free|held|readers|other_type|unavailable), \"value\", \"type\", \"pttl_ms\",
\"readers\" (with state readers: a read-write lock's reader entries),
\"quarantined_ms\", \"may_evict\", \"error\", \"shard\"}]}; absent facts are null, pttl_ms is null for a key
without expiry, quarantined_ms is null for a node that is not quarantined. For a Redis Cluster node
(redis+cluster://), a second line (and \"shard\": {\"slot\", \"master\", \"replicas\": [{\"address\",
\"failed\"}]}) names the shard that serves the resource: its slot, master and replicas.

Examples:
  redlock status invoice:42
  redlock status invoice:42 --json | jq -r .holder

Exit status: 0 when a quorum of servers answered and is out of quarantine (whatever they hold);
69 when fewer did, so who holds the resource cannot be told (the report is still printed);
64 bad arguments.";

/// Show who holds a resource on each server.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    look: LookedAt,
}

/// One node, as printed with `--json`.
#[derive(Debug, Serialize)]
struct NodeJson<'a> {
    node: &'a str,
    reachable: bool,
    state: &'static str,
    value: Option<&'a str>,
    #[serde(rename = "type")]
    kind: Option<&'a str>,
    pttl_ms: Option<u128>,
    /// With state "readers": how many reader entries the set holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    readers: Option<u64>,
    quarantined_ms: Option<u128>,
    /// Why the node is quarantined, in the library's words.
    quarantine_reason: Option<String>,
    /// The node's marker as this client saw it: "vouched for", "written on first sight",
    /// "written on first sight, quarantine waited out", "present", or null (not read:
    /// quarantine off, or unreachable).
    marker: Option<String>,
    may_evict: bool,
    error: Option<String>,
    shard: Option<ShardJson<'a>>,
}

/// The shard serving the resource on a Redis Cluster node, as printed with `--json`.
#[derive(Debug, Serialize)]
struct ShardJson<'a> {
    slot: u16,
    master: &'a str,
    replicas: Vec<ReplicaJson<'a>>,
}

#[derive(Debug, Serialize)]
struct ReplicaJson<'a> {
    address: &'a str,
    failed: bool,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    resource: &'a str,
    quorum: usize,
    reachable: usize,
    quarantined: usize,
    holder: Option<&'a str>,
    held_on: usize,
    summary: &'a str,
    nodes: Vec<NodeJson<'a>>,
}

/// One node as the summary sees it.
#[derive(Debug, Clone, Copy)]
struct Seen<'a> {
    state: &'a NodeState,
    /// In restart quarantine: shown, not counted.
    quarantined: bool,
}

/// What the nodes add up to.
#[derive(Debug, PartialEq, Eq)]
struct Summary<'a> {
    /// The value held on a quorum of counted nodes, if any.
    holder: Option<&'a str>,
    /// On how many counted nodes the most common value is held.
    held_on: usize,
    /// The nodes that answered, quarantined or not.
    reachable: usize,
    /// The nodes that answered and are out of quarantine: the ones the summary counts.
    counted: usize,
    /// The nodes that answered and are quarantined.
    quarantined: usize,
    text: String,
}

pub async fn run(args: &Args, global: &Global) -> Outcome {
    let manager = global.connected().await?;
    let statuses = manager.status(&args.look.resource).await;
    let quorum = manager.quorum();
    let seen: Vec<Seen> = statuses
        .iter()
        .map(|s| Seen {
            state: &s.state,
            quarantined: s.is_reachable() && s.quarantine.is_some(),
        })
        .collect();
    let summary = summarize(&seen, quorum);

    if args.look.json {
        let nodes = statuses
            .iter()
            .map(|s| {
                let mut json = node_json(&s.node, &s.state, s.quarantine, s.may_evict);
                json.marker = s.marker.map(|m| m.to_string());
                json.shard = s.shard.as_ref().map(|shard| ShardJson {
                    slot: shard.slot,
                    master: &shard.master,
                    replicas: shard
                        .replicas
                        .iter()
                        .map(|(address, failed)| ReplicaJson {
                            address,
                            failed: *failed,
                        })
                        .collect(),
                });
                json
            })
            .collect();
        output::print(&output::json(&Report {
            resource: &args.look.resource,
            quorum,
            reachable: summary.reachable,
            quarantined: summary.quarantined,
            holder: summary.holder,
            held_on: summary.held_on,
            summary: &summary.text,
            nodes,
        }))?;
    } else {
        let width = statuses.iter().map(|s| s.node.len()).max().unwrap_or(0);
        for s in &statuses {
            let mut line = format!("{:width$}  {}", s.node, describe(&s.state));
            if let Some(marker) = s.marker {
                line.push_str(&format!("; marker {marker}"));
            }
            if let Some(quarantine) = s.quarantine {
                line.push_str(&format!(
                    "; quarantined: {quarantine} (its grants are not votes)"
                ));
            }
            if s.may_evict {
                line.push_str(
                    "; WARNING: its maxmemory-policy may evict lock keys (use noeviction)",
                );
            }
            output::print(&line)?;
            if let Some(shard) = &s.shard {
                output::print(&format!("{:width$}  {}", "", describe_shard(shard)))?;
            }
        }
        output::print(&summary.text)?;
    }
    if summary.counted < quorum {
        let (resource, n) = (&args.look.resource, statuses.len());
        let longest = statuses
            .iter()
            .filter(|s| s.is_reachable())
            .filter_map(|s| s.quarantine.map(|q| (s.node.clone(), q)))
            .collect::<Vec<_>>();
        let longest = (!longest.is_empty()).then_some(Quarantine { nodes: longest });
        let message = match longest {
            Some(longest) => format!(
                "only {} of {n} servers answered and can vote, {quorum} needed to tell who holds \
                 {resource:?}: {}",
                summary.counted, longest
            ),
            None => format!(
                "only {} of {n} servers answered, {quorum} needed to tell who holds {resource:?}",
                summary.reachable
            ),
        };
        return Err(Failure::new(UNAVAILABLE, message));
    }
    Ok(OK)
}

fn summarize<'a>(nodes: &[Seen<'a>], quorum: usize) -> Summary<'a> {
    let n = nodes.len();
    let (mut reachable, mut counted, mut quarantined, mut free) = (0, 0, 0, 0);
    let mut counts: Vec<(&str, usize)> = Vec::new();
    let mut other_types: HashMap<&str, usize> = HashMap::new();
    let mut read_on = 0;
    for node in nodes {
        let answered = matches!(
            node.state,
            NodeState::Free
                | NodeState::Held { .. }
                | NodeState::Readers { .. }
                | NodeState::OtherType { .. }
        );
        if !answered {
            continue;
        }
        reachable += 1;
        if node.quarantined {
            quarantined += 1;
            continue;
        }
        counted += 1;
        match node.state {
            NodeState::Free => free += 1,
            NodeState::Held { value, .. } => match counts.iter_mut().find(|(v, _)| v == value) {
                Some((_, count)) => *count += 1,
                None => counts.push((value, 1)),
            },
            NodeState::Readers { .. } => read_on += 1,
            NodeState::OtherType { kind, .. } => *other_types.entry(kind).or_default() += 1,
            _ => {}
        }
    }
    // The most common value; on a tie, the one seen first (configuration order).
    let top = counts
        .iter()
        .fold(None, |best: Option<(&str, usize)>, &(v, c)| match best {
            Some((_, bc)) if bc >= c => best,
            _ => Some((v, c)),
        });
    let held_on = top.map_or(0, |(_, c)| c);
    let holder = top.filter(|(_, c)| *c >= quorum).map(|(v, _)| v);

    let mut text = if let Some(value) = holder {
        format!("held by {value} on {held_on}/{n} nodes (quorum {quorum})")
    } else if counted < quorum && quarantined == 0 {
        format!("unknown: only {counted}/{n} nodes answered (quorum {quorum})")
    } else if counted < quorum {
        format!(
            "unknown: only {counted}/{n} nodes answered that are not quarantined (quorum {quorum})"
        )
    } else if read_on >= quorum {
        format!("held by readers on {read_on}/{n} nodes (quorum {quorum})")
    } else if let Some((kind, count)) = other_types.iter().max_by_key(|(_, c)| **c) {
        format!("not a lock: the key is a {kind} on {count}/{n} nodes")
    } else if free == counted {
        format!("free on {free}/{n} nodes")
    } else {
        let mut parts: Vec<String> = counts
            .iter()
            .map(|(v, c)| format!("held by {v} on {c}/{n}"))
            .collect();
        if free > 0 {
            parts.push(format!("free on {free}/{n}"));
        }
        format!(
            "not held by a quorum (quorum {quorum}): {}",
            parts.join(", ")
        )
    };
    if quarantined > 0 {
        text.push_str(&format!(", {quarantined} quarantined"));
    }
    let down = n - reachable;
    // Without quarantined nodes, "only k/n nodes answered" already says it.
    if down > 0 && (counted >= quorum || quarantined > 0) {
        text.push_str(&format!(
            "; {down} node{} unreachable",
            if down == 1 { "" } else { "s" }
        ));
    }
    Summary {
        holder,
        held_on,
        reachable,
        counted,
        quarantined,
        text,
    }
}

fn expiry(ttl: &Option<Duration>) -> String {
    match ttl {
        Some(ttl) => format!("expires in {}", duration::format(*ttl)),
        None => "no expiry".to_owned(),
    }
}

fn describe(state: &NodeState) -> String {
    match state {
        NodeState::Free => "free".to_owned(),
        NodeState::Held { value, ttl } => format!("held by {value}, {}", expiry(ttl)),
        NodeState::Readers { count, ttl } => {
            let plural = if *count == 1 { "" } else { "s" };
            format!("held by {count} reader{plural}, {}", expiry(ttl))
        }
        NodeState::OtherType { kind, ttl } => format!("a {kind}, not a lock, {}", expiry(ttl)),
        NodeState::Unavailable(reply) => format!("unavailable: {reply}"),
        other => format!("{other:?}"),
    }
}

/// `slot 1234 on master 127.0.0.1:7000, replicas 127.0.0.1:7003 (ok), 127.0.0.1:7004 (failed)`.
fn describe_shard(shard: &redquorum::Shard) -> String {
    let replicas = if shard.replicas.is_empty() {
        "no replica".to_owned()
    } else {
        let listed: Vec<String> = shard
            .replicas
            .iter()
            .map(|(address, failed)| {
                format!("{address} ({})", if *failed { "failed" } else { "ok" })
            })
            .collect();
        format!("replicas {}", listed.join(", "))
    };
    format!("slot {} on master {}, {replicas}", shard.slot, shard.master)
}

fn node_json<'a>(
    node: &'a str,
    state: &'a NodeState,
    quarantine: Option<redquorum::Quarantine>,
    may_evict: bool,
) -> NodeJson<'a> {
    let mut json = NodeJson {
        node,
        reachable: true,
        state: "free",
        value: None,
        kind: None,
        pttl_ms: None,
        readers: None,
        quarantined_ms: quarantine.map(|q| q.left.as_millis()),
        quarantine_reason: quarantine.map(|q| q.reason.to_string()),
        marker: None,
        may_evict,
        error: None,
        shard: None,
    };
    match state {
        NodeState::Free => {}
        NodeState::Held { value, ttl } => {
            json.state = "held";
            json.value = Some(value);
            json.kind = Some("string");
            json.pttl_ms = ttl.map(|t| t.as_millis());
        }
        NodeState::Readers { count, ttl } => {
            json.state = "readers";
            json.kind = Some("zset");
            json.readers = Some(*count);
            json.pttl_ms = ttl.map(|t| t.as_millis());
        }
        NodeState::OtherType { kind, ttl } => {
            json.state = "other_type";
            json.kind = Some(kind);
            json.pttl_ms = ttl.map(|t| t.as_millis());
        }
        NodeState::Unavailable(reply) => {
            json.state = "unavailable";
            json.reachable = false;
            json.error = Some(reply.to_string());
        }
        other => {
            json.state = "unknown";
            json.error = Some(format!("{other:?}"));
        }
    }
    json
}

#[cfg(test)]
mod tests {
    use super::*;
    use redquorum::Reply;

    fn held(v: &str) -> NodeState {
        NodeState::Held {
            value: v.into(),
            ttl: Some(Duration::from_secs(5)),
        }
    }

    fn down() -> NodeState {
        NodeState::Unavailable(Reply::Timeout)
    }

    /// The summary with the holder owned, so tests can pass temporaries.
    struct Owned {
        holder: Option<String>,
        held_on: usize,
        reachable: usize,
        counted: usize,
        quarantined: usize,
        text: String,
    }

    fn summary(states: &[NodeState]) -> Owned {
        with_quarantined(states, &[])
    }

    /// The summary when the nodes at `quarantined` (indexes) are in restart quarantine.
    fn with_quarantined(states: &[NodeState], quarantined: &[usize]) -> Owned {
        let seen: Vec<Seen> = states
            .iter()
            .enumerate()
            .map(|(i, state)| Seen {
                state,
                quarantined: quarantined.contains(&i),
            })
            .collect();
        let s = summarize(&seen, states.len() / 2 + 1);
        Owned {
            holder: s.holder.map(str::to_owned),
            held_on: s.held_on,
            reachable: s.reachable,
            counted: s.counted,
            quarantined: s.quarantined,
            text: s.text,
        }
    }

    #[test]
    fn a_value_on_a_quorum_is_the_holder() {
        let s = summary(&[held("a"), held("a"), NodeState::Free]);
        assert_eq!(s.holder.as_deref(), Some("a"));
        assert_eq!(s.text, "held by a on 2/3 nodes (quorum 2)");
    }

    #[test]
    fn a_value_short_of_a_quorum_is_not_held() {
        let s = summary(&[held("a"), held("b"), NodeState::Free]);
        assert_eq!(s.holder, None);
        assert_eq!(
            s.text,
            "not held by a quorum (quorum 2): held by a on 1/3, held by b on 1/3, free on 1/3"
        );
    }

    #[test]
    fn free_everywhere_and_unreachable_nodes_are_counted() {
        assert_eq!(
            summary(&[NodeState::Free, NodeState::Free, NodeState::Free]).text,
            "free on 3/3 nodes"
        );
        let s = summary(&[NodeState::Free, down(), NodeState::Free]);
        assert_eq!(s.text, "free on 2/3 nodes; 1 node unreachable");
        assert_eq!(s.reachable, 2);
    }

    #[test]
    fn too_few_answers_are_unknown_even_if_a_value_shows() {
        let s = summary(&[held("a"), down(), down()]);
        assert_eq!(s.holder, None);
        assert_eq!(s.held_on, 1);
        assert_eq!(s.text, "unknown: only 1/3 nodes answered (quorum 2)");
    }

    #[test]
    fn quarantined_nodes_are_shown_but_not_counted_toward_the_quorum() {
        let five = [held("a"), held("a"), held("a"), held("a"), NodeState::Free];
        let s = with_quarantined(&five, &[0]);
        assert_eq!(s.holder.as_deref(), Some("a"));
        assert_eq!(s.held_on, 3);
        assert_eq!((s.reachable, s.counted, s.quarantined), (5, 4, 1));
        assert_eq!(s.text, "held by a on 3/5 nodes (quorum 3), 1 quarantined");

        // Held on a quorum only with the quarantined node's copy: not held.
        let s = with_quarantined(&[held("a"), held("a"), NodeState::Free], &[1]);
        assert_eq!(s.holder, None);
        assert_eq!(s.held_on, 1);
        assert_eq!(
            s.text,
            "not held by a quorum (quorum 2): held by a on 1/3, free on 1/3, 1 quarantined"
        );

        // "Free" on a node that may have lost its keys says nothing.
        let s = with_quarantined(&[NodeState::Free, NodeState::Free, down()], &[0]);
        assert_eq!(s.counted, 1);
        assert_eq!(
            s.text,
            "unknown: only 1/3 nodes answered that are not quarantined (quorum 2), \
             1 quarantined; 1 node unreachable"
        );
        let s = with_quarantined(&[NodeState::Free], &[0]);
        assert_eq!(
            s.text,
            "unknown: only 0/1 nodes answered that are not quarantined (quorum 1), 1 quarantined"
        );
        let s = with_quarantined(&[NodeState::Free, NodeState::Free, NodeState::Free], &[2]);
        assert_eq!(s.text, "free on 2/3 nodes, 1 quarantined");
    }

    #[test]
    fn another_type_is_not_a_lock() {
        let hash = NodeState::OtherType {
            kind: "hash".into(),
            ttl: None,
        };
        let s = summary(&[hash.clone(), hash, NodeState::Free]);
        assert_eq!(s.text, "not a lock: the key is a hash on 2/3 nodes");
    }

    #[test]
    fn json_nodes_say_what_is_known() {
        let state = held("v");
        let json = serde_json::to_value(node_json("n:1", &state, None, false)).unwrap();
        assert_eq!(json["state"], "held");
        assert_eq!(json["value"], "v");
        assert_eq!(json["pttl_ms"], 5000);
        assert!(json["quarantined_ms"].is_null());
        let quarantined = Some(redquorum::Quarantine::new(
            Duration::from_millis(29_500),
            redquorum::QuarantineReason::FirstSeenWithoutMarker,
        ));
        let json = serde_json::to_value(node_json("n:1", &state, quarantined, true)).unwrap();
        assert_eq!(json["quarantined_ms"], 29_500);
        assert_eq!(json["quarantine_reason"], "first seen without a marker");
        assert_eq!(json["may_evict"], true);
        let state = down();
        let json = serde_json::to_value(node_json("n:1", &state, None, false)).unwrap();
        assert_eq!(json["reachable"], false);
        assert_eq!(json["error"], "timed out");
        assert!(json["value"].is_null());
    }
}
