//! Waiting for a Redis Cluster shard's replicas, shared by every vote on one connection: at most
//! one `WAIT` runs on a connection at a time, and every vote written while it runs is covered by
//! the next one (a group commit).
//!
//! `WAIT` blocks the connection it is sent on: Redis runs nothing else from that client until
//! the replicas answered, so one `WAIT` per vote serializes every task sharing the connection
//! behind one replication round trip each. Measured with `examples/bench.rs --cluster-replicas
//! 1` (N = 3, 32 tasks, one shard per cluster): 0.27× the cycles/s of the same settings over
//! plain nodes with a `WAIT` per vote; see `docs/performance.md`'s *Over Redis Cluster nodes*
//! for the figure with this module.
//!
//! # Invariants
//! 1. **A vote's write is covered by the `WAIT` it is given.** `WAIT` counts its connection's
//!    writes up to the last one executed before it. When no `WAIT` is running, the vote sends
//!    its write and its `WAIT` in one pipeline (one message on the connection, so in that
//!    order): one round trip, as without replicas. Otherwise it sends its write alone, and only
//!    once the write's reply is in (so it was executed) joins a `WAIT` not yet queued on the
//!    connection: that `WAIT` is executed after the write. (Joining once the write is merely
//!    queued would save a round trip, but a write that waits for room in redis-rs's full
//!    channel is not queued in order with later sends: [`server`](crate::server) invariant 5.)
//! 2. **One `WAIT` in flight.** A `WAIT` is queued only when the previous one has answered (or
//!    failed); votes that come meanwhile all join the one pending `WAIT`.
//! 3. Nothing here is ever a vote by itself: a `WAIT` that fails or times out gives 0
//!    acknowledgements, and the votes it covers do not count.

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{Pipeline, RedisError, Value};

use crate::sync::lock;

/// How many replicas acknowledged (0 when the `WAIT` failed).
type Acks = Shared<BoxFuture<'static, u32>>;

/// The `WAIT`s of one connection.
#[derive(Default)]
pub(crate) struct ReplicaAcks {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for ReplicaAcks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaAcks").finish_non_exhaustive()
    }
}

#[derive(Default)]
struct State {
    /// The `WAIT` queued on the connection and not answered yet.
    in_flight: Option<Acks>,
    /// The next `WAIT`, not queued yet: queued once `in_flight` answers.
    pending: Option<Acks>,
}

impl ReplicaAcks {
    /// Sends `write` (a pipeline of the vote's commands) on `conn` and waits for `replicas` to
    /// acknowledge it: its replies, and how many replicas acknowledged (invariant 1).
    pub(crate) async fn vote(
        &self,
        conn: &MultiplexedConnection,
        mut write: Pipeline,
        replicas: u32,
        timeout_ms: u64,
    ) -> Result<(Vec<Value>, u32), Arc<RedisError>> {
        let together = {
            let mut state = lock(&self.state);
            let idle = state.pending.is_none()
                && state
                    .in_flight
                    .as_ref()
                    .is_none_or(|acks| acks.peek().is_some());
            if idle {
                let mut write = std::mem::take(&mut write);
                write.cmd("WAIT").arg(replicas).arg(timeout_ms);
                let mut conn = conn.clone();
                let pipeline = async move {
                    write
                        .ignore_errors()
                        .query_async::<Vec<Value>>(&mut conn)
                        .await
                        .map_err(Arc::new)
                }
                .boxed()
                .shared();
                let acks = pipeline.clone().map(|replies| match replies {
                    Ok(replies) => acks_in(replies.last()),
                    Err(_) => 0,
                });
                state.in_flight = Some(acks.boxed().shared());
                Some(pipeline)
            } else {
                None
            }
        };
        if let Some(pipeline) = together {
            let mut replies = pipeline.await?;
            let acks = acks_in(replies.pop().as_ref());
            return Ok((replies, acks));
        }
        let replies = write
            .ignore_errors()
            .query_async::<Vec<Value>>(&mut conn.clone())
            .await
            .map_err(Arc::new)?;
        let acks = self.after_write(conn, replicas, timeout_ms).await;
        Ok((replies, acks))
    }

    /// The `WAIT replicas timeout_ms` on `conn` that covers a write whose reply is in
    /// (invariant 1): the one pending, or a new one, queued at its first poll if none is in
    /// flight (invariant 2).
    fn after_write(&self, conn: &MultiplexedConnection, replicas: u32, timeout_ms: u64) -> Acks {
        let mut state = lock(&self.state);
        if let Some(pending) = &state.pending {
            return pending.clone();
        }
        let in_flight = state
            .in_flight
            .as_ref()
            .filter(|acks| acks.peek().is_none())
            .cloned();
        let send = wait(conn.clone(), replicas, timeout_ms);
        let Some(before) = in_flight else {
            let acks = send.boxed().shared();
            state.in_flight = Some(acks.clone());
            return acks;
        };
        // Queued once the one in flight answered; it is then the one in flight (invariant 2).
        let shared = Arc::clone(&self.state);
        let acks = async move {
            before.await;
            {
                let mut state = lock(&shared);
                state.in_flight = state.pending.take();
            }
            send.await
        }
        .boxed()
        .shared();
        state.pending = Some(acks.clone());
        acks
    }
}

/// The number in a `WAIT` reply; 0 for anything else (an error).
fn acks_in(reply: Option<&Value>) -> u32 {
    match reply {
        Some(Value::Int(n)) => u32::try_from(*n).unwrap_or(0),
        _ => 0,
    }
}

/// `WAIT replicas timeout_ms`, queued on `conn` at its first poll; 0 on any error.
async fn wait(mut conn: MultiplexedConnection, replicas: u32, timeout_ms: u64) -> u32 {
    let reply: Result<i64, _> = redis::cmd("WAIT")
        .arg(replicas)
        .arg(timeout_ms)
        .query_async(&mut conn)
        .await;
    reply.ok().and_then(|n| u32::try_from(n).ok()).unwrap_or(0)
}
