//! What every test of the model shares: run a check, print what it found.

use redquorum_model::node::Markers;
use redquorum_model::{Bounds, Budget, FaultKinds, Report, Rules, Search, search};

/// No faults at all.
pub const NO_FAULTS: FaultKinds = FaultKinds::NONE;

/// Small bounds with no faults, no drift, no time: the base every scenario widens.
pub const STILL: Bounds = Bounds {
    clients: 2,
    nodes: 3,
    cluster: false,
    sentinel: false,
    attempts: 1,
    releases: true,
    extensions: 0,
    extending_clients: u8::MAX,
    by_value: 0,
    markers: Markers::Drawn,
    late_clients: 0,
    late_after_faults: true,
    trust_first_sight: false,
    marks: 0,
    rechecks: false,
    durable: false,
    lost_releases: false,
    faults: 0,
    kinds: NO_FAULTS,
    drift: 0,
    horizon: 0,
    late_delivery: true,
    fence_on_request: 0,
    fence_again: false,
    ttl_ms: 6,
    lock_delay_ms: 3,
    node_timeout_ms: 2,
    prompt_rounds: true,
    prompt_network: false,
};

/// Checks `bounds` under `rules` on two threads, and prints the report: breadth first, or when
/// `deep` depth first (with the symmetry reduction for every rule on; a counterexample is then
/// not the shortest).
pub fn checked(what: &str, bounds: Bounds, rules: Rules, deep: bool) -> Report {
    let first = rules != Rules::ALL;
    let guard = Budget::TESTS;
    let how = match (deep, first) {
        (false, _) => Search::Breadth,
        (true, true) => Search::Depth,
        (true, false) => Search::Symmetric,
    };
    let report = search(bounds, rules, 2, guard, first, how);
    println!(
        "{what}: {} states ({} generated) in {:.2?}, {} counterexample(s), live: {}, exhausted: {}",
        report.states,
        report.generated,
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
    find_and_check(bounds, broken, property, false);
}

/// [`hole`], depth first with the symmetry reduction: for bounds too large for breadth first.
pub fn deep_hole(bounds: Bounds, broken: Rules, property: &str) {
    find_and_check(bounds, broken, property, true);
}

fn find_and_check(bounds: Bounds, broken: Rules, property: &str, symmetric: bool) {
    let without = checked("rule removed", bounds, broken, symmetric);
    assert!(
        without
            .counterexamples
            .iter()
            .any(|t| t.property == property),
        "with the rule removed the checker must find a schedule breaking \"{property}\""
    );
    let with = checked("every rule on", bounds, Rules::ALL, symmetric);
    assert!(
        with.counterexamples.is_empty(),
        "with every rule on, the same bounds must keep every guarantee"
    );
    assert!(
        with.exhausted,
        "with every rule on, the checker must visit every state within the bounds"
    );
}
