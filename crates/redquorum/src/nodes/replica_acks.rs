//! Waiting for a Redis Cluster shard's replicas, or a replicated primary's, shared by every vote
//! on one connection: at most one `WAIT` runs on a connection at a time, and every vote written
//! while it runs is covered by the next one (a group commit).
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
//!    channel is not queued in order with later sends: [`server`](crate::nodes::server)
//!    invariant 5.)
//! 2. **One `WAIT` in flight.** A `WAIT` is queued only when the previous one has answered (or
//!    failed); votes that come meanwhile all join the one pending `WAIT`.
//! 3. Nothing here is ever a vote by itself: a `WAIT` that fails or times out gives 0
//!    acknowledgements, and the votes it covers do not count.
//! 4. **A vote's write is sent by that vote only.** The pipeline that carries a write is owned by
//!    its vote's future and by nothing shared: a vote dropped at its round's deadline before
//!    its write was queued (redis-rs's request channel was full) drops the write with it, so it
//!    can never reach the node after the round rolled back. What later votes wait on is
//!    [`Answered`], a signal that says only "the `WAIT` in flight is over", and that also fires
//!    when the vote that carried it is dropped. The cost of that case is a `WAIT` queued while
//!    an abandoned one may still run (invariant 2 bends; invariant 1 holds, because the later
//!    vote's write was executed before its own `WAIT` is queued).
//! 5. **What the replicas acknowledged is read after the `WAIT` that covers the write.** A
//!    replicated primary's vote asks for the primary's `INFO replication` behind its `WAIT`, on
//!    the same connection and in the same message, so that reading comes after the `WAIT`
//!    answered: each replica's acknowledged offset is at least what the `WAIT` saw
//!    (`coverage` invariant 1). A shared `WAIT` carries one reading for every vote it covers.

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use redis::aio::MultiplexedConnection;
use redis::{Pipeline, RedisError, Value};

use tokio::sync::oneshot;

use crate::base::sync::lock;

/// How many replicas acknowledged (0 when the `WAIT` failed), and the primary's `INFO
/// replication` read after it when asked for (invariant 5).
type Acks = Shared<BoxFuture<'static, (u32, Option<Value>)>>;

/// Ready once the `WAIT` in flight answered, failed, or was given up with the vote that sent
/// it (invariant 4): never the `WAIT`, nor a write, itself.
type Answered = Shared<BoxFuture<'static, ()>>;

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
    /// Whether the `WAIT` queued on the connection answered yet.
    in_flight: Option<Answered>,
    /// The next `WAIT`, not queued yet: queued once `in_flight` answers.
    pending: Option<Acks>,
}

impl ReplicaAcks {
    /// Sends `write` (a pipeline of the vote's commands) on `conn` and waits for `replicas` to
    /// acknowledge it: its replies, how many replicas acknowledged (invariant 1), and with
    /// `read_after` the primary's `INFO replication` after the `WAIT` (invariant 5).
    pub(crate) async fn vote(
        &self,
        conn: &MultiplexedConnection,
        mut write: Pipeline,
        replicas: u32,
        timeout_ms: u64,
        read_after: bool,
    ) -> Result<(Vec<Value>, u32, Option<Value>), Arc<RedisError>> {
        let together = {
            let mut state = lock(&self.state);
            let idle = state.pending.is_none() && state.in_flight.as_ref().is_none_or(is_answered);
            if idle {
                let (answered, signal) = oneshot::channel::<()>();
                state.in_flight = Some(signal.map(|_| ()).boxed().shared());
                write.cmd("WAIT").arg(replicas).arg(timeout_ms);
                if read_after {
                    write.cmd("INFO").arg("replication");
                }
                Some(answered)
            } else {
                None
            }
        };
        if let Some(answered) = together {
            // Owned by this future alone (invariant 4); `answered` fires when it is done with,
            // or dropped with it.
            let mut replies = write
                .ignore_errors()
                .query_async::<Vec<Value>>(&mut conn.clone())
                .await
                .map_err(Arc::new)?;
            drop(answered);
            let read = if read_after { replies.pop() } else { None };
            let acks = acks_in(replies.pop().as_ref());
            return Ok((replies, acks, read));
        }
        let replies = write
            .ignore_errors()
            .query_async::<Vec<Value>>(&mut conn.clone())
            .await
            .map_err(Arc::new)?;
        let (acks, read) = self
            .after_write(conn, replicas, timeout_ms, read_after)
            .await;
        Ok((replies, acks, read))
    }

    /// The `WAIT replicas timeout_ms` on `conn` that covers a write whose reply is in
    /// (invariant 1): the one pending, or a new one, queued at its first poll if none is in
    /// flight (invariant 2).
    fn after_write(
        &self,
        conn: &MultiplexedConnection,
        replicas: u32,
        timeout_ms: u64,
        read_after: bool,
    ) -> Acks {
        let mut state = lock(&self.state);
        if let Some(pending) = &state.pending {
            return pending.clone();
        }
        let in_flight = state
            .in_flight
            .as_ref()
            .filter(|answered| !is_answered(answered))
            .cloned();
        let send = wait(conn.clone(), replicas, timeout_ms, read_after);
        let Some(before) = in_flight else {
            let acks = send.boxed().shared();
            state.in_flight = Some(acks.clone().map(|_| ()).boxed().shared());
            return acks;
        };
        // Queued once the one in flight answered; it is then the one in flight (invariant 2).
        let shared = Arc::clone(&self.state);
        let acks = async move {
            before.await;
            {
                let mut state = lock(&shared);
                state.in_flight = state
                    .pending
                    .take()
                    .map(|pending| pending.map(|_| ()).boxed().shared());
            }
            send.await
        }
        .boxed()
        .shared();
        state.pending = Some(acks.clone());
        acks
    }
}

/// Whether the `WAIT` in flight is over, or was given up with its vote (invariant 4).
fn is_answered(answered: &Answered) -> bool {
    answered.clone().now_or_never().is_some()
}

/// The number in a `WAIT` reply; 0 for anything else (an error).
fn acks_in(reply: Option<&Value>) -> u32 {
    match reply {
        Some(Value::Int(n)) => u32::try_from(*n).unwrap_or(0),
        _ => 0,
    }
}

/// `WAIT replicas timeout_ms`, queued on `conn` at its first poll, followed with `read_after`
/// by `INFO replication` (invariant 5); 0 acknowledgements and no reading on any error.
async fn wait(
    mut conn: MultiplexedConnection,
    replicas: u32,
    timeout_ms: u64,
    read_after: bool,
) -> (u32, Option<Value>) {
    let mut pipe = redis::pipe();
    pipe.cmd("WAIT").arg(replicas).arg(timeout_ms);
    if read_after {
        pipe.cmd("INFO").arg("replication");
    }
    let replies: Result<Vec<Value>, _> = pipe.ignore_errors().query_async(&mut conn).await;
    let mut replies = replies.unwrap_or_default().into_iter();
    let acks = acks_in(replies.next().as_ref());
    (acks, replies.next())
}

#[cfg(test)]
mod tests {
    use redis::AsyncConnectionConfig;
    use redquorum_nodes::{Cluster, NodeSpec};

    use super::*;

    fn set(key: &str) -> Pipeline {
        let mut write = redis::pipe();
        write
            .cmd("SET")
            .arg(key)
            .arg("v")
            .arg("NX")
            .arg("PX")
            .arg(30_000);
        write
    }

    // One thread, so that redis-rs's connection task runs only when this test waits: a request
    // put in the channel stays there, and a channel of one is full after one request.
    #[tokio::test(flavor = "current_thread")]
    async fn a_vote_dropped_before_its_write_was_queued_never_sends_it() {
        let nodes = Cluster::start(1, NodeSpec::new()).expect("node");
        let client = redis::Client::open(nodes.urls()[0].as_str()).expect("url");
        let config = AsyncConnectionConfig::new().set_pipeline_buffer_size(1);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("connection");
        let acks = ReplicaAcks::default();

        let ping = redis::cmd("PING");
        let mut filler = conn.clone();
        let mut filler = std::pin::pin!(ping.query_async::<String>(&mut filler));
        assert!(
            filler.as_mut().now_or_never().is_none(),
            "the channel is full"
        );
        // Vote A waits for room in the channel; its round ends and drops it there.
        {
            let mut a = std::pin::pin!(acks.vote(&conn, set("a"), 0, 100, false));
            assert!(a.as_mut().now_or_never().is_none(), "A waits for room");
        }
        // A later vote on the same connection, while A's `WAIT` counted as in flight. (Were A's
        // write still alive somewhere, it would hold the channel's next slot: B would time out
        // behind it, or send it.)
        let vote = acks.vote(&conn, set("b"), 0, 100, false).await;
        let Ok((replies, _, _)) = vote else {
            panic!("a later vote on the connection did not get through: {vote:?}");
        };
        assert_eq!(replies, vec![Value::Okay], "B's own write was sent");
        filler.await.expect("ping");

        let mut check = conn.clone();
        let a: bool = redis::cmd("EXISTS")
            .arg("a")
            .query_async(&mut check)
            .await
            .expect("exists");
        assert!(!a, "the dropped vote's write reached the node");
    }
}
