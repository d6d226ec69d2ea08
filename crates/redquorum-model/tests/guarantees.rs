//! With every rule on, the full model keeps every guarantee within the CI bounds, and some
//! client still acquires once the faults stop.
//!
//! The check is exhaustive: every state within the bounds is visited, or the test fails. The
//! guard below is no cap on what is checked; it only turns a run that cannot finish (bounds
//! grown beyond what CI affords) into a failure instead of a hang. It counts states, not
//! seconds: a loaded machine takes longer over the same states and reaches the same verdict.

use redquorum_model::node::Markers;
use redquorum_model::properties::{
    FENCE_WITNESSES, FIRST_SIGHT_TRUSTED, ONE_HOLDER, PROMOTED_VOTES, QUARANTINE_ENDED, WITNESSES,
};
use redquorum_model::{Bounds, Budget, FaultKinds, Report, Rules, check, check_symmetric};

/// Far above the states the largest of these checks generates (`docs/model.md`).
const GUARD: Budget = Budget::TESTS;

#[test]
fn every_interleaving_within_the_ci_bounds_keeps_every_guarantee_as_time_passes_and_some_client_acquires()
 {
    let report = check_symmetric(Bounds::CI, Rules::ALL, 2, GUARD);
    every_state_safe("full model", &report);
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
        let report = check(bounds, rules, 2, GUARD);
        every_state_safe(&format!("durable, {rules:?}"), &report);
        assert!(report.live, "some client acquires after the faults stop");
    }
}

/// First sight with every rule on, where it trusts: a server no client of ours ever used, a
/// deployment that opted in, clients that arrive at any time, and one fault (an empty restart,
/// a flush) at any point of their health checks and of the group's look, extend and vouch.
/// Some vote counts on a group's vouch, and no guarantee breaks.
#[test]
fn first_sight_trusts_an_unused_group_and_never_a_node_that_lost_a_lock() {
    let bounds = Bounds {
        kinds: FaultKinds {
            restart_lost: true,
            flush: true,
            ..FaultKinds::NONE
        },
        ..FIRST_SIGHT
    };
    let report = check_symmetric(bounds, Rules::ALL, 2, GUARD);
    every_state_safe("first sight", &report);
    assert!(
        report.witnessed.contains(&FIRST_SIGHT_TRUSTED),
        "a vote counts on a group's vouch"
    );
}

/// The one schedule first sight gets wrong, as `first_sight` invariant 3 and the README's limits
/// say: every node of the group (here the one) replaced while a lock is held by a long-running
/// server that never had a marker. The model finds it with every rule on; the deployment rule
/// that opts in to first sight (`docs/guarantees.md`) is what excludes it.
#[test]
fn first_sight_cannot_tell_a_whole_group_replaced_at_once_as_documented() {
    let bounds = Bounds {
        kinds: FaultKinds {
            replace: true,
            ..FaultKinds::NONE
        },
        ..FIRST_SIGHT
    };
    let report = check_symmetric(bounds, Rules::ALL, 2, GUARD);
    for trace in &report.counterexamples {
        println!("{trace}");
    }
    assert!(
        report
            .counterexamples
            .iter()
            .any(|t| t.property == ONE_HOLDER),
        "the documented limit is what the model finds"
    );
}

/// One server no client of ours used, two clients that first see it during the run, a
/// deployment that opted in to first sight, one fault.
const FIRST_SIGHT: Bounds = Bounds {
    nodes: 1,
    markers: Markers::None,
    late_clients: 2,
    trust_first_sight: true,
    faults: 1,
    kinds: FaultKinds::NONE,
    releases: false,
    lock_delay_ms: 0,
    ttl_ms: 6,
    horizon: 0,
    ..Bounds::CI
};

/// Extensions whose requests may wait in the network past the holder's deadline and the key's
/// TTL (rounds not prompt: a reply later than the node timeout is no vote): one node, two
/// clients, one extension each, time passing to the TTL. Every guarantee holds, property 6 (an extension continues
/// its own hold) among them: a late "yes" is no vote, and a won round whose new deadline is
/// already past extends nothing (`engine::deadline_if_won`).
#[test]
fn an_extension_that_arrives_late_never_continues_across_another_hold() {
    let bounds = Bounds {
        nodes: 1,
        extensions: 1,
        releases: false,
        horizon: 6,
        ttl_ms: 6,
        lock_delay_ms: 0,
        late_delivery: false,
        prompt_rounds: false,
        prompt_network: false,
        ..Bounds::CI
    };
    let report = check_symmetric(bounds, Rules::ALL, 2, GUARD);
    every_state_safe("late extensions", &report);
}

/// Prints what a check with every rule on found, and asserts it found nothing and visited
/// every state within its bounds.
fn every_state_safe(what: &str, report: &Report) {
    println!(
        "{what}: {} states ({} generated) in {:.2?}, exhausted: {}",
        report.states, report.generated, report.elapsed, report.exhausted
    );
    for trace in &report.counterexamples {
        println!("{trace}");
    }
    assert!(
        report.counterexamples.is_empty(),
        "{what}: every guarantee holds in every reachable state"
    );
    assert!(
        report.exhausted,
        "{what}: the checker must visit every state within the bounds"
    );
}

/// Tokens on request with every rule on: client 0 locks with the plain `SET` and may ask for
/// its token once while it holds (`fencing` invariant 8), client 1 fences with the acquisition;
/// one fault (a restart that loses the data, `FLUSHALL`), 1 ms of drift (a client's or a
/// node's clock stands still) within a horizon of 1 ms, every order of every request within
/// the millisecond. Every guarantee holds, property 3 (a later acquisition's token above every
/// earlier one's) among them; a token is issued on request, and through the store round.
#[test]
fn tokens_on_request_follow_the_acquisitions_through_faults_and_drift() {
    let bounds = Bounds {
        fence_on_request: 1,
        kinds: FaultKinds {
            restart_lost: true,
            flush: true,
            ..FaultKinds::NONE
        },
        drift: 1,
        horizon: 1,
        releases: false,
        ..Bounds::CI
    };
    let report = check_symmetric(bounds, Rules::ALL, 2, GUARD);
    every_state_safe("tokens on request", &report);
    for witness in FENCE_WITNESSES {
        assert!(report.witnessed.contains(&witness), "{witness}");
    }
}

/// A replicated node (`redis+sentinel://`: a primary and its replica behind Sentinel) with every
/// rule on: two faults, each a failover (two: a failback) or the replica's restart from an old
/// snapshot (a new `run_id`, the marker without the lock), in any order with every step of two
/// clients (acquire, release, health checks), the replica catching up at any time, replies
/// lost or late (a `WAIT` that timed out), time passing 3 ms (TTL 3 ms, no lock-delay: past a
/// validity and a quarantine of `max_ttl`); the second client first sees the node once the
/// faults are spent (a promoted replica judged by the ordinary rules). Every guarantee holds, a
/// promoted replica votes, and a quarantined one votes again.
#[test]
fn a_replicated_nodes_failovers_and_replica_restarts_never_give_a_lock_twice() {
    let bounds = Bounds {
        nodes: 1,
        sentinel: true,
        late_clients: 1,
        late_after_faults: true,
        faults: 2,
        kinds: FaultKinds {
            failover: true,
            replica_restart: true,
            ..FaultKinds::NONE
        },
        late_delivery: true,
        lock_delay_ms: 0,
        horizon: 3,
        ..Bounds::CI
    };
    let report = check_symmetric(bounds, Rules::ALL, 2, GUARD);
    every_state_safe("replicated node", &report);
    assert!(report.live, "some client acquires after the faults stop");
    for witness in [PROMOTED_VOTES, QUARANTINE_ENDED] {
        assert!(report.witnessed.contains(&witness), "{witness}");
    }
}
