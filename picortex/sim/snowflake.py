"""Discord snowflake ids and timestamps as the simulator mints them."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final

# Discord's epoch: the first millisecond of 2015, in Unix milliseconds.
DISCORD_EPOCH_MS: Final = 1_420_070_400_000
# Worker and process fields of the ids the simulator mints (any fixed values would do).
SIM_WORKER_ID: Final = 1
SIM_PROCESS_ID: Final = 0


def snowflake_ms(snowflake: int) -> int:
    """The Unix time in milliseconds encoded in `snowflake`."""
    return (snowflake >> 22) + DISCORD_EPOCH_MS


def iso_timestamp(unix_ms: int) -> str:
    """Unix milliseconds as Discord writes timestamps: `2017-07-11T17:27:07.299000+00:00`."""
    moment = datetime.fromtimestamp(unix_ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


class SnowflakeFactory:
    """Mints strictly increasing snowflakes whose timestamp part is the wall clock.

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
