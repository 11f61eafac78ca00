"""When a message counts as handled (SPEC 4): once its decision is final, not when it arrives.

A message is *in hand* from the moment the router takes it until its decision is final (the
answer posted, or skipped, refused, failed and logged); only then is it marked handled in the
store. A kill in between leaves it unmarked, so a replay after RESUME or a catch-up after a new
session handles it again; a mark that exists means it is never handled twice.

The ledger also knows the gateway sequence number of each message in hand, so the session can
be persisted with a `seq` from which a RESUME replays everything not yet final.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from picortex.discord.http import task_fence
from picortex.types import Snowflake

logger = logging.getLogger(__name__)


class HandledStore(Protocol):
    """The store calls the ledger makes (the store actor: memory first, SQLite in groups)."""

    def seen(self, message_id: int) -> bool | None: ...

    def mark_handled(
        self, message_id: int, at: float | None = None, guild_id: int | None = None
    ) -> None: ...

    def note_channel_activity(
        self, channel_id: int, guild_id: int | None, last_handled_id: int, at: float
    ) -> None: ...


class HandledLedger:
    """Messages in hand and messages handled; the safe sequence number to resume from."""

    def __init__(self, store: HandledStore, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        # Message id -> the gateway seq it came with (None: from another session, or fetched).
        self._in_hand: dict[Snowflake, int | None] = {}
        # Shard id -> the last seq routed in its session.
        self._routed: dict[int, int] = {}
        # With many shards in one process, each gateway hands on `seq * shard_count +
        # shard_id`: one number says both the shard and its session's seq.
        self.shard_count = 1
        # Shards whose stopped requests a RESUME would not replay (found by catch-up): their
        # next holder must IDENTIFY and catch up (see `unreplayable_left`).
        self._left_unreplayable: set[int] = set()

    @property
    def in_hand(self) -> int:
        """How many messages are taken but not yet final."""
        return len(self._in_hand)

    def known(self, message_id: Snowflake) -> bool:
        """True when the message is in hand, or handled as far as memory knows.

        The store keeps the recent handled ids in memory; for an older id (`seen` is None)
        the caller asks SQLite with `await store.was_handled(id)` first.
        """
        return message_id in self._in_hand or self._store.seen(message_id) is True

    def take(self, message_id: Snowflake, seq: int | None) -> bool:
        """Take a message in hand; False when it is in hand already or was handled (a replay)."""
        if self.known(message_id):
            return False
        self._in_hand[message_id] = seq
        return True

    def in_hand_of(self, shard_id: int) -> int:
        """How many messages of shard `shard_id`'s session are in hand."""
        count = self.shard_count
        return sum(
            1 for seq in self._in_hand.values() if seq is not None and seq % count == shard_id
        )

    def routed(self, seq: int | None) -> None:
        """The router has taken every dispatch up to `seq` of its shard's current session."""
        if seq is not None:
            self._routed[seq % self.shard_count] = seq

    def new_session(self, seq: int | None = None) -> int | None:
        """A new gateway session (READY, with its `seq`) of one shard (None: of every shard):
        its sequence numbers start again; old ones mean nothing. Returns that shard's id."""
        count = self.shard_count
        shard = None if seq is None else seq % count
        for message_id, held in self._in_hand.items():
            if held is not None and (shard is None or held % count == shard):
                self._in_hand[message_id] = None
        if shard is None:
            self._routed.clear()
        else:
            self._routed.pop(shard, None)
        return shard

    def safe_seq(self, shard_id: int = 0) -> int | None:
        """The seq of shard `shard_id`'s session to persist: a RESUME from it replays every
        message of that shard not yet final."""
        count = self.shard_count
        pending = [
            seq for seq in self._in_hand.values() if seq is not None and seq % count == shard_id
        ]
        if pending:
            return min(pending) // count - 1
        routed = self._routed.get(shard_id)
        return None if routed is None else routed // count

    def finish(
        self, message_ids: Sequence[Snowflake], channel_id: Snowflake, guild_id: Snowflake | None
    ) -> None:
        """The decision on these messages is final: mark them handled (never again); unless
        the task's request was stopped as its shard's lease ended (`picortex.discord.fence`).

        In memory at once, in SQLite with the store's next group (milliseconds), together with
        the channel's activity, which catch-up reads after a new session.
        """
        if not message_ids:
            return
        fence = task_fence()
        if fence is not None and fence.stopped:
            # Its shard's lease ended before it was answered (SPEC 17): not final here, the
            # shard's next holder handles it.
            if any(self._in_hand.get(m, 0) is None for m in message_ids):
                self._left_unreplayable.add(fence.shard)
            self.release(message_ids)
            return
        now = self._clock()
        store = self._store
        for message_id in message_ids:
            self._in_hand.pop(message_id, None)
            # With its guild: the shard's marks are what a process taking it over loads.
            store.mark_handled(message_id, now, guild_id)
        newest = max(message_ids)
        try:
            store.note_channel_activity(channel_id, guild_id, newest, now)
        except Exception:
            logger.exception("could not note activity in channel %s", channel_id)

    def unreplayable_left(self) -> set[int]:
        """The shards (ids) whose requests left to the next holder came without a seq (found
        by catch-up), taken: a RESUME would not replay them, so that shard's saved session
        must go and its next holder IDENTIFY and catch up."""
        left, self._left_unreplayable = self._left_unreplayable, set()
        return left

    def release(self, message_ids: Sequence[Snowflake]) -> None:
        """Let go of messages without a final decision (never queued), so they may come again."""
        for message_id in message_ids:
            self._in_hand.pop(message_id, None)
