//! The command line: the subcommand list, and turning clap's errors into our one-line form.
//!
//! Each subcommand's own arguments live in its file, next to the code that uses them; the
//! options every subcommand understands are in `global`.

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};

use crate::exit::{self, Failure};
use crate::global::Global;
use crate::{acquire, elect, extend, leader, locked, nodes, release, run, status};
#[cfg(feature = "tools")]
use crate::{bench, chaos, demo};

const AFTER_HELP: &str = "\
Servers: --servers, else $REDLOCK_SERVERS, else redis://127.0.0.1:6379. A comma-separated list of
independent Redis masters: redis://[user:password@]host[:port][/db], rediss://... (TLS),
redis+unix:///path.sock. A password in a URL is on the command line, where ps shows it:
--password-file PATH, else $REDLOCK_PASSWORD, gives one to every URL without its own instead (a
user in the URL is kept). Passwords are never printed.

Durations: 500ms, 30s, 2m, 1h, 1.5s, 1m30s (a unit is required).

Safety: every client of the same servers must use the same --max-ttl ($REDLOCK_MAX_TTL): no lock
may be longer, and a node up for less than that (restarted, maybe without its data) is
quarantined: it still gets every request, but its grants are not votes. Nodes with appendonly yes
and appendfsync always cannot lose a lock and are trusted at once (`redlock nodes start` runs them
so). Each acquisition gets a fencing token, larger than every earlier one for the resource
(`run`: $REDLOCK_FENCE; `acquire --json`: \"fence\"); --no-fencing skips it, saving a round trip.

Waiting: a client waiting for a busy lock is woken when the lock is freed (by any client's
release, or its expiry; Redis 6+ key tracking) and tries again at once, with its retry delay as
the fallback; --no-notify polls only. --fair serves waiters in arrival order,
so a client that releases and locks again at once does not win every time; clients without it
are not held back by the queue.

Logs: -v shows each acquire, extend and release with its rounds, -vv each attempt too;
REDLOCK_LOG=debug (a tracing env filter; default: errors only) overrides; on stderr.

Examples:
  export REDLOCK_SERVERS=redis://10.0.0.1,redis://10.0.0.2,redis://10.0.0.3
  redlock run nightly-report -- ./make-report.sh      # one at a time, waits its turn
  value=$(redlock acquire invoice:42 --ttl 30s) && ... && redlock release invoice:42 \"$value\"
  redlock status invoice:42
  redlock locked invoice:42 && echo busy              # 0 held, 1 free, 69 cannot tell
  redlock elect scheduler -- ./scheduler              # one leader at a time, hot standbys
  redlock run --permits 4 encoders -- ./encode.sh     # at most 4 at once
  redlock demo                                        # 5 local nodes, contenders, a crash

";

/// Take, inspect, extend and release Redlock distributed locks on Redis, and run a command
/// while holding one.
#[derive(Debug, Parser)]
#[command(
    name = "redlock",
    version,
    after_help = after_help(),
    arg_required_else_help = false,
    subcommand_required = true
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

fn after_help() -> String {
    format!("{AFTER_HELP}{}", exit::HELP)
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Acquire(acquire::Args),
    Release(release::Args),
    Extend(extend::Args),
    Status(status::Args),
    Locked(locked::Args),
    Run(run::Args),
    Elect(elect::Args),
    Leader(leader::Args),
    // In every build: `nodes mark`; with the `tools` feature also `start`, `stop`, `status`.
    Nodes(nodes::Args),
    #[cfg(feature = "tools")]
    Demo(demo::Args),
    #[cfg(feature = "tools")]
    Bench(bench::Args),
    #[cfg(feature = "tools")]
    Chaos(chaos::Args),
}

/// What `parse` decided: run a subcommand, or exit now (help, version, or a usage error).
#[derive(Debug)]
pub enum Parsed {
    Run(Box<Cli>),
    Exit(std::process::ExitCode),
}

/// Parses the command line. `--help` and `--version` print and exit 0; any other clap error
/// becomes one line on stderr and exit status 64.
pub fn parse() -> Parsed {
    match Cli::try_parse() {
        Ok(cli) => Parsed::Run(Box::new(cli)),
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            // Best effort: a closed stdout (`redlock --help | head -1`) is not worth an error.
            let _ = e.print();
            Parsed::Exit(std::process::ExitCode::SUCCESS)
        }
        Err(e) => Parsed::Exit(Failure::usage(one_line(&e.render().to_string())).report()),
    }
}

/// clap's message without its `error:` prefix, usage block and `--help` hint, on one line.
fn one_line(rendered: &str) -> String {
    let message = rendered.trim_start();
    let message = message.strip_prefix("error:").unwrap_or(message);
    // The message proper ends at the first blank line; usage and hints follow.
    let message = message.split("\n\n").next().unwrap_or(message);
    let mut line = message.split_whitespace().collect::<Vec<_>>().join(" ");
    if line.is_empty() {
        line = "invalid command line".to_owned();
    }
    format!("{line} (see redlock --help)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::duration;
    use crate::global::DEFAULT_MAX_TTL;
    use clap::CommandFactory;
    use redquorum::Vouch;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn clap_errors_become_one_line() {
        let rendered = "error: the following required arguments were not provided:\n  \
                        --ttl <DUR>\n\nUsage: redlock acquire --ttl <DUR> <RESOURCE>\n\n\
                        For more information, try '--help'.\n";
        assert_eq!(
            one_line(rendered),
            "the following required arguments were not provided: --ttl <DUR> (see redlock --help)"
        );
    }

    #[test]
    fn the_max_ttl_default_is_the_librarys() {
        assert_eq!(
            duration::parse(DEFAULT_MAX_TTL),
            Ok(redquorum::defaults::MAX_TTL)
        );
    }

    #[test]
    fn a_ttl_above_max_ttl_names_the_flag_to_raise() {
        let cli = Cli::try_parse_from(["redlock", "--max-ttl", "30s", "status", "r"]).unwrap();
        assert!(cli.global.check_ttl(Duration::from_secs(30)).is_ok());
        let failure = cli.global.check_ttl(Duration::from_secs(31)).unwrap_err();
        assert_eq!(failure.status, exit::USAGE);
        let message = failure.to_string();
        assert!(message.starts_with("--ttl 31.0s is longer than --max-ttl 30.0s: raise --max-ttl"));
    }

    #[test]
    fn the_waiting_flags_are_global_and_off_by_default() {
        let cli = Cli::try_parse_from(["redlock", "status", "r"]).unwrap();
        assert!(!cli.global.no_notify && !cli.global.fair);
        let cli =
            Cli::try_parse_from(["redlock", "--no-notify", "run", "r", "--fair", "--", "true"])
                .unwrap();
        assert!(cli.global.no_notify && cli.global.fair);
        assert!(cli.global.manager().is_ok());
    }

    /// `nodes mark` is in every build, `--no-default-features` included (CI runs this test's
    /// target in both builds): it is how an operator vouches for a production server.
    #[test]
    fn nodes_mark_is_in_every_build() {
        let help = Cli::try_parse_from(["redlock", "nodes", "mark", "--help"]).unwrap_err();
        assert_eq!(help.kind(), ErrorKind::DisplayHelp);
        let text = help.render().to_string();
        assert!(
            text.contains("Exit status: 0 every server carries a marker"),
            "{text}"
        );
        for (flags, vouch) in [
            (&[][..], Vouch::Checked),
            (&["--brand-new"][..], Vouch::BrandNew),
            (&["--force"][..], Vouch::Forced),
            (&["--brand-new", "--force"][..], Vouch::Forced),
        ] {
            let words = ["redlock", "nodes", "mark", "redis://h:1"];
            let cli = Cli::try_parse_from(words.iter().chain(flags)).unwrap();
            let Command::Nodes(args) = cli.command else {
                panic!("nodes expected: {cli:?}");
            };
            assert_eq!(
                args.mark(),
                Some((&["redis://h:1".to_owned()][..], vouch, false)),
                "{flags:?}"
            );
        }
    }

    /// Without the `tools` feature, `nodes start`, `stop` and `status` are known to be missing:
    /// one line, exit 64, that says so, not a parse error about an unknown word.
    #[cfg(not(feature = "tools"))]
    #[test]
    fn without_tools_nodes_start_stop_and_status_say_this_build_lacks_them() {
        for action in [
            &["start", "--count", "5"][..],
            &["stop"],
            &["status", "--json"],
        ] {
            let cli = Cli::try_parse_from(["redlock", "nodes"].iter().chain(action)).unwrap();
            let Command::Nodes(args) = cli.command else {
                panic!("nodes expected: {cli:?}");
            };
            let failure = crate::nodes::run(&args).unwrap_err();
            assert_eq!(failure.status, exit::USAGE);
            let line = failure.to_string();
            assert!(
                line.starts_with(&format!("redlock nodes {} is not in this build", action[0])),
                "{line}"
            );
            assert!(line.contains("`tools` feature (on by default)"), "{line}");
        }
        let help = Cli::try_parse_from(["redlock", "nodes", "--help"]).unwrap_err();
        let text = help.render().to_string();
        assert!(text.contains("built without its `tools` feature"), "{text}");
        assert!(text.contains("mark"), "{text}");
    }

    /// With it, they are parsed as themselves.
    #[cfg(feature = "tools")]
    #[test]
    fn with_tools_nodes_start_is_parsed() {
        let cli = Cli::try_parse_from(["redlock", "nodes", "start", "--count", "5"]).unwrap();
        let Command::Nodes(args) = cli.command else {
            panic!("nodes expected: {cli:?}");
        };
        assert!(args.mark().is_none());
        let help = Cli::try_parse_from(["redlock", "nodes", "start", "--help"]).unwrap_err();
        assert!(help.render().to_string().contains("--count"));
    }

    #[test]
    fn bad_durations_are_usage_errors() {
        let err = Cli::try_parse_from(["redlock", "acquire", "r", "--ttl", "30"]).unwrap_err();
        let line = one_line(&err.render().to_string());
        assert!(line.contains("missing unit"), "{line}");
        assert!(!line.contains('\n'));
    }
}
