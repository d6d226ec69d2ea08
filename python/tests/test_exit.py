"""The interpreter exits cleanly, whatever redquorum is doing at the time.

Every schedule of ``exit_schedules.py`` (locks held, kept alive, watched from a closed loop,
threads and tasks still waiting, forked children) runs in ``RUNS`` fresh processes, four at a
time so that they load the machine as a busy host would: every one must exit with status 0,
print its last line, and say nothing of a panic or a fatal error. A crash here is a race
between our threads and the interpreter's teardown, so it shows up in a few runs out of a
hundred, not in one: hence the count.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import List, Tuple

import redis

from exit_schedules import SCHEDULES

# Runs per schedule: 7 schedules x 30 = 210 processes.
RUNS = 30
SCRIPT = str(Path(__file__).with_name("exit_schedules.py"))


def run(schedule: str, servers: str, name: str) -> Tuple[str, int, str, str]:
    try:
        done = subprocess.run(
            [sys.executable, SCRIPT, schedule, servers, name],
            capture_output=True, text=True, timeout=120,
        )
    except subprocess.TimeoutExpired:
        return schedule, -999, "", "hung at exit"
    return schedule, done.returncode, done.stdout, done.stderr


def test_every_exit_schedule_exits_cleanly(servers, nodes, name):
    jobs = [
        (schedule, f"{name}:{schedule}:{i}")
        for i in range(RUNS)
        for schedule in SCHEDULES
    ]
    assert len(jobs) >= 200
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: run(job[0], servers, job[1]), jobs))
    failed: List[str] = []
    for schedule, code, out, err in results:
        lowered = err.lower()
        if code != 0 or "exiting" not in out or "panic" in lowered or "fatal" in lowered:
            failed.append(f"{schedule}: exit status {code}: {err.strip()[-400:]}")
    assert not failed, f"{len(failed)} of {len(results)} runs failed:\n" + "\n".join(failed[:10])
    # What was not released on the way out expires with its TTL.
    r = redis.Redis.from_url(nodes.urls[0])
    for schedule, key in jobs[: len(SCHEDULES)]:
        for suffix in (":plain", ":kept", ":async", ":busy"):
            left = r.pttl(key + suffix)  # -2: gone; -1 would be a key that never expires
            assert left == -2 or 0 < left <= 10_000, (key + suffix, left)
