"""Catch-up after a fresh IDENTIFY (SPEC 4): missed trusted triggers answered once, in order,
with the default continuation window (SPEC 5.4, on Discord's clock)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from picortex.sim.model import ModelReply
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time


async def _fresh_session(run: Running) -> None:
    """Discord ends the session (op 9 d=false): the bot IDENTIFYs afresh, nothing replayed."""
    identifies = run.sim.gateway_stats.identifies
    run.sim.invalidate_session(resumable=False)
    await run.wait_until(lambda: run.sim.gateway_stats.identifies > identifies)


def _history_reads(run: Running, channel_id: int) -> int:
    """How many times the bot has asked for a channel's message history."""
    path = f"/channels/{channel_id}/messages"
    return sum(1 for r in run.sim.requests if r.method == "GET" and r.path == path)


async def test_triggers_missed_between_sessions_are_answered_once_in_order(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} before")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        identifies = run.sim.gateway_stats.identifies
        run.sim.invalidate_session(resumable=False)
        # The answer to the first missed trigger is still being written when the next is
        # caught up.
        run.sim.model.script(ModelReply(text="stale", delay=1.0))
        # Said while the bot has no session: Discord will never send these to it.
        missed = [
            run.say(w.general_id, w.alice_id, f"{run.mention()} missed one"),
            run.say(w.general_id, w.bob_id, f"{run.mention()} untrusted"),
            run.say(w.general_id, w.alice_id, f"{run.mention()} missed two"),
        ]
        await run.wait_until(lambda: run.sim.gateway_stats.identifies > identifies)
        await run.wait_event("reply", count=2)
        await run.idle()
        caught = run.events("catch-up")
        assert [c["message_id"] for c in caught] == [missed[0]["id"], missed[2]["id"]]
        assert not run.replies_to(int(missed[1]["id"]))
        # Sent a moment after the first by Discord's clock, inside its window: the second
        # joins the first's request, answered once, in one reply to the first.
        (joined,) = run.events("continuation")
        assert (joined["message_id"], joined["parent_id"]) == (missed[2]["id"], missed[0]["id"])
        # Answered in order, once each; the trigger answered before the gap is not again.
        replies = run.sim.bot_messages(w.general_id)
        assert [r["message_reference"]["message_id"] for r in replies] == [
            first["id"],
            missed[0]["id"],
        ]
        assert "missed two" in replies[1]["content"]
        # Another fresh session finds nothing left to do.
        await _fresh_session(run)
        later = run.say(w.general_id, w.alice_id, f"{run.mention()} after")
        await run.wait_until(lambda: bool(run.replies_to(int(later["id"]))))
        assert len(run.events("catch-up")) == 2
        assert len(run.sim.bot_messages(w.general_id)) == 3


async def test_a_trigger_older_than_the_window_is_never_caught_up(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} before")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        identifies = run.sim.gateway_stats.identifies
        reads = _history_reads(run, w.general_id)
        run.sim.invalidate_session(resumable=False)
        old = run.say(w.general_id, w.alice_id, f"{run.mention()} long ago")
        # The bot comes back much later than catch_up_seconds (its clock says so).
        later = time.time() + 10 * run.bot.settings.catch_up_seconds
        run.bot.wall_clock = lambda: later
        await run.wait_until(lambda: run.sim.gateway_stats.identifies > identifies)
        await run.wait_event("gateway", action="ready", count=2)
        # Catch-up has read the channel's history and done all it was going to about it.
        await run.wait_until(lambda: _history_reads(run, w.general_id) > reads)
        await run.idle()
        assert run.events("catch-up") == []
        assert not run.replies_to(int(old["id"]))
