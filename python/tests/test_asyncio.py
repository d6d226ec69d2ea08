"""The asyncio API, against real servers. Each test runs its own loop (asyncio.run)."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import threading
import time

import pytest

from redquorum import ConfigError, LockBusy, LockLost, NotHeld, Quarantined
from redquorum.asyncio import Redlock

from conftest import PATIENT_NODE_TIMEOUT


def run(coroutine, limit=60):
    return asyncio.run(asyncio.wait_for(coroutine, limit))


def test_exclusion_under_asyncio_tasks(servers, name):
    async def main():
        rl = Redlock(servers, retry_delay=0.05, node_timeout=PATIENT_NODE_TIMEOUT)
        state = {"value": 0, "inside": 0, "overlaps": 0}

        async def work():
            for _ in range(15):
                async with rl.lock(name, ttl=10, timeout=30):
                    state["inside"] += 1
                    if state["inside"] != 1:
                        state["overlaps"] += 1
                    seen = state["value"]
                    await asyncio.sleep(0.0005)  # other tasks run while we hold it
                    state["value"] = seen + 1
                    state["inside"] -= 1

        await asyncio.gather(*(work() for _ in range(16)))
        return state

    assert run(main()) == {"value": 16 * 15, "inside": 0, "overlaps": 0}


def test_one_lock_object_shared_by_eight_tasks(servers, nodes, name):
    """One ``rl.lock(...)`` object, entered by many tasks at once: each ``async with``
    releases the lock it took, even when a holder whose TTL ran out leaves its block after the
    next holder came in."""

    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        shared = rl.lock(name, ttl=10)
        state = {"value": 0, "inside": 0, "overlaps": 0}

        async def work():
            for _ in range(10):
                async with shared:
                    state["inside"] += 1
                    if state["inside"] != 1:
                        state["overlaps"] += 1
                    seen = state["value"]
                    await asyncio.sleep(0.0005)
                    state["value"] = seen + 1
                    state["inside"] -= 1

        await asyncio.gather(*(work() for _ in range(8)))

        short = rl.lock(f"{name}:late", ttl=0.5)
        a_in, b_in, a_out = asyncio.Event(), asyncio.Event(), asyncio.Event()
        seen = {}

        async def a():
            try:
                async with short:
                    a_in.set()
                    await b_in.wait()  # our lock has expired; B holds it now
            except NotHeld:
                seen["a"] = "not held"
            a_out.set()

        async def b():
            await a_in.wait()
            async with short as lock:
                b_in.set()
                await a_out.wait()
                values = [c.get(f"{name}:late") for c in nodes.clients()]
                seen["b_kept"] = sum(v == lock.value.encode() for v in values)
                with pytest.raises(LockBusy):
                    await rl.try_acquire(f"{name}:late", 5)

        await asyncio.gather(a(), b())
        return state, seen

    state, seen = run(main())
    assert state == {"value": 80, "inside": 0, "overlaps": 0}
    assert seen.get("a") == "not held", seen
    assert seen.get("b_kept", 0) >= 2, seen


def test_a_lock_object_is_a_decorator_of_coroutines(servers, name):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)

        @rl.lock(name, ttl=10)
        async def job(x):
            return x * 2, await rl.status(name)

        doubled, status = await job(21)
        with pytest.raises(ConfigError):
            @rl.lock(name, ttl=10)
            def not_for_tasks():
                pass
        return doubled, status, rl.quorum

    doubled, status, quorum = run(main())
    assert doubled == 42
    assert sum(s.state == "held" for s in status) >= quorum, status


def test_two_tasks_never_release_each_others_lock(servers, nodes, name):
    """redis-py's failure: its Lock keeps the token in a thread-local, so two tasks on one
    thread share it and one can release the other's lock. Here each handle is its own."""

    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        first_taken, second_taken = asyncio.Event(), asyncio.Event()
        outcome = {}

        async def first():
            lock = await rl.acquire(name, 0.5)
            first_taken.set()
            await second_taken.wait()  # our lock expired; the second task holds it now
            with pytest.raises(NotHeld):
                await lock.release()
            outcome["first"] = "refused"

        async def second():
            await first_taken.wait()
            lock = await rl.acquire(name, 10, timeout=10)
            second_taken.set()
            await asyncio.sleep(0.2)  # while the first task tries to release
            # On a quorum; the last node may still hold the first task's expiring key, or
            # have the second's `SET` on its way, but never lose the second's value.
            values = [r.get(name) for r in nodes.clients()]
            ours = lock.value.encode()
            outcome["value_kept"] = (
                sum(v == ours for v in values) >= 2 and values.count(None) <= 1
            )
            outcome["second"] = await lock.release()

        await asyncio.gather(first(), second())
        return outcome

    outcome = run(main())
    assert outcome["first"] == "refused"
    assert outcome["value_kept"] and outcome["second"] >= 2


def test_another_task_releases_the_lock(servers, name):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        lock = await rl.acquire(name, 10)
        confirmed = await asyncio.create_task(lock.release())
        again = await rl.try_acquire(name, 5)
        await again.release()
        return confirmed

    assert run(main()) >= 2


def test_a_release_short_of_a_quorum_ends_the_block_with_a_warning(servers, nodes, name, caplog):
    """As in the blocking API: the block's work succeeded, so its release's shortfall (two of
    three nodes hold writes back past the release's patience) is a warning, not an exception."""
    slow = nodes.clients()[:2]

    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        async with rl.lock(name, ttl=10):
            for r in slow:
                r.client_pause(3000, all=False)

    try:
        with caplog.at_level(logging.WARNING, logger="redquorum"):
            run(main())
        assert any("too few" in m for m in caplog.messages), caplog.text
    finally:
        for r in slow:
            r.client_unpause()


def test_locked(servers, name):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        free = await rl.locked(name)
        async with rl.lock(name, ttl=10):
            held = await rl.locked(name)
        return free, held

    free, held = run(main())
    assert free is None and 0 < held <= 10


def test_busy_and_fencing(servers, name):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        async with rl.lock(name, ttl=10) as held:
            with pytest.raises(LockBusy):
                await rl.try_acquire(name, 10)
            first = held.fence
        async with rl.lock(name, ttl=10) as held:
            return first, held.fence

    first, second = run(main())
    assert second > first


def test_loss_is_an_asyncio_event(servers, nodes, name):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        lock = await rl.acquire(name, 2, keep_alive=True)
        await asyncio.sleep(4.5)  # more than twice the TTL
        assert not lock.lost.is_set() and not lock.is_lost()
        for r in nodes.clients():
            r.delete(name)
        await asyncio.wait_for(lock.lost.wait(), 5)
        assert lock.is_lost()
        with pytest.raises(LockLost):
            await lock.release()

    run(main())


def test_with_lock_cancels_the_work_when_the_lock_is_lost(servers, nodes, name):
    cancelled = []

    async def work(lock):
        for r in nodes.clients():
            r.delete(name)  # somebody deletes our keys
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        start = time.monotonic()
        with pytest.raises(LockLost):
            await rl.with_lock(name, 1, work)
        return time.monotonic() - start

    assert run(main()) < 20
    assert cancelled == [True]


def test_lost_is_set_by_the_clock_while_a_task_keeps_the_loop_busy(servers, nodes, name):
    """The loop is busy (a task that does not await) past the lock's deadline: ``lost`` reads
    the clock, so it says "lost" once the keys may be gone, though the watcher's call to the
    loop has not run yet; and ``wait()`` returns at the deadline on its own."""

    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        lock = await rl.acquire(name, 0.3)
        lost = lock.lost
        assert not lost.is_set()
        end = time.monotonic() + 0.6
        while time.monotonic() < end:
            pass  # the loop runs nothing else meanwhile
        assert not any(r.exists(name) for r in nodes.clients()), "setup: the keys expired"
        assert lost.is_set(), "lost unset after the keys expired"
        waited = await rl.acquire(name + ":waited", 0.3)
        assert await asyncio.wait_for(waited.lost.wait(), 10)
        assert waited.remaining() == 0.0
        released = await rl.acquire(name + ":released", 10)
        signal = released.lost
        await released.release()
        assert asyncio.Event.is_set(signal), "a release sets lost before it returns"

    run(main())


def test_a_wait_for_quarantined_nodes_says_why_with_the_remedy(name, caplog):
    """Issue 45, asyncio: the first lock on a new server raises at once with the remedy; a wait
    with a timeout logs why within a second or two."""
    from conftest import Nodes

    fresh = Nodes(1)

    async def main():
        rl = Redlock(fresh.servers)
        with pytest.raises(Quarantined) as e:
            await rl.acquire(name, 10)
        assert "rl.mark_nodes(brand_new=True)" in str(e.value)
        patient = Redlock(fresh.servers, retry_attempts=100)  # outlasts the quarantine
        with caplog.at_level(logging.WARNING, logger="redquorum"):
            with pytest.raises(Quarantined):
                await patient.acquire(name, 10, timeout=2.5)
        warned = [r.getMessage() for r in caplog.records if r.name == "redquorum"]
        assert any("rl.mark_nodes(brand_new=True)" in w for w in warned), warned
        await rl.mark_nodes(brand_new=True)
        lock = await rl.try_acquire(name, 10)
        await lock.release()

    try:
        for r in fresh.clients():
            r.delete("redlock-node-marker")
        run(main())
    finally:
        fresh.stop()


def test_with_lock_returns_the_work_result(servers, name):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)

        async def work(lock):
            await asyncio.sleep(0.01)
            return lock.fence

        return await rl.with_lock(name, 5, work)

    assert isinstance(run(main()), int)


def test_the_loop_keeps_running_while_a_task_waits(servers, name):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        async with rl.lock(name, ttl=10):
            t = asyncio.create_task(ticker())
            with pytest.raises(LockBusy):
                await rl.acquire(name, 10, timeout=1)
            t.cancel()
        return ticks

    # The ticker sleeps 1 ms a tick: hundreds in the second's wait on an idle machine, a few
    # dozen on a loaded one; a wait that blocked the loop would let it tick once or not at all.
    assert run(main()) > 10


def test_semaphore_read_write_election(servers, name):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        a = await rl.acquire(f"{name}:s", 10, permits=2)
        b = await rl.acquire(f"{name}:s", 10, permits=2)
        with pytest.raises(LockBusy):
            await rl.try_acquire(f"{name}:s", 10, permits=2)
        await a.release()
        await b.release()
        async with rl.read_lock(f"{name}:rw", 10):
            with pytest.raises(LockBusy):
                await rl.acquire_write(f"{name}:rw", 10, blocking=False)
        leading = await rl.campaign(f"{name}:e", "me", 5)
        leader = await rl.leader(f"{name}:e")
        assert leader.identity == "me" and leader.term == leading.fence
        watch = rl.observe(f"{name}:e")
        assert (await watch.changed()).identity == "me"
        await leading.release()
        assert await watch.changed() is None
        assert [s.state for s in await rl.status(f"{name}:e")] == ["free"] * 3

    run(main())


def test_mark_nodes_does_not_block_the_loop(servers):
    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        beat = asyncio.create_task(ticker())
        marks = await rl.mark_nodes()
        beat.cancel()
        return marks, ticks

    marks, ticks = run(main())
    # The launcher's markers vouch already: nothing to mark, and nothing refused.
    assert len(marks) == 3 and all(not marked for _, marked, _ in marks), marks
    assert all("already vouches" in what for _, _, what in marks), marks
    assert ticks > 0, "the loop ran while the nodes were marked"


def sets(nodes) -> int:
    """How many SET commands the nodes have run, in all."""
    return sum(c.info("commandstats").get("cmdstat_set", {}).get("calls", 0) for c in nodes.clients())


def test_a_cancelled_wait_stops_trying(servers, nodes, name):
    """Cancelling a task that waits for a busy lock drops the acquisition on the runtime: once
    the lock is released, the cancelled waiter does not take it (not even for a moment)."""

    async def main():
        holder = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        waiter = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT, retry_delay=0.05)
        lock = await holder.acquire(name, 30)
        waiting = asyncio.create_task(waiter.acquire(name, 10, timeout=float("inf")))
        await asyncio.sleep(0.5)  # refused, waiting (and polling every 50 ms)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.sleep(0.3)  # an attempt already on its way lands
        before = sets(nodes)
        await lock.release()
        await asyncio.sleep(1)  # 20 of the waiter's polls, had it kept trying
        return before, sets(nodes), await holder.locked(name)

    before, after, locked = run(main())
    assert after == before, "the cancelled waiter went on trying"
    assert locked is None


def test_every_awaitable_of_many_tasks_completes(servers, name):
    """32 tasks taking turns: 2,560 acquisitions and as many releases, each awaited with a
    deadline, all complete (no wake-up of the loop is lost)."""

    async def main():
        rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
        done = 0

        async def worker():
            nonlocal done
            for _ in range(80):
                lock = await asyncio.wait_for(rl.acquire(name, 10, timeout=float("inf")), 30)
                done += 1
                await asyncio.wait_for(lock.release(), 30)

        await asyncio.gather(*(worker() for _ in range(32)))
        return done

    assert run(main(), limit=300) == 32 * 80


def test_one_manager_serves_one_event_loop_after_another(servers, nodes, name):
    rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)

    async def cycle():
        lock = await rl.acquire(name, 10)
        return await lock.release()

    for _ in range(3):
        assert run(cycle()) == len(nodes.clients())  # released on every node


def test_event_loops_on_many_threads_at_once_never_deadlock(servers, name):
    """Six threads each running event loop after event loop, with the GIL switching as often as
    it can: registering a loop runs no Python while our lock of the loops is held (a review
    reproduced a deadlock between that lock and the GIL after 162 loops)."""
    rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)
    finished = []

    def loops():
        for _ in range(300):
            asyncio.run(rl.locked(name))
        finished.append(True)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=loops, daemon=True) for _ in range(6)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 90
        for t in threads:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        sys.setswitchinterval(interval)
    assert len(finished) == 6, "event loops on several threads deadlocked"


def test_a_wait_left_on_a_closed_loop_takes_no_lock(servers, name):
    """A task still waiting for a lock when its loop is closed (not cancelled) is collected by
    Python; its acquisition is dropped then, so the lock, once released, stays free instead of
    being taken by an outcome nobody will read."""
    from redquorum import Redlock as Blocking

    holder = Blocking(servers, node_timeout=PATIENT_NODE_TIMEOUT)
    held = holder.acquire(name, 30)
    rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT, retry_delay=0.05)
    loop = asyncio.new_event_loop()
    task = loop.create_task(rl.acquire(name, 30, timeout=float("inf")))
    loop.run_until_complete(asyncio.sleep(0.5))  # refused, waiting
    loop.close()
    del task
    gc.collect()
    held.release()
    time.sleep(1.5)  # 30 of its polls, had it kept trying
    assert holder.locked(name) is None, "a waiter nobody waits for took the lock"


def test_loops_that_are_dropped_unclosed_leave_no_descriptors_behind(servers, name):
    rl = Redlock(servers, node_timeout=PATIENT_NODE_TIMEOUT)

    def descriptors() -> int:
        return len(os.listdir("/proc/self/fd"))

    def one_loop():
        loop = asyncio.new_event_loop()
        loop.run_until_complete(rl.locked(name))
        # not closed: dropped

    one_loop()  # the runtime's own descriptors, once
    gc.collect()
    before = descriptors()
    for _ in range(50):
        one_loop()
    gc.collect()
    # Each loop has an epoll descriptor and a self-pipe, and we added a socket pair: 5 per
    # loop (250 here) if anything kept the loops alive.
    assert descriptors() - before < 25
