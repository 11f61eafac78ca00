"""Runs the whole bot against the built-in simulator, in one trio run, for end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import orjson
import trio

from picortex.app import Bot
from picortex.config import load_settings
from picortex.core.jsonids import is_id_key
from picortex.discord.protocol import GatewayTimings
from picortex.sim import DefaultWorld, Simulator

# Route groups whose limits `relaxed_limits` lifts.
RELAXED_BUCKETS: Final = ("messages.post", "typing", "users/@me/channels", "reactions.me")
# A wait that takes longer than this failed: raise (TooSlowError) instead of hanging the run.
WAIT_SECONDS: Final = 30.0
# The same for a whole test body inside `running_bot`.
TEST_SECONDS: Final = 90.0


@attrs.define
class Running:
    """A simulator and a bot talking to it."""

    sim: Simulator
    bot: Bot
    world: DefaultWorld
    home: Path

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """Action-log lines written so far (flushes the log first)."""
        self.bot.events.flush()
        path = self.bot.settings.action_log_path
        if not path.exists():
            return []
        rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        return [r for r in rows if event is None or r["event"] == event]

    async def wait_event(self, event: str, count: int = 1, **match: object) -> list[dict[str, Any]]:
        """Wait until `count` events of a type (with matching fields) are in the log.

        Ids may be given as numbers: the log writes them as strings (SPEC 11).
        """
        match = {k: str(v) if type(v) is int and is_id_key(k) else v for k, v in match.items()}
        with trio.fail_after(WAIT_SECONDS):
            while True:
                found = [
                    e for e in self.events(event) if all(e.get(k) == v for k, v in match.items())
                ]
                if len(found) >= count:
                    return found
                await trio.sleep(0.01)

    def say(self, channel_id: int, author_id: int, content: str, **kw: Any) -> dict[str, Any]:
        """A user posts a message."""
        return self.sim.post_user_message(channel_id, author_id, content, **kw)

    def mention(self) -> str:
        """The bot's mention text."""
        return f"<@{self.sim.bot_user_id}>"

    def dm_id(self, user_id: int) -> int:
        """The DM channel between a user and the bot."""
        return self.sim.open_dm(user_id)

    def replies_to(self, message_id: int) -> list[dict[str, Any]]:
        """The bot's messages that reference `message_id`."""
        return [
            m
            for m in self.sim.bot_messages()
            if (m.get("message_reference") or {}).get("message_id") == str(message_id)
        ]

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds (checked after each simulator change and the log)."""
        with trio.fail_after(WAIT_SECONDS):
            while not predicate():
                with trio.move_on_after(0.02):
                    await self.sim.wait_until(predicate)

    async def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `python -m picortex ARGS` on this bot's home; never raises on exit codes."""
        return await run_cli(self.home, *args)


async def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m picortex ARGS` with PICORTEX_HOME=home, output captured as text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICORTEX_", "DISCORD_"))}
    env["PICORTEX_HOME"] = str(home)
    done = await trio.run_process(
        [sys.executable, "-m", "picortex", *args],
        env=env,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@asynccontextmanager
async def running_bot(
    tmp_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    toml: str = "",
    with_key: bool = True,
    sim: Simulator | None = None,
    files: Mapping[str, str] | None = None,
    relaxed_limits: bool = False,
) -> AsyncIterator[Running]:
    """Start a simulator with its default world and a bot owned by alice; stop both after.

    `relaxed_limits` raises the per-channel write limits (5 per 5 s on Discord), so a test
    that posts many replies in one channel does not spend its time waiting them out.
    """
    sim = sim or Simulator(heartbeat_interval_ms=5000)
    if relaxed_limits:
        for bucket in RELAXED_BUCKETS:
            sim.set_rate_limit(bucket, 1000, 1.0)
    world = sim.add_default_world()
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    if toml:
        (home / "picortex.toml").write_text(toml)
    for name, text in (files or {}).items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(sim.serve)
        base_env = {
            "PICORTEX_HOME": str(home),
            "DISCORD_BOT_TOKEN": sim.token,
            "DISCORD_API_BASE": urls.api_base,
            "PICORTEX_OWNER_ID": str(world.alice_id),
        }
        if with_key:
            base_env["ANTHROPIC_API_KEY"] = "sk-ant-test-key-0000"
            base_env["ANTHROPIC_BASE_URL"] = urls.anthropic_base_url
        base_env.update(env or {})
        settings = load_settings(base_env)
        bot = Bot(settings, gateway_timings=GatewayTimings(backoff_base=0.05, backoff_cap=0.5))
        try:
            # The bot stops first, while the simulator still answers its goodbyes.
            async with trio.open_nursery() as bot_nursery:
                run = Running(sim, bot, world, home)
                with trio.fail_after(WAIT_SECONDS):
                    await bot_nursery.start(bot.run)
                    await sim.wait_ready()
                    await run.wait_event("gateway", action="ready")
                try:
                    with trio.fail_after(TEST_SECONDS):
                        yield run
                finally:
                    bot_nursery.cancel_scope.cancel()
        finally:
            nursery.cancel_scope.cancel()
