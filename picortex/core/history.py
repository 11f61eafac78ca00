"""What the context cache keeps of one channel, and how fetched history and gateway events
change it: merged by id, trimmed to the newest few, edited and deleted in place. Pure.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import attrs

from picortex.types import Message, MessageDelete, MessageDeleteBulk, MessageUpdate, Snowflake


def merge_messages(cached: Iterable[Message], incoming: Iterable[Message]) -> list[Message]:
    """Union of two message lists by id, in id order; on the same id `incoming` wins.

    Except for the author's server nickname: history fetched over REST carries no `member`,
    so a nickname seen on the gateway is kept.
    """
    by_id = {m.id: m for m in cached}
    for m in incoming:
        old = by_id.get(m.id)
        if (
            old is not None
            and old.author.nick
            and not m.author.nick
            and old.author.id == m.author.id
        ):
            m = attrs.evolve(m, author=old.author)
        by_id[m.id] = m
    return [by_id[i] for i in sorted(by_id)]


def plan_eviction(
    files: Iterable[tuple[Snowflake, int]],
    max_bytes: int,
    *,
    pinned: frozenset[Snowflake] = frozenset(),
) -> list[Snowflake]:
    """Which channel files to delete so the cache fits in `max_bytes`.

    Args:
        files: (channel id, file size) pairs, least recently written first.
        max_bytes: the size limit of the whole cache directory.
        pinned: channels about to be rewritten; they are never chosen.

    Returns:
        The channels to evict, least recently written first; as few as the order allows.
    """
    entries = list(files)
    total = sum(size for _, size in entries)
    victims: list[Snowflake] = []
    for channel_id, size in entries:
        if total <= max_bytes:
            break
        if channel_id in pinned:
            continue
        victims.append(channel_id)
        total -= size
    return victims


@attrs.frozen
class Edit:
    """What a MESSAGE_UPDATE did to a history."""

    # The cached message as it was before the edit; None when it is not cached.
    cached: Message | None
    # Whether the history changed (an edit repeating what is cached changes nothing).
    changed: bool


@attrs.define
class ChannelHistory:
    """The cached history of one channel, messages in id order (mutable; one owner).

    Every method that changes it returns whether it did, so the owner knows when the
    channel's file needs writing.
    """

    id: Snowflake
    guild_id: Snowflake | None = None
    # History is known complete up to this id: set by fetches, and moved by live messages
    # while the channel is in sync (see `picortex.actors.context_cache.ContextCache`).
    synced_to: Snowflake | None = None
    messages: list[Message] = attrs.Factory(list)

    def index_of(self, message_id: Snowflake) -> int | None:
        """Position of a message in `messages`, or None when it is not cached."""
        i = bisect.bisect_left(self.messages, message_id, key=lambda m: m.id)
        if i < len(self.messages) and self.messages[i].id == message_id:
            return i
        return None

    def trim(self, cap: int) -> None:
        """Keep only the newest `cap` messages.

        In place: a full channel taking a live message drops its oldest one, not copies the rest.
        """
        excess = len(self.messages) - max(cap, 0)
        if excess > 0:
            del self.messages[:excess]

    def absorb(self, guild_id: Snowflake | None, messages: Iterable[Message], cap: int) -> bool:
        """Merge fetched or live messages, keeping the newest `cap`; True when anything changed.

        `guild_id` fills in the channel's guild when it is not known yet.
        """
        if self.guild_id is None:
            self.guild_id = guild_id
        incoming = list(messages)
        if not incoming:
            return False
        last = self.messages[-1].id if self.messages else -1
        if len(incoming) == 1 and incoming[0].id > last:
            self.messages.append(incoming[0])  # the usual live case: a new newest message
        else:
            fresh = [
                m for m in incoming if (i := self.index_of(m.id)) is None or self.messages[i] != m
            ]
            if not fresh:
                return False
            self.messages = merge_messages(self.messages, fresh)
        self.trim(cap)
        return True

    def merge(self, other: ChannelHistory, cap: int) -> None:
        """Take in another history of this channel (live messages kept apart from it, and
        the sync mark they moved), keeping the newest `cap`."""
        self.absorb(other.guild_id, other.messages, cap)
        if other.synced_to is not None:
            self.synced_to = max(self.synced_to or 0, other.synced_to)

    def fetched(self, messages: Sequence[Message]) -> bool:
        """A fetch returned `messages` (already absorbed): history is complete up to the
        newest of them. True when there were any (the file then records the new mark)."""
        if not messages:
            return False
        newest = max(m.id for m in messages)
        self.synced_to = max(self.synced_to or 0, newest)
        return True

    def delivered(self, message: Message) -> bool:
        """A live message arrived while the channel is in sync: history is complete up to it.
        True when `synced_to` moved."""
        if message.id > (self.synced_to or 0):
            self.synced_to = message.id
            return True
        return False

    def apply_update(self, update: MessageUpdate) -> Edit:
        """Apply a MESSAGE_UPDATE to the cached message, if it is cached."""
        i = self.index_of(update.id)
        if i is None:
            return Edit(cached=None, changed=False)
        cached = self.messages[i]
        edited = attrs.evolve(
            cached,
            content=cached.content if update.content is None else update.content,
            edited_timestamp=update.edited_timestamp or cached.edited_timestamp,
            attachments=(cached.attachments if update.attachments is None else update.attachments),
        )
        if edited == cached:
            return Edit(cached=cached, changed=False)
        self.messages[i] = edited
        return Edit(cached=cached, changed=True)

    def apply_delete(self, delete: MessageDelete) -> bool:
        """Remove a deleted message; True when it was cached."""
        i = self.index_of(delete.id)
        if i is None:
            return False
        del self.messages[i]
        return True

    def apply_delete_bulk(self, delete: MessageDeleteBulk) -> int:
        """Remove bulk-deleted messages; returns how many of them were cached."""
        gone = set(delete.ids)
        kept = [m for m in self.messages if m.id not in gone]
        cached = len(self.messages) - len(kept)
        if cached:
            self.messages = kept
        return cached

    def clear(self) -> bool:
        """Forget every message (the channel was deleted); True when there were any."""
        if not self.messages:
            return False
        self.messages = []
        return True
