//! Shared helpers: the built `redlock` binary, run with a time limit against real servers.
#![allow(dead_code)] // each test file uses its own subset

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use redquorum_nodes::{Cluster, NodeSpec, Persistence};

/// Generous: these are limits on hangs, not timing assertions (2 noisy cores).
pub const LIMIT: Duration = Duration::from_secs(60);

/// `n` fresh masters on free ports, stopped on drop. With AOF and `appendfsync always`, as
/// `redlock nodes start` runs them: nodes that cannot lose a lock are trusted from the start.
pub fn cluster(n: usize) -> Cluster {
    Cluster::start(n, NodeSpec::new().persistence(Persistence::AofAlways))
        .expect("start redis-server nodes")
}

/// The node timeout the tests run the command with (`REDLOCK_NODE_TIMEOUT`; a test that
/// measures timeouts passes `--node-timeout`, which wins). The default, 100 ms, bounds a vote in
/// production; on a loaded 2-core machine running debug builds, with the tests' own processes
/// and servers beside each other, healthy local nodes have answered later than that, and a
/// test would read "unavailable" or a lost keep-alive for a slow machine, not for anything it
/// checks. 2 s is far beyond any answer such a node gives.
pub const PATIENT_NODE_TIMEOUT: &str = "2s";

/// The `redlock` binary with `REDLOCK_SERVERS` set to `servers` and a quiet environment.
pub fn redlock(servers: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_redlock"));
    cmd.env("REDLOCK_SERVERS", servers)
        .env("REDLOCK_NODE_TIMEOUT", PATIENT_NODE_TIMEOUT)
        .env_remove("REDLOCK_LOG")
        .env_remove("REDLOCK_NODES_DIR")
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null());
    cmd
}

/// What a finished run printed.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Output {
    pub fn code(&self) -> i32 {
        self.status.code().unwrap_or(-1)
    }

    /// Asserts the exit status, showing everything on failure.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(self.code(), code, "{self:#?}");
        self
    }

    /// Asserts that stderr is exactly one `redlock: error: ...` line containing `needle`, with
    /// no panic or backtrace, and returns that line.
    #[track_caller]
    pub fn one_line_error(&self, needle: &str) -> &str {
        assert_no_panic(&self.stderr);
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert_eq!(lines.len(), 1, "one line expected: {self:#?}");
        assert!(
            lines[0].starts_with("redlock: error: "),
            "prefix expected: {self:#?}"
        );
        assert!(lines[0].contains(needle), "{needle:?} expected: {self:#?}");
        lines[0]
    }
}

#[track_caller]
pub fn assert_no_panic(stderr: &str) {
    for word in ["panicked", "RUST_BACKTRACE", "stack backtrace"] {
        assert!(!stderr.contains(word), "{word:?} in stderr: {stderr}");
    }
}

/// Runs `cmd` to completion (killing it after [`LIMIT`]) and collects its output.
#[track_caller]
pub fn run(cmd: &mut Command) -> Output {
    let started = Instant::now();
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn redlock");
    finish(child, started)
}

/// Waits for a spawned child (with piped stdout and stderr), killing it after [`LIMIT`].
#[track_caller]
pub fn finish(mut child: Child, started: Instant) -> Output {
    let reader = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = reader(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = reader(Box::new(child.stderr.take().expect("piped stderr")));
    let status = exit_status(child, started);
    Output {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
        elapsed: started.elapsed(),
    }
}

/// Waits for a spawned child's exit, whatever its output goes to, killing it after [`LIMIT`].
#[track_caller]
pub fn exit_status(mut child: Child, started: Instant) -> ExitStatus {
    loop {
        if let Some(status) = child.try_wait().expect("wait for redlock") {
            return status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("redlock did not finish within {LIMIT:?}");
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Polls `check` every 20 ms until it holds or `limit` passes; returns whether it held.
pub fn eventually(limit: Duration, mut check: impl FnMut() -> bool) -> bool {
    let give_up = Instant::now() + limit;
    loop {
        if check() {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A URL on which nothing listens: a port we bound and released.
pub fn dead_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("local address").port();
    drop(listener);
    format!("redis://127.0.0.1:{port}")
}
