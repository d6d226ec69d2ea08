//! The health check: what a node is judged by before any reply on a connection counts as a vote
//! ([`server`](crate::nodes::server) invariant 2), and again every `HEALTH_RECHECK`. It reads
//! `CONFIG GET` (best-effort: persistence and eviction), `INFO server` (`run_id`, uptime, version),
//! the marker key (written when missing, by a script that gives it its quarantine) and, for a
//! durable node, `INFO replication`; the [`quarantine`](crate::protocol::quarantine) module judges
//! what it read.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::RedisError;
use redis::aio::MultiplexedConnection;

use crate::base::sync::lock;
use crate::nodes::node_error::NodeError;
use crate::nodes::replicated::Replicated;
use crate::nodes::run_ids::RunIds;
use crate::nodes::scripts::MARKER;
use crate::nodes::vouch::FirstSight;
use crate::protocol::aliases::Claimant;
use crate::protocol::marker::{MarkerValue, Tag};
use crate::protocol::quarantine::{
    Marker, Memory, Observation, QuarantineReason, TrustPolicy, UPTIME_SLACK, info_field,
    marker_owner,
};
use crate::protocol::succession::{Candidate, Succession, receipt_key};

/// Where a server's marker is, and whether it names its owner.
#[derive(Debug, Clone)]
pub(crate) struct MarkerKey {
    /// The key: [`MARKER_KEY`](crate::MARKER_KEY), or a Redis Cluster master's own.
    pub(crate) key: String,
    /// Whether the marker names the process it belongs to (a cluster master's: quarantine
    /// invariant 6).
    pub(crate) owned: bool,
}

/// The health check's verdict for one connection.
#[derive(Debug, Clone)]
pub(crate) struct Health {
    pub(crate) trusted_from: Instant,
    pub(crate) checked_at: Instant,
    /// The marker value a vote must read back (quarantine on only).
    pub(crate) marker: Option<String>,
    /// Whether `maxmemory-policy` lets the server evict lock keys.
    pub(crate) may_evict: bool,
    /// A Redis Cluster master's `master_replid`, which a vote reads back with the marker
    /// ([`server`](crate::nodes::server) invariant 7): a failback changes it and nothing else.
    pub(crate) history: Option<String>,
}

/// The health check, judged by the quarantine rules: `INFO server`, the marker script and
/// `CONFIG GET` of the persistence and eviction settings. With the quarantine off only the
/// (best-effort) `CONFIG GET` is sent: nothing else is judged.
pub(crate) async fn check_health(
    conn: &mut MultiplexedConnection,
    trust: &TrustPolicy,
    memory: &Mutex<Memory>,
    marker: &MarkerKey,
    first_sight: Option<&Arc<FirstSight>>,
    claim: Option<(&RunIds, &Claimant)>,
    replicated: Option<&Replicated>,
) -> Result<Health, NodeError> {
    let config = read_config(conn).await;
    let reported = std::mem::replace(&mut lock(memory).eviction_reported, config.may_evict);
    if config.may_evict && !reported {
        tracing::warn!(
            "node may evict lock keys under memory pressure (maxmemory-policy is not noeviction): \
             an evicted key is a lock given twice"
        );
    }
    if !trust.enabled {
        if let Some(replicated) = replicated {
            // Plain Redlock, but a vote still waits for the replicas (`succession` invariant 1).
            let replication: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(conn)
                .await
                .map_err(|e| NodeError::from_redis(&e))?;
            must_lead(&replication)?;
            replicated.observe(&replication, Instant::now());
        }
        let now = Instant::now();
        return Ok(Health {
            trusted_from: now,
            checked_at: now,
            marker: None,
            may_evict: config.may_evict,
            history: None,
        });
    }
    // A Redis Cluster master's quarantine is longer by the cluster's node timeout (quarantine
    // invariant 6): a master cut off from the others takes writes for up to that long after
    // its replica was promoted in its place.
    let cluster_trust;
    let trust = if marker.owned {
        let unread = config.cluster_node_timeout.is_none();
        let reported = std::mem::replace(&mut lock(memory).node_timeout_unread_reported, unread);
        if unread && !reported {
            tracing::warn!(
                assumed_ms = DEFAULT_CLUSTER_NODE_TIMEOUT.as_millis(),
                "cannot read this Redis Cluster master's cluster-node-timeout (CONFIG GET \
                 refused: allow +config|get, see docs/cluster.md): Redis's default 15 s is \
                 assumed; with a longer one the quarantine after a failover is too short and a \
                 lock can be given twice"
            );
        }
        let extra = config
            .cluster_node_timeout
            .unwrap_or(DEFAULT_CLUSTER_NODE_TIMEOUT);
        cluster_trust = TrustPolicy {
            max_ttl: trust.max_ttl.saturating_add(extra),
            ..*trust
        };
        &cluster_trust
    } else {
        trust
    };
    let first_seen = lock(memory).is_first_sight();
    // One round trip for the three sections (one permission, `+info`, covers them all):
    // `INFO server` (run_id, uptime, version); `INFO replication`, for an owned marker's owner
    // and replication history (quarantine invariant 6), a durable node never promoted
    // (invariant 4), and a history that changed under the same run (invariant 7); `INFO stats`,
    // for the evicted keys (invariant 7).
    let (info, replication, stats): (String, String, String) = redis::pipe()
        .cmd("INFO")
        .arg("server")
        .cmd("INFO")
        .arg("replication")
        .cmd("INFO")
        .arg("stats")
        .query_async(conn)
        .await
        .map_err(|e| needs(&e, "INFO", "+info"))?;
    too_old(&info)?;
    if replicated.is_some() {
        must_lead(&replication)?;
    }
    let durable_config = trust.trust_durable && config.durable;
    let owner = if marker.owned {
        marker_owner(&info, &replication, trust.owner_history)
    } else {
        String::new()
    };
    let history = ((marker.owned && trust.owner_history) || replicated.is_some())
        .then(|| info_field(&replication, "master_replid").map(str::to_owned))
        .flatten();
    let succession = match replicated {
        Some(replicated) => succeed(conn, replicated, trust, memory, &info, &replication).await?,
        None => Succession::Ordinary,
    };
    let owner = owner.as_str();
    // A marker written on first sight says so (`marker`), outside clusters (`first_sight`
    // invariant 5).
    let tag = if first_seen && !marker.owned {
        "new."
    } else {
        ""
    };
    let (key, max_ttl) = (&marker.key, trust.max_ttl);
    let fingerprint = first_sight.map(|g| g.fingerprint());
    let undrawn_vouch = trust.hand_markers_vouch;
    let mut marker =
        read_marker(conn, max_ttl, key, owner, tag, fingerprint, undrawn_vouch).await?;
    if let (true, Some(group)) = (first_seen && unmarked(&marker), first_sight) {
        // The group's evidence may vouch for every node at once (`first_sight`): waited for a
        // part of the connect timeout at most, then the marker is read again, vouched or not.
        // Only for a node without a marker of its own: one that shows one is judged at once.
        let _ = tokio::time::timeout(group.patience(), group.settle()).await;
        marker = read_marker(conn, max_ttl, key, owner, tag, fingerprint, undrawn_vouch).await?;
    }
    // A replica promoted in place of a master has the master's marker (it was replicated) but
    // maybe not its last keys: its own durability says nothing about them (quarantine
    // invariant 4).
    let durable = durable_config && never_promoted(&replication);
    let observed = [info.as_str(), &replication, &stats].concat();
    let mut seen = Observation::from_info(&observed, durable, marker)
        .ok_or_else(|| NodeError::Server("INFO server lacks run_id or uptime".to_owned()))?;
    seen.succeeded = succession == Succession::Continues;
    // Quarantine invariant 7: a node whose settings cannot be read may evict, for all we know.
    seen.may_evict = config.may_evict || !config.read;
    if let Some((run_ids, claimant)) = claim {
        // `aliases` invariant 1: one server, one vote.
        run_ids.claim(claimant, &seen.run_id).map_err(|other| {
            NodeError::Server(format!(
                "the same server as {other} (the same run_id): it would vote twice; list each \
                 server once"
            ))
        })?;
    }
    let now = Instant::now();
    let verdict = lock(memory).judge(trust, &seen, now);
    if let (Some(replicated), Some(history)) =
        (replicated, info_field(&replication, "master_replid"))
        && verdict.trusted_from > now
    {
        // `succession` invariant 6: a copy of it is no better until then.
        lock(&replicated.lineage).taint(history, verdict.trusted_from, now);
    }
    let quarantined_ms = verdict
        .trusted_from
        .saturating_duration_since(now)
        .as_millis();
    if let Some(loss) = verdict.loss {
        tracing::warn!(run_id = %seen.run_id, quarantined_ms, "node quarantined: {loss}");
    } else if let (true, Some(reason)) = (first_seen, verdict.reason) {
        tracing::info!(run_id = %seen.run_id, quarantined_ms, "node quarantined: {reason}");
    }
    Ok(Health {
        trusted_from: verdict.trusted_from,
        checked_at: now,
        marker: Some(seen.marker.value().to_owned()),
        may_evict: config.may_evict,
        history,
    })
}

/// Judges a server that says it is a replicated node's primary by what the client saw of the
/// service (`succession`): a promotion that may lack a counted vote is a loss, recorded before
/// the ordinary rules judge the rest.
async fn succeed(
    conn: &mut MultiplexedConnection,
    replicated: &Replicated,
    trust: &TrustPolicy,
    memory: &Mutex<Memory>,
    info: &str,
    replication: &str,
) -> Result<Succession, NodeError> {
    let now = Instant::now();
    let candidate = Candidate::read(&replicated.address, info, replication).ok_or_else(|| {
        NodeError::Server("INFO lacks run_id or master_replid: not a primary we can judge".into())
    })?;
    let mut verdict = lock(&replicated.lineage).judge(&candidate, now, trust.max_ttl);
    if replicated.trusting {
        // The chaos run's replaced rule: whatever server answers continues the history.
        replicated.observe(replication, now);
        return Ok(Succession::Continues);
    }
    // `succession` invariant 5: a promoted primary young enough for its uptime to hold it back
    // may show that it caught up after its start. Read only then (after a failover).
    let young = candidate.uptime.saturating_sub(UPTIME_SLACK) < trust.max_ttl;
    if verdict == Succession::Ordinary && young && candidate.was_promoted() {
        // A receipt that cannot be read (an ACL without the key) is a receipt not shown.
        let receipt: Option<String> = redis::cmd("GET")
            .arg(receipt_key(&candidate.run_id))
            .query_async(conn)
            .await
            .unwrap_or(None);
        if lock(&replicated.lineage).received(&candidate, receipt.as_deref()) {
            verdict = Succession::Continues;
        }
    }
    // Judged first: its own list of replicas says nothing of its past as one.
    replicated.observe(replication, now);
    let lost = match verdict {
        Succession::Lost(reason) => Some((lock(memory).lost_data(trust, now, reason), reason)),
        Succession::Inherits(until) => {
            let reason = QuarantineReason::Promoted;
            Some((lock(memory).lost_until(until, reason), reason))
        }
        Succession::Ordinary | Succession::Continues => None,
    };
    if let Some((until, reason)) = lost {
        tracing::warn!(
            run_id = %candidate.run_id,
            quarantined_ms = until.saturating_duration_since(now).as_millis(),
            "new primary quarantined: {reason}"
        );
    }
    Ok(verdict)
}

/// A replicated node's server must be its primary: a replica's `OK` (one made writable) is
/// never a vote.
fn must_lead(replication: &str) -> Result<(), NodeError> {
    if info_field(replication, "role") != Some("master") {
        // `READONLY` tells the node that the primary moved: it asks the sentinels again.
        return Err(NodeError::Server(
            "READONLY this server is a replica now, not the primary".to_owned(),
        ));
    }
    Ok(())
}

/// Whether the marker is a first-sight one still pending: the node showed none to us or to
/// another client that saw it first (`marker`).
fn unmarked(marker: &Marker) -> bool {
    let value = MarkerValue::parse(marker.value());
    value.tag == Tag::New && !matches!(marker, Marker::Found { pending, .. } if pending.is_zero())
}

/// The oldest Redis whose scripts may write after reading `TIME` (effects replication by
/// default), which the marker and the fair-waiting scripts do.
const OLDEST_REDIS: u32 = 5;

/// Refuses a server older than [`OLDEST_REDIS`], named by its `INFO server` reply.
fn too_old(info: &str) -> Result<(), NodeError> {
    let version = info
        .lines()
        .find_map(|line| line.trim_end().strip_prefix("redis_version:"));
    let major = version
        .and_then(|v| v.split('.').next())
        .and_then(|major| major.parse::<u32>().ok());
    match (version, major) {
        (Some(version), Some(major)) if major < OLDEST_REDIS => Err(NodeError::Server(format!(
            "Redis {version} is too old: redlock needs Redis {OLDEST_REDIS} or later"
        ))),
        _ => Ok(()),
    }
}

/// A health-check command the server refused: a permission it lacks is named, with the ACL rule
/// that grants it.
fn needs(e: &RedisError, what: &str, rule: &str) -> NodeError {
    if e.code() == Some("NOPERM") {
        return NodeError::Server(format!(
            "NOPERM this user may not run {what}, which the restart quarantine needs: allow \
             `{rule}` (see docs/acl.md) or turn the quarantine off"
        ));
    }
    NodeError::from_redis(e)
}

/// Reads the marker, writing one if it is missing (quarantine invariants 2, 3).
async fn read_marker(
    conn: &mut MultiplexedConnection,
    max_ttl: Duration,
    marker_key: &str,
    owner: &str,
    tag: &str,
    group: Option<&str>,
    undrawn_vouch: bool,
) -> Result<Marker, NodeError> {
    let call = |undrawn: &str| {
        let fresh = format!("{:016x}", crate::base::fresh::u64());
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(MARKER.source)
            .arg(1)
            .arg(marker_key)
            .arg(fresh)
            .arg(u64::try_from(max_ttl.as_millis()).unwrap_or(u64::MAX))
            .arg(owner)
            .arg(tag)
            .arg(undrawn);
        cmd
    };
    let failed =
        |e: redis::RedisError| needs(&e, "the marker script", &format!("+eval ~{marker_key}"));
    let (mut value, mut written, mut node_ms): (String, u8, u64) =
        call("").query_async(conn).await.map_err(failed)?;
    if written == 0 && !undrawn_vouch && !MarkerValue::parse(&value).tells_servers_apart() {
        // `marker` invariant 5: a word written by hand is on any server it was written on, so it
        // vouches for none; it is replaced as if missing, with its quarantine.
        (value, written, node_ms) = call(&value).query_async(conn).await.map_err(failed)?;
    }
    Ok(Marker::from_reply(value, written, node_ms, group, max_ttl))
}

/// Whether `INFO replication` shows a server that was never a replica promoted to master since
/// it last started (`second_repl_offset:-1`).
fn never_promoted(replication: &str) -> bool {
    replication
        .lines()
        .any(|line| line.trim_end() == "second_repl_offset:-1")
}

/// What `CONFIG GET` says about persistence and eviction.
#[derive(Debug, Clone, Copy, Default)]
struct ServerConfig {
    /// AOF on, fsync on every write: the node cannot lose acknowledged writes.
    durable: bool,
    /// A memory limit with a policy that may evict keys with a TTL (lock keys).
    may_evict: bool,
    /// Whether `CONFIG GET` answered at all: else nothing here is known.
    read: bool,
    /// `cluster-node-timeout`, when it could be read.
    cluster_node_timeout: Option<Duration>,
}

/// Redis's default `cluster-node-timeout`, assumed when it cannot be read.
const DEFAULT_CLUSTER_NODE_TIMEOUT: Duration = Duration::from_secs(15);

/// Reads [`ServerConfig`]; all `false` when `CONFIG` is not allowed (renamed, or denied by an
/// ACL): such a node is not known to be durable, nor known to evict.
async fn read_config(conn: &mut MultiplexedConnection) -> ServerConfig {
    let mut pipe = redis::pipe();
    let names = [
        "appendonly",
        "appendfsync",
        "maxmemory",
        "maxmemory-policy",
        "cluster-node-timeout",
    ];
    for name in names {
        pipe.cmd("CONFIG").arg("GET").arg(name);
    }
    type Pairs = (
        Vec<String>,
        Vec<String>,
        Vec<String>,
        Vec<String>,
        Vec<String>,
    );
    let Ok((appendonly, appendfsync, maxmemory, policy, node_timeout)): Result<Pairs, _> =
        pipe.query_async(conn).await
    else {
        return ServerConfig::default();
    };
    let value = |pair: &[String]| pair.get(1).cloned().unwrap_or_default();
    ServerConfig {
        read: true,
        durable: value(&appendonly) == "yes" && value(&appendfsync) == "always",
        may_evict: value(&maxmemory) != "0" && value(&policy) != "noeviction",
        cluster_node_timeout: value(&node_timeout)
            .parse::<u64>()
            .ok()
            .map(Duration::from_millis),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_older_than_redis_5_are_refused_by_name() {
        let info = |v: &str| format!("# Server\r\nredis_version:{v}\r\nrun_id:x\r\n");
        assert!(too_old(&info("7.0.15")).is_ok());
        assert!(too_old(&info("5.0.0")).is_ok());
        let Err(NodeError::Server(why)) = too_old(&info("4.0.14")) else {
            panic!("Redis 4 accepted");
        };
        assert!(why.contains("4.0.14") && why.contains("Redis 5"), "{why}");
        // Valkey and other servers that report a version keep working.
        assert!(too_old("# Server\r\n").is_ok());
    }
}
