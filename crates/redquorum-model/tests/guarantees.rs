//! With every rule on, the full model keeps every guarantee within the CI bounds, and some
//! client still acquires once the faults stop.
//!
//! The check is exhaustive: every state within the bounds is visited, or the test fails. The
//! guard below is no cap on what is checked; it only turns a run that cannot finish (bounds
//! grown beyond what CI affords) into a failure instead of a hang.

use std::time::Duration;

use redquorum_model::properties::WITNESSES;
use redquorum_model::{Bounds, Rules, check_symmetric};

/// Far above the measured time (`docs/model.md`).
const GUARD: Duration = Duration::from_secs(300);

#[test]
fn every_interleaving_within_the_ci_bounds_keeps_every_guarantee_as_time_passes_and_some_client_acquires()
 {
    let report = check_symmetric(Bounds::CI, Rules::ALL, 2, Some(GUARD));
    println!(
        "full model: {} states in {:.2?}, exhausted: {}",
        report.states, report.elapsed, report.exhausted
    );
    for trace in &report.counterexamples {
        println!("{trace}");
    }
    assert!(
        report.counterexamples.is_empty(),
        "every guarantee holds in every reachable state"
    );
    assert!(
        report.exhausted,
        "the checker must visit every state within the CI bounds"
    );
    assert!(report.live, "some client acquires after the faults stop");
    for witness in WITNESSES {
        assert!(
            report.witnessed.contains(&witness),
            "time passes far enough that {witness}"
        );
    }
}
