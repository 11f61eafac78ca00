"""What the context cache holds, and its one job: the cached channels in memory (parsed
channels, least recently used first, and the tails of channels that are not) and on disk (the
file index, the delayed writes, eviction by total size), with the live gateway events applied
to them.

`ContextCache` (`picortex.actors.context_cache`) is this state plus the actor around it: its
loops, the live-event queue, context requests and history fetches. What a channel keeps is
`picortex.core.history`; the files are `picortex.store.cache_files`.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import trio

from picortex.core.history import ChannelHistory, plan_eviction
from picortex.errors import CorruptCacheFile
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
    Snowflake,
)

log = logging.getLogger(__name__)

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
# A changed channel is written this long after its first unwritten change, so a busy channel
# costs one write per interval, not one per message; a crash loses at most this much cache,
# which the next session's fetch restores. Encoding a channel is dear: with 1 s, 20 busy
# channels (scripts/bench_pipeline.py) spent about 1 ms of CPU per trigger on it.
WRITE_DELAY: Final = 5.0
# Concurrent file writes (always of different channels): a lone writer is bound by fsync
# latency, while the file system commits concurrent fsyncs together.
WRITERS: Final = 4
# Context requests waiting for the actor; callers wait for room rather than lose a request.


LiveEvent = Message | MessageUpdate | MessageDelete | MessageDeleteBulk | ChannelDelete


class CacheState:
    """The context cache's channels in memory and on disk, and the changes made to them.

    Only changed synchronously in the trio thread (see `ContextCache`); the one await is a
    file write in a worker thread (`_write_loop`, run by the actor).

    Args:
        cache_dir: the directory this cache owns.
        messages_per_channel: the most messages kept for one channel.
        max_bytes: the most bytes all channel files may take together.
        events: the action log.
    """

    def __init__(
        self, cache_dir: Path, *, messages_per_channel: int, max_bytes: int, events: EventSink
    ) -> None:
        self._dir = Path(cache_dir)
        self._cap = messages_per_channel
        self._max_bytes = max_bytes
        self._events = events
        self._tail_dropped = 0  # live messages not kept because the tails were full
        # Cooldowns are kept across restarts so a crash loop cannot hammer Discord; a channel
        # whose file goes may fetch again at once.
        self._last_fetch: dict[Snowflake, float] = {}
        # Channels whose cache holds everything up to the newest live message (memory only).
        self._in_sync: set[Snowflake] = set()
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

    # ----- live updates ------------------------------------------------------------------

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

    def _absorb(
        self, channel_id: Snowflake, guild_id: Snowflake | None, messages: Iterable[Message]
    ) -> ChannelHistory:
        """Merge messages into a channel, marking it for writing when anything changed."""
        channel = self._channel(channel_id)
        if channel.absorb(guild_id, messages, self._cap):
            self._mark_dirty(channel_id)
        return channel

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
