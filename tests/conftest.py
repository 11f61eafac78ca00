"""Suite-wide test set-up: the `virtual_time` marker, Hypothesis without wall-clock limits."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, settings

from tests.e2e.harness import run_on_virtual_time, virtual_clock

# No test depends on wall-clock speed: Hypothesis's per-example deadline and its check on
# slow data generation both fail a correct test on a loaded machine.
settings.register_profile("picortex", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("picortex")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "virtual_time: run this trio test on the end-to-end harness's virtual clock "
        "(tests/e2e/harness.py) unless it asks for a clock fixture of its own",
    )


def _run_on_virtual_time(
    fn: Callable[[], Awaitable[Any]],
    *,
    clock: trio.abc.Clock | None = None,
    instruments: Sequence[trio.abc.Instrument] = (),
) -> Any:
    if clock is not None:
        return trio.run(fn, clock=clock, instruments=instruments)
    return trio.run(run_on_virtual_time, fn, clock=virtual_clock(), instruments=instruments)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        function = getattr(item, "function", None)
        if item.get_closest_marker("virtual_time") is not None and inspect.iscoroutinefunction(
            function
        ):
            item.add_marker(pytest.mark.trio(run=_run_on_virtual_time))
