"""Kills and disconnects with triggers in flight: every trigger answered exactly once.

Small runs of scripts/chaos_triggers.py (which measures the 20-cycle figures): a real
`picortex run` process SIGKILLed and restarted, and forced disconnects, some needing a fresh
IDENTIFY.
"""

from __future__ import annotations

import pytest

from scripts.chaos_triggers import run_disconnects, run_sigkill
from tests.e2e.forkserver import fork_server


@pytest.mark.long(seconds=4)
@pytest.mark.forked_bots
async def test_sigkill_cycles_with_triggers_in_flight_lose_nothing_and_double_nothing() -> None:
    # Two kills: the second lands on a process that restarted after the first (one
    # SIGKILL and restart alone is tests/e2e/test_sigkill.py).
    # Each process is forked from one that imported the bot once (tests/e2e/forkserver.py).
    async with fork_server() as server:
        total, once, lost, doubled = await run_sigkill(
            cycles=2, per_cycle=3, seed=3, start=server.start
        )
    assert (total, lost, doubled) == (6, 0, 0)
    assert once == total


@pytest.mark.long(seconds=2)
async def test_disconnects_and_fresh_sessions_lose_nothing_and_double_nothing() -> None:
    # Three cycles: a fresh IDENTIFY (the first), then two RESUMEs.
    # IDENTIFYs and a channel's history reads half a second apart, not five seconds (their
    # pacing is tested on its own): the fresh session need not wait out the first one, nor
    # its catch-up the last read of each channel.
    total, once, lost, doubled = await run_disconnects(
        cycles=3, per_cycle=3, seed=4, identify_window=0.5, fetch_cooldown=0.5
    )
    assert (lost, doubled) == (0, 0)
    assert once == total == 2 + 3 * 3
