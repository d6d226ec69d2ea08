//! `redlock demo`: it runs, kills a node half-way, and ends with a verdict that holds.

mod common;

use common::{dead_url, redlock, run};

#[test]
fn a_short_demo_ends_with_a_verdict_that_holds() {
    let out = run(redlock(&dead_url()).args(["demo", "--duration", "5s"]));
    out.expect_code(0);
    common::assert_no_panic(&out.stderr);
    let verdict = out
        .stdout
        .lines()
        .find(|l| l.starts_with("verdict: "))
        .unwrap_or_else(|| panic!("no verdict line: {out:#?}"));
    assert!(verdict.starts_with("verdict: OK: counter "), "{verdict}");
    assert!(verdict.contains("no two holders overlapped"), "{verdict}");
    assert!(out.stdout.contains("killed node"), "{out:#?}");
}

#[test]
fn ctrl_c_stops_the_demo_and_its_nodes() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let started = Instant::now();
    let mut child = redlock(&dead_url())
        .args(["demo", "--duration", "1m"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut ports = Vec::new();
    let mut line = String::new();
    while ports.is_empty() && stdout.read_line(&mut line).unwrap() > 0 {
        if let Some(list) = line.trim().strip_prefix("nodes: ") {
            ports = list
                .split(", ")
                .map(|url| url.rsplit(':').next().unwrap().parse::<u16>().unwrap())
                .collect();
        }
        line.clear();
    }
    assert_eq!(ports.len(), 5, "no node list printed");
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest}");
    assert!(rest.contains("interrupted"), "{rest}");
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "Ctrl-C was not acted on"
    );
    for port in ports {
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
            "node on port {port} still running"
        );
    }
}
