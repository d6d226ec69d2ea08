#!/usr/bin/env bash
# Checks that the workspace builds with the `rust-version` its Cargo.toml declares (installing that
# toolchain with rustup when missing), in a target directory of its own.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
if [ -z "$msrv" ]; then
    echo "msrv: no rust-version in Cargo.toml" >&2
    exit 1
fi
if ! rustup run "$msrv" rustc --version >/dev/null 2>&1; then
    rustup toolchain install "$msrv" --profile minimal
fi
# What users build: every crate's library and binaries (tests, examples and benchmarks are
# ours, built with the current toolchain by the rest of CI).
CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --workspace --lib --bins --locked
echo "msrv: the workspace builds with rust $msrv"
