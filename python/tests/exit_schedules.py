"""Ways for a process to exit while redquorum is busy: each schedule leaves locks held,
background tasks running or threads waiting, then lets the interpreter exit normally.

Run as ``python exit_schedules.py SCHEDULE SERVERS NAME``; ``test_exit.py`` runs each many
times and requires every run to exit with status 0. What a crash looked like before the
interpreter's exit was gated (issue 36): SIGSEGV or SIGABRT in a few runs out of 30.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import redquorum
import redquorum.asyncio

# As the suite's PATIENT_NODE_TIMEOUT (conftest.py): these runs check the exit, not timeouts,
# and a loaded machine must not turn a slow answer into an exception before the exit.
PATIENT = 1.0


def sync_kept(servers: str, name: str) -> None:
    """A plain lock and a kept-alive one with a loss watcher."""
    rl = redquorum.Redlock(servers, node_timeout=PATIENT)
    globals()["plain"] = rl.acquire(f"{name}:plain", 5)
    kept = rl.acquire(f"{name}:kept", 5, keep_alive=True)
    kept.lost  # a loss watcher runs on the runtime
    globals()["kept"] = kept


def async_kept(servers: str, name: str) -> None:
    """A kept-alive asyncio lock taken in an ``asyncio.run`` that has ended: its loss event
    belongs to a closed loop."""

    async def main() -> None:
        arl = redquorum.asyncio.Redlock(servers, node_timeout=PATIENT)
        lock = await arl.acquire(f"{name}:async", 5, keep_alive=True)
        lock.lost
        globals()["alock"] = lock

    asyncio.run(main())


def both(servers: str, name: str) -> None:
    """The schedule that crashed: both of the above in one process."""
    sync_kept(servers, name)
    async_kept(servers, name)


def losing(servers: str, name: str) -> None:
    """Locks whose loss fires around the exit: a short TTL, no keep-alive, a watcher each, and
    one whose loss callback runs while the interpreter exits."""
    rl = redquorum.Redlock(servers, node_timeout=PATIENT)
    locks = [rl.acquire(f"{name}:short{i}", 0.5) for i in range(4)]
    for lock in locks:
        lock.lost
    globals()["locks"] = locks
    async_kept(servers, name)


def waiting_threads(servers: str, name: str) -> None:
    """Daemon threads blocked in an acquisition of a lock the main thread holds, and one in a
    keep-alive loss wait, when the interpreter exits."""
    rl = redquorum.Redlock(servers, retry_delay=0.05, node_timeout=PATIENT)
    held = rl.acquire(f"{name}:busy", 10, keep_alive=True)
    globals()["held"] = held
    started = threading.Barrier(4)

    def waiter() -> None:
        started.wait()
        try:
            rl.acquire(f"{name}:busy", 5, timeout=float("inf")).release()
        except redquorum.RedquorumError:
            pass

    def watcher() -> None:
        started.wait()
        held.lost.wait()

    for target in (waiter, waiter, watcher):
        threading.Thread(target=target, daemon=True).start()
    started.wait()


def waiting_tasks(servers: str, name: str) -> None:
    """An asyncio loop in a daemon thread with tasks waiting for a held lock, when the
    interpreter exits."""
    rl = redquorum.Redlock(servers, node_timeout=PATIENT)
    globals()["held"] = rl.acquire(f"{name}:busy", 10, keep_alive=True)
    ready = threading.Event()

    def run_loop() -> None:
        async def main() -> None:
            arl = redquorum.asyncio.Redlock(
                servers, retry_delay=0.05, node_timeout=PATIENT
            )
            waits = [
                asyncio.ensure_future(arl.acquire(f"{name}:busy", 5, timeout=float("inf")))
                for _ in range(3)
            ]
            await asyncio.sleep(0.05)
            ready.set()
            await asyncio.gather(*waits, return_exceptions=True)

        asyncio.run(main())

    threading.Thread(target=run_loop, daemon=True).start()
    ready.wait(10)


def forked(servers: str, name: str) -> None:
    """A parent with locks and a runtime forks children that take their own locks, kept
    alive, and exit through the interpreter too; the parent exits after them."""
    both(servers, name)
    children = []
    for i in range(2):
        pid = os.fork()
        if pid == 0:
            rl = redquorum.Redlock(servers, node_timeout=PATIENT)
            globals()["child_lock"] = rl.acquire(f"{name}:child{i}", 5, keep_alive=True)
            globals()["child_lock"].lost
            sys.stdout.flush()
            return  # the child exits through the interpreter, as the parent does
        children.append(pid)
    for pid in children:
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            print(f"child exited with {code}", file=sys.stderr, flush=True)
            os._exit(3)


SCHEDULES = {
    f.__name__: f
    for f in (sync_kept, async_kept, both, losing, waiting_threads, waiting_tasks, forked)
}


if __name__ == "__main__":
    schedule, servers, name = sys.argv[1:4]
    SCHEDULES[schedule](servers, name)
    print("exiting", flush=True)
