"""A shared database out of reach, said once a minute, and its return, said once (SPEC 17).

The store's thread meets the outage at every statement; this watch, on the event loop, only
looks at when the connection was lost, so an outage costs one log line and one `error` event
per minute however many statements fail meanwhile, and one `database` event when it is back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, NoReturn

import trio

from picortex.core.events import rfc3339

if TYPE_CHECKING:
    from picortex.types import EventSink

logger = logging.getLogger(__name__)

# An outage is said again this often while it lasts.
COMPLAINT_SECONDS: Final = 60.0
# How often the watch looks (one attribute read).
WATCH_SECONDS: Final = 1.0


def database_state(unreachable_since: float | None) -> str:
    """What `picortex status` shows: "up", or "unreachable since <RFC 3339 UTC>"."""
    if unreachable_since is None:
        return "up"
    return f"unreachable since {rfc3339(unreachable_since)}"


class OutageWatch:
    """Tells the log and the action log when the database went out of reach and came back.

    Args:
        where: the database as messages name it (never its URL).
        since: when the connection was lost (Unix seconds), or None while it is up.
        kept: how many writes wait to be committed (told in the messages).
        events: the action log, if any.
    """

    def __init__(
        self,
        where: str,
        since: Callable[[], float | None],
        kept: Callable[[], int],
        events: EventSink | None,
    ) -> None:
        self._where = where
        self._since = since
        self._kept = kept
        self._events = events
        self._down: float | None = None  # the outage being told (its start)
        self._said_at = 0.0  # event-loop time of the last complaint

    async def run(self) -> NoReturn:
        """Look every WATCH_SECONDS until cancelled."""
        while True:
            self.look()
            await trio.sleep(WATCH_SECONDS)

    def look(self) -> None:
        """Say what changed since the last look (and a lasting outage, once a minute)."""
        since = self._since()
        now = trio.current_time()
        if since is not None:
            if self._down is None or now - self._said_at >= COMPLAINT_SECONDS:
                self._down = self._down or since
                self._said_at = now
                self._complain(since)
        elif self._down is not None:
            down, self._down = self._down, None
            message = f"{self._where} can be reached again; queued writes are being committed"
            logger.warning("%s", message)
            if self._events is not None:
                self._events.emit(
                    "database", state="up", message=message, unreachable_since=rfc3339(down)
                )

    def _complain(self, since: float) -> None:
        kept = self._kept()
        message = (
            f"{self._where} cannot be reached since {rfc3339(since)}; reconnecting, "
            f"{kept} writes kept to commit once it is back"
        )
        logger.error("%s", message)
        if self._events is not None:
            self._events.emit("error", scope="database", message=message)
