"""The router against the simulator: replays dropped (also after a restart), idle exit, overflow."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from picortex.actors import channel as channel_mod
from picortex.actors.shard_fence import ShardFence
from picortex.sim.model import ModelReply
from picortex.sim.world import Dispatch
from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time


async def test_a_replayed_message_is_answered_once(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        payload = run.say(w.general_id, w.alice_id, f"{run.mention()} once, please")
        await run.wait_until(lambda: bool(run.replies_to(int(payload["id"]))))
        # Discord may deliver an event twice; the router drops what it has handled.
        run.bot.router.on_dispatch("MESSAGE_CREATE", payload)
        run.bot.router.on_dispatch("MESSAGE_CREATE", payload)
        marker = run.say(w.general_id, w.bob_id, f"{run.mention()} a later message")
        await run.wait_event("decision", message_id=int(marker["id"]))
        assert len(run.replies_to(int(payload["id"]))) == 1
        assert run.bot.router.replays_dropped == 2
        assert len(run.sim.model.calls) == 1
        assert run.bot.store.is_seen(int(payload["id"]))
    # A new process on the same home remembers (the seen-events table).
    async with running_bot(tmp_path) as again:
        again.bot.router.on_dispatch("MESSAGE_CREATE", payload)
        fresh = again.say(again.world.general_id, again.world.alice_id, f"{again.mention()} new?")
        await again.wait_until(lambda: bool(again.replies_to(int(fresh["id"]))))
        assert again.bot.router.replays_dropped == 1
        triggers = [e["message_id"] for e in again.events("trigger")]  # both runs' log
        assert triggers == [payload["id"], fresh["id"]]


def _interactions_sent(run: Any, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The INTERACTION_CREATE payloads the simulator sends from now on (to replay them)."""
    sent: list[dict[str, Any]] = []
    dispatch = run.sim.gateway.dispatch

    def recording(event: Dispatch) -> None:
        if event.name == "INTERACTION_CREATE":
            sent.append(event.data)
        dispatch(event)

    monkeypatch.setattr(run.sim.gateway, "dispatch", recording)
    return sent


async def test_a_replayed_interaction_is_answered_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a replayed message: an INTERACTION_CREATE delivered again is dropped (SPEC 4)."""
    async with running_bot(tmp_path) as run:
        w = run.world
        sent = _interactions_sent(run, monkeypatch)
        await run.wait_until(lambda: bool(run.sim.app_commands()))
        run.sim.model.script("Only once.")
        ask = run.sim.run_slash(w.general_id, w.alice_id, "picortex ask once, please")
        await run.wait_event("reply", trigger_id=ask.id, result="posted")
        answers = len(ask.answers)
        [payload] = sent
        # Discord may deliver an event twice; the router drops what it has handled.
        run.bot.router.on_dispatch("INTERACTION_CREATE", payload)
        run.bot.router.on_dispatch("INTERACTION_CREATE", payload)
        marker = run.say(w.general_id, w.bob_id, f"{run.mention()} a later message")
        await run.wait_event("decision", message_id=int(marker["id"]))
        assert run.bot.router.replays_dropped == 2
        assert len(ask.answers) == answers
        assert len(run.sim.model.calls) == 1
        assert len(run.events("trigger")) == 1
    # A new process on the same home remembers (the seen-events table).
    async with running_bot(tmp_path) as again:
        again.bot.router.on_dispatch("INTERACTION_CREATE", payload)
        fresh = again.say(again.world.general_id, again.world.alice_id, f"{again.mention()} new?")
        await again.wait_until(lambda: bool(again.replies_to(int(fresh["id"]))))
        assert again.bot.router.replays_dropped == 1
        triggers = [e["message_id"] for e in again.events("trigger")]  # both runs' log
        assert triggers == [str(ask.id), fresh["id"]]


async def test_an_interaction_of_a_shard_no_longer_held_is_left_unmarked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SPEC 17: a slash command that comes as its shard's lease ends is not taken as handled,
    so the shard's next holder (resuming below its seq) answers it."""
    async with running_bot(tmp_path) as run:
        w = run.world
        sent = _interactions_sent(run, monkeypatch)
        await run.wait_until(lambda: bool(run.sim.app_commands()))
        fence = ShardFence(1)  # shard 0 not held (any more)
        monkeypatch.setattr(run.bot.router, "_fence", fence)
        run.sim.model.script("Answered by the holder.")
        ask = run.sim.run_slash(w.general_id, w.alice_id, "picortex ask who answers?")
        [skip] = await run.wait_event("decision", interaction_id=ask.id)
        assert skip["outcome"] == "skip" and "next holder" in skip["reason"]
        assert not run.bot.store.is_seen(ask.id)
        assert not ask.answers and not run.sim.model.calls
        # The shard's holder gets it again (a RESUME's replay) and answers it once.
        fence.serve(0, math.inf)
        [payload] = sent
        run.bot.router.on_dispatch("INTERACTION_CREATE", payload)
        await run.wait_event("reply", trigger_id=ask.id, result="posted")
        assert len(run.sim.model.calls) == 1


async def test_an_idle_channel_actor_exits_and_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(channel_mod, "IDLE_EXIT_SECONDS", 0.2)
    async with running_bot(tmp_path) as run:
        w = run.world
        name = f"channel-{w.general_id}"
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} first")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        exited = await run.wait_event("supervisor", action="exit", actor=name)
        assert exited[0]["restart"] is False
        assert run.bot.channels.get(name) is None
        second = run.say(w.general_id, w.alice_id, f"{run.mention()} second")
        await run.wait_until(lambda: bool(run.replies_to(int(second["id"]))))
        # An actor generating an answer does not idle out in the middle of it.
        run.sim.model.script(ModelReply(text="slow but sure", delay=0.6))
        third = run.say(w.general_id, w.alice_id, f"{run.mention()} third")
        await run.wait_until(lambda: bool(run.replies_to(int(third["id"]))))
        assert run.replies_to(int(third["id"]))[0]["content"] == "slow but sure"
        assert not [e for e in run.events("supervisor") if e["action"] == "crash"]
