#!/usr/bin/env bash
# The contributor's fast loop: every crate's unit tests, then the library's integration tests
# that take seconds, against real redis-server processes. Under 3 minutes on 2 cores after a
# change to the library; `scripts/test.sh` (what CI runs) is the whole suite, Python and Node
# included, about 20 minutes. Extra arguments go to both cargo runs (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null 2>&1 || { echo "redlock: cargo is missing; install Rust from https://rustup.rs" >&2; exit 1; }
scripts/ensure-redis.sh
cargo test --workspace --lib --bins "$@"
# The library's integration tests of a few seconds each (docs/layout.md, *Tests*); the slow ones
# (failovers, Sentinel groups, the model's checks, chaos runs) are left to scripts/test.sh.
fast=(
  blocking config election expiry_and_extension fault_tolerance fencing handles interop
  lock_delay multi_resource mutual_exclusion primitive_schedules quarantine read_write request
  reserved_names rollback semaphore shared spans status stragglers telemetry transports warnings
)
args=()
for t in "${fast[@]}"; do args+=(--test "$t"); done
cargo test -p redquorum "${args[@]}" "$@"
