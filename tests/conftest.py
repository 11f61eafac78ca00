"""Suite-wide test set-up: the `virtual_time` marker, Hypothesis without wall-clock limits."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, settings

# No test depends on wall-clock speed: Hypothesis's per-example deadline and its check on
# slow data generation both fail a correct test on a loaded machine.
settings.register_profile("picortex", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("picortex")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "virtual_time: run this trio test on the end-to-end harness's virtual clock "
        "(tests/e2e/harness.py) unless it asks for a clock fixture of its own; "
        "virtual_time(rate=R) also lets the clock run at R times wall speed between jumps",
    )


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
        virtual = virtual_clock()
        virtual.rate = rate
        return trio.run(run_on_virtual_time, fn, clock=virtual, instruments=instruments)

    return run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        function = getattr(item, "function", None)
        marker = item.get_closest_marker("virtual_time")
        if marker is not None and inspect.iscoroutinefunction(function):
            rate = float(marker.kwargs.get("rate", 0.0))
            item.add_marker(pytest.mark.trio(run=_on_virtual_time(rate)))
