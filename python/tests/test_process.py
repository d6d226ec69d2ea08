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


def test_a_fork_while_threads_lock_gives_a_child_that_locks(servers, name):
    """A process whose threads lock all the time forks (a pre-forking server that keeps working
    while it forks its workers). Each child must lock at once: a lock of the library that one
    of the parent's threads held at the fork stays held in the child for good, and its first
    lock waited forever (measured: 12 children of 2,000 hung on the table of round deadlines;
    `fork.rs`). 300 forks, each child one lock, each bounded; the threads stop by themselves."""
    import threading
    import warnings

    rl = redquorum.Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
    rl.acquire(name, 5).release()
    stop = threading.Event()

    def work(i: int) -> None:
        deadline = time.monotonic() + 120  # bounded, whatever happens below
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                with rl.lock(f"{name}:{i}", ttl=5):
                    pass
            except redquorum.RedquorumError:
                pass

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(16)]
    for t in threads:
        t.start()
    hung = []
    try:
        with warnings.catch_warnings():
            # Python 3.12 warns that forking a threaded process may deadlock: this is that test.
            warnings.simplefilter("ignore", DeprecationWarning)
            for k in range(300):
                pid = os.fork()
                if pid == 0:
                    code = 0
                    try:
                        rl.acquire(f"{name}:child:{k}", 5).release()
                    except BaseException:
                        code = 3
                    os._exit(code)
                try:
                    assert wait_child(pid, limit=20.0) == 0, f"child {k} failed"
                except AssertionError as e:
                    hung.append(f"child {k}: {e}")
                    if len(hung) >= 3:
                        break
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
    assert not hung, hung
