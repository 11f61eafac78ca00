"""Which shards one process serves (SPEC 17): `2/8`, `0-3,8-11/16`, `auto/16`.

Pure: a parsed spec, or one sentence saying what is wrong with the text.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

from picortex.errors import ConfigError

# Far above any bot's shard count; keeps `auto/N` and ranges from building huge tuples.
SHARD_COUNT_MAX: Final = 16_384

_NUMBER: Final = re.compile(r"[0-9]+")


@attrs.frozen
class ShardSpec:
    """Shard ids (ascending, no duplicates) out of `count`; `auto`: whatever is free."""

    ids: tuple[int, ...]
    count: int
    auto: bool = False

    def held(self, capacity: int | None = None) -> tuple[int, ...]:
        """The shards one process without a cluster takes: every one named (`auto`: all),
        the first `capacity` of them when capped."""
        ids = tuple(range(self.count)) if self.auto else self.ids
        return ids if capacity is None else ids[:capacity]

    def __str__(self) -> str:
        if self.auto:
            return f"auto/{self.count}"
        return f"{_ranges(self.ids)}/{self.count}"


def _ranges(ids: tuple[int, ...]) -> str:
    """`0,1,2,5` -> `0-2,5`."""
    parts: list[str] = []
    start = prev = ids[0]
    for shard_id in (*ids[1:], None):
        if shard_id is not None and shard_id == prev + 1:
            prev = shard_id
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if shard_id is not None:
            start = prev = shard_id
    return ",".join(parts)


def _number(text: str, what: str, whole: str) -> int:
    if not _NUMBER.fullmatch(text):
        raise ConfigError(f"{whole}: {what} must be a whole number, got {text!r}")
    return int(text)


def parse_shards(text: str, name: str = "shards") -> ShardSpec:
    """`IDS/COUNT` where IDS is `auto` or comma-separated ids and ranges (`0-3,8`); `name`
    (the flag or key) starts any error.

    Raises:
        ConfigError: one sentence naming what is wrong.
    """
    ids_text, slash, count_text = text.strip().rpartition("/")
    whole = f"{name} {text.strip()!r}"  # how every error starts
    if not slash or not ids_text.strip():
        raise ConfigError(f"{whole} must look like IDS/COUNT (such as 2/8, 0-3,8-11/16 or auto/16)")
    count = _number(count_text.strip(), "the shard count", whole)
    if not 1 <= count <= SHARD_COUNT_MAX:
        raise ConfigError(
            f"{whole}: the shard count must be from 1 to {SHARD_COUNT_MAX}, got {count}"
        )
    if ids_text.strip().lower() == "auto":
        return ShardSpec(ids=(), count=count, auto=True)
    ids: list[int] = []
    for part in ids_text.split(","):
        part = part.strip()
        if not part:
            raise ConfigError(f"{whole} has an empty entry between commas")
        low_text, dash, high_text = part.partition("-")
        low = _number(low_text.strip(), "a shard id", whole)
        high = _number(high_text.strip(), "a shard id", whole) if dash else low
        if high < low:
            raise ConfigError(f"{whole}: the range {part} runs backwards")
        if high >= count:
            raise ConfigError(
                f"{whole}: shard {high} is out of range (ids go from 0 to {count - 1})"
            )
        ids.extend(range(low, high + 1))
    seen: set[int] = set()
    for shard_id in ids:
        if shard_id in seen:
            raise ConfigError(f"{whole} names shard {shard_id} twice")
        seen.add(shard_id)
    return ShardSpec(ids=tuple(sorted(ids)), count=count)
