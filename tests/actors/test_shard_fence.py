"""The shard fence (SPEC 17): a request of a shard no longer held never reaches Discord, its
answer in progress is cancelled, and its messages are not marked handled."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
import trio
import trio.testing

from picortex.actors.handled import HandledLedger
from picortex.actors.shard_fence import ShardFence, shard_of
from picortex.discord.fence import LeaseEnded
from picortex.discord.http import fenced, task_fence, when_sent
from picortex.discord.rest import RestClient
from tests.actors.test_handled import FakeStore
from tests.helpers import RecordingSink

GUILD_ON_SHARD_1 = 5 << 22


def test_guilds_map_to_shards_as_discord_routes_them() -> None:
    assert shard_of(None, 4) == 0  # DMs
    assert shard_of(GUILD_ON_SHARD_1, 4) == 1
    assert shard_of(GUILD_ON_SHARD_1, 2) == 1
    assert shard_of(6 << 22, 2) == 0


async def test_a_request_is_allowed_until_its_shards_deadline_on_our_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fence = ShardFence(2)
    start = trio.current_time()
    fence.serve(1, start + 5)
    request = fence.request(GUILD_ON_SHARD_1)
    other = fence.request(None)  # shard 0: never held here
    assert request.allows() and not request.stopped
    assert not other.allows() and other.stopped
    await trio.sleep(4.9)
    assert request.allows()
    fence.extend(1, start + 10)  # renewed
    await trio.sleep(1)
    assert request.allows()
    await trio.sleep(4.1)
    assert not request.allows()
    assert request.stopped


async def test_the_end_of_a_shard_cancels_its_answers_in_progress_and_no_others(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fence = ShardFence(2)
    fence.serve(0, 100.0)
    fence.serve(1, 100.0)
    finished: list[str] = []

    async def answer(name: str, guild_id: int | None) -> None:
        scope = trio.CancelScope()
        with fence.working(guild_id, scope), scope:
            await trio.sleep(10)
            finished.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(answer, "dm", None)
        nursery.start_soon(answer, "guild", GUILD_ON_SHARD_1)
        await trio.sleep(1)
        assert fence.end(1) == 1
        with trio.fail_after(1):
            await fence.stopped(1)
    assert finished == ["dm"]
    assert not fence.holds(1) and fence.holds(0)


async def test_a_stopped_requests_messages_are_released_not_marked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    store = FakeStore()
    ledger = HandledLedger(store, clock=lambda: 1000.0)
    fence = ShardFence(2)
    fence.serve(1, trio.current_time() + 5)
    assert ledger.take(11, seq=None) and ledger.take(12, seq=None)
    with fenced(fence.request(GUILD_ON_SHARD_1)):
        ledger.finish([11], channel_id=7, guild_id=GUILD_ON_SHARD_1)  # answered in time
    assert store.marked == {11: 1000.0}
    await trio.sleep(6)
    with fenced(fence.request(GUILD_ON_SHARD_1)) as request:
        assert not request.allows()
        ledger.finish([12], channel_id=7, guild_id=GUILD_ON_SHARD_1)
    assert 12 not in store.marked
    assert ledger.take(12, seq=None)  # not in hand any more: the shard's next holder's
    assert task_fence() is None


async def test_a_stopped_request_found_by_catch_up_leaves_its_shard_to_identify(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # A RESUME replays only what came with a seq: a stopped request found by catch-up must
    # make the next holder IDENTIFY (and catch up) instead.
    ledger = HandledLedger(FakeStore(), clock=lambda: 1000.0)
    ledger.shard_count = 2
    fence = ShardFence(2)
    assert ledger.take(21, seq=7 * 2 + 1) and ledger.take(22, seq=None)
    with fenced(fence.request(GUILD_ON_SHARD_1)) as request:
        assert not request.allows()
        ledger.finish([21], channel_id=7, guild_id=GUILD_ON_SHARD_1)
    assert ledger.unreplayable_left() == set()  # came with its seq: replayed by a RESUME
    with fenced(fence.request(GUILD_ON_SHARD_1)) as request:
        assert not request.allows()
        ledger.finish([22], channel_id=7, guild_id=GUILD_ON_SHARD_1)
    assert ledger.unreplayable_left() == {1}
    assert ledger.unreplayable_left() == set()  # told once


async def test_rest_refuses_a_post_of_a_shard_no_longer_held_before_it_is_sent(
    autojump_clock: trio.testing.MockClock,
) -> None:
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(200, json={"id": "1", "channel_id": "7"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    rest = RestClient(
        "https://discord.test/api/v10", "token", client=client, events=RecordingSink()
    )
    fence = ShardFence(2)
    fence.serve(1, trio.current_time() + 5)
    request: Any = fence.request(GUILD_ON_SHARD_1)
    with fenced(request):
        await rest.create_message(7, "in time")
        assert len(sent) == 1
        await trio.sleep(5)
        with pytest.raises(LeaseEnded):
            await rest.create_message(7, "too late")
    assert len(sent) == 1
    assert request.stopped
    await rest.create_message(7, "no fence, no check")  # a request outside any cluster
    assert len(sent) == 2
    await client.aclose()


async def test_a_late_renewal_never_serves_again_a_shard_that_ended(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fence = ShardFence(2)
    fence.serve(1, trio.current_time() + 5)
    fence.end(1)
    fence.extend(1, trio.current_time() + 10)
    assert not fence.holds(1)
    fence.serve(1, trio.current_time() + 5)  # taken again
    assert fence.holds(1)


async def test_a_watch_set_inside_a_fenced_task_keeps_its_fence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    fence = ShardFence(2)
    request = fence.request(None)
    with fenced(request):
        # A streamed reply's surface, a model call's gate: the same request all along.
        with when_sent(lambda: None):
            assert task_fence() is request
        assert task_fence() is request
    assert task_fence() is None
