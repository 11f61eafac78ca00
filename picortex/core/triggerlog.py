"""The in-memory trigger log for `picortex status`: 100 trusted, 30 reserved for untrusted.

Immutable: each change returns a new `TriggerLog`, so the holder just rebinds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from picortex.types import Message, Snowflake

TRUSTED_CAPACITY: Final = 100
UNTRUSTED_CAPACITY: Final = 30  # reserved: untrusted messages are not logged for now


@attrs.frozen
class TriggerEntry:
    """One trigger; `context` holds the prior messages and, after them, its follow-ups."""

    id: Snowflake
    channel_id: Snowflake
    guild_id: Snowflake | None
    author_id: Snowflake
    author_name: str
    content: str
    timestamp: str
    trusted: bool
    command: str | None = None
    context: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The entry as JSON-ready data (for the status socket)."""
        return {
            "id": self.id,
            "channel_id": self.channel_id,
            "guild_id": self.guild_id,
            "author_id": self.author_id,
            "author_name": self.author_name,
            "content": self.content,
            "timestamp": self.timestamp,
            "trusted": self.trusted,
            "command": self.command,
            "context": list(self.context),
        }


def entry_from_message(
    msg: Message,
    *,
    trusted: bool,
    command: str | None = None,
    context: Sequence[str] = (),
) -> TriggerEntry:
    """Build the entry for a trigger message."""
    return TriggerEntry(
        id=msg.id,
        channel_id=msg.channel_id,
        guild_id=msg.guild_id,
        author_id=msg.author.id,
        author_name=msg.author.username,
        content=msg.text,
        timestamp=msg.timestamp,
        trusted=trusted,
        command=command,
        context=tuple(context),
    )


def _push(
    buffer: tuple[TriggerEntry, ...], entry: TriggerEntry, capacity: int
) -> tuple[TriggerEntry, ...]:
    kept = tuple(e for e in buffer if e.id != entry.id)  # a replayed trigger replaces itself
    return (*kept, entry)[-capacity:] if capacity > 0 else ()


@attrs.frozen
class TriggerLog:
    """The two ring buffers, oldest entry first."""

    trusted: tuple[TriggerEntry, ...] = ()
    untrusted: tuple[TriggerEntry, ...] = ()
    trusted_capacity: int = TRUSTED_CAPACITY
    untrusted_capacity: int = UNTRUSTED_CAPACITY

    def add(self, entry: TriggerEntry) -> TriggerLog:
        """The log with `entry` appended to its buffer (the oldest entry drops when full)."""
        if entry.trusted:
            return attrs.evolve(self, trusted=_push(self.trusted, entry, self.trusted_capacity))
        return attrs.evolve(self, untrusted=_push(self.untrusted, entry, self.untrusted_capacity))

    def add_follow_up(self, parent_id: Snowflake, line: str) -> TriggerLog:
        """The log with `line` (a follow-up) appended to the context of entry `parent_id`.

        Unchanged when the entry has already left the buffer.
        """

        def join(buffer: tuple[TriggerEntry, ...]) -> tuple[TriggerEntry, ...]:
            return tuple(
                attrs.evolve(e, context=(*e.context, line)) if e.id == parent_id else e
                for e in buffer
            )

        return attrs.evolve(self, trusted=join(self.trusted), untrusted=join(self.untrusted))

    def get(self, entry_id: Snowflake) -> TriggerEntry | None:
        """The entry with this id, if still in a buffer."""
        for entry in (*self.trusted, *self.untrusted):
            if entry.id == entry_id:
                return entry
        return None

    def snapshot(self, n: int = 10) -> list[dict[str, object]]:
        """The last `n` trusted triggers as JSON-ready dicts, oldest first."""
        if n <= 0:
            return []
        return [entry.as_dict() for entry in self.trusted[-n:]]
