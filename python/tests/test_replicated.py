"""Over a node behind a fixed address (`redis+replicated://host:port?replicas=R` URL): here the
primary's own address, with one replica the test attaches. The library waits for the replica
on every vote; nothing in the Python layer knows about it.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from typing import Iterator, Tuple

import pytest

import redquorum

from redquorum import LockBusy

from conftest import PATIENT_NODE_TIMEOUT, Nodes, assert_threads_exclude


def cli(port: str, *args: str) -> str:
    return subprocess.run(
        ["redis-cli", "-p", port, *args], check=True, capture_output=True, text=True, timeout=10,
    ).stdout.strip()


@pytest.fixture(scope="module")
def pair() -> Iterator[Tuple[str, str, Nodes]]:
    started = Nodes(2)
    try:
        primary, replica = (u.rsplit(":", 1)[1] for u in started.urls)
        cli(replica, "REPLICAOF", "127.0.0.1", primary)
        deadline = time.monotonic() + 30
        while "state=online" not in cli(primary, "INFO", "replication"):
            assert time.monotonic() < deadline, "the replica never came online"
            time.sleep(0.05)
        yield primary, replica, started
    finally:
        started.stop()


def test_a_lock_behind_a_fixed_address_excludes_threads_and_reaches_the_replica(pair):
    primary, replica, _ = pair
    url = f"redis+replicated://127.0.0.1:{primary}?replicas=1"
    srl = redquorum.Redlock([url], max_ttl=30, node_timeout=PATIENT_NODE_TIMEOUT)
    name = f"invoice:{uuid.uuid4().hex}"
    assert_threads_exclude(srl, name)

    held = srl.acquire(name, ttl=10)
    try:
        other = redquorum.Redlock([url], max_ttl=30, node_timeout=PATIENT_NODE_TIMEOUT)
        with pytest.raises(LockBusy):
            other.try_acquire(name, ttl=10)
        assert cli(replica, "GET", name) == held.value
    finally:
        held.release()


def test_a_replicated_url_without_its_replicas_is_refused_by_name():
    with pytest.raises(redquorum.ConfigError, match=r"replicas=R"):
        redquorum.Redlock(["redis+replicated://127.0.0.1:6379"])
