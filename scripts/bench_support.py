"""What the pipeline and ingest benchmarks share: the simulator, bot processes, rounds.

Not a benchmark itself: `bench_pipeline.py` and `bench_ingest.py` import it (both run from
the repository root as `python scripts/<name>.py`, so this directory is on the path).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import trio

# Runnable from a checkout without installing the package.
ROOT: Final = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from picortex.sim import Simulator  # noqa: E402
from picortex.sim.simulator import SimURLs  # noqa: E402

# Long enough that no heartbeat lands inside a measured burst.
HEARTBEAT_MS: Final = 41_250
PICORTEX_ARGV: Final = (sys.executable, "-m", "picortex", "run")


def bench_simulator(relaxed_buckets: Sequence[str]) -> Simulator:
    """A simulator whose per-channel limits on `relaxed_buckets` never pace the bots.

    Discord's global 50 requests/s stays enforced: picortex keeps it, and a benchmark shows
    what that costs.
    """
    sim = Simulator(heartbeat_interval_ms=HEARTBEAT_MS)
    for bucket in relaxed_buckets:
        sim.set_rate_limit(bucket, 100_000, 1.0)
    return sim


@asynccontextmanager
async def serving(sim: Simulator) -> AsyncIterator[SimURLs]:
    """The simulator's Discord and model endpoints, served in this process while in use."""
    async with trio.open_nursery() as nursery:
        urls: SimURLs = await nursery.start(sim.serve)
        yield urls
        nursery.cancel_scope.cancel()


def write_home(home: Path) -> None:
    """A `PICORTEX_HOME` whose bot answers each trigger at once (no continuation window)."""
    (home / "picortex.toml").write_text("continuation_seconds = 0\n")


def picortex_env(home: Path, sim: Simulator, urls: SimURLs, owner: int) -> dict[str, str]:
    """The environment `picortex run` gets against the simulator."""
    return {
        "PICORTEX_HOME": str(home),
        "DISCORD_BOT_TOKEN": sim.token,
        "DISCORD_API_BASE": urls.api_base,
        "ANTHROPIC_API_KEY": "sk-ant-bench-0000",
        "ANTHROPIC_BASE_URL": urls.anthropic_base_url,
        "PICORTEX_OWNER_ID": str(owner),
    }


def process_cpu(pid: int) -> float | None:
    """CPU seconds (user + system) a process used so far, where /proc tells; else None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@asynccontextmanager
async def bot_process(
    sim: Simulator,
    argv: Sequence[str],
    env: dict[str, str],
    *,
    start_seconds: float,
    started: Callable[[], Awaitable[None]] | None = None,
) -> AsyncIterator[trio.Process]:
    """A bot process, yielded once its gateway session is ready (and `started` returned).

    `env` is added to this process's environment. Its output is dropped unless
    BENCH_VERBOSE is set. On the way out it is terminated (killed after `start_seconds`) and
    its gateway session has ended before the next bot starts.
    """
    before = sim.gateway_stats.identifies
    quiet = None if os.environ.get("BENCH_VERBOSE") else subprocess.DEVNULL
    proc = await trio.lowlevel.open_process(
        list(argv), env={**os.environ, **env}, stdout=quiet, stderr=quiet
    )
    try:
        with trio.fail_after(start_seconds):
            await sim.wait_until(
                lambda: (
                    sim.gateway_stats.identifies > before and sim.gateway_stats.ready_sessions >= 1
                )
            )
            if started is not None:
                await started()
        yield proc
    finally:
        proc.terminate()
        with trio.move_on_after(start_seconds) as waited, trio.CancelScope(shield=True):
            await proc.wait()
        if waited.cancelled_caught:
            proc.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(start_seconds):
            await sim.wait_until(lambda: sim.gateway_stats.ready_sessions == 0)


def turns(names: Sequence[str], rounds: int, *, rotate: bool) -> Iterator[tuple[int, list[str]]]:
    """Each round's index and the order the bots take their turns in it.

    Rounds take turns so a machine whose speed drifts slows every bot alike; with `rotate`
    the first bot moves on by one each round, so none is always first.
    """
    for run in range(rounds):
        shift = run % len(names) if rotate else 0
        yield run, [*names[shift:], *names[:shift]]
