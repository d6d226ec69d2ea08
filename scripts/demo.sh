#!/usr/bin/env bash
# Runs the demo: 5 local Redis nodes, several contenders on one lock, a node killed half-way.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null 2>&1 || { echo "redlock: cargo is missing; install Rust from https://rustup.rs" >&2; exit 1; }
scripts/ensure-redis.sh
exec cargo run --quiet --release -p redquorum-cli -- demo "$@"
