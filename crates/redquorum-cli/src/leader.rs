//! `redlock leader ELECTION [--json]`: who leads an election now, as a majority of the servers
//! report it ([`Redlock::leader`](redquorum::Redlock::leader)). A reading, not a promise: only
//! the leader's own guard says it may act.

use serde::Serialize;

use crate::exit::Outcome;
use crate::exit::{Failure, NOT_HELD, OK, UNAVAILABLE};
use crate::global::Global;
use crate::output;

const AFTER_HELP: &str = "\
Prints the leader's identity (as given to `redlock elect --identity`), and nothing else. With
--json, one object: {\"election\", \"leader\" (the identity, or null), \"term\", \"value\",
\"ttl_ms\"}. The term is shown when a majority of the servers that hold the leader's value agree on
it.

Examples:
  redlock leader scheduler
  redlock leader scheduler --json | jq .term

Exit status: 0 somebody leads; 1 nobody leads (no value on a majority: between two leaders, or
never elected); 69 too few servers answered to tell; 64 bad arguments.";

/// Show who leads an election.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The election's name.
    #[arg(value_name = "ELECTION", value_parser = output::resource)]
    election: String,

    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct Shown<'a> {
    election: &'a str,
    leader: Option<&'a str>,
    term: Option<u64>,
    value: Option<&'a str>,
    ttl_ms: Option<u128>,
}

pub async fn run(args: &Args, global: &Global) -> Outcome {
    let manager = global.manager()?;
    manager.connect().await;
    let leader = manager.leader(&args.election).await;
    let status = match &leader {
        Some(_) => OK,
        None => {
            // Nobody on a majority among those that answered: that is an answer only if the
            // silent nodes could not complete a majority for the most common value either.
            let nodes = manager.status(&args.election).await;
            let reachable = nodes.iter().filter(|n| n.is_reachable()).count();
            let most_common = nodes
                .iter()
                .filter_map(|n| n.value())
                .map(|v| nodes.iter().filter(|n| n.value() == Some(v)).count())
                .max()
                .unwrap_or(0);
            let silent = nodes.len() - reachable;
            if most_common + silent >= manager.quorum() {
                return Err(Failure::new(
                    UNAVAILABLE,
                    format!(
                        "{reachable} of {} servers answered (quorum {}), and the silent ones \
                         could make a majority: who leads {:?} cannot be told",
                        nodes.len(),
                        manager.quorum(),
                        args.election
                    ),
                ));
            }
            NOT_HELD
        }
    };
    if args.json {
        let shown = Shown {
            election: &args.election,
            leader: leader.as_ref().map(|l| l.identity.as_str()),
            term: leader.as_ref().and_then(|l| l.term),
            value: leader.as_ref().map(|l| l.value.as_str()),
            ttl_ms: leader.as_ref().map(|l| l.ttl.as_millis()),
        };
        output::print(&output::json(&shown))?;
    } else if let Some(leader) = &leader {
        output::print(&leader.identity)?;
    } else {
        return Err(Failure::new(
            NOT_HELD,
            format!("nobody leads {:?}", args.election),
        ));
    }
    Ok(status)
}
