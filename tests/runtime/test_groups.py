"""The one error worth reporting from a nursery's exception group."""

from __future__ import annotations

import pytest
import trio

from picortex.runtime.groups import lone_error


async def test_a_crash_with_cancelled_siblings_surfaces_as_itself() -> None:
    crash = ValueError("boom")

    async def fail() -> None:
        await trio.sleep(0)
        raise crash

    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.sleep_forever)
            nursery.start_soon(fail)
    assert lone_error(caught.value) is crash


def test_a_nested_group_is_looked_into() -> None:
    crash = KeyError("k")
    group = BaseExceptionGroup("outer", [BaseExceptionGroup("inner", [crash])])
    assert lone_error(group) is crash


def test_two_errors_or_an_interrupt_stay_a_group() -> None:
    assert lone_error(ExceptionGroup("two", [ValueError(), KeyError()])) is None
    assert lone_error(BaseExceptionGroup("stop", [KeyboardInterrupt()])) is None
