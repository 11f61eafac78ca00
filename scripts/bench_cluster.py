"""Benchmark of a cluster on PostgreSQL: several `picortex run --shards auto/N` processes as one
bot against the built-in simulator (SPEC 17).

Starts a throwaway PostgreSQL server (Debian's binaries, as the tests do), the simulator with
many guilds, `max_concurrency` identify buckets (op 9 on a clash) and Discord's global REST
limit, then real `picortex run` processes, each with its own PICORTEX_HOME and the one
PICORTEX_DATABASE_URL. Every figure comes from what the simulator saw (sessions per shard,
IDENTIFYs, op 9s, requests per second, the bot's messages, model calls) and from each
process's action log (which process took which trigger). Nothing is asserted: each phase
prints one line of what it saw.

Phases (`--phase`, default all; each on a fresh database and simulator):
  triggers  once the cluster is balanced (every process at its fair share, no handoff for
            a few seconds), triggers across all guilds and DMs: answered once, and taken by
            the process the simulator delivered each one to (the gateway connection's
            client port, looked up in /proc, names the process); and no process taking or
            answering a trigger of a shard after its lease there ended (its action log)
  ceiling   a global ceiling, every model call costing exactly its worst case: what was
            spent (by the simulator's count and the ledger's), with 1 process and with N
  config    a runtime config change (what `picortex config set budget.global_ceiling_usd`
            stores), until every process's status shows it: listener up, and listener
            connections cut; a trust change (the owner's `whitelist add` in chat, taken by
            one process), until each process takes a probe from the newly trusted user as a
            trigger (probes every --probe-ms)
  kill      SIGKILL a random process with triggers in flight, restart it --restart-after s
            later: lost, doubled, seconds until others are connected on its shards
            (`--detail`: each takeover's steps from the action logs)
  cold      all processes start at once: op 9s, IDENTIFYs per shard, time until every
            shard is READY against ceil(shards / max_concurrency) x 5.25 s
  burst     triggers aimed at one shard's channels: global 429s, the busiest one-second
            span, requests per whole second while busy
  cpu       chatter spread over every shard: CPU per message of the N processes (and of
            PostgreSQL, apart) against one embedded process (no database URL, one shard),
            each side's chatter sent in four parts, in the order cluster, embedded;
            embedded, cluster; embedded, cluster; cluster, embedded (so that a drift of
            the machine's pace weighs on both alike), after 2,000 unmeasured messages
            each (the first chatter cost more), each side's idle rate measured before
            and after its parts;
            trigger -> reply latency of both, measured alike: both sides run side by
            side, the cluster balanced, both idle again after the chatter (the database
            too), one unmeasured answer per shard first, then alternating rounds of 10
            triggers per side in the same channels; then each stage's median (history
            read, typing, model request, reply) as the simulator received it

Usage (from the repository root; PostgreSQL's server binaries and psycopg are needed):
    python scripts/bench_cluster.py                       # every phase, the issue's sizes
    python scripts/bench_cluster.py --phase triggers      # (or ceiling, config, kill, ...)
Small sizes while developing:
    python scripts/bench_cluster.py --guilds 50 --triggers 100 --kills 3 --chatter 2000 \
        --changes 20 --trust-changes 3 --burst 200 --start-patience 30
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import orjson
import trio

# Runnable from a checkout without installing the package.
ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_support import process_cpu  # noqa: E402
from chaos_triggers import tally  # noqa: E402

from picortex.actors.control import socket_path, unix_address  # noqa: E402
from picortex.actors.llm import price_of  # noqa: E402
from picortex.config import load_settings  # noqa: E402
from picortex.core.budget import cost_usd  # noqa: E402
from picortex.sim import Simulator  # noqa: E402
from picortex.sim.model import ModelReply, worst_input_tokens  # noqa: E402
from picortex.sim.simulator import SimURLs  # noqa: E402
from picortex.store.admin import AdminStore  # noqa: E402
from picortex.store.backends import open_admin  # noqa: E402
from tests.pg import Server, start_server  # noqa: E402

# Latency triggers per side before the other side takes its turn (see `_latency`).
LATENCY_ROUND: Final = 10
# Each side's chatter goes in this many parts, interleaved with the other side's (see
# `_part_order`): the machine's pace moves by a tenth and more within seconds, and with two
# parts a side, one run measured the cluster at 1.40x the embedded process and another at
# 0.83x, for the same code.
CHATTER_PARTS: Final = 4
# Chatter each side gets first, not measured: the first chatter after the start cost more
# in some runs (37 against 25 us a message for the same processes in one run), and it fell
# on whichever side went first.
WARM_CHATTER: Final = 2_000
PHASES: Final = ("triggers", "ceiling", "config", "kill", "cold", "burst", "cpu")
# Long enough that no heartbeat lands inside a measured burst.
HEARTBEAT_MS: Final = 41_250
# Per-route limits that would pace the bots below the global limit: relaxed, so the global
# limit (kept) is what a burst meets.
RELAXED_BUCKETS: Final = ("messages.post", "typing", "users/@me/channels", "reactions.me")
# Discord's identify window and the pause the cluster keeps between a bucket's IDENTIFYs.
IDENTIFY_SPACING_SECONDS: Final = 5.25
# How often the harness looks at things that happen in other processes.
POLL_SECONDS: Final = 0.25
TRUSTED_USERS: Final = 8
ACTION_LOG_BYTES: Final = 1 << 30
# Ceilings no phase reaches (the config's largest).
NO_CEILING_USD: Final = 10_000.0
IDLE_PATIENCE_SECONDS: Final = 300.0
# The idle rate taken out of chatter's CPU is measured this long: /proc counts CPU in 10 ms
# ticks, and over a few seconds four processes' rounding is a tenth or more of their idle
# rate (which is then taken out for every second the chatter and its wind-down last).
IDLE_RATE_SECONDS: Final = 10.0
# Balanced: no shard changed hands for this long (two renewal rounds of a 10 s lease).
BALANCED_QUIET_SECONDS: Final = 7.0
# A connection whose process could not be found yet is looked up again after this long.
LOOKUP_RETRY_SECONDS: Final = 0.05
# While a process does not show a config change yet, a chatter line to it this often.
NUDGE_SECONDS: Final = 0.005


# ------------------------------------------------------------------------------- processes


@attrs.define(eq=False)
class Node:
    """One `picortex run` process and its home; restarted on the same home."""

    name: str
    home: Path
    env: dict[str, str]
    argv: list[str]
    proc: trio.Process | None = None
    starts: int = 0
    _read: int = 0  # action-log bytes already parsed
    rows: list[dict[str, Any]] = attrs.Factory(list)
    started_at: list[int] = attrs.Factory(list)  # the row each (re)start began at

    async def start(self) -> None:
        self.starts += 1
        self.started_at.append(len(self.actions()))
        out = (self.home / f"run{self.starts}.out").open("wb")
        try:
            self.proc = await trio.lowlevel.open_process(
                self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        finally:
            out.close()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    async def kill(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    async def stop(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        self.proc.terminate()
        with trio.move_on_after(20), trio.CancelScope(shield=True):
            await self.proc.wait()
        if self.proc.returncode is None:
            await self.kill()

    def actions(self) -> list[dict[str, Any]]:
        """Every action-log row so far (read on from where the last look stopped)."""
        path = self.home / "actions.jsonl"
        if not path.exists():
            return self.rows
        with path.open("rb") as f:
            f.seek(self._read)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a torn last line waits for the next look
        for line in data[:end].splitlines():
            try:
                self.rows.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue  # the last line, torn by a kill
        self._read += end
        return self.rows

    def status(self) -> dict[str, Any] | None:
        """The process's `picortex status` answer, or None while it cannot answer."""
        path = socket_path(self.home)
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(2.0)
        try:
            with unix_address(path) as address:
                client.connect(address)
            client.sendall(b"status\n")
            chunks = []
            while chunk := client.recv(65536):
                chunks.append(chunk)
            answer = orjson.loads(b"".join(chunks))
        except (OSError, orjson.JSONDecodeError):
            return None
        finally:
            client.close()
        return answer if isinstance(answer, dict) else None

    def ready_shards(self) -> set[int]:
        """The shards this process says it is connected on."""
        status = self.status() if self.alive else None
        if status is None:
            return set()
        return {
            int(s["shard"][0])
            for s in status.get("shards", [])
            if s.get("state") in ("ready", "connected", "resumed")
        }


@attrs.define(eq=False)
class World:
    """The simulator's side of a phase: guilds, trusted users, the owner's DM."""

    sim: Simulator
    urls: SimURLs
    guilds: list[tuple[int, list[int]]]
    owner: int
    users: list[int]
    dms: list[int]
    shard_count: int
    chatter: int  # an untrusted user: what they say is context, never a trigger

    def shard_of(self, channel_id: int) -> int:
        guild = self.sim.world.channel(channel_id).guild_id
        return 0 if guild is None else (guild >> 22) % self.shard_count

    def channels_of(self, shard: int) -> list[int]:
        return [c for g, cs in self.guilds if (g >> 22) % self.shard_count == shard for c in cs]

    def all_channels(self) -> list[int]:
        return [c for _, cs in self.guilds for c in cs]

    def covered_channels(self) -> set[int]:
        """Guild channels a live session receives, by that session's own shard count (one
        embedded process with one session receives every guild)."""
        live = {
            s.shard or (0, 1)
            for s in self.sim.gateway.sessions.values()
            if s.valid and s.connection is not None
        }
        return {
            c
            for g, cs in self.guilds
            for c in cs
            if any((g >> 22) % count == shard for shard, count in live)
        }

    def live_shards(self) -> set[int]:
        """Shards with a session the simulator holds a connection for."""
        return {
            s.shard[0]
            for s in self.sim.gateway.sessions.values()
            if s.valid and s.connection is not None and s.shard is not None
        }

    def post_trigger(self, channel: int, author: int, text: str) -> dict[str, Any]:
        mention = "" if self.sim.world.channel(channel).guild_id is None else self.mention
        return self.sim.post_user_message(channel, author, f"{mention} {text}".strip())

    @property
    def mention(self) -> str:
        return f"<@{self.sim.bot_user_id}>"


def new_simulator(args: argparse.Namespace, *, record_deliveries: bool = False) -> Simulator:
    sim = Simulator(
        heartbeat_interval_ms=HEARTBEAT_MS,
        limit_identify_concurrency=True,
        max_concurrency=args.max_concurrency,
        record_deliveries=record_deliveries,
    )
    for bucket in RELAXED_BUCKETS:
        sim.set_rate_limit(bucket, 100_000, 1.0)
    return sim


@asynccontextmanager
async def simulator(
    args: argparse.Namespace, *, record_deliveries: bool = False
) -> AsyncIterator[World]:
    """A simulator serving in this process with the phase's guilds and users."""
    sim = new_simulator(args, record_deliveries=record_deliveries)
    async with trio.open_nursery() as nursery:
        urls: SimURLs = await nursery.start(sim.serve)
        owner = sim.add_user("owner", global_name="Owner")
        users = [sim.add_user(f"member{n}") for n in range(TRUSTED_USERS)]
        guilds = sim.add_guilds(args.guilds, args.channels)
        dms = [sim.open_dm(u) for u in (owner, *users)]
        chatter = sim.add_user("chatter")
        # The world is built once and lives to the end: out of the collector's sight, so that
        # the simulator does not stop for a collection of it in the middle of a measurement.
        gc.collect()
        gc.freeze()
        yield World(sim, urls, guilds, owner, users, dms, args.shards, chatter)
        nursery.cancel_scope.cancel()


def home_toml(global_ceiling_usd: float = NO_CEILING_USD) -> str:
    """Each trigger its own request (no continuation window); one action log file (the
    harness reads who took what from it, not from rotated ones); no panel (the processes would
    share its port); no per-user limits, so many triggers from a few users are all answered;
    the global ceiling only where a phase measures it."""
    return (
        "continuation_seconds = 0\n"
        f"action_log_max_bytes = {ACTION_LOG_BYTES}\n"
        "[web]\nenabled = false\n"
        "[budget]\n"
        f"ceiling_usd = {NO_CEILING_USD}\n"
        f"global_ceiling_usd = {global_ceiling_usd}\n"
        "user_daily_usd = 0\n"
        "user_requests_per_minute = 0\n"
    )


def bot_env(world: World, home: Path, database_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICORTEX_", "DISCORD_"))}
    env.update(
        PICORTEX_HOME=str(home),
        DISCORD_BOT_TOKEN=world.sim.token,
        DISCORD_API_BASE=world.urls.api_base,
        ANTHROPIC_API_KEY="sk-ant-bench-0000",
        ANTHROPIC_BASE_URL=world.urls.anthropic_base_url,
        PICORTEX_OWNER_ID=str(world.owner),
        PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""),
    )
    if database_url is not None:
        env["PICORTEX_DATABASE_URL"] = database_url
    return env


def trust_members(world: World, env: dict[str, str]) -> None:
    """Whitelist the trusted users in the bot's store (what `picortex trust` does)."""
    store = open_admin(load_settings(env))
    try:
        for user in world.users:
            store.set_tier(user, "trusted")
    finally:
        store.close()


@asynccontextmanager
async def cluster(
    world: World,
    root: Path,
    database_url: str | None,
    count: int,
    run_args: Sequence[str],
    *,
    global_ceiling_usd: float = NO_CEILING_USD,
) -> AsyncIterator[list[Node]]:
    """`count` processes started together (not waited for); stopped on the way out."""
    nodes = []
    for n in range(count):
        home = root / f"p{n}-{time.monotonic_ns() % 10**6}"
        home.mkdir(parents=True)
        (home / "picortex.toml").write_text(home_toml(global_ceiling_usd))
        env = bot_env(world, home, database_url)
        argv = [sys.executable, "-m", "picortex", "run", *run_args]
        nodes.append(Node(f"p{n}", home, env, argv))
    trust_members(world, nodes[0].env)
    if database_url is None:
        for node in nodes[1:]:
            trust_members(world, node.env)
    try:
        for node in nodes:
            await node.start()
        yield nodes
    finally:
        with trio.CancelScope(shield=True):
            for node in nodes:
                await node.stop()


def cluster_args(args: argparse.Namespace) -> list[str]:
    return ["--shards", f"auto/{args.shards}", "--capacity", str(args.capacity)]


async def wait_shards(world: World, nodes: Sequence[Node], patience: float) -> float | None:
    """Seconds until every shard has a live session and every process answers status."""
    start = trio.current_time()
    with trio.move_on_after(patience):
        while True:
            if len(world.live_shards()) == world.shard_count and all(
                n.status() is not None for n in nodes if n.alive
            ):
                return trio.current_time() - start
            with trio.move_on_after(POLL_SECONDS):
                await world.sim.changed()
    return None


def holders(nodes: Sequence[Node]) -> dict[int, list[str]]:
    """Shard -> the processes that say they are connected on it."""
    held: dict[int, list[str]] = {}
    for node in nodes:
        for shard in node.ready_shards():
            held.setdefault(shard, []).append(node.name)
    return held


def taken_by(nodes: Sequence[Node]) -> dict[str, str]:
    """Trigger message id -> the processes whose action logs took it as a trigger (a, b)."""
    taken: dict[str, str] = {}
    for node in nodes:
        for row in node.actions():
            if row.get("event") == "trigger" and row.get("message_id") is not None:
                key = str(row["message_id"])
                taken[key] = taken[key] + "," + node.name if key in taken else node.name
    return taken


async def settle(world: World, sent: Sequence[dict[str, Any]], stall: float) -> None:
    """Until every trigger `sent` has a reply, or no reply came for `stall` seconds (a bot
    paced by the global limit takes its time; one that lost triggers never ends).

    The simulator serves on this event loop: it looks every POLL_SECONDS, and renders the
    replies for a full count only once there are enough of them (rendering every reply at
    each change of the simulator would slow the very answers being measured)."""
    last, count = trio.current_time(), -1
    while trio.current_time() - last < stall:
        posted = bot_message_count(world)
        if posted >= len(sent) and not tally(world.sim.bot_messages(), sent)[1]:
            break
        if posted != count:
            last, count = trio.current_time(), posted
        await trio.sleep(POLL_SECONDS)
    # Late doubles: a second holder's answer may still be on its way.
    await trio.sleep(2.0)


def bot_message_count(world: World) -> int:
    """Messages the bot posted so far (counted, not rendered)."""
    bot = world.sim.bot_user_id
    return sum(
        1
        for channel in world.sim.world.channels.values()
        for message in channel.messages
        if message.author_id == bot
    )


def spread_targets(world: World, count: int, rng: random.Random) -> Iterator[tuple[int, int]]:
    """(channel, author) pairs over every guild channel and the DMs, authors among the trusted."""
    channels = world.all_channels()
    rng.shuffle(channels)
    authors = (world.owner, *world.users)
    for n in range(count):
        if n % 20 == 19:  # one in twenty in a DM (shard 0's)
            index = n // 20 % len(world.dms)
            yield world.dms[index], authors[index]
        else:
            yield channels[n % len(channels)], authors[n % len(authors)]


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else math.nan


def show(name: str, **figures: object) -> None:
    line = "  ".join(f"{k}={v}" for k, v in figures.items())
    print(f"{name:<9} {line}", flush=True)


# ------------------------------------------------------------------------------- phases


@attrs.frozen
class Context:
    args: argparse.Namespace
    server: Server
    root: Path
    rng: random.Random

    def database(self) -> str:
        return self.server.database()


async def phase_triggers(ctx: Context) -> None:
    args = ctx.args
    async with simulator(args, record_deliveries=True) as world:
        url = ctx.database()
        launched = trio.current_time()
        async with (
            cluster(world, ctx.root, url, args.processes, cluster_args(args)) as nodes,
            trio.open_nursery() as watching,
        ):
            receivers = Receivers(world, nodes)
            watching.start_soon(receivers.watch)
            ready = await wait_shards(world, nodes, args.start_patience)
            balanced, handoffs = None, 0
            if args.triggers_from == "balanced":
                balanced, handoffs = await wait_balanced(
                    world, nodes, BALANCED_QUIET_SECONDS, args.start_patience
                )
            held = holders(nodes)
            marks = {node.name: len(node.actions()) for node in nodes}
            sent = []
            started = trio.current_time()
            span = args.triggers / args.rate
            for n in range(args.trigger_restarts):
                at = started + span * (n + 1) / (args.trigger_restarts + 1)
                watching.start_soon(_restart_at, at, ctx.rng.choice(nodes), args)
            for channel, author in spread_targets(world, args.triggers, ctx.rng):
                sent.append(world.post_trigger(channel, author, f"q{len(sent)}?"))
                if len(sent) % args.rate == 0:
                    await trio.sleep(1.0)
            await settle(world, sent, args.settle)
            took = trio.current_time() - started
            once, lost, doubled = tally(world.sim.bot_messages(), sent)
            watching.cancel_scope.cancel()
            seen = attribute(world, nodes, receivers, sent)
            during = sum(
                1
                for node in nodes
                for row in node.actions()[marks[node.name] :]
                if row.get("event") == "gateway" and row.get("action") == "lease_taken"
            )
    show(
        "triggers",
        sent=len(sent),
        once=once,
        lost=lost,
        lost_by_shard=unanswered_shards(world, sent),
        doubled=doubled,
        start=args.triggers_from,
        restarts=args.trigger_restarts,
        by_receiver=seen.kinds["receiver"],
        by_other=seen.kinds["other"],
        several=seen.kinds["several"],
        none=seen.kinds["none"],
        answered_by_other=seen.answered_by_other,
        after_lease=seen.after_lease,
        received_by_several=seen.received_by_several,
        receiver_unknown=seen.receiver_unknown,
        handoffs_during=during,
        holders=_holders_text(held),
        ready_s=_seconds(ready),
        balanced_s=_seconds(None if balanced is None else balanced - launched),
        handoffs_to_balance=handoffs,
        seconds=f"{took:.1f}",
    )


async def _restart_at(at: float, node: Node, args: argparse.Namespace) -> None:
    """At `at`, stop `node` cleanly (it hands its shards back) and start it again a few
    seconds later (the others hand it shards back): handoffs while triggers arrive."""
    await trio.sleep_until(at)
    await node.stop()
    await trio.sleep(args.trigger_restart_after)
    await node.start()


def unanswered_shards(world: World, sent: Sequence[dict[str, Any]]) -> str:
    """The shards of the triggers never answered, with how many on each."""
    answered = {
        str((m.get("message_reference") or {}).get("message_id")) for m in world.sim.bot_messages()
    }
    lost = Counter(world.shard_of(int(m["channel_id"])) for m in sent if m["id"] not in answered)
    return ";".join(f"{s}:{n}" for s, n in sorted(lost.items())) or "-"


# ------------------------------------------------------------------- who received what


@attrs.define(eq=False)
class Receivers:
    """Which process each gateway connection belongs to: the client's port, looked up in
    /proc (Linux) while the connection is open, names the process whose socket it is."""

    world: World
    nodes: Sequence[Node]
    owner: dict[int, str] = attrs.Factory(dict)  # connection serial -> process name
    _looked: float = -math.inf

    def look(self) -> None:
        """Find the process of every open connection not placed yet."""
        pending = [
            c
            for c in self.world.sim.gateway.connections
            if c.serial not in self.owner and c.peer is not None
        ]
        if not pending:
            return
        self._looked = trio.current_time()
        server_port = urlsplit(self.world.urls.gateway_url).port
        sockets = _client_sockets(server_port)
        processes = _socket_owners(
            {n.proc.pid: n.name for n in self.nodes if n.proc is not None and n.alive}
        )
        for conn in pending:
            assert conn.peer is not None
            name = processes.get(sockets.get(conn.peer[1], -1))
            if name is not None:
                self.owner[conn.serial] = name

    async def watch(self) -> None:
        """Place each connection as it opens (a change of the simulator wakes this)."""
        while True:
            if trio.current_time() - self._looked >= LOOKUP_RETRY_SECONDS:
                self.look()
            with trio.move_on_after(LOOKUP_RETRY_SECONDS):
                await self.world.sim.changed()

    def of(self, message_id: int) -> list[str | None]:
        """The processes a message was delivered to (None: a connection not placed)."""
        return [self.owner.get(d.connection) for d in self.world.sim.deliveries(message_id)]


def _client_sockets(server_port: int | None) -> dict[int, int]:
    """Local port -> socket inode of every TCP socket connected to `server_port`."""
    found: dict[int, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, remote, inode = fields[1], fields[2], int(fields[9])
            if int(remote.rsplit(":", 1)[1], 16) == server_port and inode:
                found[int(local.rsplit(":", 1)[1], 16)] = inode
    return found


def _socket_owners(processes: dict[int, str]) -> dict[int, str]:
    """Socket inode -> the name of the process (by pid) holding it open."""
    owners: dict[int, str] = {}
    for pid, name in processes.items():
        fds = Path(f"/proc/{pid}/fd")
        try:
            links = [os.readlink(fd) for fd in fds.iterdir()]
        except OSError:
            continue  # gone meanwhile
        for link in links:
            if link.startswith("socket:["):
                owners[int(link[8:-1])] = name
    return owners


async def wait_balanced(
    world: World, nodes: Sequence[Node], quiet: float, patience: float
) -> tuple[float | None, int]:
    """When (trio's clock) every shard had one holder and every live process its fair share
    (the shard count over the live processes, rounded down or up), unchanged for `quiet`
    seconds; None if not within `patience`. Also how often the holders changed meanwhile."""
    live = [n for n in nodes if n.alive]
    low, high = world.shard_count // len(live), math.ceil(world.shard_count / len(live))
    last: dict[int, list[str]] | None = None
    since: float | None = None
    changes = 0
    with trio.move_on_after(patience):
        while True:
            held = holders(live)
            counts = Counter(name for names in held.values() for name in names)
            fair = (
                len(held) == world.shard_count
                and all(len(names) == 1 for names in held.values())
                and all(low <= counts[n.name] <= high for n in live)
            )
            if held != last:
                changes += last is not None
                last, since = held, trio.current_time()
            if fair and since is not None and trio.current_time() - since >= quiet:
                return since, changes
            await trio.sleep(POLL_SECONDS)
    return None, changes


@attrs.frozen
class Attribution:
    """Who took and answered each trigger, against who it was delivered to."""

    kinds: Counter[str]  # receiver, other, several, none: by the processes that took it
    answered_by_other: int  # answered (a reply posted) by a process it was not delivered to
    after_lease: int  # taken or answered by a process after its lease on the shard ended
    received_by_several: int  # delivered to more than one process (handed on unanswered)
    receiver_unknown: int  # delivered on a connection whose process was not found


def attribute(
    world: World, nodes: Sequence[Node], receivers: Receivers, sent: Sequence[dict[str, Any]]
) -> Attribution:
    ids = {str(m["id"]): m for m in sent}
    took: dict[str, set[str]] = {}
    answered: dict[str, set[str]] = {}
    after_lease: set[str] = set()
    for node in nodes:
        held: set[int] = set()
        for index, row in enumerate(node.actions()):
            if index in node.started_at:
                held = set()  # a new process: it holds nothing yet
            event, action = row.get("event"), row.get("action")
            if event == "gateway" and action == "lease_taken":
                held.add(int(row["shard"][0]))
            elif event == "gateway" and action in ("lease_lost", "lease_released"):
                held.discard(int(row["shard"][0]))
            if event == "trigger":
                key = str(row.get("message_id"))
                found = took
            elif event == "reply" and row.get("result") in ("posted", "cut"):
                key = str(row.get("trigger_id"))
                found = answered
            else:
                continue
            if key not in ids:
                continue
            found.setdefault(key, set()).add(node.name)
            if world.shard_of(int(ids[key]["channel_id"])) not in held:
                after_lease.add(key)
    kinds: Counter[str] = Counter()
    by_other = several = unknown = 0
    for key in ids:
        got = receivers.of(int(key))
        delivered = {name for name in got if name is not None}
        unknown += None in got
        several += len(delivered) > 1
        takers = took.get(key, set())
        if not takers:
            kinds["none"] += 1
        elif len(takers) > 1:
            kinds["several"] += 1
        else:
            kinds["receiver" if takers <= delivered else "other"] += 1
        by_other += not answered.get(key, set()) <= delivered
    return Attribution(kinds, by_other, len(after_lease), several, unknown)


async def phase_ceiling(ctx: Context) -> None:
    args = ctx.args
    for count in (1, args.processes):
        async with simulator(args) as world:
            world.sim.model.worst_case_usage = True
            url = ctx.database()
            # One process serves every shard; several share them out.
            one = ["--shards", f"0-{args.shards - 1}/{args.shards}"]
            run = cluster_args(args) if count > 1 else one
            async with cluster(
                world, ctx.root, url, count, run, global_ceiling_usd=args.ceiling
            ) as nodes:
                await wait_shards(world, nodes, args.start_patience)
                sent = [
                    world.post_trigger(channel, author, f"spend {n}?")
                    for n, (channel, author) in enumerate(
                        spread_targets(world, args.ceiling_triggers, ctx.rng)
                    )
                ]
                await _quiet(world, seconds=5.0, patience=IDLE_PATIENCE_SECONDS)
                settings = load_settings(nodes[0].env)
                ledger = _ledger_spend(nodes[0].env)
            costs = [_call_cost(call.body, settings.prices) for call in world.sim.model.calls]
            spent = sum(costs)
            dearest = max(costs, default=0.0)
            show(
                "ceiling",
                processes=count,
                triggers=len(sent),
                calls=len(costs),
                spent_usd=f"{spent:.4f}",
                ledger_usd=f"{ledger:.4f}",
                ceiling_usd=args.ceiling,
                one_call_usd=f"{dearest:.4f}",
                over_by_calls=f"{max(0.0, spent - args.ceiling) / dearest if dearest else 0:.2f}",
                within=spent <= args.ceiling + dearest,
            )


def _call_cost(body: dict[str, Any], prices: Any) -> float:
    """What a call costs at its reported usage: the worst case (the model reports it)."""
    price = price_of(str(body["model"]), prices)
    return cost_usd(worst_input_tokens(body), int(body["max_tokens"]), price)


def _ledger_spend(env: dict[str, str]) -> float:
    """This period's spend over all workspaces, as the shared ledger holds it."""
    from datetime import UTC, datetime

    from picortex.core.budget import period_key

    settings = load_settings(env)
    store: AdminStore = open_admin(settings)
    try:
        key = period_key(datetime.now(UTC), settings.budget.period)
        return sum(store.spend_by_workspace(key).values())
    finally:
        store.close()


async def _quiet(world: World, *, seconds: float, patience: float) -> None:
    """Until no model call and no bot message came for `seconds` (or `patience` passed)."""
    with trio.move_on_after(patience):
        while True:
            before = (len(world.sim.model.calls), len(world.sim.requests))
            await trio.sleep(seconds)
            if (len(world.sim.model.calls), len(world.sim.requests)) == before:
                return


async def phase_config(ctx: Context) -> None:
    args = ctx.args
    async with simulator(args) as world:
        url = ctx.database()
        async with cluster(world, ctx.root, url, args.processes, cluster_args(args)) as nodes:
            await wait_shards(world, nodes, args.start_patience)
            store = open_admin(load_settings(nodes[0].env))
            held = holders(nodes)
            channels = _channels_per_node(world, nodes)
            live = [n for n in nodes if n.name in channels]
            try:
                up = []
                for n in range(args.changes):
                    up.append(await _config_in_force(world, store, live, channels, 1 + n))
                cut = []
                for n in range(args.cut_changes):
                    _cut_listeners(url)
                    cut.append(await _config_in_force(world, store, live, channels, 10_000 + n))
                probe = args.probe_ms / 1000
                trust = await _trust_in_force(world, nodes, args.trust_changes, probe)
            finally:
                store.close()
    first = up[0] if up else None
    show(
        "config",
        processes=len(live),
        first_change_ms="-" if first is None else f"{first * 1000:.1f}",
        **_lag_figures("up", up),
        **_lag_figures("cut", cut),
        holders=_holders_text(held),
    )
    show("trust", **_lag_figures("up", trust), probe_ms=args.probe_ms)


async def _config_in_force(
    world: World,
    store: AdminStore,
    nodes: Sequence[Node],
    channels: dict[str, list[int]],
    n: int,
) -> float | None:
    """Set the global ceiling (what `picortex config set budget.global_ceiling_usd` stores)
    through one process's database; seconds until every process's status shows it.

    A process applies runtime config at its next message: while a process does not show the
    new value yet, a chatter line goes to one of its shards' channels every few ms."""
    value = 1000 + n / 100
    start = time.perf_counter()
    store.set_runtime_config("budget.global_ceiling_usd", str(value))
    waiting = list(nodes)
    nudged = -math.inf
    with trio.move_on_after(10.0):
        while waiting:
            if time.perf_counter() - nudged >= NUDGE_SECONDS:
                nudged = time.perf_counter()
                for node in waiting:
                    options = channels[node.name]
                    channel = options[int(nudged * 1000) % len(options)]
                    world.sim.post_user_message(channel, world.chatter, "chatter")
            await trio.sleep(0.002)
            waiting = [
                node
                for node in waiting
                if ((node.status() or {}).get("budget_global") or {}).get("ceiling_usd") != value
            ]
        return time.perf_counter() - start
    return None


def _channel_per_node(world: World, nodes: Sequence[Node]) -> dict[str, int]:
    """A channel of one shard each process holds."""
    return {name: channels[0] for name, channels in _channels_per_node(world, nodes).items()}


def _channels_per_node(world: World, nodes: Sequence[Node]) -> dict[str, list[int]]:
    """The channels of one shard each process holds."""
    found: dict[str, list[int]] = {}
    for shard, names in sorted(holders(nodes).items()):
        for name in names:
            found.setdefault(name, world.channels_of(shard))
    return found


def _cut_listeners(url: str) -> None:
    """End every process's listener connection (they reconnect and reload)."""
    import psycopg

    from picortex.store.pg.listener import APPLICATION_NAME

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (APPLICATION_NAME,),
        )


async def _trust_in_force(
    world: World, nodes: Sequence[Node], rounds: int, probe: float
) -> list[float | None]:
    """The owner trusts a new user from chat (`!s whitelist add`) in a channel of the first
    process's shards, then a probe from that user goes every few ms to a channel of each
    process's shards: seconds until each process takes one as a trigger (an untrusted
    user's are ignored). The worst over processes, per round."""
    channel_for = _channel_per_node(world, nodes)
    lags: list[float | None] = []
    for n in range(rounds):
        user = world.sim.add_user(f"newcomer{n}")
        probes: dict[str, float] = {}
        start = time.perf_counter()
        command = f"!s whitelist add <@{user}> trusted"
        world.post_trigger(next(iter(channel_for.values())), world.owner, command)
        seen: dict[str, float] = {}
        read = {node.name: len(node.actions()) for node in nodes}
        with trio.move_on_after(10.0):
            while len(seen) < len(channel_for):
                for name, channel in channel_for.items():
                    if name not in seen:
                        at = time.perf_counter() - start
                        message = world.sim.post_user_message(
                            channel, user, f"{world.mention} probe {n}"
                        )
                        probes[str(message["id"])] = at
                for node in nodes:
                    if node.name in seen:
                        continue
                    rows = node.actions()
                    fresh, read[node.name] = rows[read[node.name] :], len(rows)
                    for row in fresh:
                        key = str(row.get("message_id"))
                        if row.get("event") == "trigger" and key in probes:
                            seen[node.name] = min(seen.get(node.name, math.inf), probes[key])
                await trio.sleep(probe)
        lags.append(max(seen.values()) if len(seen) == len(channel_for) else None)
        await trio.sleep(1.0)
    return lags


def _lag_figures(name: str, lags: Sequence[float | None]) -> dict[str, object]:
    done = [s * 1000 for s in lags if s is not None]
    return {
        f"{name}_n": len(lags),
        f"{name}_missed": len(lags) - len(done),
        f"{name}_p50_ms": f"{statistics.median(done):.1f}" if done else "-",
        f"{name}_p99_ms": f"{pct(done, 0.99):.1f}" if done else "-",
        f"{name}_max_ms": f"{max(done):.1f}" if done else "-",
    }


async def phase_kill(ctx: Context) -> None:
    args = ctx.args
    async with simulator(args) as world:
        url = ctx.database()
        async with cluster(world, ctx.root, url, args.processes, cluster_args(args)) as nodes:
            await wait_shards(world, nodes, args.start_patience)
            sent: list[dict[str, Any]] = []
            takeovers: list[float | None] = []
            kills: list[tuple[float, set[int]]] = []  # (wall clock, shards lost) per kill
            still_held = 0
            targets = spread_targets(world, 10**9, ctx.rng)
            for _cycle in range(args.kills):
                victim = ctx.rng.choice([n for n in nodes if n.alive])
                lost_shards = victim.ready_shards()
                others = set().union(*(n.ready_shards() for n in nodes if n is not victim))
                world.sim.model.script(
                    *[ModelReply(delay=ctx.rng.uniform(0.1, 0.6)) for _ in range(args.per_kill)]
                )
                for _ in range(args.per_kill):
                    channel, author = next(targets)
                    sent.append(world.post_trigger(channel, author, f"k{len(sent)}?"))
                await trio.sleep(ctx.rng.uniform(0.05, 0.5))
                await victim.kill()
                killed_at = trio.current_time()
                kills.append((time.time(), lost_shards))
                still_held += len(lost_shards & others)
                takeovers.append(
                    await _taken_over(world, nodes, lost_shards, killed_at, args.restart_after)
                )
                await trio.sleep(max(0.0, killed_at + args.restart_after - trio.current_time()))
                await victim.start()
                await _answers_status(victim, args.start_patience)
            await settle(world, sent, args.settle)
            once, lost, doubled = tally(world.sim.bot_messages(), sent)
            taken = taken_by(nodes)
            if args.detail:
                rounds = zip(kills, takeovers, strict=True)
                for index, ((killed_wall, shards), took) in enumerate(rounds):
                    until = (took or args.restart_after) + 1.0
                    steps = "; ".join(
                        _takeover_steps(nodes, shard, killed_wall, until) for shard in shards
                    )
                    print(f"kill {index}: {_seconds(took)}  {steps}", file=sys.stderr)
    several = sum(1 for m in sent if "," in taken.get(str(m["id"]), ""))
    done = [t for t in takeovers if t is not None]
    show(
        "kill",
        kills=args.kills,
        triggers=len(sent),
        once=once,
        lost=lost,
        lost_by_shard=unanswered_shards(world, sent),
        doubled=doubled,
        taken_by_several=several,
        takeover_median_s=f"{statistics.median(done):.2f}" if done else "-",
        takeover_worst_s=f"{max(done):.2f}" if done else "-",
        not_taken_over=len(takeovers) - len(done),
        shards_already_held_by_another=still_held,
    )


# What a takeover's steps are called in the action log (rows of event `gateway`).
TAKEOVER_STEPS: Final = {
    "lease_taken": "taken",
    "connect": "connect",
    "identify_wait": "wait",
    "resume": "resume",
    "identify": "identify",
    "ready": "READY",
    "resumed": "RESUMED",
    "reconnect": "reconnect",
    "lease_released": "released",
    "lease_lost": "lost",
}


def _takeover_steps(nodes: Sequence[Node], shard: int, since: float, until: float) -> str:
    """What the processes did for `shard` from `since` (wall clock) to `until` seconds after
    it, with the seconds after `since`: why a takeover took as long as it did."""
    steps: list[tuple[float, str]] = []
    for node in nodes:
        for row in node.actions():
            name = TAKEOVER_STEPS.get(str(row.get("action")))
            if row.get("event") != "gateway" or name is None:
                continue
            if (row.get("shard") or [None])[0] != shard:
                continue
            at = _wall(str(row.get("ts"))) - since
            if not 0 <= at <= until:
                continue
            if name == "connect":
                name += "(resume)" if row.get("resume") else "(identify)"
            elif name == "wait":
                name += f"{row.get('seconds')}"
            steps.append((at, f"{node.name}:{name}@{at:.2f}"))
    steps.sort()
    return f"shard {shard}: " + " ".join(text for _, text in steps)


def _wall(ts: str) -> float:
    """An action-log timestamp (RFC 3339, UTC, milliseconds) as seconds since the epoch."""
    stamp = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return stamp.timestamp()


async def _answers_status(node: Node, patience: float) -> None:
    """Until a (re)started process answers status with a shard it is connected on."""
    with trio.move_on_after(patience):
        while True:
            if node.ready_shards():
                return
            await trio.sleep(POLL_SECONDS)


async def _taken_over(
    world: World, nodes: Sequence[Node], shards: set[int], since: float, patience: float
) -> float | None:
    """Seconds from `since` until another process is connected on every shard in `shards`."""
    with trio.move_on_after(max(0.0, since + patience - trio.current_time())):
        while True:
            live = set().union(*(n.ready_shards() for n in nodes if n.alive))
            if shards <= live:
                return trio.current_time() - since
            await trio.sleep(0.1)
    return None


async def phase_cold(ctx: Context) -> None:
    args = ctx.args
    async with simulator(args) as world:
        url = ctx.database()
        launched = trio.current_time()
        async with cluster(world, ctx.root, url, args.processes, cluster_args(args)) as nodes:
            shard_ready: dict[int, float] = {}
            with trio.move_on_after(args.cold_patience):
                while len(shard_ready) < world.shard_count:
                    for shard in world.live_shards():
                        shard_ready.setdefault(shard, trio.current_time() - launched)
                    with trio.move_on_after(POLL_SECONDS):
                        await world.sim.changed()
            stats = world.sim.gateway_stats
            held = holders(nodes)
    times = stats.identify_times
    first = min(times) - launched if times else math.nan
    expected = math.ceil(args.shards / args.max_concurrency) * IDENTIFY_SPACING_SECONDS
    last = max(shard_ready.values()) if len(shard_ready) == args.shards else None
    show(
        "cold",
        shards_ready=f"{len(shard_ready)}/{args.shards}",
        op9_pacing=stats.identify_rate_limited,
        identifies=stats.identifies,
        per_shard=dict(sorted(stats.shard_identifies.items())),
        all_ready_s=_seconds(last),
        from_first_identify_s=_seconds(None if last is None else last - first),
        expected_s=f"{expected:.2f}",
        holders=_holders_text(held),
    )


async def phase_burst(ctx: Context) -> None:
    args = ctx.args
    async with simulator(args) as world:
        url = ctx.database()
        async with cluster(world, ctx.root, url, args.processes, cluster_args(args)) as nodes:
            await wait_shards(world, nodes, args.start_patience)
            # Aimed once no shard changes hands: a handoff meanwhile would measure the
            # takeover (a new session on the burst's shard), not the shared limit.
            await wait_balanced(world, nodes, BALANCED_QUIET_SECONDS, args.start_patience)
            held = holders(nodes)
            shard = args.burst_shard
            channels = world.channels_of(shard)
            authors = (world.owner, *world.users)
            since = trio.current_time()
            sent = [
                world.post_trigger(channels[n % len(channels)], authors[n % len(authors)], f"b{n}?")
                for n in range(args.burst)
            ]
            await settle(world, sent, args.settle)
            stats = world.sim.global_stats_since(since)
            once, lost, doubled = tally(world.sim.bot_messages(), sent)
    seconds = sorted(stats.per_second)
    # Whole seconds only: the first and the last are cut by the burst's start and end.
    inner = [stats.per_second[s] for s in seconds[1:-1]]
    show(
        "burst",
        shard=shard,
        holders=",".join(held.get(shard, [])) or "-",
        triggers=len(sent),
        once=once,
        lost=lost,
        lost_by_shard=unanswered_shards(world, sent),
        doubled=doubled,
        requests=stats.requests,
        global_429s=stats.global_429s,
        max_in_any_second=stats.max_in_any_second,
        sustained_median=f"{statistics.median(inner):.0f}" if inner else "-",
        sustained_min=min(inner) if inner else "-",
        busy_seconds=len(seconds),
        per_second=",".join(str(stats.per_second[s]) for s in seconds),
    )


async def phase_cpu(ctx: Context) -> None:
    args = ctx.args
    async with (
        simulator(args) as many_world,
        cluster(
            many_world, ctx.root, ctx.database(), args.processes, cluster_args(args)
        ) as many_nodes,
        simulator(args) as one_world,
        cluster(one_world, ctx.root, None, 1, []) as one_nodes,
    ):
        sides = {"cluster": (many_world, many_nodes), "embedded": (one_world, one_nodes)}
        for world, nodes in sides.values():
            await wait_shards(world, nodes, args.start_patience)
        # Measured once no shard changes hands: a handoff's work would count as chatter's
        # cost and delay replies.
        await wait_balanced(many_world, many_nodes, BALANCED_QUIET_SECONDS, args.start_patience)
        held = holders(many_nodes)
        for world, nodes in sides.values():
            await _chatter(world, nodes, WARM_CHATTER)
        # Each side's idle rate, over IDLE_RATE_SECONDS before its parts and again after
        # them; what the chatter left to the database (its writes, their indexes) is done
        # before the next part, and before replies are timed.
        quiet: dict[str, list[tuple[float, float]]] = {label: [] for label in sides}
        for label, (_, nodes) in sides.items():
            quiet[label].append(await _quiet_rates(nodes, ctx.server))
        parts: dict[str, list[ChatterSpent]] = {label: [] for label in sides}
        for n in range(CHATTER_PARTS):
            for label in _part_order(list(sides), n):
                world, nodes = sides[label]
                rate, with_server = quiet[label][0]
                await _idle(nodes, with_server, ctx.server)
                part = await _chatter(world, nodes, args.chatter // CHATTER_PARTS, ctx.server, rate)
                parts[label].append(part)
                await _idle(nodes, with_server, ctx.server)
        for label, (_, nodes) in sides.items():
            quiet[label].append(await _quiet_rates(nodes, ctx.server))
        costs = {
            label: ChatterCost.of(each, statistics.fmean(r for r, _ in quiet[label]))
            for label, each in parts.items()
        }
        rates = {label: "/".join(f"{r:.3f}" for r, _ in quiet[label]) for label in sides}
        each_part = {
            label: ",".join(f"{us:.0f}" for us in cost.parts_us) for label, cost in costs.items()
        }
        lags, stages = await _latency(
            {label: world for label, (world, _) in sides.items()},
            args.latency_triggers,
            args.seed,
            args.latency_spacing,
        )
    many, embedded = costs["cluster"], costs["embedded"]
    cluster_p50, embedded_p50 = (
        statistics.median(lags[label]) if lags[label] else math.nan
        for label in ("cluster", "embedded")
    )
    show(
        "cpu",
        chatter=args.chatter,
        cluster_us_per_msg=f"{many.per_message * 1e6:.0f}",
        embedded_us_per_msg=f"{embedded.per_message * 1e6:.0f}",
        ratio=f"{many.per_message / embedded.per_message:.2f}" if embedded.per_message else "-",
        postgres_us_per_msg=f"{many.server_per_message * 1e6:.0f}",
        cluster_frames=many.frames,
        embedded_frames=embedded.frames,
        idle_cpu_per_s=f"{rates['cluster']}|{rates['embedded']}",
        parts_us=f"{each_part['cluster']}/{each_part['embedded']}",
        chatter_s=f"{many.seconds:.1f}/{embedded.seconds:.1f}",
        cluster_reply_p50_ms=f"{cluster_p50 * 1000:.1f}",
        embedded_reply_p50_ms=f"{embedded_p50 * 1000:.1f}",
        delta_ms=f"{(cluster_p50 - embedded_p50) * 1000:.1f}",
        replies=f"{len(lags['cluster'])}/{len(lags['embedded'])}",
        holders=_holders_text(held),
    )
    # Each stage: ms from the trigger, cluster/embedded/difference (medians).
    show("cpu_stages", **_stage_figures(stages))


def _cpu(nodes: Sequence[Node], server: Server | None = None) -> float:
    """CPU seconds of the processes so far, and of `server` when given."""
    own = sum(process_cpu(n.proc.pid) or 0.0 for n in nodes if n.proc is not None)
    return own + (_server_cpu(server) if server is not None else 0.0)


def _server_cpu(server: Server) -> float:
    """CPU seconds of the PostgreSQL server: its postmaster (with the backends it reaped)
    and the backends still running."""
    try:
        postmaster = int((server.root / "data" / "postmaster.pid").read_text().split()[0])
        fields = Path(f"/proc/{postmaster}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    total = sum(int(f) for f in fields[11:15]) / tick  # utime, stime, cutime, cstime
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            child = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(child[1]) == postmaster:
            total += (int(child[11]) + int(child[12])) / tick
    return total


async def _idle_rate(
    nodes: Sequence[Node], server: Server | None = None, seconds: float = 3.0
) -> float:
    """CPU seconds per second the processes (and `server`) use while nothing happens
    (heartbeats, polls)."""
    before = _cpu(nodes, server)
    await trio.sleep(seconds)
    return (_cpu(nodes, server) - before) / seconds


async def _quiet_rates(nodes: Sequence[Node], server: Server) -> tuple[float, float]:
    """Once the processes are idle: their idle rate over IDLE_RATE_SECONDS, and theirs
    with the database's over a few seconds (what `_idle` waits for between parts)."""
    await _idle(nodes, await _idle_rate(nodes))
    return await _idle_rate(nodes, seconds=IDLE_RATE_SECONDS), await _idle_rate(nodes, server)


async def _idle(
    nodes: Sequence[Node], rate: float, server: Server | None = None, *, window: float = 1.0
) -> None:
    """Until the processes (and `server`) use no more than their idle `rate` (plus 0.05)
    over `window`."""
    with trio.move_on_after(IDLE_PATIENCE_SECONDS):
        before = _cpu(nodes, server)
        while True:
            await trio.sleep(window)
            now = _cpu(nodes, server)
            if now - before <= (rate + 0.05) * window:
                return
            before = now


def _part_order(labels: list[str], n: int) -> list[str]:
    """The sides in part `n`'s order: as given, reversed, reversed, as given, and so on
    (each side goes first as often as the other, and at the same places on average, so
    that a drift of the machine's pace, even a curved one, weighs on both alike)."""
    return labels if bin(n).count("1") % 2 == 0 else labels[::-1]


@attrs.frozen
class ChatterSpent:
    """One part of chatter: what the processes (and the database, apart) spent on it, from
    its first message until they were idle again, the idle rate not yet taken out."""

    cpu: float
    server_cpu: float
    seconds: float
    sent: int
    frames: int  # MESSAGE_CREATE frames delivered over every session


@attrs.frozen
class ChatterCost:
    per_message: float  # CPU seconds per chatter message sent (the idle rate taken out)
    server_per_message: float  # the PostgreSQL server's, apart
    frames: int
    seconds: float
    parts_us: tuple[float, ...]  # each part's per_message, in microseconds

    @staticmethod
    def of(parts: Sequence[ChatterSpent], idle_rate: float) -> ChatterCost:
        """The parts as one, `idle_rate` CPU seconds a second taken out of each."""
        sent = sum(p.sent for p in parts)
        own = [p.cpu - idle_rate * p.seconds for p in parts]
        return ChatterCost(
            sum(own) / sent,
            sum(p.server_cpu for p in parts) / sent,
            sum(p.frames for p in parts),
            sum(p.seconds for p in parts),
            tuple(spent / p.sent * 1e6 for spent, p in zip(own, parts, strict=True)),
        )


async def _chatter(
    world: World,
    nodes: Sequence[Node],
    count: int,
    server: Server | None = None,
    rate: float | None = None,
) -> ChatterSpent:
    """`count` chatter messages spread over every shard, and what the processes spent on
    them until they were idle again (back to their idle `rate`, else that of the last few
    seconds)."""
    if rate is None:
        rate = await _idle_rate(nodes)
    by_shard: dict[int, list[int]] = {}
    for guild, channels in world.guilds:
        by_shard.setdefault((guild >> 22) % world.shard_count, channels)
    per = max(1, -(-count // len(by_shard)))  # at least `count` in all
    start, before = trio.current_time(), _cpu(nodes)
    server_before = _server_cpu(server) if server is not None else 0.0
    frames = 0
    for channels in by_shard.values():
        frames += (await world.sim.blast(per, channels)).frames
    await _idle(nodes, rate)
    seconds = trio.current_time() - start
    server_spent = _server_cpu(server) - server_before if server is not None else 0.0
    return ChatterSpent(_cpu(nodes) - before, server_spent, seconds, per * len(by_shard), frames)


async def _latency(
    sides: dict[str, World], count: int, seed: int, spacing: float
) -> tuple[dict[str, list[float]], dict[str, list[dict[str, float]]]]:
    """Trigger -> reply seconds of each side, in alternating rounds of LATENCY_ROUND
    triggers (the side that goes first alternates too), so that whatever else the machine
    does meanwhile weighs on both alike.

    One trigger at a time, at most one per `spacing` seconds: a trigger costs a few requests
    (history, typing, the reply), and back to back they would reach Discord's global limit,
    measuring its queue instead of the answer's path. Each side's channels come from the
    same seeded sequence over those a live session receives (whatever the shard count of
    that session), so both answer in the same channels. First, one trigger in a channel of
    each shard, not measured: every process has answered once (its connections open)."""
    channels: dict[str, list[int]] = {}
    picks: dict[str, random.Random] = {}
    for label, world in sides.items():
        covered = world.covered_channels()
        for shard in range(world.shard_count):
            warm = [c for c in world.channels_of(shard) if c in covered]
            if warm:
                start = trio.current_time()
                await _reply_lag(world, warm[0], f"warm{shard}?")
                await trio.sleep_until(start + spacing)
        channels[label] = [c for c in world.all_channels() if c in covered]
        picks[label] = random.Random(seed)
    lags: dict[str, list[float]] = {label: [] for label in sides}
    stages: dict[str, list[dict[str, float]]] = {label: [] for label in sides}
    order = list(sides)
    for first in range(0, count, LATENCY_ROUND):
        for label in order:
            world = sides[label]
            for n in range(first, min(count, first + LATENCY_ROUND)):
                channel = picks[label].choice(channels[label])
                start = trio.current_time()
                lag = await _reply_lag(world, channel, f"lat{n}?")
                if lag is not None:
                    lags[label].append(lag)
                    stages[label].append(_stages(world, channel, start, start + lag))
                await trio.sleep_until(start + spacing)
        order.reverse()
    return lags, stages


# The requests of an answer, as the simulator received them, in the order an answer makes
# them: where the time from trigger to reply goes.
STAGES: Final = ("history", "typing", "model", "reply")


def _stages(world: World, channel: int, start: float, end: float) -> dict[str, float]:
    """Seconds from a trigger posted at `start` until the simulator received each request of
    its answer (a stage it did not make is left out), and `end`, when its reply was seen."""
    found: dict[str, float] = {"seen": end - start}
    prefix = f"/channels/{channel}/"
    for request in reversed(world.sim.rest.requests):
        if request.at < start:
            break
        if not request.path.startswith(prefix):
            continue
        rest = request.path[len(prefix) :]
        name = {("GET", "messages"): "history", ("POST", "typing"): "typing"}.get(
            (request.method, rest)
        )
        if request.method == "POST" and rest == "messages":
            name = "reply"
        if name is not None:
            found[name] = request.at - start  # walking back: the first one wins
    for call in reversed(world.sim.model.calls):
        if call.at < start:
            break
        found["model"] = call.at - start
    return found


def _stage_figures(stages: dict[str, list[dict[str, float]]]) -> dict[str, object]:
    """Per stage, the median ms from the trigger on each side and the difference."""
    figures: dict[str, object] = {}
    for stage in (*STAGES, "seen"):
        medians = {}
        for label, rows in stages.items():
            values = [row[stage] for row in rows if stage in row]
            medians[label] = statistics.median(values) * 1000 if values else math.nan
        cluster, embedded = medians.get("cluster", math.nan), medians.get("embedded", math.nan)
        figures[f"{stage}_ms"] = f"{cluster:.2f}/{embedded:.2f}/{cluster - embedded:+.2f}"
    return figures


async def _reply_lag(world: World, channel: int, text: str) -> float | None:
    """Seconds from a trigger posted in `channel` to the bot's reply to it (None: no reply
    within 10 s)."""
    start = trio.current_time()
    target = str(world.post_trigger(channel, world.owner, text)["id"])
    with trio.move_on_after(10):
        await world.sim.wait_until(
            lambda: any(
                (m.get("message_reference") or {}).get("message_id") == target
                for m in world.sim.bot_messages(channel)[-5:]
            )
        )
        return trio.current_time() - start
    return None


def _holders_text(held: dict[int, list[str]]) -> str:
    return ";".join(f"{s}:{'+'.join(names)}" for s, names in sorted(held.items())) or "-"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


RUNNERS: Final[dict[str, Callable[[Context], Any]]] = {
    "triggers": phase_triggers,
    "ceiling": phase_ceiling,
    "config": phase_config,
    "kill": phase_kill,
    "cold": phase_cold,
    "burst": phase_burst,
    "cpu": phase_cpu,
}


@contextmanager
def postgres() -> Iterator[Server]:
    servers = start_server()
    server = next(servers)
    try:
        yield server
    finally:
        servers.close()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phase", choices=(*PHASES, "all"), default="all")
    p.add_argument("--guilds", type=int, default=1000)
    p.add_argument("--channels", type=int, default=2, help="text channels per guild")
    p.add_argument("--shards", type=int, default=8)
    p.add_argument("--max-concurrency", type=int, default=2)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--capacity", type=int, default=4)
    p.add_argument("--triggers", type=int, default=2000)
    p.add_argument("--rate", type=int, default=40, help="triggers posted per second")
    p.add_argument(
        "--triggers-from",
        choices=("balanced", "ready"),
        default="balanced",
        help="start the triggers once the cluster is balanced, or as soon as every shard is"
        " ready (while processes still hand shards to each other)",
    )
    p.add_argument(
        "--trigger-restarts",
        type=int,
        default=0,
        help="while the triggers arrive, stop a random process cleanly this many times",
    )
    p.add_argument(
        "--trigger-restart-after", type=float, default=5.0, help="seconds until it starts again"
    )
    p.add_argument("--ceiling", type=float, default=0.25, help="global ceiling, USD")
    p.add_argument("--ceiling-triggers", type=int, default=200)
    p.add_argument("--changes", type=int, default=200, help="config changes, listener up")
    p.add_argument("--cut-changes", type=int, default=10, help="config changes, listener cut")
    p.add_argument("--trust-changes", type=int, default=20)
    p.add_argument("--probe-ms", type=float, default=20.0)
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--per-kill", type=int, default=6, help="triggers in flight per kill")
    p.add_argument("--restart-after", type=float, default=15.0, help="seconds")
    p.add_argument(
        "--detail", action="store_true", help="kill: what each takeover did, step by step"
    )
    p.add_argument("--cold-patience", type=float, default=60.0, help="seconds")
    p.add_argument("--burst", type=int, default=1000, help="triggers aimed at one shard")
    p.add_argument("--burst-shard", type=int, default=3)
    p.add_argument("--chatter", type=int, default=50_000)
    p.add_argument("--latency-triggers", type=int, default=300)
    p.add_argument(
        "--latency-spacing",
        type=float,
        default=0.1,
        help="seconds from one latency trigger to the next (its few requests stay well under"
        " Discord's global limit)",
    )
    p.add_argument("--start-patience", type=float, default=60.0, help="seconds for every shard")
    p.add_argument(
        "--settle", type=float, default=30.0, help="stop waiting for answers after N s without one"
    )
    p.add_argument("--seed", type=int, default=28)
    return p.parse_args(argv)


async def bench(args: argparse.Namespace, server: Server, root: Path) -> None:
    ctx = Context(args, server, root, random.Random(args.seed))
    for phase in PHASES if args.phase == "all" else (args.phase,):
        await RUNNERS[phase](ctx)


def main() -> int:
    args = parse()
    with postgres() as server, tempfile.TemporaryDirectory(prefix="picortex-cluster-") as tmp:
        trio.run(bench, args, server, Path(tmp))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
