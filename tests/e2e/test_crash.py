"""Crash safety end to end (SPEC 12): a crashing channel actor loses one message, nothing more."""

from __future__ import annotations

from pathlib import Path

import pytest

from picortex.actors.pipeline import AnswerDeadlines
from picortex.sim.model import ModelReply
from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time(rate=1.0)


async def test_mailbox_fault_drops_one_message_and_the_channel_goes_on(tmp_path: Path) -> None:
    env = {"PICORTEX_FAULT_INJECT": "mailbox:BOOM"}
    toml = "continuation_seconds = 0\n"
    async with running_bot(tmp_path, env=env, toml=toml, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        before = run.say(w.general_id, w.alice_id, f"{run.mention()} first question")
        await run.wait_until(lambda: bool(run.replies_to(int(before["id"]))))
        boom = run.say(w.general_id, w.alice_id, f"{run.mention()} this goes BOOM")
        # Queued behind the poison message: these must survive the crash, in order.
        after = [
            run.say(w.general_id, w.alice_id, f"{run.mention()} after the crash {n}")
            for n in range(3)
        ]
        elsewhere = run.say(w.random_id, w.bob_id, f"{run.mention()} meanwhile, in random?")
        crash = await run.wait_event("supervisor", action="crash")
        actor = f"channel-{w.general_id}"
        assert crash[0]["actor"] == actor
        assert crash[0]["restart"] is True
        assert "FaultInjected" in crash[0]["error"]
        dropped = [e for e in run.events("error") if e.get("actor") == actor]
        assert len(dropped) == 1
        assert "message dropped" in dropped[0]["error"]
        assert str(boom["id"]) in dropped[0]["message"]
        await run.wait_until(lambda: all(run.replies_to(int(m["id"])) for m in after))
        await run.wait_until(lambda: bool(run.replies_to(int(elsewhere["id"]))))
        # The poison message was never answered nor retried; the others in arrival order.
        assert run.replies_to(int(boom["id"])) == []
        general = [r["message_reference"]["message_id"] for r in run.sim.bot_messages(w.general_id)]
        assert general == [m["id"] for m in (before, *after)]
        assert len(run.sim.model.calls) == 5  # before, three after, and #random
        assert int(boom["id"]) not in [e["message_id"] for e in run.events("trigger")]
        # Only #general's actor crashed and restarted.
        crashes = run.events("supervisor")
        assert [e["actor"] for e in crashes if e["action"] == "crash"] == [actor]
        assert run.bot.channels.restart_counts() == {
            actor: 1,
            f"channel-{w.random_id}": 0,
        }


async def test_a_crash_lets_the_answer_in_progress_finish(tmp_path: Path) -> None:
    env = {"PICORTEX_FAULT_INJECT": "mailbox:BOOM"}
    async with running_bot(tmp_path, env=env) as run:
        w = run.world
        run.sim.model.script(ModelReply(text="the slow answer", delay=2.0))
        asked = run.say(w.general_id, w.alice_id, f"{run.mention()} think about it")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        boom = run.say(w.general_id, w.bob_id, f"{run.mention()} this goes BOOM")
        await run.wait_event("supervisor", action="crash")
        # Only bob's message was lost; alice's answer was posted.
        await run.wait_until(lambda: bool(run.replies_to(int(asked["id"]))))
        assert run.replies_to(int(asked["id"]))[0]["content"] == "the slow answer"
        actor = f"channel-{w.general_id}"
        dropped = [e for e in run.events("error") if e.get("actor") == actor]
        assert len(dropped) == 1 and str(boom["id"]) in dropped[0]["message"]
        assert not [e for e in run.events("error") if "abandoned" in str(e.get("message"))]
        later = run.say(w.general_id, w.alice_id, f"{run.mention()} still there?")
        await run.wait_until(lambda: bool(run.replies_to(int(later["id"]))))


async def test_an_answer_a_crash_cannot_wait_for_is_logged_as_abandoned(tmp_path: Path) -> None:
    env = {"PICORTEX_FAULT_INJECT": "mailbox:BOOM"}
    deadlines = AnswerDeadlines(crash_drain_seconds=0.3)
    async with running_bot(tmp_path, env=env, deadlines=deadlines) as run:
        w = run.world
        run.sim.model.script(ModelReply(text="never posted", delay=3.0))
        asked = run.say(w.general_id, w.alice_id, f"{run.mention()} think very hard")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        run.say(w.general_id, w.bob_id, f"{run.mention()} this goes BOOM")
        abandoned = await run.wait_event("error", scope="generate", message_id=int(asked["id"]))
        assert abandoned[0]["message"] == "abandoned: channel actor crashed"
        await run.wait_event("supervisor", action="crash")
        later = run.say(w.general_id, w.alice_id, f"{run.mention()} still there?")
        await run.wait_until(lambda: bool(run.replies_to(int(later["id"]))))
        assert run.replies_to(int(asked["id"])) == []
