//! `redlock nodes mark [URL...] [--brand-new] [--force]`: an operator vouches that servers lost
//! nothing.
//!
//! The restart quarantine keeps a node out of the vote for up to `--max-ttl` when it may have
//! lost data: one just started, or seen for the first time without a marker. An operator who
//! knows better says so here: each server gets a marker that vouches at once for its current
//! run, and clients trust it without waiting ([`redquorum::Redlock::mark_nodes`] has the rules
//! and the argument). A server up for less than `--max-ttl` is marked only with `--brand-new`
//! (a restarted one may have lost locks still held). Servers are the URLs given, else the global
//! `--servers`; either way with the password of `--password-file` or `$REDLOCK_PASSWORD` where a
//! URL has none.

use redquorum::{Mark, Vouch};
use serde::Serialize;

use crate::exit::{Failure, NOT_HELD, OK, Outcome, UNAVAILABLE};
use crate::global::Global;
use crate::output;

/// What `mark` prints for one node with `--json`.
#[derive(Debug, Serialize)]
struct Marked<'a> {
    node: &'a str,
    marked: bool,
    result: String,
}

/// Marks `urls` (or the global servers); exit 0 when every node carries a marker that vouches,
/// 1 when one was refused (each line says why and what overrides it), 69 when one could not be
/// reached.
pub async fn run(urls: &[String], vouch: Vouch, json: bool, global: &Global) -> Outcome {
    let servers = if urls.is_empty() {
        global.servers.clone()
    } else {
        urls.join(",")
    };
    let manager = global.manager_for(&servers)?;
    let marks = manager.mark_nodes(vouch).await;
    for (node, mark) in &marks {
        let line = if json {
            output::json(&Marked {
                node,
                marked: mark.is_marked(),
                result: mark.to_string(),
            })
        } else {
            format!("{node}: {mark}")
        };
        output::print(&line)?;
    }
    let vouched = |mark: &Mark| mark.is_marked() || *mark == Mark::HasMarker { vouches: true };
    if marks.iter().any(|(_, m)| matches!(m, Mark::Failed(_))) {
        return Err(Failure::new(
            UNAVAILABLE,
            "not every server could be marked: some could not be reached (see above)",
        ));
    }
    if !marks.iter().all(|(_, m)| vouched(m)) {
        return Err(Failure::new(
            NOT_HELD,
            "not every server was marked (see above)",
        ));
    }
    Ok(OK)
}
