"""The context-cache actor, and its one job: serve the context for a trigger from the
per-channel message cache, keeping that cache current from gateway events and incremental
history fetches.

Here: the actor's loops, the live-event queue, context requests, history fetches and their
cooldown. What the cache holds in memory and on disk, and how a change is applied, written
and evicted, is `picortex.actors.cache_state`; what a channel keeps is
`picortex.core.history`; the files are `picortex.store.cache_files`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from picortex.actors.cache_state import WRITERS, CacheState, LiveEvent
from picortex.actors.clients import FaultCheck, HistoryRest
from picortex.core.context import assemble_context
from picortex.discord.normalize import message_from_payload
from picortex.errors import (
    ContextUnavailable,
    FatalDiscordError,
    PicortexError,
)
from picortex.runtime.groups import lone_error
from picortex.types import (
    ChannelDelete,
    EventSink,
    Message,
    MessageDelete,
    MessageDeleteBulk,
    MessageUpdate,
    NormalizeError,
    Snowflake,
)

log = logging.getLogger(__name__)

# Discord's largest page for GET /channels/{id}/messages.
PAGE_MAX: Final = 100
# Gateway events waiting to be applied; beyond this they are dropped and counted, so the
# gateway reader never blocks on the cache.
LIVE_QUEUE: Final = 4096
# Gateway events applied in one go before other tasks get a turn (bounds the latency).
LIVE_BATCH: Final = 512
# Context requests waiting for the actor; callers wait for room rather than lose a request.
REQUEST_QUEUE: Final = 256
# Report live-queue overflow at the 1st, 10th, 100th... drop so a flood cannot flood the log.
_OVERFLOW_REPORT_BASE: Final = 10


@attrs.frozen
class CacheStatistics:
    """A snapshot of the cache's size and activity."""

    channels_on_disk: int
    bytes_on_disk: int
    loaded_channels: int
    pending_writes: int
    pending_live_events: int
    live_events_dropped: int
    tail_messages_dropped: int
    fetches: int


@attrs.define
class _Request:
    """One context request travelling from a caller to the actor and back."""

    trigger: Message
    max_messages: int
    max_chars: int
    trusted: Callable[[Snowflake], bool] | None = None
    from_discord: bool = True
    done: trio.Event = attrs.Factory(trio.Event)
    lines: tuple[str, ...] = ()
    failure: str | None = None


class ContextCache(CacheState):
    """Per-channel message cache with incremental history fetch, a fetch cooldown and LRU
    eviction by total size.

    Cache state is only changed synchronously in the trio thread, so a read-modify-write of a
    channel never interleaves with another task; the awaits are REST calls and file writes.
    Writes run in worker threads (an fsync must not stall the gateway reader), a few at a time
    but never two for one channel, and a channel changed again while being written is written
    once more, not once per change. Reads are synchronous: the files are small and usually in
    the page cache. Context requests are served by the actor's own tasks, so a fault while
    building a context crashes this actor, not the caller; queued requests and gateway events
    live on this object and survive a restart.

    A channel is "in sync" from its first successful fetch in a gateway session until that
    session ends: the gateway delivers every message of an unbroken session (a RESUME replays
    what a reconnect missed), so live messages then move `synced_to` and its triggers need no
    fetch at all. Anything that may have lost a message (a new session, a dropped live event,
    a failed write, an actor restart, eviction) takes channels out of sync; their next trigger
    fetches what came after `synced_to` once. The flag lives in memory only: after a process
    restart every channel is out of sync, which is right since the bot was away.

    Args:
        cache_dir: the directory this actor owns (created when missing).
        rest: where channel history comes from.
        messages_per_channel: the most messages kept for one channel.
        max_bytes: the most bytes all channel files may take together.
        fetch_cooldown: the least time, in seconds, between two history fetches of one channel.
        events: the action log.
        faults: fault points checked for every context request (tests only).
    """

    def __init__(
        self,
        cache_dir: Path,
        *,
        rest: HistoryRest,
        messages_per_channel: int,
        max_bytes: int,
        fetch_cooldown: float,
        events: EventSink,
        faults: FaultCheck | None = None,
    ) -> None:
        super().__init__(
            cache_dir, messages_per_channel=messages_per_channel, max_bytes=max_bytes, events=events
        )
        self._rest = rest
        self._cooldown = fetch_cooldown
        self._faults = faults
        # Queues live on the object, not in `run`, so they outlive a restart of the actor.
        self._requests_tx, self._requests_rx = trio.open_memory_channel[_Request](REQUEST_QUEUE)
        self._live_tx, self._live_rx = trio.open_memory_channel[LiveEvent](LIVE_QUEUE)
        self._live_pending = 0
        self._live_dropped = 0
        self._fetches = 0
        self._inflight: dict[Snowflake, trio.Event] = {}
        self._serving = False

    # ----- public face -------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Index the cache directory, then serve context requests and apply gateway events."""
        self._load_index()
        try:
            async with trio.open_nursery() as nursery:
                for _ in range(WRITERS):
                    nursery.start_soon(self._write_loop)
                nursery.start_soon(self._live_loop)
                task_status.started()
                self._serving = True
                async for request in self._requests_rx:
                    nursery.start_soon(self._serve, request)
        except BaseExceptionGroup as group:
            # One failing request is the usual crash: the supervisor should see that error,
            # not a group around it.
            lone = lone_error(group)
            if lone is None:
                raise
            raise lone from None
        finally:
            self._serving = False
            # Synchronous, so cancellation cannot interrupt it: pending changes reach the disk.
            self._write_all_now()

    async def context_for(
        self,
        trigger: Message,
        *,
        max_messages: int,
        max_chars: int,
        trusted: Callable[[Snowflake], bool] | None = None,
        from_discord: bool = True,
    ) -> tuple[str, ...]:
        """The context lines for a trigger, oldest first (see `assemble_context`).

        `trusted` tells trusted authors; the lines of the others are marked `untrusted`.
        A trigger Discord never sent as a message (`from_discord=False`: a slash `ask`) is
        not cached: the cache holds what Discord sent, not stand-ins.

        Fetches from Discord only what the cache lacks, at most once per channel per cooldown.

        Raises:
            ContextUnavailable: the actor stopped or crashed while handling this request.
        """
        channel_id = trigger.channel_id
        if (
            self._serving
            and not self._faults  # an injected cache fault must fail inside the actor
            and channel_id in self._in_sync
            and channel_id in self._loaded
            and channel_id not in self._inflight
            and self._live_pending == 0
        ):
            # In sync, in memory, every live event applied: nothing to fetch, read or wait
            # for, so the answer needs no turn in the actor's queue (two scheduler rounds
            # saved on a trigger). `_refresh` would do just the absorbing here.
            if from_discord:
                self._absorb(channel_id, trigger.guild_id, [trigger])
            return self._lines(trigger, max_messages, max_chars, trusted)
        request = _Request(trigger, max_messages, max_chars, trusted, from_discord)
        await self._requests_tx.send(request)
        await request.done.wait()
        if request.failure is not None:
            raise ContextUnavailable(request.failure)
        return request.lines

    def will_fetch(self, channel_id: Snowflake) -> bool:
        """Whether a trigger in this channel now would read its history from Discord: not in
        sync since this session began, and no fetch under way or in its cooldown."""
        if channel_id in self._in_sync or channel_id in self._inflight:
            return False
        last = self._last_fetch.get(channel_id)
        return last is None or trio.current_time() - last >= self._cooldown

    def recent(self, channel_id: Snowflake, n: int) -> list[Message]:
        """The newest `n` cached messages of a channel, oldest first; no fetch."""
        if n <= 0:
            return []
        return self._channel(channel_id).messages[-n:]

    def on_session_start(self) -> None:
        """A new gateway session began (READY after an IDENTIFY): events may have been missed,
        so every channel fetches after its `synced_to` on its next trigger. Never blocks."""
        self._lose_sync()

    def on_message(self, message: Message) -> None:
        """Take a MESSAGE_CREATE (the bot's own included); never blocks.

        With nothing queued ahead of it, it is applied at once: a live message is usually
        one append to its channel, cheaper than a hop through the queue (chatter bursts
        bring tens of thousands a second). Otherwise it queues behind the rest, in order.
        """
        if self._serving and not self._faults and self._live_pending == 0:
            try:
                self._apply_live(message)
            except Exception:
                # As a crash of the live loop would: the message is lost to the cache, so the
                # channel's next context fetches it. The caller (the router) carries on.
                log.exception("live message %s not applied to the cache", message.id)
                self._lose_sync(message.channel_id)
            return
        self._enqueue(message)

    def on_update(self, update: MessageUpdate) -> None:
        """Queue a MESSAGE_UPDATE; never blocks. Logged as `message-edit` when applied."""
        self._enqueue(update)

    def on_delete(self, delete: MessageDelete | MessageDeleteBulk) -> None:
        """Queue a MESSAGE_DELETE(_BULK); never blocks. Logged as `message-delete` when applied."""
        self._enqueue(delete)

    def on_channel_delete(self, delete: ChannelDelete) -> None:
        """Queue a CHANNEL_DELETE or THREAD_DELETE: the channel's cached messages go."""
        self._enqueue(delete)

    async def flush(self) -> None:
        """Wait until every queued gateway event is applied and every change is on disk.

        Pending writes are made at once rather than after WRITE_DELAY. Only returns while
        `run` is running.
        """
        self._flushing += 1
        try:
            self._wake.set()
            while self._live_pending or self._dirty or self._writing:
                await self._quiet.park()
        finally:
            self._flushing -= 1

    async def fetch_turn(self, channel_id: Snowflake) -> None:
        """Wait until a history fetch of the channel is allowed by the cooldown, and take it.

        For fetches made outside the cache (catch-up), which keep the same per-channel pace.
        """
        while True:
            now = trio.current_time()
            last = self._last_fetch.get(channel_id)
            if last is None or now - last >= self._cooldown:
                self._last_fetch[channel_id] = now
                return
            await trio.sleep(self._cooldown - (now - last))

    def set_fetch_cooldown(self, seconds: float) -> None:
        """Apply a changed `fetch_cooldown_seconds` (runtime config) to later fetches."""
        self._cooldown = seconds

    def statistics(self) -> CacheStatistics:
        """Sizes and counters of the cache right now."""
        return CacheStatistics(
            channels_on_disk=len(self._files),
            bytes_on_disk=self._total_bytes,
            loaded_channels=len(self._loaded),
            pending_writes=len(self._dirty),
            pending_live_events=self._live_pending,
            live_events_dropped=self._live_dropped,
            tail_messages_dropped=self._tail_dropped,
            fetches=self._fetches,
        )

    # ----- context requests --------------------------------------------------------------

    async def _serve(self, request: _Request) -> None:
        trigger = request.trigger
        try:
            if self._faults is not None:
                self._faults.check("cache", trigger.content)
            await self._refresh(trigger, absorb=request.from_discord)
            request.lines = self._lines(
                trigger, request.max_messages, request.max_chars, request.trusted
            )
        except trio.Cancelled:
            request.failure = "the context cache stopped before the context was built"
            raise
        except BaseException as exc:
            request.failure = f"the context cache failed: {type(exc).__name__}"
            self._events.emit(
                "error",
                scope="context_cache",
                message=f"context request dropped: {type(exc).__name__}: {exc}",
                message_id=trigger.id,
                channel_id=trigger.channel_id,
            )
            raise
        finally:
            request.done.set()

    def _lines(
        self,
        trigger: Message,
        max_messages: int,
        max_chars: int,
        trusted: Callable[[Snowflake], bool] | None,
    ) -> tuple[str, ...]:
        """The trigger's context lines from its channel as cached now."""
        return assemble_context(
            self._channel(trigger.channel_id).messages,
            trigger.id,
            max_messages=max_messages,
            max_chars=max_chars,
            trusted=trusted,
        )

    async def _refresh(self, trigger: Message, *, absorb: bool) -> None:
        """Bring the channel's cache up to the trigger, fetching at most once per cooldown."""
        channel_id = trigger.channel_id
        if absorb:
            self._absorb(channel_id, trigger.guild_id, [trigger])
        pending = self._inflight.get(channel_id)
        if pending is not None:
            # Someone is fetching this channel right now: use that fetch, never start another.
            await pending.wait()
            return
        if channel_id in self._in_sync:
            return  # the gateway has delivered everything since this session's fetch
        synced_to = self._channel(channel_id).synced_to
        if synced_to is not None and trigger.id <= synced_to:
            return  # a fetch after the trigger was posted already saw everything before it
        now = trio.current_time()
        last = self._last_fetch.get(channel_id)
        if last is not None and now - last < self._cooldown:
            return
        self._last_fetch[channel_id] = now
        done = self._inflight[channel_id] = trio.Event()
        epoch = self._sync_epoch
        try:
            payloads = await self._fetch_history(channel_id, synced_to)
            self._absorb_payloads(channel_id, trigger.guild_id, payloads)
            if epoch == self._sync_epoch:
                self._in_sync.add(channel_id)
        except FatalDiscordError:
            raise
        except (PicortexError, httpx.HTTPError, OSError) as exc:
            # Answer from what is cached; the cooldown keeps a failing channel from hammering.
            self._events.emit(
                "error",
                scope="context_cache",
                message=f"history fetch failed: {type(exc).__name__}: {exc}",
                channel_id=channel_id,
            )
        finally:
            del self._inflight[channel_id]
            done.set()

    async def _fetch_history(
        self, channel_id: Snowflake, synced_to: Snowflake | None
    ) -> list[dict[str, Any]]:
        """GET what the cache lacks: the newest page the first time, else what came after
        `synced_to`; when more than a page is missing, walk back from the newest message
        until the gap is closed or the per-channel cap is reached."""
        if synced_to is None:
            return await self._get(channel_id, limit=min(self._cap, PAGE_MAX))
        first = await self._get(channel_id, after=synced_to, limit=PAGE_MAX)
        if len(first) < PAGE_MAX:
            return first
        # The first page holds the oldest missing messages; the context wants the newest.
        floor = max(_payload_id(p) for p in first)
        pages = list(first)
        walked = 0
        before: Snowflake | None = None
        while walked < self._cap:
            page = await self._get(channel_id, before=before, limit=PAGE_MAX)
            pages.extend(page)
            walked += len(page)
            if len(page) < PAGE_MAX:
                break
            before = min(_payload_id(p) for p in page)
            if before <= floor:
                break
        return pages

    async def _get(
        self,
        channel_id: Snowflake,
        *,
        after: Snowflake | None = None,
        before: Snowflake | None = None,
        limit: int,
    ) -> list[dict[str, Any]]:
        self._fetches += 1
        return await self._rest.get_channel_messages(
            channel_id, after=after, before=before, limit=limit
        )

    def _absorb_payloads(
        self, channel_id: Snowflake, guild_id: Snowflake | None, payloads: Sequence[dict[str, Any]]
    ) -> None:
        # History carries no guild ids: the channel's is passed so guild messages stay guild ones.
        guild_id = self._channel(channel_id).guild_id or guild_id
        messages: list[Message] = []
        rejected: list[NormalizeError] = []
        for payload in payloads:
            result = message_from_payload(payload, guild_id=guild_id)
            if isinstance(result, NormalizeError):
                rejected.append(result)
            elif result.channel_id == channel_id:
                messages.append(result)
        if rejected:
            self._events.emit(
                "error",
                scope="context_cache",
                message=f"{len(rejected)} history message(s) skipped: {rejected[0].reason}",
                channel_id=channel_id,
            )
        channel = self._absorb(channel_id, guild_id, messages)
        if channel.fetched(messages):
            self._mark_dirty(channel_id)

    # ----- live updates ------------------------------------------------------------------

    def _enqueue(self, event: LiveEvent) -> None:
        try:
            self._live_tx.send_nowait(event)
        except trio.WouldBlock:
            self._live_dropped += 1
            if isinstance(event, Message):
                # The cache now lacks a message: the next trigger must fetch it.
                self._lose_sync(event.channel_id)
            n = self._live_dropped
            while n % _OVERFLOW_REPORT_BASE == 0:
                n //= _OVERFLOW_REPORT_BASE
            if n == 1:
                self._events.emit(
                    "error",
                    scope="context_cache",
                    message=f"live update queue full: {self._live_dropped} event(s) dropped",
                    channel_id=event.channel_id,
                )
        else:
            self._live_pending += 1

    async def _live_loop(self) -> None:
        while True:
            batch = [await self._live_rx.receive()]
            # Apply what is already queued before yielding, so the writer sees a burst of
            # messages to one channel as one change, not one write per message.
            with contextlib.suppress(trio.WouldBlock):
                while len(batch) < LIVE_BATCH:
                    batch.append(self._live_rx.receive_nowait())
            try:
                for event in batch:
                    self._apply_live(event)
            finally:
                self._live_pending -= len(batch)
                self._quiet.unpark_all()


def _payload_id(payload: Mapping[str, Any]) -> Snowflake:
    """The id of a Discord message object (a string in Discord's JSON)."""
    try:
        return int(payload["id"])
    except (KeyError, TypeError, ValueError):
        return 0
