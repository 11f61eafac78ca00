"""Suite-wide test set-up: the `virtual_time` marker, Hypothesis without wall-clock limits."""

from __future__ import annotations

import gc
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, settings

# No test depends on wall-clock speed: Hypothesis's per-example deadline and its check on
# slow data generation both fail a correct test on a loaded machine.
settings.register_profile("picortex", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("picortex")

# tests.pg: one PostgreSQL server per worker for every module that asks for `pg_url`.
pytest_plugins = ["tests.bytecode", "tests.pg"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "virtual_time: run this trio test on the end-to-end harness's clock (tests/e2e/"
        "harness.py: trio's autojumping MockClock, held while a worker thread or the store "
        "thread works) unless it asks for a clock fixture of its own; "
        "virtual_time(rate=R) also lets the clock run at R times wall speed between jumps",
    )
    config.addinivalue_line(
        "markers",
        "forked_bots: starts `picortex run` processes through tests/e2e/forkserver.py, whose "
        "server is forked from the test process before the tests run",
    )
    config.addinivalue_line(
        "markers",
        "long(seconds=S): takes about S seconds of wall time (child processes, real-time "
        "waits); on several workers it runs in the first half of a worker's share",
    )


@pytest.fixture
def root_logging_restored() -> Iterator[None]:
    """`cli.main` sets up logging for a process; in this one, later tests need theirs back."""
    root = logging.getLogger()
    handlers = [(h, list(h.filters)) for h in root.handlers]
    level = root.level
    yield
    for handler, filters in handlers:
        handler.filters[:] = filters
    root.handlers[:] = [h for h, _ in handlers]
    root.setLevel(level)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    # Forked now, in the process that runs the tests: everything is imported and no test
    # or trio run is under way (tests/e2e/forkserver.py). Not on xdist's controller.
    config = session.config
    controller = not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", 0)
    if not controller and any(item.get_closest_marker("forked_bots") for item in session.items):
        from tests.e2e import forkserver

        forkserver.prefork()


def pytest_sessionfinish(session: pytest.Session) -> None:
    from tests.e2e import forkserver

    forkserver.shutdown()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    # The process exits next. Python's last garbage collections walk every object the suite
    # created (about a second per worker, with the model SDK's classes); a frozen heap is
    # not walked, and the operating system frees it all the same.
    gc.freeze()


def _on_virtual_time(rate: float) -> Callable[..., Any]:
    def run(
        fn: Callable[[], Awaitable[Any]],
        *,
        clock: trio.abc.Clock | None = None,
        instruments: Sequence[trio.abc.Instrument] = (),
    ) -> Any:
        # Imported here: the xdist controller loads this file too, and runs no test.
        from tests.e2e.harness import run_on_virtual_time, virtual_clock

        if clock is not None:
            return trio.run(fn, clock=clock, instruments=instruments)
        return trio.run(run_on_virtual_time, fn, clock=virtual_clock(rate), instruments=instruments)

    return run


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        function = getattr(item, "function", None)
        marker = item.get_closest_marker("virtual_time")
        if marker is not None and inspect.iscoroutinefunction(function):
            rate = float(marker.kwargs.get("rate", 0.0))
            item.add_marker(pytest.mark.trio(run=_on_virtual_time(rate)))
    workerinput = getattr(config, "workerinput", None)  # set on an xdist worker
    if workerinput is not None:
        items[:] = _long_tests_early(items, int(workerinput["workercount"]))


def _long_tests_early(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The order in which each worker's share of the suite has its share of the `long`
    tests spread over the first half, so that none of them starts late and ends the run
    alone, and the workers are not all waiting on long tests at the same time.

    xdist's `worksteal` hands each worker an equal contiguous part of the collection (and an
    idle worker then takes the later half of what a busy one has left, never the first
    half). The long tests are dealt out longest first, back and forth, so each worker's
    share of them takes about as long; within a share they are spaced evenly over its first
    half, each worker's spacing shifted by its number, so that one worker waits on a child
    process or a real-time wait while the others compute. Every worker computes the same
    order, as xdist requires; the other tests keep theirs.
    """
    long = sorted(
        (item for item in items if item.get_closest_marker("long") is not None),
        key=lambda item: -_long_seconds(item),
    )
    if workers < 2 or not long:
        return items
    heads: list[list[pytest.Item]] = [[] for _ in range(workers)]
    for n, item in enumerate(long):
        lap, seat = divmod(n, workers)
        heads[seat if lap % 2 == 0 else workers - 1 - seat].append(item)
    rest = [item for item in items if item.get_closest_marker("long") is None]
    order: list[pytest.Item] = []
    left = len(items)
    for n, head in enumerate(heads):
        size = left // (workers - n)  # as worksteal cuts its parts
        left -= size
        take = max(0, size - len(head))
        share, rest = rest[:take], rest[take:]
        step = (size // 2) // max(1, len(head))
        for k, item in enumerate(head):
            share.insert(min(len(share), k * step + n * step // workers + k), item)
        order += share
    return order + rest


def _long_seconds(item: pytest.Item) -> float:
    marker = item.get_closest_marker("long")
    return float(marker.kwargs.get("seconds", 1.0)) if marker is not None else 0.0
