"""Tests for the context-cache actor against a fake REST history that counts every call."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from picortex.actors import cache_state as state
from picortex.actors import context_cache as cc
from picortex.actors.context_cache import ContextCache, ContextUnavailable
from picortex.discord.normalize import message_from_payload
from picortex.discord.rest import DiscordHTTPError
from picortex.errors import FaultInjected
from picortex.types import Message, MessageDelete, MessageUpdate
from tests.helpers import RecordingSink

GUILD = 500
CH = 1000
ALICE: dict[str, Any] = {"id": "11", "username": "alice", "global_name": "Alice"}
BOB: dict[str, Any] = {"id": "12", "username": "bob", "global_name": None}
BOT: dict[str, Any] = {"id": "99", "username": "picortex", "bot": True}
# 2024-01-01T00:00:00Z in Discord's epoch; one message per second from there.
_BASE_MS = 1_704_067_200_000 - 1_420_070_400_000


class FakeHistory:
    """Discord's GET /channels/{id}/messages over an in-memory history, counting calls."""

    def __init__(self, *, delay: float = 0.0) -> None:
        self.payloads: dict[int, list[dict[str, Any]]] = {}
        self.calls: list[dict[str, Any]] = []
        self.delay = delay
        self.fail_with: Exception | None = None
        self._seq = 0

    def post(
        self,
        content: str,
        *,
        channel_id: int = CH,
        author: dict[str, Any] = ALICE,
        files: tuple[str, ...] = (),
    ) -> Message:
        """Add one message to the history (as if a user posted it); returns it normalized."""
        self._seq += 1
        ms = _BASE_MS + self._seq * 1000
        stamp = datetime.fromtimestamp((ms + 1_420_070_400_000) / 1000, UTC)
        payload: dict[str, Any] = {
            "id": str((ms << 22) + self._seq % 4096),
            "channel_id": str(channel_id),
            "author": author,
            "content": content,
            "timestamp": stamp.isoformat(),
            "attachments": [
                {"id": str(9000 + n), "filename": f, "size": 10} for n, f in enumerate(files)
            ],
        }
        self.payloads.setdefault(channel_id, []).append(payload)
        message = message_from_payload(payload, guild_id=GUILD)
        assert isinstance(message, Message)
        return message

    def ids(self, channel_id: int = CH) -> list[int]:
        return [int(p["id"]) for p in self.payloads.get(channel_id, [])]

    async def get_channel_messages(
        self,
        channel_id: int,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        self.calls.append({"channel": channel_id, "after": after, "before": before, "limit": limit})
        if self.delay:
            await trio.sleep(self.delay)
        if self.fail_with is not None:
            raise self.fail_with
        history = self.payloads.get(channel_id, [])
        if after is not None:
            chosen = [p for p in history if int(p["id"]) > after][:limit]
        elif before is not None:
            chosen = [p for p in history if int(p["id"]) < before][-limit:]
        else:
            chosen = history[-limit:]
        return list(reversed(chosen))


class Faults:
    """Raises for the cache actor when the content holds a marker."""

    def check(self, actor: str, content: str) -> None:
        if actor == "cache" and "BOOM" in content:
            raise FaultInjected(f"{actor}:BOOM")


def make_cache(
    tmp_path: Path,
    rest: FakeHistory,
    sink: RecordingSink | None = None,
    *,
    cap: int = 200,
    max_bytes: int = 50 * 1024 * 1024,
    cooldown: float = 5.0,
    faults: Faults | None = None,
) -> ContextCache:
    return ContextCache(
        tmp_path / "cache",
        rest=rest,
        messages_per_channel=cap,
        max_bytes=max_bytes,
        fetch_cooldown=cooldown,
        events=sink if sink is not None else RecordingSink(),
        faults=faults,
    )


@asynccontextmanager
async def running(cache: ContextCache) -> AsyncIterator[ContextCache]:
    async with trio.open_nursery() as nursery:
        await nursery.start(cache.run)
        yield cache
        await cache.flush()
        nursery.cancel_scope.cancel()


async def ctx(cache: ContextCache, trigger: Message, n: int = 15) -> tuple[str, ...]:
    return await cache.context_for(trigger, max_messages=n, max_chars=4000)


def texts(lines: tuple[str, ...]) -> list[str]:
    """The message texts of context lines (each a JSON string after the author)."""
    decoder = json.JSONDecoder()
    found = []
    for line in lines:
        rest = line.split('": ', 1)[1]
        text, end = decoder.raw_decode(rest)
        found.append(text + rest[end:])
    return found


def file_doc(tmp_path: Path, channel_id: int = CH) -> dict[str, Any]:
    doc = orjson.loads((tmp_path / "cache" / f"{channel_id}.json").read_bytes())
    assert isinstance(doc, dict)
    return doc


# ----- the fetch sequence -----------------------------------------------------------------


async def test_first_run_fetches_only_the_newest_page(tmp_path: Path) -> None:
    rest = FakeHistory()
    for i in range(150):
        rest.post(f"old {i}")
    trigger = rest.post("@bot what now?")
    async with running(make_cache(tmp_path, rest)) as cache:
        lines = await ctx(cache, trigger)
        assert rest.calls == [{"channel": CH, "after": None, "before": None, "limit": 100}]
        assert texts(lines) == [f"old {i}" for i in range(135, 150)]
        assert [m.id for m in cache.recent(CH, 500)] == rest.ids()[-100:]
    doc = file_doc(tmp_path)
    assert len(doc["messages"]) == 100
    assert doc["synced_to"] == trigger.id


async def test_first_page_is_capped_by_messages_per_channel(tmp_path: Path) -> None:
    rest = FakeHistory()
    for i in range(60):
        rest.post(f"m{i}")
    trigger = rest.post("hi")
    async with running(make_cache(tmp_path, rest, cap=30)) as cache:
        await ctx(cache, trigger)
        assert rest.calls[0]["limit"] == 30
        assert len(cache.recent(CH, 100)) == 30


async def test_incremental_fetch_asks_only_after_the_newest_cached(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    for i in range(20):
        rest.post(f"m{i}")
    first = rest.post("first question")
    async with running(make_cache(tmp_path, rest)) as cache:
        await ctx(cache, first)
        cache.on_session_start()  # a new gateway session: what follows was never delivered
        await trio.sleep(10)
        for i in range(3):
            rest.post(f"new {i}", author=BOB)
        second = rest.post("second question")
        lines = await ctx(cache, second)
    assert len(rest.calls) == 2
    assert rest.calls[1] == {"channel": CH, "after": first.id, "before": None, "limit": 100}
    assert texts(lines)[-4:] == ["first question", "new 0", "new 1", "new 2"]


async def test_incremental_state_survives_a_restart(tmp_path: Path) -> None:
    rest = FakeHistory()
    for i in range(5):
        rest.post(f"m{i}")
    first = rest.post("q1")
    async with running(make_cache(tmp_path, rest)) as cache:
        await ctx(cache, first)
    rest.post("while we were away")
    second = rest.post("q2")
    async with running(make_cache(tmp_path, rest)) as cache:
        lines = await ctx(cache, second)
    assert rest.calls[1]["after"] == first.id
    assert texts(lines)[-2:] == ["q1", "while we were away"]


async def test_a_gap_of_two_pages_follows_pages(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    first = rest.post("q1")
    async with running(make_cache(tmp_path, rest)) as cache:
        await ctx(cache, first)
        cache.on_session_start()
        await trio.sleep(10)
        for i in range(150):
            rest.post(f"gap {i}")
        second = rest.post("q2")
        lines = await ctx(cache, second)
        assert [c["after"] for c in rest.calls] == [None, first.id, None]
        # Everything since q1 is cached, in order and without duplicates.
        assert [m.id for m in cache.recent(CH, 500)] == rest.ids()
    assert texts(lines)[-1] == "gap 149"


async def test_a_huge_gap_keeps_the_newest_up_to_the_cap(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    first = rest.post("q1")
    async with running(make_cache(tmp_path, rest, cap=200)) as cache:
        await ctx(cache, first)
        cache.on_session_start()
        await trio.sleep(10)
        for i in range(1000):
            rest.post(f"gap {i}")
        second = rest.post("q2")
        lines = await ctx(cache, second)
        # One page after the cached id, then back from the newest until the cap is full.
        assert len(rest.calls) == 4
        assert rest.calls[1]["after"] == first.id
        assert rest.calls[2]["before"] is None and rest.calls[2]["after"] is None
        assert rest.calls[3]["before"] == rest.ids()[-100]
        assert [m.id for m in cache.recent(CH, 500)] == rest.ids()[-200:]
    assert texts(lines) == [f"gap {i}" for i in range(985, 1000)]


async def test_cooldown_allows_one_fetch_per_window(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest, cooldown=5.0)) as cache:
        await ctx(cache, rest.post("a"))
        # Out of sync (messages may be missing), so only the cooldown holds fetches back.
        cache.on_session_start()
        await trio.sleep(1)
        await ctx(cache, rest.post("b"))
        await trio.sleep(3.9)
        await ctx(cache, rest.post("c"))
        assert len(rest.calls) == 1
        await trio.sleep(0.2)  # now 5.1 s after the first fetch
        await ctx(cache, rest.post("d"))
        assert len(rest.calls) == 2
        await ctx(cache, rest.post("e"))
        assert len(rest.calls) == 2


async def test_a_concurrent_burst_makes_one_fetch_per_channel(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory(delay=2.0)  # slow enough that every request arrives during the fetch
    channels = [CH, CH + 1, CH + 2]
    for c in channels:
        for i in range(30):
            rest.post(f"{c} m{i}", channel_id=c)
    triggers = [rest.post(f"q{i}", channel_id=channels[i % 3]) for i in range(60)]
    results: dict[int, tuple[str, ...]] = {}

    async def ask(trigger: Message) -> None:
        results[trigger.id] = await ctx(cache, trigger)

    async with running(make_cache(tmp_path, rest)) as cache:
        async with trio.open_nursery() as nursery:
            for trigger in triggers:
                nursery.start_soon(ask, trigger)
        assert sorted(c["channel"] for c in rest.calls) == channels
        # Every waiter got the fetched history, not an empty cache.
        assert all(len(results[t.id]) == 15 for t in triggers)
        # Past the cooldown, a trigger the first fetch already covered needs no fetch at all.
        await trio.sleep(60)
        await ctx(cache, triggers[0])
        assert len(rest.calls) == 3


async def test_live_messages_fill_the_context_without_a_fetch(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest)) as cache:
        await ctx(cache, rest.post("q1"))
        own = rest.post("my answer", author=BOT)
        cache.on_message(own)
        cache.on_message(rest.post("thanks", author=BOB, files=("cat.png",)))
        await cache.flush()
        lines = await ctx(cache, rest.post("q2"))
        assert len(rest.calls) == 1
        assert texts(lines) == ["q1", "my answer", 'thanks [attachments: "cat.png"]']
        assert lines[1].startswith('[2024-01-01 00:00 UTC] "picortex": ')
    assert own.id in [m["id"] for m in file_doc(tmp_path)["messages"]]


async def test_a_burst_of_changes_to_a_channel_is_written_once_per_delay(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    rest = FakeHistory()
    writes: list[int] = []  # messages in each write of the file
    real_write = state.write_atomic

    def counting(path: Path, data: bytes) -> None:
        writes.append(len(orjson.loads(data)["messages"]))
        real_write(path, data)

    monkeypatch.setattr(state, "write_atomic", counting)
    other = CH + 1
    async with trio.open_nursery() as nursery:
        cache = make_cache(tmp_path, rest)
        await nursery.start(cache.run)
        # (Writes run in a thread, which the autojump clock does not wait for: the write's
        # start is watched through `pending_writes`, its count at the end.)
        for _ in range(9):  # 9 messages over 0.8 s: one write, WRITE_DELAY after the first
            cache.on_message(rest.post("m"))
            await trio.sleep(0.1)
        assert cache.statistics().pending_writes == 1
        await trio.sleep(state.WRITE_DELAY - 0.8)  # just past WRITE_DELAY after the first
        assert cache.statistics().pending_writes == 0  # due: taken without a flush
        cache.on_message(rest.post("late", channel_id=other))
        await trio.sleep(state.WRITE_DELAY / 2)
        assert cache.statistics().pending_writes == 1  # not due yet
        await trio.sleep(state.WRITE_DELAY)
        assert cache.statistics().pending_writes == 0
        await cache.flush()
        nursery.cancel_scope.cancel()
    assert sorted(writes) == [1, 9]  # one write per channel


async def test_flush_writes_pending_changes_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with trio.open_nursery() as nursery:
        cache = make_cache(tmp_path, rest)
        await nursery.start(cache.run)
        start = trio.current_time()
        cache.on_message(rest.post("m"))
        await cache.flush()
        assert trio.current_time() - start < state.WRITE_DELAY
        assert [r["text"] for r in file_doc(tmp_path)["messages"]] == ["m"]
        nursery.cancel_scope.cancel()


async def test_pending_changes_reach_the_disk_when_the_actor_stops(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with trio.open_nursery() as nursery:
        cache = make_cache(tmp_path, rest)
        await nursery.start(cache.run)
        cache.on_message(rest.post("m"))
        while cache.statistics().pending_live_events:
            await trio.sleep(0)
        assert cache.statistics().pending_writes == 1
        nursery.cancel_scope.cancel()  # before the write is due
    assert [r["text"] for r in file_doc(tmp_path)["messages"]] == ["m"]


# ----- live updates -----------------------------------------------------------------------


async def test_updates_and_deletes_change_the_file_and_are_logged(tmp_path: Path) -> None:
    rest = FakeHistory()
    sink = RecordingSink()
    kept = rest.post("typo hre")
    gone = rest.post("oops")
    async with running(make_cache(tmp_path, rest, sink)) as cache:
        cache.on_message(kept)
        cache.on_message(gone)
        cache.on_update(
            MessageUpdate(
                id=kept.id,
                channel_id=CH,
                guild_id=GUILD,
                content="typo here",
                edited_timestamp="2024-01-01T00:10:00+00:00",
            )
        )
        cache.on_delete(MessageDelete(id=gone.id, channel_id=CH, guild_id=GUILD))
        cache.on_update(MessageUpdate(id=12345, channel_id=CH, content="never seen"))
        cache.on_delete(MessageDelete(id=54321, channel_id=CH))
        await cache.flush()
        assert [m.content for m in cache.recent(CH, 10)] == ["typo here"]
    records = file_doc(tmp_path)["messages"]
    assert [(r["id"], r["text"], r["edited"]) for r in records] == [
        (kept.id, "typo here", "2024-01-01T00:10:00+00:00")
    ]
    assert sink.of("message-edit") == [
        {
            "event": "message-edit",
            "message_id": kept.id,
            "channel_id": CH,
            "guild_id": GUILD,
            "author_id": 11,
            "content_length": 9,
            "cached": True,
        },
        {
            "event": "message-edit",
            "message_id": 12345,
            "channel_id": CH,
            "guild_id": None,
            "author_id": None,
            "content_length": 10,
            "cached": False,
        },
    ]
    assert sink.of("message-delete") == [
        {
            "event": "message-delete",
            "message_id": gone.id,
            "channel_id": CH,
            "guild_id": GUILD,
            "cached": True,
        },
        {
            "event": "message-delete",
            "message_id": 54321,
            "channel_id": CH,
            "guild_id": None,
            "cached": False,
        },
    ]


async def test_the_live_queue_overflows_by_dropping_and_counting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rest = FakeHistory()
    sink = RecordingSink()
    cache = make_cache(tmp_path, rest, sink)  # not running: nothing drains the queue
    for i in range(cc.LIVE_QUEUE + 10):
        cache.on_message(rest.post(f"m{i}"))
    stats = cache.statistics()
    assert stats.pending_live_events == cc.LIVE_QUEUE
    assert stats.live_events_dropped == 10
    assert [e["message"] for e in sink.of("error")] == [
        "live update queue full: 1 event(s) dropped",
        "live update queue full: 10 event(s) dropped",
    ]
    async with running(cache):
        await cache.flush()
        assert len(cache.recent(CH, 10_000)) == 200  # applied after start, capped


# ----- files: eviction, failures, corruption ---------------------------------------------


def _fill_channels(tmp_path: Path, counts: list[int], max_bytes: int) -> dict[int, int]:
    """Write channels CH+i with counts[i] messages in order; returns on-disk sizes."""
    rest = FakeHistory()
    cache = make_cache(tmp_path, rest, max_bytes=max_bytes)

    async def main() -> None:
        async with running(cache):
            for i, n in enumerate(counts):
                for k in range(n):
                    cache.on_message(rest.post(f"channel {i} message {k}", channel_id=CH + i))
                await cache.flush()

    trio.run(main)
    folder = tmp_path / "cache"
    return {int(p.name.split(".")[0]): p.stat().st_size for p in folder.glob("*.json")}


@settings(max_examples=15, deadline=None)
@given(counts=st.lists(st.integers(1, 40), min_size=1, max_size=8), limit=st.integers(0, 20_000))
def test_eviction_keeps_the_most_recently_written_that_fit(
    tmp_path_factory: pytest.TempPathFactory, counts: list[int], limit: int
) -> None:
    sizes = _fill_channels(tmp_path_factory.mktemp("full"), counts, 10**12)
    assert len(sizes) == len(counts)
    kept = _fill_channels(tmp_path_factory.mktemp("limited"), counts, limit)
    order = [CH + i for i in range(len(counts))]
    expected: list[int] = []
    total = 0
    for channel in reversed(order):  # the longest suffix of the write order that fits
        if total + sizes[channel] > limit:
            break
        expected.append(channel)
        total += sizes[channel]
    assert sorted(kept) == sorted(expected)
    assert sum(kept.values()) <= limit


async def test_eviction_order_is_by_last_write_not_creation(tmp_path: Path) -> None:
    rest = FakeHistory()
    a, b, c, d = CH, CH + 1, CH + 2, CH + 3
    # Each file is a little over 2,000 bytes: three fit in 7,500, four do not.
    async with running(make_cache(tmp_path, rest, max_bytes=7_500)) as cache:
        for channel in (a, b, c):
            cache.on_message(rest.post("x" * 2000, channel_id=channel))
            await cache.flush()
        cache.on_message(rest.post("y", channel_id=a))  # a is now the newest write
        await cache.flush()
        cache.on_message(rest.post("z" * 2000, channel_id=d))
        await cache.flush()
        assert cache.statistics().bytes_on_disk <= 7_500
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        f"{a}.json",
        f"{c}.json",
        f"{d}.json",
    ]


async def test_at_start_the_write_order_comes_from_file_times(tmp_path: Path) -> None:
    rest = FakeHistory()
    a, b, c = CH, CH + 1, CH + 2
    async with running(make_cache(tmp_path, rest)) as cache:
        for channel in (a, b, c):
            cache.on_message(rest.post("x" * 2000, channel_id=channel))
        await cache.flush()
        total = cache.statistics().bytes_on_disk
    folder = tmp_path / "cache"
    for age, channel in enumerate((b, a, c)):  # written last: b, then a, then c
        os.utime(folder / f"{channel}.json", ns=(0, (100 - age) * 10**9))
    smallest = min(p.stat().st_size for p in folder.iterdir())
    async with running(make_cache(tmp_path, rest, max_bytes=total - smallest)) as cache:
        assert cache.statistics().channels_on_disk == 2
    assert sorted(p.name for p in folder.iterdir()) == [f"{a}.json", f"{b}.json"]


async def test_a_failing_write_is_logged_not_fatal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rest = FakeHistory()
    sink = RecordingSink()

    def failing(path: Path, data: bytes) -> None:
        raise OSError("no space left on device")

    async with running(make_cache(tmp_path, rest, sink)) as cache:
        monkeypatch.setattr(state, "write_atomic", failing)
        cache.on_message(rest.post("m"))
        await cache.flush()
        lines = await ctx(cache, rest.post("q"))
        monkeypatch.undo()
    assert texts(lines) == ["m"]
    assert any("no space left" in e["message"] for e in sink.of("error"))


@pytest.mark.parametrize(
    "junk",
    [
        b"\x00\xffnot json",
        b'{"v": 1, "channel_id": 1000, "users": [], "messages": [{"id": "x"}]}',
        b'{"v": 1, "channel_id": 7, "users": [], "messages": []}',
        b'{"v": 99}',
        b"[]",
    ],
)
async def test_a_corrupt_file_is_logged_dropped_and_refetched(tmp_path: Path, junk: bytes) -> None:
    rest = FakeHistory()
    sink = RecordingSink()
    for i in range(5):
        rest.post(f"m{i}")
    trigger = rest.post("q")
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / f"{CH}.json").write_bytes(junk)
    async with running(make_cache(tmp_path, rest, sink)) as cache:
        lines = await ctx(cache, trigger)
    errors = sink.of("error")
    assert len(errors) == 1
    assert errors[0]["channel_id"] == CH
    assert errors[0]["message"].startswith("corrupt cache file dropped")
    assert rest.calls == [{"channel": CH, "after": None, "before": None, "limit": 100}]
    assert texts(lines) == [f"m{i}" for i in range(5)]
    assert len(file_doc(tmp_path)["messages"]) == 6


# ----- failures ---------------------------------------------------------------------------


async def test_a_rest_failure_answers_from_the_cache(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    sink = RecordingSink()
    async with running(make_cache(tmp_path, rest, sink)) as cache:
        cache.on_message(rest.post("cached line"))
        await cache.flush()
        rest.fail_with = DiscordHTTPError(403, 50001, "Missing Access")
        lines = await ctx(cache, rest.post("q"))
        assert texts(lines) == ["cached line"]
        await ctx(cache, rest.post("q again"))
        assert len(rest.calls) == 1  # the cooldown holds for failed fetches too
    assert "Missing Access" in sink.of("error")[0]["message"]


async def test_a_fault_crashes_the_actor_and_queued_requests_survive(tmp_path: Path) -> None:
    rest = FakeHistory()
    sink = RecordingSink()
    cache = make_cache(tmp_path, rest, sink, faults=Faults())
    for i in range(3):
        rest.post(f"m{i}")
    bad = rest.post("please BOOM")
    good = rest.post("fine")
    outcome: dict[str, object] = {}

    async def ask_bad() -> None:
        try:
            await ctx(cache, bad)
        except ContextUnavailable as exc:
            outcome["bad"] = str(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask_bad)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(FaultInjected):
            await cache.run()
    assert outcome["bad"] == "the context cache failed: FaultInjected"
    assert sink.of("error")[0]["message"].startswith("context request dropped: FaultInjected")

    # A request queued while the actor is down is served once it runs again.
    served = trio.Event()

    async def ask_good() -> None:
        outcome["good"] = texts(await ctx(cache, good))
        served.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask_good)
        await trio.testing.wait_all_tasks_blocked()
        assert "good" not in outcome
        async with running(cache):
            await served.wait()
    assert outcome["good"] == ["m0", "m1", "m2", "please BOOM"]


async def test_parsed_channels_in_memory_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "LOADED_CHANNELS", 4)
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest)) as cache:
        for c in range(12):
            cache.on_message(rest.post("hello", channel_id=CH + c))
        await cache.flush()
        cache.recent(CH + 11, 1)
        stats = cache.statistics()
        assert stats.loaded_channels <= 4
        assert stats.channels_on_disk == 12
        # An unloaded channel comes back from its file.
        assert [m.content for m in cache.recent(CH, 5)] == ["hello"]


async def test_a_burst_across_more_channels_than_memory_holds_keeps_only_their_tails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "LOADED_CHANNELS", 4)
    rest = FakeHistory()
    channels = [CH + c for c in range(12)]
    async with running(make_cache(tmp_path, rest)) as cache:
        for c in channels:  # an earlier burst: every channel has a file
            cache.on_message(rest.post("old", channel_id=c))
        await cache.flush()
        for n in range(3):  # round robin, as a busy server's chatter
            for c in channels:
                cache.on_message(rest.post(f"new {n}", channel_id=c))
        while cache.statistics().pending_live_events:
            await trio.sleep(0)
        # Only four histories were read into memory; the others hold their new messages.
        assert cache.statistics().loaded_channels <= 4
        # Asked for, a channel's history is its file and its tail together, before any write.
        assert [m.content for m in cache.recent(CH + 11, 10)] == ["old", "new 0", "new 1", "new 2"]
        await cache.flush()
        assert cache.statistics().loaded_channels <= 4
    for c in channels:
        ids = [int(m["id"]) for m in file_doc(tmp_path, c)["messages"]]
        assert ids == rest.ids(c)  # every message in its file, in order, once


async def test_a_tail_replaces_a_corrupt_file_and_the_rest_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "LOADED_CHANNELS", 1)
    rest = FakeHistory()
    sink = RecordingSink()
    folder = tmp_path / "cache"
    folder.mkdir()
    (folder / f"{CH + 1}.json").write_bytes(b"\x00\xffnot json")
    async with running(make_cache(tmp_path, rest, sink)) as cache:
        cache.on_message(rest.post("fills memory"))
        while cache.statistics().pending_live_events:
            await trio.sleep(0)
        cache.on_message(rest.post("tail", channel_id=CH + 1))
        await cache.flush()
    assert [m["text"] for m in file_doc(tmp_path, CH + 1)["messages"]] == ["tail"]
    errors = sink.of("error")
    assert [e["channel_id"] for e in errors] == [CH + 1]
    assert errors[0]["message"].startswith("corrupt cache file dropped")


async def test_a_tail_that_could_not_be_written_is_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "LOADED_CHANNELS", 1)
    rest = FakeHistory()
    sink = RecordingSink()
    real_write = state.write_atomic

    def failing(path: Path, data: bytes) -> None:
        raise OSError("no space left on device")

    async with running(make_cache(tmp_path, rest, sink)) as cache:
        cache.on_message(rest.post("fills memory"))
        await cache.flush()
        monkeypatch.setattr(state, "write_atomic", failing)
        cache.on_message(rest.post("lost", channel_id=CH + 1))
        await cache.flush()
        assert any("no space left" in e["message"] for e in sink.of("error"))
        monkeypatch.setattr(state, "write_atomic", real_write)
        lines = await ctx(cache, rest.post("q", channel_id=CH + 1))
    assert [c["channel"] for c in rest.calls] == [CH + 1]
    assert texts(lines) == ["lost"]


async def test_many_waiting_tail_messages_are_written_before_their_delay(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "LOADED_CHANNELS", 1)
    monkeypatch.setattr(state, "TAIL_MESSAGES", 5)
    rest = FakeHistory()
    async with trio.open_nursery() as nursery:
        cache = make_cache(tmp_path, rest)
        await nursery.start(cache.run)
        cache.on_message(rest.post("fills memory"))
        for c in range(1, 4):  # 3 tails: under the limit, written WRITE_DELAY later
            cache.on_message(rest.post("m", channel_id=CH + c))
        await trio.sleep(state.WRITE_DELAY / 10)
        assert cache.statistics().pending_writes == 4
        start = trio.current_time()
        for c in range(4, 8):  # over the limit: every waiting change is due now
            cache.on_message(rest.post("m", channel_id=CH + c))
        for _ in range(100):  # no clock time passes
            await trio.sleep(0)
        assert trio.current_time() == start
        # Oldest first, changes were taken until the waiting tails were back at the limit:
        # the loaded channel's and two tails (7 messages waited, 5 do now).
        assert cache.statistics().pending_writes == 5
        await cache.flush()
        nursery.cancel_scope.cancel()


async def test_tails_beyond_their_limit_keep_no_more_and_the_channel_fetches_what_it_lacks(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "LOADED_CHANNELS", 1)
    monkeypatch.setattr(state, "TAIL_MESSAGES", 100)
    monkeypatch.setattr(state, "TAIL_MESSAGES_MAX", 3)
    rest = FakeHistory()
    async with trio.open_nursery() as nursery:
        cache = make_cache(tmp_path, rest)
        await nursery.start(cache.run)
        cache.on_message(rest.post("fills memory"))
        for c in range(1, 6):  # five tails' worth of messages; the limit keeps three
            cache.on_message(rest.post(f"m{c}", channel_id=CH + c))
        for _ in range(100):
            await trio.sleep(0)
        assert cache.statistics().tail_messages_dropped == 2
        await cache.flush()
        assert not (tmp_path / "cache" / f"{CH + 5}.json").exists()
        lines = await ctx(cache, rest.post("q", channel_id=CH + 5))
        nursery.cancel_scope.cancel()
    assert [c["channel"] for c in rest.calls] == [CH + 5]
    assert texts(lines) == ["m5"]
