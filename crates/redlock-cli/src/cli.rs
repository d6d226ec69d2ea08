//! The command line: global options, the subcommand list, and turning clap's errors into our
//! one-line form.
//!
//! Each subcommand's own arguments live in its file, next to the code that uses them.

use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Parser, Subcommand};
use redlock::defaults::FENCE_RETENTION;
use redlock::{Builder, NodeReply, Redlock, Reply, Retry};

use crate::exit::{self, Failure};
use crate::{acquire, bench, chaos, demo, duration, extend, nodes, release, run, status};

/// The server list used when neither `--servers` nor `REDLOCK_SERVERS` says otherwise.
pub const DEFAULT_SERVERS: &str = "redis://127.0.0.1:6379";

/// `--max-ttl` when neither it nor `REDLOCK_MAX_TTL` is given: the library's default
/// ([`redlock::defaults::MAX_TTL`]; a test checks they agree), written out so `--help`
/// can show it.
const DEFAULT_MAX_TTL: &str = "60s";

const AFTER_HELP: &str = "\
Servers: --servers, else $REDLOCK_SERVERS, else redis://127.0.0.1:6379. A comma-separated list of
independent Redis masters: redis://[user:password@]host[:port][/db], rediss://... (TLS),
redis+unix:///path.sock. Passwords are never printed.

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

Logs: REDLOCK_LOG=debug (a tracing env filter; default: errors only), on stderr.

Examples:
  export REDLOCK_SERVERS=redis://10.0.0.1,redis://10.0.0.2,redis://10.0.0.3
  redlock run nightly-report -- ./make-report.sh      # one at a time, waits its turn
  value=$(redlock acquire invoice:42 --ttl 30s) && ... && redlock release invoice:42 \"$value\"
  redlock status invoice:42
  redlock demo                                        # 5 local nodes, contenders, a crash

";

/// The longest `--duration` of `bench` and `demo`: a day, as `chaos` allows.
const LONGEST_RUN: Duration = Duration::from_secs(24 * 60 * 60);

/// Checks the `--duration` of `bench` or `demo`: more than zero, and at most a day.
pub fn check_run_length(length: Duration) -> Result<(), Failure> {
    if length.is_zero() {
        return Err(Failure::usage("--duration must be greater than zero"));
    }
    if length > LONGEST_RUN {
        return Err(Failure::usage(format!(
            "--duration {} is longer than the longest run, 24h",
            duration::format(length)
        )));
    }
    Ok(())
}

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

/// Options every subcommand understands.
#[derive(Debug, clap::Args)]
pub struct Global {
    /// Redis masters, comma-separated
    // hide_env_values: $REDLOCK_SERVERS may carry a password, and --help must not show it.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_SERVERS",
        hide_env_values = true,
        default_value = DEFAULT_SERVERS,
        value_name = "URL[,URL...]"
    )]
    pub servers: String,

    /// How long each server has to answer one request [default: 100ms]
    #[arg(long, global = true, value_name = "DUR", value_parser = duration::parse)]
    pub node_timeout: Option<Duration>,

    /// The longest TTL any client of these servers uses, and how long a restarted node is
    /// quarantined; use the same value on every client
    #[arg(
        long,
        global = true,
        env = "REDLOCK_MAX_TTL",
        hide_env_values = true,
        value_name = "DUR",
        value_parser = duration::parse,
        default_value = DEFAULT_MAX_TTL
    )]
    pub max_ttl: Duration,

    /// Count the votes of recently restarted nodes too (plain Redlock). Unsafe if a node can
    /// restart without its data: a lock can then be granted twice
    #[arg(long, global = true)]
    pub no_quarantine: bool,

    /// Hand out no fencing tokens (one round trip less per acquisition)
    #[arg(long, global = true)]
    pub no_fencing: bool,

    /// Wait for a busy lock by polling alone, instead of also being woken when it is freed
    #[arg(long, global = true)]
    pub no_notify: bool,

    /// Serve waiters for a busy lock in arrival order (a queue per resource on each node; a
    /// script instead of a plain SET per attempt)
    #[arg(long, global = true)]
    pub fair: bool,

    /// Certificate authorities (PEM file) that rediss:// servers' certificates must chain to,
    /// instead of the system's roots
    #[arg(long, global = true, env = "REDLOCK_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<std::path::PathBuf>,
}

impl Global {
    /// A manager over the configured servers; nothing is sent yet.
    ///
    /// # Errors
    /// A usage failure for an empty list, a duplicate or an unparsable URL (shown without its
    /// password) or a zero node timeout.
    pub fn manager(&self) -> Result<Redlock, Failure> {
        self.configure(Redlock::builder_from_list(&self.servers))
    }

    /// Applies every global option to `builder` and builds the manager: the one place the CLI
    /// configures one, whether for `--servers` or for the demo's own nodes.
    ///
    /// # Errors
    /// A usage failure for a setting the library refuses (a zero node timeout or `--max-ttl`, a
    /// bad server list).
    pub fn configure(&self, builder: Builder) -> Result<Redlock, Failure> {
        let mut builder = builder
            .max_ttl(self.max_ttl)
            .quarantine(!self.no_quarantine)
            .fencing(!self.no_fencing)
            .notify(!self.no_notify)
            .fair(self.fair)
            // The library wants fencing counters kept for at least twice max_ttl. The CLI has no
            // option for that, so a long --max-ttl lengthens the retention instead of failing on
            // a setting nobody can change.
            .fence_retention(FENCE_RETENTION.max(self.max_ttl.saturating_mul(2)));
        if let Some(timeout) = self.node_timeout {
            builder = builder.node_timeout(timeout);
        }
        if let Some(path) = &self.tls_ca {
            let pem = std::fs::read(path).map_err(|e| {
                Failure::usage(format!("--tls-ca {}: cannot read it: {e}", path.display()))
            })?;
            builder = builder.tls_root_certificates(pem);
        }
        builder.build().map_err(exit::from_error)
    }

    /// Refuses a TTL longer than `--max-ttl` before anything is sent. The library refuses it
    /// too, but in its own terms (`max_ttl`); this says which flag to change, and where.
    pub fn check_ttl(&self, ttl: Duration) -> Result<(), Failure> {
        if ttl > self.max_ttl {
            return Err(Failure::usage(format!(
                "--ttl {} is longer than --max-ttl {}: raise --max-ttl (or REDLOCK_MAX_TTL) on \
                 every client of these servers, as it is also how long a restarted node is \
                 quarantined",
                duration::format(ttl),
                duration::format(self.max_ttl)
            )));
        }
        Ok(())
    }

    /// The node timeout in effect.
    pub fn node_timeout(&self) -> Duration {
        self.node_timeout.unwrap_or(redlock::defaults::NODE_TIMEOUT)
    }

    /// Waits for the requests of a won round that are still in flight.
    ///
    /// `acquire` and `extend` return as soon as a quorum agreed; the library sends the requests
    /// to the other nodes on in the background, each bounded by the node timeout, so a late
    /// `OK` still becomes part of the lock. A process that exits at once would drop them, and
    /// the lock would sit on a bare quorum: one node lost and nobody can tell it is held. So
    /// before exiting, wait for them ([`Redlock::settle`]), but never more than half of
    /// `validity`, the lock's time left: a lock that is still valid on a quorum is worth more
    /// than one on every node.
    pub async fn let_stragglers_land(&self, manager: &Redlock, validity: Duration) {
        let _ = tokio::time::timeout(validity / 2, manager.settle()).await;
    }

    /// [`manager`](Self::manager), connected: every connection is made (each bounded by the
    /// connect timeout, 1 s, plus the node timeout) before the first lock request, so that
    /// connection set-up does not eat into a lock's validity. Unreachable servers are not an
    /// error here; the request that follows reports them.
    pub async fn connected(&self) -> Result<Redlock, Failure> {
        Ok(self.connect_all().await?.0)
    }

    /// [`connected`](Self::connected), but fails (exit 69) unless a quorum of servers answered
    /// and can vote (are not quarantined).
    pub async fn reachable(&self) -> Result<Redlock, Failure> {
        let (manager, up, replies) = self.connect_all().await?;
        let (n, quorum) = (replies.len(), manager.quorum());
        if up < quorum {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!(
                    "servers unavailable: {up} of {n} answered, {quorum} needed ({})",
                    exit::others(&replies)
                ),
            ));
        }
        let voters = replies.iter().filter(|r| r.reply.is_granted()).count();
        let quarantine = exit::Quarantine::of(exit::replies(&replies));
        if let Some(quarantine) = quarantine.filter(|_| voters < quorum) {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!(
                    "servers unavailable: {voters} of {n} nodes can vote, {quorum} needed; \
                     {quarantine}"
                ),
            ));
        }
        Ok(manager)
    }

    /// [`connected`](Self::connected), for acquiring; returns the manager and the retry policy
    /// to acquire with.
    ///
    /// When fewer than a quorum of servers can be reached, the policy becomes a single attempt:
    /// waiting for a lock that cannot be granted would only hang, so the attempt fails at once
    /// with every node's reply (exit 75, "servers unreachable"), while a TTL that cannot work is
    /// still reported as such (the library checks it before sending anything). Servers that go
    /// away later, while waiting for a busy lock, are waited for like the lock itself. So are
    /// quarantined servers: they answer, and their quarantine ends by itself within `--max-ttl`.
    pub async fn for_acquiring(&self, retry: Retry) -> Result<(Redlock, Retry), Failure> {
        let (manager, up, replies) = self.connect_all().await?;
        if up < manager.quorum() {
            tracing::debug!(up, "too few servers reachable; one attempt only");
            return Ok((manager, Retry::once()));
        }
        if let Some(quarantine) = exit::Quarantine::of(exit::replies(&replies)) {
            tracing::debug!(%quarantine, "acquiring with quarantined nodes");
        }
        Ok((manager, retry))
    }

    /// The manager, each node's reply to connecting, and how many are ready (quarantined ones
    /// included: they answer, they just do not vote yet).
    async fn connect_all(&self) -> Result<(Redlock, usize, Vec<NodeReply>), Failure> {
        let manager = self.manager()?;
        let replies = manager.connect().await;
        for reply in &replies {
            tracing::debug!(node = %reply.node, reply = %reply.reply, "connect");
        }
        let up = replies
            .iter()
            .filter(|r| matches!(r.reply, Reply::Granted | Reply::Quarantined(_)))
            .count();
        Ok((manager, up, replies))
    }
}

/// Prints one line on stdout. Unlike `println!`, a closed pipe is an error, not a panic.
pub fn print(line: &str) -> Result<(), Failure> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| Failure::os(format!("could not write to stdout: {e}")))
}

/// One line of JSON. Serialising our own plain structs cannot fail; should it ever, an empty
/// object is printed rather than a panic.
pub fn json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|_| "{}".to_owned())
}

/// Checks a RESOURCE argument: any non-empty string (it is the Redis key, used as given).
pub fn resource(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err("the resource name must not be empty".to_owned());
    }
    Ok(text.to_owned())
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Acquire(acquire::Args),
    Release(release::Args),
    Extend(extend::Args),
    Status(status::Args),
    Run(run::Args),
    Nodes(nodes::Args),
    Demo(demo::Args),
    Bench(bench::Args),
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
    use clap::CommandFactory;

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
            Ok(redlock::defaults::MAX_TTL)
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

    #[test]
    fn bad_durations_are_usage_errors() {
        let err = Cli::try_parse_from(["redlock", "acquire", "r", "--ttl", "30"]).unwrap_err();
        let line = one_line(&err.render().to_string());
        assert!(line.contains("missing unit"), "{line}");
        assert!(!line.contains('\n'));
    }
}
