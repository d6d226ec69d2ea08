#!/usr/bin/env bash
# Makes sure a redis-server (7.x, Debian package `redis-server`) is available for the demo and
# the tests, installing it with apt-get when it is missing and we are allowed to.
set -euo pipefail

if [ -n "${REDLOCK_REDIS_SERVER:-}" ]; then
  if [ -x "$REDLOCK_REDIS_SERVER" ]; then exit 0; fi
  echo "redlock: REDLOCK_REDIS_SERVER=$REDLOCK_REDIS_SERVER is not an executable file" >&2
  exit 1
fi
if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  exit 0
fi

echo "redlock: redis-server is missing; installing the Debian package redis-server..." >&2
install() { DEBIAN_FRONTEND=noninteractive "$@" apt-get install -y -q redis-server >/dev/null \
  || { "$@" apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive "$@" apt-get install -y -q redis-server >/dev/null; }; }
if ! command -v apt-get >/dev/null 2>&1; then
  echo "redlock: no apt-get here. Install redis-server 7.x with your package manager, or point" >&2
  echo "         REDLOCK_REDIS_SERVER at a redis-server binary, then run this again." >&2
  exit 1
elif [ "$(id -u)" = 0 ]; then
  install env
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  install sudo -n env
else
  echo "redlock: cannot install redis-server without root. Run: sudo apt-get install -y redis-server" >&2
  echo "         (or point REDLOCK_REDIS_SERVER at a redis-server binary), then run this again." >&2
  exit 1
fi
# The package starts a system service on 6379 where systemd runs; our nodes use their own ports.
command -v redis-server >/dev/null 2>&1 || { echo "redlock: installing redis-server failed" >&2; exit 1; }
echo "redlock: installed $(redis-server --version | cut -d' ' -f1-3)" >&2
