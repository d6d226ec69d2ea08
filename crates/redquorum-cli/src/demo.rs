//! `redlock demo`: the algorithm at work, on real servers, with a crash half-way.
//!
//! Starts 5 local `redis-server` nodes (AOF, `appendfsync always`) and a handful of contenders,
//! each with its own [`Redlock`] manager, as separate processes would have. They take turns on one
//! lock and, inside it, do a deliberately unsafe read–modify–write of a shared counter (read,
//! pause, write back plus one): without mutual exclusion, updates would be lost. Half-way, one
//! node is killed; a majority remains, so the work goes on. At the end the verdict compares the
//! counter with the number of completed critical sections, replays the log of enter/exit events to
//! check that no two holders were ever inside at once, and checks that locks were still taken
//! after the crash. Exit status 0 when all three hold, 1 otherwise.
//!
//! The nodes are ordinary children of this process (a [`Cluster`]): dropping it kills them, also
//! after Ctrl-C, which stops the run early; if `redlock` itself is killed, the kernel kills them
//! (`PR_SET_PDEATHSIG`), which is why they are started on the main thread.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redquorum::{Redlock, Retry};
use redquorum_nodes::{Cluster, NodeSpec, Persistence};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;

use crate::exit::Outcome;
use crate::exit::{Failure, NOT_HELD, OK};
use crate::global::Global;
use crate::output;
use crate::{duration, nodes, progress};

const AFTER_HELP: &str = "\
Starts 5 local redis-server nodes (appendonly, fsync always: trusted at once, never quarantined)
and 6 contenders, each with its own lock manager as separate processes would have. They take turns
on one lock and, inside it, do an unsafe read-modify-write of a shared counter (read, pause, write
back +1). Half-way, one node is killed: a majority is left, so the work goes on. The verdict
checks that the counter equals the number of completed critical sections, that no two holders
ever overlapped, and that locks were still taken after the crash. The nodes are stopped at the
end, also on Ctrl-C.

Examples:
  redlock demo
  redlock demo --duration 30s --contenders 10

Exit status: 0 the verdict holds; 1 it does not; 69 redis-server is not installed;
130/143 stopped early by SIGINT (Ctrl-C) / SIGTERM.";

/// The lock the contenders share.
const RESOURCE: &str = "redlock-demo:counter";
/// Long enough that no critical section (a few milliseconds) comes near it, short enough that a
/// holder lost with the killed node would block the others only briefly.
const TTL: Duration = Duration::from_secs(2);
/// The pause between reading and writing the counter: the window in which a second holder would
/// lose an update.
const PAUSE: Duration = Duration::from_millis(2);

/// Watch contenders share a lock on 5 local nodes while one of them crashes.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// How long to run.
    #[arg(long, value_name = "DUR", value_parser = duration::parse, default_value = "12s")]
    duration: Duration,

    /// How many nodes to start; one is killed half-way when there are at least 3.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=15))]
    nodes: u16,

    /// How many contenders share the lock.
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u16).range(1..=64))]
    contenders: u16,
}

/// One line of the critical-section log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Enter(usize),
    Exit(usize),
}

/// What the contenders share: the unsafe counter and the evidence.
#[derive(Debug, Default)]
struct Shared {
    counter: AtomicU64,
    /// Critical sections that wrote the counter.
    completed: AtomicU64,
    /// Critical sections that found the lock no longer valid before writing, and did not write.
    abandoned: AtomicU64,
    /// How many holders are inside right now; more than one is a violation.
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    /// Enter/exit events in the order they happened (appended under the mutex).
    log: Mutex<Vec<Event>>,
    /// Critical sections entered after the node was killed.
    after_crash: AtomicU64,
    crashed: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn record(&self, event: Event) {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event);
    }
}

pub fn run(args: &Args, global: &Global, runtime: &tokio::runtime::Runtime) -> Outcome {
    output::check_run_length(args.duration)?;
    if TTL > global.max_ttl {
        // Checked before any node starts: every acquisition would be refused.
        return Err(Failure::usage(format!(
            "the demo's locks last {}: --max-ttl must be at least that",
            duration::format(TTL)
        )));
    }
    // On this thread, which lives as long as the nodes should (see the module docs).
    let mut cluster = Cluster::start(
        usize::from(args.nodes),
        NodeSpec::new().persistence(Persistence::AofAlways),
    )
    .map_err(nodes::launch_failure)?;
    let outcome = runtime.block_on(demo(args, global, &mut cluster));
    drop(cluster); // kills the servers and removes their directories
    outcome
}

async fn demo(args: &Args, global: &Global, cluster: &mut Cluster) -> Outcome {
    // Before anything is printed, so whoever saw the first line can interrupt us cleanly.
    let listen =
        |kind| signal(kind).map_err(|e| Failure::os(format!("could not listen for signals: {e}")));
    let (mut interrupt, mut terminate) = (
        listen(SignalKind::interrupt())?,
        listen(SignalKind::terminate())?,
    );
    let urls = cluster.urls();
    let quorum = usize::from(args.nodes) / 2 + 1;
    let bar = progress::timed(args.duration);
    progress::say(
        &bar,
        &format!(
            "redlock demo: {} nodes (appendonly, fsync always), {} contenders, one lock, {}\n  \
             nodes: {}\n  each contender, over and over: acquire {RESOURCE:?} (TTL {}), read the \
             counter, pause {}, write it back +1, release",
            args.nodes,
            args.contenders,
            duration::format(args.duration),
            urls.join(", "),
            duration::format(TTL),
            duration::format(PAUSE),
        ),
    );

    let shared = Arc::new(Shared::default());
    let stop = CancellationToken::new();
    let started = Instant::now();
    let end = started + args.duration;
    let mut contenders = Vec::new();
    for id in 1..=usize::from(args.contenders) {
        // Each contender has its own manager and connections, as a separate process would,
        // configured by the global options like any other.
        let manager = global.configure(Redlock::builder(urls.clone()))?;
        contenders.push(tokio::spawn(contend(
            id,
            manager,
            Arc::clone(&shared),
            stop.clone(),
        )));
    }

    let kill_at = started + args.duration / 2;
    let mut killed = args.nodes < 3; // with fewer, killing one would leave no majority
    let mut ticker = tokio::time::interval(Duration::from_millis(100));
    let interrupted = loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = interrupt.recv() => break Some(130),
            _ = terminate.recv() => break Some(143),
        }
        let now = Instant::now();
        if !killed && now >= kill_at {
            killed = true;
            // A SIGKILL and a reap: milliseconds, so blocking this task (the main thread, not a
            // runtime worker) is fine.
            let victim = cluster.node(0);
            let address = format!("127.0.0.1:{}", victim.port());
            match victim.kill() {
                Ok(()) => {
                    shared.crashed.store(true, Ordering::SeqCst);
                    progress::say(
                        &bar,
                        &format!(
                            "[{}] killed node {address}: {} of {} nodes left, quorum {quorum}, \
                             so locking goes on",
                            duration::format(now - started),
                            args.nodes - 1,
                            args.nodes
                        ),
                    );
                }
                Err(e) => progress::say(&bar, &format!("could not kill node {address}: {e}")),
            }
        }
        progress::tick(
            &bar,
            now - started,
            format!(
                "{} critical sections, counter {}",
                shared.completed.load(Ordering::SeqCst),
                shared.counter.load(Ordering::SeqCst)
            ),
        );
        if now >= end {
            break None;
        }
    };
    stop.cancel();
    let mut per_contender = Vec::new();
    for task in contenders {
        per_contender.push(task.await.unwrap_or_default());
    }
    bar.finish_and_clear();
    if let Some(status) = interrupted {
        progress::say(&bar, "interrupted: stopping the nodes");
        return Ok(status);
    }

    for (i, stats) in per_contender.iter().enumerate() {
        let failed = match stats.failed {
            0 => String::new(),
            n => format!(", {n} acquisitions failed"),
        };
        progress::say(
            &bar,
            &format!(
                "contender {}: {} critical sections{failed}",
                i + 1,
                stats.held
            ),
        );
    }
    let log = shared
        .log
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let verdict = Verdict {
        counter: shared.counter.load(Ordering::SeqCst),
        completed: shared.completed.load(Ordering::SeqCst),
        abandoned: shared.abandoned.load(Ordering::SeqCst),
        overlaps: shared.overlaps.load(Ordering::SeqCst) + replay(&log),
        checked: log.len() / 2,
        after_crash: shared
            .crashed
            .load(Ordering::SeqCst)
            .then(|| shared.after_crash.load(Ordering::SeqCst)),
    };
    progress::say(&bar, &verdict.line());
    Ok(if verdict.holds() { OK } else { NOT_HELD })
}

/// What one contender did.
#[derive(Debug, Default)]
struct Stats {
    held: u64,
    /// Acquisitions that failed (a retry that never gives up fails only on a bad setting).
    failed: u64,
}

async fn contend(
    id: usize,
    manager: Redlock,
    shared: Arc<Shared>,
    stop: CancellationToken,
) -> Stats {
    let mut stats = Stats::default();
    // Short delays between attempts: turns change hands quickly, which is the point. No time
    // limit: the wait ends when the run does (`stop`).
    let retry = Retry::forever().delay(Duration::from_millis(25));
    loop {
        let lock = tokio::select! {
            lock = manager.acquire_with(RESOURCE, TTL, &retry) => lock,
            () = stop.cancelled() => break,
        };
        let Ok(lock) = lock else {
            stats.failed += 1;
            continue;
        };
        shared.record(Event::Enter(id));
        if shared.inside.fetch_add(1, Ordering::SeqCst) > 0 {
            shared.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        if shared.crashed.load(Ordering::SeqCst) {
            shared.after_crash.fetch_add(1, Ordering::SeqCst);
        }
        // The unsafe read-modify-write that only the lock protects.
        let read = shared.counter.load(Ordering::SeqCst);
        tokio::time::sleep(PAUSE).await;
        if lock.is_valid() {
            shared.counter.store(read + 1, Ordering::SeqCst);
            shared.completed.fetch_add(1, Ordering::SeqCst);
            stats.held += 1;
        } else {
            shared.abandoned.fetch_add(1, Ordering::SeqCst);
        }
        shared.inside.fetch_sub(1, Ordering::SeqCst);
        shared.record(Event::Exit(id));
        lock.release().await;
    }
    stats
}

/// Replays the log: how many times a holder entered while another was inside, or an exit did
/// not match the holder inside.
fn replay(log: &[Event]) -> usize {
    let mut inside = None;
    let mut violations = 0;
    for event in log {
        match (*event, inside) {
            (Event::Enter(id), None) => inside = Some(id),
            (Event::Exit(id), Some(holder)) if id == holder => inside = None,
            (Event::Enter(id), Some(_)) => {
                violations += 1;
                inside = Some(id);
            }
            (Event::Exit(_), _) => {
                violations += 1;
                inside = None;
            }
        }
    }
    violations
}

#[derive(Debug, Clone, Copy)]
struct Verdict {
    counter: u64,
    completed: u64,
    abandoned: u64,
    overlaps: usize,
    checked: usize,
    /// Critical sections after the crash, if a node was killed.
    after_crash: Option<u64>,
}

impl Verdict {
    fn holds(&self) -> bool {
        self.counter == self.completed
            && self.overlaps == 0
            && self.completed > 0
            && self.after_crash != Some(0)
    }

    fn line(&self) -> String {
        let mut facts = vec![
            format!(
                "counter {} {} {} completed critical sections",
                self.counter,
                if self.counter == self.completed {
                    "="
                } else {
                    "!="
                },
                self.completed
            ),
            if self.overlaps == 0 {
                format!("no two holders overlapped ({} holds checked)", self.checked)
            } else {
                format!("{} overlapping holds", self.overlaps)
            },
        ];
        match self.after_crash {
            Some(0) => facts.push("no lock was taken after the node was killed".to_owned()),
            Some(n) => facts.push(format!("{n} after the node was killed")),
            None => {}
        }
        if self.abandoned > 0 {
            facts.push(format!(
                "{} abandoned when the lock ran out before the write",
                self.abandoned
            ));
        }
        let word = if self.holds() { "OK" } else { "VIOLATED" };
        format!("verdict: {word}: {}", facts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Event::{Enter, Exit};

    #[test]
    fn turns_in_order_are_no_violation() {
        assert_eq!(replay(&[Enter(1), Exit(1), Enter(2), Exit(2)]), 0);
        assert_eq!(replay(&[]), 0);
    }

    #[test]
    fn interleaved_holds_are_found() {
        assert_eq!(replay(&[Enter(1), Enter(2), Exit(2), Exit(1)]), 2);
        assert_eq!(replay(&[Exit(1)]), 1);
    }

    #[test]
    fn the_verdict_needs_every_check() {
        let ok = Verdict {
            counter: 10,
            completed: 10,
            abandoned: 0,
            overlaps: 0,
            checked: 10,
            after_crash: Some(4),
        };
        assert!(ok.holds(), "{}", ok.line());
        assert!(ok.line().starts_with("verdict: OK: counter 10 = 10"));
        for bad in [
            Verdict { counter: 9, ..ok },
            Verdict { overlaps: 1, ..ok },
            Verdict {
                after_crash: Some(0),
                ..ok
            },
            Verdict {
                counter: 0,
                completed: 0,
                ..ok
            },
        ] {
            assert!(!bad.holds(), "{}", bad.line());
            assert!(bad.line().starts_with("verdict: VIOLATED"));
        }
    }
}
