"""Ordering and parallelism end to end (SPEC 5): in order per channel, channels never wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from picortex.sim.model import ModelReply
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time


def posts_at(run: Running, channel_id: int) -> list[float]:
    """When the bot posted in a channel."""
    path = f"/channels/{channel_id}/messages"
    return [r.at for r in run.sim.requests if r.method == "POST" and r.path == path]


async def test_one_channel_is_answered_in_arrival_order(tmp_path: Path) -> None:
    toml = "continuation_seconds = 0\n"
    async with running_bot(tmp_path, toml=toml, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        # Answers are generated side by side, and the first are the slowest: a channel that
        # posted each answer when ready would post the later, quicker ones first.
        run.sim.model.script(
            ModelReply(text="answer 0", delay=0.8),
            ModelReply(text="answer 1", delay=0.4),
            ModelReply(text="answer 2", delay=0.2),
            "answer 3",
            "answer 4",
            "answer 5",
        )
        sent = []
        for n in range(6):
            author = (w.alice_id, w.bob_id)[n % 2]
            sent.append(run.say(w.general_id, author, f"{run.mention()} question {n}"))
            # Each question reaches the model before the next is asked: calls keep this order.
            await run.wait_until(lambda n=n: len(run.sim.model.calls) == n + 1)
        replies = await run.sim.wait_bot_messages(6, w.general_id)
        assert [r["content"] for r in replies] == [f"answer {n}" for n in range(6)]
        assert [r["message_reference"]["message_id"] for r in replies] == [m["id"] for m in sent]
        prompts = [str(c.messages) for c in run.sim.model.calls]
        assert [f"question {n}" in p for n, p in enumerate(prompts)] == [True] * 6
        # No decision waited for an answer: every question was asked before the first reply.
        assert run.sim.model.calls[5].at < posts_at(run, w.general_id)[0]
        assert [e["message_id"] for e in run.events("trigger")] == [m["id"] for m in sent]


async def test_a_slow_answer_does_not_delay_another_channel(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.sim.model.script(ModelReply(text="slow answer", delay=1.0))
        slow = run.say(w.general_id, w.alice_id, f"{run.mention()} a hard question")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        quick = run.say(w.random_id, w.bob_id, f"{run.mention()} an easy one?")
        await run.wait_until(lambda: bool(run.replies_to(int(quick["id"]))))
        # #random was answered while #general's answer was still being generated.
        assert run.sim.bot_messages(w.general_id) == []
        assert run.sim.model.calls[1].at < run.sim.model.calls[0].at + 1.0
        replies = await run.sim.wait_bot_messages(1, w.general_id)
        assert replies[0]["content"] == "slow answer"
        assert replies[0]["message_reference"]["message_id"] == slow["id"]
        order = [e["trigger_id"] for e in await run.wait_event("reply", count=2)]
        assert order == [quick["id"], slow["id"]]
