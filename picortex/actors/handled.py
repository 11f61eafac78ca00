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
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from picortex.types import Snowflake

logger = logging.getLogger(__name__)

# Handled ids kept in memory in front of the store's seen-events table.
SEEN_MEMORY: Final = 50_000
# Seen-event rows older than this are pruned: Discord never replays that far back.
SEEN_KEEP_SECONDS: Final = 7 * 24 * 3600
# Recall looks back 7 days (SPEC 8); keep a little more, then let the table shrink.
MEMORY_KEEP_SECONDS: Final = 14 * 24 * 3600
PRUNE_EVERY: Final = 10_000


class HandledStore(Protocol):
    """The store calls the ledger makes."""

    def is_seen(self, message_id: int) -> bool: ...

    def mark_handled(
        self, message_ids: Sequence[int], channel_id: int, guild_id: int | None, at: float
    ) -> None: ...

    def prune_seen(self, older_than: float) -> int: ...

    def prune_memory(self, older_than: float) -> int: ...


class HandledLedger:
    """Messages in hand and messages handled; the safe sequence number to resume from."""

    def __init__(self, store: HandledStore, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        self._seen: OrderedDict[Snowflake, None] = OrderedDict()
        # Message id -> the gateway seq it came with (None: from another session, or fetched).
        self._in_hand: dict[Snowflake, int | None] = {}
        self._routed_seq: int | None = None
        self._finished = 0

    @property
    def in_hand(self) -> int:
        """How many messages are taken but not yet final."""
        return len(self._in_hand)

    def known(self, message_id: Snowflake) -> bool:
        """True when the message is in hand or was handled (in this process or before)."""
        if message_id in self._in_hand or message_id in self._seen:
            return True
        try:
            return self._store.is_seen(message_id)
        except Exception:
            logger.exception("seen-events table unavailable; relying on memory")
            return False

    def take(self, message_id: Snowflake, seq: int | None) -> bool:
        """Take a message in hand; False when it is in hand already or was handled (a replay)."""
        if self.known(message_id):
            return False
        self._in_hand[message_id] = seq
        return True

    def routed(self, seq: int | None) -> None:
        """The router has taken every dispatch up to `seq` of the current session."""
        if seq is not None:
            self._routed_seq = seq

    def new_session(self) -> None:
        """A new gateway session (READY): sequence numbers start again; old ones mean nothing."""
        for message_id in self._in_hand:
            self._in_hand[message_id] = None
        self._routed_seq = None

    def safe_seq(self) -> int | None:
        """The seq to persist: a RESUME from it replays every message not yet final."""
        pending = [seq for seq in self._in_hand.values() if seq is not None]
        if pending:
            return min(pending) - 1
        return self._routed_seq

    def finish(
        self, message_ids: Sequence[Snowflake], channel_id: Snowflake, guild_id: Snowflake | None
    ) -> None:
        """The decision on these messages is final: mark them handled (never again)."""
        if not message_ids:
            return
        now = self._clock()
        try:
            self._store.mark_handled(message_ids, channel_id, guild_id, now)
        except Exception:
            logger.exception("could not mark %d messages handled", len(message_ids))
        for message_id in message_ids:
            self._in_hand.pop(message_id, None)
            self._seen[message_id] = None
        while len(self._seen) > SEEN_MEMORY:
            self._seen.popitem(last=False)
        self._finished += len(message_ids)
        if self._finished >= PRUNE_EVERY:
            self._finished = 0
            try:
                self._store.prune_seen(now - SEEN_KEEP_SECONDS)
                self._store.prune_memory(now - MEMORY_KEEP_SECONDS)
            except Exception:
                logger.exception("could not prune old seen events and memory")

    def release(self, message_ids: Sequence[Snowflake]) -> None:
        """Let go of messages without a final decision (never queued), so they may come again."""
        for message_id in message_ids:
            self._in_hand.pop(message_id, None)
