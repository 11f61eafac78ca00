"""Benchmark of the context cache: 10,000 channels x 200 messages, context time, memory, and
the REST fetches of a burst of triggers inside one cooldown.

Usage (from the repository root): python scripts/bench_context.py [--channels N] [--triggers N]
"""

from __future__ import annotations

import argparse
import random
import resource
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import trio

# Runnable from a checkout without installing the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from picortex.actors.context_cache import LIVE_QUEUE, ContextCache
from picortex.core.context import assemble_context
from picortex.types import DISCORD_EPOCH_MS, Attachment, Message, User

# 2024-01-01T00:00:00Z in Discord's epoch, in milliseconds.
BASE_MS: Final = 1_704_067_200_000 - DISCORD_EPOCH_MS
WORDS: Final = (
    *("the", "bot", "cache", "channel", "message", "reply", "context", "trio", "actor"),
    *("discord", "fetch", "page", "snowflake", "model", "answer", "question", "later"),
    *("today", "maybe", "yes", "no", "thanks", "please", "look", "here", "there"),
)
AUTHORS: Final = tuple(
    User(id=10_000 + i, username=f"user{i}", global_name=f"User {i}" if i % 2 else None)
    for i in range(40)
)


class CountingHistory:
    """A REST stand-in: counts GET /channels/{id}/messages calls; the history is all cached."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls = 0
        self.delay = delay

    async def get_channel_messages(
        self,
        channel_id: int,
        /,
        *,
        after: int | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        self.calls += 1
        if self.delay:
            await trio.sleep(self.delay)
        return []


class CountingSink:
    """An EventSink that only counts."""

    def __init__(self) -> None:
        self.count = 0

    def emit(self, event: str, /, **fields: object) -> None:
        self.count += 1


class Ids:
    """Strictly increasing snowflakes, one millisecond apart, with Discord-style timestamps."""

    def __init__(self) -> None:
        self.n = 0
        self.second = -1
        self.prefix = ""

    def next(self) -> tuple[int, str]:
        self.n += 1
        ms = BASE_MS + self.n
        second, milli = divmod(ms + DISCORD_EPOCH_MS, 1000)
        if second != self.second:  # formatting a datetime per message would dominate the fill
            self.second = second
            self.prefix = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        return ms << 22, f"{self.prefix}.{milli:03d}000+00:00"


class Generator:
    """Plausible chat messages, cheap to make (texts come from a fixed pool)."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.ids = Ids()
        self.texts = [" ".join(rng.choices(WORDS, k=rng.randint(3, 20))) for _ in range(997)]
        self.n = 0

    def message(self, channel_id: int) -> Message:
        snowflake, stamp = self.ids.next()
        self.n += 1
        files: tuple[Attachment, ...] = ()
        if self.n % 20 == 0:
            files = (Attachment(id=snowflake + 1, filename="photo.png", size=1234),)
        return Message(
            id=snowflake,
            channel_id=channel_id,
            author=AUTHORS[self.n * 7 % len(AUTHORS)],
            content=self.texts[self.n % len(self.texts)],
            timestamp=stamp,
            guild_id=1,
            attachments=files,
        )


async def ask(actor: ContextCache, trigger: Message) -> None:
    await actor.context_for(trigger, max_messages=15, max_chars=4000)


def rss_mib() -> tuple[float, float]:
    """Resident and peak resident memory of this process, in MiB."""
    fields: dict[str, float] = {}
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) / 1024
    except OSError:
        pass
    peak = fields.get("VmHWM", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return fields.get("VmRSS", peak), peak


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(name: str, seconds: list[float]) -> None:
    ms = [s * 1000 for s in seconds]
    print(f"  {name:<34} median {statistics.median(ms):7.3f} ms   p99 {pct(ms, 0.99):7.3f} ms")


async def bench(args: argparse.Namespace, folder: Path) -> int:
    rng = random.Random(4)
    gen = Generator(rng)
    channels = [100_000 + c for c in range(args.channels)]
    cap = args.messages
    rest = CountingHistory()
    sink = CountingSink()

    def cache(max_bytes: int, history: CountingHistory) -> ContextCache:
        return ContextCache(
            folder,
            rest=history,
            messages_per_channel=cap,
            max_bytes=max_bytes,
            fetch_cooldown=5.0,
            events=sink,
        )

    max_bytes = args.max_mib * 1024 * 1024
    print(f"filling {args.channels} channels x {cap} messages through on_message ...")
    start = time.perf_counter()
    filler = cache(max_bytes, rest)
    per_batch = max(1, LIVE_QUEUE // cap)
    async with trio.open_nursery() as nursery:
        await nursery.start(filler.run)
        for i in range(0, len(channels), per_batch):
            for channel_id in channels[i : i + per_batch]:
                for _ in range(cap):
                    filler.on_message(gen.message(channel_id))
            await filler.flush()
        stats = filler.statistics()
        nursery.cancel_scope.cancel()
    fill_s = time.perf_counter() - start
    print(
        f"  {fill_s:.1f} s; {stats.channels_on_disk} files, "
        f"{stats.bytes_on_disk / 2**20:.1f} MiB on disk, {stats.loaded_channels} parsed in memory"
    )

    # A fresh actor over the full directory, as after a restart.
    rest = CountingHistory()
    actor = cache(max_bytes, rest)
    async with trio.open_nursery() as nursery:
        start = time.perf_counter()
        await nursery.start(actor.run)
        print(
            f"index of {args.channels} files loaded at start in {time.perf_counter() - start:.2f} s"
        )

        print(f"context per trigger ({args.triggers} triggers, 15 lines / 4000 chars):")
        cold: list[float] = []
        for channel_id in rng.sample(channels, args.triggers):
            trigger = gen.message(channel_id)
            t0 = time.perf_counter()
            lines = await actor.context_for(trigger, max_messages=15, max_chars=4000)
            cold.append(time.perf_counter() - t0)
            assert len(lines) == 15, lines
        report("context_for, channel not in memory", cold)
        warm: list[float] = []
        hot = channels[:20]
        for channel_id in hot:  # load them and spend their first fetch
            await actor.context_for(gen.message(channel_id), max_messages=15, max_chars=4000)
        for k in range(args.triggers):
            trigger = gen.message(hot[k % len(hot)])
            t0 = time.perf_counter()
            await actor.context_for(trigger, max_messages=15, max_chars=4000)
            warm.append(time.perf_counter() - t0)
        report("context_for, channel in memory", warm)
        history = actor.recent(hot[0], cap)
        pure: list[float] = []
        for _ in range(args.triggers):
            t0 = time.perf_counter()
            assemble_context(history, history[-1].id + 1, max_messages=15, max_chars=4000)
            pure.append(time.perf_counter() - t0)
        report("assemble_context alone (200 msgs)", pure)
        await actor.flush()
        nursery.cancel_scope.cancel()

    # A burst inside one cooldown: 1,000 triggers over 20 channels, REST answering in 50 ms.
    burst_channels = channels[-20:]
    rest = CountingHistory(delay=0.05)
    actor = cache(max_bytes, rest)
    triggers = [gen.message(burst_channels[k % 20]) for k in range(args.burst)]
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        start = time.perf_counter()
        async with trio.open_nursery() as burst:
            for trigger in triggers:
                burst.start_soon(ask, actor, trigger)
        burst_s = time.perf_counter() - start
        await actor.flush()
        nursery.cancel_scope.cancel()
    print(
        f"burst: {args.burst} triggers across {len(burst_channels)} channels in {burst_s:.2f} s -> "
        f"{rest.calls} REST fetches (expected {len(burst_channels)})"
    )
    resident, peak = rss_mib()
    print(f"memory: resident {resident:.0f} MiB, peak {peak:.0f} MiB")
    return 0 if rest.calls == len(burst_channels) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=200, help="messages per channel")
    parser.add_argument("--triggers", type=int, default=2_000)
    parser.add_argument("--burst", type=int, default=1_000)
    parser.add_argument("--max-mib", type=int, default=1024, help="cache size limit")
    parser.add_argument("--dir", type=Path, default=None, help="cache dir (default: a temp dir)")
    args = parser.parse_args()
    if args.dir is not None:
        return trio.run(bench, args, args.dir)
    with tempfile.TemporaryDirectory(prefix="bench-context-") as folder:
        return trio.run(bench, args, Path(folder))


if __name__ == "__main__":
    sys.exit(main())
