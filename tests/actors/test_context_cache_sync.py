"""Tests for the in-sync rule: within one gateway session live messages keep a fetched channel
current, so its triggers cost no REST call; a new session costs one fetch per channel."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from picortex.actors import context_cache as cc
from picortex.types import Message, MessageDelete
from tests.actors.test_context_cache import (
    BOB,
    CH,
    FakeHistory,
    ctx,
    file_doc,
    make_cache,
    running,
    texts,
)


async def live_trigger(cache: cc.ContextCache, trigger: Message) -> tuple[str, ...]:
    """A trigger as the router hands it over: a live event first, then the context request."""
    cache.on_message(trigger)
    return await ctx(cache, trigger)


async def chat(
    cache: cc.ContextCache, rest: FakeHistory, rounds: int, *, channel: int = CH
) -> Message:
    """Rounds of live chatter and a trigger, each well past the cooldown; the last trigger."""
    trigger: Message | None = None
    for r in range(rounds):
        await trio.sleep(60)
        cache.on_message(rest.post(f"chat {r}", channel_id=channel, author=BOB))
        trigger = rest.post(f"question {r}", channel_id=channel)
        lines = await live_trigger(cache, trigger)
        assert texts(lines)[-1] == f"chat {r}"
    assert trigger is not None
    return trigger


async def test_live_messages_keep_a_fetched_channel_in_sync(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    for i in range(5):
        rest.post(f"old {i}")
    async with running(make_cache(tmp_path, rest)) as cache:
        await live_trigger(cache, rest.post("q0"))
        assert len(rest.calls) == 1
        last = await chat(cache, rest, 10)
        assert len(rest.calls) == 1  # ten triggers, each past the cooldown: no refetch
        await cache.flush()
        assert file_doc(tmp_path)["synced_to"] == last.id
        # A trigger whose live event the cache has not applied yet needs no fetch either.
        await trio.sleep(60)
        await ctx(cache, rest.post("ahead of its live event"))
        assert cache.statistics().fetches == 1


async def test_a_new_session_costs_exactly_one_fetch_after_synced_to(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest)) as cache:
        await live_trigger(cache, rest.post("q0"))
        last = await chat(cache, rest, 3)
        cache.on_session_start()
        missed = rest.post("posted while disconnected")  # never delivered live
        await trio.sleep(60)
        lines = await live_trigger(cache, rest.post("q after reconnect"))
        assert [c["after"] for c in rest.calls] == [None, last.id]
        assert texts(lines)[-1] == "posted while disconnected"
        await chat(cache, rest, 5)
        assert len(rest.calls) == 2
        await cache.flush()
    assert missed.id in [m["id"] for m in file_doc(tmp_path)["messages"]]


async def test_a_new_session_still_respects_the_cooldown_and_shares_one_fetch(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory(delay=2.0)
    async with running(make_cache(tmp_path, rest, cooldown=5.0)) as cache:
        await live_trigger(cache, rest.post("q0"))
        cache.on_session_start()
        await live_trigger(cache, rest.post("inside the cooldown"))
        assert len(rest.calls) == 1
        await trio.sleep(10)
        async with trio.open_nursery() as nursery:
            for i in range(20):
                nursery.start_soon(live_trigger, cache, rest.post(f"burst {i}"))
        assert len(rest.calls) == 2


async def test_a_restarted_cache_fetches_once_then_stays_in_sync(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest)) as cache:
        await live_trigger(cache, rest.post("q0"))
        last = await chat(cache, rest, 3)
    assert len(rest.calls) == 1
    rest.post("posted while the bot was down")
    async with running(make_cache(tmp_path, rest)) as cache:
        lines = await live_trigger(cache, rest.post("q after restart"))
        assert [c["after"] for c in rest.calls] == [None, last.id]
        assert texts(lines)[-1] == "posted while the bot was down"
        await chat(cache, rest, 4)
    assert len(rest.calls) == 2


async def test_a_channel_never_fetched_still_fetches_the_newest_page(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    for i in range(30):
        rest.post(f"old {i}")
    async with running(make_cache(tmp_path, rest)) as cache:
        cache.on_message(rest.post("live before any fetch"))
        await cache.flush()
        assert file_doc(tmp_path)["synced_to"] is None  # live alone proves nothing
        lines = await live_trigger(cache, rest.post("q"))
        assert rest.calls == [{"channel": CH, "after": None, "before": None, "limit": 100}]
        assert texts(lines)[-2:] == ["old 29", "live before any fetch"]


async def test_sync_is_per_channel(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest)) as cache:
        await live_trigger(cache, rest.post("q0"))
        await chat(cache, rest, 2)
        await live_trigger(cache, rest.post("first in the other channel", channel_id=CH + 1))
        assert [c["channel"] for c in rest.calls] == [CH, CH + 1]
        await chat(cache, rest, 2, channel=CH + 1)
        assert len(rest.calls) == 2


async def test_a_fetch_spanning_a_session_start_does_not_sync_the_channel(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory(delay=2.0)
    async with running(make_cache(tmp_path, rest, cooldown=5.0)) as cache:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(live_trigger, cache, rest.post("q0"))
            await trio.sleep(1)  # the fetch is in flight
            cache.on_session_start()
        await trio.sleep(10)
        await live_trigger(cache, rest.post("q1"))
        assert len(rest.calls) == 2  # the first fetch could not vouch for the new session
        await chat(cache, rest, 3)
        assert len(rest.calls) == 2


async def test_a_dropped_live_message_takes_its_channel_out_of_sync(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cc, "LIVE_QUEUE", 2)
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest)) as cache:
        first = rest.post("q0")
        await live_trigger(cache, first)
        await cache.flush()
        # A queued delete ahead makes the messages queue behind it (with the queue empty they
        # are applied at once); no checkpoint in between: the queue overflows.
        cache.on_delete(MessageDelete(id=54321, channel_id=CH))
        for i in range(5):
            cache.on_message(rest.post(f"flood {i}"))
        assert cache.statistics().live_events_dropped > 0
        await trio.sleep(60)
        lines = await live_trigger(cache, rest.post("q1"))
        assert [c["after"] for c in rest.calls] == [None, first.id]
        assert texts(lines)[-5:] == [f"flood {i}" for i in range(5)]
        await chat(cache, rest, 2)
        assert len(rest.calls) == 2


async def test_an_evicted_channel_fetches_again(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest, max_bytes=600)) as cache:
        await live_trigger(cache, rest.post("q0"))
        await cache.flush()
        for c in range(1, 4):  # newer channels push the first one out of the byte budget
            cache.on_message(rest.post("x" * 200, channel_id=CH + c))
            await cache.flush()
        assert not (tmp_path / "cache" / f"{CH}.json").exists()
        await trio.sleep(60)
        lines = await live_trigger(cache, rest.post("q1"))
        assert [c["after"] for c in rest.calls] == [None, None]
        assert texts(lines) == ["q0"]


async def test_a_live_message_with_nothing_queued_is_applied_at_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest)) as cache:
        await live_trigger(cache, rest.post("q0"))
        message = rest.post("no hop")
        cache.on_message(message)  # no checkpoint: applied in the call itself
        assert cache.statistics().pending_live_events == 0
        assert message.id in {m.id for m in cache.recent(CH, 10)}


async def test_will_fetch_says_whether_the_next_trigger_reads_history(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    rest = FakeHistory()
    async with running(make_cache(tmp_path, rest)) as cache:
        assert cache.will_fetch(CH)  # never read this session
        await live_trigger(cache, rest.post("q0"))
        assert len(rest.calls) == 1
        assert not cache.will_fetch(CH)  # in sync: live messages keep it current
        cache.on_session_start()
        # A new session: the next trigger reads what was missed, unless a fetch was made
        # within the cooldown.
        assert not cache.will_fetch(CH)
        await trio.sleep(60)
        assert cache.will_fetch(CH)
        await live_trigger(cache, rest.post("q1"))
        assert len(rest.calls) == 2
        assert not cache.will_fetch(CH)
