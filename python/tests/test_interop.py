"""Our keys are the standard Redlock format: redis-py's Lock, pottery's Redlock and the Rust
library (the `redlock` command, another process) exclude us and we exclude them, both ways."""

from __future__ import annotations

import subprocess

import pytest
import redis
from pottery import Redlock as PotteryRedlock

import redquorum

from conftest import PATIENT_NODE_TIMEOUT, redlock_bin
from redquorum import LockBusy


def test_redis_py_lock_both_ways(nodes, name):
    r = redis.Redis.from_url(nodes.urls[0])
    # N = 1, as redis-py's Lock
    ours = redquorum.Redlock(nodes.urls[0], node_timeout=PATIENT_NODE_TIMEOUT)
    theirs = r.lock(name, timeout=10)
    assert theirs.acquire(blocking=False)
    with pytest.raises(LockBusy):
        ours.try_acquire(name, 10)
    theirs.release()
    with ours.lock(name, ttl=10):
        assert not r.lock(name, timeout=10).acquire(blocking=False)
    assert r.lock(name, timeout=10).acquire(blocking=False)


def test_pottery_redlock_both_ways(nodes, name):
    masters = nodes.clients()
    ours = redquorum.Redlock(nodes.servers, node_timeout=PATIENT_NODE_TIMEOUT)
    theirs = PotteryRedlock(key=name, masters=masters, auto_release_time=10)
    key = f"redlock:{name}"  # pottery's key for `name`
    assert theirs.acquire(blocking=False)
    with pytest.raises(LockBusy):
        ours.try_acquire(key, 10)
    theirs.release()
    with ours.lock(key, ttl=10):
        other = PotteryRedlock(key=name, masters=masters, auto_release_time=10)
        assert not other.acquire(blocking=False)
    other = PotteryRedlock(key=name, masters=masters, auto_release_time=10)
    assert other.acquire(blocking=False)
    other.release()


def test_rust_cli_both_ways(nodes, name):
    def cli(*args):
        return subprocess.run(
            [redlock_bin(), "--servers", nodes.servers, *args],
            capture_output=True, text=True, timeout=30,
        )

    rl = redquorum.Redlock(nodes.servers, node_timeout=PATIENT_NODE_TIMEOUT)
    taken = cli("acquire", name, "--ttl", "10s")
    assert taken.returncode == 0, taken.stderr
    value = taken.stdout.strip()
    with pytest.raises(LockBusy):
        rl.try_acquire(name, 10)
    assert cli("release", name, value).returncode == 0
    with rl.lock(name, ttl=10):
        assert cli("acquire", name, "--ttl", "10s").returncode == 75  # busy
