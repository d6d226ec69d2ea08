"""Over a Sentinel node (`redis+sentinel://` URL): a primary with one replica behind three
sentinels, started by the launcher. The library follows the primary the sentinels name and waits
for the replica on every vote; nothing in the Python layer knows about Sentinel.
"""

from __future__ import annotations

import subprocess
import uuid
from typing import Iterator

import pytest

import redquorum

from redquorum import LockBusy

from conftest import PATIENT_NODE_TIMEOUT, Nodes, assert_threads_exclude


@pytest.fixture(scope="module")
def group() -> Iterator[Nodes]:
    started = Nodes(1, sentinel=True)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def srl(group: Nodes) -> redquorum.Redlock:
    assert group.servers.startswith("redis+sentinel://"), group.servers
    return redquorum.Redlock(group.servers, max_ttl=30, node_timeout=PATIENT_NODE_TIMEOUT)


def test_a_lock_over_a_sentinel_node_excludes_threads_and_reaches_the_replica(srl, group):
    name = f"invoice:{uuid.uuid4().hex}"
    assert_threads_exclude(srl, name)

    # Held: refused to another manager, and on the replica already (the vote waited for it).
    held = srl.acquire(name, ttl=10)
    try:
        other = redquorum.Redlock(group.servers, max_ttl=30, node_timeout=PATIENT_NODE_TIMEOUT)
        with pytest.raises(LockBusy):
            other.try_acquire(name, ttl=10)
        replica = group.urls[1].rsplit(":", 1)[1]
        seen = subprocess.run(
            ["redis-cli", "-p", replica, "GET", name],
            check=True, capture_output=True, text=True, timeout=10,
        ).stdout.strip()
        assert seen == held.value
    finally:
        held.release()
