//! `redlock elect ELECTION [--identity ID] [--ttl DUR] -- COMMAND [ARGS...]`: run COMMAND only
//! while this process leads ELECTION, a hot standby for everyone else.
//!
//! Campaign ([`Redlock::campaign_with`](redquorum::Redlock::campaign_with), waiting as long as it
//! takes), then run COMMAND exactly as `run` does while holding a lock (the same invariants: it
//! starts only once we lead, it is terminated the moment leadership is lost, and we resign only
//! after it has exited), with `REDLOCK_TERM` (the term, larger than every earlier one) and
//! `REDLOCK_LEADER` (our identity) in its environment. Standbys wait in their own campaign and
//! take over when the leader resigns (COMMAND exited) or dies (its lock runs out).

use std::time::Duration;

use redquorum::Retry;

use crate::duration;
use crate::exit::Outcome;
use crate::global::Global;
use crate::output;
use crate::run::{self, Child, Signals, Supervision};
use crate::waiting::Awaited;

const AFTER_HELP: &str = "\
Waits until this process leads ELECTION (others may be waiting too: hot standbys), then runs
COMMAND with REDLOCK_TERM (the term, a number larger than every earlier term of ELECTION: pass it
with whatever the leader writes, so a deposed leader's late writes can be refused), REDLOCK_LEADER
(the identity) and REDLOCK_RESOURCE, REDLOCK_VALUE, REDLOCK_FENCE (= the term) in its environment.
Leadership is kept alive (every third of the TTL) while COMMAND runs; when COMMAND exits, redlock
resigns and a standby takes over at once. If redlock dies, a standby takes over once the TTL has
run out. If leadership is lost while COMMAND runs, COMMAND's process group gets SIGTERM at once
and SIGKILL after --kill-grace, as with `redlock run`. `redlock leader ELECTION` shows who leads.

Examples:
  redlock elect scheduler -- ./scheduler --serve      # on every host; one runs at a time
  redlock elect db-failover --identity \"$(hostname)\" --ttl 5s -- ./promote-and-watch.sh

Exit status: COMMAND's own (128+N if it died from signal N); 76 leadership was lost while COMMAND
ran; 126/127 COMMAND could not be executed / was not found; 69 too few servers reachable to
campaign (it does not wait then); 64 bad arguments (also --no-fencing: terms are fencing tokens);
128+N when signal N ended the wait.";

/// Run a command only while this process leads an election (the others wait as standbys).
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// The election's name: a Redis key.
    #[arg(value_name = "ELECTION", value_parser = output::resource)]
    election: String,

    /// Who this candidate is, as `redlock leader` shows it [default: HOSTNAME:PID].
    #[arg(long, value_name = "ID")]
    identity: Option<String>,

    /// The leadership's TTL: how long a dead leader blocks its standbys; extended every third of
    /// it while COMMAND runs.
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "10s")]
    ttl: Duration,

    /// After leadership is lost, how long COMMAND has to exit after SIGTERM before SIGKILL.
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "5s")]
    kill_grace: Duration,

    /// Run COMMAND in redlock's process group, for commands that read the terminal.
    #[arg(long)]
    foreground: bool,

    /// The command to run while leading, and its arguments (after --).
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

pub async fn run(args: Args, global: &Global) -> Outcome {
    let command = Child::of(&args.command)?;
    global.check_ttl(args.ttl)?;
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let mut signals = Signals::install()?;
    let (manager, retry, notice) = global
        .for_acquiring(Retry::forever(), true, Awaited::lead(&args.election))
        .await?;
    let campaign = manager.campaign_with(&args.election, &identity, args.ttl, &retry);
    let guard = match run::until_signalled(campaign, &mut signals, global).await? {
        Ok(guard) => guard,
        Err(status) => return Ok(status),
    };
    drop(notice);
    // A campaign's token comes with it (`election` invariant 5).
    let term = redquorum::LockInfo::fence(&guard)
        .map(|t| t.to_string())
        .unwrap_or_default();
    tracing::debug!(election = %args.election, %identity, %term, "leading");
    let extra = [("REDLOCK_TERM", term), ("REDLOCK_LEADER", identity)];
    let options = Supervision {
        foreground: args.foreground,
        kill_grace: args.kill_grace,
    };
    run::run_holding(guard, command, options, &extra, &mut signals).await
}

/// `HOSTNAME:PID`, or `pid-PID` when the host has no name we can read.
fn default_identity() -> String {
    let pid = std::process::id();
    match nix::unistd::gethostname() {
        Ok(host) => format!("{}:{pid}", host.to_string_lossy()),
        Err(_) => format!("pid-{pid}"),
    }
}
