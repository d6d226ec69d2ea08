//! Writing receipts (`succession` invariant 5): on a replicated node's primary, one key per
//! replica run that a vote waits for, naming the primary's history, so that a client that never
//! saw the replica caught up can tell, once it is promoted, that it received the primary's
//! writes after it last started. Shared by the nodes that know their replicas' runs: behind
//! Sentinel ([`sentinels`](crate::nodes::sentinels)), which lists them, and behind a fixed
//! address ([`endpoint`](crate::nodes::endpoint)), which reads them from the replicas.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::nodes::node_error::NodeError;
use crate::nodes::scripts::RECEIPTS;
use crate::nodes::server::{Server, ServerSettings};
use crate::protocol::succession::receipt_key;

/// Writes on `primary`, in the background, the receipts due for `runs`, the replica runs a vote
/// waits for. Best effort: a receipt that is not written leaves a promoted replica to the
/// ordinary rules, so a failure is only logged.
pub(crate) fn write(primary: &Arc<Server>, runs: Vec<String>, settings: ServerSettings) {
    let trust = settings.trust;
    let Some(replicated) = primary.replication().filter(|_| trust.enabled) else {
        return;
    };
    let due = replicated.receipts_due(runs);
    if due.is_empty() {
        return;
    }
    let primary = Arc::clone(primary);
    tokio::spawn(async move {
        let written = tokio::time::timeout(
            settings.connect_timeout,
            receipts(&primary, &due, trust.max_ttl),
        )
        .await
        .unwrap_or(Err(NodeError::Timeout));
        let history = match written {
            Ok(history) => history,
            Err(e) => {
                tracing::debug!(error = %e.reply(), "receipts for the replicas not written");
                None
            }
        };
        if let Some(replicated) = primary.replication() {
            replicated.receipts_written(due, history);
        }
    });
}

/// Writes the receipts for `runs` on `primary` (`scripts/receipts.lua`): the history they
/// name, or `None` when the server is not a primary.
async fn receipts(
    primary: &Server,
    runs: &[String],
    max_ttl: Duration,
) -> Result<Option<String>, NodeError> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(RECEIPTS).arg(runs.len());
    for run in runs {
        cmd.arg(receipt_key(run));
    }
    cmd.arg(u64::try_from(max_ttl.as_millis()).unwrap_or(u64::MAX))
        .arg(receipt_key(""));
    let connection = primary.connection().await?;
    // `succession` invariant 6: a receipt of a quarantined primary's data vouches for nothing
    // (its health check ran before `connection` returned).
    if primary.quarantine().is_some() {
        return Ok(None);
    }
    let reply = connection.query(cmd, false).await?;
    Ok(match reply {
        Value::BulkString(history) => String::from_utf8(history).ok(),
        _ => None,
    })
}
