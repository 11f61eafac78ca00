"""Trust tiers end to end (SPEC 5 step 2, SPEC 6 whitelist): who is answered, who may command."""

from __future__ import annotations

from pathlib import Path

import pytest

from picortex.store import Store
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time


async def _dm_reply(run: Running, user_id: int, count: int) -> str:
    """The text of the bot's `count`-th message in its DM with `user_id`."""
    replies = await run.sim.wait_bot_messages(count, run.dm_id(user_id))
    return str(replies[count - 1]["content"])


async def _command(run: Running, author: int, text: str, dm_count: int) -> str:
    """Send `@bot !s TEXT` in #general; return the reply the author gets by DM."""
    run.say(run.world.general_id, author, f"{run.mention()} !s {text}")
    return await _dm_reply(run, author, dm_count)


async def test_untrusted_author_is_never_answered_and_costs_no_model_call(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        ignored = run.say(w.general_id, w.bob_id, f"{run.mention()} are you there?")
        command = run.say(w.general_id, w.bob_id, f"{run.mention()} !s whitelist add <@{w.bob_id}>")
        dm = run.say(run.dm_id(w.bob_id), w.bob_id, "hello from a DM?")
        for msg in (ignored, command, dm):
            decision = await run.wait_event("decision", message_id=int(msg["id"]))
            assert decision[0]["outcome"] == "ignore"
            assert "untrusted" in decision[0]["reason"]
        owner = run.say(w.general_id, w.alice_id, f"{run.mention()} and me?")
        await run.wait_until(lambda: bool(run.replies_to(int(owner["id"]))))
        # Only the owner's message reached the model; nothing at all was said to bob.
        assert len(run.sim.model.calls) == 1
        assert "and me?" in str(run.sim.model.calls[0].messages)
        assert [m["content"] for m in run.sim.bot_messages()] == [
            run.replies_to(int(owner["id"]))[0]["content"]
        ]
        assert not run.events("trigger") or all(
            e["author_id"] == str(w.alice_id) for e in run.events("trigger")
        )
        assert run.bot.store.get_tier(w.bob_id) is None


async def test_whitelist_add_list_remove_by_mention_and_raw_id(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 0\n", relaxed_limits=True) as run:
        w = run.world
        carol = run.sim.add_user("carol")
        # Bare `whitelist` and `whitelist help` show the help, by DM (sensitive list).
        assert "whitelist add" in await _command(run, w.alice_id, "whitelist", 1)
        assert "whitelist remove" in await _command(run, w.alice_id, "WHITELIST help", 2)
        assert run.sim.bot_messages(w.general_id) == []

        added = await _command(run, w.alice_id, f"whitelist add <@{w.bob_id}>", 3)
        assert f"Added as user: <@{w.bob_id}>" in added
        assert run.bot.store.get_tier(w.bob_id) == "user"
        # bob is answered now.
        asked = run.say(w.general_id, w.bob_id, f"{run.mention()} may I ask now?")
        await run.wait_until(lambda: bool(run.replies_to(int(asked["id"]))))

        # Raw ids and tiers; several users at once.
        raised = await _command(run, w.alice_id, f"whitelist add {w.bob_id} {carol} trusted", 4)
        assert f"Changed to trusted: <@{w.bob_id}>" in raised
        assert f"Added as trusted: <@{carol}>" in raised
        assert dict(run.bot.store.trust_list()) == {w.bob_id: "trusted", carol: "trusted"}

        listing = await _command(run, w.alice_id, "whitelist list", 5)
        assert f"<@{w.alice_id}>: admin (owner)" in listing
        assert f"<@{w.bob_id}>: trusted" in listing
        assert f"<@{carol}>: trusted" in listing

        # The owner cannot be removed; others can, by mention or id.
        kept = await _command(run, w.alice_id, f"whitelist remove <@{w.alice_id}>", 6)
        assert "owner cannot be removed" in kept
        removed = await _command(run, w.alice_id, f"whitelist remove <@{w.bob_id}> {carol}", 7)
        assert f"Removed <@{w.bob_id}>, <@{carol}>." in removed
        assert run.bot.store.trust_list() == []

        # bob is ignored again, and costs nothing.
        calls = len(run.sim.model.calls)
        again = run.say(w.general_id, w.bob_id, f"{run.mention()} still there?")
        decision = await run.wait_event("decision", message_id=int(again["id"]))
        assert decision[0]["outcome"] == "ignore"
        assert len(run.sim.model.calls) == calls
        # Every command was logged with its requester and tier; none replied in the channel.
        commands = run.events("command")
        assert len(commands) == 7
        assert {c["requester"] for c in commands} == {str(w.alice_id)}
        assert {c["tier"] for c in commands} == {"admin"}
        assert run.sim.bot_messages(w.general_id) == run.replies_to(int(asked["id"]))


async def test_tiers_decide_who_may_run_whitelist(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 0\n") as run:
        w = run.world
        carol = run.sim.add_user("carol")
        await _command(run, w.alice_id, f"whitelist add <@{w.bob_id}> trusted", 1)
        # A trusted user may chat but not manage the list.
        denied = await _command(run, w.bob_id, f"whitelist add <@{carol}>", 1)
        assert "needs an admin" in denied
        assert run.bot.store.get_tier(carol) is None
        # ...until the owner makes them admin; then they can, but never remove the owner.
        await _command(run, w.alice_id, f"whitelist add <@{w.bob_id}> admin", 2)
        ok = await _command(run, w.bob_id, f"whitelist add <@{carol}>", 2)
        assert f"Added as user: <@{carol}>" in ok
        assert run.bot.store.get_tier(carol) == "user"
        refused = await _command(run, w.bob_id, f"whitelist remove {w.alice_id}", 3)
        assert "owner cannot be removed" in refused
        # The owner is admin even with no row in the trust list at all.
        assert run.bot.store.get_tier(w.alice_id) is None
        outcomes = [(int(c["requester"]), c["tier"], c["result"]) for c in run.events("command")]
        assert outcomes == [
            (w.alice_id, "admin", "ok"),
            (w.bob_id, "trusted", "denied"),
            (w.alice_id, "admin", "ok"),
            (w.bob_id, "admin", "ok"),
            (w.bob_id, "admin", "error"),
        ]


async def test_whitelist_reply_never_falls_back_to_the_channel(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.sim.inject_rest_error("POST", "/users/@me/channels", 403, count=None, code=50007)
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} !s whitelist list")
        failed = await run.wait_event("reply", result="failed")
        assert failed[0]["command"] == "whitelist"
        assert failed[0]["mode"] == "dm"
        assert failed[0]["trigger_id"] == msg["id"]
        # The command itself ran and was logged; its sensitive answer was not posted anywhere.
        assert (await run.wait_event("command"))[0]["command"] == "whitelist"
        assert run.sim.bot_messages() == []
        posts = [r for r in run.sim.requests if r.method == "POST" and "/messages" in r.path]
        assert posts == []
        # The bot carries on: a later question is answered in the channel.
        run.sim.clear_rest_errors()
        later = run.say(w.general_id, w.bob_id, f"{run.mention()} ignored: bob is untrusted")
        await run.wait_event("decision", message_id=int(later["id"]))
        run.sim.model.script("fine, thanks")
        ask = run.say(w.random_id, w.alice_id, f"{run.mention()} all well?")
        await run.wait_until(lambda: bool(run.replies_to(int(ask["id"]))))
        assert run.sim.bot_messages(w.general_id) == []


async def test_trust_list_persists_in_the_store(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        await _command(run, run.world.alice_id, f"whitelist add <@{run.world.bob_id}> admin", 1)
        home = run.home
    with Store.open(home / "picortex.db") as store:
        assert store.trust_list() == [(run.world.bob_id, "admin")]
