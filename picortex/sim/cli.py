"""`picortex sim`: run the simulator alone with a small world until Ctrl-C."""

from __future__ import annotations

import signal
import sys
from functools import partial
from typing import TextIO

import trio

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
