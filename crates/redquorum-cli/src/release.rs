//! `redlock release RESOURCE VALUE`: give back a lock taken by `acquire`.
//!
//! Runs the compare-and-delete script on every node, so nothing that does not hold VALUE is
//! deleted. Success means a quorum held VALUE and deleted it: the lock was still ours up to the
//! release. Fewer than a quorum is reported, because it means one of two things a script should
//! hear about:
//! - every node answered and fewer than a quorum held VALUE: the lock had already expired (the
//!   work it protected may have overrun its TTL), was released before, or VALUE is wrong
//!   (exit 1);
//! - some nodes did not answer and, had they held VALUE, a quorum would have: we cannot tell
//!   (exit 69). Whatever they hold expires with its TTL;
//! - with `--lock-delay`, the release came after the lock's validity: the nodes keep VALUE until
//!   validity plus delay, and the lock stays unavailable until then, as if nobody had released
//!   it (the library's engine invariant 6). Not a release (exit 2): whatever the protected work
//!   did after the deadline may still be landing.

use redquorum::Cause;
use serde::Serialize;

use crate::exit::Outcome;
use crate::exit::{self, Failure, LEFT_TO_DELAY, NOT_HELD, OK, UNAVAILABLE};
use crate::global::Global;
use crate::output::{self, HeldLock};

const AFTER_HELP: &str = "\
Deletes the lock on every node that holds VALUE, and nothing that does not. With --json, prints
{\"resource\", \"released\", \"confirmed\", \"nodes\", \"quorum\"} whatever the outcome.

Examples:
  value=$(redlock acquire invoice:42 --ttl 30s) || exit 1
  ./charge-invoice 42
  redlock release invoice:42 \"$value\"

Success means a quorum of nodes held VALUE and deleted it, so the lock is free at once. With
--lock-delay, a release after the lock's validity (or within a node timeout of its end) deletes
nothing: the lock stays unavailable until its validity plus the delay, as if nobody had released
it, and the exit status is 2.

Exit status: 0 released on a quorum; 1 not held with VALUE (expired, already released, or another
value); 2 expired before the release and left to its lock-delay; 69 too few nodes answered to
tell (the rest expires with its TTL); 65 the resource has another Redis type; 64 bad arguments.";

/// Release a lock by its value, as printed by `acquire`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    lock: HeldLock,

    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    resource: &'a str,
    released: bool,
    confirmed: usize,
    nodes: usize,
    quorum: usize,
}

pub async fn run(args: &Args, global: &Global) -> Outcome {
    let manager = global.connected().await?;
    let released = manager
        .release_value(&args.lock.resource, &args.lock.value)
        .await;
    let quorum = manager.quorum();
    let nodes = released.replies.len();
    let report = Report {
        resource: &args.lock.resource,
        released: released.confirmed >= quorum,
        confirmed: released.confirmed,
        nodes,
        quorum,
    };
    if args.json {
        output::print(&output::json(&report))?;
    }
    let resource = &args.lock.resource;
    let confirmed = released.confirmed;
    if report.released {
        if !args.json {
            output::print(&format!(
                "released {resource:?} on {confirmed} of {nodes} nodes"
            ))?;
        }
        return Ok(OK);
    }
    let others = exit::others(&released.replies);
    match released.cause() {
        Some(Cause::WrongType { node }) => {
            return Err(exit::wrong_type_failure(resource, &node, &released.replies));
        }
        Some(Cause::NotHeld) | None => {}
        Some(Cause::LeftToDelay) => {
            return Err(Failure::new(
                LEFT_TO_DELAY,
                format!(
                    "{resource:?} had expired before the release; left to its lock-delay \
                     (released on {confirmed} of {nodes} nodes, {quorum} needed: {others})"
                ),
            ));
        }
        Some(cause) => {
            // A quarantined node's delete is not a vote either: it cannot confirm the lock was
            // held.
            let quarantine = exit::Quarantine::blamed(&cause, &released.replies)
                .or_else(|| exit::Quarantine::of(&released.replies))
                .map_or_else(String::new, |q| format!("; {q}"));
            return Err(Failure::new(
                UNAVAILABLE,
                format!(
                    "could not confirm the release of {resource:?}: released on {confirmed} of \
                     {nodes} nodes, {quorum} needed ({others}){quarantine}; what is left expires \
                     with its TTL"
                ),
            ));
        }
    }
    Err(Failure::new(
        NOT_HELD,
        format!(
            "{resource:?} is not held with value {:?}: released on {confirmed} of {nodes} nodes, \
             {quorum} needed (expired, already released, or another value)",
            args.lock.value
        ),
    ))
}
