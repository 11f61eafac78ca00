"""Measure: how much the action log grows while the gateway delivers malformed payloads.

Usage: python scripts/bench_log_flood.py [--payloads N] [--batch B]

Starts the built-in simulator and the whole bot in one process, then has the simulator send
N MESSAGE_CREATE dispatches whose bodies are junk of many shapes (wrong types, missing
fields, out-of-range ids, non-objects), in batches of B through the real gateway connection,
sequence numbers and replay buffer. Prints the bytes the log grew by (all of its files),
how many `error` lines were written, and how many errors were only counted (`repeated`).
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path

import orjson
import trio

from picortex.app import Bot
from picortex.config import load_settings
from picortex.discord.protocol import GatewayTimings
from picortex.sim import Simulator
from picortex.sim.world import INTENT_GUILD_MESSAGES


def junk_bodies(count: int, channel_id: int, guild_id: int, seed: int = 11) -> list[bytes]:
    """`count` malformed MESSAGE_CREATE bodies of a dozen different shapes."""
    rng = random.Random(seed)
    author = {"id": "4242", "username": "fuzz", "global_name": None}
    good: dict[str, object] = {
        "id": "1",
        "channel_id": str(channel_id),
        "guild_id": str(guild_id),
        "author": author,
        "content": "x",
        "timestamp": "2025-06-01T12:00:00.000000+00:00",
    }
    shapes = [
        lambda i: {**good, "id": f"-{i}"},
        lambda i: {**good, "id": i * 1.5},
        lambda i: {k: v for k, v in good.items() if k != "author"},
        lambda i: {k: v for k, v in good.items() if k != "channel_id"},
        lambda i: {**good, "content": i},
        lambda i: {**good, "author": "x" * (i % 50)},
        lambda i: {**good, "author": {**author, "username": None}},
        lambda i: {**good, "mentions": "everyone"},
        lambda i: {**good, "attachments": [{"id": "x"}]},
        lambda i: {**good, "id": str(2**70 + i)},
        lambda i: {**good, "timestamp": [i]},
        lambda i: {**good, "mention_everyone": "yes"},
        lambda i: [i, "not an object"],
        lambda i: "a string body",
        lambda i: None,
    ]
    return [orjson.dumps(rng.choice(shapes)(i)) for i in range(count)]


def log_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*") if p.is_file())


async def main(payloads: int, batch: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        sim = Simulator(heartbeat_interval_ms=5000)
        world = sim.add_default_world()
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(sim.serve)
            settings = load_settings(
                {
                    "PICORTEX_HOME": str(home),
                    "DISCORD_BOT_TOKEN": sim.token,
                    "DISCORD_API_BASE": urls.api_base,
                    "PICORTEX_OWNER_ID": str(world.alice_id),
                }
            )
            bot = Bot(settings, gateway_timings=GatewayTimings(backoff_base=0.05))
            async with trio.open_nursery() as bot_nursery:
                await bot_nursery.start(bot.run)
                await sim.wait_ready()
                await trio.sleep(0.5)
                bot.events.flush()
                path = settings.action_log_path
                before = log_bytes(path)
                bodies = junk_bodies(payloads, world.general_id, world.guild_id)
                started = time.perf_counter()
                for start in range(0, payloads, batch):
                    await sim.gateway.blast(
                        bodies[start : start + batch],
                        guild_id=world.guild_id,
                        intent=INTENT_GUILD_MESSAGES,
                    )
                while bot.router.inbox.depth:  # noqa: ASYNC110 (polling a counter)
                    await trio.sleep(0.05)
                await trio.sleep(0.5)
                elapsed = time.perf_counter() - started
                bot_nursery.cancel_scope.cancel()
            bot.events.flush()
            nursery.cancel_scope.cancel()
        grown = log_bytes(path) - before
        lines = [
            orjson.loads(line)
            for p in sorted(path.parent.glob(path.name + "*"))
            for line in p.read_bytes().splitlines()
            if line.strip()
        ]
        errors = [e for e in lines if e.get("event") == "error"]
        counted = sum(int(e.get("repeated", 0)) for e in errors)
        print(f"malformed payloads sent:    {payloads}")
        print(f"seconds to deliver:          {elapsed:.1f}")
        print(f"action log growth:           {grown} bytes ({grown / 2**20:.3f} MiB)")
        print(f"error lines written:         {len(errors)}")
        print(f"errors counted (repeated):   {counted}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--payloads", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=2_000)
    args = parser.parse_args()
    trio.run(main, args.payloads, args.batch)
