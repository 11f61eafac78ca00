"""The context cache against the built-in Discord simulator, counting the GET
/channels/{id}/messages requests it really makes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
import trio.testing

from picortex.actors.context_cache import ContextCache
from picortex.discord.normalize import message_from_payload
from picortex.discord.rest import RestClient
from picortex.sim import Simulator
from picortex.types import Message
from tests.helpers import RecordingSink

COOLDOWN = 5.0


@pytest.fixture
def clock() -> trio.testing.MockClock:
    """Real-speed time that a test can move forward past a cooldown (sockets need real time)."""
    return trio.testing.MockClock(rate=1.0)


def as_message(payload: dict[str, Any]) -> Message:
    message = message_from_payload(payload)
    assert isinstance(message, Message)
    return message


def history_gets(sim: Simulator, channel_id: int) -> list[dict[str, str]]:
    path = f"/channels/{channel_id}/messages"
    return [dict(r.query) for r in sim.requests if r.method == "GET" and r.path == path]


async def test_fetch_sequence_against_the_simulator(
    tmp_path: Path, clock: trio.testing.MockClock
) -> None:
    sim = Simulator(rate_limits=False)
    world = sim.add_default_world()
    general, random = world.general_id, world.random_id
    bot = f"<@{sim.bot_user_id}>"
    for i in range(150):
        sim.post_user_message(general, (world.alice_id, world.bob_id)[i % 2], f"general {i}")
    for i in range(10):
        sim.post_user_message(random, world.bob_id, f"random {i}")
    sink = RecordingSink()

    async with trio.open_nursery() as nursery:
        urls = await nursery.start(sim.serve)
        async with RestClient(urls.api_base, sim.token) as rest:
            cache = ContextCache(
                tmp_path / "cache",
                rest=rest,
                messages_per_channel=200,
                max_bytes=10 * 1024 * 1024,
                fetch_cooldown=COOLDOWN,
                events=sink,
            )
            await nursery.start(cache.run)

            # First run: one GET for the newest page, nothing after anything.
            first = as_message(sim.post_user_message(general, world.alice_id, f"{bot} first"))
            lines = await cache.context_for(first, max_messages=15, max_chars=4000)
            assert history_gets(sim, general) == [{"limit": "100"}]
            assert [orjson.loads(line.split(": ", 1)[1]) for line in lines] == [
                f"general {i}" for i in range(135, 150)
            ]

            # A burst over two channels, past the cooldown: one GET per channel, the known
            # channel asking only for what came after its newest cached message. No gateway
            # runs here, so messages reach the cache only by fetches: each step begins as a
            # new gateway session would (a live session keeps a fetched channel in sync).
            cache.on_session_start()
            clock.jump(COOLDOWN * 2)
            burst = [
                as_message(
                    sim.post_user_message((general, random)[i % 2], world.bob_id, f"{bot} q{i}")
                )
                for i in range(40)
            ]
            async with trio.open_nursery() as askers:
                for trigger in burst:
                    askers.start_soon(ask, cache, trigger)
            assert history_gets(sim, general)[1:] == [{"limit": "100", "after": str(first.id)}]
            assert history_gets(sim, random) == [{"limit": "100"}]

            # More than a page missing: one page after, then back from the newest to the cap.
            cache.on_session_start()
            clock.jump(COOLDOWN * 2)
            for i in range(250):
                sim.post_user_message(general, world.alice_id, f"later {i}")
            last = as_message(sim.post_user_message(general, world.bob_id, f"{bot} last"))
            lines = await cache.context_for(last, max_messages=15, max_chars=4000)
            gets = history_gets(sim, general)[2:]
            newest = [int(p["id"]) for p in sim.messages(general)]
            assert gets == [
                {"limit": "100", "after": str(burst[-2].id)},
                {"limit": "100"},
                {"limit": "100", "before": str(newest[-100])},
            ]
            assert [m.id for m in cache.recent(general, 500)] == newest[-200:]
            assert [orjson.loads(line.split(": ", 1)[1]) for line in lines] == [
                f"later {i}" for i in range(235, 250)
            ]

            # Inside the cooldown: no request at all.
            again = as_message(sim.post_user_message(general, world.alice_id, f"{bot} again"))
            await cache.context_for(again, max_messages=15, max_chars=4000)
            assert len(history_gets(sim, general)) == 5
            await cache.flush()
            nursery.cancel_scope.cancel()
    assert sink.of("error") == []


async def ask(cache: ContextCache, trigger: Message) -> None:
    await cache.context_for(trigger, max_messages=15, max_chars=4000)
