"""Budget enforcement end to end (SPEC 9, issue 6): a tiny ceiling stops the second call."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from picortex.actors.llm import LLMActor
from picortex.config import BUILTIN_PRICES
from picortex.core.llm import LLMRequest, LLMResult
from picortex.sim.model import ModelReply
from picortex.store import Store
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time

WAIT = 15.0  # seconds; a generous bound on a local round trip, not a speed claim
TINY = "[budget]\nceiling_usd = 0.000001\n"
LEDGER = "picortex.actors.ledger"


async def decision(run: Running, msg: dict[str, Any], **match: object) -> dict[str, Any]:
    with trio.fail_after(WAIT):
        found = await run.wait_event("decision", message_id=int(msg["id"]), **match)
    return found[-1]


def budget_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LEDGER and r.levelno == logging.WARNING
    ]


async def test_tiny_ceiling_stops_the_second_call_in_a_guild(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_bot(tmp_path, toml=TINY) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} hello?")
        with trio.fail_after(WAIT):
            await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        # The call is settled and logged just behind its answer's post.
        await run.wait_event("llm", signal_id=int(first["id"]))
        assert len(run.sim.model.calls) == 1
        key = run.bot.budget.period_key()
        spent = await run.bot.store.read(lambda db: db.spend(str(w.guild_id), key))
        assert spent > 0.000001

        # Same workspace (the guild), another channel: no call, a budget event, no reply.
        second = run.say(w.random_id, w.bob_id, f"{run.mention()} and me?")
        skip = await decision(run, second, outcome="skip")
        assert skip["reason"] == "no answer: the workspace's budget ceiling is reached"
        await run.idle()
        assert len(run.sim.model.calls) == 1
        assert run.replies_to(int(second["id"])) == []
        budget = run.events("budget")
        assert len(budget) == 1
        assert budget[0]["workspace"] == str(w.guild_id)
        assert budget[0]["ceiling_usd"] == 0.000001
        assert budget[0]["spent_usd"] == pytest.approx(spent, abs=1e-6)
        assert budget[0]["period"] == run.bot.budget.period_key()
        llm = run.events("llm")
        assert [e["outcome"] for e in llm] == ["ok", "budget"]

        # The discriminator then fails closed in the group, still without a call.
        run.bot.store.set_attention_mode(w.general_id, "discriminate", 0.0)
        carol = run.sim.add_user("carol")
        run.bot.store.set_tier(carol, "user")
        third = run.say(w.general_id, carol, "does anyone know a good bakery?")
        found = await decision(run, third)
        assert found["outcome"] == "skip"
        assert found["reason"] == (
            "discriminator unavailable: budget ceiling reached; failing closed in a group"
        )
        await run.idle()
        assert len(run.sim.model.calls) == 1
        assert len(run.events("budget")) == 2
        # One warning line for the workspace in this period, however many calls it refused.
        lines = budget_warnings(caplog)
        assert len(lines) == 1
        assert str(w.guild_id) in lines[0]
        # A refusal is not a failure.
        assert await run.bot.store.read(lambda db: db.invocation_errors()) == []


async def test_tiny_ceiling_in_a_dm_fails_open_and_status_shows_spend(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A short continuation window, so that bob's second DM is a message of its own.
    toml = "continuation_seconds = 0.1\n" + TINY
    async with running_bot(tmp_path, toml=toml) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        dm = run.dm_id(w.bob_id)
        run.bot.store.set_attention_mode(dm, "discriminate", 0.0)
        # First message: the classification is the one call the budget allows.
        first = run.say(dm, w.bob_id, "are you there?")
        found = await decision(run, first, outcome="respond")
        assert found["reason"].startswith("discriminator: ")
        skip = await decision(run, first, outcome="skip")
        assert "budget" in skip["reason"]  # the answer itself was refused
        assert [c.model for c in run.sim.model.calls] == ["claude-haiku-5-5"]
        await run.idle()
        # Second message: no classification, so the DM fails open; still no call.
        second = run.say(dm, w.bob_id, "hello again, anyone?")
        found = await decision(run, second, outcome="respond")
        assert found["reason"] == (
            "discriminator unavailable: budget ceiling reached; failing open in a direct message"
        )
        await decision(run, second, outcome="skip")
        assert len(run.sim.model.calls) == 1
        assert run.sim.bot_messages() == []
        assert {e["workspace"] for e in run.events("budget")} == {"dm"}
        assert len(budget_warnings(caplog)) == 1

        # Another workspace is not affected by the DMs' spend.
        guild = run.say(w.general_id, w.alice_id, f"{run.mention()} hi")
        with trio.fail_after(WAIT):
            await run.wait_until(lambda: bool(run.replies_to(int(guild["id"]))))
        assert len(run.sim.model.calls) == 2
        # The call is settled and logged just behind its answer's post.
        await run.wait_event("llm", signal_id=int(guild["id"]))

        # `picortex status` shows spend against the ceiling per workspace.
        snapshot = run.bot.snapshot()["budget"]
        assert set(snapshot) == {"dm", str(w.guild_id)}
        assert snapshot["dm"]["ceiling_usd"] == 0.000001
        assert snapshot["dm"]["spent_usd"] > 0.000001
        status = await run.cli("status")
        assert status.returncode == 0, status.stderr
        text = status.stdout
        assert "budget (this period):" in text
        assert f"  {w.guild_id}: $" in text and "  dm: $" in text


async def test_a_user_over_the_rate_limit_gets_one_polite_line_and_the_owner_none(
    tmp_path: Path,
) -> None:
    # No continuation window: each question is a request of its own.
    toml = "continuation_seconds = 0\n[budget]\nuser_requests_per_minute = 1\n"
    async with running_bot(tmp_path, toml=toml, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        asks = [run.say(w.general_id, w.bob_id, f"{run.mention()} question 0?")]
        # The first question spends the minute's one request before the others are asked.
        await run.wait_event("llm", signal_id=int(asks[0]["id"]))
        for i in (1, 2):
            asks.append(run.say(w.general_id, w.bob_id, f"{run.mention()} question {i}?"))
            await decision(run, asks[-1])
        # Both are refused; whichever of the two reaches the ledger first (their answers are
        # prepared concurrently) carries the one polite line of the period.
        refused = [int(asks[i]["id"]) for i in (1, 2)]
        with trio.fail_after(WAIT):
            await run.wait_until(lambda: any(run.replies_to(m) for m in refused))
        await run.idle()
        assert len(run.sim.model.calls) == 1
        told = [reply for m in refused for reply in run.replies_to(m)]
        assert len(told) == 1  # told once per period, not again
        assert told[0]["content"].startswith("Sorry,")
        skips = [e["reason"] for e in run.events("decision") if e["outcome"] == "skip"]
        assert skips == ["no answer: the user's requests-per-minute limit is reached"] * 2
        refusals = run.events("budget")
        assert [(e["limit"], e["user_id"]) for e in refusals] == [("user_rate", str(w.bob_id))] * 2
        # The owner has no per-user limits, and the log says who spent what.
        for i in range(2):
            msg = run.say(w.general_id, w.alice_id, f"{run.mention()} owner {i}?")
            with trio.fail_after(WAIT):
                await run.wait_until(lambda m=msg: bool(run.replies_to(int(m["id"]))))
            # The call is closed and logged just behind its answer's post.
            await run.wait_event("llm", signal_id=int(msg["id"]))
        spenders = [e.get("user_id") for e in run.events("llm") if e["outcome"] == "ok"]
        assert spenders == [str(w.bob_id), str(w.alice_id), str(w.alice_id)]
        status = run.bot.snapshot()
        assert set(status["budget_users"]) == {str(w.bob_id), str(w.alice_id)}


async def test_a_classification_counts_against_its_authors_limits(tmp_path: Path) -> None:
    # SPEC 7: a discriminator call is the author's request, like an answer; the owner is exempt.
    toml = "continuation_seconds = 0\n[budget]\nuser_requests_per_minute = 1\n"
    async with running_bot(tmp_path, toml=toml) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.bot.store.set_attention_mode(w.general_id, "discriminate", 0.0)
        run.sim.model.script('{"should_respond": false, "reason": "chatter"}')
        chatter = run.say(w.general_id, w.bob_id, "does anyone know when the shop opens")
        await decision(run, chatter, outcome="skip")
        # The classification was bob's one request this minute: his question is refused.
        ask = run.say(w.general_id, w.bob_id, f"{run.mention()} when does it open?")
        skip = await decision(run, ask, outcome="skip")
        assert skip["reason"] == "no answer: the user's requests-per-minute limit is reached"
        # The owner's classifications and answers are not limited.
        run.sim.model.script('{"should_respond": false, "reason": "chatter"}')
        for text in ("just chatting here", f"{run.mention()} and for me?"):
            msg = run.say(w.general_id, w.alice_id, text)
            await decision(run, msg)
        with trio.fail_after(WAIT):
            await run.wait_until(lambda: bool(run.replies_to(int(msg["id"]))))
        await run.idle()
        calls = [(e["stage"], e["outcome"], e.get("user_id")) for e in run.events("llm")]
        assert calls == [
            ("discriminate", "ok", str(w.bob_id)),
            ("generate", "budget", str(w.bob_id)),
            ("discriminate", "ok", str(w.alice_id)),
            ("generate", "ok", str(w.alice_id)),
        ]
        assert [e["limit"] for e in run.events("budget")] == ["user_rate"]
        assert str(w.bob_id) in run.bot.snapshot()["budget_users"]


def slow_to_stop(llm: LLMActor) -> None:
    """Make `llm`'s cancelled calls take a second to stop (a slow connection teardown, say),
    so a call restarted meanwhile would find the old one's reservation still held."""
    complete = llm.complete

    async def slowly(request: LLMRequest, **kw: Any) -> LLMResult:
        result: list[LLMResult] = []
        done = trio.Event()
        inner = trio.CancelScope()

        async def call() -> None:
            with trio.CancelScope(shield=True), inner:
                result.append(await complete(request, **kw))
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            try:
                await done.wait()
            except trio.Cancelled:
                with trio.CancelScope(shield=True):
                    await trio.sleep(1.0)
                    inner.cancel()
                    await done.wait()
                raise
        return result[0]

    llm.complete = slowly  # type: ignore[method-assign]


async def test_a_follow_up_storm_is_paid_for_call_by_call_and_never_refused_by_itself(
    tmp_path: Path,
) -> None:
    # SPEC 9: a `user` sends a question, then follow-ups while its answer streams; each
    # follow-up cancels the call and restarts it with the merged request. Every call that was
    # sent is in the ledger at the usage the model reported, and the merged prompt is held.
    storm, pace = 6, 1000.0  # the cancelled answers never get past `message_start`
    reported = [(1500 + 100 * n, 1) for n in range(storm)] + [(2400, 40)]
    sonnet = BUILTIN_PRICES["claude-sonnet-5-5"]
    expected = sum(sonnet.cost(i, o) for i, o in reported)
    # Room for the storm's spend and one running call, not for a reservation kept besides:
    # a call's worst case here is over $0.01.
    ceiling = round(expected + 0.005, 6)
    toml = (
        "continuation_seconds = 30\n"
        f"[budget]\nceiling_usd = {ceiling}\nuser_requests_per_minute = 0\n"
    )
    async with running_bot(tmp_path, toml=toml) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        slow_to_stop(run.bot.llm)
        for i, _ in reported[:-1]:
            run.sim.model.script(ModelReply(text="x" * 500, pace=pace, input_tokens=i))
        final_in, final_out = reported[-1]
        run.sim.model.script(
            ModelReply(text="The whole answer.", input_tokens=final_in, output_tokens=final_out)
        )
        ask = run.say(w.general_id, w.bob_id, f"{run.mention()} tell me about mailboxes")
        for n in range(1, storm + 1):
            await run.wait_until(lambda n=n: len(run.sim.model.calls) == n)
            await run.idle()  # the call's stream has started: `message_start` arrived
            run.say(w.general_id, w.bob_id, f"detail {n}: " + "and more " * 210)
        with trio.fail_after(WAIT):
            await run.wait_until(lambda: bool(run.replies_to(int(ask["id"]))))
        await run.wait_event("llm", outcome="ok")
        await run.idle()
        (answer,) = run.replies_to(int(ask["id"]))
        assert answer["content"] == "The whole answer."
        calls = run.events("llm")
        assert [e["outcome"] for e in calls] == ["cancelled"] * storm + ["ok"]
        assert {e["user_id"] for e in calls} == {str(w.bob_id)}
        assert [(e["input_tokens"], e["output_tokens"]) for e in calls] == reported
        assert run.events("budget") == []
        key = run.bot.budget.period_key()
        spent = await run.bot.store.read(lambda db: db.spend(str(w.guild_id), key))
        assert spent == pytest.approx(expected, abs=1e-9)
        assert run.bot.snapshot()["budget"][str(w.guild_id)]["spent_usd"] == round(spent, 6)
        assert run.bot.budget.held_usd() == 0.0
        # The merged request is held to `context_chars` (4,000): the follow-ups' text in the
        # last prompt is at most that, though the six of them add up to over 11,000.
        last = str(run.sim.model.calls[-1].messages[0]["content"])
        assert "detail 6" in last and "detail 1:" not in last
        assert len(last) < 2 * 4000 + 1000


async def test_a_call_cut_short_by_a_shutdown_is_in_the_ledger(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.sim.model.script(ModelReply(text="x" * 500, pace=1000.0, input_tokens=1234))
        run.say(w.general_id, w.alice_id, f"{run.mention()} a long one, please")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        await run.idle()  # `message_start` arrived; the rest never will
        key = run.bot.budget.period_key()
        home = run.home
    # The bot stopped with the answer still streaming: the call is paid for all the same.
    rows = [orjson.loads(line) for line in (home / "actions.jsonl").read_bytes().splitlines()]
    (call,) = [r for r in rows if r["event"] == "llm"]
    assert (call["outcome"], call["input_tokens"], call["output_tokens"]) == ("cancelled", 1234, 1)
    store = Store.open(home / "picortex.db")
    try:
        spent = store.spend(str(w.guild_id), key)
    finally:
        store.close()
    assert spent == pytest.approx(BUILTIN_PRICES["claude-sonnet-5-5"].cost(1234, 1), abs=1e-12)
