//! Each rule of the library, removed, lets the checker find the schedule that breaks a
//! guarantee; the same bounds with every rule on keep them all.

mod common;

use common::{STILL, hole};
use redquorum_model::properties::{LOCK_DELAY, ONE_HOLDER};
use redquorum_model::{Bounds, FaultKinds, Rules};

#[test]
fn without_the_quarantine_a_restart_that_loses_data_gives_the_lock_twice() {
    let bounds = Bounds {
        faults: 1,
        kinds: FaultKinds {
            restart_lost: true,
            ..common::NO_FAULTS
        },
        late_delivery: false,
        ..STILL
    };
    let rules = Rules {
        quarantine: false,
        ..Rules::ALL
    };
    hole(bounds, rules, ONE_HOLDER);
}

#[test]
fn a_release_that_ignores_the_lock_delay_frees_a_late_lock_early() {
    let bounds = Bounds {
        nodes: 1,
        horizon: 7,
        ..STILL
    };
    let rules = Rules {
        release_honours_delay: false,
        ..Rules::ALL
    };
    hole(bounds, rules, LOCK_DELAY);
}

#[test]
fn validity_without_the_drift_term_outlives_the_keys() {
    let bounds = Bounds {
        nodes: 1,
        drift: 1,
        horizon: 7,
        lock_delay_ms: 0,
        ..STILL
    };
    let rules = Rules {
        drift_term: false,
        ..Rules::ALL
    };
    hole(bounds, rules, ONE_HOLDER);
}

#[test]
fn a_majority_of_n_over_2_gives_the_lock_twice() {
    let rules = Rules {
        strict_majority: false,
        ..Rules::ALL
    };
    let bounds = Bounds {
        late_delivery: false,
        ..STILL
    };
    hole(bounds, rules, ONE_HOLDER);
}
