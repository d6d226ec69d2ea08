#!/usr/bin/env bash
# Runs the whole test suite against real redis-server processes (installed when missing): the
# Rust workspace, then the Python package (scripts/test-python.sh), then the Node.js package
# (scripts/test-node.sh); fails if any fails.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null 2>&1 || { echo "redlock: cargo is missing; install Rust from https://rustup.rs" >&2; exit 1; }
scripts/ensure-redis.sh
status=0
cargo test --workspace "$@" || status=$?
scripts/test-python.sh || status=$?
scripts/test-node.sh || status=$?
exit "$status"
