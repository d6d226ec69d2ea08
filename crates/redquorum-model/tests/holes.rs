//! Each rule of the library, removed, lets the checker find the schedule that breaks a
//! guarantee; the same bounds with every rule on keep them all.

mod common;

use common::{STILL, deep_hole, hole};
use redquorum_model::counting::{COUNT_HOLDS, Counting, CountingRules, Primitive};
use redquorum_model::node::Markers;
use redquorum_model::properties::{LOCK_DELAY, ONE_HOLDER, TOKENS_INCREASE};
use redquorum_model::{Bounds, FaultKinds, Rules};

#[test]
fn without_the_quarantine_a_restart_that_loses_data_gives_the_lock_twice() {
    let bounds = Bounds {
        faults: 1,
        kinds: FaultKinds {
            restart_lost: true,
            ..common::NO_FAULTS
        },
        releases: false,
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
        releases: false,
        late_delivery: false,
        ..STILL
    };
    hole(bounds, rules, ONE_HOLDER);
}

#[test]
fn a_release_bound_without_the_lag_of_a_late_set_cuts_the_lock_delay_short() {
    // Rounds that are not prompt: a request may reach its node up to the node timeout (2 ms)
    // after it was sent, and still be a vote. The finding of docs/model.md.
    let bounds = Bounds {
        nodes: 1,
        horizon: 7,
        late_delivery: false,
        prompt_rounds: false,
        ..STILL
    };
    let rules = Rules {
        release_bound_covers_lag: false,
        ..Rules::ALL
    };
    hole(bounds, rules, LOCK_DELAY);
}

#[test]
fn a_marker_that_names_only_the_run_id_gives_the_lock_twice_after_a_failback() {
    // One cluster node (a master Y and its replica X), two clients, two failovers: a
    // failback. Y grants the lock before X has it; X takes over, nobody checks it while it
    // leads (so its marker is still Y's); Y resynchronises from X and leads again, same
    // run_id, long uptime.
    let bounds = Bounds {
        nodes: 1,
        cluster: true,
        faults: 2,
        kinds: FaultKinds {
            failover: true,
            ..common::NO_FAULTS
        },
        releases: false,
        late_delivery: false,
        ..STILL
    };
    let rules = Rules {
        marker_names_replid: false,
        ..Rules::ALL
    };
    hole(bounds, rules, ONE_HOLDER);
}

#[test]
fn a_vote_that_does_not_read_the_history_back_counts_a_failed_back_master() {
    // The failback above, with the marker naming the history, seen by a client whose health
    // check ran before it: the connection survives both failovers (Redis keeps it across a
    // change of role), the marker it reads back is byte for byte the one it checked, and only
    // the `master_replid` read back with it shows that the data was replaced.
    let bounds = Bounds {
        nodes: 1,
        cluster: true,
        faults: 2,
        kinds: FaultKinds {
            failover: true,
            ..common::NO_FAULTS
        },
        releases: false,
        late_delivery: false,
        ..STILL
    };
    let rules = Rules {
        vote_reads_history: false,
        ..Rules::ALL
    };
    hole(bounds, rules, ONE_HOLDER);
}

#[test]
fn the_old_counter_floor_hands_out_a_token_twice_after_a_flush() {
    // One client acquiring four times on one node, one `FLUSHALL`, a short TTL (3 ms, no
    // lock-delay) so that the quarantine (max_ttl = 3 ms) ends within the horizon.
    let bounds = Bounds {
        clients: 1,
        nodes: 1,
        attempts: 4,
        faults: 1,
        kinds: FaultKinds {
            flush: true,
            ..common::NO_FAULTS
        },
        horizon: 3,
        ttl_ms: 3,
        lock_delay_ms: 0,
        late_delivery: false,
        ..STILL
    };
    let rules = Rules {
        trust_window: false,
        ..Rules::ALL
    };
    hole(bounds, rules, TOKENS_INCREASE);
}

/// A holder that extends once, while requests not awaited may wait in the network: two
/// clients, three nodes, time passing past the TTL.
const EXTENDING: Bounds = Bounds {
    extensions: 1,
    releases: false,
    horizon: 6,
    ttl_ms: 6,
    lock_delay_ms: 0,
    late_delivery: false,
    ..STILL
};

#[test]
fn an_extension_without_a_quorum_keeps_a_lock_another_client_wins() {
    // c0 wins on n0 and n1 (its request to n2 still in flight) and extends: n0 says yes; with
    // one vote enough, the lock is extended while n1's key runs out, and c1 wins n1 and n2.
    let rules = Rules {
        extension_needs_quorum: false,
        ..Rules::ALL
    };
    hole(EXTENDING, rules, ONE_HOLDER);
}

#[test]
fn a_release_by_value_with_the_senders_settings_cuts_the_lock_delay_short() {
    // c0 holds on one node and vanishes; a process configured without the lock-delay releases
    // its lock by value after c0's deadline: with its own bound (none) the key goes, and c1
    // wins inside c0's lock-delay.
    let bounds = Bounds {
        nodes: 1,
        by_value: 1,
        horizon: 7,
        late_delivery: false,
        ..STILL
    };
    let rules = Rules {
        release_bound_from_value: false,
        ..Rules::ALL
    };
    hole(bounds, rules, LOCK_DELAY);
}

/// One node, one client that saw it before the run and one that first sees it during it.
const FIRST_CONTACT: Bounds = Bounds {
    nodes: 1,
    late_clients: 1,
    faults: 1,
    releases: false,
    late_delivery: false,
    lock_delay_ms: 0,
    horizon: 7,
    ..STILL
};

#[test]
fn a_marker_written_by_hand_lets_a_replacement_pass_for_the_old_server() {
    // Every server carries `manual:0` from the provisioning. c0 holds; the server is replaced by
    // another with the same word; c1, seeing it for the first time, takes the word for the old
    // server's marker and wins at once.
    let bounds = Bounds {
        markers: Markers::Hand,
        kinds: FaultKinds {
            replace_hand_marked: true,
            ..common::NO_FAULTS
        },
        ttl_ms: 3,
        ..FIRST_CONTACT
    };
    let rules = Rules {
        undrawn_marker_replaced: false,
        ..Rules::ALL
    };
    hole(bounds, rules, ONE_HOLDER);
}

#[test]
fn an_unforced_mark_of_a_server_that_just_restarted_empty_gives_the_lock_twice() {
    // c0 holds; the server restarts empty; an operator marks it (unforced), which vouches for
    // its new run; c1, seeing it for the first time, trusts the vouch and wins.
    let bounds = Bounds {
        kinds: FaultKinds {
            restart_lost: true,
            ..common::NO_FAULTS
        },
        marks: 1,
        ..FIRST_CONTACT
    };
    let rules = Rules {
        mark_checks_uptime: false,
        ..Rules::ALL
    };
    hole(bounds, rules, ONE_HOLDER);
}

#[test]
fn first_sight_by_default_trusts_a_server_whose_clock_stepped_after_an_empty_restart() {
    // The deployment did not opt in. c0 holds; the server restarts empty and its host's clock
    // steps forward (uptime an hour); c1's first sight finds it clean, unmarked and long
    // running, vouches for it, and wins.
    let bounds = Bounds {
        kinds: FaultKinds {
            restart_stepped: true,
            ..common::NO_FAULTS
        },
        horizon: 6,
        ..FIRST_CONTACT
    };
    let rules = Rules {
        first_sight_opt_in: false,
        ..Rules::ALL
    };
    hole(bounds, rules, ONE_HOLDER);
}

#[test]
fn first_sight_without_the_group_rule_trusts_a_replacement_in_a_marked_group() {
    // Three marked nodes; c0 holds on n0 and n1 (its request to n2 still in flight); n1 is
    // replaced by a long-running server no client marked; c1's first sight vouches for n1 alone
    // (n0 and n2 show markers) and c1 wins on n1 and n2.
    let bounds = Bounds {
        nodes: 3,
        trust_first_sight: true,
        kinds: FaultKinds {
            replace: true,
            ..common::NO_FAULTS
        },
        horizon: 0,
        ..FIRST_CONTACT
    };
    let rules = Rules {
        first_sight_needs_group: false,
        ..Rules::ALL
    };
    // Seventeen steps deep: found depth first, checked with every rule on with the symmetry
    // reduction (breadth first takes twice as long).
    deep_hole(bounds, rules, ONE_HOLDER);
}

/// The counting model ([`redquorum_model::counting`]): the rule removed gives too many holders,
/// every rule on none, exhaustively.
fn counting_hole(model: Counting, broken: CountingRules) {
    use stateright::{Checker, Model};
    let run = |rules: CountingRules| {
        let model = Counting {
            rules,
            ..model.clone()
        };
        let checker = model.checker().threads(2).spawn_bfs().join();
        let found = checker.discovery(COUNT_HOLDS);
        println!(
            "{rules:?}: {} states, counterexample: {}",
            checker.unique_state_count(),
            found.is_some()
        );
        if let Some(path) = &found {
            for (state, step) in path.clone().into_vec() {
                println!("  {step:?}  => {:?}", state.clients);
            }
        }
        (found.is_some(), checker.is_done())
    };
    assert!(
        run(broken).0,
        "with the rule removed the checker must find too many holders"
    );
    let (found, done) = run(CountingRules::ALL);
    assert!(!found, "with every rule on, never too many holders");
    assert!(done, "with every rule on, every state is visited");
}

#[test]
fn a_semaphore_that_counts_grants_on_each_node_lets_three_hold_two_permits() {
    // N = 3, k = 2: three holders each gather two grants while no node grants more than two
    // (the module's N = 5 schedule, smaller).
    let model = Counting {
        primitive: Primitive::Semaphore { permits: 2 },
        nodes: 3,
        clients: 3,
        attempts: 1,
        rules: CountingRules::ALL,
    };
    counting_hole(
        model,
        CountingRules {
            permits_are_keys: false,
            ..CountingRules::ALL
        },
    );
}

#[test]
fn a_reader_that_holds_on_one_node_holds_beside_a_writer() {
    let model = Counting {
        primitive: Primitive::ReadWrite,
        nodes: 3,
        clients: 2,
        attempts: 1,
        rules: CountingRules::ALL,
    };
    counting_hole(
        model,
        CountingRules {
            readers_need_quorum: false,
            ..CountingRules::ALL
        },
    );
}

#[test]
fn a_lost_lock_released_by_compare_and_delete_cuts_the_lock_delay_short() {
    // c0 holds on one node; its validity runs out (a pause); it releases the lock it knows it
    // lost, after its deadline: a compare-and-delete frees the key, and c1 wins inside c0's
    // lock-delay, while c0's last writes may still be in flight.
    let bounds = Bounds {
        nodes: 1,
        releases: false,
        lost_releases: true,
        horizon: 7,
        late_delivery: false,
        ..STILL
    };
    let rules = Rules {
        lost_release_lingers: false,
        ..Rules::ALL
    };
    hole(bounds, rules, LOCK_DELAY);
}
