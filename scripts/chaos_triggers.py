"""Measure: are triggers answered exactly once through kills and disconnects?

Usage:
    python scripts/chaos_triggers.py sigkill [--cycles 20] [--per-cycle 3]
    python scripts/chaos_triggers.py disconnect [--cycles 20] [--per-cycle 3]

`sigkill` runs `picortex run` as a real process against the built-in simulator; each cycle
sends triggers whose answers take a moment (the model endpoint is slowed), SIGKILLs the bot
while some are still being answered, and starts it again on the same home. `disconnect` runs
the bot in this process and, each cycle, either drops the connection (a RESUME follows) or
invalidates the session (op 9 d=false: a fresh IDENTIFY, which Discord replays nothing to),
posting triggers while the bot is away. At the end every trigger should have exactly one
answer (a bot message replying to it): the script prints answered-once, lost and doubled.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

import attrs
import trio

from picortex.app import Bot
from picortex.config import load_settings
from picortex.discord.protocol import GatewayTimings
from picortex.sim import DefaultWorld, Simulator
from picortex.sim.model import ModelReply
from picortex.sim.simulator import SimURLs

RELAXED_BUCKETS = ("messages.post", "typing", "users/@me/channels", "reactions.me")
SETTLE_TIMEOUT = 120.0


def _env(home: Path, sim: Simulator, urls: SimURLs, owner: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICORTEX_", "DISCORD_"))}
    env.update(
        PICORTEX_HOME=str(home),
        DISCORD_BOT_TOKEN=sim.token,
        DISCORD_API_BASE=urls.api_base,
        ANTHROPIC_API_KEY="sk-ant-test-key-0000",
        ANTHROPIC_BASE_URL=urls.anthropic_base_url,
        PICORTEX_OWNER_ID=str(owner),
    )
    return env


def tally(sim: Simulator, sent: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(answered exactly once, never answered, answered more than once)."""
    referenced = [(m.get("message_reference") or {}).get("message_id") for m in sim.bot_messages()]
    counts = [referenced.count(m["id"]) for m in sent]
    return counts.count(1), counts.count(0), sum(1 for c in counts if c > 1)


def _world(seed: int) -> tuple[Simulator, DefaultWorld, random.Random]:
    sim = Simulator(heartbeat_interval_ms=5000)
    for bucket in RELAXED_BUCKETS:
        sim.set_rate_limit(bucket, 1000, 1.0)
    return sim, sim.add_default_world(), random.Random(seed)


async def _settle(sim: Simulator, sent: list[dict[str, Any]]) -> None:
    with trio.move_on_after(SETTLE_TIMEOUT):
        await sim.wait_until(lambda: tally(sim, sent)[1] == 0)


class BotProcess(Protocol):
    """What a cycle does with a bot process (a trio.Process is one)."""

    def send_signal(self, signum: int) -> None: ...

    async def wait(self) -> int: ...


async def exec_bot(env: dict[str, str], out: Path) -> BotProcess:
    """`python -m picortex run` as a new process; its stdout and stderr go to `out`."""
    with out.open("wb") as err:
        return await trio.lowlevel.open_process(
            [sys.executable, "-m", "picortex", "run"], env=env, stdout=err, stderr=err
        )


async def run_sigkill(
    cycles: int,
    per_cycle: int,
    seed: int,
    start: Callable[[dict[str, str], Path], Awaitable[BotProcess]] = exec_bot,
) -> tuple[int, int, int, int]:
    """`start` starts one bot process (tests fork them from a server that imported the bot)."""
    sim, w, rng = _world(seed)
    mention = f"<@{sim.bot_user_id}>"
    sent: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        (home / "picortex.toml").write_text("continuation_seconds = 0\n")
        async with trio.open_nursery() as nursery:
            urls: SimURLs = await nursery.start(sim.serve)
            env = _env(home, sim, urls, w.alice_id)
            for cycle in range(cycles + 1):
                started = sim.gateway_stats.identifies + sim.gateway_stats.resumes
                proc = await start(env, home / f"run{cycle}.err")
                with trio.fail_after(60):
                    await sim.wait_until(
                        lambda s=started: (
                            sim.gateway_stats.identifies + sim.gateway_stats.resumes > s
                        )
                    )
                if cycle == cycles:
                    await _settle(sim, sent)  # the last run only answers what is left
                    if os.environ.get("CHAOS_KEEP"):
                        import shutil

                        shutil.copytree(home, os.environ["CHAOS_KEEP"], dirs_exist_ok=True)
                    proc.send_signal(signal.SIGTERM)
                    await proc.wait()
                    break
                sim.model.script(
                    *[ModelReply(text=f"answer {cycle}.{n}", delay=0.3) for n in range(per_cycle)]
                )
                for n in range(per_cycle):
                    channel = (w.general_id, w.random_id)[n % 2]
                    sent.append(
                        sim.post_user_message(channel, w.alice_id, f"{mention} q {cycle}.{n}")
                    )
                # Kill while answers are being generated (or just posted).
                await trio.sleep(rng.uniform(0.05, 0.5))
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
            nursery.cancel_scope.cancel()
    once, lost, doubled = tally(sim, sent)
    return len(sent), once, lost, doubled


async def run_disconnects(
    cycles: int,
    per_cycle: int,
    seed: int,
    *,
    identify_window: float | None = None,
    fetch_cooldown: float | None = None,
) -> tuple[int, int, int, int]:
    """`identify_window` (else Discord's 5 s) spaces the bot's IDENTIFYs, `fetch_cooldown`
    (else the bot's default) its history reads of a channel: a test's shorter ones keep a
    fresh session from waiting out the one before it, and its catch-up the last read."""
    sim, w, rng = _world(seed)
    mention = f"<@{sim.bot_user_id}>"
    sent: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        toml = "continuation_seconds = 0\n"
        if fetch_cooldown is not None:
            toml += f"fetch_cooldown_seconds = {fetch_cooldown}\n"
        (home / "picortex.toml").write_text(toml)
        async with trio.open_nursery() as nursery:
            urls: SimURLs = await nursery.start(sim.serve)
            settings = load_settings(_env(home, sim, urls, w.alice_id))
            timings = GatewayTimings(
                backoff_base=0.05, backoff_cap=0.5, invalid_session_delay=(0.2, 0.5)
            )
            if identify_window is not None:
                timings = attrs.evolve(timings, identify_window=identify_window)
            bot = Bot(settings, gateway_timings=timings)
            async with trio.open_nursery() as bot_nursery:
                await bot_nursery.start(bot.run)
                # Something handled in both channels: they count as active for catch-up.
                for channel in (w.general_id, w.random_id):
                    sent.append(sim.post_user_message(channel, w.alice_id, f"{mention} hello"))
                await _settle(sim, sent)
                for cycle in range(cycles):
                    fresh = cycle % 3 == 0  # every third one needs a fresh IDENTIFY
                    ready = sim.gateway_stats.identifies + sim.gateway_stats.resumes
                    if fresh:
                        sim.invalidate_session(resumable=False)
                    else:
                        sim.drop_connections()
                    for n in range(per_cycle):
                        channel = (w.general_id, w.random_id)[n % 2]
                        sent.append(
                            sim.post_user_message(channel, w.alice_id, f"{mention} q {cycle}.{n}")
                        )
                    with trio.fail_after(60):
                        await sim.wait_until(
                            lambda r=ready: (
                                sim.gateway_stats.identifies + sim.gateway_stats.resumes > r
                            )
                        )
                    await trio.sleep(rng.uniform(0.05, 0.3))
                await _settle(sim, sent)
                bot_nursery.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    once, lost, doubled = tally(sim, sent)
    return len(sent), once, lost, doubled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("sigkill", "disconnect"))
    parser.add_argument("--cycles", type=int, default=20)
    parser.add_argument("--per-cycle", type=int, default=3)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    run = run_sigkill if args.mode == "sigkill" else run_disconnects
    total, once, lost, doubled = trio.run(run, args.cycles, args.per_cycle, args.seed)
    print(f"{args.mode}: {args.cycles} cycles, {total} triggers")
    print(f"answered exactly once: {once}")
    print(f"never answered (lost): {lost}")
    print(f"answered twice or more: {doubled}")
    sys.exit(0 if once == total else 1)


if __name__ == "__main__":
    main()
