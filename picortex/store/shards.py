"""Which rows belong to the shards a process holds (SPEC 17).

Discord routes a guild to shard `(guild_id >> 22) % count` and DMs to shard 0. The store's
per-shard queries (catch-up's active channels, the handled ids a process keeps in memory)
read only their shards' rows: each backend turns a `ShardScope` into its SQL.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import attrs

Shard = tuple[int, int]
"""(shard id, shard count), as `--shards` names them."""

# When a process takes a shard over, it loads the ids handled on it this recently: Discord
# replays minutes after a loss, and an older id is asked of the database.
ADOPT_SECONDS: Final = 15 * 60.0


def shard_of(guild_id: int | None, count: int) -> int:
    """The shard Discord routes a guild to; DMs (no guild) go to shard 0."""
    return 0 if guild_id is None else (guild_id >> 22) % count


@attrs.frozen
class ShardScope:
    """Rows of these shard ids out of `count`; no ids: no rows at all."""

    count: int
    ids: tuple[int, ...]


def shard_scope(shards: Iterable[Shard] | None) -> ShardScope | None:
    """The scope to read `shards` by; None when they are every shard (nothing to filter).

    Raises:
        ValueError: when the shards are not of one count, or not a valid shard.
    """
    if shards is None:
        return None
    held = set(shards)
    if not held:
        return ShardScope(1, ())
    counts = {count for _, count in held}
    if len(counts) != 1:
        raise ValueError("shards of different counts cannot be held together")
    count = counts.pop()
    ids = tuple(sorted({shard_id for shard_id, _ in held}))
    if not 0 <= ids[0] <= ids[-1] < count:
        raise ValueError(f"shard ids must be from 0 to {count - 1}")
    if len(ids) == count:
        return None
    return ShardScope(count, ids)
