//! What every test of the model shares: run a check, print what it found.

use std::time::Duration;

use redquorum_model::{Bounds, FaultKinds, Report, Rules, check_until};

/// No faults at all.
pub const NO_FAULTS: FaultKinds = FaultKinds {
    restart_kept: false,
    restart_lost: false,
    flush: false,
    failover: false,
};

/// Small bounds with no faults, no drift, no time: the base every scenario widens.
pub const STILL: Bounds = Bounds {
    clients: 2,
    nodes: 3,
    cluster: false,
    attempts: 1,
    releases: true,
    extensions: 0,
    by_value: 0,
    faults: 0,
    kinds: NO_FAULTS,
    drift: 0,
    horizon: 0,
    late_delivery: true,
    ttl_ms: 6,
    lock_delay_ms: 3,
    node_timeout_ms: 2,
    prompt_rounds: true,
    prompt_network: false,
};

/// Checks `bounds` under `rules` on two threads, and prints the report.
pub fn checked(what: &str, bounds: Bounds, rules: Rules) -> Report {
    let first = rules != Rules::ALL;
    let report = check_until(bounds, rules, 2, Some(Duration::from_secs(60)), first);
    println!(
        "{what}: {} states in {:.2?}, {} counterexample(s), live: {}, exhausted: {}",
        report.states,
        report.elapsed,
        report.counterexamples.len(),
        report.live,
        report.exhausted
    );
    for trace in &report.counterexamples {
        println!("{trace}");
    }
    report
}

/// Asserts that `rules` break `property` within `bounds`, and that every rule on does not.
pub fn hole(bounds: Bounds, broken: Rules, property: &str) {
    let without = checked("rule removed", bounds, broken);
    assert!(
        without
            .counterexamples
            .iter()
            .any(|t| t.property == property),
        "with the rule removed the checker must find a schedule breaking \"{property}\""
    );
    let with = checked("every rule on", bounds, Rules::ALL);
    assert!(
        with.counterexamples.is_empty(),
        "with every rule on, the same bounds must keep every guarantee"
    );
    assert!(
        with.exhausted,
        "with every rule on, the checker must visit every state within the bounds"
    );
}
