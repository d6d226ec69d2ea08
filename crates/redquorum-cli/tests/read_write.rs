//! `run --shared` and `run --exclusive`: readers run together, a writer alone.

mod common;

use std::fs;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{cluster, finish, redlock, run};

#[test]
fn shared_runs_overlap_and_exclusive_ones_run_alone() {
    let cluster = cluster(3);
    let servers = cluster.servers();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    // The readers wait for each other inside the lock (bounded: 20 s), so they are together
    // however slowly their processes start; the writers are started once all three are in, and
    // come while they still hold it.
    let section = |kind: &str| {
        let log = log.display();
        let hold = if kind == "shared" {
            format!(
                "n=0; while [ \"$(grep -c 'enter shared' '{log}')\" -lt 3 ] && [ $n -lt 200 ]; \
                 do sleep 0.1; n=$((n+1)); done; sleep 1"
            )
        } else {
            "sleep 0.3".to_owned()
        };
        format!(
            "echo \"enter {kind} $(date +%s%N)\" >> '{log}'; {hold}; \
             echo \"exit {kind} $(date +%s%N)\" >> '{log}'"
        )
    };
    let started = Instant::now();
    let spawn = |flag: &str| {
        let kind = flag.trim_start_matches("--");
        redlock(&servers)
            .args(["run", flag, "config", "--ttl", "5s", "--"])
            .args(["sh", "-c", &section(kind)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut children: Vec<_> = (0..3).map(|_| spawn("--shared")).collect();
    let readers_in = common::eventually(Duration::from_secs(20), || {
        fs::read_to_string(&log).is_ok_and(|text| text.matches("enter shared").count() == 3)
    });
    assert!(readers_in, "three readers hold the lock together");
    children.extend((0..2).map(|_| spawn("--exclusive")));
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
    assert_eq!(most_readers, 3, "readers ran together:\n{text}");
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
    // The readers hold until the test is done looking (bounded: 30 s).
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let hold = format!(
        "n=0; while [ ! -e '{}' ] && [ $n -lt 300 ]; do sleep 0.1; n=$((n+1)); done",
        done.display()
    );
    let readers: Vec<_> = (0..2)
        .map(|_| {
            redlock(&servers)
                .args(["run", "--shared", "doc", "--", "sh", "-c", &hold])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let both_in = common::eventually(Duration::from_secs(15), || {
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
    fs::write(&done, "").unwrap();
    for mut reader in readers {
        assert!(reader.wait().unwrap().success());
    }
}
