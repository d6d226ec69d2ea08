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
//! terminal only, a wait that lasts [`QUIET_FOR`] gets a progress line saying what it waits for,
//! for how long so far, and the command that shows who holds it (or which servers do not
//! answer). It costs no request.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use redquorum::{QuarantineReason, Redlock};
use tokio::task::JoinHandle;

/// How often the watcher looks again.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// How long a wait goes without a word in a terminal: a busy lock's hand-over between two
/// commands takes well under this, so a line appears only for a wait a person would notice.
const QUIET_FOR: Duration = Duration::from_secs(1);

/// What an acquisition waits for, as a progress line names it: `job`, or `the lead of nightly`;
/// and the command that shows who holds it (`redlock status job`).
#[derive(Debug, Clone)]
pub struct Awaited {
    pub what: String,
    pub ask: String,
}

impl Awaited {
    /// A lock (or a semaphore's permits) on `resources`.
    pub fn lock(resources: &[String]) -> Self {
        let first = resources.first().map_or("", String::as_str);
        Self {
            what: resources.join(", "),
            ask: format!("redlock status {}", shell_word(first)),
        }
    }

    /// The leadership of `election`.
    pub fn lead(election: &str) -> Self {
        Self {
            what: format!("the lead of {election}"),
            ask: format!("redlock leader {}", shell_word(election)),
        }
    }

    /// The progress line after `waited`.
    fn line(&self, waited: Duration) -> String {
        // Short enough for an 80-column terminal with a short name: a wrapped line is not
        // cleared.
        format!(
            "waiting for {} ({} s): `{}` shows who holds it",
            self.what,
            waited.as_secs(),
            self.ask
        )
    }
}

/// `word` as one shell word: quoted unless it is made only of characters no shell treats
/// specially.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@%+=,".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The watcher of one acquisition; stops (and clears its progress line) when dropped.
#[derive(Debug)]
pub struct Notice {
    task: JoinHandle<()>,
}

impl Drop for Notice {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `manager`'s nodes for an acquisition of `awaited`; `servers` is the server
/// list as given and `password_file` the global option, for the hint (the list is left out when
/// it carries credentials).
pub fn watch(
    manager: &Redlock,
    awaited: Awaited,
    servers: &str,
    password_file: Option<&Path>,
) -> Notice {
    let manager = manager.clone();
    let command = mark_command(servers, password_file);
    let started = tokio::time::Instant::now();
    let task = tokio::spawn(async move {
        let mut told = false;
        let mut bar: Option<Bar> = None;
        loop {
            let quarantined = manager.quarantined_nodes();
            let voters = manager.nodes().len() - quarantined.len();
            let blocked = !quarantined.is_empty() && voters < manager.quorum();
            if blocked {
                let left = quarantined
                    .iter()
                    .map(|(_, q)| q.left)
                    .min()
                    .unwrap_or_default();
                if !told {
                    told = true;
                    eprintln!(
                        "redlock: waiting for {}",
                        describe(&quarantined, manager.quorum())
                    );
                    if let Some(hint) = mark_hint(&quarantined, &command) {
                        eprintln!("redlock: {hint}");
                    }
                    bar = Bar::new();
                }
                if let Some(bar) = &bar {
                    bar.left(left);
                }
            } else if started.elapsed() >= QUIET_FOR {
                if bar.is_none() {
                    bar = Bar::new();
                }
                if let Some(bar) = &bar {
                    bar.say(awaited.line(started.elapsed()));
                }
            } else if let Some(done) = bar.take() {
                done.clear();
            }
            tokio::time::sleep(LOOK_EVERY).await;
        }
    });
    Notice { task }
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

/// `redlock nodes mark` for these servers: with the list when it carries no password, and the
/// password file when one was given.
fn mark_command(servers: &str, password_file: Option<&Path>) -> String {
    if servers.contains('@') {
        return "redlock --servers <the same servers> nodes mark".to_owned();
    }
    match password_file {
        Some(file) => format!(
            "redlock --servers {servers} --password-file {} nodes mark",
            file.display()
        ),
        None => format!("redlock --servers {servers} nodes mark"),
    }
}

/// How to skip the wait, only where the nodes may simply be new: each was first seen without a
/// marker, or started a moment ago. Vouching for one that lost data under our eyes (its
/// `run_id` changed, its marker went, it was promoted) is how a lock is given twice, so there is
/// no hint for those; and for a server up for less than `--max-ttl` the hint is `--brand-new`,
/// with what that means, since a restart looks the same.
fn mark_hint(quarantined: &[(String, redquorum::Quarantine)], command: &str) -> Option<String> {
    let new = quarantined.iter().all(|(_, q)| {
        matches!(
            q.reason,
            QuarantineReason::Started | QuarantineReason::FirstSeenWithoutMarker
        )
    });
    if !new {
        return None;
    }
    let just_started =
        |q: &redquorum::Quarantine| q.up.is_some() || q.reason == QuarantineReason::Started;
    Some(if quarantined.iter().any(|(_, q)| just_started(q)) {
        format!(
            "if these servers are new and never held a lock, skip the wait with: {command} \
             --brand-new (not after a restart: a restarted server may have lost locks still held)"
        )
    } else {
        format!(
            "if no lock was taken on these servers in the last --max-ttl before they lost their \
             marker (they are new, or nothing restarted or flushed them), skip the wait with: \
             {command}"
        )
    })
}

/// The countdown line, in a terminal only.
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
        let waited = Duration::from_millis(3_400);
        assert_eq!(
            Awaited::lock(&["job".to_owned(), "report:7".to_owned()]).line(waited),
            "waiting for job, report:7 (3 s): `redlock status job` shows who holds it"
        );
        assert_eq!(
            Awaited::lead("nightly build").line(waited),
            "waiting for the lead of nightly build (3 s): `redlock leader 'nightly build'` shows \
             who holds it"
        );
        assert_eq!(shell_word("it's"), "'it'\\''s'");
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
        let command = mark_command("redis://u:secret@10.0.0.1:6379", None);
        assert!(!command.contains("secret"), "{command}");
        assert!(command.ends_with("nodes mark"), "{command}");
        let plain = mark_command("redis://10.0.0.1:6379,redis://10.0.0.2:6379", None);
        assert_eq!(
            plain,
            "redlock --servers redis://10.0.0.1:6379,redis://10.0.0.2:6379 nodes mark"
        );
        let filed = mark_command("redis://10.0.0.1:6379", Some(Path::new("/run/pw")));
        assert_eq!(
            filed,
            "redlock --servers redis://10.0.0.1:6379 --password-file /run/pw nodes mark"
        );
    }

    #[test]
    fn a_restart_gets_no_hint_and_a_server_just_started_only_the_brand_new_one() {
        let node = |reason, up: Option<u64>| {
            let mut q = Quarantine::new(Duration::from_secs(50), reason);
            q.up = up.map(Duration::from_secs);
            vec![("127.0.0.1:7001".to_owned(), q)]
        };
        for reason in [
            QuarantineReason::Restarted,
            QuarantineReason::LostMarker,
            QuarantineReason::Promoted,
        ] {
            assert_eq!(mark_hint(&node(reason, Some(3)), "mark"), None, "{reason}");
        }
        for reason in [
            QuarantineReason::Started,
            QuarantineReason::FirstSeenWithoutMarker,
        ] {
            let just_started = mark_hint(&node(reason, Some(3)), "mark").unwrap_or_default();
            assert!(just_started.contains("mark --brand-new"), "{just_started}");
            assert!(
                just_started.contains("not after a restart"),
                "{just_started}"
            );
        }
        let long_running = mark_hint(
            &node(QuarantineReason::FirstSeenWithoutMarker, None),
            "mark",
        )
        .unwrap_or_default();
        assert!(
            long_running.ends_with("skip the wait with: mark"),
            "{long_running}"
        );
    }
}
