//! What the library tells the application about itself: metrics through the [`metrics`] facade
//! (the application installs a recorder: Prometheus, StatsD, OpenTelemetry, ...) and [`tracing`]
//! spans and events. Every metric name and label value is written here and nowhere else;
//! `docs/library.md`'s *Metrics and tracing* lists them in one table.
//!
//! Spans (one per acquisition, extension and release), round events and attempt events are at
//! `debug` and `trace`, so a default subscriber at `info` stays quiet; a lost
//! lock and a node that lost its data are `warn` events where they happen.
//!
//! # Invariants
//! 1. **Bounded labels.** A label value is one of the fixed words below, or a node's address
//!    (one per configured node), or a resource name only when the application opted in with
//!    [`Builder::metrics_resource_label`](crate::Builder::metrics_resource_label).
//! 2. **Nothing allocated per lock without a recorder.** Keys with fixed labels are statics, and
//!    each node's keys are built once with the node ([`NodeMetrics`]); the recorder is looked
//!    up at each use, so one installed after the manager was built is used from then on.
//! 3. **No clock arithmetic nobody records.** A duration is handed to the recorder as its two
//!    instants ([`Between`]), worked out only when a histogram takes it: without a recorder,
//!    neither the subtraction nor (for one that ends now) the clock read happens.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use metrics::{IntoF64, Key, Label, Level, Metadata, with_recorder};
use tracing::Span;

use crate::base::error::{Error, LossReason};
use crate::base::resources::Resources;
use crate::protocol::cause::Cause;
use crate::protocol::quarantine::Quarantine;
use crate::protocol::reply::Reply;
use crate::protocol::validity;

/// Acquisitions that finished, by `outcome` (the acquire call returned; a dropped future counts
/// nothing).
pub(crate) const ACQUISITIONS: &str = "redquorum_acquisitions_total";
/// Seconds from the acquire call to its outcome, waiting included, by `outcome` (`won`,
/// `failed`).
pub(crate) const ACQUIRE_SECONDS: &str = "redquorum_acquire_seconds";
/// Seconds one round took (all nodes at once, until decided), by `request`.
pub(crate) const ROUND_SECONDS: &str = "redquorum_round_seconds";
/// Seconds from a round's start to one node's answer, by `node` and `request`.
pub(crate) const NODE_REQUEST_SECONDS: &str = "redquorum_node_request_seconds";
/// Requests a node did not answer usefully, by `node` and `reply` (`timeout`, `unreachable`,
/// `error`).
pub(crate) const NODE_ERRORS: &str = "redquorum_node_errors_total";
/// 1 while a node's grants are not votes (restart quarantine), as of its last answer; by `node`.
pub(crate) const NODE_QUARANTINED: &str = "redquorum_node_quarantined";
/// Extension rounds, by `outcome` (`extended`, `failed`).
pub(crate) const EXTENSIONS: &str = "redquorum_extensions_total";
/// Locks a guard gave up, by `reason`.
pub(crate) const LOCKS_LOST: &str = "redquorum_locks_lost_total";
/// Acquisitions waiting for their next attempt now.
pub(crate) const WAITERS: &str = "redquorum_waiters";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// A key with one fixed label, built at compile time (invariant 2).
macro_rules! key {
    ($name:expr) => {{
        static KEY: Key = Key::from_static_name($name);
        &KEY
    }};
    ($name:expr, $label:literal => $value:literal) => {{
        static LABELS: [Label; 1] = [Label::from_static_parts($label, $value)];
        static KEY: Key = Key::from_static_parts($name, &LABELS);
        &KEY
    }};
}

fn count(key: &Key) {
    with_recorder(|r| r.register_counter(key, &METADATA).increment(1));
}

fn observe(key: &Key, value: impl IntoF64) {
    with_recorder(|r| r.register_histogram(key, &METADATA).record(value));
}

/// The time from one instant to another (`None`: now), in seconds when a recorder takes it
/// (invariant 3).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Between(pub(crate) Instant, pub(crate) Option<Instant>);

impl IntoF64 for Between {
    fn into_f64(self) -> f64 {
        let end = self.1.unwrap_or_else(Instant::now);
        end.saturating_duration_since(self.0).as_secs_f64()
    }
}

/// One acquisition as the application sees it: its span, and its outcome and wait recorded when
/// it returns.
#[derive(Debug)]
pub(crate) struct Acquisition {
    span: Span,
    started: Instant,
    /// The resource label, when the application opted in (invariant 1).
    resource: Option<String>,
    /// Attempts so far: recorded on the span once, when the acquisition ends. Recorded at each
    /// attempt, `tracing-subscriber`'s formatter appends the field again every time, and each
    /// line of the span grew without bound at `-vv` ("attempts=1 attempts=2 …").
    attempts: AtomicU32,
}

impl Acquisition {
    pub(crate) fn start(resources: &Resources, ttl: Duration, resource_label: bool) -> Self {
        Self {
            span: tracing::debug_span!(
                "acquire",
                resource = %resources,
                ttl_ms = validity::ttl_millis(ttl),
                attempts = tracing::field::Empty,
            ),
            started: Instant::now(),
            resource: resource_label.then(|| resources.to_string()),
            attempts: AtomicU32::new(0),
        }
    }

    /// Counts an attempt; returns its number.
    pub(crate) fn attempt(&self) -> u32 {
        self.attempts.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The acquisition's span, which learns how many attempts it took when it ends.
    pub(crate) fn span(&self) -> &Span {
        &self.span
    }

    /// When the acquire call began: its retry schedule counts from then too.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// Records the acquisition's outcome (borrowed: a lock is large, and moving it costs).
    pub(crate) fn finish(self, result: Result<(), &Error>) {
        if !self.span.is_disabled() {
            self.span
                .record("attempts", self.attempts.load(Ordering::Relaxed));
        }
        let waited = Between(self.started, None);
        acquired(result, waited, self.resource.as_deref());
    }
}

/// Records an acquisition refused before it began (an empty set), and returns its error.
pub(crate) fn refused(error: Error) -> Error {
    acquired(Err(&error), Duration::ZERO, None);
    error
}

/// The `outcome` of a finished acquisition, and its key without a resource label.
fn outcome(result: Result<(), &Error>) -> (&'static str, &'static Key) {
    let Err(e) = result else {
        return ("won", key!(ACQUISITIONS, "outcome" => "won"));
    };
    match e.cause() {
        Some(Cause::Busy) => ("busy", key!(ACQUISITIONS, "outcome" => "busy")),
        Some(Cause::Unavailable) => (
            "unreachable",
            key!(ACQUISITIONS, "outcome" => "unreachable"),
        ),
        Some(Cause::Quarantined { .. }) => (
            "quarantined",
            key!(ACQUISITIONS, "outcome" => "quarantined"),
        ),
        Some(Cause::TooSlow) => ("too_slow", key!(ACQUISITIONS, "outcome" => "too_slow")),
        Some(Cause::WrongType { .. }) => {
            ("wrong_type", key!(ACQUISITIONS, "outcome" => "wrong_type"))
        }
        // Refused before anything was sent (a TTL that leaves no validity).
        // (Release causes never end an acquisition.)
        Some(Cause::NotHeld | Cause::LeftToDelay) | None => {
            ("invalid", key!(ACQUISITIONS, "outcome" => "invalid"))
        }
    }
}

/// Records a finished acquisition, which took `waited`; `resource` labels it only when the
/// application opted in (invariant 1).
fn acquired(result: Result<(), &Error>, waited: impl IntoF64, resource: Option<&str>) {
    let (outcome, key) = outcome(result);
    let (won, waited_key) = match result {
        Ok(()) => ("won", key!(ACQUIRE_SECONDS, "outcome" => "won")),
        Err(_) => ("failed", key!(ACQUIRE_SECONDS, "outcome" => "failed")),
    };
    match resource {
        // One recorder lookup for both.
        None => with_recorder(|r| {
            r.register_counter(key, &METADATA).increment(1);
            r.register_histogram(waited_key, &METADATA).record(waited);
        }),
        Some(resource) => {
            let labels = |outcome: &'static str| {
                vec![
                    Label::new("outcome", outcome),
                    Label::new("resource", resource.to_owned()),
                ]
            };
            count(&Key::from_parts(ACQUISITIONS, labels(outcome)));
            observe(&Key::from_parts(ACQUIRE_SECONDS, labels(won)), waited);
        }
    }
}

/// What a request does, as metrics and spans name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RequestKind {
    Acquire,
    Fence,
    Extend,
    Release,
    Connect,
}

impl RequestKind {
    /// The `request` label value.
    pub(crate) fn name(self) -> &'static str {
        REQUESTS[self as usize]
    }
}

/// The `request` label values, in [`RequestKind`]'s order.
const REQUESTS: [&str; 5] = ["acquire", "fence", "extend", "release", "connect"];

/// Records one round's duration, from `start` to now.
pub(crate) fn round(kind: RequestKind, start: Instant) {
    observe(
        match kind {
            RequestKind::Acquire => key!(ROUND_SECONDS, "request" => "acquire"),
            RequestKind::Fence => key!(ROUND_SECONDS, "request" => "fence"),
            RequestKind::Extend => key!(ROUND_SECONDS, "request" => "extend"),
            RequestKind::Release => key!(ROUND_SECONDS, "request" => "release"),
            RequestKind::Connect => key!(ROUND_SECONDS, "request" => "connect"),
        },
        Between(start, None),
    );
}

/// Records an extension round's outcome.
pub(crate) fn extended(won: bool) {
    count(if won {
        key!(EXTENSIONS, "outcome" => "extended")
    } else {
        key!(EXTENSIONS, "outcome" => "failed")
    });
}

/// Records a lock a guard gave up.
pub(crate) fn lost(reason: &LossReason) {
    count(match reason {
        LossReason::ExtensionFailed(_) => key!(LOCKS_LOST, "reason" => "extension_failed"),
        LossReason::ValidityRanOut => key!(LOCKS_LOST, "reason" => "validity_ran_out"),
        LossReason::LimitReached(_) => key!(LOCKS_LOST, "reason" => "limit_reached"),
        LossReason::Invalid(_) => key!(LOCKS_LOST, "reason" => "invalid"),
    });
}

/// One acquisition waiting for its next attempt, for as long as this lives. The gauge is the
/// one the increment went to, so a recorder installed meanwhile cannot see only the decrement.
pub(crate) struct Waiting(metrics::Gauge);

impl Waiting {
    pub(crate) fn start() -> Self {
        let gauge = with_recorder(|r| r.register_gauge(key!(WAITERS), &METADATA));
        gauge.increment(1.0);
        Self(gauge)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// One node's metric keys, built once with the node (invariant 2).
#[derive(Debug)]
pub(crate) struct NodeMetrics {
    latency: [Key; REQUESTS.len()],
    /// `timeout`, `unreachable`, `error`.
    errors: [Key; 3],
    quarantined: Key,
}

impl NodeMetrics {
    pub(crate) fn new(node: &str) -> Self {
        let node: metrics::SharedString = std::sync::Arc::<str>::from(node).into();
        let labelled = |name: &'static str, label: &'static str, value: &'static str| {
            Key::from_parts(
                name,
                vec![Label::new("node", node.clone()), Label::new(label, value)],
            )
        };
        Self {
            latency: REQUESTS.map(|request| labelled(NODE_REQUEST_SECONDS, "request", request)),
            errors: ["timeout", "unreachable", "error"]
                .map(|reply| labelled(NODE_ERRORS, "reply", reply)),
            quarantined: Key::from_parts(NODE_QUARANTINED, vec![Label::new("node", node.clone())]),
        }
    }

    /// Records the node's answer to a request of `kind` sent at `sent` and answered at
    /// `answered`: its latency, and whether it is quarantined now.
    pub(crate) fn answered(
        &self,
        kind: RequestKind,
        sent: Instant,
        answered: Instant,
        quarantined: Option<Quarantine>,
    ) {
        // Set on every answer, not only on a change: two answers of one node can race, and a
        // recorder installed later must see it.
        let quarantined = if quarantined.is_some() { 1.0 } else { 0.0 };
        // One recorder lookup for both: it is most of what a metric costs without a recorder.
        with_recorder(|r| {
            if let Some(key) = self.latency.get(kind as usize) {
                r.register_histogram(key, &METADATA)
                    .record(Between(sent, Some(answered)));
            }
            r.register_gauge(&self.quarantined, &METADATA)
                .set(quarantined);
        });
    }

    /// Records a request the node did not answer usefully.
    pub(crate) fn failed(&self, reply: &Reply) {
        let i = match reply {
            // An answer, not a failure: the node kept a late release's key for the lock-delay.
            Reply::LeftToDelay => return,
            Reply::Timeout => 0,
            Reply::Unreachable(_) => 1,
            _ => 2,
        };
        if let Some(key) = self.errors.get(i) {
            count(key);
        }
    }
}

/// A reply in one word, for the round's `debug` event.
pub(crate) fn reply_word(reply: &Reply) -> &'static str {
    match reply {
        Reply::Granted => "granted",
        Reply::Refused => "refused",
        Reply::Timeout => "timeout",
        Reply::Unreachable(_) => "unreachable",
        Reply::ServerError(_) => "error",
        Reply::WrongType(_) => "wrong_type",
        Reply::Pending => "pending",
        Reply::Quarantined(_) => "quarantined",
        Reply::LeftToDelay => "left_to_delay",
    }
}
