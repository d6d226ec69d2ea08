"""A process's life: a fork (the interpreter's exit is `test_exit.py`'s)."""

from __future__ import annotations

import os
import time

import redis

import redquorum

from conftest import PATIENT_NODE_TIMEOUT


def wait_child(pid: int, limit: float = 30.0) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    raise AssertionError("the forked child hung")


def test_a_manager_made_before_fork_works_in_four_children(servers, nodes, name):
    """gunicorn --preload, Celery prefork: the manager is made (and used) in the parent, then
    the workers are forked. Each child uses the parent's manager as its own, with no code
    change; the parent's lock stays the parent's: a child's use of its handle is refused, and
    the child's exit neither releases nor extends it."""
    rl = redquorum.Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
    rl.acquire(name, 10).release()  # the parent's runtime and connections are running
    held = rl.acquire(f"{name}:held", 10)
    r = redis.Redis.from_url(nodes.urls[0])
    r.delete(f"{name}:count", f"{name}:values")
    children = []
    for _ in range(4):
        pid = os.fork()
        if pid == 0:  # the child: exit codes report what happened
            code = 0
            try:
                for _ in range(5):
                    with rl.lock(name, ttl=5) as lock:  # the parent's manager, as is
                        if lock.fence is None:
                            code = 13
                        r.rpush(f"{name}:values", lock.value)
                        seen = int(r.get(f"{name}:count") or 0)
                        r.set(f"{name}:count", seen + 1)
            except BaseException:
                code = 14
            try:
                held.release()
                code = 10  # the parent's lock must not be released from here
            except redquorum.ProcessForked as e:
                if "\n" in str(e) or "forked" not in str(e):
                    code = 11
            except BaseException:
                code = 12
            os._exit(code)
        children.append(pid)
    assert [wait_child(pid) for pid in children] == [0, 0, 0, 0]
    # Mutual exclusion held across the children: no increment lost.
    assert int(r.get(f"{name}:count")) == 20
    # Every acquisition drew a value of its own: children that inherited one random generator
    # drew the same ones, and released each other's locks.
    values = r.lrange(f"{name}:values", 0, -1)
    assert len(values) == 20 and len(set(values)) == 20, values
    # The parent still works, and its lock was not touched by the children.
    assert held.remaining() > 0
    assert r.get(f"{name}:held") == held.value.encode()
    held.release()
    rl.acquire(name, 5).release()
