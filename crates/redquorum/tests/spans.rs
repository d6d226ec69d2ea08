//! The acquisition's span as `tracing-subscriber`'s formatter prints it (the CLI's `-vv`): one
//! line per attempt that stays one line, however many attempts there are. Recorded at every
//! attempt, the `attempts` field was appended to the span again each time, and each line grew
//! without bound ("attempts=1 attempts=2 … attempts=15").
//!
//! One test in this binary: the subscriber is global to the process.

mod common;

use std::time::Duration;

use redquorum::Retry;
use tracing_subscriber::fmt::format::FmtSpan;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_is_one_line_and_the_span_counts_attempts_once() {
    let captured = common::Captured::default();
    tracing_subscriber::fmt()
        .with_env_filter("redquorum=trace")
        .with_span_events(FmtSpan::CLOSE)
        .with_writer(captured.clone())
        .with_ansi(false)
        .init();
    let mut cluster = common::cluster(1);
    cluster
        .node(0)
        .cli(&["SET", "busy", "someone", "PX", "20000"])
        .unwrap();
    let manager = common::connected(&cluster).await;
    let retry = Retry::new().attempts(6).delay(Duration::from_millis(10));
    let err = manager
        .acquire_with("busy", Duration::from_secs(5), &retry)
        .await
        .expect_err("held by someone else");
    assert!(err.is_busy(), "{err}");

    let text = captured.text();
    let attempts: Vec<&str> = text.lines().filter(|l| l.contains("attempt n=")).collect();
    assert_eq!(attempts.len(), 6, "{text}");
    for line in text.lines() {
        assert!(
            line.matches("attempts=").count() <= 1,
            "a field repeated on one line: {line}"
        );
    }
    let first = attempts[0].len();
    assert!(
        attempts.iter().all(|l| l.len() <= first + 2),
        "attempt lines grow: {attempts:#?}"
    );
    let closed: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("acquire{") && l.contains("close"))
        .collect();
    assert!(
        closed.iter().any(|l| l.contains("attempts=6")),
        "the span closes with the number of attempts: {closed:#?}"
    );
}
