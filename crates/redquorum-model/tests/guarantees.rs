//! With every rule on, the full model keeps every guarantee within the CI bounds, and some
//! client still acquires once the faults stop.
//!
//! The check is exhaustive: every state within the bounds is visited, or the test fails. The
//! guard below is no cap on what is checked; it only turns a run that cannot finish (bounds
//! grown beyond what CI affords) into a failure instead of a hang.

use std::time::Duration;

use redquorum_model::node::Markers;
use redquorum_model::properties::WITNESSES;
use redquorum_model::{Bounds, FaultKinds, Rules, check, check_symmetric};

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

/// Durable servers (`quarantine` invariant 4): a restart that kept the marker is forgiven at
/// once, and only on a drawn id. Every server carries a hand-written `manual:0`; restarts keep
/// or lose the data, or another server with the same word takes the address. Safe with every
/// rule on, and still safe with the health check's own replacement of hand-written markers
/// removed: the quarantine's verdict forgives a restart only on an id that tells servers apart
/// (`marker` invariant 5), a second line of defence the model shows holding alone.
#[test]
fn a_durable_servers_restart_is_forgiven_only_on_a_drawn_marker() {
    let bounds = Bounds {
        nodes: 1,
        durable: true,
        markers: Markers::Hand,
        faults: 1,
        kinds: FaultKinds {
            replace_hand_marked: true,
            restart_kept: true,
            restart_lost: true,
            ..FaultKinds::NONE
        },
        releases: false,
        lock_delay_ms: 0,
        ttl_ms: 3,
        horizon: 7,
        ..Bounds::CI
    };
    for rules in [
        Rules::ALL,
        Rules {
            undrawn_marker_replaced: false,
            ..Rules::ALL
        },
    ] {
        let report = check(bounds, rules, 2, Some(GUARD));
        println!(
            "durable: {} states, exhausted: {}",
            report.states, report.exhausted
        );
        for trace in &report.counterexamples {
            println!("{trace}");
        }
        assert!(report.counterexamples.is_empty(), "{rules:?}");
        assert!(report.exhausted);
        assert!(report.live, "some client acquires after the faults stop");
    }
}
