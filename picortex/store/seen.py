"""Handled message ids in memory: the newest of them, eight bytes each.

A set or dict of 100,000 snowflakes costs about 14 MiB (an int object, a hash entry and, for
an ordered dict, a link per id), allocated one small object per message throughout a burst,
which pins memory the process cannot give back afterwards. Here the ids live in one sorted
array of 64-bit integers; the newest arrivals wait in a small set until a batch of them is
folded in. Snowflakes are time-ordered, so the newest ids are the largest: the fold appends
them, and the oldest leave from the front.
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


class SeenIds:
    """At least the newest `limit` ids added (by value; at most a batch more, not yet folded);
    `floor` is the largest id let go."""

    def __init__(self, limit: int, ids: Iterable[int] = ()) -> None:
        self._limit = limit
        self._batch = max(1, min(BATCH, limit))
        self._ids = array("q", sorted(i for i in ids if 0 <= i <= _LARGEST))
        self._recent: set[int] = set()
        self.floor = 0
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
            del ids[:excess]
