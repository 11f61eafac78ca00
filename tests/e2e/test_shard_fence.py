"""A process never answers a trigger of a shard it no longer holds (SPEC 17).

Two processes on one PostgreSQL, on virtual time, the model slow to answer: a shard handed
back past its settle time, and a lease lost mid-answer. The answer in progress is stopped,
nothing is posted for it after the lease ended, it is not marked handled here, and the
shard's next holder answers it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from picortex.actors.shard_leases import HAND_BACK_SECONDS
from picortex.app import Bot
from picortex.core.leases import margin
from picortex.sim.model import ModelReply
from tests.e2e.harness import Running
from tests.e2e.test_shard_takeover import _bot, _held, _ready, _simulator, _start

pytestmark = pytest.mark.virtual_time

# Far beyond a hand-back's settle time, and beyond a lease not renewed.
SLOW_ANSWER_SECONDS = 40.0
LEASE_SECONDS = 10.0


def _after(events: list[dict[str, Any]], first: dict[str, Any]) -> list[dict[str, Any]]:
    return events[events.index(first) + 1 :]


def _left_behind(run: Running, trigger: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in run.events("decision")
        if e["message_id"] == trigger["id"] and e["reason"].startswith("shard lease ended")
    ]


def _posted_for(run: Running, trigger: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        e
        for e in run.events("reply")
        if e["trigger_id"] == trigger["id"] and e["result"] in ("posted", "cut")
    ]


def _marked(bot: Bot, trigger: dict[str, Any]) -> bool:
    """Whether this process marked the trigger handled (or still holds it in hand)."""
    return bot.pipe.handled.known(int(trigger["id"]))


async def test_an_answer_later_than_a_hand_backs_settle_time_is_left_to_the_next_holder(
    tmp_path: Path, pg_url: str, built: list[Bot]
) -> None:
    sim = _simulator()
    guilds = sim.add_guilds(4)
    world = sim.add_default_world()
    channels_of = {s: next(g for g in guilds if (g[0] >> 22) % 2 == s)[1][0] for s in (0, 1)}
    async with trio.open_nursery() as sim_nursery:
        urls = await sim_nursery.start(sim.serve)
        a = _bot(tmp_path / "a", urls, sim, world, pg_url, built)
        b = _bot(tmp_path / "b", urls, sim, world, pg_url, built)
        async with trio.open_nursery() as a_nursery:
            run_a = await _start(a_nursery, a, sim, world)
            await run_a.wait_until(lambda: _held(a) == [0, 1] and _ready(a))
            # One slow answer in hand on each shard: whichever a hands back has one.
            sim.model.script(
                ModelReply(text="late 0", delay=SLOW_ANSWER_SECONDS),
                ModelReply(text="late 1", delay=SLOW_ANSWER_SECONDS),
            )
            triggers = {
                s: run_a.say(channels_of[s], world.alice_id, f"{run_a.mention()} slow {s}?")
                for s in (0, 1)
            }
            await run_a.wait_until(lambda: len(sim.model.calls) == 2)
            async with trio.open_nursery() as b_nursery:
                run_b = await _start(b_nursery, b, sim, world)
                # a hands one shard back to b: past its settle time the answer is still
                # with the model.
                [released] = await run_a.wait_event("gateway", action="lease_released")
                given = released["shard"][0]
                kept = 1 - given
                assert trio.current_time() < sim.model.calls[given].at + SLOW_ANSWER_SECONDS
                handed_on = triggers[given]
                await run_b.wait_until(lambda: len(run_b.replies_to(int(handed_on["id"]))) == 1)
                # Long after the slow answer would have come: a posted nothing for it, and
                # b answered it once.
                await trio.sleep(SLOW_ANSWER_SECONDS + HAND_BACK_SECONDS)
                await run_a.idle()
                await run_b.idle()
                assert _posted_for(run_a, handed_on) == []
                assert len(_posted_for(run_b, handed_on)) == 1
                assert len(run_b.replies_to(int(handed_on["id"]))) == 1
                assert not _marked(a, handed_on)
                # The owner reads why a stayed quiet.
                assert len(_left_behind(run_a, handed_on)) == 1
                # The shard a kept got its slow answer from a, as before.
                assert len(_posted_for(run_a, triggers[kept])) == 1
                assert _marked(a, triggers[kept])
                b_nursery.cancel_scope.cancel()
            a_nursery.cancel_scope.cancel()
        sim_nursery.cancel_scope.cancel()


async def test_a_lease_lost_mid_answer_posts_nothing_after_its_deadline(
    tmp_path: Path, pg_url: str, built: list[Bot]
) -> None:
    sim = _simulator()
    guilds = sim.add_guilds(4)
    world = sim.add_default_world()
    channel = next(g for g in guilds if (g[0] >> 22) % 2 == 0)[1][0]
    async with trio.open_nursery() as sim_nursery:
        urls = await sim_nursery.start(sim.serve)
        a = _bot(tmp_path / "a", urls, sim, world, pg_url, built)
        async with trio.open_nursery() as a_nursery:
            run_a = await _start(a_nursery, a, sim, world)
            await run_a.wait_until(lambda: _held(a) == [0, 1] and _ready(a))
            sim.model.script(ModelReply(text="too late", delay=SLOW_ANSWER_SECONDS))
            trigger = run_a.say(channel, world.alice_id, f"{run_a.mention()} slow?")
            await run_a.wait_until(lambda: len(sim.model.calls) == 1)

            # The database stops answering a's renewals (and takes): the lease runs out.
            def unreachable(*args: object) -> Any:
                raise OSError("the database is unreachable")

            table: Any = a.lease_table
            table.renew = table.take = unreachable
            [lost] = await run_a.wait_event("gateway", action="lease_lost", shard=[0, 2])
            assert lost["reason"] == "not renewed"
            lost_at = trio.current_time()
            assert lost_at < sim.model.calls[0].at + SLOW_ANSWER_SECONDS - margin(LEASE_SECONDS)
            await trio.sleep(SLOW_ANSWER_SECONDS)
            await run_a.idle()
            assert [e for e in _after(run_a.events(), lost) if e["event"] == "reply"] == []
            assert run_a.replies_to(int(trigger["id"])) == []
            assert not _marked(a, trigger)
            assert len(_left_behind(run_a, trigger)) == 1
            a_nursery.cancel_scope.cancel()
        sim_nursery.cancel_scope.cancel()
