"""What owners configure, end to end (SPEC 7, 18): the owner's agent prompt and answer
length, a chat's own prompt, discriminator model and confidence threshold, through chat,
slash, the panel and MCP, against the simulator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from picortex.mcp import Tools
from picortex.store.chathome import AGENT_PROMPT_RELPATH
from tests.e2e.harness import Running, running_bot, wall_time

pytestmark = pytest.mark.virtual_time

WAIT = 15.0  # seconds; a generous bound on a local round trip, not a speed claim
OWNER_TOML = (
    "[agent]\n"
    'system_prompt = """You are {{bot_name}}, the parrot of {{server_name}} in #{{chat_name}}.\n'
    'Sign off: -- Captain Pico"""\n'
    "max_tokens = 321\n"
)


async def ask(run: Running, channel_id: int, author_id: int, text: str) -> str:
    """Ask the bot and return its answer's text once posted."""
    msg = run.say(channel_id, author_id, f"{run.mention()} {text}")
    with trio.fail_after(WAIT):
        await run.wait_event("reply", trigger_id=int(msg["id"]))
    return str(run.replies_to(int(msg["id"]))[-1]["content"])


async def command(run: Running, channel_id: int, author_id: int, text: str) -> str:
    """Run a chat command and return the bot's answer."""
    msg = run.say(channel_id, author_id, f"{run.mention()} !s {text}")
    with trio.fail_after(WAIT):
        [event] = await run.wait_event("command", message_id=int(msg["id"]))
        await run.wait_event("reply", trigger_id=int(msg["id"]))
    assert event["result"] == "ok", event
    return str(run.replies_to(int(msg["id"]))[-1]["content"])


def generate_calls(run: Running) -> list[Any]:
    return [c for c in run.sim.model.calls if "should_respond" not in str(c.messages)]


async def test_the_owners_prompt_and_a_chats_own_prompt_shape_the_answer(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=OWNER_TOML) as run:
        w = run.world
        answer = await ask(run, w.general_id, w.alice_id, "hello")
        assert answer.endswith("-- Captain Pico")
        [call] = generate_calls(run)
        guild = run.sim.world.guilds[w.guild_id].name
        assert str(call.system).startswith(f"You are picortex, the parrot of {guild} in #general.")
        assert call.max_tokens == 321
        # Another chat gets its own prompt from an admin in chat; the general chat keeps the
        # owner's.
        told = await command(
            run, w.random_id, w.alice_id, "attention prompt Sign off: -- Chef Pico"
        )
        assert told == "This chat's agent prompt is set."
        assert (await ask(run, w.random_id, w.alice_id, "hi")).endswith("-- Chef Pico")
        assert (await ask(run, w.general_id, w.alice_id, "hi")).endswith("-- Captain Pico")
        shown = await command(run, w.random_id, w.alice_id, "attention show")
        assert "Agent prompt: this chat's own" in shown
        await command(run, w.random_id, w.alice_id, "attention prompt reset")
        assert (await ask(run, w.random_id, w.alice_id, "hi")).endswith("-- Captain Pico")
        history = await run.bot.panel().agent_history(w.random_id)
        assert [v.message for v in history] == [
            "Agent prompt reset: the owner's prompt applies",
            "Agent prompt set",
        ]


async def _discriminated(run: Running, verdict: str) -> dict[str, Any]:
    """Bob's message in #general classified with `verdict`: its `decision` event."""
    w = run.world
    run.sim.model.script(verdict)
    msg = run.say(w.general_id, w.bob_id, "does anyone know when the shop opens")
    with trio.fail_after(WAIT):
        [found] = await run.wait_event("decision", message_id=int(msg["id"]))
    return found


# A model of the chat's own must be priced under the classification budget to be asked; and
# bob's next message is classified, not taken as a follow-up of the answer before it.
MINI_TOML = 'continuation_seconds = 0\n[prices."claude-mini-1"]\ninput = 0.1\noutput = 0.5\n'


async def test_below_the_chats_threshold_the_bot_stays_quiet(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=MINI_TOML) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        await command(run, w.general_id, w.alice_id, "attention discriminate")
        told = await command(run, w.general_id, w.alice_id, "attention threshold 0.7")
        assert told == "This chat's confidence threshold is now `0.7`."
        unsure = '{"should_respond": true, "reason": "maybe a question", "confidence": 0.4}'
        quiet = await _discriminated(run, unsure)
        assert (quiet["outcome"], quiet["confidence"]) == ("skip", 0.4)
        assert "below the chat's threshold 0.7" in quiet["reason"]
        sure = '{"should_respond": true, "reason": "a question", "confidence": 0.9}'
        loud = await _discriminated(run, sure)
        assert (loud["outcome"], loud["confidence"]) == ("respond", 0.9)
        # The chat's own discriminator model, set by slash, is the one asked.
        inter = run.sim.run_slash(
            w.general_id, w.alice_id, "picortex attention model:claude-mini-1"
        )
        with trio.fail_after(WAIT):
            await run.wait_until(lambda: bool(inter.answers))
        assert "now `claude-mini-1`" in inter.text
        await _discriminated(run, sure)
        asked = [c.model for c in run.sim.model.calls if "should_respond" in str(c.messages)]
        assert asked == ["claude-haiku-5-5", "claude-haiku-5-5", "claude-mini-1"]


async def test_the_panel_and_mcp_set_what_the_chat_commands_set(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=OWNER_TOML) as run:
        w = run.world
        panel = run.bot.panel()
        done = await panel.set_chat_setting(w.general_id, "prompt", "Sign off: -- Panel Pico")
        assert done.ok, done.message
        assert (await ask(run, w.general_id, w.alice_id, "hi")).endswith("-- Panel Pico")
        tools = Tools(run.bot.settings)

        def call(name: str, **args: Any) -> Any:
            return tools.call(name, {"chat_id": str(w.random_id), **args})

        with wall_time():
            changed = await trio.to_thread.run_sync(
                lambda: call("set_chat", prompt="Sign off: -- Tool Pico")
            )
            await trio.to_thread.run_sync(lambda: call("set_chat", threshold="0.25"))
            seen = await trio.to_thread.run_sync(lambda: call("get_chat"))
        assert changed == {
            "chat_id": str(w.random_id),
            "changed": True,
            "message": "This chat's agent prompt is set.",
        }
        assert (seen["agent_prompt"], seen["discriminator_threshold"]) == (
            "Sign off: -- Tool Pico",
            0.25,
        )
        assert (run.home / "chats" / str(w.random_id) / AGENT_PROMPT_RELPATH).exists()
        assert (await ask(run, w.random_id, w.alice_id, "hi")).endswith("-- Tool Pico")

        # The running bot sees the threshold (its store notices another connection's write).
        def threshold() -> float | None:
            own = run.bot.store.get_chat_config(w.random_id)
            return own.discriminator_threshold if own is not None else None

        with trio.fail_after(WAIT):
            await run.wait_until(lambda: threshold() == 0.25)
