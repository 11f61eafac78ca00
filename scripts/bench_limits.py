"""Benchmark of Discord's shared limits on PostgreSQL (SPEC 17): what a grant of the global
REST limit costs, against the 50-150 ms of the Discord call it allows.

Starts a throwaway PostgreSQL server (Debian's binaries, as the tests do) and measures:
- one grant statement on a connection (the round trip alone);
- one `take` of a process's `SharedGlobalLimit`, through its worker thread (what a REST
  request waits when the table has a slot free);
- a burst of GLOBAL_BUDGET requests at once from each of several processes (one worker each):
  the round trips asked, and the most slots started in any second by the table's clock.

Usage (from the repository root): python scripts/bench_limits.py [--grants N] [--processes P]
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import sys
import time
from pathlib import Path

import trio

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from picortex.discord.ratelimit import GLOBAL_BUDGET, GLOBAL_WINDOW
from picortex.discord.shared_limits import Grant, SharedGlobalLimit
from picortex.store.pg.limits import LimitsWorker, PgLimits
from tests.pg import start_server


def _line(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return (
        f"{name:<36} n={len(ms):<5} p50 {statistics.median(ms):6.3f} ms   "
        f"p99 {p99:6.3f} ms   max {ms[-1]:6.3f} ms"
    )


def statement(url: str, grants: int) -> list[float]:
    """One grant statement at a time; the window is spread so the table never runs dry."""
    db = PgLimits.open(url)
    try:
        times = []
        for _ in range(grants):
            start = time.perf_counter()
            db.grant(1, window=0.001)
            times.append(time.perf_counter() - start)
        return times
    finally:
        db.close()


class _Counting(LimitsWorker):
    """A worker that keeps every answer the table gave (for the burst's numbers)."""

    answers: list[Grant]

    def grant(self, wanted: int, done: object) -> None:
        def keep(grant: Grant | None) -> None:
            if grant is not None:
                self.answers.append(grant)
            done(grant)  # type: ignore[operator]

        super().grant(wanted, keep)


async def takes(url: str, grants: int) -> list[float]:
    """One `take` at a time through a worker thread, under the budget per second."""
    worker = LimitsWorker(url, "bench")
    worker.start()
    try:
        limit = SharedGlobalLimit(worker)
        times = []
        for _ in range(grants):
            start = time.perf_counter()
            await limit.take()
            times.append(time.perf_counter() - start)
            await trio.sleep(GLOBAL_WINDOW / 40)  # under the budget: never waits for a slot
        return times
    finally:
        worker.stop()


async def burst(url: str, processes: int) -> tuple[int, int, int, float]:
    """GLOBAL_BUDGET requests at once from each process: (requests, round trips, most slots
    in one second by the table's clock, seconds for all)."""
    workers = [_Counting(url, f"bench {n}") for n in range(processes)]
    for worker in workers:
        worker.answers = []
        worker.start()
    try:
        limits = [SharedGlobalLimit(worker) for worker in workers]
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for limit in limits:
                for _ in range(GLOBAL_BUDGET):
                    nursery.start_soon(limit.take)
        elapsed = time.perf_counter() - start
    finally:
        for worker in workers:
            worker.stop()
    answers = sorted((g.now, g.granted) for w in workers for g in w.answers if g.granted)
    at = [now for now, _ in answers]
    total = [0]
    for _, granted in answers:
        total.append(total[-1] + granted)
    busiest = max(
        total[bisect.bisect_left(at, t + GLOBAL_WINDOW)] - total[i] for i, t in enumerate(at)
    )
    trips = sum(len(w.answers) for w in workers)
    return processes * GLOBAL_BUDGET, trips, busiest, elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grants", type=int, default=500)
    parser.add_argument("--processes", type=int, default=4)
    args = parser.parse_args()
    for server in start_server():
        url = server.database()
        print(_line("grant statement (round trip)", statement(url, args.grants)))
        print(_line("take through the worker thread", trio.run(takes, url, args.grants // 5)))
        requests, trips, busiest, elapsed = trio.run(burst, url, args.processes)
        print(
            f"burst: {requests} requests from {args.processes} processes in {trips} round "
            f"trips, {elapsed:.2f} s; most started in any second: {busiest} "
            f"(budget {GLOBAL_BUDGET})"
        )


if __name__ == "__main__":
    main()
