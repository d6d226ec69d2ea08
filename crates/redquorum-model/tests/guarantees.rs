//! With every rule on, the full model keeps every guarantee within the CI bounds, and some
//! client still acquires once the faults stop.

use std::time::Duration;

use redquorum_model::{Bounds, Rules, check};

#[test]
fn every_interleaving_within_the_ci_bounds_keeps_every_guarantee_and_some_client_acquires() {
    // Breadth first for 30 s on two threads: every state up to the depth reached (docs/model.md
    // records how many).
    let report = check(Bounds::CI, Rules::ALL, 2, Some(Duration::from_secs(30)));
    println!(
        "full model: {} states in {:.2?}",
        report.states, report.elapsed
    );
    for trace in &report.counterexamples {
        println!("{trace}");
    }
    assert!(
        report.counterexamples.is_empty(),
        "every guarantee holds in every reachable state"
    );
    assert!(report.live, "some client acquires after the faults stop");
}
