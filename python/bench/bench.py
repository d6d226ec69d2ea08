"""Python lock libraries side by side on the same local nodes, in one run: redquorum (threads
and asyncio), the Rust core (`redlock bench`, same nodes), pottery's Redlock, python-redis-lock
and redis-py's Lock.

    pip install target/wheels-release/redquorum-*.whl redis pottery python-redis-lock
    python python/bench/bench.py [--duration 3] [--redlock target/release/redlock]
        [--only redquorum,python-redis-lock] [--nodes 1] [--workloads contended]

Workloads (each worker loops for --duration seconds):
- uncontended: every worker locks a resource of its own, acquire + release = one cycle;
  reported with 1 and 32 workers (threads, or asyncio tasks).
- contended: 32 workers take turns on one resource, waiting for it; reported as hand-offs/s
  (acquisitions by another worker than the last holder) and the p99 wait (start of acquire to
  success).
Nodes come from the project's launcher (`redlock nodes start --count 5`); N = 1 uses the first
node, N = 3 the first three. Prints one Markdown table. Beside the 32-worker rates, this
process's CPU time per cycle or hand-off in µs: every thread of it (Python's, and a library's
own, as redquorum's runtime), not the servers'; "-" for the Rust core, which runs in a process
of its own. `--only` keeps the named libraries (rust, redquorum, pottery, redis-py,
python-redis-lock), `--nodes` the node counts, `--workloads` the workloads (uncontended,
contended); a case left out prints "-". Compare two builds by running them alternately
(A B A B): on a shared machine the same build varies by more than most changes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable, List, Optional, Tuple

import redis
import redis.asyncio as aredis

import redquorum
import redquorum.asyncio

ROOT = Path(__file__).resolve().parents[2]
TTL = 10


def p99(values: List[float]) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * 0.99))]


class Result:
    def __init__(self, cycles: int, handoffs: int, waits: List[float], seconds: float, errors: int,
                 cpu: float = float("nan")):
        self.cycles_per_sec = cycles / seconds
        self.handoffs_per_sec = handoffs / seconds
        self.p99_wait_ms = p99(waits) * 1000
        self.errors = errors
        # This process's CPU time (every thread) per cycle and per hand-off, in µs.
        self.cpu_per_cycle_us = cpu / cycles * 1e6 if cycles else float("nan")
        self.cpu_per_handoff_us = cpu / handoffs * 1e6 if handoffs else float("nan")


def run_threads(workers: int, duration: float, contended: bool,
                cycle: Callable[[str], bool]) -> Result:
    """`cycle(resource)` acquires (waiting if contended) and releases; False if not acquired."""
    stop = time.monotonic() + duration
    counts = [0] * workers
    waits: List[float] = []
    state = {"last": -1, "handoffs": 0, "errors": 0}
    guard = threading.Lock()
    shared = f"bench:{uuid.uuid4().hex[:8]}"

    def worker(i: int) -> None:
        resource = shared if contended else f"{shared}:{i}"
        while time.monotonic() < stop:
            start = time.monotonic()
            try:
                ok = cycle(resource, lambda: note(i, start))
            except Exception:
                ok = False
            if ok:
                counts[i] += 1
            else:
                with guard:
                    state["errors"] += 1

    def note(i: int, start: float) -> None:  # called while holding the lock
        waits.append(time.monotonic() - start)
        if state["last"] != i:
            state["handoffs"] += 1 if state["last"] != -1 else 0
            state["last"] = i

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(workers)]
    began, cpu = time.monotonic(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seconds, cpu = time.monotonic() - began, time.process_time() - cpu
    return Result(sum(counts), state["handoffs"], waits, seconds, state["errors"], cpu)


async def run_tasks(workers: int, duration: float, contended: bool, cycle) -> Result:
    stop = time.monotonic() + duration
    counts = [0] * workers
    waits: List[float] = []
    state = {"last": -1, "handoffs": 0, "errors": 0}
    shared = f"bench:{uuid.uuid4().hex[:8]}"

    def note(i: int, start: float) -> None:
        waits.append(time.monotonic() - start)
        if state["last"] != i:
            state["handoffs"] += 1 if state["last"] != -1 else 0
            state["last"] = i

    async def worker(i: int) -> None:
        resource = shared if contended else f"{shared}:{i}"
        while time.monotonic() < stop:
            start = time.monotonic()
            try:
                ok = await cycle(resource, lambda: note(i, start))
            except Exception:
                ok = False
            if ok:
                counts[i] += 1
            else:
                state["errors"] += 1

    began, cpu = time.monotonic(), time.process_time()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    seconds, cpu = time.monotonic() - began, time.process_time() - cpu
    return Result(sum(counts), state["handoffs"], waits, seconds, state["errors"], cpu)


# --- the libraries: one cycle each -------------------------------------------------------------

def redquorum_sync(urls: List[str]):
    rl = redquorum.Redlock(urls)
    rl.connect()

    def cycle(resource: str, held: Callable[[], None]) -> bool:
        lock = rl.acquire(resource, TTL, timeout=float("inf"))
        held()
        lock.release()
        return True
    return cycle


def redquorum_async(urls: List[str]):
    rl = redquorum.asyncio.Redlock(urls)

    async def cycle(resource: str, held) -> bool:
        lock = await rl.acquire(resource, TTL, timeout=float("inf"))
        held()
        await lock.release()
        return True
    return cycle


def pottery_sync(urls: List[str]):
    from pottery import Redlock
    masters = [redis.Redis.from_url(u) for u in urls]

    def cycle(resource: str, held) -> bool:
        lock = Redlock(key=resource, masters=masters, auto_release_time=TTL)
        if not lock.acquire(blocking=True, timeout=-1):
            return False
        held()
        lock.release()
        return True
    return cycle


def pottery_async(urls: List[str]):
    from pottery import AIORedlock
    masters = [aredis.Redis.from_url(u) for u in urls]

    async def cycle(resource: str, held) -> bool:
        lock = AIORedlock(key=resource, masters=masters, auto_release_time=TTL)
        if not await lock.acquire(blocking=True, timeout=-1):
            return False
        held()
        await lock.release()
        return True
    return cycle


def redis_py_sync(urls: List[str]):
    r = redis.Redis.from_url(urls[0])

    def cycle(resource: str, held) -> bool:
        lock = r.lock(resource, timeout=TTL, sleep=0.01)
        if not lock.acquire(blocking=True):
            return False
        held()
        lock.release()
        return True
    return cycle


def redis_py_async(urls: List[str]):
    r = aredis.Redis.from_url(urls[0])

    async def cycle(resource: str, held) -> bool:
        lock = r.lock(resource, timeout=TTL, sleep=0.01)
        if not await lock.acquire(blocking=True):
            return False
        held()
        await lock.release()
        return True
    return cycle


def redis_lock_sync(urls: List[str]):
    import redis_lock
    r = redis.Redis.from_url(urls[0])

    def cycle(resource: str, held) -> bool:
        lock = redis_lock.Lock(r, resource, expire=TTL)
        if not lock.acquire(blocking=True):
            return False
        held()
        lock.release()
        return True
    return cycle


def rust_core(redlock: str, servers: str, workers: int, contended: bool, duration: float):
    out = subprocess.run(
        [redlock, "--servers", servers, "bench", "--workload",
         "contended" if contended else "uncontended", "--concurrency", str(workers),
         "--duration", f"{duration}s", "--json"],
        capture_output=True, text=True, timeout=duration * 4 + 60, check=True,
    )
    r = json.loads(out.stdout)
    result = Result(0, 0, [], 1, r["errors"])
    result.cycles_per_sec = r["cycles_per_sec"]
    result.handoffs_per_sec = r["handoffs_per_sec"]
    result.p99_wait_ms = r["wait_us"]["p99"] / 1000
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--redlock", default=str(ROOT / "target" / "release" / "redlock"))
    parser.add_argument("--only", default="", help="comma-separated library names")
    parser.add_argument("--nodes", default="1,3,5", help="comma-separated node counts to run")
    parser.add_argument("--workloads", default="uncontended,contended",
                        help="comma-separated workloads to run (uncontended, contended)")
    args = parser.parse_args()
    redlock = args.redlock if Path(args.redlock).exists() else shutil.which("redlock")
    if not redlock:
        sys.exit("the redlock binary is missing: cargo build --release -p redquorum-cli")
    directory = tempfile.mkdtemp(prefix="redquorum-bench-")
    started = json.loads(subprocess.run(
        [redlock, "nodes", "start", "--count", "5", "--dir", directory, "--json"],
        capture_output=True, text=True, check=True).stdout)
    urls = [n["url"] for n in started["nodes"]]
    d = args.duration
    counts = {int(n) for n in args.nodes.split(",") if n}
    workloads = set(filter(None, args.workloads.split(",")))
    if not workloads <= {"uncontended", "contended"}:
        sys.exit(f"unknown workloads: {', '.join(sorted(workloads - {'uncontended', 'contended'}))}")
    uncontended, contended = "uncontended" in workloads, "contended" in workloads
    rows: List[Tuple[str, int, str, Optional[Result], Optional[Result], Optional[Result]]] = []
    try:
        def thread_cases(label, make, ns):
            for n in (n for n in ns if n in counts):
                cycle = make(urls[:n])
                rows.append((label, n, "threads",
                             run_threads(1, d, False, cycle) if uncontended else None,
                             run_threads(32, d, False, cycle) if uncontended else None,
                             run_threads(32, d, True, cycle) if contended else None))
                print(rows[-1][:3], "done", file=sys.stderr)

        def task_cases(label, make, ns):
            for n in (n for n in ns if n in counts):
                async def go():
                    cycle = make(urls[:n])
                    return (await run_tasks(1, d, False, cycle) if uncontended else None,
                            await run_tasks(32, d, False, cycle) if uncontended else None,
                            await run_tasks(32, d, True, cycle) if contended else None)
                rows.append((label, n, "asyncio", *asyncio.run(go())))
                print(rows[-1][:3], "done", file=sys.stderr)

        only = set(filter(None, args.only.split(",")))
        want = lambda name: not only or name in only  # noqa: E731
        if want("rust"):
            for n in sorted(counts):
                servers = ",".join(urls[:n])
                rows.append(("Rust core (`redlock bench`)", n, "tokio tasks",
                             rust_core(redlock, servers, 1, False, d) if uncontended else None,
                             rust_core(redlock, servers, 32, False, d) if uncontended else None,
                             rust_core(redlock, servers, 32, True, d) if contended else None))
        if want("redquorum"):
            thread_cases("redquorum", redquorum_sync, (1, 3, 5))
            task_cases("redquorum.asyncio", redquorum_async, (1, 3, 5))
        if want("pottery"):
            thread_cases("pottery Redlock", pottery_sync, (3, 5))
            task_cases("pottery AIORedlock", pottery_async, (3, 5))
        if want("redis-py"):
            thread_cases("redis-py Lock", redis_py_sync, (1,))
            task_cases("redis-py asyncio Lock", redis_py_async, (1,))
        if want("python-redis-lock"):
            thread_cases("python-redis-lock", redis_lock_sync, (1,))
    finally:
        subprocess.run([redlock, "nodes", "stop", "--dir", directory], capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)

    print(f"{d:g} s per case, {os.cpu_count()} cores shared by client and servers; "
          f"Python {sys.version.split()[0]}")
    print("| library | N | workers | uncontended cycles/s, 1 | uncontended cycles/s, 32 "
          "| its CPU µs/cycle | contended hand-offs/s, 32 | its CPU µs/hand-off "
          "| contended p99 wait (ms) |")
    print("|---|---|---|---|---|---|---|---|---|")

    def cell(result: Optional[Result], field: str, digits: int = 0) -> str:
        value = getattr(result, field, float("nan"))
        return "-" if value != value else f"{value:.{digits}f}"  # NaN: not measured
    for label, n, kind, one, many, busy in rows:
        print(f"| {label} | {n} | {kind} | {cell(one, 'cycles_per_sec')} "
              f"| {cell(many, 'cycles_per_sec')} | {cell(many, 'cpu_per_cycle_us', 1)} "
              f"| {cell(busy, 'handoffs_per_sec')} | {cell(busy, 'cpu_per_handoff_us', 1)} "
              f"| {cell(busy, 'p99_wait_ms', 1)} |")


if __name__ == "__main__":
    main()
