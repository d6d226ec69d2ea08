"""Real redis-server processes for the suite, started by the project's node launcher
(`redlock nodes start`, crate redquorum-cli), so no server-starting code is copied here. The
launcher gives each brand-new server a marker that vouches for it, so the nodes vote at once
instead of waiting out the restart quarantine (the quarantine test removes the markers, and
vouches with `Redlock.mark_nodes()` instead).

The `redlock` binary is `$REDLOCK_BIN`, else `target/debug/redlock` of this checkout (built by
scripts/test.sh), else the one on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Iterator, List

import pytest
import redis

import redquorum


ROOT = Path(__file__).resolve().parents[2]

# The node timeout of managers whose tests measure nothing about timeouts. The default, 100 ms,
# bounds a vote in production; on a loaded 2-core machine running the debug build, healthy local
# nodes have answered later than that, and such a test saw `Unavailable` or a lost keep-alive
# for a slow machine, not for anything it checks. 1 s is far beyond any answer a healthy local
# node gives. Tests of timeouts (`test_unavailable`) set their own.
PATIENT_NODE_TIMEOUT = 1.0


def redlock_bin() -> str:
    env = os.environ.get("REDLOCK_BIN")
    if env:
        return env
    local = ROOT / "target" / "debug" / "redlock"
    if local.exists():
        return str(local)
    found = shutil.which("redlock")
    if found:
        return found
    pytest.exit("the `redlock` binary is missing: cargo build -p redquorum-cli", returncode=2)
    raise AssertionError


class Nodes:
    """N nodes started by the launcher in a directory of their own."""

    def __init__(self, count: int, cluster: bool = False, sentinel: bool = False) -> None:
        # In memory where the machine has it: the launcher's nodes run with `appendfsync
        # always`, and an fsync to a busy disk can take longer than a node timeout.
        shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self.dir = tempfile.mkdtemp(prefix="redquorum-py-", dir=shm)
        # With `cluster`, each node is a Redis Cluster of one master and one replica, whose
        # masters the launcher marks too.
        # With `sentinel`, each node is a primary with one replica behind three sentinels.
        extra = ["--cluster"] if cluster else (["--sentinel"] if sentinel else [])
        out = subprocess.run(
            [redlock_bin(), "nodes", "start", "--count", str(count), "--dir", self.dir, "--json",
             *extra],
            check=True, capture_output=True, text=True, timeout=120,
        )
        started = json.loads(out.stdout)
        self.servers: str = started["servers"]
        self.urls: List[str] = [n["url"] for n in started["nodes"]]

    def clients(self) -> List[redis.Redis]:
        return [redis.Redis.from_url(u) for u in self.urls]

    def stop(self) -> None:
        subprocess.run(
            [redlock_bin(), "nodes", "stop", "--dir", self.dir],
            capture_output=True, timeout=60,
        )
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def nodes() -> Iterator[Nodes]:
    started = Nodes(3)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def servers(nodes: Nodes) -> str:
    return nodes.servers


@pytest.fixture
def name() -> str:
    """A resource name of its own for each test."""
    return f"test:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def rl(servers: str) -> redquorum.Redlock:
    return redquorum.Redlock(servers, retry_delay=0.05, node_timeout=PATIENT_NODE_TIMEOUT)


def assert_threads_exclude(srl: redquorum.Redlock, name: str) -> None:
    """Four threads take `name` ten times each through `srl`, one at a time: never two inside."""
    counter = {"inside": 0, "overlaps": 0, "done": 0}

    def work():
        for _ in range(10):
            with srl.lock(name, ttl=10, timeout=30):
                counter["inside"] += 1
                if counter["inside"] != 1:
                    counter["overlaps"] += 1
                time.sleep(0.0005)
                counter["inside"] -= 1
                counter["done"] += 1

    pool = [threading.Thread(target=work) for _ in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=60)
    assert counter == {"inside": 0, "overlaps": 0, "done": 40}

