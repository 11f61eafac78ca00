"""Chat commands end to end (SPEC 5 step 3, SPEC 6): prefixes, mentions, config, polls, help."""

from __future__ import annotations

from pathlib import Path

import pytest

from picortex.core.poll import NUMBER_EMOJI
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time


async def _reply(run: Running, msg: dict[str, object]) -> str:
    """The text of the bot's (first) reply to `msg`."""
    await run.wait_until(lambda: bool(run.replies_to(int(str(msg["id"])))))
    return str(run.replies_to(int(str(msg["id"])))[0]["content"])


async def test_wakeword_is_case_insensitive_and_slash_prefix_works(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        for text in ("!s help", "!S help", "/picortex help", "/PICORTEX  help"):
            msg = run.say(w.general_id, w.alice_id, f"{run.mention()} {text}")
            assert "Commands (start with `!s `)" in await _reply(run, msg)
        # A wakeword needs a space after it, and a command never reaches the model.
        assert run.sim.model.calls == []
        assert [e["command"] for e in run.events("command")] == ["help"] * 4


async def test_a_command_needs_a_mention_in_a_guild_but_not_in_a_dm(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.say(w.general_id, w.alice_id, "!s help")
        # mentions-only: a plain message is not for us, just chatter
        await run.wait_until(lambda: run.bot.router.trusted_chatter == 1)
        dm = run.dm_id(w.alice_id)
        direct = run.say(dm, w.alice_id, "!s help")
        assert "Commands (start with `!s `)" in await _reply(run, direct)
        assert run.sim.bot_messages(w.general_id) == []
        assert run.sim.model.calls == []
        assert [e["message_id"] for e in run.events("command")] == [direct["id"]]


async def test_config_set_persists_and_shows_in_the_cli(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        dm = run.dm_id(w.alice_id)
        run.say(w.general_id, w.alice_id, f"{run.mention()} !s config set wakeword !pc")
        replies = await run.sim.wait_bot_messages(1, dm)  # config is sensitive: by DM
        assert "`wakeword` is now `!pc`" in replies[0]["content"]
        assert run.bot.store.runtime_config() == {"wakeword": "!pc"}
        # The new wakeword works at once (case-insensitively); the old one is just chat now.
        got = run.say(w.general_id, w.alice_id, f"{run.mention()} !PC config get wakeword")
        await run.sim.wait_bot_messages(2, dm)
        assert run.sim.bot_messages(dm)[1]["content"] == "`wakeword` = `!pc`"
        assert run.events("command")[-1]["message_id"] == got["id"]
        bad = run.say(w.general_id, w.alice_id, f"{run.mention()} !pc config set wakeword a b c")
        await run.sim.wait_bot_messages(3, dm)
        assert "Could not set `wakeword`" in run.sim.bot_messages(dm)[2]["content"]
        assert run.events("command")[-1]["message_id"] == bad["id"]
        assert run.events("command")[-1]["result"] == "error"
        shown = await run.cli("config", "get", "wakeword")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout.strip() == "wakeword = !pc  (runtime)"
    # Persisted: a new bot on the same home keeps the setting.
    async with running_bot(tmp_path) as again:
        assert again.bot.source().wakeword == "!pc"


async def test_poll_counts_reactions_and_posts_the_result(tmp_path: Path) -> None:
    toml = "poll_seconds = 1\n"
    async with running_bot(tmp_path, toml=toml, relaxed_limits=True) as run:
        w = run.world
        off = run.say(w.general_id, w.alice_id, f'{run.mention()} !s poll "Lunch?" pizza // sushi')
        assert "Polls are turned off" in await _reply(run, off)
        run.say(w.general_id, w.alice_id, f"{run.mention()} !s config set poll_enabled true")
        await run.sim.wait_bot_messages(1, run.dm_id(w.alice_id))
        poll = run.say(
            w.general_id, w.alice_id, f"{run.mention()} !s poll Lunch? | pizza | sushi | soup"
        )
        started = await run.wait_event("poll", action="start")
        poll_id = int(started[0]["message_id"])
        posted = run.sim.message(w.general_id, poll_id)
        assert posted["message_reference"]["message_id"] == poll["id"]
        assert "pizza" in posted["content"] and "soup" in posted["content"]
        # The bot seeded one number reaction per option.
        seeded = [r["emoji"]["name"] for r in posted["reactions"]]
        assert seeded == list(NUMBER_EMOJI[:3])
        # Anyone votes, trusted or not; the bot's own seeds do not count.
        carol = run.sim.add_user("carol")
        run.sim.add_reaction(w.general_id, poll_id, w.bob_id, NUMBER_EMOJI[1])
        run.sim.add_reaction(w.general_id, poll_id, carol, NUMBER_EMOJI[1])
        run.sim.add_reaction(w.general_id, poll_id, w.alice_id, NUMBER_EMOJI[0])
        result = await run.wait_event("poll", action="result")
        assert result[0]["votes"] == [1, 2, 0]
        await run.wait_until(lambda: len(run.sim.bot_messages(w.general_id)) == 3)
        closing = run.sim.bot_messages(w.general_id)[-1]
        assert "Poll closed" in closing["content"]
        assert "sushi: 2 votes" in closing["content"]
        assert "Winner: sushi" in closing["content"]
        assert closing["message_reference"]["message_id"] == str(poll_id)
        assert run.sim.model.calls == []


async def test_speak_stay_and_unknown_commands(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        speak = run.say(w.general_id, w.alice_id, f"{run.mention()} !s speak hello")
        assert "voice is not available" in await _reply(run, speak)
        stay = run.say(w.general_id, w.alice_id, f"{run.mention()} !s stay")
        assert "voice is not available" in await _reply(run, stay)
        unknown = run.say(w.general_id, w.alice_id, f"{run.mention()} !s dance wildly")
        text = await _reply(run, unknown)
        assert text.startswith("I don't know `dance`.")
        assert "whitelist" in text and len(text) < 300
        assert run.sim.model.calls == []
        assert [e["command"] for e in run.events("command")] == ["speak", "stay", "unknown"]
        assert [e["reason"] for e in run.events("decision")] == [
            "speak command from an admin",
            "stay command from an admin",
            "unknown command from an admin",
        ]


async def test_an_admin_who_is_not_the_owner_cannot_use_owner_powers(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "admin")
        dm = run.dm_id(w.bob_id)
        attempts = (
            "config set budget.ceiling_usd 1000000",
            "config set models.general claude-opus-5-5",
            f"whitelist add <@{w.bob_id + 1}> admin",
            f"whitelist remove <@{w.bob_id}>",
        )
        for i, text in enumerate(attempts, start=1):
            run.say(w.general_id, w.bob_id, f"{run.mention()} !s {text}")
            replies = await run.sim.wait_bot_messages(i, dm)
            assert replies[-1]["content"].startswith("Only the owner can")
        assert run.bot.store.runtime_config() == {}
        assert run.bot.store.trust_list() == [(w.bob_id, "admin")]
        assert [e["result"] for e in run.events("command")] == ["denied"] * 4
        # Numbers have upper bounds, for the owner too: one sentence, nothing stored.
        run.say(w.general_id, w.alice_id, f"{run.mention()} !s config set context_chars 100000000")
        owner_dm = run.dm_id(w.alice_id)
        (reply,) = await run.sim.wait_bot_messages(1, owner_dm)
        assert "context_chars must be at most 50000" in reply["content"]
        assert run.bot.store.runtime_config() == {}


async def test_attention_show_names_no_local_path(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} !s attention show")
        text = await _reply(run, msg)
        assert str(tmp_path) not in text
        assert f"PICORTEX_HOME/chats/{w.general_id}/.picortex/prompts/discriminator.md" in text


async def test_the_owner_sets_a_price_from_chat_and_the_model_calls_use_it(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        dm = run.dm_id(w.alice_id)
        text = f"{run.mention()} !s config set prices.claude-sonnet-5-5.output 12"
        run.say(w.general_id, w.alice_id, text)
        (reply,) = await run.sim.wait_bot_messages(1, dm)
        assert reply["content"] == "`prices.claude-sonnet-5-5.output` is now `12`."
        assert run.bot.store.runtime_config() == {"prices.claude-sonnet-5-5.output": "12"}
        shown = await run.cli("config", "get", "prices.claude-sonnet-5-5.output")
        assert shown.stdout.strip() == "prices.claude-sonnet-5-5.output = 12  (runtime)"
