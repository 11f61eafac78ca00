"""Benchmark of the gateway read path: picortex vs discord.py vs a bare trio-websocket client.

The simulator runs in its own process and blasts N realistic MESSAGE_CREATE frames (about
1 KB each, across 50 channels) at one client at a time, each client in its own process:

  picortex    GatewayActor: receive, decompress (zstd-stream, else zlib-stream), parse,
              protocol, normalize() to a Message, hand on through a bounded memory channel
              drained by a consumer task (what the router does).
  discord.py  discord.Client with its defaults; counts on_message.
  bare        trio-websocket with the same socket settings as picortex, no compression;
              receives and orjson.loads each frame, nothing else (the ceiling of our stack).

Each rate is frames between a client's first and last MESSAGE_CREATE, divided by the wall
time and, separately, by the CPU time the client process used meanwhile (steadier on a
shared machine). Runs are repeated and each client's best is compared. Two more picortex
clients stop after the gateway stage and after normalize, to show where the time goes.

Usage (from the repository root):
    python scripts/bench_gateway.py [--count 50000] [--runs 3] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

# Runnable from a checkout without installing the package.
ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOKEN: Final = "sim-token"
CHANNELS: Final = 50
SIZE: Final = 1024
CLIENTS: Final = ("picortex", "discord.py", "bare")
# The picortex client, and the same client stopped after an earlier stage (for the breakdown).
STAGES: Final = {
    "picortex": "full",
    "picortex-normalize": "normalize",
    "picortex-gateway": "gateway",
}
TARGET_VS_DISCORDPY: Final = 1.5
TARGET_VS_BARE: Final = 0.7


def emit(obj: dict[str, Any]) -> None:
    """One JSON line to the parent process."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Meter:
    """Counts MESSAGE_CREATE arrivals and times the first and the last."""

    def __init__(self, count: int, on_done: Callable[[], None]) -> None:
        self.count = count
        self.seen = 0
        self.first = self.last = 0.0
        self.first_cpu = self.last_cpu = 0.0
        self._on_done = on_done

    def tick(self) -> None:
        seen = self.seen = self.seen + 1
        if seen == 1:
            self.first = time.perf_counter()
            self.first_cpu = time.process_time()
        elif seen == self.count:
            self.last = time.perf_counter()
            self.last_cpu = time.process_time()
            self._on_done()

    def result(self, client: str, **extra: Any) -> dict[str, Any]:
        seconds = self.last - self.first
        cpu = self.last_cpu - self.first_cpu
        return {
            "client": client,
            "frames": self.seen,
            "seconds": seconds,
            "rate": (self.count - 1) / seconds if seconds > 0 else 0.0,
            "cpu_seconds": cpu,
            "cpu_rate": (self.count - 1) / cpu if cpu > 0 else 0.0,
            **extra,
        }


# -- the simulator process ------------------------------------------------------------------


def serve_sim() -> None:
    """Run the simulator until killed; print its URLs as one JSON line."""
    import trio

    from picortex.sim import Simulator

    async def main() -> None:
        sim = Simulator(TOKEN, enforce_heartbeat=False, rate_limits=False)
        async with trio.open_nursery() as nursery:
            urls = await nursery.start(sim.serve)
            sim.add_default_world()
            # Make the bench channels now, so every client sees them in GUILD_CREATE.
            await sim.blast(1, channels=CHANNELS, size=SIZE)
            emit({"api_base": urls.api_base, "control": urls.control_url})

    trio.run(main)


# -- the clients ------------------------------------------------------------------------------


def run_picortex(api_base: str, count: int, profile: bool, stage: str) -> None:
    """`stage`: "full" (normalize + hand on), "normalize" (no hand-on), "gateway" (neither)."""
    import trio

    from picortex.discord.gateway import GatewayActor
    from picortex.discord.normalize import normalize
    from picortex.discord.rest import RestClient

    class NoSink:
        def emit(self, event: str, /, **fields: object) -> None:
            pass

    async def main() -> dict[str, Any]:
        done = trio.Event()
        meter = Meter(count, done.set)
        send, receive = trio.open_memory_channel[object](4096)
        overflow = 0

        def on_dispatch(name: str, data: Any) -> None:
            nonlocal overflow
            event = normalize(name, data)
            if name == "MESSAGE_CREATE":
                try:
                    send.send_nowait(event)
                except trio.WouldBlock:
                    overflow += 1
                meter.tick()

        def normalize_only(name: str, data: Any) -> None:
            normalize(name, data)
            if name == "MESSAGE_CREATE":
                meter.tick()

        def gateway_only(name: str, data: Any) -> None:
            if name == "MESSAGE_CREATE":
                meter.tick()

        callback = {"full": on_dispatch, "normalize": normalize_only, "gateway": gateway_only}

        async def consume() -> None:
            async for _ in receive:
                pass

        async with RestClient(api_base, TOKEN) as rest, trio.open_nursery() as nursery:
            actor = GatewayActor(TOKEN, rest, NoSink(), callback[stage])
            nursery.start_soon(consume)
            await nursery.start(actor.run)
            emit({"ready": True, "compress": actor.compression})
            profiler = cProfile.Profile() if profile else None
            if profiler is not None:
                profiler.enable()
            await done.wait()
            if profiler is not None:
                profiler.disable()
                out = io.StringIO()
                pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(18)
                sys.stderr.write(out.getvalue())
            nursery.cancel_scope.cancel()
        label = "picortex" if stage == "full" else f"picortex ({stage} only)"
        return meter.result(label, overflow=overflow, compress=actor.compression)

    emit(trio.run(main))


def run_discordpy(api_base: str, count: int) -> None:
    import logging

    import discord
    import yarl
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

    logging.getLogger("discord").setLevel(logging.ERROR)
    # The simulator stands in for https://discord.com/api/v10 and wss://gateway.discord.gg.
    Route.BASE = api_base
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(_gateway_url(api_base) + "/")

    intents = discord.Intents.default()
    intents.message_content = True
    client = discord.Client(intents=intents)
    result: dict[str, Any] = {}

    def finish() -> None:
        result.update(meter.result("discord.py"))
        asyncio.get_running_loop().create_task(client.close())

    meter = Meter(count, finish)

    @client.event
    async def on_ready() -> None:
        emit({"ready": True})

    @client.event
    async def on_message(message: discord.Message) -> None:
        meter.tick()

    client.run(TOKEN, log_handler=None)
    emit(result)


def _gateway_url(api_base: str) -> str:
    import httpx

    headers = {"Authorization": f"Bot {TOKEN}"}
    url: str = httpx.get(api_base + "/gateway/bot", headers=headers).json()["url"]
    return url


def run_bare(api_base: str, count: int, tuned: bool) -> None:
    import orjson
    import trio
    from trio_websocket import open_websocket_url

    from picortex.discord import gateway as ours

    url = _gateway_url(api_base)
    options: dict[str, Any] = {}
    if tuned:  # the same socket settings as the GatewayActor
        options = {
            "message_queue_size": ours.MESSAGE_QUEUE,
            "receive_buffer_size": ours.RECEIVE_BYTES,
            "max_message_size": ours.MAX_MESSAGE_BYTES,
        }

    async def main() -> dict[str, Any]:
        done = trio.Event()
        meter = Meter(count, done.set)
        async with open_websocket_url(url + "/?v=10&encoding=json", **options) as ws:
            orjson.loads(await ws.get_message())  # HELLO
            identify = {
                "op": 2,
                "d": {
                    "token": TOKEN,
                    "intents": 1 | 1 << 9 | 1 << 15,
                    "properties": {"os": "linux", "browser": "bench", "device": "bench"},
                },
            }
            await ws.send_message(orjson.dumps(identify).decode())
            while orjson.loads(await ws.get_message()).get("t") != "READY":
                pass
            emit({"ready": True})
            while not done.is_set():
                frame = orjson.loads(await ws.get_message())
                if frame.get("t") == "MESSAGE_CREATE":
                    meter.tick()
            await ws.aclose(4900)
        return meter.result("bare" if tuned else "bare (trio-websocket defaults)")

    emit(trio.run(main))


# -- the orchestrator -------------------------------------------------------------------------


def _read_json(stream: IO[str], what: str) -> dict[str, Any]:
    while True:
        line = stream.readline()
        if not line:
            raise SystemExit(f"{what} exited without reporting")
        line = line.strip()
        if line.startswith("{"):
            result: dict[str, Any] = json.loads(line)
            return result


def _spawn(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdout=subprocess.PIPE, text=True, env=env
    )


def measure(client: str, api_base: str, control: str, count: int, profile: bool) -> dict[str, Any]:
    import httpx

    args = ["--client", client, "--api-base", api_base, "--count", str(count)]
    if profile:
        args.append("--profile")
    proc = _spawn(*args)
    assert proc.stdout is not None
    try:
        _read_json(proc.stdout, client)  # ready
        blast = httpx.post(
            control + "/blast",
            json={"count": count, "channels": CHANNELS, "size": SIZE},
            timeout=600,
        ).json()
        result = _read_json(proc.stdout, client)
        result["sim_seconds"] = blast.get("seconds")
        proc.wait(timeout=60)
        return result
    finally:
        if proc.poll() is None:
            proc.kill()


def orchestrate(count: int, runs: int, profile: bool, clients: list[str]) -> int:
    sim = _spawn("--serve-sim")
    assert sim.stdout is not None
    try:
        urls = _read_json(sim.stdout, "simulator")
        results: dict[str, list[dict[str, Any]]] = {}
        for run in range(1, runs + 1):
            for client in clients:
                result = measure(client, urls["api_base"], urls["control"], count, profile)
                results.setdefault(result["client"], []).append(result)
                print(
                    f"run {run} {result['client']:30s} {result['rate']:>8,.0f} frames/s wall "
                    f"{result['cpu_rate']:>8,.0f} frames/CPU-s "
                    f"({result['frames']:,} in {result['seconds']:.2f} s)",
                    flush=True,
                )
        print()
        print(f"{count:,} MESSAGE_CREATE frames of ~{SIZE} bytes across {CHANNELS} channels")
        print(f"{'':32s} {'wall frames/s':>14s} {'frames/CPU-s':>14s}   (best of {runs})")
        best: dict[str, tuple[float, float]] = {}
        for label, rows in results.items():
            wall = max(r["rate"] for r in rows)
            cpu = max(r["cpu_rate"] for r in rows)
            best[label] = (wall, cpu)
            print(f"  {label:30s} {wall:>14,.0f} {cpu:>14,.0f}")
        if {"picortex", "discord.py", "bare"} <= best.keys():
            for other, target in (("discord.py", TARGET_VS_DISCORDPY), ("bare", TARGET_VS_BARE)):
                wall = best["picortex"][0] / best[other][0]
                cpu = best["picortex"][1] / best[other][1]
                print(
                    f"picortex / {other:10s} = {wall:.2f} wall, {cpu:.2f} CPU  (target >= {target})"
                )
        overflow = sum(r.get("overflow", 0) for r in results.get("picortex", []))
        if overflow:
            print(f"note: {overflow} events overflowed the hand-on channel")
        return 0
    finally:
        sim.kill()
        sim.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile the picortex client")
    parser.add_argument(
        "--clients",
        default=",".join([*CLIENTS, "picortex-gateway", "picortex-normalize", "bare-defaults"]),
        help="comma-separated: " + ", ".join([*STAGES, "discord.py", "bare", "bare-defaults"]),
    )
    parser.add_argument("--serve-sim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--api-base", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sim:
        serve_sim()
        return 0
    if args.client in STAGES:
        run_picortex(args.api_base, args.count, args.profile, STAGES[args.client])
    elif args.client == "discord.py":
        run_discordpy(args.api_base, args.count)
    elif args.client in ("bare", "bare-defaults"):
        run_bare(args.api_base, args.count, tuned=args.client == "bare")
    else:
        return orchestrate(args.count, args.runs, args.profile, args.clients.split(","))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
