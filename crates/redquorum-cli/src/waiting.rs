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

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use redquorum::{QuarantineReason, Redlock};
use tokio::task::JoinHandle;

/// How often the watcher looks again.
const LOOK_EVERY: Duration = Duration::from_millis(250);

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

/// Starts watching `manager`'s nodes for an acquisition; `servers` is the server list as
/// given, for the hint (left out when it carries credentials).
pub fn watch(manager: &Redlock, servers: &str) -> Notice {
    let manager = manager.clone();
    let hint = mark_hint(servers);
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
                    // Only for nodes that may simply be new: vouching for one that lost data
                    // (restarted, flushed, promoted) is how a lock is given twice.
                    let new = quarantined.iter().all(|(_, q)| {
                        matches!(
                            q.reason,
                            QuarantineReason::Started | QuarantineReason::FirstSeenWithoutMarker
                        )
                    });
                    if new {
                        eprintln!("redlock: {hint}");
                    }
                    bar = Bar::new();
                }
                if let Some(bar) = &bar {
                    bar.left(left);
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

/// How to skip the wait: `redlock nodes mark`, with the servers when they carry no password.
fn mark_hint(servers: &str) -> String {
    let command = if servers.contains('@') {
        "redlock nodes mark (with the same --servers)".to_owned()
    } else {
        format!("redlock --servers {servers} nodes mark")
    };
    format!(
        "if you know these servers lost nothing (brand new, or known good), skip the wait with: \
         {command}"
    )
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
        self.0.set_message(format!(
            "waiting for the quarantine to end: {} s left",
            left.as_secs_f64().ceil()
        ));
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
    fn the_hint_never_repeats_a_password() {
        let hint = mark_hint("redis://u:secret@10.0.0.1:6379");
        assert!(!hint.contains("secret"), "{hint}");
        assert!(hint.contains("redlock nodes mark"), "{hint}");
        let plain = mark_hint("redis://10.0.0.1:6379,redis://10.0.0.2:6379");
        assert!(
            plain.ends_with(
                "redlock --servers redis://10.0.0.1:6379,redis://10.0.0.2:6379 nodes mark"
            ),
            "{plain}"
        );
    }
}
