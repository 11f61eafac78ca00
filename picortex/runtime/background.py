"""Background tasks that outlive the actor that starts them (polls, a slash command's
deferral timer, catch-up, command registration): one nursery, run as a service."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

logger = logging.getLogger(__name__)


class BackgroundTasks:
    """Starts tasks in its own nursery while `run` runs; built before anything uses it."""

    def __init__(self) -> None:
        self._nursery: trio.Nursery | None = None
        self.dropped = 0  # tasks asked for while the nursery was not running

    def spawn(self, fn: Callable[..., Awaitable[object]], *args: Any) -> None:
        """Start `fn(*args)` in the background; never blocks."""
        if self._nursery is None:
            # Only while the service restarts: what it ran is gone with it too.
            self.dropped += 1
            logger.warning("background task %s dropped: not running", getattr(fn, "__name__", fn))
            return
        self._nursery.start_soon(fn, *args)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the nursery the tasks run in, until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
