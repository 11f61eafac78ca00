"""Benchmark of the gateway read path: picortex vs discord.py vs a bare trio-websocket client.

One simulator process serves every client. Each measurement starts a fresh client process,
runs a warm-up blast through it, then the measured blast of N MESSAGE_CREATE frames of about
1 KB across 50 channels (the same shapes and sizes every time, fresh ids):

  picortex    GatewayActor: receive (in a burst, in batches), zstd-stream (else zlib-stream)
              inflate, parse, protocol; then the app's own hand-on, Router.on_dispatch (a
              Mailbox.send_nowait into the router's mailbox), and the router task taking each
              dispatch out and normalizing it. The router's later steps (dedupe, cache, channel
              delivery) are not timed. The router task is Router.run itself, which drains
              up to ROUTER_BATCH dispatches per wake-up in a burst.
  discord.py  discord.Client with its defaults; counts on_message.
  bare        trio-websocket with the same socket settings as picortex, no compression;
              get_message and orjson.loads per frame, nothing else (the ceiling of our stack
              read the plain way, one scheduler round per frame).

A rate is the measured frames over the wall time between a client's first and last measured
MESSAGE_CREATE, and over the CPU time its process used meanwhile (steadier on a shared
machine). Clients take turns each round, in a rotating order; each rate is the median over
the rounds. Breakdown clients stop picortex after the gateway stage and after normalize
(inline in the reader, no hand-on), to show where the time goes.

Usage (from the repository root):
    python scripts/bench_gateway.py [--count 50000] [--runs 5] [--breakdown-runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
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

import attrs

# Runnable from a checkout without installing the package.
ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOKEN: Final = "sim-token"
CHANNELS: Final = 50
SIZE: Final = 1024
# The tuned bare reader's trio-websocket queue of whole messages (its reader task fills it).
BARE_QUEUE: Final = 64
# Frames each client handles before the measured blast: imports, caches and the
# interpreter's specializations are warm, as in a bot that has been running a while.
WARMUP: Final = 2_000
# Measured every round; the rest of DEFAULT_CLIENTS only in the first --breakdown-runs rounds.
CLIENTS: Final = ("picortex", "discord.py", "bare")
# The picortex client, and the same client stopped after an earlier stage (for the breakdown).
STAGES: Final = {
    "picortex": "full",
    "picortex-normalize": "normalize",
    "picortex-gateway": "gateway",
}
LABELS: Final = {
    "picortex": "picortex",
    "picortex-normalize": "picortex (normalize, no hand-on)",
    "picortex-gateway": "picortex (gateway only)",
    "discord.py": "discord.py",
    "bare": "bare",
    "bare-defaults": "bare (trio-websocket defaults)",
}
DEFAULT_CLIENTS: Final = (
    *CLIENTS,
    "picortex-gateway",
    "picortex-normalize",
)
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
            emit(
                {
                    "api_base": urls.api_base,
                    "control": urls.control_url,
                    "control_token": urls.control_token,
                }
            )

    trio.run(main)


# -- the clients ------------------------------------------------------------------------------


def run_picortex(api_base: str, count: int, warmup: int, profile: bool, stage: str) -> None:
    """`stage`: "full" (hand-on, then normalize in the router task, Router.run itself),
    "normalize" (inline in the reader, no hand-on) or "gateway" (neither).
    """
    import trio

    from picortex.actors.router import Router
    from picortex.discord.gateway import GatewayActor
    from picortex.discord.normalize import normalize
    from picortex.discord.rest import RestClient
    from picortex.types import Message

    class NoSink:
        def emit(self, event: str, /, **fields: object) -> None:
            pass

    class Me:
        user_id = 1  # known: the router asks Discord who it is otherwise
        username = "picortex"

    class NoReload:
        def refresh(self) -> None:
            pass

    class Pipe:  # what the router's loop touches outside `_route` (events: on overflow)
        events = NoSink()
        bot = Me()
        settings = NoReload()

    async def main() -> dict[str, Any]:
        done = trio.Event()
        meter = Meter(count, warmup, done.set)
        tick = meter.tick

        class BenchRouter(Router):
            """The app's router with `_route` cut down to its first step, normalize()."""

            async def _route(self, name: str, data: Any, seq: int | None = None) -> None:
                if type(data) is not Message:  # else normalized on the reader's inline path
                    normalize(name, data)
                if name == "MESSAGE_CREATE":
                    tick()

            def _route_chatter_now(self, event: Message, seq: int | None) -> bool:
                return False  # every message takes the hand-on this stage measures

        # The app's router: its on_dispatch (a Mailbox.send_nowait) and its mailbox.
        router = BenchRouter(cast(Any, Pipe()), cast(Any, None), cast(Any, None))
        inbox = router.inbox

        def normalize_only(name: str, data: Any, seq: int | None) -> None:
            normalize(name, data)
            if name == "MESSAGE_CREATE":
                tick()

        def gateway_only(name: str, data: Any, seq: int | None) -> None:
            if name == "MESSAGE_CREATE":
                tick()

        callback = {
            "full": router.on_dispatch,
            "normalize": normalize_only,
            "gateway": gateway_only,
        }

        async with RestClient(api_base, TOKEN) as rest, trio.open_nursery() as nursery:
            actor = GatewayActor(TOKEN, rest, NoSink(), callback[stage])
            if stage == "full":
                await nursery.start(router.run)
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
            "message_queue_size": BARE_QUEUE,
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


def _blast(control: tuple[str, str], count: int) -> dict[str, Any]:
    """Ask the simulator (control URL, control token) to send `count` frames at once."""
    import httpx

    url, token = control
    body = {"count": count, "channels": CHANNELS, "size": SIZE}
    headers = {"Authorization": f"Bearer {token}"}
    result: dict[str, Any] = httpx.post(
        url + "/blast", json=body, headers=headers, timeout=600
    ).json()
    return result


def start_client(client: str, api_base: str, count: int, warmup: int, profile: bool) -> Client:
    args = ["--client", client, "--api-base", api_base]
    args += ["--count", str(count), "--warmup", str(warmup)]
    if profile:
        args.append("--profile")
    return Client(client, _spawn(*args))


@attrs.define
class Client:
    """One client process, started ahead of its turn so its imports overlap the last exit."""

    name: str
    proc: subprocess.Popen[str]

    def measure(self, control: tuple[str, str], count: int, warmup: int) -> dict[str, Any]:
        out = self.proc.stdout
        assert out is not None
        _read_json(out, self.name)  # ready
        if warmup:
            _blast(control, warmup)
            _read_json(out, self.name)  # warm
        blast = _blast(control, count)
        result = _read_json(out, self.name)
        result["client"] = self.name
        result["sim_seconds"] = blast.get("seconds")
        return result

    def stop(self) -> None:
        """Wait for the process to leave (it closes its session), else kill it."""
        try:
            self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def orchestrate(
    count: int, warmup: int, runs: int, breakdown_runs: int, profile: bool, clients: list[str]
) -> int:
    sim = _spawn("--serve-sim")
    assert sim.stdout is not None
    started = time.perf_counter()
    print("\n\n".join(__doc__.split("\n\n")[1:4]) + "\n")
    print(f"{count:,} measured frames after {warmup:,} warm-up frames, {runs} rounds\n", flush=True)
    current: Client | None = None
    try:
        urls = _read_json(sim.stdout, "simulator")
        plan: list[tuple[int, str]] = []
        for run in range(runs):
            turn = [c for c in clients if c in CLIENTS or run < breakdown_runs]
            shift = run % len(turn)
            plan += [(run, c) for c in turn[shift:] + turn[:shift]]
        results: dict[str, list[dict[str, Any]]] = {}
        start = functools.partial(
            start_client, api_base=urls["api_base"], count=count, warmup=warmup, profile=profile
        )
        current = start(plan[0][1]) if plan else None
        for index, (run, name) in enumerate(plan):
            assert current is not None
            control = (urls["control"], urls["control_token"])
            result = current.measure(control, count, warmup)
            # The next client starts while this one leaves; no blast until this one is gone.
            following = start(plan[index + 1][1]) if index + 1 < len(plan) else None
            current.stop()
            current = following
            results.setdefault(name, []).append(result)
            sim_rate = count / result["sim_seconds"] if result.get("sim_seconds") else 0.0
            print(
                f"round {run + 1} {LABELS[name]:34s} {result['rate']:>8,.0f} frames/s wall "
                f"{result['cpu_rate']:>8,.0f} frames/CPU-s "
                f"({result['seconds']:.2f} s; simulator sent {sim_rate:,.0f}/s)",
                flush=True,
            )
        print()
        print(f"{'median of the rounds':36s} {'wall frames/s':>14s} {'frames/CPU-s':>14s}")
        median: dict[str, tuple[float, float]] = {}
        for client in clients:
            rows = results.get(client)
            if not rows:
                continue
            wall = statistics.median(r["rate"] for r in rows)
            cpu = statistics.median(r["cpu_rate"] for r in rows)
            median[client] = (wall, cpu)
            print(f"  {LABELS[client]:34s} {wall:>14,.0f} {cpu:>14,.0f}   ({len(rows)} rounds)")
        _breakdown(median)
        if "picortex" in median:
            for other, target in (("discord.py", TARGET_VS_DISCORDPY), ("bare", TARGET_VS_BARE)):
                if other in median:
                    wall = median["picortex"][0] / median[other][0]
                    cpu = median["picortex"][1] / median[other][1]
                    verdict = "ok" if min(wall, cpu) >= target else "BELOW TARGET"
                    print(
                        f"picortex / {other:10s} = {wall:.2f} wall, {cpu:.2f} CPU"
                        f"   (target >= {target}: {verdict})"
                    )
        overflow = sum(r.get("overflow", 0) for rows in results.values() for r in rows)
        if overflow:
            print(f"note: {overflow} dispatches overflowed the router mailbox")
        print(f"({time.perf_counter() - started:.0f} s)")
        return 0
    finally:
        sim.kill()
        sim.wait()
        if current is not None and current.proc.poll() is None:
            current.proc.kill()


def _breakdown(median: dict[str, tuple[float, float]]) -> None:
    """CPU microseconds per frame of each picortex stage, from the stage clients' medians."""
    us = {client: 1e6 / cpu for client, (_, cpu) in median.items() if cpu > 0}
    if not {"picortex", "picortex-normalize", "picortex-gateway"} <= us.keys():
        return
    gateway, normalized = us["picortex-gateway"], us["picortex-normalize"]
    line = (
        f"picortex CPU per frame (differences of medians; rough on a busy machine): "
        f"{us['picortex']:.1f} us = gateway {gateway:.1f}"
        f" + normalize {normalized - gateway:.1f} + hand-on {us['picortex'] - normalized:.1f}"
    )
    print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--warmup", type=int, default=WARMUP)
    parser.add_argument("--runs", type=int, default=5, help="rounds; medians are reported")
    parser.add_argument(
        "--breakdown-runs", type=int, default=3, help="rounds that include the breakdown clients"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the picortex client")
    parser.add_argument(
        "--clients", default=",".join(DEFAULT_CLIENTS), help="comma-separated: " + ", ".join(LABELS)
    )
    parser.add_argument("--serve-sim", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--api-base", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sim:
        serve_sim()
    elif args.client in STAGES:
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
        return orchestrate(
            args.count, args.warmup, args.runs, args.breakdown_runs, args.profile, clients
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
