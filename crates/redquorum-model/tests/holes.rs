//! Each rule of the library, removed, lets the checker find the schedule that breaks a
//! guarantee; the same bounds with every rule on keep them all.

mod common;

use common::{STILL, deep_hole, hole};
use redquorum_model::client::Phase;
use redquorum_model::counting::{COUNT_HOLDS, Counting, CountingRules, Primitive};
use redquorum_model::model::{Action, Request, State};
use redquorum_model::node::Markers;
use redquorum_model::properties::{
    FENCED_BY_STORE, LOCK_DELAY, ONE_HOLDER, TOKENS_FOLLOW_ACQUISITIONS, TOKENS_INCREASE,
};
use redquorum_model::{Bounds, FaultKinds, Protocol, Rules};

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

/// Two clients, three nodes: client 0 locks with the plain `SET` and asks for its token later
/// (`fencing` invariant 8), client 1 fences with the acquisition (`Builder::fence_on_acquire`).
/// Client 0 may extend once (the other's extension plays no part: spared), and holds past its
/// first keys' TTL (6 ms, no lock-delay: horizon 6); requests nobody waits for may wait.
const FENCE_AFTER_EXTENSION: Bounds = Bounds {
    fence_on_request: 1,
    extensions: 1,
    extending_clients: 1,
    horizon: 6,
    ttl_ms: 6,
    lock_delay_ms: 0,
    late_delivery: false,
    ..STILL
};

/// The schedule the checker finds with `fence_needs_held_key` off (the search: the ignored
/// test below). Client 0 wins on n0 and n1 (its `SET` on n2 lands late), extends on n1 and n2
/// at 3 ms, so it is valid until 6.94 ms while its key on n0, never extended, expires at 6 ms.
/// Client 1 then wins n0 (its proposal E+6001) and is refused on n1 (which advances n1's
/// counter all the same, natively). Client 0 asks for its token: n0 and n1, both voters,
/// propose E+6002 and agree; it releases; client 1 wins n2 with E+6001: a later acquisition's
/// token below an earlier one's. With the rule on, n0 refuses (our key is gone there), one
/// voter is no quorum, and no token is issued.
const FENCE_AFTER_EXTENSION_STEPS: [(&str, Pick); 20] = [
    ("c0 acquires", Pick::Act(Action::Acquire(0))),
    ("n0 runs c0's SET", Pick::Run(0, 0, Kind::Set)),
    ("n1 runs c0's SET: c0 holds", Pick::Run(0, 1, Kind::Set)),
    ("n2 runs c0's SET, late", Pick::Run(0, 2, Kind::Set)),
    ("1 ms", Pick::Act(Action::Tick)),
    ("1 ms", Pick::Act(Action::Tick)),
    ("1 ms", Pick::Act(Action::Tick)),
    ("c0 extends", Pick::Act(Action::Extend(0))),
    ("n1 extends", Pick::Run(0, 1, Kind::Extend)),
    (
        "n2 extends: c0 valid to 6.94 ms",
        Pick::Run(0, 2, Kind::Extend),
    ),
    ("1 ms", Pick::Act(Action::Tick)),
    ("1 ms", Pick::Act(Action::Tick)),
    ("1 ms: n0's key expires", Pick::Act(Action::Tick)),
    ("c1 acquires (eager)", Pick::Act(Action::Acquire(1))),
    (
        "n1 refuses c1, counter advanced",
        Pick::Run(1, 1, Kind::Acquire),
    ),
    ("n0 grants c1", Pick::Run(1, 0, Kind::Acquire)),
    ("c0 asks for its token", Pick::Act(Action::Fence(0))),
    ("n0 runs c0's fence", Pick::Run(0, 0, Kind::Fence)),
    ("n1 runs c0's fence", Pick::Run(0, 1, Kind::Fence)),
    ("c0 releases", Pick::Act(Action::Release(0))),
];

/// How a replayed step is picked among the enabled actions.
#[derive(Clone, Copy)]
enum Pick {
    /// This action.
    Act(Action),
    /// Node `.1` runs client `.0`'s request of this kind.
    Run(u8, u8, Kind),
}

/// A request's kind, for [`Pick::Run`].
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Set,
    Acquire,
    Extend,
    Fence,
    Release,
}

fn kind(request: &Request) -> Option<Kind> {
    match request {
        Request::Set => Some(Kind::Set),
        Request::Acquire { .. } => Some(Kind::Acquire),
        Request::Extend => Some(Kind::Extend),
        Request::FenceHeld => Some(Kind::Fence),
        Request::Release { .. } => Some(Kind::Release),
        _ => None,
    }
}

/// Replays `steps` under `rules` (each must be enabled), and returns the last state.
fn replay(bounds: Bounds, rules: Rules, steps: &[(&str, Pick)]) -> State {
    use stateright::Model;
    let model = Protocol::new(bounds, rules);
    let mut state = model.init_states().remove(0);
    for (what, pick) in steps {
        let mut enabled = Vec::new();
        model.actions(&state, &mut enabled);
        let action = enabled.into_iter().find(|a| match (pick, a) {
            (Pick::Act(want), a) => a == want,
            (Pick::Run(c, n, k), Action::Deliver(m)) => {
                m.client == *c && m.node == *n && kind(&m.request) == Some(*k)
            }
            _ => false,
        });
        let action = action.unwrap_or_else(|| panic!("{what}: not enabled"));
        state = model.next_state(&state, action).expect(what);
    }
    state
}

#[test]
fn a_fence_that_ignores_the_key_gives_a_holder_whose_voter_lost_it_a_token_above_the_next() {
    let off = Rules {
        fence_needs_held_key: false,
        ..Rules::ALL
    };
    let mut steps = FENCE_AFTER_EXTENSION_STEPS.to_vec();
    steps.push(("n2 runs c0's release", Pick::Run(0, 2, Kind::Release)));
    steps.push(("n2 grants c1: c1 holds", Pick::Run(1, 2, Kind::Acquire)));
    let broken = replay(FENCE_AFTER_EXTENSION, off, &steps);
    assert!(broken.broken.tokens_out_of_order, "{:?}", broken.broken);
    assert!(broken.broken.tokens_not_increasing);
    // With the rule on, the same schedule: n0 refuses, n2 is no voter, the fence round fails.
    let mut steps = FENCE_AFTER_EXTENSION_STEPS[..19].to_vec();
    steps.push(("n2 runs c0's fence: no voter", Pick::Run(0, 2, Kind::Fence)));
    let on = replay(FENCE_AFTER_EXTENSION, Rules::ALL, &steps);
    assert!(on.issued.is_empty(), "no token is issued: {:?}", on.issued);
    assert!(
        matches!(on.clients[0].phase, Phase::Holding { fence, .. } if fence.token.is_none()),
        "the fence round failed: {:?}",
        on.clients[0].phase
    );
    assert_eq!(on.broken, Default::default());
}

/// Client 0 asks for its token later, client 1 fences with the acquisition; one `FLUSHALL`;
/// every order of every request at one instant, requests nobody waits for delivered at any
/// time or never. The schedule the voters-only rule is for: client 1's vote counted on a node,
/// which is then flushed, and client 0's late `SET` lands there; a fence round that counts that
/// node takes its counter from after the flush.
const FENCE_AFTER_FLUSH: Bounds = Bounds {
    fence_on_request: 1,
    faults: 1,
    kinds: FaultKinds {
        flush: true,
        ..common::NO_FAULTS
    },
    late_delivery: false,
    ..STILL
};

#[test]
fn a_fence_that_counts_any_node_with_our_key_gives_a_token_below_an_earlier_acquisitions() {
    // A fence round reads no marker back (the library checks acquisitions only: our key is the
    // evidence). c1 (eager) holds on n1 and n2 with a token, then releases; n1 is flushed; c0
    // wins on n0 and n2, after c1; its late `SET` lands on the flushed n1, a non-voter. Counted,
    // n1 and n0 propose the clock, below c1's token.
    let rules = Rules {
        fence_counts_voters_only: false,
        ..Rules::ALL
    };
    hole(FENCE_AFTER_FLUSH, rules, TOKENS_FOLLOW_ACQUISITIONS);
    let with = common::checked("every rule on", FENCE_AFTER_FLUSH, Rules::ALL, true);
    assert!(with.witnessed.contains(&FENCED_BY_STORE));
}

/// One replicated node (`redis+sentinel://`: a primary and its replica behind Sentinel, plain
/// markers, replicated), two clients that checked it before the run, one instant, no releases.
const SENTINEL: Bounds = Bounds {
    nodes: 1,
    sentinel: true,
    faults: 1,
    kinds: FaultKinds {
        failover: true,
        ..common::NO_FAULTS
    },
    releases: false,
    late_delivery: false,
    ..STILL
};

#[test]
fn a_vote_that_does_not_wait_for_the_replica_is_lost_in_a_failover() {
    // c0 wins on the primary, whose replica never got the key; the replica is promoted; c1's
    // health check judges it to continue the history it followed (it saw the replica caught up
    // before the run) and trusts it at once; c1 wins. With the rule on, c0's vote counts only
    // once the replica holds its key, and the promoted replica refuses c1.
    let rules = Rules {
        vote_waits_for_replicas: false,
        ..Rules::ALL
    };
    hole(SENTINEL, rules, ONE_HOLDER);
}

#[test]
fn a_promoted_replica_trusted_on_the_sentinels_word_grants_a_lock_it_lost_in_a_restart() {
    // c0 wins on the primary (its replica acknowledged the key); the replica restarts from an
    // old snapshot (the marker, not the key: a new run_id, uptime 0) and is promoted before it
    // catches up; c1's health check trusts the server the sentinels name at once, and c1 wins.
    // With the rule on, the sentinels listed another run_id at that address when c1 last read
    // them: `Lost(Promoted)`, out for `max_ttl`.
    let bounds = Bounds {
        faults: 2,
        kinds: FaultKinds {
            failover: true,
            replica_restart: true,
            ..common::NO_FAULTS
        },
        ..SENTINEL
    };
    let rules = Rules {
        promotion_judged_by_lineage: false,
        ..Rules::ALL
    };
    hole(bounds, rules, ONE_HOLDER);
}
