"""The REST client against the simulator's injected 429s, 5xx and 4xx (SPEC 4), in virtual time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from picortex.discord.rest import MAX_SERVER_RETRIES, DiscordHTTPError, RestClient
from picortex.errors import FatalDiscordError
from picortex.sim import DefaultWorld, Simulator


@asynccontextmanager
async def client(
    token: str = "sim-token",
) -> AsyncIterator[tuple[Simulator, DefaultWorld, RestClient]]:
    sim = Simulator("sim-token")
    world = sim.add_default_world()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(sim.serve)
        async with RestClient(urls.api_base, token) as rest:
            yield sim, world, rest
        nursery.cancel_scope.cancel()


def posts(sim: Simulator, channel_id: int) -> list[Any]:
    return [
        r
        for r in sim.requests
        if r.method == "POST" and r.path.endswith(f"/channels/{channel_id}/messages")
    ]


async def test_route_429_is_waited_out_and_the_reply_posted_once(autojump_clock: Any) -> None:
    async with client() as (sim, world, rest):
        sim.inject_rest_error("POST", "/channels/*/messages", 429, retry_after=2.5)
        start = trio.current_time()
        await rest.create_message(world.general_id, "after the wait")
        assert trio.current_time() - start >= 2.5
        assert [m["content"] for m in sim.bot_messages(world.general_id)] == ["after the wait"]
        assert [r.status for r in posts(sim, world.general_id)] == [429, 200]


async def test_global_429_pauses_every_request(autojump_clock: Any) -> None:
    async with client() as (sim, world, rest):
        sim.inject_rest_error("*", "/channels/*/messages", 429, retry_after=3.0, global_=True)
        start = trio.current_time()
        await rest.create_message(world.general_id, "one")
        await rest.create_message(world.random_id, "two")
        assert trio.current_time() - start >= 3.0
        assert len(sim.bot_messages()) == 2


async def test_5xx_is_retried_a_bounded_number_of_times(autojump_clock: Any) -> None:
    async with client() as (sim, world, rest):
        sim.inject_rest_error("POST", "/channels/*/messages", 502, count=2)
        await rest.create_message(world.general_id, "survived two 502s")
        assert len(sim.bot_messages(world.general_id)) == 1
        sim.inject_rest_error("POST", "/channels/*/messages", 500, count=None)
        with pytest.raises(DiscordHTTPError) as failed:
            await rest.create_message(world.general_id, "never")
        assert failed.value.status == 500
        assert len(posts(sim, world.general_id)) == 3 + 1 + MAX_SERVER_RETRIES
        assert len(sim.bot_messages(world.general_id)) == 1


async def test_other_4xx_is_not_retried(autojump_clock: Any) -> None:
    async with client() as (sim, world, rest):
        sim.inject_rest_error("POST", "/channels/*/messages", 403, code=50013)
        with pytest.raises(DiscordHTTPError) as failed:
            await rest.create_message(world.general_id, "forbidden")
        assert (failed.value.status, failed.value.code) == (403, 50013)
        assert len(posts(sim, world.general_id)) == 1


async def test_401_is_fatal_and_stops_every_later_request(autojump_clock: Any) -> None:
    async with client(token="not-the-token") as (sim, world, rest):
        with pytest.raises(FatalDiscordError):
            await rest.get_gateway_bot()
        before = len(sim.requests)
        with pytest.raises(FatalDiscordError):
            await rest.create_message(world.general_id, "refused before sending")
        assert len(sim.requests) == before
