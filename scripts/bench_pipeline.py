"""Benchmark of the message pipeline: trigger-to-reply latency of picortex against a bare echo bot.

Both bots take turns (rounds: echo, picortex, echo, ...) against the same simulator (this
process) and get the same paced stream of triggers (mentions of the bot by its owner) across
the same channels. picortex answers through its whole pipeline with the simulator's instant
model endpoint; the echo bot (trio-websocket receive + one httpx post per message) is the
floor. Latency is measured on the simulator's clock, from posting a trigger to receiving the
reply's POST.

By default each bot is its own process (`python -m picortex run`, and this script with
`--echo-bot`), as a bot and Discord run on different machines: the simulator's work never
shares a core with the bot's. `--in-process` runs both bots inside this process instead.
Triggers are paced below Discord's global 50 requests/s, which picortex keeps proactively: a
burst would measure that limit, not the pipeline.

Usage (from the repository root):
    python scripts/bench_pipeline.py [--triggers N] [--channels N] [--rate PER_SECOND]
                                     [--rounds N] [--in-process]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import attrs
import httpx
import orjson
import trio
from bench_support import (
    PICORTEX_ARGV,
    bench_simulator,
    bot_process,
    picortex_env,
    process_cpu,
    serving,
    turns,
    write_home,
)
from trio_websocket import open_websocket_url

from picortex.app import Bot
from picortex.config import load_settings
from picortex.sim import Simulator

SCRIPT: Final = Path(__file__).resolve()
# Route groups whose per-channel limits would pace the run rather than the bots.
RELAXED_BUCKETS: Final = ("messages.post", "typing", "messages.get")
# Gateway intents: GUILDS, GUILD_MESSAGES, MESSAGE_CONTENT.
ECHO_INTENTS: Final = (1 << 0) | (1 << 9) | (1 << 15)
# How long a bot may take to start, and to answer its last trigger before that counts as lost.
START_SECONDS: Final = 30.0
DRAIN_SECONDS: Final = 30.0
# Per bot, not measured: connections, caches and lazy imports warm up first.
WARMUP_TRIGGERS: Final = 20
# picortex over httpx (a maintained stack) may cost up to this many times the bare echo bot.
TARGET_RATIO: Final = 3.5

# ----- the floor -----------------------------------------------------------------------------


async def echo_bot(
    api_base: str, gateway_url: str, token: str, *, task_status: Any = trio.TASK_STATUS_IGNORED
) -> None:
    """The floor: receive MESSAGE_CREATE on a bare websocket, post one reply per message."""
    headers = {"Authorization": f"Bot {token}"}
    async with (
        httpx.AsyncClient(base_url=api_base, headers=headers) as http,
        open_websocket_url(gateway_url + "/?v=10&encoding=json") as ws,
        trio.open_nursery() as nursery,
    ):
        hello = orjson.loads(await ws.get_message())
        interval = hello["d"]["heartbeat_interval"] / 1000
        seq: list[int | None] = [None]

        async def heartbeat() -> None:
            while True:
                await trio.sleep(interval)
                await ws.send_message(orjson.dumps({"op": 1, "d": seq[0]}).decode())

        async def reply(channel_id: str, message_id: str) -> None:
            await http.post(
                f"/channels/{channel_id}/messages",
                json={
                    "content": "echo",
                    "message_reference": {"message_id": message_id},
                    "allowed_mentions": {"parse": []},
                },
            )

        identify = {
            "op": 2,
            "d": {
                "token": token,
                "intents": ECHO_INTENTS,
                "properties": {"os": "linux", "browser": "echo", "device": "echo"},
            },
        }
        await ws.send_message(orjson.dumps(identify).decode())
        nursery.start_soon(heartbeat)
        me: str | None = None
        while True:
            frame = orjson.loads(await ws.get_message())
            if frame.get("s") is not None:
                seq[0] = frame["s"]
            kind = frame.get("t")
            if kind == "READY":
                me = frame["d"]["user"]["id"]
                task_status.started()
            elif kind == "MESSAGE_CREATE" and frame["d"]["author"]["id"] != me:
                data = frame["d"]
                nursery.start_soon(reply, data["channel_id"], data["id"])


# ----- running a bot -------------------------------------------------------------------------


@asynccontextmanager
async def subprocess_bot(
    sim: Simulator, argv: list[str], env: dict[str, str]
) -> AsyncIterator[Callable[[], float | None]]:
    """A bot process; yields (once its gateway session is ready) a reader of its CPU seconds."""
    async with bot_process(sim, argv, env, start_seconds=START_SECONDS) as proc:
        yield lambda: process_cpu(proc.pid)


@asynccontextmanager
async def in_process_bot(
    sim: Simulator, start: Callable[[trio.Nursery], Any]
) -> AsyncIterator[Callable[[], float | None]]:
    """A bot in this process; yields once its gateway session is ready."""
    ready = sim.gateway_stats.identifies
    async with trio.open_nursery() as nursery:
        await start(nursery)
        await sim.wait_until(
            lambda: sim.gateway_stats.identifies > ready and sim.gateway_stats.ready_sessions >= 1
        )
        yield lambda: None  # its CPU is in the simulator's
        nursery.cancel_scope.cancel()
    await sim.wait_until(lambda: sim.gateway_stats.ready_sessions == 0)


# ----- measuring -----------------------------------------------------------------------------


@attrs.frozen
class Run:
    """What one bot did with the triggers."""

    latencies: list[float]
    lost: int
    sim_cpu: float
    bot_cpu: float | None


async def feed(
    sim: Simulator,
    channels: list[int],
    author: int,
    triggers: int,
    rate: float,
    bot_cpu: Callable[[], float | None],
) -> Run:
    """Post paced triggers; return the latencies and the CPU both sides used."""
    mention = f"<@{sim.bot_user_id}>"
    sent_at: dict[str, float] = {}
    seen = len(sim.requests)
    cpu = time.process_time()
    bot_before = bot_cpu()
    t0 = trio.current_time()
    for i in range(WARMUP_TRIGGERS + triggers):
        await trio.sleep_until(t0 + i / rate)
        now = trio.current_time()
        msg = sim.post_user_message(
            channels[i % len(channels)], author, f"{mention} trigger {i}: ping?"
        )
        if i >= WARMUP_TRIGGERS:
            sent_at[str(msg["id"])] = now

    answered: dict[str, float] = {}
    scanned = [seen]

    def all_answered() -> bool:
        requests = sim.requests
        for request in requests[scanned[0] :]:
            body = request.json
            if request.method == "POST" and isinstance(body, dict):
                ref = (body.get("message_reference") or {}).get("message_id")
                if ref in sent_at and ref not in answered:
                    answered[ref] = request.at
        scanned[0] = len(requests)
        return len(answered) >= len(sent_at)

    with trio.move_on_after(DRAIN_SECONDS):
        await sim.wait_until(all_answered)
    cpu = time.process_time() - cpu
    bot_after = bot_cpu()
    used = None if bot_before is None or bot_after is None else bot_after - bot_before
    latencies = [answered[mid] - sent_at[mid] for mid in answered]
    return Run(latencies, len(sent_at) - len(answered), cpu, used)


def combined(runs: list[Run]) -> Run:
    """The rounds of one bot as one run."""
    cpus = [run.bot_cpu for run in runs]
    return Run(
        [latency for run in runs for latency in run.latencies],
        sum(run.lost for run in runs),
        sum(run.sim_cpu for run in runs),
        None if None in cpus else sum(cpu for cpu in cpus if cpu is not None),
    )


def describe(name: str, run: Run, rounds: int) -> float:
    """Print one line of results; returns the median in milliseconds."""
    ordered = sorted(run.latencies)
    median = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    sent = len(ordered) + run.lost + WARMUP_TRIGGERS * rounds
    cpu = f"simulator CPU {run.sim_cpu / sent * 1000:4.2f} ms/trigger"
    if run.bot_cpu is not None:
        cpu += f", bot CPU {run.bot_cpu / sent * 1000:4.2f} ms/trigger"
    print(
        f"{name:<9} answered {len(ordered):5d}  lost {run.lost:3d}  median {median:7.2f} ms  "
        f"p99 {p99:7.2f} ms  max {ordered[-1] * 1000:7.2f} ms  {cpu}"
    )
    return median


def print_round(number: int, floor: Run, result: Run) -> None:
    """One line per round: both medians and p99s, and their ratio."""
    parts = []
    for name, run in (("echo bot", floor), ("picortex", result)):
        ordered = sorted(run.latencies)
        if not ordered:
            print(f"round {number}: {name} answered nothing", flush=True)
            return
        p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
        parts.append((statistics.median(ordered) * 1000, p99 * 1000))
    ratio = parts[1][0] / parts[0][0]
    print(
        f"round {number}: echo bot median {parts[0][0]:6.2f} ms p99 {parts[0][1]:7.2f} ms, "
        f"picortex median {parts[1][0]:6.2f} ms p99 {parts[1][1]:7.2f} ms, "
        f"ratio {ratio:.2f}" + ("" if ratio <= TARGET_RATIO else " (above target)"),
        flush=True,
    )


async def bench(args: argparse.Namespace) -> int:
    sim = bench_simulator(RELAXED_BUCKETS)
    owner = sim.add_user("owner", global_name="Owner")
    guild = sim.add_guild("bench", owner_id=owner)
    channels = [sim.add_channel(guild, f"bench-{n}") for n in range(args.channels)]
    where = "in this process" if args.in_process else "each in its own process"
    print(
        f"{args.triggers} triggers across {args.channels} channels at {args.rate:g}/s "
        f"in {args.rounds} rounds per bot (+{WARMUP_TRIGGERS} warm-up each), "
        f"instant model endpoint, bots {where}"
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="picortex-bench-") as tmp:
        home = Path(tmp)
        write_home(home)
        async with serving(sim) as urls:
            env = picortex_env(home, sim, urls, owner)
            if args.in_process:

                async def start_echo(n: trio.Nursery) -> None:
                    await n.start(echo_bot, urls.api_base, urls.gateway_url, sim.token)

                async def start_picortex(n: trio.Nursery) -> None:
                    await n.start(Bot(load_settings(env)).run)

                echo = functools.partial(in_process_bot, sim, start_echo)
                ours = functools.partial(in_process_bot, sim, start_picortex)
            else:
                script = [sys.executable, str(SCRIPT), "--echo-bot"]
                echo_argv = [*script, urls.api_base, urls.gateway_url, sim.token]
                echo = functools.partial(subprocess_bot, sim, echo_argv, {})
                ours = functools.partial(subprocess_bot, sim, list(PICORTEX_ARGV), env)
            bots = {"echo bot": echo, "picortex": ours}
            runs: dict[str, list[Run]] = {name: [] for name in bots}
            per_round = max(1, args.triggers // args.rounds)
            for n, order in turns(list(bots), args.rounds, rotate=False):
                for name in order:
                    async with bots[name]() as cpu:
                        runs[name].append(
                            await feed(sim, channels, owner, per_round, args.rate, cpu)
                        )
                print_round(n + 1, runs["echo bot"][-1], runs["picortex"][-1])
    floor, result = combined(runs["echo bot"]), combined(runs["picortex"])
    floor_median = describe("echo bot", floor, args.rounds)
    median = describe("picortex", result, args.rounds)
    ratio = median / floor_median
    verdict = "within" if ratio <= TARGET_RATIO else "NOT within"
    print(
        f"ratio     picortex median / echo bot median = {ratio:.2f} "
        f"({verdict} the {TARGET_RATIO}x target)"
    )
    print(f"wall time {time.perf_counter() - started:.1f} s")
    return 1 if result.lost else 0


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--echo-bot":
        api_base, gateway_url, token = sys.argv[2:]
        trio.run(echo_bot, api_base, gateway_url, token)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triggers", type=int, default=1000)
    parser.add_argument("--channels", type=int, default=20)
    parser.add_argument("--rate", type=float, default=20.0, help="triggers per second")
    parser.add_argument(
        "--rounds", type=int, default=2, help="turns each bot takes, the triggers split evenly"
    )
    parser.add_argument("--in-process", action="store_true", help="run the bots in this process")
    return trio.run(bench, parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
