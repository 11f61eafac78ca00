"""Shard leases end to end (SPEC 17): two processes with `--shards auto/2 --capacity 2` on one
PostgreSQL split the shards; when one stops, the other takes its shard, RESUMEs the session
it saved, and answers the triggers sent meanwhile exactly once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from picortex.app import Bot
from picortex.config import load_settings
from picortex.core.leases import Want
from picortex.discord.protocol import GatewayTimings
from picortex.sim import DefaultWorld, Simulator
from picortex.sim.simulator import SimURLs
from tests.e2e.harness import (
    LAG_PROBE_ON_VIRTUAL_TIME,
    WAIT_SECONDS,
    Running,
    _hold_on_store_work,
)

pytestmark = pytest.mark.virtual_time

AUTO_2 = Want(ids=(), count=2, capacity=2, auto=True)


def _simulator() -> Simulator:
    """Two shards in buckets of two; posting limits out of the way."""
    sim = Simulator(
        heartbeat_interval_ms=5000,
        limit_identify_concurrency=True,
        max_concurrency=2,
        recommended_shards=2,
    )
    for bucket in ("messages.post", "typing"):
        sim.set_rate_limit(bucket, 1000, 1.0)
    return sim


def _bot(
    home: Path, urls: SimURLs, sim: Simulator, world: DefaultWorld, url: str, built: list[Bot]
) -> Bot:
    home.mkdir(parents=True)
    settings = load_settings(
        {
            "PICORTEX_HOME": str(home),
            "DISCORD_BOT_TOKEN": sim.token,
            "DISCORD_API_BASE": urls.api_base,
            "PICORTEX_OWNER_ID": str(world.alice_id),
            "ANTHROPIC_API_KEY": "sk-ant-test-key-0000",
            "ANTHROPIC_BASE_URL": urls.anthropic_base_url,
            "PICORTEX_DATABASE_URL": url,
        }
    )
    bot = Bot(
        settings,
        leased=AUTO_2,
        node=home.name,
        gateway_timings=GatewayTimings(backoff_base=0.05, backoff_cap=0.5),
    )
    bot.lag.probe_seconds = LAG_PROBE_ON_VIRTUAL_TIME
    _hold_on_store_work(bot)
    built.append(bot)
    return bot


@asynccontextmanager
async def _running(bot: Bot, sim: Simulator, world: DefaultWorld) -> AsyncIterator[Running]:
    """`bot` runs until the block ends (or its `stop` scope is cancelled)."""
    async with trio.open_nursery() as nursery:
        with trio.fail_after(WAIT_SECONDS):
            await nursery.start(bot.run)
        yield Running(sim, bot, world, bot.settings.home)
        nursery.cancel_scope.cancel()


def _held(bot: Bot) -> list[int]:
    assert bot.leases is not None
    return sorted(bot.leases.held)


async def test_two_processes_split_the_shards_and_one_takes_over_exactly_once(
    tmp_path: Path, pg_url: str, built: list[Bot]
) -> None:
    sim = _simulator()
    guilds = sim.add_guilds(4)
    world = sim.add_default_world()
    channels_of = {s: next(g for g in guilds if (g[0] >> 22) % 2 == s)[1] for s in (0, 1)}
    async with trio.open_nursery() as sim_nursery:
        urls = await sim_nursery.start(sim.serve)
        a = _bot(tmp_path / "a", urls, sim, world, pg_url, built)
        b = _bot(tmp_path / "b", urls, sim, world, pg_url, built)
        async with _running(b, sim, world) as run_b:
            async with trio.open_nursery() as a_nursery:
                run_a = await _start(a_nursery, a, sim, world)

                # They split the shards: one each (one hands a shard back if it took both).
                await run_b.wait_until(lambda: len(_held(a)) == 1 and len(_held(b)) == 1)
                [a_shard], [b_shard] = _held(a), _held(b)
                assert {a_shard, b_shard} == {0, 1}
                for run, shard in ((run_a, a_shard), (run_b, b_shard)):
                    await run.wait_until(lambda run=run: _ready(run.bot))
                    channel = channels_of[shard][0]
                    sent = run.say(channel, world.alice_id, f"{run.mention()} hello {shard}?")
                    await run.wait_until(lambda sent=sent: len(run_b.replies_to(int(sent["id"]))))
                    await run.idle()
                    assert [e["trigger_id"] for e in run.events("reply")][-1] == sent["id"]

                # A trigger reaches a's shard just as a is stopped (SIGTERM), one more while
                # nobody serves it: b takes the shard over, RESUMEs a's session, and each is
                # answered once.
                channel, other_channel = channels_of[a_shard]
                resumes = sim.gateway_stats.resumes
                taken_before = len(run_b.events("gateway"))
                in_flight = run_a.say(channel, world.alice_id, f"{run_a.mention()} in flight?")
                a_nursery.cancel_scope.cancel()
            released = run_a.events("gateway")
            assert any(e["action"] == "lease_released" for e in released)
            closes = [e for e in released if e["action"] == "close"]
            assert closes[-1]["code"] == 4000
            meanwhile = run_b.say(other_channel, world.alice_id, f"{run_b.mention()} meanwhile?")

            await run_b.wait_until(lambda: _held(b) == [0, 1])
            await run_b.wait_event("gateway", action="lease_taken", shard=[a_shard, 2])
            [taken] = [
                e for e in run_b.events("gateway")[taken_before:] if e["action"] == "lease_taken"
            ]
            assert (taken["shard"], taken["resume"]) == ([a_shard, 2], True)
            await run_b.wait_until(lambda: len(run_b.replies_to(int(meanwhile["id"]))) >= 1)
            await run_b.wait_until(lambda: len(run_b.replies_to(int(in_flight["id"]))) >= 1)
            assert sim.gateway_stats.resumes == resumes + 1
            await trio.sleep(30)  # anything more that would come, would have come
            await run_b.idle()
            for trigger in (in_flight, meanwhile):
                assert len(run_b.replies_to(int(trigger["id"]))) == 1
            status = b.snapshot()
            assert [s["shard"] for s in status["shards"]] == [[0, 2], [1, 2]]
            assert all(s["epoch"] >= 1 for s in status["shards"])
        sim_nursery.cancel_scope.cancel()


async def _start(nursery: trio.Nursery, bot: Bot, sim: Simulator, world: DefaultWorld) -> Running:
    with trio.fail_after(WAIT_SECONDS):
        await nursery.start(bot.run)
    return Running(sim, bot, world, bot.settings.home)


def _ready(bot: Bot) -> bool:
    """Every shard the bot holds has its gateway READY (a lease is taken before its gateway
    starts: a trigger sent in between would reach no connection)."""
    ready = {
        g.status().shard[0]
        for g in bot.gateways
        if str(getattr(g.status().state, "value", g.status().state)) == "ready"
    }
    held = set(_held(bot))
    return bool(held) and held <= ready


async def test_a_bot_built_and_never_run_lets_go_of_its_connections_when_closed(
    tmp_path: Path, pg_url: str
) -> None:
    import psycopg

    def others() -> int:
        with psycopg.connect(pg_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert row is not None
        return int(row[0])

    sim = _simulator()
    world = sim.add_default_world()
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(sim.serve)
        bot = _bot(tmp_path / "a", urls, sim, world, pg_url, [])
        assert others() > 0
        bot.close()
        bot.close()  # twice is harmless
        # A server process ends a moment after its client hung up: waited for, not slept.
        with trio.fail_after(10):
            while others():
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
