"""Slash commands end to end (SPEC 15): registration, each command, deferral, tiers, silence."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from picortex.sim import Simulator
from picortex.sim.interactions import SimInteraction
from picortex.store.cache_files import read_channel
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time


async def _registered(run: Running, guild_id: int | None = None) -> list[dict[str, object]]:
    await run.wait_until(lambda: bool(run.sim.app_commands(guild_id)))
    return run.sim.app_commands(guild_id)


async def _answer(run: Running, interaction: SimInteraction, kinds: int = 1) -> str:
    await run.wait_until(lambda: len(interaction.answers) >= kinds)
    return interaction.text


def _puts(run: Running) -> list[str]:
    return [r.path for r in run.sim.requests if r.method == "PUT" and "/commands" in r.path]


async def test_the_command_tree_is_registered_globally_once(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        commands = await _registered(run)
        assert [c["name"] for c in commands] == ["picortex"]
        tree = commands[0]
        assert tree["type"] == 1
        assert tree["contexts"] == [0, 1]
        subs = {o["name"]: o for o in tree["options"]}  # type: ignore[union-attr]
        assert set(subs) == {
            "ask",
            "attention",
            "access",
            "whitelist",
            "config",
            "poll",
            "forget",
            "help",
        }
        assert subs["ask"]["options"][0] == {
            "type": 3,
            "name": "text",
            "description": "Your question",
            "required": True,
            "max_length": 4000,
        }
        mode = subs["attention"]["options"][0]
        assert mode["type"] == 3 and not mode.get("required")
        assert [c["value"] for c in mode["choices"]] == [
            "always",
            "mentions-only",
            "discriminate",
            "discriminate-quiet",
            "silent",
            "default",
            "show",
        ]
        whitelist = {o["name"]: o for o in subs["whitelist"]["options"]}
        assert subs["whitelist"]["type"] == 2
        assert whitelist["add"]["options"][0]["type"] == 6  # a user option
        assert whitelist["remove"]["options"][0]["type"] == 6
        assert _puts(run) == [f"/applications/{run.sim.world.application_id}/commands"]
        await run.wait_event("slash", action="registered", scope="global")
        # A new session with the same tree registers nothing again.
        run.sim.invalidate_session(resumable=False)
        await run.wait_event("slash", action="unchanged", scope="global")
        assert len(_puts(run)) == 1


async def test_guild_ids_register_per_guild_and_leave_global_alone(tmp_path: Path) -> None:
    sim = Simulator(heartbeat_interval_ms=5000)
    guild = sim.add_guild("elsewhere")
    async with running_bot(tmp_path, sim=sim, toml=f"[slash]\nguild_ids = [{guild}]\n") as run:
        commands = await _registered(run, guild)
        assert commands[0]["guild_id"] == str(guild)
        assert "contexts" not in run.sim.rest.interactions.overwrites[0][1][0]
        assert run.sim.app_commands() == []
        assert _puts(run) == [
            f"/applications/{run.sim.world.application_id}/guilds/{guild}/commands"
        ]


async def test_users_own_modes_and_access_by_slash(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        await _registered(run)
        run.bot.store.set_tier(w.bob_id, "user")
        own = run.sim.run_slash(
            w.general_id, w.alice_id, f"picortex attention mode:always user:<@{w.bob_id}>"
        )
        assert "own mode here is now `always`" in await _answer(run, own)
        assert run.bot.store.get_user_attention(w.general_id, w.bob_id) == "always"
        helpers = run.sim.add_role(w.guild_id, "helpers")
        role = run.sim.run_slash(
            w.general_id, w.alice_id, f"picortex access action:allow-role role:<@&{helpers}>"
        )
        assert f"`access.allow_roles` is now `{helpers}`" in await _answer(run, role)
        deny = run.sim.run_slash(
            w.general_id,
            w.alice_id,
            f"picortex access action:deny-channel channel:<#{w.random_id}>",
        )
        assert f"`access.deny_channels` is now `{w.random_id}`" in await _answer(run, deny)
        show = run.sim.run_slash(w.general_id, w.alice_id, "picortex access")
        assert f"<@&{helpers}>" in await _answer(run, show)
        # A member holding the role may use the bot's open commands, not the admin ones.
        carol = run.sim.add_user("carol")
        run.sim.give_role(carol, helpers)
        helped = run.sim.run_slash(w.general_id, carol, "picortex help")
        assert "Commands" in await _answer(run, helped)
        refused = run.sim.run_slash(w.general_id, carol, "picortex access")
        assert "needs an admin" in await _answer(run, refused)


async def test_slash_disabled_registers_nothing(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml="[slash]\nenabled = false\n") as run:
        msg = run.say(run.world.general_id, run.world.alice_id, f"{run.mention()} !s help")
        await run.wait_event("reply", trigger_id=int(msg["id"]))
        assert _puts(run) == []


async def test_owner_commands_answer_with_ephemeral_sensitive_ones(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        await _registered(run)
        show = run.sim.run_slash(w.general_id, w.alice_id, "picortex attention")
        assert "Attention mode: `mentions-only`" in await _answer(run, show)
        assert show.response_type == 4 and not show.ephemeral
        # The visible answer is a channel message of the command type.
        posted = run.sim.bot_messages(w.general_id)
        assert posted[-1]["type"] == 20 and "mentions-only" in posted[-1]["content"]

        changed = run.sim.run_slash(w.general_id, w.alice_id, "picortex attention mode:always")
        assert "now `always`" in await _answer(run, changed)
        assert run.bot.store.get_chat_config(w.general_id).attention_mode == "always"

        added = run.sim.run_slash(
            w.general_id, w.alice_id, f"picortex whitelist add <@{w.bob_id}> trusted"
        )
        assert f"Added as trusted: <@{w.bob_id}>" in await _answer(run, added)
        assert added.ephemeral  # whitelist is a sensitive command
        assert dict(run.bot.store.trust_list()) == {w.bob_id: "trusted"}
        listed = run.sim.run_slash(w.general_id, w.alice_id, "picortex whitelist list")
        assert f"<@{w.bob_id}>: trusted" in await _answer(run, listed)
        removed = run.sim.run_slash(
            w.general_id, w.alice_id, f"picortex whitelist remove {w.bob_id}"
        )
        assert "Removed" in await _answer(run, removed)
        assert run.bot.store.trust_list() == []

        got = run.sim.run_slash(w.general_id, w.alice_id, "picortex config get key:wakeword")
        assert await _answer(run, got) == "`wakeword` = `!s`"
        assert got.ephemeral
        set_ = run.sim.run_slash(
            w.general_id, w.alice_id, "picortex config set key:poll_seconds value:30"
        )
        assert "`poll_seconds` is now `30`" in await _answer(run, set_)
        assert run.bot.store.runtime_config()["poll_seconds"] == "30"
        bad = run.sim.run_slash(
            w.general_id, w.alice_id, "picortex config set key:poll_seconds value:soon"
        )
        assert "Could not set `poll_seconds`" in await _answer(run, bad)
        assert bad.ephemeral

        helped = run.sim.run_slash(w.general_id, w.alice_id, "picortex help")
        assert "Commands" in await _answer(run, helped)
        # None of it cost a model call, and every command went through the executor.
        assert run.sim.model.calls == []
        commands = [e for e in run.events("command") if e.get("source") == "slash"]
        assert [e["command"] for e in commands] == [
            "attention",
            "attention",
            "whitelist",
            "whitelist",
            "whitelist",
            "config",
            "config",
            "config",
            "help",
        ]


async def test_ask_defers_then_edits_the_original_with_the_answer(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        await _registered(run)
        run.sim.model.script("Forty-two, give or take.")
        ask = run.sim.run_slash(w.general_id, w.alice_id, "picortex ask what is the answer?")
        assert await _answer(run, ask, kinds=2) == "Forty-two, give or take."
        assert [a.kind for a in ask.answers] == ["deferred", "edit"]
        assert ask.response_type == 5
        calls = run.sim.model.calls
        assert len(calls) == 1 and "what is the answer?" in str(calls[0].messages)
        # The edit went to the webhook's @original, and the message in the channel shows it.
        patch = [r for r in run.sim.requests if r.method == "PATCH"]
        assert patch and patch[0].path.endswith("/messages/@original")
        assert run.sim.bot_messages(w.general_id)[-1]["content"] == "Forty-two, give or take."
        # The token travels in paths only: never in the action log.
        log = (run.home / "actions.jsonl").read_text()
        assert ask.token not in log
        # The answer's `reply` event names the command it answers.
        replied = await run.wait_event("reply", trigger_id=ask.id, result="posted")
        assert replied[0]["command"] == "ask" and not replied[0].get("refused")


async def test_a_long_answer_continues_in_follow_up_messages(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        await _registered(run)
        long = "\n".join(f"line {n} " + "x" * 90 for n in range(60))  # about 6000 characters
        run.sim.model.script(long)
        ask = run.sim.run_slash(w.general_id, w.alice_id, "picortex ask write a lot")
        await run.wait_event("reply", trigger_id=ask.id, result="posted")
        kinds = [a.kind for a in ask.answers]
        assert kinds[:2] == ["deferred", "edit"] and kinds.count("followup") >= 2
        assert all(len(a.content) <= 2000 for a in ask.answers)
        # Streamed: each part shows its last edit. Split at line boundaries: every line
        # arrives once, in order.
        final: dict[int | None, str] = {}
        for answer in ask.answers[1:]:
            key = None if answer.kind == "edit" else answer.message_id
            final[key] = answer.content
        got = "\n".join(final.values()).split()
        assert got == long.split()


async def test_strangers_get_a_private_refusal_and_no_model_call(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        await _registered(run)
        stranger = run.sim.add_user("mallory")
        for line in ("picortex ask hello", "picortex attention mode:silent"):
            refused = run.sim.run_slash(w.general_id, stranger, line)
            assert "not on this bot's trust list" in await _answer(run, refused)
            assert refused.ephemeral and refused.response_type == 4
            # The refusal's `reply` event names the command it refused, and says so.
            replied = await run.wait_event("reply", trigger_id=refused.id)
            assert replied[0]["command"] == line.split()[1]
            assert replied[0]["refused"] is True
        assert run.sim.model.calls == []
        assert run.bot.store.get_chat_config(w.general_id) is None
        assert run.sim.bot_messages(w.general_id) == []  # ephemeral: nothing in the channel


async def test_a_user_tier_is_refused_admin_commands_privately(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        await _registered(run)
        run.bot.store.set_tier(w.bob_id, "user")
        denied = run.sim.run_slash(w.general_id, w.bob_id, "picortex attention mode:always")
        assert "needs an admin" in await _answer(run, denied)
        assert denied.ephemeral
        assert run.bot.store.get_chat_config(w.general_id) is None
        run.sim.model.script("Hi Bob.")
        ask = run.sim.run_slash(w.general_id, w.bob_id, "picortex ask hi")
        assert await _answer(run, ask, kinds=2) == "Hi Bob."


async def test_a_silent_channel_still_answers_slash_commands(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        await _registered(run)
        run.bot.store.set_attention_mode(w.general_id, "silent", 0.0)
        mention = run.say(w.general_id, w.alice_id, f"{run.mention()} are you there?")
        await run.wait_event("decision", message_id=int(mention["id"]))
        run.sim.model.script("Still here.")
        ask = run.sim.run_slash(w.general_id, w.alice_id, "picortex ask are you there?")
        assert await _answer(run, ask, kinds=2) == "Still here."
        shown = run.sim.run_slash(w.general_id, w.alice_id, "picortex attention mode:show")
        assert "`silent`" in await _answer(run, shown)
        decision = await run.wait_event("decision", message_id=ask.id)
        assert decision[0]["outcome"] == "respond"


async def test_slash_commands_work_in_a_dm(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        await _registered(run)
        dm = run.dm_id(w.alice_id)
        helped = run.sim.run_slash(dm, w.alice_id, "picortex help topic:poll")
        assert "poll" in (await _answer(run, helped)).lower()


async def test_config_keys_autocomplete_for_admins_only(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        await _registered(run)
        typed = run.sim.run_slash(
            w.general_id, w.alice_id, "picortex config set key:poll", autocomplete="key"
        )
        await _answer(run, typed)
        names = [c["name"] for c in typed.answers[0].choices]
        assert names[:2] == ["poll_enabled", "poll_seconds"]
        stranger = run.sim.add_user("mallory")
        other = run.sim.run_slash(w.general_id, stranger, "picortex config get", autocomplete="key")
        await _answer(run, other)
        assert other.answers[0].choices == []


async def test_a_slash_poll_counts_reactions_on_the_response(tmp_path: Path) -> None:
    async with running_bot(
        tmp_path, toml="poll_enabled = true\npoll_seconds = 1\n", relaxed_limits=True
    ) as run:
        w = run.world
        await _registered(run)
        poll = run.sim.run_slash(
            w.general_id, w.alice_id, "picortex poll question:Lunch? option1:Pizza option2:Soup"
        )
        assert "Lunch?" in await _answer(run, poll)
        assert poll.original_id is not None
        await run.wait_until(
            lambda: len(run.sim.message(w.general_id, poll.original_id).get("reactions", [])) == 2
        )
        result = await run.wait_event("poll", action="result")
        assert result[0]["message_id"] == str(poll.original_id)
        await trio.sleep(0)


async def test_a_busy_channel_defers_in_time_and_edits_the_answer_in(tmp_path: Path) -> None:
    from picortex.sim.model import ModelReply

    async with running_bot(tmp_path) as run:
        w = run.world
        await _registered(run)
        run.bot.store.set_attention_mode(w.general_id, "discriminate", 0.0)
        # The channel is busy for 4 s classifying a message (the discriminator allows 5 s).
        run.sim.model.script(
            ModelReply('{"should_respond": false, "reason": "chatter"}', delay=4.0)
        )
        run.say(w.general_id, w.alice_id, "just chatting here")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        shown = run.sim.run_slash(w.general_id, w.alice_id, "picortex attention")
        started = trio.current_time()
        await _answer(run, shown)
        # Deferred before Discord's 3 s ran out, then the answer edited in.
        assert shown.response_type == 5 and shown.responded_at is not None
        assert shown.responded_at - shown.created_at < 3.0
        answer = await _answer(run, shown, kinds=2)
        assert answer.startswith("Attention mode: `discriminate`.")
        assert [a.kind for a in shown.answers] == ["deferred", "edit"]
        assert trio.current_time() - started >= 2.0  # it waited for the channel's turn
        await run.wait_event("reply", trigger_id=shown.id, result="posted")


async def test_an_ask_is_not_a_message_in_the_context_cache(tmp_path: Path) -> None:
    """The cache holds what Discord sent: a slash `ask` never becomes a cached message."""
    async with running_bot(tmp_path) as run:
        w = run.world
        await _registered(run)
        said = run.say(w.general_id, w.bob_id, "chatter before the question")
        await run.wait_until(lambda: bool(run.bot.cache.recent(w.general_id, 1)))
        run.sim.model.script("An answer.")
        ask = run.sim.run_slash(w.general_id, w.alice_id, "picortex ask what is cached?")
        assert await _answer(run, ask, kinds=2) == "An answer."
        await run.wait_event("reply", trigger_id=ask.id, result="posted")
        await run.bot.cache.flush()
        cached = run.bot.cache.recent(w.general_id, 50)
        assert int(said["id"]) in [m.id for m in cached]
        assert ask.id not in [m.id for m in cached]
        assert all("what is cached?" not in m.content for m in cached)
        on_disk = read_channel(run.bot.settings.cache_dir, w.general_id)
        assert on_disk is not None
        assert ask.id not in [m.id for m in on_disk.messages]
