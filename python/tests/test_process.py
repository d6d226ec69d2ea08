"""A process's life: a fork (the interpreter's exit is `test_exit.py`'s)."""

from __future__ import annotations

import os
import time

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


def test_fork_child_gets_a_clear_error_or_its_own_runtime(servers, name):
    rl = redquorum.Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
    rl.acquire(name, 10).release()  # the parent's runtime and connections are running
    held = rl.acquire(f"{name}:held", 10)
    pid = os.fork()
    if pid == 0:  # the child: exit codes report what happened
        code = 0
        try:
            rl.try_acquire(name, 5)
            code = 10  # the parent's manager must refuse
        except redquorum.ProcessForked as e:
            if "\n" in str(e):
                code = 11
        except BaseException:
            code = 12
        try:
            del held  # the parent's lock is forgotten, not released from here
            own = redquorum.Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
            with own.lock(name, ttl=5) as lock:
                if lock.fence is None:
                    code = 13
        except BaseException:
            code = 14
        os._exit(code)
    assert wait_child(pid) == 0
    # The parent still works, and its lock was not touched by the child.
    assert rl.status(f"{name}:held")[0].value == held.value
    held.release()
    rl.acquire(name, 5).release()
