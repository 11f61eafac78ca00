"""Discord snowflake ids and timestamps as the simulator mints them."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

import trio

from picortex.types import DISCORD_EPOCH_MS

# Worker and process fields of the ids the simulator mints (any fixed values would do).
SIM_WORKER_ID: Final = 1
SIM_PROCESS_ID: Final = 0


def iso_timestamp(unix_ms: int) -> str:
    """Unix milliseconds as Discord writes timestamps: `2017-07-11T17:27:07.299000+00:00`."""
    moment = datetime.fromtimestamp(unix_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


class SnowflakeFactory:
    """Mints strictly increasing snowflakes whose timestamp part is `clock_ms` (the wall clock).

    Ids never go backwards, even when the clock does or many ids share a millisecond:
    the increment field absorbs bursts and the timestamp borrows from the future if needed.
    """

    def __init__(self, clock_ms: Callable[[], int] | None = None) -> None:
        self._clock_ms = clock_ms or _wall_clock_ms
        self._last = 0

    def next(self) -> int:
        """A fresh snowflake greater than every one minted before."""
        now_ms = int(self._clock_ms())
        candidate = ((now_ms - DISCORD_EPOCH_MS) << 22) | (SIM_WORKER_ID << 17)
        candidate |= SIM_PROCESS_ID << 12
        if candidate <= self._last:
            candidate = self._last + 1
        self._last = candidate
        return candidate

    def spaced(self, count: int) -> list[int]:
        """`count` fresh snowflakes one millisecond apart, ending about now.

        Ids minted in one burst share their timestamp, so `(id >> 22) % num_shards` would
        route them all to one shard; things made at once for a large world (guilds) get
        distinct creation times instead, as real ones have.
        """
        now_ms = int(self._clock_ms())
        last_ms = (self._last >> 22) + DISCORD_EPOCH_MS
        first_ms = max(now_ms - count, last_ms + 1)
        low_bits = (SIM_WORKER_ID << 17) | (SIM_PROCESS_ID << 12)
        ids = [((first_ms + i - DISCORD_EPOCH_MS) << 22) | low_bits for i in range(count)]
        if ids:
            self._last = ids[-1]
        return ids

    def many(self, count: int) -> list[int]:
        """`count` fresh snowflakes in increasing order."""
        return [self.next() for _ in range(count)]


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class DiscordClock:
    """Discord's clock in the simulator, in Unix milliseconds: what its snowflakes carry.

    The wall clock, run at the pace of trio's clock inside a trio run. On a test's virtual
    clock, the time a test lets pass (a `trio.sleep`) passes for Discord too, so the messages
    it posts carry times as far apart as it meant them to be; at wall speed the two agree.
    """

    def __init__(self, wall_ms: Callable[[], int] = _wall_clock_ms) -> None:
        self._wall_ms = wall_ms
        # (the trio run, wall ms minus trio ms at its first reading)
        self._anchor: tuple[trio.lowlevel.TrioToken, float] | None = None

    def __call__(self) -> int:
        if not trio.lowlevel.in_trio_run():
            return self._wall_ms()
        token = trio.lowlevel.current_trio_token()
        now_ms = trio.current_time() * 1000
        if self._anchor is None or self._anchor[0] is not token:
            self._anchor = (token, self._wall_ms() - now_ms)
        return int(self._anchor[1] + now_ms)
