"""Access by role and channel, and users' own attention modes, end to end (SPEC 18): typed
commands against the simulator, the bot deciding each message as Discord delivers it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e.harness import Running, running_bot
from tests.e2e.test_attention import answered, chatter, decision, not_answered

pytestmark = pytest.mark.virtual_time


async def command(run: Running, channel_id: int, text: str) -> str:
    """The owner runs a command in a channel; the text of its reply there."""
    msg = run.say(channel_id, run.world.alice_id, f"{run.mention()} !s {text}")
    await run.wait_until(lambda: bool(run.replies_to(int(msg["id"]))))
    return str(run.replies_to(int(msg["id"]))[0]["content"])


async def test_members_with_an_allowed_role_count_as_user_tier(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        helpers = run.sim.add_role(w.guild_id, "helpers")
        carol, dave = run.sim.add_user("carol"), run.sim.add_user("dave")
        run.sim.give_role(carol, helpers)
        before = run.say(w.general_id, carol, f"{run.mention()} what is green tea")
        assert (await not_answered(run, before))["reason"] == "untrusted author: never answered"

        reply = await command(run, w.general_id, f"access allow-role <@&{helpers}>")
        assert f"`access.allow_roles` is now `{helpers}`" in reply
        assert run.bot.store.runtime_config()["access.allow_roles"] == str(helpers)
        after = run.say(w.general_id, carol, f"{run.mention()} what is green tea")
        await answered(run, after)
        trigger = (await run.wait_event("trigger", message_id=int(after["id"])))[0]
        assert trigger["tier"] == "user"
        # Without the role, nothing changed; and a role gives no more than `user`.
        other = run.say(w.general_id, dave, f"{run.mention()} what is green tea")
        assert (await not_answered(run, other))["outcome"] == "ignore"
        denied = run.say(w.general_id, carol, f"{run.mention()} !s attention show")
        await run.wait_until(lambda: bool(run.replies_to(int(denied["id"]))))
        assert "needs an admin" in run.replies_to(int(denied["id"]))[0]["content"]
        # A member with the role who only chats is stored for recall like anyone trusted
        # (decided inline by the router), once her request's window has closed.
        await trio.sleep(30)
        plain = run.say(w.general_id, carol, "green tea is nice")
        await chatter(run, plain, "green")
        # Where only her id is at hand (context lines, recall, the discriminator's history),
        # her role counts too, as her newest server message showed it; not dave's.
        assert run.bot.pipe.is_trusted(carol)
        assert not run.bot.pipe.is_trusted(dave)


async def test_a_denied_channel_is_silent_but_still_takes_commands(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.bot.store.set_attention_mode(w.random_id, "always", 0.0)
        reply = await command(run, w.general_id, f"access deny-channel <#{w.random_id}>")
        assert f"`access.deny_channels` is now `{w.random_id}`" in reply
        mention = run.say(w.random_id, w.bob_id, f"{run.mention()} what is green tea")
        found = await not_answered(run, mention)
        assert found["outcome"] == "record" and found["mode"] == "silent"
        assert "deny_channels" in found["reason"]
        # Commands still answer there (SPEC 5: in every mode), so an admin can undo it.
        show = await command(run, w.random_id, "attention show")
        assert "Silent here whatever the mode" in show
        assert "Attention mode: `always`" in show
        # Elsewhere nothing changed.
        ok = run.say(w.general_id, w.bob_id, f"{run.mention()} what is green tea")
        await answered(run, ok)
        undo = await command(run, w.random_id, f"access remove <#{w.random_id}>")
        assert "`access.deny_channels` is now `empty`" in undo
        again = run.say(w.random_id, w.bob_id, "what is green tea")
        await answered(run, again)  # `always` again
        assert run.sim.model.calls  # answered by the model, not refused


async def test_allow_channels_limits_the_bot_to_those_channels_and_their_threads(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        await command(run, w.general_id, f"access allow-channel <#{w.general_id}>")
        outside = run.say(w.random_id, w.bob_id, f"{run.mention()} what is green tea")
        found = await not_answered(run, outside)
        assert found["outcome"] == "record" and "allow_channels" in found["reason"]
        inside = run.say(w.general_id, w.bob_id, f"{run.mention()} what is green tea")
        await answered(run, inside)
        dm = run.say(run.dm_id(w.bob_id), w.bob_id, "what is green tea")
        await answered(run, dm)  # DMs are not limited by allow_channels


async def test_a_users_own_mode_beats_the_chats_for_their_messages(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        carol = run.sim.add_user("carol")
        for user in (w.bob_id, carol):
            run.bot.store.set_tier(user, "user")
        reply = await command(run, w.general_id, f"attention user <@{w.bob_id}> always")
        assert "own mode here is now `always`" in reply
        bob: dict[str, Any] = run.say(w.general_id, w.bob_id, "what is green tea")
        await answered(run, bob)
        found = await decision(run, bob)
        assert found["mode"] == "always"
        assert "the author's own attention mode in this chat" in found["reason"]
        others = run.say(w.general_id, carol, "tea for me too")
        await chatter(run, others)  # the chat is still mentions-only for everyone else
        show = await command(run, w.general_id, "attention show")
        assert f"Users' own modes here: <@{w.bob_id}>: `always`." in show
        # The override is for this chat alone: in #random bob's message is chatter again.
        elsewhere = run.say(w.random_id, w.bob_id, "what is black tea")
        await run.wait_until(lambda: run.bot.router.trusted_chatter == 2)
        await run.idle()
        assert run.replies_to(int(elsewhere["id"])) == []

        await command(run, w.general_id, f"attention user <@{w.bob_id}> silent")
        hush = run.say(w.general_id, w.bob_id, f"{run.mention()} what is green tea")
        assert (await not_answered(run, hush))["outcome"] == "record"
        back = await command(run, w.general_id, f"attention user <@{w.bob_id}> default")
        assert "the chat's mode applies again" in back
        assert run.bot.store.get_user_attention(w.general_id, w.bob_id) is None
        plain = run.say(w.general_id, w.bob_id, f"{run.mention()} and oolong")
        await answered(run, plain)
