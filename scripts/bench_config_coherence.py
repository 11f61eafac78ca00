"""Benchmark of coherent settings on PostgreSQL: how long a trust or runtime config change made
by one process takes to be in force on another (SPEC 17: within one second).

Starts a throwaway PostgreSQL server (Debian's binaries, as the tests do) and two store
actors on one database, each with its own connections, worker thread and listener. Measures
from the change being made on one to it being read on the other: with the listener up, with
its connection cut (it reconnects and reloads), and with a listener that hears nothing (the
slow poll is all that is left).

Usage (from the repository root): python scripts/bench_config_coherence.py [--changes N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import trio

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from picortex.store import StoreActor
from picortex.store.backends import connect_postgres
from picortex.store.pg.database import PgDatabase
from picortex.store.pg.listener import APPLICATION_NAME
from tests.pg import start_server

TIERS: Final = ("user", "trusted", "admin")
PATIENCE_SECONDS: Final = 30.0


async def _in_force(here: StoreActor, there: StoreActor, i: int) -> float:
    """Make change `i` on `here` (a trust change, or every other one a config change); the
    seconds until `there` reads it."""
    start = time.perf_counter()
    if i % 2:
        here.set_tier(1000 + i % 7, TIERS[i % 3])
        done = lambda: there.get_tier(1000 + i % 7) == TIERS[i % 3]  # noqa: E731
    else:
        here.set_runtime_config("agent.max_tokens", str(100 + i))
        done = lambda: there.runtime_config().get("agent.max_tokens") == str(100 + i)  # noqa: E731
    await _until(done)
    return time.perf_counter() - start


async def _until(check: Callable[[], bool]) -> None:
    """Look every millisecond: what is watched happens on other threads, not in trio."""
    with trio.fail_after(PATIENCE_SECONDS):
        while True:
            if check():
                return
            await trio.sleep(0.001)


def _line(name: str, seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    p99 = ms[min(len(ms) - 1, round(0.99 * (len(ms) - 1)))]
    return (
        f"{name:<34} n={len(ms):<4} p50 {statistics.median(ms):7.1f} ms   "
        f"p99 {p99:7.1f} ms   max {ms[-1]:7.1f} ms"
    )


async def bench(url: str, changes: int, killed: int) -> None:
    here, there = StoreActor(connect_postgres(url)), StoreActor(connect_postgres(url))
    db = there.db
    assert isinstance(db, PgDatabase)
    admin = connect_postgres(url)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(here.run)
            await nursery.start(there.run)
            listener = db._listener
            assert listener is not None
            await _until(lambda: listener.listening)
            print(_line("listener up", [await _in_force(here, there, i) for i in range(changes)]))

            cut = []
            for i in range(killed):
                admin._run(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (APPLICATION_NAME,),
                )
                cut.append(await _in_force(here, there, changes + i))
                await _until(lambda: listener.listening)
            print(_line("listener's connection cut", cut))

            setattr(listener, "_on_change", lambda version, reload_all: None)  # noqa: B010
            deaf = [await _in_force(here, there, changes + killed + i) for i in range(killed)]
            print(_line("listener deaf (backstop poll)", deaf))
            listener.stop()
            gone = [await _in_force(here, there, changes + 2 * killed + i) for i in range(killed)]
            print(_line("listener stopped (quick poll)", gone))
            nursery.cancel_scope.cancel()
    finally:
        here.close()
        there.close()
        admin.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=300, help="changes with the listener up")
    parser.add_argument("--killed", type=int, default=20, help="changes per degraded case")
    args = parser.parse_args()
    servers = start_server()
    server = next(servers)
    try:
        trio.run(bench, server.database(), args.changes, args.killed)
    finally:
        servers.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
