"""The context-cache actor: owns the per-channel message cache directory, keeps it current
from gateway events and incremental history fetches, and builds the context for a trigger.

Its loops only: delayed writes, fetches and their cooldown, the live-event queue. What a
channel keeps is `picortex.core.history`; the files are `picortex.store.cache_files`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import trio

from picortex.actors.clients import FaultCheck, HistoryRest
from picortex.core.context import assemble_context
from picortex.core.history import ChannelHistory, plan_eviction
from picortex.discord.normalize import message_from_payload
from picortex.errors import (
    ContextUnavailable,
    CorruptCacheFile,
    FatalDiscordError,
    PicortexError,
)
from picortex.runtime.groups import lone_error
from picortex.store.cache_files import (
    channel_path,
    encode_channel,
    index_directory,
    read_channel,
    remove_channel,
    write_atomic,
)
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
# Parsed channels kept in memory; the others stay on disk until asked for. A live message
# for a channel beyond them is kept as that channel's tail (only what its file lacks) until
# the next write, so a burst across thousands of channels never holds all their histories:
# 200,000 messages across 2,000 channels peaked at every message in memory, and the process
# kept most of that peak (freed objects scattered over memory it could not give back).
LOADED_CHANNELS: Final = 256
# Live messages waiting in tails, all channels together, beyond which the tails are written
# at once rather than WRITE_DELAY after their first change (about 10 MB of chatter): the
# writers then keep a burst's memory flat instead of holding several seconds of it.
TAIL_MESSAGES: Final = 10_000
# Live messages waiting in tails beyond which a new one is not kept at all: when a burst
# outruns the writers, memory stays flat and the message's channel fetches its history from
# Discord at its next trigger, as after any lost live event.
TAIL_MESSAGES_MAX: Final = 2 * TAIL_MESSAGES
# Gateway events waiting to be applied; beyond this they are dropped and counted, so the
# gateway reader never blocks on the cache.
LIVE_QUEUE: Final = 4096
# Gateway events applied in one go before other tasks get a turn (bounds the latency).
LIVE_BATCH: Final = 512
# A changed channel is written this long after its first unwritten change, so a busy channel
# costs one write per interval, not one per message; a crash loses at most this much cache,
# which the next session's fetch restores. Encoding a channel is dear: with 1 s, 20 busy
# channels (scripts/bench_pipeline.py) spent about 1 ms of CPU per trigger on it.
WRITE_DELAY: Final = 5.0
# Concurrent file writes (always of different channels): a lone writer is bound by fsync
# latency, while the file system commits concurrent fsyncs together.
WRITERS: Final = 4
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


LiveEvent = Message | MessageUpdate | MessageDelete | MessageDeleteBulk | ChannelDelete


class ContextCache:
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
        self._dir = Path(cache_dir)
        self._rest = rest
        self._cap = messages_per_channel
        self._max_bytes = max_bytes
        self._cooldown = fetch_cooldown
        self._events = events
        self._faults = faults
        # Queues live on the object, not in `run`, so they outlive a restart of the actor.
        self._requests_tx, self._requests_rx = trio.open_memory_channel[_Request](REQUEST_QUEUE)
        self._live_tx, self._live_rx = trio.open_memory_channel[LiveEvent](LIVE_QUEUE)
        self._live_pending = 0
        self._live_dropped = 0
        self._tail_dropped = 0  # live messages not kept because the tails were full
        self._fetches = 0
        # Cooldowns are kept across restarts so a crash loop cannot hammer Discord.
        self._last_fetch: dict[Snowflake, float] = {}
        self._inflight: dict[Snowflake, trio.Event] = {}
        # Channels whose cache holds everything up to the newest live message (memory only).
        self._in_sync: set[Snowflake] = set()
        self._serving = False
        # Bumped whenever messages may have been missed; a fetch started before the bump
        # cannot vouch for what came after it, so it does not put its channel in sync.
        self._sync_epoch = 0
        # On-disk index: channel -> file size, least recently written first.
        self._files: OrderedDict[Snowflake, int] = OrderedDict()
        self._total_bytes = 0
        # Parsed channels, least recently used first.
        self._loaded: OrderedDict[Snowflake, ChannelHistory] = OrderedDict()
        # Channels not in memory whose file lacks their newest live messages: those messages
        # (and the sync mark they moved), merged into the file by the next write.
        self._tails: dict[Snowflake, ChannelHistory] = {}
        # ... and the tails being merged into their files right now.
        self._tails_writing: dict[Snowflake, ChannelHistory] = {}
        self._tail_messages = 0  # messages in `_tails`
        # Channels changed since their last write -> when that write is due, oldest change
        # first (so the due times are in order too).
        self._dirty: dict[Snowflake, float] = {}
        self._writing: set[Snowflake] = set()
        # Callers of `flush` waiting: while any are, pending writes are due at once.
        self._flushing = 0
        self._wake = trio.Event()
        self._quiet = trio.lowlevel.ParkingLot()

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

    def _absorb(
        self, channel_id: Snowflake, guild_id: Snowflake | None, messages: Iterable[Message]
    ) -> ChannelHistory:
        """Merge messages into a channel, marking it for writing when anything changed."""
        channel = self._channel(channel_id)
        if channel.absorb(guild_id, messages, self._cap):
            self._mark_dirty(channel_id)
        return channel

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

    def _apply_live(self, event: LiveEvent) -> None:
        if isinstance(event, Message):
            channel_id = event.channel_id
            if channel_id not in self._loaded and (
                channel_id in self._tails or len(self._loaded) >= LOADED_CHANNELS
            ):
                # Memory is full of other channels: no need to read this one's history to
                # add its newest message; the writer merges it into the file.
                if self._tail_messages >= TAIL_MESSAGES_MAX:
                    self._tail_dropped += 1
                    self._lose_sync(channel_id)  # its next trigger fetches what is missing
                    return
                tail = self._tails.get(channel_id)
                if tail is None:
                    tail = self._tails[channel_id] = ChannelHistory(channel_id)
                before = len(tail.messages)
                tail.absorb(event.guild_id, [event], self._cap)
                self._tail_messages += len(tail.messages) - before
                if channel_id in self._in_sync:
                    tail.delivered(event)
                self._mark_dirty(channel_id)
                if self._tail_messages > TAIL_MESSAGES:
                    self._wake.set()
                return
            channel = self._absorb(channel_id, event.guild_id, [event])
            if channel_id in self._in_sync and channel.delivered(event):
                self._mark_dirty(channel_id)
        elif isinstance(event, MessageUpdate):
            self._apply_update(event)
        elif isinstance(event, MessageDeleteBulk):
            self._apply_delete_bulk(event)
        elif isinstance(event, ChannelDelete):
            self._apply_channel_delete(event)
        else:
            self._apply_delete(event)

    def _apply_update(self, update: MessageUpdate) -> None:
        edit = self._channel(update.channel_id).apply_update(update)
        if edit.changed:
            self._mark_dirty(update.channel_id)
        cached = edit.cached
        author = update.author or (cached.author if cached is not None else None)
        content = (
            update.content
            if update.content is not None
            else (cached.content if cached is not None else None)
        )
        self._events.emit(
            "message-edit",
            message_id=update.id,
            channel_id=update.channel_id,
            guild_id=update.guild_id,
            author_id=author.id if author is not None else None,
            content_length=len(content) if content is not None else None,
            cached=cached is not None,
        )

    def _apply_delete(self, delete: MessageDelete) -> None:
        cached = self._channel(delete.channel_id).apply_delete(delete)
        if cached:
            self._mark_dirty(delete.channel_id)
        self._events.emit(
            "message-delete",
            message_id=delete.id,
            channel_id=delete.channel_id,
            guild_id=delete.guild_id,
            cached=cached,
        )

    def _apply_delete_bulk(self, delete: MessageDeleteBulk) -> None:
        cached = self._channel(delete.channel_id).apply_delete_bulk(delete)
        if cached:
            self._mark_dirty(delete.channel_id)
        self._events.emit(
            "message-delete",
            message_ids=list(delete.ids),
            channel_id=delete.channel_id,
            guild_id=delete.guild_id,
            bulk=True,
            cached=cached,
        )

    def _apply_channel_delete(self, delete: ChannelDelete) -> None:
        # Emptied rather than unlinked: the writer may hold the channel; an empty file is
        # small, and is evicted with the least recently written ones.
        if self._channel(delete.id).clear():
            self._mark_dirty(delete.id)
        self._in_sync.discard(delete.id)
        self._last_fetch.pop(delete.id, None)

    def _lose_sync(self, channel_id: Snowflake | None = None) -> None:
        """Take one channel (None: every channel) out of sync, including any fetch of it in
        flight."""
        self._sync_epoch += 1
        if channel_id is None:
            self._in_sync.clear()
        else:
            self._in_sync.discard(channel_id)

    # ----- memory ------------------------------------------------------------------------

    def _channel(self, channel_id: Snowflake) -> ChannelHistory:
        """The parsed channel, from memory or its file (an empty one when there is none)."""
        channel = self._loaded.get(channel_id)
        if channel is not None:
            self._loaded.move_to_end(channel_id)
            return channel
        channel = self._read(channel_id)
        tails = [t for t in (self._tails_writing.get(channel_id), self._pop_tail(channel_id)) if t]
        for tail in tails:  # live messages its file may lack yet
            channel.merge(tail, self._cap)
        if tails:
            self._mark_dirty(channel_id)
        self._loaded[channel_id] = channel
        if len(self._loaded) > LOADED_CHANNELS:
            self._unload_some(keep=channel_id)
        return channel

    def _unload_some(self, keep: Snowflake | None = None) -> None:
        """Drop least recently used channels from memory down to the limit.

        Only channels whose file already holds their state may go, and never `keep`: the
        caller is about to change it.
        """
        excess = len(self._loaded) - LOADED_CHANNELS
        for channel_id in list(self._loaded):
            if excess <= 0:
                break
            if channel_id in self._dirty or channel_id in self._writing or channel_id == keep:
                continue
            del self._loaded[channel_id]
            excess -= 1

    def _mark_dirty(self, channel_id: Snowflake) -> None:
        if channel_id not in self._dirty:
            # A later change rides along with this write; it does not postpone it.
            self._dirty[channel_id] = trio.current_time() + WRITE_DELAY
            self._wake.set()

    # ----- disk --------------------------------------------------------------------------

    def _read(self, channel_id: Snowflake) -> ChannelHistory:
        try:
            channel = read_channel(self._dir, channel_id)
        except CorruptCacheFile as exc:
            self._drop_corrupt(channel_id, str(exc))
            return ChannelHistory(channel_id)
        except OSError as exc:
            self._drop_corrupt(channel_id, f"unreadable: {exc}")
            return ChannelHistory(channel_id)
        if channel is None:
            return ChannelHistory(channel_id)
        channel.trim(self._cap)
        return channel

    def _drop_corrupt(self, channel_id: Snowflake, reason: str) -> None:
        """Log and delete a bad channel file; the next context request fetches afresh."""
        self._report_corrupt(channel_id, reason)
        remove_channel(self._dir, channel_id)
        self._forget_file(channel_id)
        self._last_fetch.pop(channel_id, None)
        self._in_sync.discard(channel_id)

    def _report_corrupt(self, channel_id: Snowflake, reason: str) -> None:
        log.warning("dropping cache file of channel %s: %s", channel_id, reason)
        self._events.emit(
            "error",
            scope="context_cache",
            message=f"corrupt cache file dropped: {reason}",
            channel_id=channel_id,
        )

    def _forget_file(self, channel_id: Snowflake) -> None:
        self._total_bytes -= self._files.pop(channel_id, 0)

    def _load_index(self) -> None:
        """Rebuild the on-disk index (write order from file mtimes) and reset memory."""
        # Changes held only in memory are gone (and a crash may have lost live events).
        self._lose_sync()
        self._loaded.clear()
        self._tails.clear()
        self._tails_writing.clear()
        self._tail_messages = 0
        self._dirty.clear()
        self._writing.clear()
        self._files = OrderedDict(index_directory(self._dir))
        self._total_bytes = sum(self._files.values())
        self._evict()

    def _next_dirty(self) -> tuple[Snowflake | None, float]:
        """The oldest changed channel not being written right now, when its write is due
        (writes of one channel never overlap, so they land in order); else (None, when the
        next one is due)."""
        for channel_id, due in self._dirty.items():
            if channel_id not in self._writing:
                if (
                    self._flushing
                    or due <= trio.current_time()
                    or self._tail_messages > TAIL_MESSAGES
                ):
                    del self._dirty[channel_id]
                    return channel_id, due
                return None, due
        return None, math.inf

    async def _write_loop(self) -> None:
        while True:
            channel_id, due = self._next_dirty()
            if channel_id is None:
                if self._wake.is_set():
                    self._wake = trio.Event()
                with trio.move_on_at(due):
                    await self._wake.wait()
                continue
            job = self._write_job(channel_id)
            if job is None:  # evicted meanwhile
                continue
            self._writing.add(channel_id)
            try:
                self._wrote(channel_id, *await trio.to_thread.run_sync(job))
            except OSError as exc:
                # A tail that did not reach its file is dropped with the channel's sync, so
                # the next trigger fetches it back; a failing disk never makes memory grow.
                self._write_failed(channel_id, exc)
            finally:
                self._tails_writing.pop(channel_id, None)
                self._writing.discard(channel_id)
                if self._dirty:
                    self._wake.set()  # it may have changed again while being written
                self._quiet.unpark_all()

    def _write_all_now(self) -> None:
        """Write every pending channel synchronously (shutdown: no thread, no await)."""
        while self._dirty:
            channel_id = next(iter(self._dirty))
            del self._dirty[channel_id]
            job = self._write_job(channel_id)
            try:
                if job is not None:
                    self._wrote(channel_id, *job())
            except OSError as exc:
                self._write_failed(channel_id, exc)
            finally:
                self._tails_writing.pop(channel_id, None)

    def _write_job(self, channel_id: Snowflake) -> Callable[[], tuple[int, str | None]] | None:
        """The blocking write of a changed channel, returning what `write_with_tail` does;
        None when there is nothing to write (the channel left memory and has no tail).

        A channel in memory is encoded now, in the trio thread, since it may change while its
        bytes are being written; a tail is merged into the file by the job itself.
        """
        channel = self._loaded.get(channel_id)
        if channel is not None:
            data = encode_channel(channel)
            path = channel_path(self._dir, channel_id)

            def write() -> tuple[int, str | None]:
                write_atomic(path, data)
                return len(data), None

            return write
        tail = self._pop_tail(channel_id)
        if tail is None:
            return None
        self._tails_writing[channel_id] = tail
        return functools.partial(write_with_tail, self._dir, tail, self._cap)

    def _wrote(self, channel_id: Snowflake, size: int, problem: str | None) -> None:
        """A write landed; `problem` says why an unreadable old file was dropped."""
        self._written(channel_id, size)
        if problem is not None:
            self._history_lost(channel_id, problem)

    def _pop_tail(self, channel_id: Snowflake) -> ChannelHistory | None:
        tail = self._tails.pop(channel_id, None)
        if tail is not None:
            self._tail_messages -= len(tail.messages)
        return tail

    def _history_lost(self, channel_id: Snowflake, reason: str) -> None:
        """A channel's unreadable file was replaced by its tail: fetch the rest again."""
        self._report_corrupt(channel_id, reason)
        self._last_fetch.pop(channel_id, None)
        self._lose_sync(channel_id)

    def _write_failed(self, channel_id: Snowflake, exc: OSError) -> None:
        # The change stays in memory; the next change to the channel tries again. Should the
        # channel leave memory first, its file lacks the change: fetch it back.
        self._lose_sync(channel_id)
        self._events.emit(
            "error",
            scope="context_cache",
            message=f"cache write failed: {exc}",
            channel_id=channel_id,
        )

    def _written(self, channel_id: Snowflake, size: int) -> None:
        self._forget_file(channel_id)
        self._files[channel_id] = size
        self._total_bytes += size
        self._evict(just_written=channel_id)
        if len(self._loaded) > LOADED_CHANNELS:
            self._unload_some()  # channels pinned while dirty may leave memory now

    def _evict(self, just_written: Snowflake | None = None) -> None:
        """Delete the least recently written files until the cache fits in `max_bytes`.

        Files being written by other writers are left alone (their size is about to change).
        """
        if self._total_bytes <= self._max_bytes:
            return
        pinned = frozenset(self._dirty).union(self._writing - {just_written})
        for channel_id in plan_eviction(self._files.items(), self._max_bytes, pinned=pinned):
            remove_channel(self._dir, channel_id)
            self._forget_file(channel_id)
            self._loaded.pop(channel_id, None)
            self._last_fetch.pop(channel_id, None)
            self._in_sync.discard(channel_id)


def _payload_id(payload: Mapping[str, Any]) -> Snowflake:
    """The id of a Discord message object (a string in Discord's JSON)."""
    try:
        return int(payload["id"])
    except (KeyError, TypeError, ValueError):
        return 0


def write_with_tail(directory: Path, tail: ChannelHistory, cap: int) -> tuple[int, str | None]:
    """Write a channel's file: what it holds with `tail` merged in (runs in a worker thread).

    Returns the file's new size, and why the old file was dropped when it could not be read
    (the file then holds the tail alone).
    """
    problem: str | None = None
    try:
        channel = read_channel(directory, tail.id)
    except CorruptCacheFile as exc:
        channel, problem = None, str(exc)
    except OSError as exc:
        channel, problem = None, f"unreadable: {exc}"
    if channel is None:
        channel = ChannelHistory(tail.id)
    channel.trim(cap)
    channel.merge(tail, cap)
    data = encode_channel(channel)
    write_atomic(channel_path(directory, tail.id), data)
    return len(data), problem
