"""Over Redis Cluster nodes (`redis+cluster://` URLs): three clusters of one master and one
replica each, started by the launcher. The same library routes each request to the master of its
key's slot; nothing in the Python layer knows about clusters.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Iterator

import pytest

import redquorum

from redquorum import LockBusy

from conftest import PATIENT_NODE_TIMEOUT, Nodes


@pytest.fixture(scope="module")
def clusters() -> Iterator[Nodes]:
    started = Nodes(3, cluster=True)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def crl(clusters: Nodes) -> redquorum.Redlock:
    assert clusters.servers.count("redis+cluster://") == 3, clusters.servers
    return redquorum.Redlock(
        clusters.servers, max_ttl=30, node_timeout=PATIENT_NODE_TIMEOUT
    )


def test_a_lock_over_cluster_nodes_excludes_threads_and_fences(crl):
    name = f"invoice:{uuid.uuid4().hex}"
    counter = {"value": 0, "inside": 0, "overlaps": 0}
    fences = []
    threads, rounds = 4, 10

    def work():
        for _ in range(rounds):
            with crl.lock(name, ttl=10, timeout=30) as lock:
                counter["inside"] += 1
                if counter["inside"] != 1:
                    counter["overlaps"] += 1
                fences.append(lock.fence)
                seen = counter["value"]
                time.sleep(0.0005)
                counter["value"] = seen + 1
                counter["inside"] -= 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    assert counter == {"value": threads * rounds, "inside": 0, "overlaps": 0}
    # Appended while held, so in the order the lock was handed out.
    assert fences == sorted(fences) and len(set(fences)) == threads * rounds


def test_a_held_lock_over_cluster_nodes_is_busy_for_another_manager(crl, clusters):
    name = f"job:{uuid.uuid4().hex}"
    other = redquorum.Redlock(
        clusters.servers, max_ttl=30, node_timeout=PATIENT_NODE_TIMEOUT
    )
    with crl.lock(name, ttl=10):
        with pytest.raises(LockBusy):
            other.try_acquire(name, 10)
    with other.lock(name, ttl=10) as lock:
        assert lock.remaining() > 5
