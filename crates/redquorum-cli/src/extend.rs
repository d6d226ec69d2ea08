//! `redlock extend RESOURCE VALUE --ttl DUR`: give a lock taken by `acquire` a new TTL.
//!
//! Runs the compare-and-PEXPIRE script on every node. The extension counts only when a quorum
//! still held VALUE and answered within the new validity; an expired lock is never revived
//! (no `SET NX` again). Like `release`, a failure says whether the lock is gone (exit 1) or too
//! few nodes answered to tell (exit 69).

use std::time::{Duration, Instant};

use redquorum::{Cause, Error};
use serde::Serialize;

use crate::duration;
use crate::exit::Outcome;
use crate::exit::{self, Failure, NOT_HELD, OK, UNAVAILABLE};
use crate::global::Global;
use crate::output::{self, HeldLock};

const AFTER_HELP: &str = "\
Sets the lock's TTL to DUR from now on every node that still holds VALUE. Prints the new validity
(with --json: {\"resource\", \"value\", \"validity_ms\", \"ttl_ms\"}).

Examples:
  value=$(redlock acquire backup --ttl 1m) || exit 1
  while step; do redlock extend backup \"$value\" --ttl 1m || exit 1; done
  redlock release backup \"$value\"

Exit status: 0 extended on a quorum; 1 not held with VALUE (expired, released, or another value:
it is not revived; with a lock-delay, one that expired is left to its delay); 69 too few nodes answered to tell; 65 the resource has another Redis type;
64 bad arguments (also a TTL above --max-ttl).";

/// Extend a lock by its value to a new TTL.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    lock: HeldLock,

    /// The new time to live, from now, e.g. 30s.
    #[arg(long, value_name = "DUR", value_parser = duration::parse)]
    ttl: Duration,

    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Extended<'a> {
    resource: &'a str,
    value: &'a str,
    validity_ms: u128,
    ttl_ms: u128,
}

pub async fn run(args: &Args, global: &Global) -> Outcome {
    global.check_ttl_alone(args.ttl)?; // the holder's delay, not ours, goes with the keys
    let manager = global.connected().await?;
    let resource = &args.lock.resource;
    match manager
        .extend_value(resource, &args.lock.value, args.ttl)
        .await
    {
        Ok(deadline) => {
            let validity = deadline.saturating_duration_since(Instant::now());
            global.let_stragglers_land(&manager, validity).await;
            let validity = deadline.saturating_duration_since(Instant::now());
            let line = if args.json {
                output::json(&Extended {
                    resource,
                    value: &args.lock.value,
                    validity_ms: validity.as_millis(),
                    ttl_ms: args.ttl.as_millis(),
                })
            } else {
                format!(
                    "extended {resource:?} to {}, valid for {}",
                    duration::format(args.ttl),
                    duration::format(validity)
                )
            };
            output::print(&line)?;
            Ok(OK)
        }
        Err(Error::LockLost {
            failure: Some(failure),
            ..
        }) => {
            let cause = failure.cause();
            if let Cause::WrongType { node } = &cause {
                return Err(exit::wrong_type_failure(resource, node, &failure.replies));
            }
            let status = match cause {
                Cause::Unavailable | Cause::Quarantined { .. } => UNAVAILABLE,
                _ => NOT_HELD,
            };
            let message = if cause == Cause::LeftToDelay {
                // Engine invariant 10: a late extension is no extension; the lock stays taken
                // until its lock-delay ends.
                format!(
                    "not extended, {resource:?} had expired before the extension; it is left to \
                     its lock-delay ({failure})"
                )
            } else if status == UNAVAILABLE {
                let why = match exit::Quarantine::blamed(&cause, &failure.replies) {
                    Some(q) => format!("too few nodes answered that can vote: {q}"),
                    None => "too few nodes answered".to_owned(),
                };
                format!("could not extend {resource:?}, {why} ({failure})")
            } else {
                format!(
                    "not extended, {resource:?} is not held with value {:?} ({failure})",
                    args.lock.value
                )
            };
            Err(Failure::new(status, message))
        }
        Err(e) => Err(exit::from_error(e)),
    }
}
