//! What each request of a round means in commands and replies on one server's connection: the
//! standard `SET`, a pipeline of plain commands, or one of our
//! [`scripts`](crate::nodes::scripts), and the reply read back into what the
//! [`node`](crate::nodes::node) answers. Which server a request goes to is the node's business;
//! this module speaks only to the connection it is given.

use std::time::Instant;

use redis::Value;

use crate::base::resources::{Access, Resources};
use crate::nodes::node_error::NodeError;
use crate::nodes::request::Request;
use crate::nodes::scripts::{
    ACQUIRE_FENCED, ACQUIRE_FENCED_MARKED, ACQUIRE_MANY, ACQUIRE_MANY_FENCED, ACQUIRE_QUEUED,
    ACQUIRE_QUEUED_FENCED, EXTEND, EXTEND_FENCED, EXTEND_MANY, EXTEND_MANY_FENCED, FENCE,
    FENCE_HELD, FENCE_MANY, KeyGroup, LINGER, LuaScript, RELEASE, RELEASE_MANY, RELEASE_STANDARD,
    RELEASE_TIMELY, RW_ACQUIRE, RW_EXTEND, RW_FENCE, RW_LINGER, RW_RELEASE, one_or_many,
};
use crate::nodes::server::{Connection, NUMBER, Server, command, naming_keys};
use crate::protocol::fencing::{Advance, Proposal};
use crate::protocol::quarantine::MARKER_KEY;
use crate::protocol::slots::{slot_of, slot_tag};

/// The hash tag the queue's keys take (`scripts/queue.lua`): on a Redis Cluster master, one
/// that hashes to the resources' slot (they share one), so that the keys the script names itself
/// are in the slot of the keys it was given; none on a standalone master.
fn queue_tag(connection: &Connection<'_>, resources: &Resources) -> String {
    if connection.in_cluster() {
        format!("{{{}}}", slot_tag(slot_of(resources.first().as_bytes())))
    } else {
        String::new()
    }
}

/// Runs a read-only `script` on `key` on `server` (not checked against the marker), after
/// `ASKING` when `asking`.
pub(crate) async fn read_on(
    server: &Server,
    asking: bool,
    script: &LuaScript,
    key: &str,
) -> Result<Value, NodeError> {
    let connection = server.connection().await?.asking(asking);
    let none: &[u64] = &[];
    let reply = connection.eval(false, script, &[key], None, none).await;
    connection.finish(Instant::now());
    reply
}

/// Sends `request` on `connection`: whether it was done, the fenced acquire's proposal, and whether a
/// queued acquire was refused because another waiter's turn came first.
pub(crate) async fn perform(
    connection: &Connection<'_>,
    request: Request,
    resources: &Resources,
    value: &str,
) -> Result<(bool, Option<Proposal>, bool), NodeError> {
    let keys = resources.keys();
    let many = keys.len() > 1;
    // An acquisition's vote reads the marker back (quarantine invariant 2, server invariant 7).
    let checked = connection.checks_votes()
        && matches!(
            request,
            Request::Set { .. }
                | Request::SetFenced { .. }
                | Request::SetQueued { .. }
                | Request::SetReadWrite { .. }
        );
    if resources.access() != Access::Exclusive {
        return perform_read_write(connection, checked, request, resources, value).await;
    }
    Ok(match request {
        // Plain `SET NX PX` for one resource: the standard format other clients expect.
        Request::Set { ttl_ms } if !many => {
            let key = resources.first();
            let mut cmd = command("SET", 5, key.len() + value.len() + 4 + NUMBER);
            cmd.arg(key).arg(value).arg("NX").arg("PX").arg(ttl_ms);
            let marker = checked.then_some(MARKER_KEY);
            let reply = connection.query(cmd, checked).await;
            match reply.map_err(|e| naming_keys(e, std::iter::once(key).chain(marker)))? {
                Value::Okay => (true, None, false),
                Value::SimpleString(s) if s == "OK" => (true, None, false),
                Value::Nil => (false, None, false),
                other => return Err(unexpected("SET", &other)),
            }
        }
        Request::Set { ttl_ms } => {
            match connection
                .eval(checked, &ACQUIRE_MANY, keys, Some(value), &[ttl_ms])
                .await?
            {
                Value::Nil => (false, None, false),
                reply => (int_reply(&reply)? == 1, None, false),
            }
        }
        Request::SetFenced {
            ttl_ms,
            advance,
            scripted: false,
        } if !many && connection.standalone() => {
            let key = resources.first();
            set_fenced_natively(connection, checked, key, value, ttl_ms, advance).await?
        }
        Request::SetFenced {
            ttl_ms, advance, ..
        } => {
            // One resource on a standalone master (a campaign's): the script reads the marker
            // itself, which costs no command of its own. Not on a cluster, where the marker is in
            // another slot than the lock key, nor for a set.
            let marked = checked && !many && connection.standalone();
            let script = if marked {
                &ACQUIRE_FENCED_MARKED
            } else {
                one_or_many(resources, &ACQUIRE_FENCED, &ACQUIRE_MANY_FENCED)
            };
            let reply = connection
                .eval(
                    checked && !marked,
                    script,
                    keys,
                    Some(value),
                    &[ttl_ms, advance.retention_ms, advance.grain_us],
                )
                .await?;
            match reply {
                Value::Nil => (false, None, false),
                reply => {
                    if marked && let Value::Array(items) = &reply {
                        connection.check_marker(items.get(1));
                    }
                    (true, Some(proposal(&reply)?), false)
                }
            }
        }
        Request::SetQueued {
            ttl_ms,
            advance,
            place,
        } => {
            let script: &LuaScript = if advance.is_some() {
                &ACQUIRE_QUEUED_FENCED
            } else {
                &ACQUIRE_QUEUED
            };
            let tail = (
                ttl_ms,
                place.id.to_string(),
                place.ticket_us,
                place.lease_ms,
                keys.len(),
                advance.map_or(0, |a| a.retention_ms),
                (
                    advance.map_or(0, |a| a.grain_us),
                    queue_tag(connection, resources),
                ),
            );
            match connection
                .eval(checked, script, keys, Some(value), tail)
                .await?
            {
                Value::Nil => (false, None, false),
                // Refused: another waiter's turn (the script's 0).
                Value::Int(0) => (false, None, true),
                reply if advance.is_some() => (true, Some(proposal(&reply)?), false),
                reply => (int_reply(&reply)? == 1, None, false),
            }
        }
        Request::Fence {
            token,
            retention_ms,
        } => {
            let script = one_or_many(resources, &FENCE, &FENCE_MANY);
            let reply = connection
                .eval(checked, script, keys, Some(value), &[token, retention_ms])
                .await?;
            (int_reply(&reply)? == 1, None, false)
        }
        Request::FenceHeld { advance } => {
            let reply = connection
                .eval(
                    checked,
                    &FENCE_HELD,
                    keys,
                    Some(value),
                    &[advance.retention_ms, advance.grain_us],
                )
                .await?;
            match reply {
                Value::Nil => (false, None, false),
                reply => (true, Some(proposal(&reply)?), false),
            }
        }
        Request::Extend {
            ttl_ms,
            retention_ms,
            late_ms,
        } => {
            let script = match retention_ms {
                None => one_or_many(resources, &EXTEND, &EXTEND_MANY),
                Some(_) => one_or_many(resources, &EXTEND_FENCED, &EXTEND_MANY_FENCED),
            };
            // The TTL; fenced, the counters' retention; under a lock-delay, the late bound last.
            let args: &[u64] = match (retention_ms, late_ms) {
                (None, 0) => &[ttl_ms],
                (None, late_ms) => &[ttl_ms, late_ms],
                (Some(retention_ms), 0) => &[ttl_ms, retention_ms],
                (Some(retention_ms), late_ms) => &[ttl_ms, retention_ms, late_ms],
            };
            let reply = connection
                .eval(checked, script, keys, Some(value), args)
                .await?;
            (released(&reply)?, None, false)
        }
        // Done when at least one key still held our value: the keys of a set are set and
        // extended together, so they expire together, and all or none were still ours.
        Request::Release {
            leave,
            announce,
            late_ms,
        } => {
            let reply = match (leave, announce, late_ms) {
                (None, false, 0) if !many => {
                    let none: &[u64] = &[];
                    connection
                        .eval(checked, &RELEASE_STANDARD, keys, Some(value), none)
                        .await?
                }
                (None, false, late_ms) if late_ms > 0 => {
                    connection
                        .eval(checked, &RELEASE_TIMELY, keys, Some(value), &[late_ms])
                        .await?
                }
                _ => {
                    let script = one_or_many(resources, &RELEASE, &RELEASE_MANY);
                    let leave = leave.map(|id| id.to_string()).unwrap_or_default();
                    // The queue's tag goes last (`scripts/queue.lua`).
                    let tail = (
                        leave,
                        u8::from(announce),
                        late_ms,
                        queue_tag(connection, resources),
                    );
                    connection
                        .eval(checked, script, keys, Some(value), tail)
                        .await?
                }
            };
            (released(&reply)?, None, false)
        }
        Request::Linger { ttl_ms } => {
            let reply = connection
                .eval(checked, &LINGER, keys, Some(value), &[ttl_ms])
                .await?;
            (int_reply(&reply)? >= 1, None, false)
        }
        Request::SetReadWrite { .. } | Request::Connect => (true, None, false),
    })
}

/// [`perform`] for a read-write lock's reader or writer: our own scripts for every request, since
/// the key may be a set of readers ([`rwlock`](crate::protocol::rwlock)).
async fn perform_read_write(
    connection: &Connection<'_>,
    checked: bool,
    request: Request,
    resources: &Resources,
    value: &str,
) -> Result<(bool, Option<Proposal>, bool), NodeError> {
    let keys = resources.keys();
    Ok(match request {
        Request::SetReadWrite {
            ttl_ms,
            advance,
            hold_off_ms,
            writer,
        } => {
            let mode = if resources.access() == Access::Write {
                "w"
            } else {
                "r"
            };
            let tail = (
                ttl_ms,
                advance.map_or(0, |a| a.retention_ms),
                advance.map_or(1, |a| a.grain_us),
                mode,
                hold_off_ms,
                writer.map(|id| id.to_string()).unwrap_or_default(),
            );
            match connection
                .eval(checked, &RW_ACQUIRE, keys, Some(value), tail)
                .await?
            {
                Value::Nil => (false, None, false),
                // A reader held off by waiting writers (`rwlock` invariant 2).
                Value::Int(0) => (false, None, true),
                reply if advance.is_some() => (true, Some(proposal(&reply)?), false),
                _ => (true, None, false),
            }
        }
        Request::Fence {
            token,
            retention_ms,
        } => {
            let reply = connection
                .eval(
                    checked,
                    &RW_FENCE,
                    keys,
                    Some(value),
                    &[token, retention_ms],
                )
                .await?;
            (int_reply(&reply)? == 1, None, false)
        }
        Request::Extend {
            ttl_ms,
            retention_ms,
            ..
        } => {
            let tail = [ttl_ms, retention_ms.unwrap_or(0)];
            let reply = connection
                .eval(checked, &RW_EXTEND, keys, Some(value), &tail)
                .await?;
            (int_reply(&reply)? == 1, None, false)
        }
        Request::Release { leave, late_ms, .. } => {
            // A writer giving up leaves the waiting writers under its id.
            let leave = leave.map(|id| id.to_string()).unwrap_or_default();
            let reply = connection
                .eval(checked, &RW_RELEASE, keys, Some(value), (leave, late_ms))
                .await?;
            (released(&reply)?, None, false)
        }
        Request::Linger { ttl_ms } => {
            let reply = connection
                .eval(checked, &RW_LINGER, keys, Some(value), &[ttl_ms])
                .await?;
            (int_reply(&reply)? >= 1, None, false)
        }
        // A read-write lock is never taken by the other acquisitions (the manager sends
        // `SetReadWrite`), and its token comes with it; refused, should one ever come.
        Request::Set { .. }
        | Request::SetFenced { .. }
        | Request::SetQueued { .. }
        | Request::FenceHeld { .. } => (false, None, false),
        Request::Connect => (true, None, false),
    })
}

fn unexpected(what: &str, reply: &Value) -> NodeError {
    NodeError::Server(format!("unexpected reply to {what}: {reply:?}"))
}

/// Reads a release's or an extension's script reply: done (positive), not ours (0), or left to
/// the lock-delay (negative: our key outlived its holder's validity,
/// [`engine`](crate::round::engine) invariants 6 and 10).
fn released(reply: &Value) -> Result<bool, NodeError> {
    match int_reply(reply)? {
        n if n < 0 => Err(NodeError::LeftToDelay),
        n => Ok(n >= 1),
    }
}

fn int_reply(reply: &Value) -> Result<i64, NodeError> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(unexpected("script", other)),
    }
}

/// Reads a fenced acquire script's `{proposal, ...}`: the node's proposal for the token, which
/// the script stored.
fn proposal(reply: &Value) -> Result<Proposal, NodeError> {
    let first = match reply {
        Value::Array(items) => items.first(),
        _ => None,
    };
    match first {
        Some(Value::Int(n)) => u64::try_from(*n).ok(),
        Some(Value::BulkString(b)) => std::str::from_utf8(b).ok().and_then(|s| s.parse().ok()),
        _ => None,
    }
    .map(|value| Proposal {
        value,
        stored: true,
    })
    .ok_or_else(|| unexpected("fenced SET", reply))
}

/// A fenced acquisition of one resource on a standalone master, natively
/// ([`fencing`](crate::protocol::fencing) step 1): one pipeline of `SET NX PX`, the counter's start
/// (when we know the node's clock well enough to start it), `INCR`, `PEXPIRE`, `TIME` (every
/// time: fencing invariant 7), then the marker's `GET` when the vote is `checked`. Whether the
/// lock was set, and the node's proposal if it was.
///
/// Not a script, which costs the server twice as much, nor a `MULTI` transaction, which costs
/// both sides more (measured: `docs/performance.md`'s *The defaults, and what each option
/// costs*). Fencing invariant 2 needs the `INCR` to run before a later holder's `SET NX` can
/// succeed on this node, and it does. Ours runs right after our `SET` on the same connection, before its reply;
/// a later `SET NX` needs our key gone, which takes our release (sent after the reply) or our
/// TTL. If the `INCR` ran only after our key expired, the reply came later than the TTL after
/// the round began, so this node's grant was never part of a quorum that won: the round is
/// decided on replies that came within the validity.
async fn set_fenced_natively(
    connection: &Connection<'_>,
    checked: bool,
    key: &str,
    value: &str,
    ttl_ms: u64,
    advance: Advance,
) -> Result<(bool, Option<Proposal>, bool), NodeError> {
    let counter = connection.group_key(KeyGroup::Fence, key);
    let asked = Instant::now();
    // Invariant 6: without a grain, no counter is started from an estimate, and the clock is
    // read every time.
    let estimate = advance
        .starts_counters()
        .then(|| connection.clock_estimate(asked))
        .flatten();
    let start = estimate.map(|(clock, _)| advance.initial_counter(clock));
    let mut pipe = redis::Pipeline::with_capacity(6);
    let mut set = command("SET", 5, key.len() + value.len() + 4 + NUMBER);
    set.arg(key).arg(value).arg("NX").arg("PX").arg(ttl_ms);
    pipe.add_command(set);
    if let Some(start) = start {
        let mut init = command("SET", 5, counter.len() + 4 + 2 * NUMBER);
        init.arg(&counter).arg(start).arg("NX").arg("PX");
        init.arg(advance.retention_ms);
        pipe.add_command(init);
    }
    let mut incr = command("INCR", 1, counter.len());
    incr.arg(&counter);
    pipe.add_command(incr);
    let mut expire = command("PEXPIRE", 2, counter.len() + NUMBER);
    expire.arg(&counter).arg(advance.retention_ms);
    pipe.add_command(expire);
    // The node's clock, read with every acquisition: the trust window is checked against it,
    // never against our estimate (fencing invariant 7).
    pipe.add_command(command("TIME", 0, 0));
    if checked {
        let marker = connection.marker_key();
        let mut get = command("GET", 1, marker.len());
        get.arg(marker);
        pipe.add_command(get);
    }
    let named = |e| {
        let marker = checked.then(|| connection.marker_key());
        naming_keys(e, [key, counter.as_str()].into_iter().chain(marker))
    };
    let replies = connection.pipeline(&mut pipe).await.map_err(named)?;
    let received = Instant::now();
    let mut replies = replies.into_iter();
    let mut next = |what: &str| {
        replies.next().ok_or_else(|| {
            NodeError::Server(format!("no reply to the fenced acquisition's {what}"))
        })
    };
    // A refused command (`NOPERM`: an ACL without `+incr`, say) is this node's error, naming
    // the keys; only a counter that holds no number is read as such.
    let refused = |reply: Value| match reply {
        Value::ServerError(e) => Err(named(NodeError::from_redis(&e.into()))),
        reply => Ok(reply),
    };
    let set = refused(next("SET")?)?;
    if start.is_some() {
        refused(next("start of the counter")?)?;
    }
    let incr = match next("INCR")? {
        Value::ServerError(e) if e.details().is_some_and(|d| d.contains("not an integer")) => {
            Value::Nil
        }
        reply => refused(reply)?,
    };
    refused(next("PEXPIRE")?)?;
    let time = refused(next("TIME")?)?;
    if checked {
        // As `Connection::query` reads it (server invariant 7).
        let marker = refused(next("marker")?)?;
        connection.check_marker(Some(&marker));
    }
    // The node's clock after our commands ran (fencing invariant 4 compares the counter with
    // it); it also refreshes our estimate for the next start.
    let clock_us = clock_of(&time).ok_or_else(|| unexpected("TIME", &time))?;
    connection.saw_clock(clock_us, asked, received, advance.grain_us);
    let granted = match set {
        Value::Okay => true,
        Value::SimpleString(s) if s == "OK" => true,
        Value::Nil => false,
        other => return Err(unexpected("SET", &other)),
    };
    // Not a number (the key held something else): the node proposes its clock (step 1).
    let counter = match incr {
        Value::Int(n) => u64::try_from(n).ok(),
        _ => None,
    };
    let proposal = granted.then(|| advance.proposal(counter, clock_us));
    Ok((granted, proposal, false))
}

/// A `TIME` reply in µs.
fn clock_of(time: &Value) -> Option<u64> {
    let Value::Array(parts) = time else {
        return None;
    };
    let number = |v: &Value| match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse::<u64>().ok(),
        Value::Int(n) => u64::try_from(*n).ok(),
        _ => None,
    };
    match parts.as_slice() {
        [seconds, micros] => number(seconds)?
            .checked_mul(1_000_000)?
            .checked_add(number(micros)?),
        _ => None,
    }
}
