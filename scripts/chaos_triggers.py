"""Measure: are triggers answered exactly once through kills and disconnects?

Usage:
    python scripts/chaos_triggers.py sigkill [--cycles 20] [--per-cycle 3]
    python scripts/chaos_triggers.py disconnect [--cycles 20] [--per-cycle 3]

`sigkill` runs `picortex run` as a real process against the built-in simulator; each cycle
sends triggers whose answers take a moment (the model endpoint is slowed), SIGKILLs the bot
while some are still being answered, and starts it again on the same home. `disconnect` runs
the bot in this process and, each cycle, either drops the connection (a RESUME follows) or
invalidates the session (op 9 d=false: a fresh IDENTIFY, which Discord replays nothing to),
posting triggers while the bot is away. Both run with the default continuation window. At
the end every trigger should have exactly one answer: a bot message replying to it, or, for a
follow-up merged into an earlier trigger's request, that request's one reply, when the
follow-up was sent inside the window by Discord's clock (SPEC 5.4). The script prints
answered-once, lost and doubled.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import attrs
import orjson
import trio

from picortex.app import Bot
from picortex.config import load_settings
from picortex.discord.protocol import GatewayTimings
from picortex.sim import DefaultWorld, Simulator
from picortex.sim.model import ModelReply
from picortex.sim.simulator import SimURLs
from picortex.types import snowflake_seconds

RELAXED_BUCKETS = ("messages.post", "typing", "users/@me/channels", "reactions.me")
SETTLE_TIMEOUT = 120.0
# The action log is written apart from the simulator's changes: look again this often.
SETTLE_POLL = 0.5


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


def joined_requests(action_log: Path) -> dict[str, str]:
    """The follow-ups merged into a request being answered: message id -> the request's
    trigger id, by the action log's last word on each message (a restarted process that
    takes it as a trigger of its own undoes an earlier merge)."""
    joined: dict[str, str] = {}
    if not action_log.exists():
        return joined
    for line in action_log.read_bytes().splitlines():
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # the last line, torn by a kill
        if row.get("event") == "trigger":
            joined.pop(str(row.get("message_id")), None)
        elif row.get("event") == "continuation" and row.get("restart"):
            joined[str(row["message_id"])] = str(row["parent_id"])
    return joined


def tally(
    replies: Sequence[Mapping[str, Any]],
    sent: Sequence[Mapping[str, Any]],
    joined: Mapping[str, str] | None = None,
    window: float = 0.0,
) -> tuple[int, int, int]:
    """(answered exactly once, never answered, answered more than once) of the triggers `sent`.

    A trigger is answered by the bot's `replies` to it, or, merged into an earlier trigger's
    request (`joined`), by that request's replies posted after it was sent (an older one
    cannot have read it), only when it was sent within `window` seconds after the request's
    message before it, same author and channel, by Discord's clock (the snowflakes' times):
    a merge the window does not allow answers nothing.
    """
    joined = joined or {}
    answers: dict[str, list[int]] = {}
    for reply in replies:
        target = (reply.get("message_reference") or {}).get("message_id")
        answers.setdefault(str(target), []).append(int(reply["id"]))
    by_id = {str(m["id"]): m for m in sent}
    counts = []
    for message in sent:
        message_id = str(message["id"])
        parent = joined.get(message_id)
        count = len(answers.get(message_id, []))
        if parent is not None and _inside_window(message_id, parent, joined, by_id, window):
            count += sum(1 for at in answers.get(parent, []) if at > int(message_id))
        counts.append(count)
    return counts.count(1), counts.count(0), sum(1 for c in counts if c > 1)


def _inside_window(
    message_id: str,
    parent: str,
    joined: Mapping[str, str],
    by_id: Mapping[str, Mapping[str, Any]],
    window: float,
) -> bool:
    """Whether `message_id` was sent within `window` s after the message before it in the
    request of trigger `parent`, by the same author in the same channel."""
    message, trigger = by_id.get(message_id), by_id.get(parent)
    if message is None or trigger is None:
        return False
    if (message["author"]["id"], message["channel_id"]) != (
        trigger["author"]["id"],
        trigger["channel_id"],
    ):
        return False
    sent_at = snowflake_seconds(int(message_id))
    request = [parent, *(m for m, p in joined.items() if p == parent and m != message_id)]
    before = [t for t in (snowflake_seconds(int(m)) for m in request) if t <= sent_at]
    return bool(before) and sent_at - max(before) <= window


def _world(seed: int) -> tuple[Simulator, DefaultWorld, random.Random]:
    sim = Simulator(heartbeat_interval_ms=5000)
    for bucket in RELAXED_BUCKETS:
        sim.set_rate_limit(bucket, 1000, 1.0)
    return sim, sim.add_default_world(), random.Random(seed)


async def settle(
    sim: Simulator, count: Callable[[], tuple[int, int, int]], timeout: float = SETTLE_TIMEOUT
) -> None:
    """Wait (`timeout` seconds at most) until `count` says no trigger is left unanswered."""
    with trio.move_on_after(timeout):
        while count()[1]:
            with trio.move_on_after(SETTLE_POLL):
                await sim.changed()


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
        async with trio.open_nursery() as nursery:
            urls: SimURLs = await nursery.start(sim.serve)
            env = _env(home, sim, urls, w.alice_id)
            settings = load_settings(env)

            def count() -> tuple[int, int, int]:
                joined = joined_requests(settings.action_log_path)
                return tally(sim.bot_messages(), sent, joined, settings.continuation_seconds)

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
                    await settle(sim, count)  # the last run only answers what is left
                    if os.environ.get("CHAOS_KEEP"):
                        import shutil

                        keep = os.environ["CHAOS_KEEP"]
                        ignore = shutil.ignore_patterns("*.sock")  # the control socket
                        shutil.copytree(home, keep, dirs_exist_ok=True, ignore=ignore)
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
        once, lost, doubled = count()
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
        if fetch_cooldown is not None:
            (home / "picortex.toml").write_text(f"fetch_cooldown_seconds = {fetch_cooldown}\n")
        async with trio.open_nursery() as nursery:
            urls: SimURLs = await nursery.start(sim.serve)
            settings = load_settings(_env(home, sim, urls, w.alice_id))

            def count() -> tuple[int, int, int]:
                joined = joined_requests(settings.action_log_path)
                return tally(sim.bot_messages(), sent, joined, settings.continuation_seconds)

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
                await settle(sim, count)
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
                await settle(sim, count)
                bot_nursery.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
        once, lost, doubled = count()
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
