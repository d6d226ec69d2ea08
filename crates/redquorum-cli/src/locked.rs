//! `redlock locked RESOURCE`: is it held right now? An answer for scripts, in the exit status.
//!
//! The reading is the library's ([`Redlock::locked`](redquorum::Redlock::locked)): held when a
//! quorum of nodes out of quarantine shows one value (or readers), free when no value could
//! reach a quorum even with every silent or quarantined node on its side, and "cannot tell" in
//! between. An outage never reads as "free".

use redquorum::Locked;
use serde::Serialize;

use crate::duration;
use crate::exit::{Failure, NOT_HELD, OK, Outcome, UNAVAILABLE};
use crate::global::Global;
use crate::output::{self, LookedAt};

const AFTER_HELP: &str = "\
Reads every server once. Held: a quorum of servers (out of quarantine) holds the resource with
one value, or a read-write lock's readers; prints `held by VALUE for at least 8.2s` (`held by
readers ...`): the time until fewer than a quorum keep it, less the clock-drift allowance. Free:
no value could reach a quorum even if every server that did not answer held it; prints `free`.
Otherwise it cannot tell, and says so: an outage never reads as free. A snapshot: to act on a
free lock, take it (`redlock run --no-wait`) rather than test it first. With --json, one object:
{\"resource\", \"locked\" (true|false|null), \"value\", \"readers\", \"remaining_ms\"}.

Examples:
  redlock locked invoice:42 && echo \"someone is on it\"
  redlock locked invoice:42 --json | jq .remaining_ms

Exit status: 0 held; 1 free; 69 too few servers answered (out of quarantine) to tell; 64 bad
arguments.";

/// Tell whether a resource is held right now (exit 0 held, 1 free, 69 cannot tell).
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    #[command(flatten)]
    look: LookedAt,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    resource: &'a str,
    locked: Option<bool>,
    value: Option<&'a str>,
    readers: bool,
    remaining_ms: Option<u128>,
}

pub async fn run(args: &Args, global: &Global) -> Outcome {
    let manager = global.connected().await?;
    let locked = manager.locked(&args.look.resource).await;
    let resource = args.look.resource.as_str();
    let mut report = Report {
        resource,
        locked: None,
        value: None,
        readers: false,
        remaining_ms: None,
    };
    let (line, status) = match &locked {
        Locked::Held { value, remaining } => {
            report.locked = Some(true);
            report.value = Some(value);
            report.remaining_ms = Some(remaining.as_millis());
            let left = duration::format(*remaining);
            (format!("held by {value} for at least {left}"), OK)
        }
        Locked::Readers { remaining } => {
            report.locked = Some(true);
            report.readers = true;
            report.remaining_ms = Some(remaining.as_millis());
            let left = duration::format(*remaining);
            (format!("held by readers for at least {left}"), OK)
        }
        Locked::Free => {
            report.locked = Some(false);
            ("free".to_owned(), NOT_HELD)
        }
        unknown => {
            let why = match unknown {
                Locked::Unknown { answered, quorum } => format!(
                    "{answered} of {} servers answered out of quarantine, {quorum} needed",
                    manager.nodes().len()
                ),
                _ => "the servers' answers could not be read".to_owned(),
            };
            if args.look.json {
                output::print(&output::json(&report))?;
            }
            return Err(Failure::new(
                UNAVAILABLE,
                format!("cannot tell whether {resource:?} is locked: {why}"),
            ));
        }
    };
    if args.look.json {
        output::print(&output::json(&report))?;
    } else {
        output::print(&line)?;
    }
    Ok(status)
}
