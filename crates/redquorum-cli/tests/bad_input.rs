//! Bad input of every kind: one line on stderr, `redlock: error: ...`, a non-zero status, and
//! never a panic or a backtrace.

mod common;

use common::{assert_no_panic, cluster, dead_url, redlock, run};

/// Runs `redlock ARGS` against `servers` and checks the one-line error and the status.
#[track_caller]
fn rejects(servers: &str, args: &[&str], code: i32, needle: &str) -> String {
    let out = run(redlock(servers).args(args));
    out.expect_code(code);
    out.one_line_error(needle).to_owned()
}

#[test]
fn unparsable_arguments_are_usage_errors() {
    // No server is contacted for any of these.
    let servers = dead_url();
    for (args, needle) in [
        (&["acquire", "r", "--ttl", "30"][..], "missing unit"),
        (&["acquire", "r", "--ttl", "soon"], "expected a number"),
        (&["acquire", "r", "--ttl", "5x"], "unknown unit"),
        (
            &["acquire", "r", "--ttl", "1s", "--wait=-1s"],
            "expected a number",
        ),
        (
            &["acquire", "r", "--ttl", "1s", "--wait", "-1s"],
            "unexpected argument",
        ),
        (&["acquire", "r"], "--ttl"),
        (&["acquire", "", "--ttl", "1s"], "must not be empty"),
        (&["run", "r"], "no COMMAND given after --"),
        (&["run", "r", "--"], "no COMMAND given after --"),
        // Without `--`, `echo` and `hi` are resources: no COMMAND, and a hint why.
        (
            &["run", "r", "echo", "hi"],
            "every argument before -- is a resource",
        ),
        (&["run", "--", "true"], "<RESOURCE>"),
        (&["run", "a", "", "--", "true"], "must not be empty"),
        // The library's own keys are not resources.
        (
            &["acquire", "redlock-fence:x", "--ttl", "1s"],
            "\"redlock-fence:x\" is reserved",
        ),
        (
            &["run", "a", "redlock-node-marker", "--", "true"],
            "is reserved",
        ),
        (&["elect", "redlock-queue:e", "--", "true"], "is reserved"),
        (&["release", "redlock-writer-waiting:w", "v"], "is reserved"),
        (
            &["run", "r", "--wait", "1s", "--no-wait", "--", "true"],
            "cannot be used with",
        ),
        (&["run", "r", "--ttl", "1h30", "--", "true"], "missing unit"),
        (&["--node-timeout", "fast", "status", "r"], "--node-timeout"),
        (&["release", "r"], "VALUE"),
        (&["frobnicate"], "unrecognized subcommand"),
        (&[], "requires a subcommand"),
        (&["nodes"], "requires a subcommand"),
        (&["bench", "--workload", "heavy"], "invalid value 'heavy'"),
        (
            &["demo", "--duration", "0s"],
            "--duration must be greater than zero",
        ),
    ] {
        let out = run(redlock(&servers).args(args));
        assert_eq!(out.code(), 64, "{args:?}: {out:#?}");
        out.one_line_error(needle);
    }
}

#[test]
fn bad_server_lists_are_usage_errors_and_passwords_stay_hidden() {
    for (servers, needle) in [
        ("not-a-url", "invalid server URL"),
        ("http://127.0.0.1:6379", "invalid server URL"),
        (
            "redis://alice:hunter2@127.0.0.1:99999",
            "redis://alice:***@127.0.0.1:99999",
        ),
        (" , ", "no Redis servers given"),
        (
            "redis://127.0.0.1:7001,redis://127.0.0.1:7001",
            "listed more than once",
        ),
    ] {
        for args in [&["status", "r"][..], &["acquire", "r", "--ttl", "1s"]] {
            let line = rejects(servers, args, 64, needle);
            assert!(!line.contains("hunter2"), "{line}");
        }
    }
    // --servers overrides the environment.
    let line = rejects(
        "redis://127.0.0.1:6379",
        &["--servers", "nonsense", "status", "r"],
        64,
        "nonsense",
    );
    assert!(line.contains("invalid server URL"));
}

#[test]
fn a_ttl_that_leaves_no_validity_is_a_usage_error_even_with_servers_down() {
    rejects(
        &dead_url(),
        &["acquire", "r", "--ttl", "1ms"],
        64,
        "invalid TTL",
    );
    rejects(
        &dead_url(),
        &["run", "r", "--ttl", "2ms", "--", "true"],
        64,
        "invalid TTL",
    );
    rejects(
        &dead_url(),
        &["--node-timeout", "0s", "status", "r"],
        64,
        "node_timeout",
    );
}

#[test]
fn a_ttl_above_max_ttl_is_a_usage_error_naming_the_flag_to_raise() {
    // Refused before any server is contacted.
    let servers = dead_url();
    for args in [
        &["acquire", "r", "--ttl", "61s"][..],
        &["--max-ttl", "30s", "acquire", "r", "--ttl", "31s"],
        &["acquire", "r", "--ttl", "31s", "--max-ttl", "30s"],
        &["--max-ttl", "10s", "run", "r", "--", "true"],
        &["--max-ttl", "5s", "extend", "r", "v", "--ttl", "6s"],
        &["--max-ttl", "5s", "bench"],
        &["--max-ttl", "1s", "demo"],
    ] {
        let out = run(redlock(&servers).args(args));
        assert_eq!(out.code(), 64, "{args:?}: {out:#?}");
        out.one_line_error("--max-ttl");
        assert!(out.stdout.is_empty(), "{args:?}: {out:#?}");
    }
    let line = rejects(
        &servers,
        &["acquire", "r", "--ttl", "90s"],
        64,
        "raise --max-ttl",
    );
    assert_eq!(
        line,
        "redlock: error: --ttl 1m30s is longer than --max-ttl 1m: raise --max-ttl (or \
         REDLOCK_MAX_TTL) on every client of these servers, as it is also how long a restarted \
         node is quarantined"
    );
    // The environment sets it too, and the flag wins over it.
    let out = run(redlock(&servers)
        .env("REDLOCK_MAX_TTL", "10s")
        .args(["acquire", "r", "--ttl", "20s"]));
    out.expect_code(64);
    out.one_line_error("longer than --max-ttl 10.0s");
    let out = run(redlock(&servers).env("REDLOCK_MAX_TTL", "10s").args([
        "--max-ttl",
        "30s",
        "acquire",
        "r",
        "--ttl",
        "20s",
    ]));
    out.expect_code(69); // past the check: the servers are down
    // A max-ttl the library refuses is a usage error too.
    rejects(&servers, &["--max-ttl", "0s", "status", "r"], 64, "max_ttl");
    rejects(
        &servers,
        &["--max-ttl", "2y", "status", "r"],
        64,
        "unknown unit",
    );
}

#[test]
fn unreachable_servers_are_reported_promptly() {
    let servers = format!("{},{},{}", dead_url(), dead_url(), dead_url());
    let password = format!("redis://:hunter2@{}", &dead_url()["redis://".len()..]);
    for (servers, args, code, needle) in [
        (
            &servers,
            &["acquire", "r", "--ttl", "10s"][..],
            69,
            "servers unreachable",
        ),
        (
            &servers,
            &["acquire", "r", "--ttl", "10s", "--wait", "1h"],
            69,
            "servers unreachable",
        ),
        (
            &servers,
            &["run", "r", "--", "true"],
            69,
            "servers unreachable",
        ),
        (
            &servers,
            &["elect", "e", "--", "true"],
            69,
            "servers unreachable",
        ),
        (&servers, &["release", "r", "v"], 69, "could not confirm"),
        (
            &servers,
            &["extend", "r", "v", "--ttl", "10s"],
            69,
            "could not extend",
        ),
        (
            &servers,
            &["status", "r"],
            69,
            "only 0 of 3 servers answered",
        ),
        (
            &servers,
            &["bench", "--duration", "1s"],
            69,
            "servers unavailable",
        ),
        (
            &password,
            &["acquire", "r", "--ttl", "10s"],
            69,
            "unreachable",
        ),
    ] {
        let out = run(redlock(servers).args(args));
        assert_eq!(out.code(), code, "{args:?}: {out:#?}");
        let line = out.one_line_error(needle);
        assert!(!line.contains("hunter2"), "{line}");
        // Refused connections answer at once; the bound is for a loaded machine.
        assert!(
            out.elapsed.as_secs() < 15,
            "{args:?} took {:?}",
            out.elapsed
        );
    }
}

#[test]
fn a_password_the_server_refuses_is_reported_without_being_printed() {
    let cluster = cluster(1);
    let url = cluster.urls()[0].replace("redis://", "redis://:hunter2@");
    let out = run(redlock(&url).args(["acquire", "r", "--ttl", "10s"]));
    assert_ne!(out.code(), 0, "{out:#?}");
    let line = out.one_line_error("");
    assert!(!line.contains("hunter2"), "{line}");
}

#[test]
fn help_is_printed_with_examples_and_exit_statuses() {
    let servers = dead_url();
    for args in [
        &["--help"][..],
        &["acquire", "--help"],
        &["release", "--help"],
        &["extend", "--help"],
        &["status", "--help"],
        &["run", "--help"],
        &["nodes", "--help"],
        &["nodes", "start", "--help"],
        &["demo", "--help"],
        &["bench", "--help"],
    ] {
        let out = run(redlock(&servers).args(args));
        out.expect_code(0);
        assert!(out.stdout.contains("Examples:"), "{args:?}: {}", out.stdout);
        assert!(
            out.stdout.contains("Exit status"),
            "{args:?}: {}",
            out.stdout
        );
        assert!(out.stderr.is_empty());
    }
    // The environment's server list may hold a password: --help must not show it.
    let out = run(redlock("redis://:hunter2@127.0.0.1:1").arg("--help"));
    assert!(!out.stdout.contains("hunter2"), "{}", out.stdout);
}

/// `Duration::MAX` as the command line writes it.
const HUGE: &str = "18446744073709551615s";

#[test]
fn huge_durations_are_one_line_usage_errors_where_they_cannot_work() {
    // Refused before any server is contacted.
    let servers = dead_url();
    for (args, needle) in [
        (&["acquire", "r", "--ttl", HUGE][..], "--max-ttl"),
        (&["run", "r", "--ttl", HUGE, "--", "true"], "--max-ttl"),
        (&["extend", "r", "v", "--ttl", HUGE], "--max-ttl"),
        (&["bench", "--ttl", HUGE], "--max-ttl"),
        (&["--max-ttl", HUGE, "status", "r"], "max_ttl"),
        (&["--node-timeout", HUGE, "status", "r"], "node_timeout"),
        (
            &["--node-timeout", HUGE, "acquire", "r", "--ttl", "1s"],
            "node_timeout",
        ),
        (
            &["--node-timeout", "61s", "run", "r", "--", "true"],
            "longer than max_ttl (60s)",
        ),
        (
            &["bench", "--duration", HUGE],
            "longer than the longest run",
        ),
        (&["demo", "--duration", HUGE], "longer than the longest run"),
    ] {
        let out = run(redlock(&servers).args(args));
        assert_eq!(out.code(), 64, "{args:?}: {out:#?}");
        out.one_line_error(needle);
    }
}

#[test]
fn a_huge_wait_means_until_acquired() {
    // With the servers down, the first attempt's answer is final, however long the wait.
    let servers = format!("{},{},{}", dead_url(), dead_url(), dead_url());
    for args in [
        &["acquire", "r", "--ttl", "10s", "--wait", HUGE][..],
        &["run", "r", "--wait", HUGE, "--", "true"],
    ] {
        let out = run(redlock(&servers).args(args));
        assert_eq!(out.code(), 69, "{args:?}: {out:#?}");
        out.one_line_error("servers unreachable");
    }
    // A busy lock is waited for until it is freed (here: until it expires).
    let cluster = cluster(1);
    let servers = cluster.servers();
    run(redlock(&servers).args(["acquire", "busy", "--ttl", "2s"])).expect_code(0);
    for args in [
        &["acquire", "busy", "--ttl", "2s", "--wait", HUGE][..],
        &["run", "busy", "--ttl", "2s", "--wait", HUGE, "--", "true"],
    ] {
        let out = run(redlock(&servers).args(args));
        assert_eq!(out.code(), 0, "{args:?}: {out:#?}");
        assert_no_panic(&out.stderr);
    }
}

#[test]
fn a_wrong_password_never_appears_in_any_output_even_with_debug_logs() {
    let cluster = redquorum_nodes::Cluster::start(
        1,
        redquorum_nodes::NodeSpec::new()
            .persistence(redquorum_nodes::Persistence::AofAlways)
            .arg("--requirepass")
            .arg("right-pass-5521"),
    )
    .expect("start");
    let url = cluster.urls()[0].replace("redis://", "redis://:wrong-pass-7319@");
    for args in [
        &["acquire", "r", "--ttl", "10s", "--wait", "0s"][..],
        &["status", "r"],
        &["status", "r", "--json"],
        &["release", "r", "some-value"],
    ] {
        let out = run(redlock(&url).args(args).env("RUST_LOG", "trace"));
        assert_ne!(out.code(), 0, "{args:?}: {out:#?}");
        for text in [&out.stdout, &out.stderr] {
            assert!(!text.contains("wrong-pass-7319"), "{args:?}: {text}");
            assert!(!text.contains("right-pass"), "{args:?}: {text}");
        }
        assert_no_panic(&out.stderr);
    }
    let out = run(redlock(&url).args(["acquire", "r", "--ttl", "10s", "--wait", "0s"]));
    assert!(
        out.stderr.contains("WRONGPASS") || out.stderr.to_lowercase().contains("password"),
        "says the password was refused: {}",
        out.stderr
    );
}

#[test]
fn a_tls_ca_file_that_cannot_be_used_is_a_usage_error() {
    let servers = "rediss://127.0.0.1:1";
    let missing = rejects(
        servers,
        &["--tls-ca", "/nonexistent/ca.pem", "status", "r"],
        64,
        "--tls-ca",
    );
    assert!(missing.contains("/nonexistent/ca.pem"), "{missing}");
    let dir = tempfile::tempdir().expect("temp dir");
    let not_pem = dir.path().join("ca.pem");
    std::fs::write(&not_pem, "hello").expect("write");
    let path = not_pem.display().to_string();
    rejects(
        servers,
        &["--tls-ca", &path, "status", "r"],
        64,
        "tls_root_certificates",
    );
}
