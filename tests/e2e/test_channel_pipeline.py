"""The channel pipeline end to end: decisions never wait for answers, and every step is logged."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from picortex.sim.model import ModelReply
from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time

DISCRIMINATE_NO = '{"should_respond": false, "reason": "chatter between friends"}'


async def test_follow_up_after_someone_else_spoke_restarts_the_answer_once(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 5\n") as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.sim.model.script(ModelReply(text="stale answer", delay=2.0))
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} how do nurseries work")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        run.say(w.general_id, w.bob_id, "lunch anyone?")
        follow = run.say(w.general_id, w.alice_id, "and cancel scopes")
        cont = await run.wait_event("continuation", message_id=int(follow["id"]))
        assert cont[0]["restart"] is True
        # bob had no request open: his message was chatter, decided at once while alice's
        # answer was being generated (no decision line, SPEC 5).
        assert run.bot.router.trusted_chatter == 1
        await run.sim.wait_bot_messages(1, w.general_id)
        # The call was cancelled; past its scripted delay, once the bot has done all it was
        # going to: still one reply, to the merged request.
        await run.wait_event("llm", outcome="cancelled")
        await trio.sleep(2.0)
        await run.idle()
        replies = run.sim.bot_messages(w.general_id)
        assert len(replies) == 1
        assert "stale" not in replies[0]["content"]
        assert "and cancel scopes" in replies[0]["content"]
        assert replies[0]["message_reference"]["message_id"] == first["id"]
        assert len(run.sim.model.calls) == 2
        assert [e["result"] for e in run.events("reply")] == ["posted"]


async def test_the_window_counts_from_arrival_not_from_handling(tmp_path: Path) -> None:
    # Bob's message makes the channel ask the discriminator (slow); alice's follow-up arrives
    # inside her window but is decided after it: it is still a follow-up.
    async with running_bot(tmp_path, toml="continuation_seconds = 1.5\n") as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.bot.store.set_attention_mode(w.general_id, "discriminate", 0.0)
        run.sim.model.script("first answer", ModelReply(text=DISCRIMINATE_NO, delay=2.5))
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} what is a window")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        run.say(w.general_id, w.bob_id, "nice weather")
        await run.wait_until(lambda: len(run.sim.model.calls) == 2)
        follow = run.say(w.general_id, w.alice_id, "a continuation window, I mean")
        cont = await run.wait_event("continuation", message_id=int(follow["id"]))
        assert cont[0]["parent_id"] == first["id"]
        assert cont[0]["restart"] is False
        # After the answer: context for the next request, not a new answer (SPEC 5.4).
        decision = await run.wait_event("decision", message_id=follow["id"])
        assert decision[0]["outcome"] == "context"
        assert not run.replies_to(int(follow["id"]))
        assert [e["stage"] for e in run.events("llm")].count("discriminate") == 1


async def test_follow_up_while_the_answer_is_being_posted_is_context_not_a_second_answer(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 10\n") as run:
        w = run.world
        run.sim.inject_rest_error("POST", f"/channels/{w.general_id}/messages", 429, retry_after=2)
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} first part")
        await run.wait_until(
            lambda: any(r.status == 429 for r in run.sim.requests if r.path.endswith("/messages"))
        )
        follow = run.say(w.general_id, w.alice_id, "second part")
        cont = await run.wait_event("continuation", message_id=int(follow["id"]))
        # The first answer is past cancelling: the request is answered once, and the
        # follow-up is context for the next request (SPEC 5.4), which the log says.
        assert cont[0]["restart"] is False
        decision = await run.wait_event("decision", message_id=int(follow["id"]))
        assert decision[0]["outcome"] == "context"
        replies = await run.sim.wait_bot_messages(1, w.general_id)
        assert [r["message_reference"]["message_id"] for r in replies] == [first["id"]]
        assert len(run.sim.model.calls) == 1


async def test_trigger_events_carry_the_real_tier_command_and_context(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 0\n") as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.say(w.general_id, w.bob_id, "the sky is green today")
        await run.wait_until(lambda: run.bot.router.trusted_chatter == 1)
        asked = run.say(w.general_id, w.alice_id, f"{run.mention()} is the sky green?")
        await run.wait_until(lambda: bool(run.replies_to(int(asked["id"]))))
        by_bob = run.say(w.general_id, w.bob_id, f"{run.mention()} and mine?")
        await run.wait_until(lambda: bool(run.replies_to(int(by_bob["id"]))))
        command = run.say(w.general_id, w.alice_id, f"{run.mention()} !s whitelist list")
        await run.wait_event("reply", command="whitelist")
        triggers = {e["message_id"]: e for e in run.events("trigger")}
        alice = triggers[asked["id"]]
        assert alice["tier"] == "admin"
        assert alice["channel_id"] == str(w.general_id)
        assert alice["guild_id"] == str(w.guild_id)
        assert alice["author_id"] == str(w.alice_id)
        assert alice["command"] is None
        assert triggers[by_bob["id"]]["tier"] == "user"
        assert triggers[command["id"]]["command"] == "whitelist"
        assert triggers[command["id"]]["tier"] == "admin"
        context = (await run.wait_event("context", message_id=int(asked["id"])))[0]
        assert context["context_count"] >= 1
        # `picortex status` shows the context the model was given.
        entry = run.bot.pipe.triggers.log.get(int(asked["id"]))
        assert entry is not None
        assert len(entry.context) == context["context_count"]
        assert any("the sky is green today" in line for line in entry.context)


async def test_a_replayed_message_is_dropped_with_a_decision(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} once only")
        await run.wait_until(lambda: bool(run.replies_to(int(msg["id"]))))
        run.bot.router.on_dispatch("MESSAGE_CREATE", msg)
        decision = await run.wait_event(
            "decision", message_id=int(msg["id"]), reason="replayed event already handled"
        )
        assert decision[0]["outcome"] == "ignore"
        assert decision[0]["channel_id"] == str(w.general_id)
        assert len(run.replies_to(int(msg["id"]))) == 1
        assert len(run.sim.model.calls) == 1


async def test_an_answers_requests_are_announced_at_its_decision(tmp_path: Path) -> None:
    # A cluster's process asks the shared global limit for an answer's slots while the answer
    # is prepared: at the decision, the history read (when the cache will read it), the
    # typing indicator and the reply; again, in case they lapsed, as the model request goes.
    async with running_bot(tmp_path) as run:
        w = run.world
        announced: list[int] = []
        run.bot.rest.expect = announced.append  # type: ignore[method-assign]
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} first?")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        assert announced == [3, 2]  # read, typing, reply; then typing and reply
        second = run.say(w.general_id, w.alice_id, f"{run.mention()} second?")
        await run.wait_until(lambda: bool(run.replies_to(int(second["id"]))))
        assert announced == [3, 2, 2, 2]  # the channel is in sync now: no read
