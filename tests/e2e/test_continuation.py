"""Continuation windows end to end (SPEC 5 step 4): follow-ups join the request they continue."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from picortex.sim.model import ModelReply
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time


def _prompt(run: Running, index: int) -> str:
    """The text of the model call `index` (its user turns)."""
    return str(run.sim.model.calls[index].messages)


async def test_follow_up_after_the_answer_is_context_not_a_new_answer(tmp_path: Path) -> None:
    # SPEC 5.4: one mention and four plain lines after its answer make one answer, not five.
    async with running_bot(tmp_path, toml="continuation_seconds = 5\n") as run:
        w = run.world
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} what is a mailbox")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        follows = []
        for n, text in enumerate(("in an actor system?", "say", "more", "please"), start=1):
            follows.append(run.say(w.general_id, w.alice_id, text))
            await run.wait_event("continuation", count=n)
            await trio.sleep(0.2)
        cont = run.events("continuation")
        assert [c["message_id"] for c in cont] == [f["id"] for f in follows]
        assert {c["parent_id"] for c in cont} == {first["id"]}
        assert all(c["restart"] is False for c in cont)
        for follow in follows:
            (decision,) = [d for d in run.events("decision") if d["message_id"] == follow["id"]]
            assert decision["outcome"] == "context"
        assert len(run.sim.model.calls) == 1
        assert len(run.sim.bot_messages(w.general_id)) == 1
        # A mention after the answer is a new request, answered with that context.
        again = run.say(w.general_id, w.alice_id, f"{run.mention()} so which one?")
        await run.wait_until(lambda: bool(run.replies_to(int(again["id"]))))
        assert len(run.sim.model.calls) == 2
        assert "in an actor system?" in _prompt(run, 1)
        assert len(run.events("trigger")) == 2


async def test_follow_up_during_generation_restarts_it_and_is_answered_once(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 5\n") as run:
        w = run.world
        slow = 1.0
        run.sim.model.script(ModelReply(text="stale answer to part one", delay=slow))
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} tell me about trio,")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        run.say(w.general_id, w.alice_id, "especially nurseries")
        replies = await run.sim.wait_bot_messages(1, w.general_id)
        cont = run.events("continuation")
        assert len(cont) == 1 and cont[0]["restart"] is True
        # The cancelled call's answer must never be posted: the call was cancelled, and past
        # its scripted delay, once the bot has done all it was going to, one reply still.
        await run.wait_event("llm", outcome="cancelled")
        await trio.sleep(slow)
        await run.idle()
        replies = run.sim.bot_messages(w.general_id)
        assert len(replies) == 1
        assert "stale" not in replies[0]["content"]
        assert "especially nurseries" in replies[0]["content"]
        assert replies[0]["message_reference"]["message_id"] == first["id"]
        assert len(run.sim.model.calls) == 2
        assert "tell me about trio," in _prompt(run, 1)
        assert "especially nurseries" in _prompt(run, 1)
        assert [e["result"] for e in run.events("reply")] == ["posted"]


async def test_window_resets_on_each_follow_up(tmp_path: Path) -> None:
    window = 1.5
    toml = f"continuation_seconds = {window}\n"
    async with running_bot(tmp_path, toml=toml, relaxed_limits=True) as run:
        w = run.world
        run.say(w.general_id, w.alice_id, f"{run.mention()} one")
        await run.wait_event("trigger")
        # Each follow-up comes within the window of the last one, so together they run
        # well past the first window, and all of them join.
        for n, word in enumerate(("two", "three", "four"), start=1):
            await trio.sleep(window * 0.5)
            run.say(w.general_id, w.alice_id, word)
            await run.wait_event("continuation", count=n)
        # After a silence longer than the window, a plain message is not a follow-up.
        await trio.sleep(window * 1.5)
        run.say(w.general_id, w.alice_id, "five")
        # Chatter now: stored and counted at once, no decision line (SPEC 5).
        await run.wait_until(lambda: run.bot.router.trusted_chatter == 1)
        assert len(run.events("continuation")) == 3
        assert len(run.events("trigger")) == 1
        # The answer to "one" was posted before "two": the rest were context, not requests.
        assert len(run.sim.model.calls) == 1
        assert len(run.sim.bot_messages(w.general_id)) == 1


async def test_another_authors_message_is_not_a_follow_up(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 5\n") as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} question one")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        # bob has no request open here, and alice's window does not cover another channel:
        # both are chatter, decided at once (sent together, while her window is open).
        run.say(w.general_id, w.bob_id, "unrelated chatter")
        run.say(w.random_id, w.alice_id, "and here?")
        await run.wait_until(lambda: run.bot.router.trusted_chatter == 2)
        assert run.events("continuation") == []
        assert len(run.sim.model.calls) == 1


async def test_untrusted_follow_up_is_ignored(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 5\n") as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        first = run.say(w.general_id, w.bob_id, f"{run.mention()} hi, I am bob")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        # The owner takes bob off the list while his window is still open.
        run.say(w.general_id, w.alice_id, f"{run.mention()} !s whitelist remove <@{w.bob_id}>")
        await run.wait_event("command")
        follow = run.say(w.general_id, w.bob_id, "and one more thing")
        # Untrusted now: chatter, decided at once and counted, never a continuation.
        await run.wait_until(lambda: run.bot.router.chatter == 1)
        assert int(follow["id"]) in {m.id for m in run.bot.cache.recent(w.general_id, 50)}
        assert run.events("continuation") == []
        assert len(run.sim.model.calls) == 1
        assert len(run.sim.bot_messages(w.general_id)) == 1


@pytest.mark.parametrize(("gap", "answers"), [(5.0, 2), (0.5, 1)])
async def test_replayed_messages_join_by_when_they_were_sent_not_when_they_arrive(
    tmp_path: Path, gap: float, answers: int
) -> None:
    # SPEC 5.4: after a RESUME, a replayed question and one sent `gap` seconds after it
    # (by Discord's clock) arrive together. Past the 1 s window they are two requests, each
    # answered in a reply of its own; inside it, the second joins the first.
    async with running_bot(tmp_path, toml="continuation_seconds = 1\n") as run:
        w = run.world
        # The first answer is still being written when the second question arrives.
        run.sim.model.script(ModelReply(text="answer one", delay=1.0), "answer two")
        run.sim.hold_events(True)  # the bot hears nothing of what follows until it resumes
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} first question")
        await trio.sleep(gap)
        second = run.say(w.general_id, w.alice_id, f"{run.mention()} second question")
        resumes = run.sim.gateway_stats.resumes
        run.sim.drop_connections()
        run.sim.hold_events(False)
        await run.wait_until(lambda: run.sim.gateway_stats.resumes > resumes)
        await run.wait_event("reply", count=answers)
        await run.idle()
        replies = run.sim.bot_messages(w.general_id)
        assert len(replies) == answers
        assert len(run.events("reply")) == answers
        referenced = [r["message_reference"]["message_id"] for r in replies]
        if answers == 2:
            assert sorted(referenced) == sorted([first["id"], second["id"]])
            assert run.events("continuation") == []
        else:
            assert referenced == [first["id"]]
            (joined,) = run.events("continuation")
            assert (joined["message_id"], joined["parent_id"]) == (second["id"], first["id"])
            assert "second question" in _prompt(run, -1)
