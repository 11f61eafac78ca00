"""Catch-up after a fresh IDENTIFY (SPEC 4): missed trusted triggers answered once, in order."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from picortex.actors import catch_up as catch_up_mod
from tests.e2e.harness import Running, running_bot

# Virtual time that also runs at wall speed: catch-up hands over the missed messages one
# after the other at once, and a clock standing still would put them all at one instant,
# inside each other's continuation window even with `continuation_seconds = 0`.
pytestmark = pytest.mark.virtual_time(rate=1.0)


async def _fresh_session(run: Running) -> None:
    """Discord ends the session (op 9 d=false): the bot IDENTIFYs afresh, nothing replayed."""
    identifies = run.sim.gateway_stats.identifies
    run.sim.invalidate_session(resumable=False)
    await run.wait_until(lambda: run.sim.gateway_stats.identifies > identifies)


async def test_triggers_missed_between_sessions_are_answered_once_in_order(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 0\n") as run:
        w = run.world
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} before")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        identifies = run.sim.gateway_stats.identifies
        run.sim.invalidate_session(resumable=False)
        # Said while the bot has no session: Discord will never send these to it.
        missed = [
            run.say(w.general_id, w.alice_id, f"{run.mention()} missed one"),
            run.say(w.general_id, w.bob_id, f"{run.mention()} untrusted"),
            run.say(w.general_id, w.alice_id, f"{run.mention()} missed two"),
        ]
        await run.wait_until(lambda: run.sim.gateway_stats.identifies > identifies)
        await run.wait_until(
            lambda: all(run.replies_to(int(m["id"])) for m in (missed[0], missed[2]))
        )
        caught = run.events("catch-up")
        assert [c["message_id"] for c in caught] == [missed[0]["id"], missed[2]["id"]]
        assert not run.replies_to(int(missed[1]["id"]))
        # Answered in order, once each; the trigger answered before the gap is not again.
        replies = run.sim.bot_messages(w.general_id)
        assert [r["message_reference"]["message_id"] for r in replies] == [
            first["id"],
            missed[0]["id"],
            missed[2]["id"],
        ]
        # Another fresh session finds nothing left to do.
        await _fresh_session(run)
        later = run.say(w.general_id, w.alice_id, f"{run.mention()} after")
        await run.wait_until(lambda: bool(run.replies_to(int(later["id"]))))
        assert len(run.events("catch-up")) == 2
        assert len(run.sim.bot_messages(w.general_id)) == 4


async def test_a_trigger_older_than_the_window_is_never_caught_up(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml="continuation_seconds = 0\n") as run:
        w = run.world
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} before")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        identifies = run.sim.gateway_stats.identifies
        run.sim.invalidate_session(resumable=False)
        old = run.say(w.general_id, w.alice_id, f"{run.mention()} long ago")
        # The bot comes back much later than catch_up_seconds (its clock says so).
        later = time.time() + 10 * run.bot.settings.catch_up_seconds
        run.bot.wall_clock = lambda: later
        await run.wait_until(lambda: run.sim.gateway_stats.identifies > identifies)
        await run.wait_event("gateway", action="ready", count=2)
        await trio.sleep(0.5)  # long enough for catch-up to have run
        await run.idle()
        assert run.events("catch-up") == []
        assert not run.replies_to(int(old["id"]))


def test_snowflake_time_round_trip() -> None:
    at = 1_750_000_000.25
    assert catch_up_mod.snowflake_seconds(catch_up_mod.snowflake_at(at)) == at
