"""A flood of triggers is answered a few at a time, in order, without a deadlock between the
gate's line and a channel's reply order (`picortex.actors.answer_gate`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from picortex.actors import answer_gate
from picortex.sim.model import ModelReply
from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time


async def test_a_flood_is_answered_a_few_at_a_time_and_in_each_channels_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(answer_gate, "ANSWERS_AT_ONCE", 2)
    # Each trigger its own request (no continuation window).
    toml = "continuation_seconds = 0\n"
    async with running_bot(tmp_path, toml=toml, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.sim.model.script(*[ModelReply(text=f"answer {n}", delay=1.0) for n in range(6)])
        asked = [
            run.say(channel, author, f"{run.mention()} question {n}")
            for n, (channel, author) in enumerate(
                [(c, a) for c in (w.general_id, w.random_id) for a in (w.alice_id, w.bob_id)]
                + [(w.general_id, w.alice_id), (w.random_id, w.bob_id)]
            )
        ]
        await run.wait_until(lambda: len(run.sim.model.calls) == 2)
        await trio.sleep(0.5)
        # Two model calls at once; the other four wait their turn.
        assert len(run.sim.model.calls) == 2
        assert run.bot.pipe.replies.gate.waiting == 4
        await run.wait_until(lambda: all(run.replies_to(int(m["id"])) for m in asked))
        # A channel's later answer starts once an earlier one is done (a call's question is
        # its prompt's last line, after its channel's earlier ones).
        calls = [str(c.messages) for c in run.sim.model.calls]
        asked_in = [max(range(6), key=lambda n: c.rfind(f"question {n}")) for c in calls]
        assert sorted(asked_in) == list(range(6))
        for channel, last in ((w.general_id, 4), (w.random_id, 5)):
            assert [n for n in asked_in if int(asked[n]["channel_id"]) == channel][-1] == last
        for channel in (w.general_id, w.random_id):
            posted = [m["message_reference"]["message_id"] for m in run.sim.bot_messages(channel)]
            assert posted == [m["id"] for m in asked if int(m["channel_id"]) == channel]
        assert run.bot.pipe.replies.gate.waiting == 0


async def test_a_restarted_answer_keeps_its_place_so_a_later_one_cannot_block_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One answer at a time. Alice's answer is restarted by her follow-up while bob's, behind
    # it in the channel's order, waits at the gate: a restart that queued behind bob would
    # wait for bob's place, and bob for its turn in the channel after alice's.
    monkeypatch.setattr(answer_gate, "ANSWERS_AT_ONCE", 1)
    async with running_bot(tmp_path, toml="continuation_seconds = 5\n") as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.sim.model.script(ModelReply(text="stale", delay=1.0))
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} tell me about trio,")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        second = run.say(w.general_id, w.bob_id, f"{run.mention()} and about anyio?")
        await run.wait_event("trigger", count=2)
        assert run.bot.pipe.replies.gate.waiting == 1
        run.say(w.general_id, w.alice_id, "especially nurseries")
        await run.wait_event("continuation")
        await run.wait_until(lambda: bool(run.replies_to(int(second["id"]))))
        posted = run.sim.bot_messages(w.general_id)
        assert [m["message_reference"]["message_id"] for m in posted] == [
            first["id"],
            second["id"],
        ]
        assert "stale" not in posted[0]["content"]
        assert run.bot.pipe.replies.gate.waiting == 0
