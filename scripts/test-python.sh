#!/usr/bin/env bash
# The Python package's suite: builds the wheel (debug: the tests need no optimiser) with maturin,
# installs it in a fresh virtualenv under target/, and runs python/tests against real
# redis-server processes started by the `redlock nodes` launcher.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v python3 >/dev/null 2>&1 || { echo "redquorum-py: python3 is missing" >&2; exit 1; }
cargo build -p redquorum-cli --quiet          # the node launcher the fixture uses
venv=target/python-venv
rm -rf "$venv" target/wheels
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check maturin pytest redis pottery
(cd python && "../$venv/bin/maturin" build --quiet --out ../target/wheels \
  --interpreter "../$venv/bin/python")   # python/pyproject.toml: features, module name
"$venv/bin/pip" install --quiet --disable-pip-version-check target/wheels/redquorum-*.whl
# From outside the source tree, so the installed wheel is what is tested.
cd python/tests
REDLOCK_BIN="$PWD/../../target/debug/redlock" exec "../../$venv/bin/python" -m pytest -q -p no:cacheprovider .
