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


def run_sim(*, host: str = "127.0.0.1", port: int = 0, out: TextIO = sys.stdout) -> int:
    """Serve the simulator with the default world, print where it listens, run until Ctrl-C.

    Returns the exit code: 0 after SIGINT or SIGTERM.
    """
    sim = Simulator()

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
        return run_sim(port=args.port, out=sys.stdout)
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
