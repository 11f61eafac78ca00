"""Soak: steady mixed traffic through `picortex run` for an hour; what it leaves on disk.

Usage: python scripts/bench_soak.py [--seconds 3600] [--rate 5] [--channels 10]

The simulator runs in this process, the bot in its own, with every group chat in
`discriminate` mode. Each second `--rate` messages arrive across the channels: most from
users not on the trust list (chatter), a quarter from the owner (each one classified:
a model call and a read of the chat's discriminator prompt; a question is answered, which
adds a ledger row and stored memory), a few edited or deleted again. Every minute a thread
is started, talked in and deleted. Then the bot stops and the script prints the database's
size (with its WAL), its rows per table, the chat homes left on disk, and the same per
hour of traffic, which is what longer runs extrapolate from.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path
from typing import Final

import apsw
import trio
from bench_support import (
    PICORTEX_ARGV,
    ROOT,
    bench_simulator,
    bot_process,
    picortex_env,
    serving,
)

from picortex.cli.status import query_status
from picortex.sim import Simulator
from picortex.store import Store

RELAXED_BUCKETS: Final = ("messages.post", "typing", "messages.get")
START_SECONDS: Final = 60.0
DRAIN_SECONDS: Final = 10.0
THREAD_EVERY_SECONDS: Final = 60.0
TRUSTED_SHARE: Final = 0.25
EDIT_SHARE: Final = 0.03
DELETE_SHARE: Final = 0.02
TABLES: Final = (
    "budget_ledger",
    "invocation_errors",
    "memory_messages",
    "memory_observations",
    "seen_events",
    "channel_activity",
    "chat_config",
    "runtime_config",
)
WORDS: Final = "the release moved to friday and the build is green again after lunch".split()  # noqa: SIM905


def write_soak_home(home: Path) -> int:
    """A home whose group chats are classified; the size of its empty database."""
    home.mkdir()
    (home / "picortex.toml").write_text(
        'continuation_seconds = 0\n\n[attention]\ngroup = "discriminate"\n'
    )
    Store.open(home / "picortex.db").close()
    return (home / "picortex.db").stat().st_size


def sentence(rng: random.Random, question: bool) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(rng.randrange(6, 30)))
    return text + ("?" if question else ".")


async def traffic(sim: Simulator, args: argparse.Namespace, counts: dict[str, int]) -> None:
    """`--rate` messages a second for `--seconds`, a thread born and deleted every minute."""
    rng = random.Random(7)
    trusted = counts["owner"]
    strangers = [sim.add_user(f"stranger{n}") for n in range(20)]
    guild = sim.add_guild("soak", owner_id=trusted)
    channels = [sim.add_channel(guild, f"soak-{n}") for n in range(args.channels)]
    recent: list[tuple[int, int]] = []
    start = trio.current_time()
    next_thread = start + THREAD_EVERY_SECONDS
    tick = 1.0 / args.rate
    deadline = start + args.seconds
    while trio.current_time() < deadline:
        channel = rng.choice(channels)
        if trio.current_time() >= next_thread:
            next_thread += THREAD_EVERY_SECONDS
            thread = sim.add_thread(channel, "side", owner_id=trusted)
            for _ in range(3):
                sim.post_user_message(thread, trusted, sentence(rng, True))
            await trio.sleep(1.0)
            sim.delete_channel(thread)
            counts["threads"] += 1
        roll = rng.random()
        if roll < EDIT_SHARE and recent:
            channel_id, message_id = rng.choice(recent)
            sim.edit_message(channel_id, message_id, sentence(rng, False))
            counts["edits"] += 1
        elif roll < EDIT_SHARE + DELETE_SHARE and recent:
            channel_id, message_id = recent.pop(rng.randrange(len(recent)))
            sim.delete_message(channel_id, message_id)
            counts["deletes"] += 1
        elif roll < EDIT_SHARE + DELETE_SHARE + TRUSTED_SHARE:
            posted = sim.post_user_message(channel, trusted, sentence(rng, rng.random() < 0.5))
            recent.append((channel, int(posted["id"])))
            counts["trusted"] += 1
        else:
            sim.post_user_message(channel, rng.choice(strangers), sentence(rng, False))
            counts["chatter"] += 1
        del recent[:-200]
        await trio.sleep(tick)


def database_report(home: Path, hours: float, empty: int) -> None:
    """Sizes and rows after `hours` of traffic; growth beyond the empty database's size."""
    files = [home / name for name in ("picortex.db", "picortex.db-wal", "picortex.db-shm")]
    sizes = {f.name: f.stat().st_size if f.exists() else 0 for f in files}
    total = sum(sizes.values())
    conn = apsw.Connection(str(home / "picortex.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        rows = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}  # type: ignore[index]
        # Bytes per table with its indexes and its full-text index (needs SQLite's dbstat).
        owners = dict(conn.execute("SELECT name, tbl_name FROM sqlite_schema").fetchall())
        space: dict[str, int] = {}
        for name, size in conn.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name"):
            table = str(owners.get(name, name)).split("_fts")[0]
            space[table] = space.get(table, 0) + int(size)
        page = int(conn.execute("PRAGMA page_size").fetchone()[0])  # type: ignore[index]
        pages = int(conn.execute("PRAGMA page_count").fetchone()[0])  # type: ignore[index]
    finally:
        conn.close()
    chats = home / "chats"
    homes = [p for p in chats.iterdir()] if chats.exists() else []
    home_bytes = sum(f.stat().st_size for f in chats.rglob("*") if f.is_file()) if homes else 0
    print(f"\ndatabase after {hours * 60:.1f} min of traffic, {DRAIN_SECONDS:.0f} s to drain:")
    print(
        f"  {total / 1024:,.0f} KiB on disk ("
        + ", ".join(f"{k} {v:,}" for k, v in sizes.items())
        + ")"
    )
    print(f"  {page * pages / 1024:,.0f} KiB of pages in the main file")
    for table, count in rows.items():
        kib = space.get(table, 0) / 1024
        print(f"  {table:20s} {count:>9,} rows  ({count / hours:>7,.0f} per hour) {kib:>7,.0f} KiB")
    print(f"  chat homes left: {len(homes)} ({home_bytes / 1024:,.0f} KiB)")
    grown = (total - empty) / hours / 1024
    print(f"  growth: {grown:,.0f} KiB per hour of this traffic (empty: {empty / 1024:,.0f} KiB)")


async def soak(args: argparse.Namespace) -> int:
    sim = bench_simulator(RELAXED_BUCKETS)
    with tempfile.TemporaryDirectory(prefix="picortex-soak-") as tmp_name:
        home = Path(tmp_name) / "home"
        owner = sim.add_user("owner")
        empty = write_soak_home(home)
        counts = dict.fromkeys(("chatter", "trusted", "edits", "deletes", "threads"), 0)
        counts["owner"] = owner
        async with serving(sim) as urls:
            env = {"PYTHONPATH": str(ROOT), **picortex_env(home, sim, urls, owner)}

            async def tree_up() -> None:  # the control socket answers once the tree is up
                answered = None
                while answered is None:
                    answered = await trio.to_thread.run_sync(query_status, home, 1.0)
                    await trio.sleep(0.05)

            async with bot_process(
                sim, PICORTEX_ARGV, env, start_seconds=START_SECONDS, started=tree_up
            ):
                await traffic(sim, args, counts)
                await trio.sleep(DRAIN_SECONDS)
        del counts["owner"]
        print(", ".join(f"{v:,} {k}" for k, v in counts.items()))
        print(f"model calls: {len(sim.model.calls):,}")
        database_report(home, args.seconds / 3600, empty)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3600.0)
    parser.add_argument("--rate", type=float, default=5.0, help="messages per second")
    parser.add_argument("--channels", type=int, default=10)
    args = parser.parse_args()
    print(__doc__.split("\n\n")[2].replace("\n", " "), flush=True)
    return trio.run(soak, args)


if __name__ == "__main__":
    sys.exit(main())
