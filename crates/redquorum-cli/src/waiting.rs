//! Saying why an acquisition waits, when quarantined nodes are what holds it up.
//!
//! The restart quarantine keeps a node that may have lost its data out of the vote for up to
//! `--max-ttl` (a minute by default). A wait that long with nothing on the screen looks like a
//! hang, and a newcomer kills it. So while an acquisition runs, a watcher reads the manager's
//! view of its nodes ([`Redlock::quarantined_nodes`], no request sent) and, as soon as too few
//! nodes can vote:
//! - prints one line on stderr: which nodes, why, and how long is left;
//! - prints how to skip the wait, for an operator who knows the servers lost nothing
//!   (`redlock nodes mark`);
//! - then, in a terminal only, keeps one progress line counting down; nothing more when
//!   stderr is not a terminal (logs stay short).
//!
//! The first look comes at once: the manager connected (and health-checked) every node before
//! the acquisition started, so the line appears within the connection's time, well under a
//! second.
//!
//! Any other wait (the lock is held elsewhere, or too few servers answer) is the command doing
//! what it was asked, and a script's stderr stays empty for it, as `flock`'s does. But a person at
//! a terminal who sees nothing for a few seconds cannot tell a wait from a hang: so in a
//! terminal only, a wait that lasts [`QUIET_FOR`] gets one line saying what it waits for and,
//! where `redlock status` or `redlock leader` can tell, the command (with the same servers) that
//! shows who holds it or which servers do not answer; then a progress line counts the seconds.
//! It costs no request. The [`Notice`] owns the line, so dropping it clears the line at once,
//! before COMMAND writes to the terminal or an error is printed.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use redquorum::{Redlock, Remedy};
use tokio::task::JoinHandle;

/// How often the watcher looks again.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// How long a wait goes without a word in a terminal: a busy lock's hand-over between two
/// commands takes well under this, so a line appears only for a wait a person would notice.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// What an acquisition waits for, as the terminal's lines name it, and the `redlock`
/// subcommand that shows who holds it, where one does.
#[derive(Debug, Clone)]
pub struct Awaited {
    what: String,
    ask: Option<String>,
}

impl Awaited {
    /// A lock on `resources`: `redlock status` shows one resource's holder, so only a lock on
    /// one resource gets the hint.
    pub fn lock(resources: &[String]) -> Self {
        Self {
            what: resources
                .iter()
                .map(|r| shown(r))
                .collect::<Vec<_>>()
                .join(", "),
            ask: match resources {
                [one] => Some(format!("status -- {}", shell_word(one))),
                _ => None,
            },
        }
    }

    /// A semaphore's permit, or a read-write lock's hold (`kind`) on `resource`: `redlock
    /// status` reads neither, so no hint.
    pub fn other(kind: &str, resource: &str) -> Self {
        Self {
            what: format!("{kind} {}", shown(resource)),
            ask: None,
        }
    }

    /// The leadership of `election`.
    pub fn lead(election: &str) -> Self {
        Self {
            what: format!("the lead of {}", shown(election)),
            ask: Some(format!("leader -- {}", shell_word(election))),
        }
    }

    /// The line printed once, when the wait has lasted [`QUIET_FOR`]: `redlock` is the command
    /// with the global options that reach the same servers.
    fn first_line(&self, redlock: &str) -> String {
        match &self.ask {
            Some(ask) => format!(
                "redlock: {} is held elsewhere, or too few servers answer; `{redlock} {ask}` \
                 shows which",
                self.what
            ),
            None => format!(
                "redlock: {} is held elsewhere, or too few servers answer",
                self.what
            ),
        }
    }

    /// The progress line after `waited`: short, so that it fits a terminal's width.
    fn progress(&self, waited: Duration) -> String {
        format!("waiting for {}: {} s", self.what, waited.as_secs())
    }
}

/// A name as the terminal shows it: control characters escaped, so a name cannot move the
/// cursor or end the line.
fn shown(name: &str) -> String {
    let mut shown = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_control() {
            shown.extend(c.escape_default());
        } else {
            shown.push(c);
        }
    }
    shown
}

/// `word` as one shell word: quoted unless it is made only of characters no shell (zsh
/// included) treats specially, and does not start with `=` (zsh's `=command`).
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && !word.starts_with('=')
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@%+=,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The watcher of one acquisition; stops, and clears its progress line, when dropped.
#[derive(Debug)]
pub struct Notice {
    task: JoinHandle<()>,
    screen: Arc<Mutex<Screen>>,
}

/// What the watcher shows, shared with the [`Notice`] so that dropping it clears the line at
/// once, before the caller prints anything or starts COMMAND (an aborted task is only dropped
/// later, on a worker, while the bar's own thread keeps drawing).
#[derive(Debug, Default)]
struct Screen {
    bar: Option<Bar>,
    /// Set by the notice's drop: the watcher draws nothing more.
    closed: bool,
}

fn screen(shared: &Mutex<Screen>) -> MutexGuard<'_, Screen> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Drop for Notice {
    fn drop(&mut self) {
        self.task.abort();
        let mut screen = screen(&self.screen);
        screen.closed = true;
        if let Some(bar) = screen.bar.take() {
            bar.clear();
        }
    }
}

/// Starts watching `manager`'s nodes for an acquisition of `awaited`; `servers` is the server
/// list as given and `password_file` the global option, for the hints (the list is left out
/// when it carries credentials).
pub fn watch(manager: &Redlock, awaited: Awaited, reach: Reach<'_>) -> Notice {
    let manager = manager.clone();
    let redlock = redlock_command(reach);
    let started = tokio::time::Instant::now();
    let shared = Arc::new(Mutex::new(Screen::default()));
    let screen_of_task = Arc::clone(&shared);
    let task = tokio::spawn(async move {
        let mut told = false;
        let mut said = false;
        // A quarantine's end starts the quiet second again: the acquisition only then gets to
        // try, and a free lock must not be called held elsewhere.
        let mut quiet_since = started;
        loop {
            let quarantined = manager.quarantined_nodes();
            let nodes = manager.nodes().len();
            let voters = nodes - quarantined.len();
            let blocked = !quarantined.is_empty() && voters < manager.quorum();
            {
                let mut screen = screen(&screen_of_task);
                if screen.closed {
                    return;
                }
                if blocked {
                    quiet_since = tokio::time::Instant::now();
                    let left = quarantined
                        .iter()
                        .map(|(_, q)| q.left)
                        .min()
                        .unwrap_or_default();
                    if !told {
                        told = true;
                        if let Some(bar) = screen.bar.take() {
                            bar.clear();
                        }
                        eprintln!(
                            "redlock: waiting for {}",
                            describe(&quarantined, manager.quorum())
                        );
                        if let Some(hint) = mark_hint(&quarantined, nodes, &redlock) {
                            eprintln!("redlock: {hint}");
                        }
                        screen.bar = Bar::new();
                    }
                    if let Some(bar) = &screen.bar {
                        bar.left(left);
                    }
                } else if quiet_since.elapsed() >= QUIET_FOR {
                    if screen.bar.is_none() {
                        screen.bar = Bar::new();
                    }
                    if let Some(bar) = &screen.bar {
                        if !said {
                            said = true;
                            bar.println(&awaited.first_line(&redlock));
                        }
                        bar.say(awaited.progress(started.elapsed()));
                    }
                } else if let Some(done) = screen.bar.take() {
                    done.clear();
                }
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    });
    Notice {
        task,
        screen: shared,
    }
}

/// `1 node to leave the restart quarantine: 127.0.0.1:7001 (first seen without a marker, 58 s
/// left); until then fewer than the 1 needed can vote`.
fn describe(quarantined: &[(String, redquorum::Quarantine)], quorum: usize) -> String {
    let nodes: Vec<String> = quarantined
        .iter()
        .map(|(node, q)| format!("{node} ({q})"))
        .collect();
    let count = match nodes.len() {
        1 => "1 node".to_owned(),
        n => format!("{n} nodes"),
    };
    format!(
        "{count} to leave the restart quarantine: {}; until then fewer than the {quorum} needed \
         can vote (a node that may have lost data less than --max-ttl ago does not vote)",
        nodes.join("; ")
    )
}

/// What a hint's `redlock` command needs to reach the same servers under the same rules as this
/// run: the servers, the password file, and the options a mark is judged by.
#[derive(Debug, Clone, Copy)]
pub struct Reach<'a> {
    pub servers: &'a str,
    pub password_file: Option<&'a Path>,
    /// `--max-ttl`, when not the default: a mark judges a server's uptime against it.
    pub max_ttl: Option<Duration>,
    /// `--tls-ca`, when given.
    pub tls_ca: Option<&'a Path>,
}

/// `redlock` with the global options of `reach`: the list when it carries no password (in its
/// user part or its query, as `?pass=`), and the password file when one was given.
fn redlock_command(reach: Reach<'_>) -> String {
    let lower = reach.servers.to_ascii_lowercase();
    let mut command = if reach.servers.contains('@') || lower.contains("pass") {
        "redlock --servers <the same servers>".to_owned()
    } else {
        format!("redlock --servers {}", shell_word(reach.servers))
    };
    if let Some(file) = reach.password_file {
        command.push_str(&format!(
            " --password-file {}",
            shell_word(&file.display().to_string())
        ));
    }
    if let Some(max_ttl) = reach.max_ttl {
        let ttl = if max_ttl.subsec_millis() == 0 {
            format!("{}s", max_ttl.as_secs())
        } else {
            format!("{}ms", max_ttl.as_millis())
        };
        command.push_str(&format!(" --max-ttl {ttl}"));
    }
    if let Some(ca) = reach.tls_ca {
        command.push_str(&format!(
            " --tls-ca {}",
            shell_word(&ca.display().to_string())
        ));
    }
    command
}

/// How to skip the wait, only where the nodes may simply be new: each was first seen without a
/// marker, or started a moment ago. Vouching for one that lost data under our eyes (its
/// `run_id` changed, its marker went, it was promoted) is how a lock is given twice, so there is
/// no hint for those; and for a server up for less than `--max-ttl` the hint is `--brand-new`,
/// with what that means, since a restart looks the same.
fn mark_hint(
    quarantined: &[(String, redquorum::Quarantine)],
    nodes: usize,
    redlock: &str,
) -> Option<String> {
    // The library's rule (`remedy` invariant 1), in the CLI's words.
    let remedy = Remedy::of(quarantined.iter().map(|(_, q)| q), nodes)?;
    Some(remedy_hint(remedy, redlock))
}

/// The hint for a failed acquisition whose error names a remedy ([`redquorum::Error::remedy`]):
/// the same words as a wait's, with the command that reaches these servers.
pub fn failure_hint(error: &redquorum::Error, reach: Reach<'_>) -> Option<String> {
    Some(remedy_hint(error.remedy()?, &redlock_command(reach)))
}

/// `remedy` as a command line for `redlock` (`redlock --servers … nodes mark [--brand-new]`).
fn remedy_hint(remedy: Remedy, redlock: &str) -> String {
    let command = format!("{redlock} nodes mark");
    match remedy {
        Remedy::MarkBrandNew => format!(
            "if these servers are new and never held a lock, skip the wait with: {command} \
             --brand-new (not after a restart: a restarted server may have lost locks still held)"
        ),
        _ => format!(
            "if no lock was taken on these servers in the last --max-ttl before they lost their \
             marker (they are new, or nothing restarted or flushed them), skip the wait with: \
             {command}"
        ),
    }
}

/// The countdown line, in a terminal only.
#[derive(Debug)]
struct Bar(ProgressBar);

impl Bar {
    fn new() -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(100));
        Some(Self(bar))
    }

    fn left(&self, left: Duration) {
        self.say(format!(
            "waiting for the quarantine to end: {} s left",
            left.as_secs_f64().ceil()
        ));
    }

    fn say(&self, message: String) {
        self.0.set_message(message);
    }

    /// Prints `line` above the bar, which stays.
    fn println(&self, line: &str) {
        self.0.println(line);
    }

    fn clear(self) {
        self.0.finish_and_clear();
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redquorum::{Quarantine, QuarantineReason};

    #[test]
    fn a_long_wait_says_what_it_waits_for_and_how_to_see_who_holds_it() {
        let redlock = redlock_command(Reach {
            servers: "redis://10.0.0.1:6379",
            password_file: None,
            max_ttl: None,
            tls_ca: None,
        });
        let one = Awaited::lock(&["job".to_owned()]);
        assert_eq!(
            one.first_line(&redlock),
            "redlock: job is held elsewhere, or too few servers answer; `redlock --servers \
             redis://10.0.0.1:6379 status -- job` shows which"
        );
        assert_eq!(
            one.progress(Duration::from_millis(3_400)),
            "waiting for job: 3 s"
        );
        // `redlock status` shows one resource, and no semaphore or read-write lock: no hint.
        let two = Awaited::lock(&["job".to_owned(), "report:7".to_owned()]);
        assert_eq!(
            two.first_line(&redlock),
            "redlock: job, report:7 is held elsewhere, or too few servers answer"
        );
        let permit = Awaited::other("a permit of", "pool");
        assert_eq!(
            permit.first_line(&redlock),
            "redlock: a permit of pool is held elsewhere, or too few servers answer"
        );
        assert!(
            Awaited::lead("nightly build")
                .first_line(&redlock)
                .ends_with(
                    "`redlock --servers redis://10.0.0.1:6379 leader -- 'nightly build'` shows \
                     which"
                )
        );
    }

    #[test]
    fn names_are_quoted_for_the_shell_and_escaped_for_the_terminal() {
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("-x"), "-x"); // after `--`
        assert_eq!(shell_word("=ls"), "'=ls'");
        assert_eq!(shell_word("a b$c"), "'a b$c'");
        assert_eq!(shell_word(""), "''");
        assert_eq!(shown("a\nb\u{1b}[2J"), "a\\nb\\u{1b}[2J");
        let filed = redlock_command(Reach {
            servers: "redis://h:6379/?a=1&b=2",
            password_file: Some(Path::new("/run/my pw")),
            max_ttl: None,
            tls_ca: None,
        });
        assert_eq!(
            filed,
            "redlock --servers 'redis://h:6379/?a=1&b=2' --password-file '/run/my pw'"
        );
    }

    #[test]
    fn the_line_names_each_node_its_reason_and_time_left() {
        let q = Quarantine::new(
            Duration::from_secs(58),
            QuarantineReason::FirstSeenWithoutMarker,
        );
        let line = describe(&[("127.0.0.1:7001".to_owned(), q)], 1);
        assert!(
            line.starts_with(
                "1 node to leave the restart quarantine: 127.0.0.1:7001 (first seen without a \
                 marker, 58 s left); until then fewer than the 1 needed can vote"
            ),
            "{line}"
        );
    }

    #[test]
    fn the_hint_never_repeats_a_password_and_names_the_password_file() {
        let mut q = Quarantine::new(
            Duration::from_secs(58),
            QuarantineReason::FirstSeenWithoutMarker,
        );
        q.first_sight = true;
        let quarantined = [("10.0.0.1:6379".to_owned(), q)];
        let reach = |servers, file: Option<&'static str>| Reach {
            servers,
            password_file: file.map(Path::new),
            max_ttl: None,
            tls_ca: None,
        };
        let hint = |servers, file: Option<&'static str>| {
            mark_hint(&quarantined, 1, &redlock_command(reach(servers, file))).unwrap_or_default()
        };
        let command = hint("redis://u:secret@10.0.0.1:6379", None);
        assert!(!command.contains("secret"), "{command}");
        assert!(
            command.ends_with("redlock --servers <the same servers> nodes mark"),
            "{command}"
        );
        // A password in the query (a unix socket's `?pass=`): found by review.
        let command = hint("unix:///run/r.sock?pass=s3cr3t", None);
        assert!(!command.contains("s3cr3t"), "{command}");
        // The options a mark is judged by go with it.
        let judged = redlock_command(Reach {
            max_ttl: Some(Duration::from_secs(6)),
            tls_ca: Some(Path::new("/etc/ca.pem")),
            ..reach("rediss://10.0.0.1:6379", None)
        });
        assert_eq!(
            judged,
            "redlock --servers rediss://10.0.0.1:6379 --max-ttl 6s --tls-ca /etc/ca.pem"
        );
        let plain = hint("redis://10.0.0.1:6379,redis://10.0.0.2:6379", None);
        assert!(
            plain.ends_with(
                "redlock --servers redis://10.0.0.1:6379,redis://10.0.0.2:6379 nodes mark"
            ),
            "{plain}"
        );
        let filed = hint("redis://10.0.0.1:6379", Some("/run/pw"));
        assert!(
            filed.ends_with(
                "redlock --servers redis://10.0.0.1:6379 --password-file /run/pw nodes mark"
            ),
            "{filed}"
        );
    }

    #[test]
    fn a_restart_gets_no_hint_and_a_server_just_started_only_the_brand_new_one() {
        let node = |reason, up: Option<u64>| {
            let mut q = Quarantine::new(Duration::from_secs(50), reason);
            q.up = up.map(Duration::from_secs);
            // A restart shows the marker it had; only a server nothing vouched for may be new.
            q.first_sight = reason != QuarantineReason::Started;
            vec![("127.0.0.1:7001".to_owned(), q)]
        };
        // `Started` alone: the server showed a marker but started recently, a restart.
        for reason in [
            QuarantineReason::Started,
            QuarantineReason::Restarted,
            QuarantineReason::LostMarker,
            QuarantineReason::Promoted,
        ] {
            assert_eq!(
                mark_hint(&node(reason, Some(3)), 1, "redlock"),
                None,
                "{reason}"
            );
        }
        let first_seen = QuarantineReason::FirstSeenWithoutMarker;
        let just_started = mark_hint(&node(first_seen, Some(3)), 1, "redlock").unwrap_or_default();
        assert!(
            just_started.contains("redlock nodes mark --brand-new"),
            "{just_started}"
        );
        assert!(
            just_started.contains("not after a restart"),
            "{just_started}"
        );
        // New to a group whose other node votes: a mark would be refused.
        assert_eq!(mark_hint(&node(first_seen, Some(3)), 2, "redlock"), None);
        let long_running = mark_hint(
            &node(QuarantineReason::FirstSeenWithoutMarker, None),
            1,
            "redlock",
        )
        .unwrap_or_default();
        assert!(
            long_running.ends_with("skip the wait with: redlock nodes mark"),
            "{long_running}"
        );
    }
}
