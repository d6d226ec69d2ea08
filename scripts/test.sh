#!/usr/bin/env bash
# Runs the whole test suite against real redis-server processes (installed when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null 2>&1 || { echo "redlock: cargo is missing; install Rust from https://rustup.rs" >&2; exit 1; }
scripts/ensure-redis.sh
exec cargo test --workspace "$@"
