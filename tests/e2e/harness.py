"""Runs the whole bot against the built-in simulator, in one trio run, for end-to-end tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import orjson
import trio

from picortex.app import Bot
from picortex.config import load_settings
from picortex.discord.protocol import GatewayTimings
from picortex.sim import DefaultWorld, Simulator


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
        """Wait until `count` events of a type (with matching fields) are in the log."""
        while True:
            found = [e for e in self.events(event) if all(e.get(k) == v for k, v in match.items())]
            if len(found) >= count:
                return found
            await trio.sleep(0.01)

    def say(self, channel_id: int, author_id: int, content: str, **kw: Any) -> dict[str, Any]:
        """A user posts a message."""
        return self.sim.post_user_message(channel_id, author_id, content, **kw)

    def mention(self) -> str:
        """The bot's mention text."""
        return f"<@{self.sim.bot_user_id}>"


@asynccontextmanager
async def running_bot(
    tmp_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    toml: str = "",
    with_key: bool = True,
    sim: Simulator | None = None,
    files: Mapping[str, str] | None = None,
) -> AsyncIterator[Running]:
    """Start a simulator with its default world and a bot owned by alice; stop both after."""
    sim = sim or Simulator(heartbeat_interval_ms=5000)
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
        await nursery.start(bot.run)
        run = Running(sim, bot, world, home)
        await sim.wait_ready()
        await run.wait_event("gateway", action="ready")
        try:
            yield run
        finally:
            nursery.cancel_scope.cancel()
