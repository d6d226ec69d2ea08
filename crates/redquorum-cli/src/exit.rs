//! Exit statuses, and the one-line failure every subcommand returns instead of panicking.
//!
//! The statuses follow `sysexits.h` where one fits, so shell scripts can tell "try again later"
//! from "fix your command line" from "the lock is gone":
//!
//! The table itself is written once, in [`HELP`], which `redlock --help` prints.
//!
//! 76 is `EX_PROTOCOL` in `sysexits.h`; we reuse the number for our own meaning, next to 75.
//!
//! A quarantined node (restarted less than `--max-ttl` ago) answers, but its grants are not
//! votes: for these statuses it is neither "busy" nor "unreachable", and messages say so.

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use redquorum::{Cause, Error, NodeReply, Reply};

use crate::duration;

/// Success.
pub const OK: u8 = 0;
/// The lock is not held with that value; or the demo's verdict failed.
pub const NOT_HELD: u8 = 1;
/// `EX_USAGE`: bad input.
pub const USAGE: u8 = 64;
/// `EX_DATAERR`: the resource key has another Redis type.
pub const WRONG_TYPE: u8 = 65;
/// `EX_UNAVAILABLE`: too few servers answered.
pub const UNAVAILABLE: u8 = 69;
/// `EX_OSERR`: the operating system refused something we needed.
pub const OS_ERROR: u8 = 71;
/// `EX_TEMPFAIL`: not acquired in time.
pub const NOT_ACQUIRED: u8 = 75;
/// The lock was lost while COMMAND ran.
pub const LOST: u8 = 76;
/// COMMAND exists but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// COMMAND was not found.
pub const COMMAND_NOT_FOUND: u8 = 127;

/// The exit-status table for `--help`, kept next to the constants it describes.
pub const HELP: &str = "\
Exit status:
  0        success
  1        release/extend: the lock is not held with that value; leader: nobody leads; demo,
           chaos: a violation was found
  64       usage error: bad arguments, server URL, duration or TTL (or a TTL above --max-ttl);
           no COMMAND after --
  65       the resource exists with another Redis type (WRONGTYPE): it is not a lock
  69       servers unavailable: too few answered (out of quarantine) to give a definite answer
  71       operating-system error (files, processes)
  75       not acquired in time (busy, servers unreachable, or nodes quarantined after a
           restart; the message says which)
  76       run, elect: the lock (leadership) was lost while COMMAND ran (COMMAND was terminated)
  126/127  run, elect: COMMAND could not be executed / was not found
  other    run, elect: COMMAND's own status, 128+N if it died from signal N";

/// What a subcommand ends with: the exit status, or a failure to report.
pub type Outcome = Result<u8, Failure>;

/// Why a subcommand failed: a status and one line for stderr.
#[derive(Debug)]
pub struct Failure {
    pub status: u8,
    message: String,
}

impl Failure {
    /// A failure with this status; line breaks in `message` become spaces, so the error stays on
    /// one line whatever a server or the OS said.
    pub fn new(status: u8, message: impl Into<String>) -> Self {
        let message: String = message.into();
        let message = message.split_whitespace().collect::<Vec<_>>().join(" ");
        Self { status, message }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    pub fn os(message: impl Into<String>) -> Self {
        Self::new(OS_ERROR, message)
    }

    /// Prints `redlock: error: MESSAGE` to stderr and returns the status to exit with.
    pub fn report(&self) -> ExitCode {
        eprintln!("redlock: error: {}", self.message);
        ExitCode::from(self.status)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Just the replies of a round, for the functions here that judge them.
pub fn replies(round: &[NodeReply]) -> impl Iterator<Item = &Reply> + Clone {
    round.iter().map(|r| &r.reply)
}

/// The quarantined nodes of a round: how many, and the longest quarantine left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quarantine {
    pub nodes: usize,
    pub longest: Duration,
}

impl Quarantine {
    /// The quarantine the library blamed a failure on.
    pub fn blamed(cause: &Cause) -> Option<Self> {
        match cause {
            Cause::Quarantined { nodes, longest } => Some(Self {
                nodes: *nodes,
                longest: *longest,
            }),
            _ => None,
        }
    }

    /// `None` when no node replied as quarantined.
    pub fn of<'a>(replies: impl IntoIterator<Item = &'a Reply>) -> Option<Self> {
        replies
            .into_iter()
            .filter_map(|r| match r {
                Reply::Quarantined(left) => Some(*left),
                _ => None,
            })
            .fold(None, |seen: Option<Self>, left| {
                let (nodes, longest) = seen.map_or((0, left), |q| (q.nodes, q.longest.max(left)));
                Some(Self {
                    nodes: nodes + 1,
                    longest,
                })
            })
    }
}

impl fmt::Display for Quarantine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (nodes, verb) = match self.nodes {
            1 => ("1 node".to_owned(), "is"),
            n => (format!("{n} nodes"), "are"),
        };
        write!(
            f,
            "{nodes} restarted recently and {verb} quarantined for up to {}",
            duration::format(self.longest)
        )
    }
}

/// The nodes that did not grant, as `node: reply; node: reply`, for messages.
pub fn others(replies: &[NodeReply]) -> String {
    replies
        .iter()
        .filter(|r| !r.reply.is_granted())
        .map(|r| format!("{}: {}", r.node, r.reply))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Classifies a failed acquisition by the library's [`Cause`]: bad TTL (64), a key of another
/// type (65), or not acquired because busy, unreachable or quarantined (75, the message says
/// which).
pub fn not_acquired(error: Error) -> Failure {
    match &error {
        Error::NotAcquired {
            resource,
            attempts,
            failure,
        } => {
            let why = match failure.cause() {
                Cause::WrongType { node } => {
                    return wrong_type_failure(resource, &node, &failure.replies);
                }
                Cause::Busy => format!("{resource:?} is busy, held by someone else"),
                Cause::Unavailable => "servers unreachable".to_owned(),
                cause => match Quarantine::blamed(&cause) {
                    Some(q) => format!("{q}, so too few nodes could vote"),
                    // E.g. validity used up by slow replies; the details say which.
                    None => "no quorum".to_owned(),
                },
            };
            let plural = if *attempts == 1 { "" } else { "s" };
            Failure::new(
                NOT_ACQUIRED,
                format!("not acquired, {why} ({failure}; {attempts} attempt{plural})"),
            )
        }
        _ => from_error(error),
    }
}

/// The failure for a resource whose key has another Redis type on `node`.
pub fn wrong_type_failure(resource: &str, node: &str, replies: &[NodeReply]) -> Failure {
    let detail = replies
        .iter()
        .find(|r| r.node == node)
        .map_or_else(String::new, |r| format!(" ({})", r.reply));
    Failure::new(
        WRONG_TYPE,
        format!(
            "{resource:?} exists on {node} with another Redis type, so it is not a lock{detail}"
        ),
    )
}

/// Any other library error: configuration problems are usage errors.
pub fn from_error(error: Error) -> Failure {
    match error {
        Error::Config(e) => Failure::usage(e.to_string()),
        other => Failure::new(UNAVAILABLE, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_stay_on_one_line() {
        let f = Failure::new(1, "a\nb\r\n  c");
        assert_eq!(f.to_string(), "a b c");
    }

    /// A real `NotAcquired`: the library's failure records have no public constructor.
    fn not_acquired_from_nowhere() -> Error {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Port 1: nothing listens there, the connection is refused at once.
            let manager = redquorum::Redlock::builder(["redis://127.0.0.1:1"])
                .build()
                .unwrap();
            manager
                .try_acquire("r", std::time::Duration::from_secs(1))
                .await
                .unwrap_err()
        })
    }

    #[test]
    fn quarantines_are_counted_with_the_longest_time_left() {
        let ms = Duration::from_millis;
        assert_eq!(Quarantine::of(&[Reply::Granted]), None);
        let q = Quarantine::of(&[
            Reply::Quarantined(ms(1200)),
            Reply::Refused,
            Reply::Quarantined(ms(29_800)),
        ])
        .unwrap();
        assert_eq!(
            q,
            Quarantine {
                nodes: 2,
                longest: ms(29_800)
            }
        );
        assert_eq!(
            q.to_string(),
            "2 nodes restarted recently and are quarantined for up to 29.8s"
        );
        let one = Quarantine::of(&[Reply::Quarantined(ms(500))]).unwrap();
        assert_eq!(
            one.to_string(),
            "1 node restarted recently and is quarantined for up to 500ms"
        );
    }

    #[test]
    fn unreachable_servers_are_not_called_busy() {
        let f = not_acquired(not_acquired_from_nowhere());
        assert_eq!(f.status, NOT_ACQUIRED);
        assert!(f.to_string().contains("servers unreachable"), "{f}");
        assert!(f.to_string().contains("127.0.0.1:1"), "{f}");
    }
}
