//! `redlock`: Redlock distributed locks from the shell.
//!
//! Take a lock in one command and release it in another (`acquire`, `extend`, `release`), look
//! at who holds a resource (`status`), run a command while holding a lock that is kept extended
//! (`run`, like `flock(1)` across machines; with `--permits` a semaphore, with `--shared` or
//! `--exclusive` a read-write lock), run one only while leading an election (`elect`) and see who
//! leads (`leader`), start throw-away local Redis nodes (`nodes`), watch
//! the algorithm at work (`demo`) and measure it (`bench`).
//!
//! # Exit statuses
//! They follow `sysexits.h` where one fits; the table is written once, in `exit::HELP`, and
//! `redlock --help` prints it.
//!
//! Every failure is one line on stderr, `redlock: error: ...`, never a panic; server URLs appear
//! only as `host:port`, never with their password.
//!
//! # Layout
//! - `cli`: the subcommand list, `--help`, clap errors made one-line.
//! - `global`: the options every subcommand understands, and the one place they configure a
//!   manager.
//! - `output`: one line on stdout, JSON, resource names, run lengths.
//! - `exit`: exit statuses and the one-line [`exit::Failure`].
//! - `duration`: `30s`, `500ms`, `2m`, `1h`.
//! - `progress`: the live progress line of `demo` and `bench`.
//! - `waiting`: says on stderr why an acquisition waits when quarantined nodes hold it up.
//! - one file per subcommand: `acquire`, `release`, `extend`, `status`, `locked`, `run`, `elect`
//!   (which runs its command through `run`'s supervision), `leader`, `nodes` (and `mark`, its
//!   `nodes mark`), `demo`, `bench`, `chaos`; each holds its arguments, help text and
//!   examples. The long-running tools (`nodes start`, `stop` and `status`, `demo`, `bench`,
//!   `chaos`, and `progress`) sit behind the default-on `tools` feature: a production build
//!   leaves them out with `--no-default-features`, and keeps `nodes mark`, which operators of
//!   production servers need.

#![warn(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod acquire;
#[cfg(feature = "tools")]
mod bench;
#[cfg(feature = "tools")]
mod chaos;
mod cli;
#[cfg(feature = "tools")]
mod demo;
mod duration;
mod elect;
mod exit;
mod extend;
mod global;
mod leader;
mod locked;
mod mark;
mod nodes;
mod output;
#[cfg(feature = "tools")]
mod progress;
mod release;
mod run;
mod status;
mod waiting;

use std::io::IsTerminal;
use std::process::ExitCode;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

use crate::cli::{Command, Parsed};
use crate::exit::{Failure, Outcome};

fn main() -> ExitCode {
    let cli = match cli::parse() {
        Parsed::Run(cli) => cli,
        Parsed::Exit(code) => return code,
    };
    init_logging(cli.global.verbose);
    let global = &cli.global;
    let outcome = match cli.command {
        // Synchronous: redquorum-nodes manages processes with blocking calls, no runtime needed.
        Command::Nodes(args) => match args.mark() {
            Some((urls, vouch, json)) => {
                with_runtime(|rt| rt.block_on(mark::run(urls, vouch, json, global)))
            }
            None => nodes::run(&args),
        },
        // The demo's servers die with the thread that started them (PR_SET_PDEATHSIG), so it
        // starts them on this thread, outside the runtime's workers.
        #[cfg(feature = "tools")]
        Command::Demo(args) => with_runtime(|rt| demo::run(&args, global, rt)),
        Command::Acquire(args) => with_runtime(|rt| rt.block_on(acquire::run(&args, global))),
        Command::Release(args) => with_runtime(|rt| rt.block_on(release::run(&args, global))),
        Command::Extend(args) => with_runtime(|rt| rt.block_on(extend::run(&args, global))),
        Command::Status(args) => with_runtime(|rt| rt.block_on(status::run(&args, global))),
        Command::Locked(args) => with_runtime(|rt| rt.block_on(locked::run(&args, global))),
        Command::Run(args) => with_runtime(|rt| rt.block_on(run::run(args, global))),
        Command::Elect(args) => with_runtime(|rt| rt.block_on(elect::run(args, global))),
        Command::Leader(args) => with_runtime(|rt| rt.block_on(leader::run(&args, global))),
        #[cfg(feature = "tools")]
        Command::Bench(args) => with_runtime(|rt| rt.block_on(bench::run(&args, global))),
        #[cfg(feature = "tools")]
        Command::Chaos(args) => with_runtime(|rt| rt.block_on(chaos::run(&args))),
    };
    match outcome {
        Ok(status) => ExitCode::from(status),
        Err(failure) => failure.report(),
    }
}

/// Runs `f` on a fresh multi-threaded runtime.
fn with_runtime(f: impl FnOnce(&tokio::runtime::Runtime) -> Outcome) -> Outcome {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::os(format!("could not start the async runtime: {e}")))?;
    let outcome = f(&runtime);
    // Whatever is still running in the background (requests the library finishes after a won
    // round, idle connections) is not worth waiting for: every lock operation we started has
    // been awaited by now.
    runtime.shutdown_background();
    outcome
}

/// Logs on stderr, filtered by `REDLOCK_LOG` (e.g. `debug`), else by `-v` (the library's
/// spans and round events, each span closed with its timing) or `-vv` (also each attempt). By
/// default only errors: what a warning would say (a lost lock, an unreachable node) is already in
/// the one-line failure.
fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "error",
        1 => "error,redquorum=debug",
        _ => "error,redquorum=trace",
    };
    let filter = match std::env::var("REDLOCK_LOG") {
        Err(_) => EnvFilter::new(default),
        Ok(spec) => EnvFilter::try_new(&spec).unwrap_or_else(|e| {
            eprintln!("redlock: warning: ignoring REDLOCK_LOG ({e})");
            EnvFilter::new(default)
        }),
    };
    let spans = if verbose > 0 {
        FmtSpan::CLOSE
    } else {
        FmtSpan::NONE
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_span_events(spans)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}
