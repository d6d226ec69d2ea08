//! Exit statuses, and the one-line failure every subcommand returns instead of panicking.
//!
//! The statuses follow `sysexits.h` where one fits, so shell scripts can tell "try again later"
//! from "fix your command line" from "the lock is gone":
//!
//! The table itself is written once, in [`HELP`], which `redlock --help` prints.
//!
//! 76 is `EX_PROTOCOL` in `sysexits.h`; we reuse the number for our own meaning, next to 75.
//!
//! A failed acquisition is 75 only when the lock is busy (held by someone else): waiting, or
//! trying again later, can get it. When the servers are the reason (unreachable, too slow, or
//! quarantined: a node restarted less than `--max-ttl` ago answers, but its grants are not
//! votes), it is 69, as for any other command that could not get a definite answer: a script
//! can tell a held lock from an outage. The message says which.

use std::fmt;
use std::process::ExitCode;

use redquorum::{Cause, Error, NodeReply, Reply};

/// Success.
pub const OK: u8 = 0;
/// The lock is not held with that value; or the demo's verdict failed.
pub const NOT_HELD: u8 = 1;
/// release: the lock had expired before the release, and is left to its lock-delay.
pub const LEFT_TO_DELAY: u8 = 2;
/// `EX_USAGE`: bad input.
pub const USAGE: u8 = 64;
/// `EX_DATAERR`: the resource key has another Redis type.
pub const WRONG_TYPE: u8 = 65;
/// `EX_UNAVAILABLE`: too few servers answered (or could vote), so there is no definite answer;
/// for an acquisition, not acquired because of the servers (unreachable, quarantined, too slow).
pub const UNAVAILABLE: u8 = 69;
/// `EX_OSERR`: the operating system refused something we needed.
pub const OS_ERROR: u8 = 71;
/// `EX_TEMPFAIL`: not acquired because the lock is busy, held by someone else.
pub const BUSY: u8 = 75;
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
  1        release/extend: the lock is not held with that value; locked: it is free; leader:
           nobody leads; demo, chaos: a violation was found
  2        release (with --lock-delay): the lock had expired before the release; it is left to
           its lock-delay, unavailable until then
  64       usage error: bad arguments, server URL, duration or TTL (or a TTL above --max-ttl);
           no COMMAND after --; a --password-file that cannot be read or is empty
  65       the resource exists with another Redis type (WRONGTYPE): it is not a lock
  69       servers unavailable: too few answered (out of quarantine) to give a definite answer;
           acquire, run, elect: not acquired because servers are unreachable, too slow, or
           quarantined (they may have lost data recently; the message says which)
  71       operating-system error (files, processes)
  75       not acquired: the lock is busy, held by someone else (run: --conflict-exit-code
           changes it)
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
    /// The same failure, with `more` after its message (a hint that belongs on the same line).
    pub fn with(mut self, more: &str) -> Self {
        self.message.push_str("; ");
        self.message
            .push_str(&more.split_whitespace().collect::<Vec<_>>().join(" "));
        self
    }

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

    /// The same failure with status `to` instead, if its status is `from` (`run
    /// --conflict-exit-code`: another status for a busy lock).
    pub fn instead_of(self, from: u8, to: u8) -> Self {
        let status = if self.status == from { to } else { self.status };
        Self { status, ..self }
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

/// The quarantined nodes of a round, each with how long and why (the library's words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantine {
    pub nodes: Vec<(String, redquorum::Quarantine)>,
}

impl Quarantine {
    /// The quarantine the library blamed a failure on, with its nodes from `replies`.
    pub fn blamed(cause: &Cause, replies: &[NodeReply]) -> Option<Self> {
        match cause {
            Cause::Quarantined { .. } => Self::of(replies),
            _ => None,
        }
    }

    /// `None` when no node replied as quarantined.
    pub fn of(replies: &[NodeReply]) -> Option<Self> {
        let nodes: Vec<_> = replies
            .iter()
            .filter_map(|r| match &r.reply {
                Reply::Quarantined(q) => Some((r.node.clone(), *q)),
                _ => None,
            })
            .collect();
        (!nodes.is_empty()).then_some(Self { nodes })
    }
}

/// `1 node is quarantined (a:1: first seen without a marker, started 3 s ago, 57 s left)`.
impl fmt::Display for Quarantine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.nodes.len() {
            1 => f.write_str("1 node is quarantined (")?,
            n => write!(f, "{n} nodes are quarantined (")?,
        }
        for (i, (node, quarantine)) in self.nodes.iter().enumerate() {
            let sep = if i == 0 { "" } else { "; " };
            write!(f, "{sep}{node}: {quarantine}")?;
        }
        f.write_str(")")
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

/// Whether a server answered with an error reply: it was reached, whatever else failed.
fn answered_with_an_error(replies: &[NodeReply]) -> bool {
    replies
        .iter()
        .any(|r| matches!(r.reply, Reply::ServerError(_)))
}

/// Classifies a failed acquisition by the library's [`Cause`]: bad TTL (64), a key of another
/// type (65), busy (75, [`BUSY`]), or not acquired because of the servers: unreachable,
/// quarantined, or no quorum in time (69, [`UNAVAILABLE`]; the message says which).
pub fn not_acquired(error: Error) -> Failure {
    match &error {
        Error::NotAcquired {
            resource,
            attempts,
            failure,
        } => {
            let (status, why) = match failure.cause() {
                Cause::WrongType { node } => {
                    return wrong_type_failure(resource, &node, &failure.replies);
                }
                Cause::Busy => (BUSY, format!("{resource:?} is busy, held by someone else")),
                // A server that answered with an error (replicas that did not acknowledge the
                // write, a refused command) was reached: it could not vote.
                Cause::Unavailable if answered_with_an_error(&failure.replies) => {
                    (UNAVAILABLE, "too few servers could vote".to_owned())
                }
                Cause::Unavailable => (UNAVAILABLE, "servers unreachable".to_owned()),
                cause => match Quarantine::blamed(&cause, &failure.replies) {
                    Some(q) => (UNAVAILABLE, format!("{q}, so too few nodes could vote")),
                    // E.g. validity used up by slow replies; the details say which.
                    None => (UNAVAILABLE, "no quorum".to_owned()),
                },
            };
            let plural = if *attempts == 1 { "" } else { "s" };
            Failure::new(
                status,
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
    fn quarantines_name_each_node_with_its_reason_and_time_left() {
        use redquorum::QuarantineReason;
        let s = std::time::Duration::from_secs;
        let reply = |node: &str, reply| NodeReply::new(node, reply);
        assert_eq!(Quarantine::of(&[reply("a:1", Reply::Granted)]), None);
        let q = Quarantine::of(&[
            reply(
                "a:1",
                Reply::Quarantined(redquorum::Quarantine::new(
                    s(2),
                    QuarantineReason::Restarted,
                )),
            ),
            reply("b:2", Reply::Refused),
            reply(
                "c:3",
                Reply::Quarantined(redquorum::Quarantine::new(
                    s(30),
                    QuarantineReason::LostMarker,
                )),
            ),
        ])
        .unwrap();
        assert_eq!(
            q.to_string(),
            "2 nodes are quarantined (a:1: restarted (its run_id changed), 2 s left; c:3: lost \
             its marker (data loss without a restart), 30 s left)"
        );
    }

    #[test]
    fn a_server_that_answered_with_an_error_is_not_called_unreachable() {
        let reply = |node: &str, reply| NodeReply::new(node, reply);
        assert!(answered_with_an_error(&[
            reply("a:1", Reply::Unreachable("refused".into())),
            reply(
                "sentinel(s:1)/m",
                Reply::ServerError("only 0 of the primary's 1 replicas acknowledged".into())
            ),
        ]));
        assert!(!answered_with_an_error(&[
            reply("a:1", Reply::Unreachable("refused".into())),
            reply("b:2", Reply::Timeout),
        ]));
    }

    #[test]
    fn unreachable_servers_are_not_called_busy() {
        let f = not_acquired(not_acquired_from_nowhere());
        assert_eq!(f.status, UNAVAILABLE);
        assert!(f.to_string().contains("servers unreachable"), "{f}");
        assert!(f.to_string().contains("127.0.0.1:1"), "{f}");
    }
}
