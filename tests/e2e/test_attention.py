"""Attention gating end to end (SPEC 5 step 5, 7; issue 6): the five modes in a guild
channel and a DM, the hard rules, mode switching by command and CLI, thread inheritance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from picortex.sim.model import ModelReply
from picortex.store.chathome import PROMPT_RELPATH
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time

WAIT = 15.0  # seconds; a generous bound on a local round trip, not a speed claim
TRUE = '{"should_respond": true, "reason": "bob asks the bot for its view"}'
FALSE = '{"should_respond": false, "reason": "small talk between people"}'


async def decision(run: Running, msg: dict[str, Any]) -> dict[str, Any]:
    """The `decision` event for a posted message."""
    with trio.fail_after(WAIT):
        found = await run.wait_event("decision", message_id=int(msg["id"]))
    return found[0]


async def answered(run: Running, msg: dict[str, Any]) -> dict[str, Any]:
    """The bot's reply to `msg`, once the answer is logged whole (its model call too: a call
    is closed and logged just behind its answer's post)."""
    with trio.fail_after(WAIT):
        await run.wait_until(lambda: bool(run.replies_to(int(msg["id"]))))
    await run.wait_event("reply", trigger_id=int(msg["id"]))
    return run.replies_to(int(msg["id"]))[0]


async def chatter(run: Running, msg: dict[str, Any], word: str = "tea") -> None:
    """`msg` was decided as chatter: stored for recall and counted, not answered, not logged."""
    await run.idle()  # decided, and every write it made is committed
    stored = await run.bot.store.read(
        lambda db: {h.message_id for h in db.search_memory(word, 0.0, None, 50)}
    )
    assert int(msg["id"]) in stored
    assert run.replies_to(int(msg["id"])) == []
    assert run.bot.router.trusted_chatter == 1
    assert [e for e in run.events("decision") if int(e["message_id"]) == int(msg["id"])] == []


async def not_answered(run: Running, msg: dict[str, Any]) -> dict[str, Any]:
    """The decision for `msg`, after checking that no reply came."""
    found = await decision(run, msg)
    await run.idle()
    assert run.replies_to(int(msg["id"])) == []
    return found


def typing_in(run: Running, channel_id: int) -> int:
    return sum(
        1
        for r in run.sim.requests
        if r.method == "POST" and r.path.endswith(f"/channels/{channel_id}/typing")
    )


def stages(run: Running) -> list[str]:
    return [e["stage"] for e in run.events("llm")]


# Each way a plain message from a trusted user (no mention, not a reply) goes through the
# whole bot, once; the table of every mode in a guild and a DM is a core test
# (tests/core/test_attention.py). Discriminate modes get one scripted verdict.
MODE_CASES = [
    ("guild", "always", None, "respond", "always mode answers every message"),
    ("guild", "mentions-only", None, "skip", "chatter"),
    (
        "dm",
        "mentions-only",
        None,
        "skip",
        "mentions-only mode: no mention of the bot and not a reply",
    ),
    ("guild", "discriminate", TRUE, "respond", "discriminator: bob asks the bot for its view"),
    ("dm", "discriminate", FALSE, "skip", "discriminator: small talk between people"),
    ("guild", "discriminate-quiet", FALSE, "skip", "discriminator: small talk between people"),
    ("guild", "silent", None, "record", "chatter"),
    ("dm", "silent", None, "record", "silent mode: recorded, never answered"),
]


@pytest.mark.parametrize(("place", "mode", "verdict", "outcome", "reason"), MODE_CASES)
async def test_each_mode_for_a_plain_message(
    tmp_path: Path, place: str, mode: str, verdict: str | None, outcome: str, reason: str
) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        chat = w.general_id if place == "guild" else run.dm_id(w.bob_id)
        run.bot.store.set_attention_mode(chat, mode, 0.0)
        if verdict is not None:
            run.sim.model.script(verdict)
        msg = run.say(chat, w.bob_id, "what do you all think about green tea")
        if place == "guild" and mode in ("mentions-only", "silent"):
            # Nobody addressed the bot and the mode cannot answer: chatter (SPEC 5).
            await chatter(run, msg)
            assert stages(run) == []
            return
        if outcome == "respond":
            reply = await answered(run, msg)
            assert reply["channel_id"] == str(chat)
            found = await decision(run, msg)
        else:
            found = await not_answered(run, msg)
        assert found["outcome"] == outcome
        assert found["mode"] == mode
        assert found["reason"].startswith(reason)
        expected = (["discriminate"] if verdict else []) + (
            ["generate"] if outcome == "respond" else []
        )
        assert stages(run) == expected
        if mode == "discriminate-quiet" and outcome == "skip":
            assert typing_in(run, chat) == 0


# The outcome and reason of each hard rule in every mode (mention, reply, the owner's DM,
# attachments only) are core tests (tests/core/test_attention.py); these walk one of each
# through the whole bot.


async def test_a_mention_in_a_guild_channel(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.bot.store.set_attention_mode(w.general_id, "discriminate", 0.0)
        msg = run.say(w.general_id, w.bob_id, f"{run.mention()} what about green tea")
        await answered(run, msg)
        found = await decision(run, msg)
        assert (found["outcome"], found["reason"]) == ("respond", "the message mentions the bot")
        assert stages(run) == ["generate"]  # a rule fired: the discriminator is not asked


async def test_a_reply_to_the_bot_is_answered_without_a_mention(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        first = run.say(w.general_id, w.bob_id, f"{run.mention()} hello")
        bot_reply = await answered(run, first)
        await run.idle()
        follow = run.say(
            w.general_id, w.alice_id, "and for me?", reply_to=int(bot_reply["id"]), reply_ping=False
        )
        assert follow["mentions"] == []
        await answered(run, follow)
        found = await decision(run, follow)
        assert (found["outcome"], found["reason"]) == ("respond", "reply to a message from the bot")
        # A reply to someone else is not a reply to the bot (carol has no open request).
        carol = run.sim.add_user("carol")
        run.bot.store.set_tier(carol, "user")
        other = run.say(w.general_id, carol, "me too, tea", reply_to=int(follow["id"]))
        await chatter(run, other)


async def test_attachment_only_message_is_answered_in_always(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.bot.store.set_attention_mode(w.general_id, "always", 0.0)
        msg = run.say(w.general_id, w.bob_id, "", attachments=["holiday.jpg"])
        await answered(run, msg)
        found = await decision(run, msg)
        assert found["reason"] == "message with attachments only: always mode answers"


async def test_attention_commands_switch_and_show_the_mode(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "trusted")
        chat_home = run.home / "chats" / str(w.general_id)
        prompt = chat_home / PROMPT_RELPATH

        show = run.say(w.general_id, w.alice_id, f"{run.mention()} !s attention show")
        text = (await answered(run, show))["content"]
        assert "`mentions-only`" in text
        assert str(prompt.relative_to(run.home)) in text and str(run.home) not in text

        # A trusted user who is not an admin is refused and nothing changes.
        denied = run.say(w.general_id, w.bob_id, f"{run.mention()} !s attention silent")
        assert "needs an admin" in (await answered(run, denied))["content"]
        assert run.bot.store.get_chat_config(w.general_id) is None
        assert run.events("command")[-1]["result"] == "denied"

        switch = run.say(w.general_id, w.alice_id, f"{run.mention()} !s attention discriminate")
        text = (await answered(run, switch))["content"]
        assert text == "Attention mode is now `discriminate` (was `mentions-only`)."
        config = run.bot.store.get_chat_config(w.general_id)
        assert config is not None and config.attention_mode == "discriminate"
        # The chat home and its prompt exist from the switch on, as a git repository.
        assert prompt.is_file() and (chat_home / ".git").is_dir()

        show = run.say(w.general_id, w.alice_id, f"{run.mention()} !s attention show")
        assert "`discriminate`" in (await answered(run, show))["content"]

        # The new mode applies to the next message at once.
        run.sim.model.script(FALSE)
        plain = run.say(w.general_id, w.bob_id, "nice weather")
        found = await not_answered(run, plain)
        assert (found["mode"], found["outcome"]) == ("discriminate", "skip")
        assert stages(run) == ["discriminate"]
        assert run.sim.model.calls[0].model == "claude-haiku-5-5"


async def test_attention_command_in_a_dm_sets_the_dm_mode(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        bob_dm = run.dm_id(w.bob_id)
        # bob is a user: in his own DM the command is refused too.
        refused = run.say(bob_dm, w.bob_id, "!s attention silent")
        assert "needs an admin" in (await answered(run, refused))["content"]
        assert run.bot.store.get_chat_config(bob_dm) is None
        alice_dm = run.dm_id(w.alice_id)
        switch = run.say(alice_dm, w.alice_id, "!s attention mentions-only")
        assert "now `mentions-only`" in (await answered(run, switch))["content"]
        config = run.bot.store.get_chat_config(alice_dm)
        assert config is not None and config.attention_mode == "mentions-only"
        # The owner's DM is answered in every mode; bob's DM keeps the `always` default.
        hello = run.say(bob_dm, w.bob_id, "hello")
        assert (await decision(run, hello))["mode"] == "always"
        await answered(run, hello)


async def test_threads_inherit_the_parent_mode_unless_set(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        set_always = run.say(w.general_id, w.alice_id, f"{run.mention()} !s attention always")
        await answered(run, set_always)
        thread = run.sim.add_thread(w.general_id, "tea talk", owner_id=w.bob_id)
        in_thread = run.say(thread, w.bob_id, "oolong or sencha")
        reply = await answered(run, in_thread)
        assert reply["channel_id"] == str(thread)
        assert (await decision(run, in_thread))["mode"] == "always"
        # The thread gets its own mode; the parent keeps its own.
        own = run.say(thread, w.alice_id, f"{run.mention()} !s attention silent")
        assert "now `silent` (was `always`)" in (await answered(run, own))["content"]
        # carol, so that no continuation window of bob's is open.
        carol = run.sim.add_user("carol")
        run.bot.store.set_tier(carol, "user")
        quiet = run.say(thread, carol, f"{run.mention()} matcha then")
        assert (await not_answered(run, quiet))["mode"] == "silent"
        parent = run.say(w.general_id, carol, "and in here?")
        assert (await decision(run, parent))["mode"] == "always"
        await answered(run, parent)


async def test_picortex_config_set_attention_for_one_chat(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        done = await run.cli("config", "set", f"attention.{w.random_id}", "always")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == f"attention.{w.random_id} = always"
        await run.wait_commit_seen(
            lambda: (
                getattr(run.bot.store.get_chat_config(w.random_id), "attention_mode", None)
                == "always"
            )
        )
        msg = run.say(w.random_id, w.bob_id, "anyone up for lunch")
        await answered(run, msg)
        assert (await decision(run, msg))["mode"] == "always"
        # Other chats keep the default (mentions-only): there it is chatter.
        other = run.say(w.general_id, w.bob_id, "anyone up for lunch")
        await chatter(run, other, "lunch")
        shown = await run.cli("config", "get", f"attention.{w.random_id}")
        assert shown.stdout.strip() == f"attention.{w.random_id} = always"
        bad = await run.cli("config", "set", f"attention.{w.random_id}", "sometimes")
        assert bad.returncode == 2
        assert "attention." in bad.stderr and "sometimes" in bad.stderr


async def test_untrusted_author_never_reaches_the_discriminator(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_attention_mode(w.general_id, "always", 0.0)
        stranger = run.sim.add_user("mallory")
        msg = run.say(w.general_id, stranger, "what is the admin password?")
        found = await not_answered(run, msg)
        assert found["outcome"] == "ignore"
        run.bot.store.set_attention_mode(w.general_id, "discriminate", 0.0)
        msg = run.say(w.general_id, stranger, "hey bot, what time is it?")
        assert (await not_answered(run, msg))["outcome"] == "ignore"
        assert run.sim.model.calls == []


async def test_discriminate_quiet_shows_typing_only_once_it_will_answer(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.bot.store.set_attention_mode(w.general_id, "discriminate-quiet", 0.0)
        # Both calls take a while, so that typing has time to show (or not).
        run.sim.model.script(
            ModelReply(text=TRUE, delay=0.5), ModelReply(text="Matcha.", delay=1.5)
        )
        msg = run.say(w.general_id, w.bob_id, "which tea has the most caffeine")
        with trio.fail_after(WAIT):
            await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        # Well into the classification, and the bot has done all it was going to by then:
        # nothing shows.
        await trio.sleep(0.3)
        await run.idle()
        assert typing_in(run, w.general_id) == 0
        await answered(run, msg)
        assert typing_in(run, w.general_id) >= 1  # while the answer was written
