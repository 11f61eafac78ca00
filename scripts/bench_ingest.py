"""Benchmark of ingest: a chatter burst through `picortex run`, a discord.py bot and a bare reader.

The simulator runs in this process; each bot is its own process and they take turns in
rotating order every round, against the same stream:

  N MESSAGE_CREATE frames of about 1 KB across the channels: 90% from users not on the
  trust list, 9% from a trusted user without a mention, then the last 1% (10 by default)
  trusted mentions of the bot, one per channel.

The clock runs on the simulator from the first frame sent to the last answer received
(the POST replying to the last mention). Bots:

  picortex    `python -m picortex run` (the whole bot: store, router, channel actors, the
              action log, the context cache; answers through the simulator's instant model
              endpoint).
  discord.py  discord.Client with its defaults; `on_message` replies to a trusted mention.
  bare        trio-websocket, `get_message` and `orjson.loads` per frame, nothing else but
              one POST for each trusted mention (so its clock stops the same way).

It prints events/s for each, picortex's CPU time per message (from /proc), the ratios, and
the event loop's worst lag during the burst while another process runs `picortex config
set` and holds the database's write lock for a second. Then (unless --no-memory) one
`picortex run` takes a long chatter stream across many channels and we print how much its
RSS and the database grew. `--profile` runs picortex under cProfile and prints where its
time went.

Usage (from the repository root):
    python scripts/bench_ingest.py [--messages 20000] [--channels 50] [--rounds 5]
        [--memory-messages 200000] [--memory-channels 2000] [--no-memory] [--profile]
"""

from __future__ import annotations

import argparse
import io
import os
import pstats
import random
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import apsw
import attrs
import orjson
import trio
from bench_support import (
    PICORTEX_ARGV,
    ROOT,
    bench_simulator,
    bot_process,
    picortex_env,
    process_cpu,
    serving,
    turns,
    write_home,
)

from picortex.cli.status import query_status
from picortex.sim import Simulator
from picortex.sim.simulator import SimURLs
from picortex.sim.snowflake import iso_timestamp
from picortex.store import Store
from picortex.types import snowflake_ms

SCRIPT: Final = Path(__file__).resolve()
SIZE: Final = 1024
# The bare reader's trio-websocket queue of whole messages (its reader task fills it).
BARE_QUEUE: Final = 64
INTENT_GUILD_MESSAGES: Final = 1 << 9
INTENTS: Final = (1 << 0) | (1 << 9) | (1 << 15)  # GUILDS, GUILD_MESSAGES, MESSAGE_CONTENT
# Route groups whose per-channel limits would pace the answers rather than the bots.
RELAXED_BUCKETS: Final = ("messages.post", "typing", "messages.get", "users/@me/channels")
START_SECONDS: Final = 60.0
DRAIN_SECONDS: Final = 300.0
# Frames each bot takes before its measured burst: imports, caches and the interpreter's
# specializations are warm, as in a bot that has been running a while.
WARMUP: Final = 2_000
CLIENTS: Final = ("picortex", "discord.py", "bare")
TARGET_VS_DISCORDPY: Final = 1.0
AIM_VS_DISCORDPY: Final = 1.5
TARGET_VS_BARE: Final = 0.6
LAG_TARGET_MS: Final = 100.0
RSS_TARGET_MIB: Final = 100.0
# The memory phase sends its stream in chunks, so the simulator never holds it all at once.
MEMORY_CHUNK: Final = 20_000
LOCK_HOLD_SECONDS: Final = 1.0
QUIET_SECONDS: Final = 12.0
TEXT: Final = (
    "the quick brown fox jumps over a lazy dog while people in the channel talk about their "
    "weekend plans the weather a new game release dinner recipes and music they like"
)


# ----- the stream ----------------------------------------------------------------------------


@attrs.define
class World:
    """Who talks where in the simulator."""

    sim: Simulator
    guild: int
    channels: list[int]
    owner: int  # trusted: mentions
    regular: int  # on the trust list: chatter without a mention
    strangers: list[int]  # not on the trust list


def make_world(sim: Simulator, channels: int) -> World:
    owner = sim.add_user("owner", global_name="Owner")
    regular = sim.add_user("regular", global_name="Regular")
    strangers = [sim.add_user(f"stranger{n}", global_name=f"Stranger {n}") for n in range(20)]
    guild = sim.add_guild("bench", owner_id=owner)
    ids = [sim.add_channel(guild, f"bench-{n}") for n in range(channels)]
    return World(sim, guild, ids, owner, regular, strangers)


def chatter_frames(
    world: World, count: int, channels: list[int], trusted_share: float
) -> list[bytes]:
    """`count` MESSAGE_CREATE bodies of about SIZE bytes, none mentioning the bot."""
    sim = world.sim
    rng = random.Random(count)
    authors = {
        uid: (sim.world.user_payload(uid), sim.world.member_payload(uid, with_user=False))
        for uid in (world.regular, *world.strangers)
    }
    words = TEXT.split()
    text = " ".join(rng.choice(words) for _ in range(400))
    bodies: list[bytes] = []
    for index, message_id in enumerate(sim.world.snowflakes.many(count)):
        trusted = rng.random() < trusted_share
        author = world.regular if trusted else world.strangers[index % len(world.strangers)]
        user, member = authors[author]
        start = rng.randrange(len(text) - SIZE)
        body = {
            "type": 0,
            "tts": False,
            "timestamp": iso_timestamp(snowflake_ms(message_id)),
            "pinned": False,
            "mentions": [],
            "mention_roles": [],
            "mention_everyone": False,
            "member": member,
            "id": str(message_id),
            "flags": 0,
            "embeds": [],
            "edited_timestamp": None,
            "content": "",
            "components": [],
            "channel_id": str(channels[index % len(channels)]),
            "author": user,
            "attachments": [],
            "guild_id": str(world.guild),
            "nonce": str(message_id),
        }
        room = SIZE - len(orjson.dumps(body))
        body["content"] = text[start : start + max(room, 16)].strip()
        bodies.append(orjson.dumps(body))
    return bodies


async def burst(
    world: World, chatter: list[bytes], mentions: int
) -> tuple[float, float, list[str]]:
    """Send the chatter frames, then `mentions` trusted mentions.

    Returns the time of the first frame, the time the mentions went out, and their ids.
    """
    sim = world.sim
    t0 = trio.current_time()
    await sim.gateway.blast(chatter, guild_id=world.guild, intent=INTENT_GUILD_MESSAGES)
    ids = []
    for n in range(mentions):
        channel = world.channels[n % len(world.channels)]
        msg = sim.post_user_message(channel, world.owner, f"<@{sim.bot_user_id}> ping {n}?")
        ids.append(str(msg["id"]))
    return t0, trio.current_time(), ids


async def answered_at(sim: Simulator, since: int, ids: list[str]) -> float | None:
    """When the last of `ids` got its reply (simulator clock), or None after DRAIN_SECONDS."""
    wanted = set(ids)
    found: dict[str, float] = {}
    scanned = [since]

    def done() -> bool:
        requests = sim.requests
        for request in requests[scanned[0] :]:
            body = request.json
            if request.method == "POST" and isinstance(body, dict):
                ref = str((body.get("message_reference") or {}).get("message_id"))
                if ref in wanted:  # discord.py sends the id as a number, others as text
                    found.setdefault(ref, request.at)
        scanned[0] = len(requests)
        return len(found) >= len(wanted)

    with trio.move_on_after(DRAIN_SECONDS):
        await sim.wait_until(done)
        return max(found.values())
    return None


# ----- the bots ------------------------------------------------------------------------------


def run_discordpy(api_base: str, gateway_url: str, token: str, trusted: set[int]) -> None:
    """A discord.py bot: on_message replies to a trusted author's mention."""
    import logging

    import discord
    import yarl
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

    logging.getLogger("discord").setLevel(logging.ERROR)
    # The simulator stands in for https://discord.com/api/v10 and wss://gateway.discord.gg.
    Route.BASE = api_base
    DiscordWebSocket.DEFAULT_GATEWAY = yarl.URL(gateway_url + "/")
    intents = discord.Intents.default()
    intents.message_content = True
    client = discord.Client(intents=intents)

    @client.event
    async def on_message(message: discord.Message) -> None:
        me = client.user
        if me is None or message.author.id not in trusted or me not in message.mentions:
            return
        await message.reply("pong", mention_author=False)

    client.run(token, log_handler=None)


def run_bare(api_base: str, gateway_url: str, token: str, trusted: set[int]) -> None:
    """The floor: trio-websocket receive and orjson.loads per frame; a POST per mention."""
    import httpx
    from trio_websocket import open_websocket_url

    from picortex.discord import gateway as ours

    async def main() -> None:
        headers = {"Authorization": f"Bot {token}"}
        async with (
            httpx.AsyncClient(base_url=api_base, headers=headers) as http,
            open_websocket_url(
                gateway_url + "/?v=10&encoding=json",
                message_queue_size=BARE_QUEUE,
                receive_buffer_size=ours.RECEIVE_BYTES,
                max_message_size=ours.MAX_MESSAGE_BYTES,
            ) as ws,
            trio.open_nursery() as nursery,
        ):
            interval = orjson.loads(await ws.get_message())["d"]["heartbeat_interval"] / 1000
            seq: list[int | None] = [None]

            async def heartbeat() -> None:
                while True:
                    await trio.sleep(interval)
                    await ws.send_message(orjson.dumps({"op": 1, "d": seq[0]}).decode())

            identify = {
                "op": 2,
                "d": {
                    "token": token,
                    "intents": INTENTS,
                    "properties": {"os": "linux", "browser": "bare", "device": "bare"},
                },
            }
            await ws.send_message(orjson.dumps(identify).decode())
            nursery.start_soon(heartbeat)
            me = ""
            while True:
                frame = orjson.loads(await ws.get_message())
                if frame.get("s") is not None:
                    seq[0] = frame["s"]
                kind = frame.get("t")
                if kind == "READY":
                    me = frame["d"]["user"]["id"]
                elif kind == "MESSAGE_CREATE":
                    data = frame["d"]
                    if int(data["author"]["id"]) in trusted and any(
                        m["id"] == me for m in data["mentions"]
                    ):
                        await http.post(
                            f"/channels/{data['channel_id']}/messages",
                            json={
                                "content": "pong",
                                "message_reference": {"message_id": data["id"]},
                                "allowed_mentions": {"parse": []},
                            },
                        )

    trio.run(main)


def process_rss_mib(pid: int) -> float:
    """A process's resident set size in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def db_bytes(home: Path) -> int:
    """The database's size on disk, its write-ahead log included."""
    return sum(
        p.stat().st_size for p in (home / "picortex.db", home / "picortex.db-wal") if p.exists()
    )


# Tables a message could be written to: memory recall and seen ids.
MESSAGE_TABLES: Final = ("memory_messages", "seen_events")


def db_settled(home: Path) -> tuple[int, dict[str, int]]:
    """The database file's size once every commit is in it, and its message rows.

    The bot saves its gateway session (for a RESUME) every second of traffic, which appends
    to the write-ahead log until SQLite's checkpoint moves it into the file; a checkpoint
    here (any connection may run one) shows what the file itself holds.
    """
    conn = apsw.Connection(str(home / "picortex.db"))
    conn.set_busy_timeout(10_000)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = {t: int(conn.execute(f"SELECT count(*) FROM {t}").get) for t in MESSAGE_TABLES}
    finally:
        conn.close()
    return (home / "picortex.db").stat().st_size, rows


@attrs.define
class Bot:
    """A bot process of one kind."""

    name: str
    proc: trio.Process
    home: Path | None = None


def new_home(parent: Path, name: str, regular: int) -> Path:
    home = parent / name
    home.mkdir()
    write_home(home)
    store = Store.open(home / "picortex.db")
    try:
        store.set_tier(regular, "trusted")
    finally:
        store.close()
    return home


@asynccontextmanager
async def start_bot(
    name: str, world: World, urls: SimURLs, tmp: Path, profile: Path | None = None
) -> AsyncIterator[Bot]:
    """Start one bot process; yield once its gateway session is ready."""
    sim = world.sim
    trusted = ",".join(str(u) for u in (world.owner, world.regular))
    env = {"PYTHONPATH": str(ROOT)}
    home: Path | None = None
    if name == "picortex":
        home = new_home(tmp, f"home-{time.monotonic_ns()}", world.regular)
        env.update(picortex_env(home, sim, urls, world.owner))
        argv = list(PICORTEX_ARGV)
        if profile is not None:
            argv = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "picortex", "run"]
    else:
        argv = [sys.executable, str(SCRIPT), f"--{name}-bot", urls.api_base, urls.gateway_url]
        argv += [sim.token, trusted]

    async def tree_up() -> None:
        if home is not None:  # the control socket answers once the tree is up
            await wait_for_status(home)

    async with bot_process(sim, argv, env, start_seconds=START_SECONDS, started=tree_up) as proc:
        yield Bot(name, proc, home)


async def wait_for_status(home: Path) -> None:
    """Until the bot's control socket answers (its tree is up)."""
    answered = None
    while answered is None:
        answered = await trio.to_thread.run_sync(query_status, home, 1.0)
        await trio.sleep(0.05)


async def run_quietly(argv: list[str], env: dict[str, str]) -> None:
    await trio.run_process(argv, env=env, capture_stdout=True, capture_stderr=True, check=False)


# ----- measuring -----------------------------------------------------------------------------


@attrs.frozen
class Result:
    name: str
    events: int
    seconds: float | None
    cpu: float | None
    lag_ms: float | None
    tail: float | None  # from the mentions going out to the last answer

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0


def hold_write_lock(path: Path, seconds: float) -> None:
    """Another process's slow writer: BEGIN IMMEDIATE, wait, COMMIT (runs in a thread)."""
    conn = apsw.Connection(str(path))
    conn.set_busy_timeout(10_000)
    try:
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


async def measure(bot: Bot, world: World, args: argparse.Namespace) -> Result:
    sim = world.sim
    # Warm-up: a small burst and one mention, answered before the clock starts.
    warm = chatter_frames(world, WARMUP, world.channels, 0.09)
    since = len(sim.requests)
    _, _, ids = await burst(world, warm, 1)
    await answered_at(sim, since, ids)
    frames = chatter_frames(world, args.messages - args.mentions, world.channels, 0.09)
    lag: float | None = None
    pid = bot.proc.pid
    if bot.home is not None:
        await trio.to_thread.run_sync(query_status, bot.home, 5.0)  # resets the worst lag
    cpu0 = process_cpu(pid)
    since = len(sim.requests)
    async with trio.open_nursery() as nursery:
        if bot.home is not None and not args.no_contention:
            # Meanwhile, another process changes the config and holds the database a while.
            home = bot.home
            cli = [sys.executable, "-m", "picortex", "config", "set", "poll_seconds", "120"]
            env = dict(os.environ, PICORTEX_HOME=str(home), PYTHONPATH=str(ROOT))
            nursery.start_soon(run_quietly, cli, env)
            nursery.start_soon(
                trio.to_thread.run_sync, hold_write_lock, home / "picortex.db", LOCK_HOLD_SECONDS
            )
        t0, mentioned, ids = await burst(world, frames, args.mentions)
        end = await answered_at(sim, since, ids)
    cpu1 = process_cpu(pid)
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    if bot.home is not None:
        status = await trio.to_thread.run_sync(query_status, bot.home, 5.0)
        if status is not None:
            lag = float(status["loop_lag_ms"]["since_last_status"])
    seconds, tail = (None, None) if end is None else (end - t0, end - mentioned)
    return Result(bot.name, args.messages, seconds, cpu, lag, tail)


async def memory_check(world: World, urls: SimURLs, tmp: Path, args: argparse.Namespace) -> None:
    sim = world.sim
    channels = world.channels[: args.memory_channels]
    print(
        f"\nmemory: {args.memory_messages:,} untrusted chatter messages across "
        f"{len(channels):,} channels into one `picortex run`",
        flush=True,
    )
    async with start_bot("picortex", world, urls, tmp) as bot:
        assert bot.home is not None
        await trio.sleep(2.0)  # start-up writes (pruning) done
        rss0, db0 = process_rss_mib(bot.proc.pid), db_bytes(bot.home)
        file0, rows0 = db_settled(bot.home)
        await trio.to_thread.run_sync(query_status, bot.home, 5.0)  # resets the worst lag
        lag = 0.0
        t0 = trio.current_time()
        sent = 0
        while sent < args.memory_messages:
            n = min(MEMORY_CHUNK, args.memory_messages - sent)
            frames = chatter_frames(world, n, channels, 0.0)
            await sim.gateway.blast(frames, guild_id=world.guild, intent=INTENT_GUILD_MESSAGES)
            sent += n
        status: dict[str, Any] | None = None
        with trio.move_on_after(DRAIN_SECONDS):
            while True:
                status = await trio.to_thread.run_sync(query_status, bot.home, 5.0)
                if status is not None:
                    lag = max(lag, float(status["loop_lag_ms"]["since_last_status"]))
                    if status["ingest"]["chatter"] >= sent:
                        break
                await trio.sleep(0.5)
        took = trio.current_time() - t0
        # The channels go quiet: a group commit, and the context cache's delayed writes
        # (after which it keeps only its most recent channels in memory), are done by now.
        await trio.sleep(QUIET_SECONDS)
        rss1, db1 = process_rss_mib(bot.proc.pid), db_bytes(bot.home)
        file1, rows1 = db_settled(bot.home)
        ingest = status["ingest"] if status else {}
        grew = rss1 - rss0
        verdict = "ok" if grew <= RSS_TARGET_MIB else "ABOVE TARGET"
        print(
            f"  chatter counted {ingest.get('chatter', 0):,} of {sent:,} in {took:.1f} s "
            f"({sent / took:,.0f}/s, sending included); worst event-loop lag {lag:.1f} ms"
        )
        print(f"  RSS {rss0:.1f} -> {rss1:.1f} MiB (+{grew:.1f} MiB; target <= 100: {verdict})")
        print(
            f"  database file after a checkpoint {file0:,} -> {file1:,} bytes "
            f"(+{file1 - file0:,}; target 0: {'ok' if file1 == file0 else 'NOT 0'}); rows "
            + ", ".join(f"{t} {rows0[t]:,} -> {rows1[t]:,}" for t in MESSAGE_TABLES)
        )
        print(f"  (with the write-ahead log before the checkpoint: {db0:,} -> {db1:,} bytes)")
        print(f"  channel mailboxes held: {ingest.get('mailboxes', '?')}")


def profile_report(path: Path) -> None:
    if not path.exists():
        print("(no profile written)")
        return
    out = io.StringIO()
    pstats.Stats(str(path), stream=out).sort_stats("tottime").print_stats(25)
    print(out.getvalue())


async def bench(args: argparse.Namespace) -> int:
    sim = bench_simulator(RELAXED_BUCKETS)
    full = make_world(sim, max(args.channels, 0 if args.no_memory else args.memory_channels))
    world = attrs.evolve(full, channels=full.channels[: args.channels])
    print(__doc__.split("\n\n")[1])
    print(
        f"\n{args.messages:,} messages of ~{SIZE} B across {args.channels} channels "
        f"({args.mentions} trusted mentions last), {args.rounds} rounds, +{WARMUP:,} warm-up "
        "frames per bot\n",
        flush=True,
    )
    started = time.perf_counter()
    results: dict[str, list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="picortex-ingest-") as tmp_name:
        tmp = Path(tmp_name)
        async with serving(sim) as urls:
            for run, order in turns(args.clients, args.rounds, rotate=True):
                for name in order:
                    profile = tmp / "picortex.prof" if args.profile and name == "picortex" else None
                    async with start_bot(name, world, urls, tmp, profile) as bot:
                        result = await measure(bot, world, args)
                    results.setdefault(name, []).append(result)
                    line = f"round {run + 1} {name:10s} "
                    if result.seconds is None:
                        line += "did not answer every mention in time"
                    else:
                        line += f"{result.rate:>9,.0f} events/s ({result.seconds:.2f} s"
                        if result.tail is not None:
                            line += f", last answers {result.tail * 1000:.0f} ms after the mentions"
                        line += ")"
                    if name == "picortex" and result.cpu is not None:
                        line += f", CPU {result.cpu / result.events * 1e6:.0f} us/message"
                    if result.lag_ms is not None:
                        line += f", worst event-loop lag {result.lag_ms:.1f} ms"
                    print(line, flush=True)
                    if profile is not None:
                        profile_report(profile)
                        keep = os.environ.get("BENCH_PROFILE_KEEP")
                        if keep:
                            profile.replace(keep)
                        profile.unlink(missing_ok=True)
                print_ratios(results, run)
            print_lag(results.get("picortex", []), contended=not args.no_contention)
            if not args.no_memory:
                await memory_check(full, urls, tmp, args)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


def print_lag(rows: list[Result], *, contended: bool) -> None:
    """The event loop's worst lag in each picortex burst, and the worst of all."""
    lags = [r.lag_ms for r in rows if r.lag_ms is not None]
    if not lags:
        return
    during = (
        "while another process ran `picortex config set` and held the write lock "
        f"{LOCK_HOLD_SECONDS:.0f} s"
        if contended
        else "without another process"
    )
    worst = max(lags)
    verdict = "ok" if worst <= LAG_TARGET_MS else "ABOVE TARGET"
    print(
        f"\nworst event-loop lag during the bursts ({during}): "
        + ", ".join(f"{lag:.1f}" for lag in lags)
        + f" ms; worst {worst:.1f} ms (target <= {LAG_TARGET_MS:.0f}: {verdict})",
        flush=True,
    )


def print_ratios(results: dict[str, list[Result]], run: int) -> None:
    latest = {name: rows[-1] for name, rows in results.items() if rows}
    ours = latest.get("picortex")
    if ours is None or not ours.rate:
        return
    parts = []
    for other in ("discord.py", "bare"):
        theirs = latest.get(other)
        if theirs is not None and theirs.rate:
            parts.append(f"picortex / {other} = {ours.rate / theirs.rate:.2f}")
    lag = "" if ours.lag_ms is None else f"; lag {ours.lag_ms:.1f} ms"
    print(f"round {run + 1} ratios: " + ", ".join(parts) + lag, flush=True)
    if len(results.get("picortex", ())) < 2:
        return
    medians = {n: statistics.median(r.rate for r in rows) for n, rows in results.items()}
    summary = []
    for other, target in (("discord.py", TARGET_VS_DISCORDPY), ("bare", TARGET_VS_BARE)):
        if medians.get(other):
            ratio = medians["picortex"] / medians[other]
            summary.append(
                f"{other} {ratio:.2f} (target >= {target}: {'ok' if ratio >= target else 'BELOW'})"
            )
    print("  medians so far: picortex / " + ", ".join(summary), flush=True)


def main() -> int:
    for flag, runner in (("--discord.py-bot", run_discordpy), ("--bare-bot", run_bare)):
        if len(sys.argv) == 6 and sys.argv[1] == flag:
            api_base, gateway_url, token, trusted = sys.argv[2:]
            runner(api_base, gateway_url, token, {int(t) for t in trusted.split(",")})
            return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--channels", type=int, default=50)
    parser.add_argument("--mentions", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory-messages", type=int, default=200_000)
    parser.add_argument("--memory-channels", type=int, default=2_000)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory check")
    parser.add_argument(
        "--no-contention",
        action="store_true",
        help="no `picortex config set` and no held write lock during picortex's bursts",
    )
    parser.add_argument(
        "--clients",
        type=lambda text: text.split(","),
        default=list(CLIENTS),
        help="comma-separated, of: " + ", ".join(CLIENTS),
    )
    parser.add_argument("--profile", action="store_true", help="cProfile picortex's rounds")
    return trio.run(bench, parser.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
