"""Benchmark: events through the action-log actor vs a bare `orjson.dumps` + `file.write` loop.

Usage: python scripts/bench_action_log.py [--events N] [--max-bytes B]

Both paths write the same realistic events, given as (event type, fields) the way actors
have them, to a temporary directory in the same run, and produce the same lines. The actor
path includes everything `emit` and the writer do: the `ts` clock read, serialization,
queueing, redaction of secrets, batched writes and rotation checks. The bare loop is
`file.write(orjson.dumps({"ts": ts, "event": name, **fields}))` on a buffered file, with one
fixed `ts` string. For reference it also prints the bare loop given ready-made dicts, which
leaves the line's dict out of the timing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import trio

from picortex.actors.action_log import ActionLog

# Producers yield to the scheduler this often, as real actors do between messages.
YIELD_EVERY = 100

CHAT = (
    "the deploy failed again on staging can someone look at the logs before lunch "
    "what does the wakeword do here i think the bot should answer only when mentioned "
    "please summarize the thread about the budget ceiling and the monthly period"
)


def realistic_events(count: int, seed: int = 7) -> list[tuple[str, dict[str, Any]]]:
    """A mix of the event types a busy bot writes, with snowflakes, text and numbers."""
    rng = random.Random(seed)
    words = CHAT.split()

    def snowflake() -> int:
        return rng.randrange(10**17, 10**19)

    def text() -> str:
        return " ".join(rng.choices(words, k=rng.randrange(4, 30)))

    events: list[tuple[str, dict[str, Any]]] = []
    for i in range(count):
        kind = i % 6
        if kind == 0:
            events.append(
                (
                    "trigger",
                    {
                        "channel_id": snowflake(),
                        "guild_id": snowflake(),
                        "message_id": snowflake(),
                        "author_id": snowflake(),
                        "author": "user" + str(rng.randrange(1000)),
                        "reason": rng.choice(["wakeword", "mention", "reply", "dm"]),
                        "content": text(),
                    },
                )
            )
        elif kind == 1:
            events.append(
                (
                    "decision",
                    {
                        "channel_id": snowflake(),
                        "message_id": snowflake(),
                        "decision": rng.choice(["respond", "ignore", "defer"]),
                        "reason": text(),
                        "mode": "mentions-only",
                    },
                )
            )
        elif kind == 2:
            events.append(
                (
                    "llm",
                    {
                        "model": "claude-sonnet-5-5",
                        "stage": "reply",
                        "input_tokens": rng.randrange(100, 8000),
                        "output_tokens": rng.randrange(10, 1000),
                        "cost_usd": rng.random() / 100,
                        "latency_ms": rng.randrange(200, 9000),
                        "outcome": "ok",
                        "workspace": str(snowflake()),
                    },
                )
            )
        elif kind == 3:
            events.append(
                (
                    "reply",
                    {
                        "channel_id": snowflake(),
                        "reply_to": snowflake(),
                        "message_ids": [snowflake(), snowflake()],
                        "chars": rng.randrange(10, 3900),
                        "persona": "default",
                    },
                )
            )
        elif kind == 4:
            events.append(
                (
                    "gateway",
                    {
                        "action": rng.choice(["heartbeat_ack", "dispatch", "resume"]),
                        "seq": i,
                        "latency_ms": rng.random() * 100,
                        "session_id": "a" * 32,
                    },
                )
            )
        else:
            events.append(
                (
                    "message-edit",
                    {
                        "channel_id": snowflake(),
                        "message_id": snowflake(),
                        "content": text(),
                        "edited_timestamp": "2025-06-01T12:00:00.000000+00:00",
                    },
                )
            )
    return events


def bench_bare(events: list[tuple[str, dict[str, Any]]], path: Path) -> float:
    """Events per second for orjson.dumps + file.write, one line at a time."""
    ts = "2025-06-01T12:00:00.000Z"
    option = orjson.OPT_APPEND_NEWLINE
    dumps = orjson.dumps
    start = time.perf_counter()
    with open(path, "wb") as f:
        for name, fields in events:
            f.write(dumps({"ts": ts, "event": name, **fields}, option=option))
    return len(events) / (time.perf_counter() - start)


def bench_bare_prebuilt(events: list[tuple[str, dict[str, Any]]], path: Path) -> float:
    """Like `bench_bare`, but the line dicts are built before the clock starts."""
    ts = "2025-06-01T12:00:00.000Z"
    records = [{"ts": ts, "event": name, **fields} for name, fields in events]
    option = orjson.OPT_APPEND_NEWLINE
    dumps = orjson.dumps
    start = time.perf_counter()
    with open(path, "wb") as f:
        for record in records:
            f.write(dumps(record, option=option))
    return len(records) / (time.perf_counter() - start)


def bench_actor(events: list[tuple[str, dict[str, Any]]], path: Path, max_bytes: int) -> float:
    """Events per second from the first `emit` until the last line is on disk."""
    log = ActionLog(path, max_bytes)

    async def main() -> float:
        async with trio.open_nursery() as nursery:
            await nursery.start(log.run)
            emit = log.emit
            start = time.perf_counter()
            for i, (name, fields) in enumerate(events):
                emit(name, **fields)
                if i % YIELD_EVERY == 0:
                    await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()
        # The final drain ran in the actor's `finally`: everything is written now.
        return len(events) / (time.perf_counter() - start)

    rate = trio.run(main)
    stats = log.statistics()
    if stats.dropped or stats.written != len(events):
        sys.exit(f"the actor wrote {stats.written} events and dropped {stats.dropped}")
    return rate


def count_lines(path: Path) -> int:
    """Lines in `path` and its rotated files."""
    files = [path, *path.parent.glob(path.name + ".*")]
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            total += sum(1 for _ in fh)
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds, each timing all paths back to back (default 5)",
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=1 << 30,
        help="rotation size for the actor (default 1 GiB: no rotation, so every line counts)",
    )
    args = parser.parse_args()
    events = realistic_events(args.events)
    bare_rates: list[float] = []
    prebuilt_rates: list[float] = []
    actor_rates: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        tmpdir = Path(tmp)
        for r in range(args.rounds):
            bare_rates.append(bench_bare(events, tmpdir / f"bare{r}.jsonl"))
            prebuilt_rates.append(bench_bare_prebuilt(events, tmpdir / f"bare{r}.jsonl"))
            actor_path = tmpdir / f"actor{r}" / "actions.jsonl"
            actor_rates.append(bench_actor(events, actor_path, args.max_bytes))
            if args.max_bytes >= 1 << 30 and count_lines(actor_path) != len(events):
                sys.exit("the actor's file does not hold every event")
            (tmpdir / f"bare{r}.jsonl").unlink()
            for f in actor_path.parent.iterdir():
                f.unlink()
    # On a busy machine the rates drift between rounds; the ratio within one round (paths
    # timed back to back) drifts less, so the median of those is the figure to quote.
    ratio = statistics.median(a / b for a, b in zip(actor_rates, bare_rates, strict=True))
    ref = statistics.median(a / b for a, b in zip(actor_rates, prebuilt_rates, strict=True))
    print(f"events:         {len(events):,} per round, {args.rounds} rounds (best shown)")
    print(f"bare loop:      {max(bare_rates):,.0f} events/s")
    print(f"actor path:     {max(actor_rates):,.0f} events/s")
    print(f"ratio:          {ratio:.0%} of the bare loop, median of rounds (target >= 40%)")
    print(f"reference:      bare loop on ready-made dicts {max(prebuilt_rates):,.0f} events/s;")
    print(f"                the actor path is {ref:.0%} of it (median of rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
