"""The whole bot against the simulator: within one gateway session a fetched channel costs no
more history GETs; a fresh session (READY after an IDENTIFY) costs exactly one."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time

COOLDOWN = 0.2


def history_gets(run: Running, channel_id: int) -> list[dict[str, str]]:
    path = f"/channels/{channel_id}/messages"
    return [dict(r.query) for r in run.sim.requests if r.method == "GET" and r.path == path]


async def ask(run: Running, text: str) -> None:
    """Some chatter, then a mention, past the cooldown; waits for the bot's reply."""
    w = run.world
    await trio.sleep(COOLDOWN * 2)
    run.say(w.general_id, w.bob_id, f"chatter before {text}")
    trigger = run.say(w.general_id, w.alice_id, f"{run.mention()} {text}")
    await run.wait_until(lambda: bool(run.replies_to(int(trigger["id"]))))


async def test_history_is_fetched_once_per_gateway_session(tmp_path: Path) -> None:
    # Catch-up off: its own history read after the new session is tested on its own.
    toml = f"fetch_cooldown_seconds = {COOLDOWN}\ncatch_up_seconds = 0\n"
    async with running_bot(tmp_path, toml=toml, relaxed_limits=True) as run:
        general = run.world.general_id
        for i in range(3):
            await ask(run, f"question {i}")
        assert history_gets(run, general) == [{"limit": "100"}]

        run.sim.invalidate_session(resumable=False)
        await run.wait_event("gateway", count=2, action="ready")
        assert run.sim.gateway_stats.identifies == 2
        await ask(run, "after a new session")
        gets = history_gets(run, general)
        assert len(gets) == 2 and "after" in gets[1]

        for i in range(3):
            await ask(run, f"later {i}")
        assert len(history_gets(run, general)) == 2
