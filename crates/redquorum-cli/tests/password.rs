//! A password that never needs the command line: `--password-file` and `$REDLOCK_PASSWORD`,
//! against real servers with `requirepass`, for every URL without a password of its own.

mod common;

use common::{assert_no_panic, cluster, redlock, run};
use redquorum_nodes::{Cluster, NodeSpec, Persistence};

/// `@`, `:` and `/` would end a URL's userinfo, `%41` would be decoded to `A`, and `+` to a
/// space in a query: the password must reach the server exactly as written.
const PASSWORD: &str = "p@ss:w/rd%41+x";

/// `PASSWORD` as a URL's userinfo carries it.
const ENCODED: &str = "p%40ss%3Aw%2Frd%2541%2Bx";

/// One node that refuses every command until `AUTH PASSWORD`.
fn protected() -> Cluster {
    Cluster::start(
        1,
        NodeSpec::new()
            .persistence(Persistence::AofAlways)
            .arg("--requirepass")
            .arg(PASSWORD),
    )
    .expect("start redis-server")
}

/// A file holding `content`, in a directory that lives as long as the returned guard.
fn file(content: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("password");
    std::fs::write(&path, content).expect("write the password file");
    let path = path.to_str().expect("UTF-8 path").to_owned();
    (dir, path)
}

/// No output shows the password, as written or as a URL carries it.
#[track_caller]
fn never_shown(out: &common::Output, secrets: &[&str]) {
    for text in [&out.stdout, &out.stderr] {
        for secret in secrets {
            assert!(!text.contains(secret), "{secret:?} shown: {out:#?}");
        }
    }
    assert_no_panic(&out.stderr);
}

#[test]
fn a_password_file_and_redlock_password_authenticate_every_command() {
    let cluster = protected();
    let servers = cluster.servers();
    // Without a password the server refuses: what follows is the password's doing.
    let out = run(redlock(&servers).args(["acquire", "r", "--ttl", "10s"]));
    assert_ne!(out.code(), 0, "{out:#?}");

    // --password-file, with the trailing newline an editor leaves.
    let (_dir, path) = file(&format!("{PASSWORD}\n"));
    let out =
        run(redlock(&servers).args(["--password-file", &path, "acquire", "r", "--ttl", "30s"]));
    out.expect_code(0);
    let value = out.stdout.trim().to_owned();
    let out = run(redlock(&servers).args(["status", "r", "--json", "--password-file", &path]));
    out.expect_code(0);
    assert!(out.stdout.contains(&value), "{out:#?}");
    never_shown(&out, &[PASSWORD, ENCODED]);
    // The lock is held: busy (75), which only an authenticated client can tell.
    let out = run(redlock(&servers)
        .env("REDLOCK_PASSWORD", PASSWORD)
        .args(["acquire", "r", "--ttl", "10s"]));
    out.expect_code(75);
    out.one_line_error("busy");

    // $REDLOCK_PASSWORD, for a whole run and for nodes mark (which takes its own URLs).
    let with_env = |args: &[&str]| {
        let mut cmd = redlock(&servers);
        cmd.env("REDLOCK_PASSWORD", PASSWORD).args(args);
        run(&mut cmd)
    };
    with_env(&["release", "r", &value]).expect_code(0);
    with_env(&["run", "r", "--no-wait", "--", "true"]).expect_code(0);
    let out = with_env(&["nodes", "mark", "--brand-new", &servers]);
    out.expect_code(0);
    never_shown(&out, &[PASSWORD, ENCODED]);
    // --password-file wins over the environment.
    let (_wrong_dir, wrong) = file("wrong-pass-4417\n");
    let out = run(redlock(&servers)
        .env("REDLOCK_PASSWORD", "wrong-pass-4418")
        .args(["--password-file", &path, "status", "r"]));
    out.expect_code(0);
    let out = run(redlock(&servers).env("REDLOCK_PASSWORD", PASSWORD).args([
        "--password-file",
        &wrong,
        "status",
        "r",
    ]));
    assert_ne!(out.code(), 0, "{out:#?}");

    // A URL's own password is its own: neither the file nor the environment replaces it.
    let own = servers.replace("redis://", &format!("redis://:{ENCODED}@"));
    let out = run(redlock(&own)
        .env("REDLOCK_PASSWORD", "wrong-pass-4418")
        .args(["--password-file", &wrong, "acquire", "own", "--ttl", "10s"]));
    out.expect_code(0);
    never_shown(&out, &[PASSWORD, ENCODED, "wrong-pass-441"]);

    // --help names both ways, and shows no value of the environment's.
    let out = run(redlock(&servers)
        .env("REDLOCK_PASSWORD", PASSWORD)
        .arg("--help"));
    out.expect_code(0);
    assert!(
        out.stdout.contains("--password-file <PATH>"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("$REDLOCK_PASSWORD"), "{}", out.stdout);
    never_shown(&out, &[PASSWORD, ENCODED]);
}

#[test]
fn a_wrong_password_fails_without_being_shown() {
    let cluster = protected();
    let servers = cluster.servers();
    let wrong = "wr@ng:pass/7319";
    let wrong_encoded = "wr%40ng%3Apass%2F7319";
    let (_dir, path) = file(wrong);
    for args in [
        &["acquire", "r", "--ttl", "10s"][..],
        &["status", "r", "--json"],
        &["release", "r", "some-value"],
    ] {
        for out in [
            run(redlock(&servers)
                .arg("--password-file")
                .arg(&path)
                .args(args)),
            run(redlock(&servers)
                .env("REDLOCK_PASSWORD", wrong)
                .env("REDLOCK_LOG", "trace")
                .args(args)),
        ] {
            // Nothing was decided: the server answered no command (69).
            assert_eq!(out.code(), 69, "{args:?}: {out:#?}");
            never_shown(&out, &[wrong, wrong_encoded, PASSWORD, ENCODED]);
        }
    }
    let out = run(redlock(&servers)
        .env("REDLOCK_PASSWORD", wrong)
        .args(["acquire", "r", "--ttl", "10s"]));
    let line = out.one_line_error("not acquired, servers unreachable");
    assert!(
        line.contains("WRONGPASS") || line.to_lowercase().contains("password"),
        "says the password was refused: {line}"
    );
}

/// A user from the URL is kept: `redis://alice@host` authenticates as alice with the password,
/// not as the default user.
#[test]
fn the_urls_user_is_kept() {
    let cluster = cluster(1);
    let node = cluster.iter().next().expect("a node");
    node.cli(&[
        "ACL",
        "SETUSER",
        "alice",
        "on",
        &format!(">{PASSWORD}"),
        "~*",
        "&*",
        "+@all",
    ])
    .expect("ACL SETUSER");
    // Last: from here on the default user needs another password (and the node's cli with it).
    node.cli(&["CONFIG", "SET", "requirepass", "default-pass-2291"])
        .expect("CONFIG SET requirepass");
    let as_alice = node.url().replace("redis://", "redis://alice@");
    let out = run(redlock(&as_alice)
        .env("REDLOCK_PASSWORD", PASSWORD)
        .args(["acquire", "r", "--ttl", "10s"]));
    out.expect_code(0);
    // Without the user, the same password is the default user's, and wrong.
    let out = run(redlock(&node.url())
        .env("REDLOCK_PASSWORD", PASSWORD)
        .args(["status", "r"]));
    out.expect_code(69);
    never_shown(&out, &[PASSWORD, ENCODED]);
}

#[test]
fn a_password_file_that_cannot_be_used_is_a_usage_error_naming_the_path() {
    // No server is contacted: the file is read first.
    let servers = common::dead_url();
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("missing");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").expect("write");
    let not_utf8 = dir.path().join("latin1");
    std::fs::write(&not_utf8, b"s\xe9cret-5150").expect("write");
    for (path, needle) in [
        (&missing, "cannot read it"),
        (&empty, "it is empty"),
        (&not_utf8, "cannot read it"),
        (&dir.path().to_owned(), "cannot read it"),
    ] {
        let path = path.to_str().expect("UTF-8 path");
        for args in [&["status", "r"][..], &["nodes", "mark"]] {
            let out = run(redlock(&servers).args(["--password-file", path]).args(args));
            assert_eq!(out.code(), 64, "{path}: {out:#?}");
            let line = out.one_line_error(needle);
            assert!(line.contains(&format!("--password-file {path}:")), "{line}");
            assert!(!line.contains("cret-5150"), "{line}");
        }
    }
}
