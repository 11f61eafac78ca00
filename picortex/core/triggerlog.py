"""The in-memory trigger log for `picortex status`: 100 trusted, 30 reserved for untrusted.

Immutable: each change returns a new `TriggerLog`, so the holder just rebinds it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Final

import attrs

from picortex.types import Message, Snowflake

TRUSTED_CAPACITY: Final = 100
UNTRUSTED_CAPACITY: Final = 30  # reserved: untrusted messages are not logged for now
# What a deleted or forgotten message's text becomes: its place stays, its words go.
DELETED_TEXT: Final = "(deleted)"
FORGOTTEN_TEXT: Final = "(forgotten)"


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
    # The ids of the follow-ups, which are the last lines of `context`, in order.
    follow_up_ids: tuple[Snowflake, ...] = ()

    def forget(self, message_ids: Collection[Snowflake], lines: Collection[str]) -> TriggerEntry:
        """The entry without the text of `message_ids`: its own, its follow-ups', and the
        context lines in `lines` (as `format_line` wrote them)."""
        deleted = self.id in message_ids
        first = len(self.context) - len(self.follow_up_ids)
        context = tuple(
            DELETED_TEXT
            if line in lines or (i >= first and self.follow_up_ids[i - first] in message_ids)
            else line
            for i, line in enumerate(self.context)
        )
        if not deleted and context == self.context:
            return self
        return attrs.evolve(
            self,
            content=DELETED_TEXT if deleted else self.content,
            command=None if deleted else self.command,
            context=context,
        )

    def forget_author(self, author_id: Snowflake) -> TriggerEntry:
        """The entry without the words of `author_id` (`forget`): a trigger of theirs keeps
        only its place; its follow-ups, theirs too, go with it."""
        if self.author_id != author_id:
            return self
        first = len(self.context) - len(self.follow_up_ids)
        return attrs.evolve(
            self,
            author_name=FORGOTTEN_TEXT,
            content=FORGOTTEN_TEXT,
            command=None,
            context=(*self.context[:first], *(FORGOTTEN_TEXT for _ in self.follow_up_ids)),
        )

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

    def add_follow_up(
        self, parent_id: Snowflake, line: str, message_id: Snowflake | None = None
    ) -> TriggerLog:
        """The log with `line` (follow-up `message_id`) appended to the context of entry
        `parent_id`.

        Unchanged when the entry has already left the buffer.
        """

        def join(e: TriggerEntry) -> TriggerEntry:
            if e.id != parent_id:
                return e
            ids = (*e.follow_up_ids, message_id) if message_id is not None else e.follow_up_ids
            return attrs.evolve(e, context=(*e.context, line), follow_up_ids=ids)

        return self._each(join)

    def forget(self, message_ids: Collection[Snowflake], lines: Collection[str] = ()) -> TriggerLog:
        """The log without the text of deleted messages (MESSAGE_DELETE, bulk deletes)."""
        ids = frozenset(message_ids)
        return self._each(lambda e: e.forget(ids, lines))

    def forget_author(self, author_id: Snowflake) -> TriggerLog:
        """The log without what `author_id` asked (`forget`)."""
        return self._each(lambda e: e.forget_author(author_id))

    def _each(self, change: Callable[[TriggerEntry], TriggerEntry]) -> TriggerLog:
        return attrs.evolve(
            self,
            trusted=tuple(change(e) for e in self.trusted),
            untrusted=tuple(change(e) for e in self.untrusted),
        )

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
