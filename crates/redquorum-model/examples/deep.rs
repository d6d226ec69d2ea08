//! The deep check: larger bounds than CI's, for as long as it is given.
//!
//! `cargo run --release -p redquorum-model --example deep -- --seconds 60 [--threads 2]`
//! `[--ci] [--faults N]`: `--ci` checks the CI bounds instead (with `--faults`, to measure
//! what a larger fault budget costs). The checker keeps every state it visits in memory, about
//! 2 kB each: mind the machine's memory before raising `--seconds`.

use std::time::Duration;

use redquorum_model::{Bounds, Budget, FaultKinds, Rules, check, check_symmetric};

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

fn main() {
    let seconds = arg("--seconds", 60);
    let threads = usize::try_from(arg("--threads", 2)).unwrap_or(2);
    let deep = Bounds {
        faults: 2,
        kinds: FaultKinds {
            restart_kept: true,
            restart_lost: true,
            flush: true,
            ..FaultKinds::NONE
        },
        drift: 1,
        horizon: 12,
        late_delivery: true,
        prompt_rounds: false,
        ..Bounds::CI
    };
    let base = if flag("--ci") { Bounds::CI } else { deep };
    let small =
        |name: &str, default: u16| u16::try_from(arg(name, u64::from(default))).unwrap_or(default);
    let bounds = Bounds {
        faults: u8::try_from(arg("--faults", u64::from(base.faults))).unwrap_or(base.faults),
        horizon: small("--horizon", base.horizon),
        ttl_ms: small("--ttl", base.ttl_ms),
        lock_delay_ms: small("--delay", base.lock_delay_ms),
        drift: u8::try_from(arg("--drift", u64::from(base.drift))).unwrap_or(base.drift),
        prompt_network: flag("--prompt-network") || base.prompt_network,
        extensions: u8::try_from(arg("--extensions", u64::from(base.extensions)))
            .unwrap_or(base.extensions),
        ..base
    };
    let check = if flag("--symmetric") {
        check_symmetric
    } else {
        check
    };
    let report = check(
        bounds,
        Rules::ALL,
        threads,
        Budget::Time(Duration::from_secs(seconds)),
    );
    println!(
        "deep: {} states in {:.2?}, {} counterexample(s), live: {}, exhausted: {}",
        report.states,
        report.elapsed,
        report.counterexamples.len(),
        report.live,
        report.exhausted
    );
    for trace in &report.counterexamples {
        println!("{trace}");
    }
}
