"""Benchmark of the gateway read path: picortex vs discord.py vs a bare trio-websocket client.

One simulator process serves every client. For each measurement a fresh client process
connects, a warm-up blast of MESSAGE_CREATE frames runs through it, then the measured blast
of N realistic frames (about 1 KB each, across 50 channels; the same shape every time):

  picortex    GatewayActor (receive, zstd-stream or zlib-stream inflate, parse, protocol)
              -> Router.on_dispatch, the app's own callback (a Mailbox.send_nowait)
              -> a task shaped like the app's router loop that takes each dispatch from that
              mailbox and normalize()s it. Dedupe, cache and channel delivery are not timed.
  discord.py  discord.Client with its defaults; counts on_message.
  bare        trio-websocket with the same socket settings as picortex, no compression;
              receives and orjson.loads each frame, nothing else (the ceiling of our stack).

A rate is measured frames divided by the wall time between the client's first and last
measured MESSAGE_CREATE and, separately, by the CPU time its process used meanwhile (steadier
on a shared machine). Clients take turns in each round (the order rotates); each client's
median over the rounds is reported. Two more picortex clients stop after the gateway stage
and after normalize (inline, no hand-on), to show where the time goes.

Usage (from the repository root):
    python scripts/bench_gateway.py [--count 50000] [--runs 5] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final, cast

# Runnable from a checkout without installing the package.
ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOKEN: Final = "sim-token"
CHANNELS: Final = 50
SIZE: Final = 1024
# Frames each client handles before the measured blast: imports, caches and the
# interpreter's specializations are warm, as in a bot that has been running a while.
WARMUP: Final = 5_000
CLIENTS: Final = ("picortex", "discord.py", "bare")
# The picortex client, and the same client stopped after an earlier stage (for the breakdown).
STAGES: Final = {
    "picortex": "full",
    "picortex-normalize": "normalize",
    "picortex-gateway": "gateway",
    "picortex-router-as-is": "router-as-is",
}
LABELS: Final = {
    "picortex": "picortex",
    "picortex-normalize": "picortex (normalize, no hand-on)",
    "picortex-gateway": "picortex (gateway only)",
    "picortex-router-as-is": "picortex (Router.run as is)",
    "discord.py": "discord.py",
    "bare": "bare",
    "bare-defaults": "bare (trio-websocket defaults)",
}
TARGET_VS_DISCORDPY: Final = 1.5
TARGET_VS_BARE: Final = 0.7


def emit(obj: dict[str, Any]) -> None:
    """One JSON line to the parent process."""
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Meter:
    """Counts MESSAGE_CREATE arrivals; times the first and the last of the measured blast."""

    def __init__(self, count: int, warmup: int, on_done: Callable[[], None]) -> None:
        self.count = count
        self.warmup = warmup
        self.seen = 0
        self.first = self.last = 0.0
        self.first_cpu = self.last_cpu = 0.0
        self._on_done = on_done

    def tick(self) -> None:
        seen = self.seen = self.seen + 1
        if seen == self.warmup:
            emit({"warm": True})
        elif seen == self.warmup + 1:
            self.first = time.perf_counter()
            self.first_cpu = time.process_time()
        elif seen == self.warmup + self.count:
            self.last = time.perf_counter()
            self.last_cpu = time.process_time()
            self._on_done()

    def result(self, client: str, **extra: Any) -> dict[str, Any]:
        seconds = self.last - self.first
        cpu = self.last_cpu - self.first_cpu
        return {
            "client": client,
            "frames": self.seen - self.warmup,
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


def run_picortex(api_base: str, count: int, warmup: int, profile: bool, stage: str) -> None:
    """`stage`: "full" (hand on + normalize), "normalize" (inline, no hand-on), "gateway"."""
    import trio

    from picortex.actors.router import Router
    from picortex.discord.gateway import GatewayActor
    from picortex.discord.normalize import normalize
    from picortex.discord.rest import RestClient

    class NoSink:
        def emit(self, event: str, /, **fields: object) -> None:
            pass

    class Pipe:  # the only part of the pipeline Router.on_dispatch touches (on overflow)
        events = NoSink()

    async def main() -> dict[str, Any]:
        done = trio.Event()
        meter = Meter(count, warmup, done.set)
        tick = meter.tick
        batch_seconds = float(os.environ.get("BENCH_BATCH", "0.001"))
        # The app's router and its mailbox; only the router task is replaced, below.
        router = Router(cast(Any, Pipe()), cast(Any, None))
        inbox = router.inbox

        async def route() -> None:
            # Router.run's loop with `_route` cut down to its first step, normalize(), and with
            # the batching proposed for Router.run: during a burst the task wakes once per
            # ROUTE_BATCH_SECONDS and takes everything queued meanwhile (receive_nowait until
            # WouldBlock); a lone dispatch is still taken at once.
            receive, receive_nowait, finished = inbox.receive, inbox.receive_nowait, inbox.done
            while True:
                name, data = await receive()
                while True:
                    normalize(name, data)
                    if name == "MESSAGE_CREATE":
                        tick()
                    finished()
                    try:
                        name, data = receive_nowait()
                    except trio.WouldBlock:
                        break
                await trio.sleep(batch_seconds)

        async def route_as_is() -> None:
            # Router.run today, with `_route` cut down to normalize(): one wake-up per dispatch.
            async def _route(name: str, data: Any) -> None:
                normalize(name, data)
                if name == "MESSAGE_CREATE":
                    tick()

            while True:
                name, data = await inbox.receive()
                await _route(name, data)
                inbox.done()

        tn = [0, 0]
        pc = time.perf_counter_ns
        def normalize_only(name: str, data: Any) -> None:
            if os.environ.get("BENCH_TIMENORM"):
                t0 = pc()
                normalize(name, data)
                tn[0] += pc() - t0
                tn[1] += 1
            else:
                normalize(name, data)
            if name == "MESSAGE_CREATE":
                tick()

        def gateway_only(name: str, data: Any) -> None:
            if name == "MESSAGE_CREATE":
                tick()

        callback = {
            "full": router.on_dispatch,
            "router-as-is": router.on_dispatch,
            "normalize": normalize_only,
            "gateway": gateway_only,
        }

        async with RestClient(api_base, TOKEN) as rest, trio.open_nursery() as nursery:
            actor = GatewayActor(TOKEN, rest, NoSink(), callback[stage])
            if stage == "full":
                nursery.start_soon(route)
            elif stage == "router-as-is":
                nursery.start_soon(route_as_is)
            await nursery.start(actor.run)
            emit({"ready": True, "compress": actor.compression})
            import gc
            gcstat = {"n": [0, 0, 0], "t": [0.0, 0.0, 0.0], "start": 0.0}
            def cb(phase, info):
                if phase == "start":
                    gcstat["start"] = time.perf_counter()
                else:
                    g = info["generation"]
                    gcstat["n"][g] += 1
                    gcstat["t"][g] += time.perf_counter() - gcstat["start"]
            if os.environ.get("BENCH_GCSTATS"):
                gc.callbacks.append(cb)
            if os.environ.get("BENCH_GCFREEZE"):
                gc.freeze()
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
        if tn[1]:
            sys.stderr.write(f"normalize {tn[0] / tn[1] / 1000:.2f} us in situ\n")
        if os.environ.get("BENCH_GCSTATS"):
            import gc
            sys.stderr.write(f"gc {gcstat} objects {len(gc.get_objects())}\n")
        return meter.result(stage, overflow=inbox.overflows, compress=actor.compression)

    emit(trio.run(main))


def run_discordpy(api_base: str, count: int, warmup: int) -> None:
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

    meter = Meter(count, warmup, finish)

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


def run_bare(api_base: str, count: int, warmup: int, tuned: bool) -> None:
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
        meter = Meter(count, warmup, done.set)
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
        return meter.result("bare" if tuned else "bare-defaults")

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


def _blast(control: str, count: int) -> dict[str, Any]:
    import httpx

    body = {"count": count, "channels": CHANNELS, "size": SIZE}
    result: dict[str, Any] = httpx.post(control + "/blast", json=body, timeout=600).json()
    return result


def measure(
    client: str, api_base: str, control: str, count: int, warmup: int, profile: bool
) -> dict[str, Any]:
    args = ["--client", client, "--api-base", api_base]
    args += ["--count", str(count), "--warmup", str(warmup)]
    if profile:
        args.append("--profile")
    proc = _spawn(*args)
    assert proc.stdout is not None
    try:
        _read_json(proc.stdout, client)  # ready
        if warmup:
            _blast(control, warmup)
            _read_json(proc.stdout, client)  # warm
        blast = _blast(control, count)
        result = _read_json(proc.stdout, client)
        result["client"] = client
        result["sim_seconds"] = blast.get("seconds")
        proc.wait(timeout=60)
        return result
    finally:
        if proc.poll() is None:
            proc.kill()


def orchestrate(count: int, warmup: int, runs: int, profile: bool, clients: list[str]) -> int:
    sim = _spawn("--serve-sim")
    assert sim.stdout is not None
    print(__doc__.split("\n\n")[1].strip() + "\n")
    print(f"{count:,} measured MESSAGE_CREATE frames of ~{SIZE} bytes across {CHANNELS} channels")
    print(f"after {warmup:,} warm-up frames, {runs} rounds, one simulator process\n", flush=True)
    started = time.perf_counter()
    try:
        urls = _read_json(sim.stdout, "simulator")
        results: dict[str, list[dict[str, Any]]] = {}
        for run in range(runs):
            shift = run % len(clients)
            for client in clients[shift:] + clients[:shift]:
                result = measure(client, urls["api_base"], urls["control"], count, warmup, profile)
                results.setdefault(client, []).append(result)
                sim_rate = count / result["sim_seconds"] if result.get("sim_seconds") else 0.0
                print(
                    f"round {run + 1} {LABELS[client]:34s} {result['rate']:>8,.0f} frames/s wall "
                    f"{result['cpu_rate']:>8,.0f} frames/CPU-s "
                    f"({result['frames']:,} in {result['seconds']:.2f} s; "
                    f"simulator sent {sim_rate:,.0f}/s)",
                    flush=True,
                )
        print()
        print(f"{'':36s} {'wall frames/s':>14s} {'frames/CPU-s':>14s}   (median of {runs})")
        median: dict[str, tuple[float, float]] = {}
        for client in clients:
            rows = results[client]
            wall = statistics.median(r["rate"] for r in rows)
            cpu = statistics.median(r["cpu_rate"] for r in rows)
            median[client] = (wall, cpu)
            print(f"  {LABELS[client]:34s} {wall:>14,.0f} {cpu:>14,.0f}")
        if "picortex" in median:
            per = {c: 1e6 / median[c][1] for c in STAGES if c in median}
            if {"picortex", "picortex-normalize", "picortex-gateway"} <= per.keys():
                gateway, norm, full = (
                    per["picortex-gateway"],
                    per["picortex-normalize"],
                    per["picortex"],
                )
                print(
                    f"picortex CPU per frame: {full:.1f} us = gateway {gateway:.1f} "
                    f"+ normalize {norm - gateway:.1f} + hand-on {full - norm:.1f}"
                )
            for other, target in (("discord.py", TARGET_VS_DISCORDPY), ("bare", TARGET_VS_BARE)):
                if other in median:
                    wall = median["picortex"][0] / median[other][0]
                    cpu = median["picortex"][1] / median[other][1]
                    verdict = "ok" if min(wall, cpu) >= target else "BELOW TARGET"
                    print(
                        f"picortex / {other:10s} = {wall:.2f} wall, {cpu:.2f} CPU  "
                        f"(target >= {target}: {verdict})"
                    )
        overflow = sum(r.get("overflow", 0) for r in results.get("picortex", []))
        if overflow:
            print(f"note: {overflow} events overflowed the router mailbox")
        print(f"({time.perf_counter() - started:.0f} s)")
        return 0
    finally:
        sim.kill()
        sim.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--runs", type=int, default=5, help="rounds; medians are reported")
    parser.add_argument("--profile", action="store_true", help="cProfile the picortex client")
    parser.add_argument(
        "--clients",
        default=",".join([*CLIENTS, "picortex-gateway", "picortex-normalize"]),
        help="comma-separated: " + ", ".join(LABELS),
    )
    parser.add_argument("--serve-sim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--api-base", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sim:
        serve_sim()
        return 0
    if args.client in STAGES:
        run_picortex(args.api_base, args.count, args.warmup, args.profile, STAGES[args.client])
    elif args.client == "discord.py":
        run_discordpy(args.api_base, args.count, args.warmup)
    elif args.client in ("bare", "bare-defaults"):
        run_bare(args.api_base, args.count, args.warmup, tuned=args.client == "bare")
    elif args.client is not None:
        parser.error(f"unknown client {args.client!r}")
    else:
        clients = args.clients.split(",")
        unknown = [c for c in clients if c not in LABELS]
        if unknown:
            parser.error(f"unknown clients: {', '.join(unknown)}")
        return orchestrate(args.count, args.warmup, args.runs, args.profile, clients)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
