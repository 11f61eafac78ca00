"""Catch-up after a fresh IDENTIFY (SPEC 4): Discord replays nothing to a new session.

For the channels the bot handled messages in lately, of the shard whose session is new only
(another shard's channels are its own session's, or another process's: SPEC 17), fetch the
history of the last `catch_up_seconds` (at the REST client's pace and the cache's
per-channel fetch cooldown) and hand each trusted message never handled to its channel's
mailbox, oldest first, with a `catch-up` event: the normal pipeline decides it. The handled
marks make it exactly once: a message already handled, or in hand, is skipped; one older
than the window never runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, Protocol

from picortex.actors.clients import CatchUpClients
from picortex.actors.failures import error_line
from picortex.core.trust import is_trusted, should_ignore
from picortex.discord.normalize import message_from_payload
from picortex.types import Message, Snowflake, snowflake_at, snowflake_seconds

logger = logging.getLogger(__name__)

# Channels with a handled message in this long are looked at; older ones were quiet anyway.
ACTIVE_CHANNELS_SECONDS: Final = 24 * 3600.0
# At most this many channels, the most recently active first: a bounded burst of fetches.
ACTIVE_CHANNELS_MAX: Final = 50
# Pages of 100 messages read per channel at most: a window's worth in a busy channel.
PAGES_MAX: Final = 5
PAGE: Final = 100


class Deliver(Protocol):
    """The router's hand-over of a caught-up message; False when in hand or handled."""

    def __call__(
        self, message: Message, on_taken: Callable[[], None] | None = None
    ) -> Awaitable[bool]: ...


async def catch_up(
    clients: CatchUpClients,
    deliver: Deliver,
    *,
    shards: Sequence[tuple[int, int]] | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> int:
    """Find and run the missed trusted messages of the window in the channels of `shards`
    (default: every shard this process serves); returns how many were run."""
    window = clients.settings().catch_up_seconds
    if window <= 0:
        return 0
    started = wall_clock()
    try:
        channels = await clients.store.active_channels(
            started - ACTIVE_CHANNELS_SECONDS, ACTIVE_CHANNELS_MAX, shards
        )
    except Exception:
        logger.exception("catch-up: recent channels unavailable")
        return 0
    # From the start of the window, not after the newest handled message: one caught
    # mid-answer by a kill may be older than messages handled after it.
    floor = snowflake_at(started - window)
    ran = 0
    for channel_id, guild_id, _last_handled in channels:
        try:
            messages = await _fetch(clients, channel_id, guild_id, floor)
        except Exception as exc:
            clients.events.emit(
                "error",
                scope="catch-up",
                channel_id=channel_id,
                message=f"history not fetched: {error_line(exc)}",
            )
            continue
        for message in messages:
            age = wall_clock() - snowflake_seconds(message.id)
            if age > window or not _trusted(clients, message):
                continue

            def logged(message: Message = message, age: float = age) -> None:
                clients.events.emit(
                    "catch-up",
                    message_id=message.id,
                    channel_id=message.channel_id,
                    guild_id=message.guild_id,
                    author_id=message.author.id,
                    age_seconds=round(age, 1),
                )

            await clients.rest.hold_slot_for_answer()  # paced behind live answers
            if await deliver(message, logged):
                ran += 1
    return ran


async def _fetch(
    clients: CatchUpClients, channel_id: Snowflake, guild_id: Snowflake | None, floor: Snowflake
) -> list[Message]:
    """The channel's messages after `floor`, oldest first (not already handled or in hand)."""
    found: dict[Snowflake, Message] = {}
    after = floor
    for _ in range(PAGES_MAX):
        await clients.cache.fetch_turn(channel_id)
        # In the background lane: answers to live triggers go first (discord.ratelimit).
        page = await clients.rest.get_channel_messages(
            channel_id, after=after, limit=PAGE, background=True
        )
        for payload in page:
            message = message_from_payload(payload, guild_id=guild_id)
            if isinstance(message, Message) and message.channel_id == channel_id:
                found[message.id] = message
        if len(page) < PAGE or not found:
            break
        after = max(found)
    fresh = []
    for _, message in sorted(found.items()):
        if clients.handled.known(message.id):
            continue
        store = clients.store
        if store.seen(message.id, guild_id) is None and await store.was_handled(
            message.id, guild_id
        ):
            continue  # older than the handled ids kept in memory, and handled
        fresh.append(message)
    return fresh


def _trusted(clients: CatchUpClients, message: Message) -> bool:
    """A person the bot answers: not a bot or system message, and the owner or on the list.

    The bot itself is left out on purpose (its own messages are ignored, SPEC 5 step 1).
    """
    if should_ignore(message, clients.bot.user_id) is not None:
        return False
    return is_trusted(message.author.id, clients.settings().owner_id, clients.store.get_tier)
