"""Which shards this process may answer for (SPEC 17): each held shard until its lease's
deadline on our clock.

The lease keeper says when a shard is taken (`serve`) or renewed (`extend`) and when this
process stops holding it (`end`: a hand-back past its settle time, a lease lost or taken).
Each request of a held shard carries a `RequestFence` (see `picortex.discord.fence`): a post
for it is refused once the shard is no longer held, and the answers being generated for it
are cancelled at `end`. A request stopped that way is not marked handled: the shard's next
holder answers it. Each check is one dict lookup and one clock read.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import trio

from picortex.types import Snowflake

# How often `stopped` looks whether a shard's cancelled answers have unwound.
STOPPED_POLL_SECONDS: Final = 0.01


def shard_of(guild_id: Snowflake | None, count: int) -> int:
    """The shard Discord routes a guild's events to; DMs go to shard 0."""
    return 0 if guild_id is None else (guild_id >> 22) % count


class RequestFence:
    """One request's fence: its shard, and whether its work was stopped."""

    __slots__ = ("_shards", "shard", "stopped")

    def __init__(self, shards: ShardFence, shard: int) -> None:
        self._shards = shards
        self.shard = shard
        self.stopped = False

    def allows(self) -> bool:
        """Whether the request's shard is still held; once not, the request is stopped."""
        if self._shards.holds(self.shard):
            return True
        self.stopped = True
        return False


class ShardFence:
    """The shards held, each until a deadline on trio's clock, and the answers in progress."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._until: dict[int, float] = {}
        # Shard id -> the cancel scopes of the answers being generated for its requests.
        self._work: dict[int, set[trio.CancelScope]] = {}

    def request(self, guild_id: Snowflake | None) -> RequestFence:
        """The fence of a request from `guild_id` (None: a DM)."""
        return RequestFence(self, shard_of(guild_id, self.count))

    def holds(self, shard_id: int) -> bool:
        """Whether the shard's lease is held now (its deadline still ahead on our clock)."""
        return trio.current_time() < self._until.get(shard_id, -math.inf)

    def serve(self, shard_id: int, until: float) -> None:
        """The shard's lease is taken: held until `until` (our clock)."""
        self._until[shard_id] = until

    def extend(self, shard_id: int, until: float) -> None:
        """The shard's lease is renewed: held until `until`, unless it ended here already (a
        late renewal never serves again a shard whose answers were stopped)."""
        if shard_id in self._until:
            self._until[shard_id] = until

    def end(self, shard_id: int) -> int:
        """The shard is no longer held: its requests are refused from now on and the answers
        in progress for them cancelled. Returns how many were cancelled."""
        self._until.pop(shard_id, None)
        work = self._work.get(shard_id, ())
        for scope in work:
            scope.cancel()
        return len(work)

    async def stopped(self, shard_id: int) -> None:
        """Until the answers cancelled by `end` have unwound (a post already on its way ends
        first, and its handled mark is queued before the lease is released)."""
        # A short poll: the cancelled tasks tell nobody when they are gone; the keeper bounds it.
        while self._work.get(shard_id):  # noqa: ASYNC110
            await trio.sleep(STOPPED_POLL_SECONDS)

    @contextmanager
    def working(self, guild_id: Snowflake | None, scope: trio.CancelScope) -> Iterator[None]:
        """Within the block, `scope` (an answer's) is cancelled if its shard's lease ends."""
        shard_id = shard_of(guild_id, self.count)
        if not self.holds(shard_id):
            scope.cancel()
        work = self._work.setdefault(shard_id, set())
        work.add(scope)
        try:
            yield
        finally:
            work.discard(scope)
