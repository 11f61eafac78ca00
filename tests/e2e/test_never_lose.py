"""Kills and disconnects with triggers in flight: every trigger answered exactly once.

Small runs of scripts/chaos_triggers.py (which measures the 20-cycle figures): a real
`picortex run` process SIGKILLed and restarted, and forced disconnects, some needing a fresh
IDENTIFY.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from picortex.actors.catch_up import snowflake_at
from scripts.chaos_triggers import joined_requests, run_disconnects, run_sigkill, tally
from tests.e2e.forkserver import fork_server

T0 = 1_750_000_000.0
ALICE, BOB, GENERAL = "10", "11", "20"


def _sent(seconds: float, author: str = ALICE) -> dict[str, Any]:
    """A trigger as the simulator dispatched it, sent `seconds` after T0 by Discord's clock."""
    return {"id": str(snowflake_at(T0 + seconds)), "author": {"id": author}, "channel_id": GENERAL}


def _reply_to(message: dict[str, Any], seconds: float = 20.0) -> dict[str, Any]:
    """The bot's reply to `message`, posted `seconds` after T0."""
    return {
        "id": str(snowflake_at(T0 + seconds)),
        "message_reference": {"message_id": message["id"]},
    }


def test_a_merged_follow_up_counts_as_answered_only_inside_the_window_by_discord_time() -> None:
    first, soon, late = _sent(0.0), _sent(4.0), _sent(16.0)
    sent = [first, soon, late]
    # The bot merged both into the first request and answered it once.
    joined = {soon["id"]: first["id"], late["id"]: first["id"]}
    # 4 s after the first: answered with it; 12 s after `soon`: past the window, so lost.
    assert tally([_reply_to(first)], sent, joined, window=10.0) == (2, 1, 0)
    # Another author's message never joins alice's request.
    bobs = _sent(1.0, BOB)
    assert tally([_reply_to(first)], [first, bobs], {bobs["id"]: first["id"]}, 10.0) == (1, 1, 0)
    # Answered with its request and on its own too: twice.
    assert tally([_reply_to(first), _reply_to(soon)], sent[:2], joined, 10.0) == (1, 0, 1)
    # Without the merge, the reply to the first answers nothing else.
    assert tally([_reply_to(first)], sent[:2], {}, 10.0) == (1, 1, 0)
    # Nor does a reply posted before the follow-up was sent (one from before a restart).
    assert tally([_reply_to(first, 2.0)], sent[:2], joined, 10.0) == (1, 1, 0)


def test_a_later_trigger_line_undoes_an_earlier_merge(tmp_path: Path) -> None:
    log = tmp_path / "actions.jsonl"
    rows = [
        {"event": "continuation", "message_id": "2", "parent_id": "1", "restart": True},
        {"event": "continuation", "message_id": "3", "parent_id": "1", "restart": True},
        {"event": "continuation", "message_id": "4", "parent_id": "1", "restart": False},
        {"event": "trigger", "message_id": "3"},  # a restarted process took it on its own
    ]
    log.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows) + b'{"event": "contin')
    assert joined_requests(log) == {"2": "1"}


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
