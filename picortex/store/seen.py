"""Handled message ids in memory: the newest of them, eight bytes each.

A set or dict of 100,000 snowflakes costs about 14 MiB (an int object, a hash entry and, for
an ordered dict, a link per id), allocated one small object per message throughout a burst,
which pins memory the process cannot give back afterwards. Here the ids live in one sorted
array of 64-bit integers; the newest arrivals wait in a small set until a batch of them is
folded in. Snowflakes are time-ordered, so the newest ids are the largest: the fold appends
them, and the oldest leave from the front.

Below its floor an id is not known either way (the database is asked). A shard taken over
from another process (SPEC 17) brings its recent ids and a floor of its own: above the
floor everything that shard handled is here, below it the database is asked; other shards
keep the floor they had.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable
from typing import Final

# Ids waiting in a set before they are folded into the array. A fold sorts the batch and
# appends it (a few milliseconds for this many); an id older than the array's newest, rare
# since ids are time-ordered, is inserted in place.
BATCH: Final = 8192
# Late ids in one batch inserted one by one; more are merged by sorting everything.
_FEW: Final = 64
# Snowflakes are unsigned 63-bit integers; anything else was never a message id.
_LARGEST: Final = 2**63 - 1
# The guild of an id not said (no guild id is negative): the highest floor of all applies.
ANY_GUILD: Final = -1


class SeenIds:
    """At least the newest `limit` ids added (by value; at most a batch more, not yet folded);
    `floor` is the largest id let go, `top` the highest floor of any shard."""

    def __init__(self, limit: int, ids: Iterable[int] = ()) -> None:
        self._limit = limit
        self._batch = max(1, min(BATCH, limit))
        self._ids = array("q", sorted(i for i in ids if 0 <= i <= _LARGEST))
        self._recent: set[int] = set()
        self.floor = 0
        # Shards taken over: their shard count, and each one's own floor.
        self._count = 1
        self._shard_floors: dict[int, int] = {}
        self.top = 0
        self._trim()

    def __contains__(self, message_id: int) -> bool:
        if message_id in self._recent:
            return True
        ids = self._ids
        if not ids or message_id > ids[-1] or message_id < ids[0]:
            return False
        i = bisect.bisect_left(ids, message_id)
        return ids[i] == message_id

    def __len__(self) -> int:
        return len(self._ids) + len(self._recent)

    def floor_of(self, guild_id: int | None = ANY_GUILD) -> int:
        """The floor for ids of the guild's shard (None: a DM, shard 0; ANY_GUILD: `top`)."""
        if not self._shard_floors:
            return self.floor
        if guild_id == ANY_GUILD:
            return self.top
        shard = 0 if guild_id is None else (guild_id >> 22) % self._count
        return max(self.floor, self._shard_floors.get(shard, 0))

    def adopt(self, shard: tuple[int, int], ids: Iterable[int], floor: int) -> None:
        """Take a shard over: its handled ids above `floor`, all of them (the database asked
        at once); below `floor` its ids are not known here."""
        shard_id, count = shard
        if count != self._count:
            # Floors of another shard count name other guilds: the highest holds for all.
            self.floor = self.top
            self._shard_floors.clear()
            self._count = count
        self._shard_floors[shard_id] = max(self._shard_floors.get(shard_id, 0), floor)
        self.top = max(self.top, floor)
        # Folded in at once: one sort, however many minutes of ids the shard brings.
        self._recent.update(i for i in ids if 0 <= i <= _LARGEST)
        if self._recent:
            self._fold()

    def add(self, message_id: int) -> None:
        """Remember an id; the smallest ones go once there are more than `limit`."""
        if not 0 <= message_id <= _LARGEST:
            return
        recent = self._recent
        recent.add(message_id)
        if len(recent) >= self._batch:
            self._fold()

    def _fold(self) -> None:
        ids = self._ids
        batch = sorted(self._recent)
        self._recent = set()
        newest = ids[-1] if ids else -1
        cut = bisect.bisect_right(batch, newest)
        if cut > _FEW:  # many late ids (a replay): one sort beats many moves
            self._ids = ids = array("q", sorted(set(ids).union(batch[:cut])))
        else:
            for message_id in batch[:cut]:  # older than the newest kept: in place
                i = bisect.bisect_left(ids, message_id)
                if i == len(ids) or ids[i] != message_id:
                    ids.insert(i, message_id)
        ids.extend(batch[cut:])
        self._trim()

    def _trim(self) -> None:
        ids = self._ids
        excess = len(ids) - self._limit
        if excess > 0:
            self.floor = max(self.floor, ids[excess - 1])
            self.top = max(self.top, self.floor)
            del ids[:excess]
