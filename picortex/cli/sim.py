"""`picortex sim`: run the simulator alone with a small world until Ctrl-C."""

from __future__ import annotations

import argparse
import errno
import signal
import sys
from functools import partial
from typing import TextIO

import trio

from picortex.errors import ConfigError
from picortex.sim.simulator import Simulator
from picortex.sim.world import SimError


def run_sim(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    out: TextIO = sys.stdout,
    guilds: int = 0,
    channels_per_guild: int = 2,
    shards: int | None = None,
    max_concurrency: int | None = None,
) -> int:
    """Serve the simulator with the default world, print where it listens, run until Ctrl-C.

    `guilds` more guilds with `channels_per_guild` text channels each; `shards` is the
    recommended shard count; `max_concurrency` also paces IDENTIFYs per bucket.
    Returns the exit code: 0 after SIGINT or SIGTERM.
    """
    try:
        sim = Simulator(
            recommended_shards=shards,
            max_concurrency=max_concurrency or 1,
            limit_identify_concurrency=max_concurrency is not None,
        )
        made = sim.add_guilds(guilds, channels_per_guild)
    except (ValueError, SimError) as exc:
        raise ConfigError(str(exc)) from None

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:
                urls = await nursery.start(partial(sim.serve, host=host, port=port))
                world = sim.add_default_world()
                lines = [
                    "picortex simulator running (Ctrl-C to stop)",
                    f"  API base (DISCORD_API_BASE):     {urls.api_base}",
                    f"  gateway URL:                     {urls.gateway_url}",
                    f"  model URL (ANTHROPIC_BASE_URL):  {urls.anthropic_base_url}",
                    f"  bot token (DISCORD_BOT_TOKEN):   {sim.token}",
                    f"  control API:                     {urls.control_url}",
                    f"  control token (Bearer):          {urls.control_token}",
                    f"  guild picortex-sim {world.guild_id}: #general {world.general_id}, "
                    f"#random {world.random_id}",
                    f"  users: alice {world.alice_id}, bob {world.bob_id}, bot {sim.bot_user_id}",
                ]
                if made:
                    lines.insert(
                        -1,
                        f"  {len(made)} more guilds with {channels_per_guild} channels each: "
                        f"guild-0 {made[0][0]} .. guild-{len(made) - 1} {made[-1][0]}",
                    )
                limit = sim.gateway.gateway_bot()
                lines.insert(
                    -1,
                    f"  GET /gateway/bot: shards {limit['shards']}, max_concurrency "
                    f"{limit['session_start_limit']['max_concurrency']}",
                )
                out.write("\n".join(lines) + "\n")
                out.flush()
                async for _ in signals:
                    break
                nursery.cancel_scope.cancel()

    trio.run(main)
    out.write("simulator stopped\n")
    out.flush()
    return 0


def command(args: argparse.Namespace) -> int:
    """Serve the simulator alone, or with the bot and a terminal chat (`--chat`)."""
    try:
        if args.chat:
            from picortex.cli.chat import run_chat

            return run_chat(port=args.port, web=args.web)
        return run_sim(
            port=args.port,
            out=sys.stdout,
            guilds=args.guilds,
            channels_per_guild=args.channels_per_guild,
            shards=args.shards,
            max_concurrency=args.max_concurrency,
        )
    except (OSError, BaseExceptionGroup) as exc:
        if not _address_in_use(exc):
            raise
        raise ConfigError(
            f"port {args.port} is already in use; choose another with --port, or leave "
            "--port out to take any free one"
        ) from None


def _address_in_use(exc: BaseException) -> bool:
    """True when `exc` is (or a group holds) the error of binding a port already taken."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_address_in_use(inner) for inner in exc.exceptions)
    return isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE
