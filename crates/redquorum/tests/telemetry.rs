//! The metrics, as an application sees them: a Prometheus exporter (`metrics-exporter-prometheus`)
//! serves what the library recorded, and after a known sequence of operations against three real
//! nodes every figure is what that sequence must produce.
//!
//! One test in this binary: the recorder is global to the process.

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use redquorum::{HoldOptions, LossReason, Retry};

const TTL: Duration = Duration::from_secs(10);

/// The exporter's page, read over plain HTTP/1.0 (no chunked body to undo).
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the exporter");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .expect("send the request");
    let mut page = String::new();
    stream.read_to_string(&mut page).expect("read the page");
    let (head, body) = page.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    body.to_owned()
}

/// Every sample of the page: `name{labels}` → value, labels in the exporter's order.
fn samples(page: &str) -> BTreeMap<String, f64> {
    page.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .collect()
}

/// The value of the one series named `name` whose labels include every `label="value"` of
/// `labels`; 0 when there is none (a counter never incremented is not shown).
fn value(samples: &BTreeMap<String, f64>, name: &str, labels: &[(&str, &str)]) -> f64 {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|(series, _)| {
            let (series_name, rest) = series.split_once('{').unwrap_or((series.as_str(), ""));
            series_name == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|(_, v)| *v)
        .collect();
    assert!(
        matching.len() <= 1,
        "{name} {labels:?} matches {matching:?}"
    );
    matching.first().copied().unwrap_or(0.0)
}

/// Waits (20 s at most) for the waiters gauge to read `count`.
async fn waiters_reach(addr: SocketAddr, count: f64) {
    let give_up = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let page = tokio::task::spawn_blocking(move || scrape(addr))
            .await
            .expect("scrape");
        let now = value(&samples(&page), "redquorum_waiters", &[]);
        if now == count {
            return;
        }
        assert!(
            std::time::Instant::now() < give_up,
            "redquorum_waiters stayed at {now}, not {count}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_known_sequence_of_operations_shows_in_the_prometheus_figures() {
    let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    // Installed outside any runtime: the exporter serves from a thread of its own.
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .expect("install the Prometheus recorder");

    let mut cluster = common::cluster(3);
    let nodes: Vec<String> = cluster
        .iter()
        .map(|n| format!("127.0.0.1:{}", n.port()))
        .collect();
    // Counters that differ on every node: whichever quorum answers first disagrees, so each won
    // acquisition takes its fencing round (in the steady state, nodes agree and it takes none).
    for (i, node) in cluster.iter().enumerate() {
        for resource in ["invoice:1", "invoice:3"] {
            let counter = (4_000_000_000_000_000 + 10 * i).to_string();
            node.cli(&["SET", &format!("redlock-fence:{resource}"), &counter])
                .expect("seed a counter");
        }
    }
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let manager = common::connected(&cluster).await;

        // Two won acquisitions, each asked for its token (two fencing rounds each: the
        // advance, and the store, since the counters disagree), one extension.
        let mut lock = manager.acquire("invoice:1", TTL).await.expect("free");
        lock.fence().await.expect("a token");
        lock.extend(TTL).await.expect("still held");
        // Busy twice: once without waiting, once after waiting for a retry.
        let busy = manager
            .try_acquire("invoice:1", TTL)
            .await
            .expect_err("held");
        assert!(busy.is_busy(), "{busy}");
        let twice = Retry::new().attempts(2).delay(Duration::from_millis(20));
        let busy = manager
            .acquire_with("invoice:1", TTL, &twice)
            .await
            .expect_err("held");
        assert!(busy.is_busy(), "{busy}");
        lock.release().await;
        // Refused before anything is sent: a TTL with no validity.
        let invalid = manager
            .acquire("invoice:2", Duration::from_millis(1))
            .await
            .expect_err("no validity");
        assert!(invalid.cause().is_none(), "{invalid}");
        // And an empty set.
        let empty = manager
            .acquire_many(&[], TTL)
            .await
            .expect_err("nothing to lock");
        assert!(empty.cause().is_none(), "{empty}");
        // A guard allowed no extension at all gives its lock up when the first one is due.
        let mut guard = manager
            .acquire("invoice:3", Duration::from_secs(2))
            .await
            .expect("free")
            .keep_alive_with(Duration::from_secs(2), HoldOptions::new().max_extensions(0));
        guard.fence().await.expect("a token");
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("the limit is reached");
        assert!(matches!(
            guard.loss_reason(),
            Some(LossReason::LimitReached(_))
        ));
        drop(guard.release().await);
    });

    let figures = samples(&scrape(addr));
    let acquisitions = |outcome| {
        value(
            &figures,
            "redquorum_acquisitions_total",
            &[("outcome", outcome)],
        )
    };
    assert_eq!(acquisitions("won"), 2.0, "{figures:#?}");
    assert_eq!(acquisitions("busy"), 2.0, "{figures:#?}");
    assert_eq!(acquisitions("invalid"), 2.0, "{figures:#?}");
    assert_eq!(acquisitions("unreachable"), 0.0, "{figures:#?}");
    assert_eq!(
        value(
            &figures,
            "redquorum_acquire_seconds_count",
            &[("outcome", "won")]
        ),
        2.0
    );
    assert_eq!(
        value(
            &figures,
            "redquorum_acquire_seconds_count",
            &[("outcome", "failed")]
        ),
        4.0
    );
    // Fencing is on by default, and the seeded counters disagree: two fencing rounds per token
    // asked for (its advance, then its store).
    assert_eq!(
        value(
            &figures,
            "redquorum_round_seconds_count",
            &[("request", "fence")]
        ),
        4.0
    );
    // A busy attempt is one round each: two won, one for try_acquire, two for acquire_with.
    assert_eq!(
        value(
            &figures,
            "redquorum_round_seconds_count",
            &[("request", "acquire")]
        ),
        5.0
    );
    assert_eq!(
        value(
            &figures,
            "redquorum_extensions_total",
            &[("outcome", "extended")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &figures,
            "redquorum_locks_lost_total",
            &[("reason", "limit_reached")]
        ),
        1.0
    );
    // The retry waited once, and nobody waits now.
    assert!(
        figures.keys().any(|s| s.starts_with("redquorum_waiters")),
        "{figures:#?}"
    );
    assert_eq!(value(&figures, "redquorum_waiters", &[]), 0.0);
    for node in &nodes {
        let answered = value(
            &figures,
            "redquorum_node_request_seconds_count",
            &[("node", node), ("request", "acquire")],
        );
        // A round that is not won waits for every reply: each node answered the three busy
        // attempts at least (a won round may leave a node's reply unread).
        assert!(answered >= 3.0, "{node}: {answered}");
        assert_eq!(
            value(&figures, "redquorum_node_quarantined", &[("node", node)]),
            0.0
        );
        assert_eq!(
            value(&figures, "redquorum_node_errors_total", &[("node", node)]),
            0.0,
            "{node}"
        );
    }

    // Every acquisition that waits is counted while it waits, a newcomer queued behind its
    // manager's waiters before its first attempt (`waiting` invariant 13) as well as a waiter
    // between attempts.
    runtime.block_on(async {
        let manager = common::connected(&cluster).await;
        // Held for longer than the test, however slow the machine: its expiry would serve the
        // first waiter.
        let held_for = Duration::from_secs(50);
        let lock = manager.acquire("invoice:5", held_for).await.expect("free");
        // Retries 1–2 minutes apart: neither waiter polls, and the newcomer's deferral (a
        // drawn retry delay) outlasts the test.
        let patient = Retry::forever().delay(Duration::from_secs(120));
        let waiter = |manager: redquorum::Redlock, retry: Retry| {
            tokio::spawn(async move { manager.acquire_with("invoice:5", TTL, &retry).await })
        };
        let first = waiter(manager.clone(), patient.clone());
        waiters_reach(addr, 1.0).await;
        let sets = || -> u64 { cluster.iter().map(|node| common::calls(node, "set")).sum() };
        let before = sets();
        let newcomer = waiter(manager.clone(), patient);
        waiters_reach(addr, 2.0).await;
        // Counted while deferred: it has made no attempt yet.
        assert_eq!(sets(), before, "the newcomer attempted instead of queueing");
        first.abort();
        newcomer.abort();
        waiters_reach(addr, 0.0).await;
        lock.release().await;
    });

    // A node that is gone shows as errors of that node, and only that node.
    cluster.node(2).kill().expect("kill node 2");
    runtime.block_on(async {
        // Connects on first use: node 2 is unreachable then.
        let manager = common::manager(&cluster);
        let lock = manager
            .acquire("invoice:4", TTL)
            .await
            .expect("2 of 3 nodes");
        lock.release().await;
    });
    let figures = samples(&scrape(addr));
    let errors = |node: &str| {
        value(
            &figures,
            "redquorum_node_errors_total",
            &[("node", node), ("reply", "unreachable")],
        ) + value(
            &figures,
            "redquorum_node_errors_total",
            &[("node", node), ("reply", "timeout")],
        )
    };
    assert!(errors(&nodes[2]) >= 1.0, "{figures:#?}");
    assert_eq!(errors(&nodes[0]) + errors(&nodes[1]), 0.0, "{figures:#?}");
    // No label names a resource unless asked (`Builder::metrics_resource_label`).
    assert!(
        figures.keys().all(|s| !s.contains("invoice")),
        "{figures:#?}"
    );
}
