"""Forgetting people end to end (SPEC 8): `forget me`, `forget @user`, slash, and recall
that never quotes someone taken off the trust list."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time

AGENTS = """
personas:
  - id: sleep
    name: Sleep Coach
    description: Helps people who sleep badly.
    domain_triggers: [insomnia]
"""
FILES = {"agents.yaml": AGENTS}
WAIT = 15.0  # seconds; a generous bound on a local round trip, not a speed claim


async def _memory_of(run: Running, author_id: int) -> list[tuple[str, int]]:
    """What recall could still find of `author_id` (messages and observations)."""
    hits = await run.bot.store.read(
        lambda db: db.search_memory("insomnia melatonin", since=0.0, workspace=None, limit=50)
    )
    return sorted((h.kind, h.message_id) for h in hits if h.author_id == author_id)


async def _bob_talks_about_insomnia(run: Running) -> None:
    w = run.world
    run.bot.store.set_tier(w.bob_id, "user")
    run.say(w.general_id, w.bob_id, "melatonin fixed my insomnia")
    run.say(w.general_id, w.bob_id, "insomnia is worse in summer")
    await run.wait_until(lambda: run.bot.router.trusted_chatter == 2)
    await run.bot.store.flush()
    assert len(await _memory_of(run, w.bob_id)) == 4  # two messages, two observations


async def _reply(run: Running, msg: dict[str, object], channel: int) -> str:
    await run.sim.wait_bot_messages(1, channel)
    replies = run.sim.bot_messages(channel)
    assert len(replies) == 1
    assert replies[0]["message_reference"]["message_id"] == msg["id"]
    return str(replies[0]["content"])


async def test_forget_me_deletes_what_i_said_at_once_and_says_how_much(tmp_path: Path) -> None:
    async with running_bot(tmp_path, files=FILES) as run:
        w = run.world
        await _bob_talks_about_insomnia(run)
        dm = run.dm_id(w.bob_id)
        asked = run.say(dm, w.bob_id, "!s forget me")
        # The command itself was stored (Bob is trusted) and goes with the rest.
        assert await _reply(run, asked, dm) == (
            "Forgot what you said: 3 messages and 2 observations deleted."
        )
        assert await _memory_of(run, w.bob_id) == []
        (event,) = run.events("command")
        assert (event["command"], event["result"], event["tier"]) == ("forget", "ok", "user")
        forgotten = [{"user_id": str(w.bob_id), "messages": 3, "observations": 2}]
        assert event["forgotten"] == forgotten
        assert run.sim.model.calls == []


async def test_someone_taken_off_the_trust_list_may_still_be_forgotten(tmp_path: Path) -> None:
    async with running_bot(tmp_path, files=FILES) as run:
        w = run.world
        await _bob_talks_about_insomnia(run)
        run.bot.store.remove_trust(w.bob_id)
        dm = run.dm_id(w.bob_id)
        other = run.say(dm, w.bob_id, "!s help")  # anything else: still never answered
        asked = run.say(dm, w.bob_id, "!s forget me")
        assert await _reply(run, asked, dm) == (
            "Forgot what you said: 2 messages and 2 observations deleted."
        )
        assert await _memory_of(run, w.bob_id) == []
        assert run.replies_to(int(str(other["id"]))) == []
        (event,) = run.events("command")
        assert (event["tier"], event["message_id"]) == ("untrusted", asked["id"])
        # In a server channel too, mentioning the bot; a stranger has nothing stored.
        stranger = run.sim.add_user("mallory")
        there = run.say(w.general_id, stranger, f"{run.mention()} !s forget me")
        await run.wait_until(lambda: bool(run.replies_to(int(str(there["id"])))))
        assert run.replies_to(int(str(there["id"])))[0]["content"] == (
            "Forgot what you said: 0 messages and 0 observations deleted."
        )
        assert run.sim.model.calls == []


async def test_an_admin_forgets_a_user_by_mention_and_slash_forgets_privately(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, files=FILES, relaxed_limits=True) as run:
        w = run.world
        await _bob_talks_about_insomnia(run)
        # Bob, a user, may not make the bot forget the owner.
        refused = run.say(w.general_id, w.bob_id, f"{run.mention()} !s forget <@{w.alice_id}>")
        await run.wait_until(lambda: bool(run.replies_to(int(str(refused["id"])))))
        assert "`forget` needs an admin" in run.replies_to(int(str(refused["id"])))[0]["content"]
        await run.wait_until(lambda: bool(run.sim.app_commands()))
        forgot = run.sim.run_slash(w.general_id, w.alice_id, f"picortex forget user:<@{w.bob_id}>")
        await run.wait_until(lambda: bool(forgot.answers))
        # Bob's two messages, his refused command, and the observations of the two.
        assert (
            forgot.text == f"Forgot what <@{w.bob_id}> said: 3 messages and 2 observations deleted."
        )
        assert forgot.ephemeral
        assert await _memory_of(run, w.bob_id) == []
        slash = [e for e in run.events("command") if e.get("source") == "slash"]
        assert [(e["command"], e["result"]) for e in slash] == [("forget", "ok")]


async def test_recall_never_quotes_someone_taken_off_the_trust_list(tmp_path: Path) -> None:
    async with running_bot(tmp_path, files=FILES, relaxed_limits=True) as run:
        w = run.world
        await _bob_talks_about_insomnia(run)
        for i in range(6):  # Bob's words leave the recent lines: only recall could bring them
            run.say(w.general_id, w.alice_id, f"small talk {i}")
        await run.wait_until(lambda: run.bot.router.trusted_chatter == 8)
        run.bot.store.remove_trust(w.bob_id)
        run.say(w.general_id, w.alice_id, f"{run.mention()} insomnia again, any tips?")
        with trio.fail_after(WAIT):
            await run.wait_event("persona.responded")
        prompt = "\n".join(str(m["content"]) for m in run.sim.model.calls[-1].messages)
        assert "melatonin" not in prompt
        assert "worse in summer" not in prompt
        assert run.events("persona")[0]["recall"] == 0


async def test_a_deleted_message_leaves_the_trigger_log_status_shows(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.sim.model.script("Noted.", "Sure.")
        said = run.say(w.general_id, w.bob_id, "my pin is 4321, do not tell")
        await run.wait_until(lambda: run.bot.router.trusted_chatter == 1)
        asked = run.say(w.general_id, w.alice_id, f"{run.mention()} SECRET-TRIGGER remember that")
        await run.wait_event("reply", trigger_id=int(asked["id"]))
        entry = run.bot.pipe.triggers.log.get(int(asked["id"]))
        assert entry is not None and "SECRET-TRIGGER" in entry.content
        assert any("4321" in line for line in entry.context)
        run.sim.delete_message(w.general_id, int(said["id"]))
        run.sim.delete_message(w.general_id, int(asked["id"]))
        await run.wait_event("message-delete", count=2)
        shown = str(run.bot.pipe.triggers.log.snapshot())
        assert "SECRET-TRIGGER" not in shown
        assert "4321" not in shown
        gone = run.bot.pipe.triggers.log.get(int(asked["id"]))
        assert gone is not None and gone.content == "(deleted)"
