#!/usr/bin/env bash
# The Node.js package's suite: installs the npm dev dependencies (@napi-rs/cli, typescript,
# ioredis, node-redlock 4 and 5 for the interop tests), builds the addon (debug: the tests need
# no optimiser) with @napi-rs/cli, generates index.d.ts from index.js's JSDoc with tsc, and runs
# crates/redquorum-nodejs/test with `node --test` against real redis-server processes started by
# the `redlock nodes` launcher.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v node >/dev/null 2>&1 || { echo "redquorum-nodejs: node is missing (Node.js 18 or later)" >&2; exit 1; }
command -v npm >/dev/null 2>&1 || { echo "redquorum-nodejs: npm is missing" >&2; exit 1; }
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build -p redquorum-cli --quiet          # the node launcher the tests use
cd crates/redquorum-nodejs
npm ci --no-audit --no-fund --loglevel=error
CARGO_TARGET_DIR="$target" npm run --silent build:debug
# One test file at a time: each starts its own nodes, and the machine may have two cores.
REDLOCK_BIN="$target/debug/redlock" exec node --test --test-concurrency=1 test/*.test.mjs
