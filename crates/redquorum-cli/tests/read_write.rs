//! `run --shared` and `run --exclusive`: readers run together, a writer alone.

mod common;

use std::fs;
use std::process::Stdio;
use std::time::Instant;

use common::{cluster, finish, redlock, run};

#[test]
fn shared_runs_overlap_and_exclusive_ones_run_alone() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // Readers hold long enough to be together however slowly their processes start; the
    // writers come a moment later, while the readers hold the lock.
    let section = |kind: &str| {
        let hold = if kind == "shared" { "1" } else { "0.3" };
        format!(
            "echo \"enter {kind} $(date +%s%N)\" >> '{0}'; sleep {hold}; \
             echo \"exit {kind} $(date +%s%N)\" >> '{0}'",
            log.display()
        )
    };
    let started = Instant::now();
    let kinds = [
        "--shared",
        "--shared",
        "--shared",
        "--exclusive",
        "--exclusive",
    ];
    let children: Vec<_> = kinds
        .iter()
        .map(|flag| {
            let kind = flag.trim_start_matches("--");
            if kind == "exclusive" {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            redlock(&servers)
                .args(["run", flag, "config", "--ttl", "5s", "--"])
                .args(["sh", "-c", &section(kind)])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        finish(child, started).expect_code(0);
    }
    let text = fs::read_to_string(&log).unwrap();
    let mut events: Vec<(u128, &str, &str)> = text
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(parts.len(), 3, "{text}");
            (parts[2].parse().unwrap(), parts[0], parts[1])
        })
        .collect();
    assert_eq!(events.len(), 10, "every run ran once:\n{text}");
    events.sort();
    let (mut readers, mut writers, mut most_readers) = (0, 0, 0);
    for (_, what, kind) in &events {
        match (*what, *kind) {
            ("enter", "shared") => {
                assert_eq!(writers, 0, "a reader with a writer:\n{text}");
                readers += 1;
                most_readers = most_readers.max(readers);
            }
            ("enter", _) => {
                assert_eq!((readers, writers), (0, 0), "a writer with company:\n{text}");
                writers += 1;
            }
            ("exit", "shared") => readers -= 1,
            _ => writers -= 1,
        }
    }
    assert!(most_readers >= 2, "readers ran together:\n{text}");
}

#[test]
fn shared_and_exclusive_are_for_one_read_write_lock() {
    run(redlock("redis://127.0.0.1:1").args(["run", "--shared", "a", "b", "--", "true"]))
        .expect_code(64)
        .one_line_error("--shared takes one RESOURCE");
    run(redlock("redis://127.0.0.1:1").args(["run", "--shared", "--exclusive", "a", "--", "true"]))
        .expect_code(64)
        .one_line_error("cannot be used with");
    run(redlock("redis://127.0.0.1:1").args([
        "run",
        "--permits",
        "2",
        "--shared",
        "a",
        "--",
        "true",
    ]))
    .expect_code(64)
    .one_line_error("cannot be used with");
}

#[test]
fn status_shows_a_read_write_locks_readers() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            redlock(&servers)
                .args(["run", "--shared", "doc", "--", "sleep", "3"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let both_in = common::eventually(std::time::Duration::from_secs(15), || {
        cluster
            .iter()
            .all(|node| node.cli(&["ZCARD", "doc"]).unwrap() == "2")
    });
    assert!(both_in, "two readers hold the lock");
    let out = run(redlock(&servers).args(["status", "doc"]));
    out.expect_code(0);
    assert!(out.stdout.contains("held by 2 readers"), "{out:#?}");
    assert!(
        out.stdout
            .contains("held by readers on 3/3 nodes (quorum 2)"),
        "{out:#?}"
    );
    let out = run(redlock(&servers).args(["status", "doc", "--json"]));
    let json: serde_json::Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(json["nodes"][0]["state"], "readers", "{json}");
    assert_eq!(json["nodes"][0]["readers"], 2, "{json}");
    for mut reader in readers {
        assert!(reader.wait().unwrap().success());
    }
}
