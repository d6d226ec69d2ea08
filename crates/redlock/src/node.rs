//! One Redis master: the only place where bytes go to Redis.
//!
//! Each node owns one long-lived multiplexed connection, shared by every lock and every task.
//! It is redis-rs's [`ConnectionManager`], created lazily on first use (so a manager can be built
//! outside a runtime and while some servers are down) and re-established in the background after
//! the server goes away and comes back. Requests from many tasks are pipelined on it; no request
//! ever opens a TCP connection of its own.
//!
//! Every request is bounded by a deadline given by the caller: the manager sends all requests of a
//! round at the same instant, so "per-node timeout" and "one deadline for the round" are the same
//! thing. A node that does not answer in time (stopped, overloaded, partitioned) is a
//! [`NodeError::Timeout`], never a vote.
//!
//! Scripts are sent as `EVALSHA`; on `NOSCRIPT` (a node restarted, or its script cache was flushed)
//! the same call is repeated once as `EVAL` with the script body, which also caches it again. They
//! are loaded ahead with `SCRIPT LOAD` when a connection is first made, so the common path never
//! pays for the fallback.

use std::sync::LazyLock;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::OnceCell;

use crate::error::{ConfigError, Reply, redact_url, secrets_in};
use crate::status::NodeState;

/// A Lua script with its SHA1, computed once.
struct LuaScript {
    source: &'static str,
    sha: String,
}

impl LuaScript {
    fn new(source: &'static str) -> Self {
        Self {
            source,
            sha: redis::Script::new(source).get_hash().to_owned(),
        }
    }
}

static RELEASE: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/release.lua")));
static EXTEND: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/extend.lua")));
static INSPECT: LazyLock<LuaScript> =
    LazyLock::new(|| LuaScript::new(include_str!("scripts/inspect.lua")));

/// One request of a round, the same for every node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Request {
    /// `SET key value NX PX ttl_ms`.
    Set { ttl_ms: u64 },
    /// The compare-and-PEXPIRE script.
    Extend { ttl_ms: u64 },
    /// The compare-and-delete script.
    Release,
    /// `PING`, then `SCRIPT LOAD` of our scripts: establishes the connection ahead of use.
    Connect,
}

/// Why a node gave no usable answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeError {
    Timeout,
    Unreachable(String),
    Server(String),
}

impl NodeError {
    /// The [`Reply`] that reports this error to callers.
    pub(crate) fn reply(&self) -> Reply {
        match self {
            NodeError::Timeout => Reply::Timeout,
            NodeError::Unreachable(why) => Reply::Unreachable(why.clone()),
            NodeError::Server(why) => Reply::ServerError(why.clone()),
        }
    }

    fn from_redis(e: &RedisError) -> Self {
        if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) {
            return NodeError::Server("NOSCRIPT".to_owned());
        }
        match e.code() {
            Some(code) => NodeError::Server(match e.detail() {
                Some(detail) => format!("{code} {detail}"),
                None => code.to_owned(),
            }),
            None if e.is_timeout() => NodeError::Timeout,
            None => NodeError::Unreachable(e.to_string()),
        }
    }
}

/// Turns a node's yes/no answer (or error) into the [`Reply`] reported to callers.
pub(crate) fn reply_of(result: &Result<bool, NodeError>) -> Reply {
    match result {
        Ok(true) => Reply::Granted,
        Ok(false) => Reply::Refused,
        Err(e) => e.reply(),
    }
}

/// One independent Redis master.
pub(crate) struct Node {
    label: String,
    client: redis::Client,
    config: ConnectionManagerConfig,
    conn: OnceCell<ConnectionManager>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("address", &self.label)
            .finish()
    }
}

impl Node {
    /// Parses `url` (`redis://`, `rediss://`, `redis+unix://`, with user, password and db) without
    /// connecting.
    pub(crate) fn new(url: &str, connect_timeout: Duration) -> Result<Self, ConfigError> {
        let client = redis::Client::open(url).map_err(|e| ConfigError::InvalidUrl {
            url: redact_url(url),
            reason: scrub(&e.to_string(), url),
        })?;
        let info = client.get_connection_info();
        let db = info.redis_settings().db();
        let label = if db == 0 {
            info.addr().to_string()
        } else {
            format!("{}/{db}", info.addr())
        };
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            // We bound every request ourselves, per round (see the module docs).
            .set_response_timeout(None)
            // Fail a connection attempt at once instead of retrying with back-off behind the
            // caller's back: the next request starts a fresh attempt, so a server that comes back
            // is picked up on the next round.
            .set_number_of_retries(0);
        Ok(Self {
            label,
            client,
            config,
            conn: OnceCell::new(),
        })
    }

    /// The node's address without credentials, e.g. `127.0.0.1:6379` or `/run/redis.sock/2`.
    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// What makes two nodes the same server: the address, whatever the db.
    pub(crate) fn server_identity(&self) -> String {
        self.client.get_connection_info().addr().to_string()
    }

    async fn connection(&self) -> Result<ConnectionManager, NodeError> {
        let conn = self
            .conn
            .get_or_try_init(|| async {
                let conn = ConnectionManager::new_lazy_with_config(
                    self.client.clone(),
                    self.config.clone(),
                )
                .map_err(|e| NodeError::Unreachable(e.to_string()))?;
                // Load the scripts ahead, in the background: the first requests need not wait,
                // and if they overtake it they fall back to EVAL.
                let mut loader = conn.clone();
                tokio::spawn(async move { load_scripts(&mut loader).await });
                Ok::<_, NodeError>(conn)
            })
            .await?;
        Ok(conn.clone())
    }

    async fn query(&self, cmd: &Cmd) -> Result<Value, NodeError> {
        let mut conn = self.connection().await?;
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| NodeError::from_redis(&e))
    }

    async fn bounded<T>(
        &self,
        deadline: Instant,
        request: impl Future<Output = Result<T, NodeError>>,
    ) -> Result<T, NodeError> {
        tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), request)
            .await
            .unwrap_or(Err(NodeError::Timeout))
    }

    /// Performs `request` before `deadline`: `Ok(true)` if the node did what we asked,
    /// `Ok(false)` if it refused (key exists, or does not hold our value).
    pub(crate) async fn send(
        &self,
        request: Request,
        key: &str,
        value: &str,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        match request {
            Request::Set { ttl_ms } => self.set_nx(key, value, ttl_ms, deadline).await,
            Request::Extend { ttl_ms } => self.extend(key, value, ttl_ms, deadline).await,
            Request::Release => self.release(key, value, deadline).await,
            Request::Connect => {
                let mut conn = self.connection().await?;
                self.bounded(deadline, load_scripts(&mut conn)).await?;
                Ok(true)
            }
        }
    }

    /// `SET key value NX PX ttl_ms`: `true` if we stored it, `false` if the key exists.
    async fn set_nx(
        &self,
        key: &str,
        value: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(value).arg("NX").arg("PX").arg(ttl_ms);
        self.bounded(deadline, async {
            match self.query(&cmd).await? {
                Value::Okay => Ok(true),
                Value::Nil => Ok(false),
                Value::SimpleString(s) if s == "OK" => Ok(true),
                other => Err(NodeError::Server(format!(
                    "unexpected reply to SET: {other:?}"
                ))),
            }
        })
        .await
    }

    /// The compare-and-delete script: `true` if the key held `value` and is now gone.
    async fn release(&self, key: &str, value: &str, deadline: Instant) -> Result<bool, NodeError> {
        self.bounded(deadline, self.eval(&RELEASE, key, value, None))
            .await
    }

    /// The compare-and-PEXPIRE script: `true` if the key held `value` and now expires in `ttl_ms`.
    async fn extend(
        &self,
        key: &str,
        value: &str,
        ttl_ms: u64,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        self.bounded(deadline, self.eval(&EXTEND, key, value, Some(ttl_ms)))
            .await
    }

    /// Runs a compare-and-act script: `true` if it found `value` and acted.
    async fn eval(
        &self,
        script: &LuaScript,
        key: &str,
        value: &str,
        ttl_ms: Option<u64>,
    ) -> Result<bool, NodeError> {
        let mut args = vec![value.to_owned()];
        args.extend(ttl_ms.map(|ms| ms.to_string()));
        match self.eval_script(script, key, &args).await? {
            Value::Int(n) => Ok(n == 1),
            other => Err(NodeError::Server(format!(
                "unexpected script reply: {other:?}"
            ))),
        }
    }

    /// `EVALSHA`, repeated once as `EVAL` on `NOSCRIPT` (see the module docs).
    async fn eval_script(
        &self,
        script: &LuaScript,
        key: &str,
        args: &[String],
    ) -> Result<Value, NodeError> {
        let build = |verb: &str, body: &str| {
            let mut cmd = redis::cmd(verb);
            cmd.arg(body).arg(1).arg(key).arg(args);
            cmd
        };
        match self.query(&build("EVALSHA", &script.sha)).await {
            Err(NodeError::Server(e)) if e.starts_with("NOSCRIPT") => {
                self.query(&build("EVAL", script.source)).await
            }
            other => other,
        }
    }

    /// The inspect script: what `key` holds on this node (type, value, time to live), read in
    /// one atomic step. Changes nothing.
    pub(crate) async fn inspect(
        &self,
        key: &str,
        deadline: Instant,
    ) -> Result<NodeState, NodeError> {
        let reply = self
            .bounded(deadline, self.eval_script(&INSPECT, key, &[]))
            .await?;
        node_state(reply)
    }
}

/// Loads our scripts into the node's script cache, so `EVALSHA` finds them.
async fn load_scripts(conn: &mut ConnectionManager) -> Result<(), NodeError> {
    let mut pipe = redis::pipe();
    for script in [&*RELEASE, &*EXTEND, &*INSPECT] {
        pipe.cmd("SCRIPT").arg("LOAD").arg(script.source).ignore();
    }
    pipe.query_async::<()>(conn)
        .await
        .map_err(|e| NodeError::from_redis(&e))
}

/// Reads the inspect script's `{type, value or nil, pttl}`.
fn node_state(reply: Value) -> Result<NodeState, NodeError> {
    let unexpected =
        |reply: &Value| NodeError::Server(format!("unexpected inspect reply: {reply:?}"));
    let Value::Array(items) = &reply else {
        return Err(unexpected(&reply));
    };
    let text = |v: &Value| match v {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let (Some(kind), Some(value), Some(Value::Int(pttl))) =
        (items.first().and_then(text), items.get(1), items.get(2))
    else {
        return Err(unexpected(&reply));
    };
    // PTTL: -1 means no expiry, -2 no key (which TYPE already said: the script is atomic).
    let ttl = u64::try_from(*pttl).ok().map(Duration::from_millis);
    Ok(match kind.as_str() {
        "none" => NodeState::Free,
        "string" => NodeState::Held {
            value: text(value).ok_or_else(|| unexpected(&reply))?,
            ttl,
        },
        _ => NodeState::OtherType { kind, ttl },
    })
}

/// Removes the URL's password from a message that might quote it (a parser error may echo the
/// part it could not read).
fn scrub(message: &str, url: &str) -> String {
    let redacted = redact_url(url);
    let mut out = message.replace(url, &redacted);
    for secret in secrets_in(url) {
        out = out.replace(&secret, "***");
    }
    out
}
