"""`picortex sim --chat`: the simulator, the bot and a terminal where you type as a user."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TextIO

import orjson
import trio

from picortex.config import load_settings
from picortex.core.terminal import clean_text

HELP: Final = """\
Type a message and press Enter to post it as the current user in the current channel.
@bot, @alice, @bob and @carol become real mentions (trust bob with: @bot !s whitelist add @bob).
Commands:
  /dm              switch to your DM with the bot
  /channel NAME    switch to a guild channel (general, random)
  /as NAME         post as another user (alice is the owner, bob and carol are not trusted)
  /thread          switch to the newest thread (a persona answers in one)
  //picortex ...    run the slash command, e.g. //picortex attention show,
                   //picortex ask what is a snowflake?, //picortex whitelist add @bob trusted
  /react N         react to the bot's last message here with number N (vote in a poll)
  /why             show the bot's last decisions and their reasons
  /help            this text
  /quit            leave (Ctrl-D works too)"""
WATCH_INTERVAL_SECONDS: Final = 0.1
# Discord's message type for a slash command's answer (CHAT_INPUT_COMMAND).
SLASH_ANSWER_TYPE: Final = 20
# How long a slash command's watcher waits for answers (the token lives 15 minutes).
SLASH_WATCH_SECONDS: Final = 15 * 60.0
WHY_LINES: Final = 8


def run_chat(
    *,
    port: int = 0,
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    web: bool = False,
) -> int:
    """Run the interactive chat until /quit or end of input; returns the exit code.

    With `web`, the bot also serves its panel (address and login link printed first).
    """
    home = Path(tempfile.mkdtemp(prefix="picortex-chat-"))
    # The transcript is the interface here; log lines would tear through it. The level is
    # put back after, for a program that calls this and logs on.
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.CRITICAL)
    try:
        return trio.run(_main, home, port, stdin or sys.stdin, out or sys.stdout, web)
    finally:
        root.setLevel(level)
        shutil.rmtree(home, ignore_errors=True)


async def _main(home: Path, port: int, stdin: TextIO, out: TextIO, web: bool = False) -> int:
    from picortex.app import Bot
    from picortex.sim import Simulator
    from picortex.web.launch import announce, web_toml

    (home / "picortex.toml").write_text(web_toml(web), encoding="utf-8")

    def p(text: str = "") -> None:
        print(clean_text(text), file=out, flush=True)

    sim = Simulator()
    world = sim.add_default_world()
    carol = sim.add_user("carol", global_name="Carol")
    users = {"alice": world.alice_id, "bob": world.bob_id, "carol": carol}
    channels = {"general": world.general_id, "random": world.random_id}
    state: dict[str, Any] = {"channel": world.general_id, "author": world.alice_id}
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(
            lambda task_status: sim.serve(port=port, task_status=task_status)
        )
        env = {
            "PICORTEX_HOME": str(home),
            "DISCORD_BOT_TOKEN": sim.token,
            "DISCORD_API_BASE": urls.api_base,
            "PICORTEX_OWNER_ID": str(world.alice_id),
            "ANTHROPIC_API_KEY": os.environ.get("ANTHROPIC_API_KEY") or "offline-chat-key",
            "ANTHROPIC_BASE_URL": (
                os.environ.get("ANTHROPIC_BASE_URL", "")
                if os.environ.get("ANTHROPIC_API_KEY")
                else urls.anthropic_base_url
            ),
        }
        if not env["ANTHROPIC_BASE_URL"]:
            del env["ANTHROPIC_BASE_URL"]
        bot = Bot(load_settings(env))
        await nursery.start(bot.run)
        await sim.wait_ready()
        # Slash commands work once the bot has registered them (right after READY).
        with trio.move_on_after(5.0):
            await sim.wait_until(lambda: bool(sim.app_commands()))
        model = "real Claude" if os.environ.get("ANTHROPIC_API_KEY") else "the offline model"
        p(f"picortex chat: simulator at {urls.api_base}, bot using {model}.")
        p(f"control API: {urls.control_url} (Bearer token {urls.control_token})")
        await announce(bot, out)
        p(HELP)
        p(
            "users: "
            + ", ".join(
                f"{n} (id {i}{', the owner' if n == 'alice' else ''})" for n, i in users.items()
            )
        )

        def where(channel_id: int) -> str:
            data = sim.channel(channel_id)
            if data.get("type") == 1:
                return "DM"
            name = data.get("name") or str(channel_id)
            return f"thread '{name}'" if data.get("type") in (10, 11, 12) else f"#{name}"

        def name_of(user_id: int) -> str:
            return next((n for n, i in users.items() if i == user_id), str(user_id))

        def prompt() -> str:
            return f"[{where(state['channel'])} as {name_of(state['author'])}]> "

        nursery.start_soon(_watch, sim, where, p)
        while True:
            out.write(prompt())
            out.flush()
            line = await trio.to_thread.run_sync(stdin.readline)
            if not line:
                break
            text = line.strip()
            if not text:
                continue
            if text in ("/quit", "/exit"):
                break
            if text == "/help":
                p(HELP)
            elif text == "/dm":
                state["channel"] = sim.open_dm(state["author"])
            elif text.startswith("/channel"):
                name = text.partition(" ")[2].strip().lstrip("#")
                if name in channels:
                    state["channel"] = channels[name]
                else:
                    p(f"No channel {name!r}; try: {', '.join(channels)}.")
            elif text.startswith("/as"):
                name = text.partition(" ")[2].strip().lower()
                if name in users:
                    state["author"] = users[name]
                else:
                    p(f"No user {name!r}; try: {', '.join(users)}.")
            elif text == "/thread":
                threads = sim.threads()
                if threads:
                    state["channel"] = int(threads[-1]["id"])
                else:
                    p("No threads yet.")
            elif text.startswith("/react"):
                _react(sim, state, text.partition(" ")[2].strip(), p)
            elif text.startswith("//"):
                await _slash(sim, state, _mentions(text[2:], sim, users), nursery, p)
            elif text == "/why":
                _why(bot.settings.action_log_path, bot, p)
            else:
                content = _mentions(text, sim, users)
                sim.post_user_message(state["channel"], state["author"], content)
                await trio.sleep(WATCH_INTERVAL_SECONDS * 3)
        nursery.cancel_scope.cancel()
    p("bye")
    return 0


async def _watch(sim: Any, where: Callable[[int], str], p: Callable[[str], None]) -> None:
    """Print every new bot message (replies, threads, polls) as it appears."""
    seen: set[int] = {int(m["id"]) for m in sim.bot_messages()}
    while True:
        await trio.sleep(WATCH_INTERVAL_SECONDS)
        for message in sim.bot_messages():
            mid = int(message["id"])
            if mid in seen or message.get("type") == SLASH_ANSWER_TYPE:
                continue  # slash answers are shown by the command's own watcher
            seen.add(mid)
            place = where(int(message["channel_id"]))
            p(f"\n  <- picortex in {place}: {message.get('content', '')}")


def _mentions(text: str, sim: Any, users: dict[str, int]) -> str:
    """`@bot` and `@name` as real mentions."""
    content = text.replace("@bot", f"<@{sim.bot_user_id}>")
    for name, user_id in users.items():
        content = content.replace(f"@{name}", f"<@{user_id}>")
    return content


async def _slash(
    sim: Any, state: dict[str, Any], line: str, nursery: trio.Nursery, p: Callable[[str], None]
) -> None:
    """Run a slash command as the current user and print each answer as it comes."""
    from picortex.sim.world import SimError

    try:
        interaction = sim.run_slash(state["channel"], state["author"], line)
    except (SimError, ValueError) as exc:
        p(f"  (not sent: {exc})")
        return

    async def watch() -> None:
        shown = 0
        with trio.move_on_after(SLASH_WATCH_SECONDS):
            while True:
                for answer in interaction.answers[shown:]:
                    if answer.kind == "deferred":
                        p("\n  <- picortex is thinking...")
                    elif answer.kind != "autocomplete":
                        who = " (only you see this)" if answer.ephemeral else ""
                        p(f"\n  <- picortex{who}: {answer.content}")
                shown = len(interaction.answers)
                await trio.sleep(WATCH_INTERVAL_SECONDS)

    nursery.start_soon(watch)
    # The first answer comes within Discord's 3 s: show it before the next prompt.
    with trio.move_on_after(3.0):
        await sim.wait_until(lambda: bool(interaction.answers))
    await trio.sleep(WATCH_INTERVAL_SECONDS * 2)


def _why(path: Path, bot: Any, p: Callable[[str], None]) -> None:
    bot.events.flush()
    rows = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_bytes().splitlines():
            with contextlib.suppress(orjson.JSONDecodeError):
                rows.append(orjson.loads(line))
    decisions = [r for r in rows if r.get("event") == "decision"][-WHY_LINES:]
    if not decisions:
        p("No decisions yet.")
    for row in decisions:
        p(f"  message {row.get('message_id')}: {row.get('outcome')} ({row.get('reason')})")


def _react(sim: Any, state: dict[str, Any], arg: str, p: Callable[[str], None]) -> None:
    """React to the bot's newest message in the current channel with a number emoji."""
    from picortex.core.poll import NUMBER_EMOJI

    if not arg.isdigit() or not 1 <= int(arg) <= len(NUMBER_EMOJI):
        p(f"Use /react N with N from 1 to {len(NUMBER_EMOJI)}.")
        return
    mine = sim.bot_messages(state["channel"])
    if not mine:
        p("The bot has not posted here yet.")
        return
    emoji = NUMBER_EMOJI[int(arg) - 1]
    sim.add_reaction(state["channel"], int(mine[-1]["id"]), state["author"], emoji)
    p(f"  (reacted {emoji})")
