//! An operator's vouch (`redlock nodes mark`, [`Redlock::mark_nodes`]): that servers lost
//! nothing (brand-new, or known good), so that they vote at once instead of after the restart
//! quarantine. The marker is rewritten in place by [`vouch`](crate::nodes::vouch)'s script, the
//! only code that does. What refuses a mark is the rule in `protocol::mark`. Also the marker a tool
//! writes on a brand-new Redis Cluster master ([`cluster_marker`]).

use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;

use crate::nodes::connect::connect_once;
use crate::nodes::node::Node;
use crate::nodes::node_error::NodeError;
use crate::nodes::vouch::rewrite;
use crate::protocol::mark::{Mark, Vouch, refused};
use crate::protocol::quarantine::{cluster_marker_with_id, info_field};

/// Vouches for every node of `nodes` ([`Redlock::mark_nodes`](crate::Redlock::mark_nodes) says what is
/// done and refused).
pub(crate) async fn mark_nodes(
    nodes: &[Node],
    vouch: Vouch,
    max_ttl: Duration,
    timeout: Duration,
) -> Vec<(String, Mark)> {
    let force = vouch == Vouch::Forced;
    // A node without a marker in a group whose other nodes carry one is new to the group:
    // it may replace a node that held locks (a marker of its own is not the question).
    // A Sentinel node's marker is on the primary the sentinels name (its replicas get it by
    // replication).
    let peeked = join_all(nodes.iter().map(|node| async move {
        let carrier = match tokio::time::timeout(timeout, node.marker_carrier()).await {
            Ok(Some(Ok(carrier))) => carrier,
            Ok(Some(Err(e))) => return Err(Mark::Failed(e.reply().to_string())),
            Err(_) => return Err(Mark::Failed(NodeError::Timeout.reply().to_string())),
            Ok(None) => return Err(Mark::Cluster),
        };
        let (conn, found) = peek(carrier.client(), timeout).await?;
        Ok((conn, found, carrier))
    }))
    .await;
    let group_marked = peeked
        .iter()
        .any(|p| matches!(p, Ok((_, found, _)) if found == "vouched" || found == "other"));
    join_all(nodes.iter().zip(peeked).map(|(node, peeked)| async move {
        let (mark, carrier) = match peeked {
            Err(mark) => (mark, None),
            // Told before the evidence against the server: a marker that vouches already
            // needs nothing (the script checks again, atomically).
            Ok((_, found, carrier)) if !force && (found == "vouched" || found == "other") => (
                Mark::HasMarker {
                    vouches: found == "vouched",
                },
                Some(carrier),
            ),
            Ok((_, found, carrier))
                if group_marked && !force && (found == "none" || found == "new") =>
            {
                (Mark::NewToGroup, Some(carrier))
            }
            Ok((conn, _, carrier)) => (self::mark(conn, vouch, max_ttl).await, Some(carrier)),
        };
        // This manager's own next lock need not wait for its next health check.
        if let (true, Some(server)) = (mark.is_marked(), carrier) {
            server.recheck_now().await;
        }
        (node.label().to_owned(), mark)
    }))
    .await
}

/// A connection to the server and what its marker is, as `scripts/vouch.lua` classifies it
/// (`none`, `new`, `vouched`, `other`); the failure to report when it cannot be read.
async fn peek(
    client: &redis::Client,
    timeout: Duration,
) -> Result<(MultiplexedConnection, String), Mark> {
    let failed = |e: NodeError| Mark::Failed(e.reply().to_string());
    let mut conn = connect_once(client, timeout)
        .await
        .map_err(|e| failed(NodeError::from_redis(&e)))?;
    let (_, found) = rewrite(&mut conn, "peek", "", "", false, 0, "")
        .await
        .map_err(failed)?;
    Ok((conn, found))
}

/// Vouches for one server as an operator: a marker that vouches at once for its current run
/// (`marker` invariant 3), unless the evidence refuses it ([`Vouch`]).
async fn mark(mut conn: MultiplexedConnection, vouch: Vouch, max_ttl: Duration) -> Mark {
    let force = vouch == Vouch::Forced;
    let failed = |e: &redis::RedisError| Mark::Failed(NodeError::from_redis(e).reply().to_string());
    let info: String = match redis::cmd("INFO").arg("all").query_async(&mut conn).await {
        Ok(info) => info,
        Err(e) => return failed(&e),
    };
    if let Some(refusal) = refused(&info, vouch, max_ttl) {
        return refusal;
    }
    let run_id = info_field(&info, "run_id").unwrap_or_default();
    let fresh = format!("{:016x}", crate::base::fresh::u64());
    match rewrite(&mut conn, "mark", &fresh, run_id, force, 0, "").await {
        Ok((true, found)) => match found.as_str() {
            "none" => Mark::Written,
            "new" => Mark::Vouched,
            _ => Mark::Overwritten,
        },
        Ok((false, found)) => Mark::HasMarker {
            vouches: found == "vouched",
        },
        Err(e) => Mark::Failed(e.reply().to_string()),
    }
}

/// The marker of a brand-new Redis Cluster master whose lowest served slot is `lowest_slot`,
/// given its `INFO` (the `server` and `replication` sections, as a plain `INFO` returns them):
/// its key and a value that vouches for it at once (`quarantine` invariants 3, 6). For tools
/// that prepare new clusters, as `redquorum-nodes` does; write it with `SET … NX`.
pub fn cluster_marker(lowest_slot: u16, info: &str) -> (String, String) {
    cluster_marker_with_id(lowest_slot, info, crate::base::fresh::u64())
}
