"""Serving a database line (`picortex.store.pg.line`) inside a test, and waiting on what it
hands back: a real server answers on its own time, so tests wait with a generous timeout."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import trio

from picortex.store.pg.line import Line

WAIT_SECONDS = 30.0
L = TypeVar("L", bound=Line)


@asynccontextmanager
async def serving(line: L) -> AsyncIterator[L]:
    """`line` running (and connected) for the block."""
    async with trio.open_nursery() as nursery:
        await nursery.start(line.run)
        await until(lambda: line.ready)
        yield line
        nursery.cancel_scope.cancel()


async def until(predicate: Callable[[], object]) -> None:
    """Until `predicate()` is true (WAIT_SECONDS at most)."""
    with trio.fail_after(WAIT_SECONDS):
        while not predicate():
            await trio.sleep(0.005)
