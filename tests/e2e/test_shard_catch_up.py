"""Catch-up per shard (SPEC 4, 17): a new session of one shard looks at the channels of that
shard's guilds only; the other shards' channels are their own sessions' (or, in a cluster,
another process's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from picortex.sim import Simulator
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time

# Catch-up reads each channel's history at most once per fetch cooldown (5 s by default) and
# a few pages at a time: after this long it has read every channel it was going to.
CATCH_UP_SETTLED_SECONDS = 30.0


def _history_reads(run: Running, channel_id: int) -> int:
    """How many times the bot has asked for a channel's message history."""
    path = f"/channels/{channel_id}/messages"
    return sum(1 for r in run.sim.requests if r.method == "GET" and r.path == path)


async def test_a_new_session_of_one_shard_catches_up_that_shard_s_channels_only(
    tmp_path: Path,
) -> None:
    sim = Simulator(heartbeat_interval_ms=5000)
    guilds = sim.add_guilds(4)
    channel = {
        shard: next(channels[0] for g, channels in guilds if (g >> 22) % 2 == shard)
        for shard in (0, 1)
    }
    async with running_bot(tmp_path, sim=sim, shards=((0, 2), (1, 2))) as run:
        w = run.world
        await run.wait_event("gateway", 2, action="ready")
        # The bot has answered in a channel of each shard: both are active channels.
        for shard in (0, 1):
            sent = run.say(channel[shard], w.alice_id, f"{run.mention()} hello {shard}?")
            await run.wait_until(lambda sent=sent: bool(run.replies_to(int(sent["id"]))))
        await run.idle()
        reads = {shard: _history_reads(run, channel[shard]) for shard in (0, 1)}
        identifies = run.sim.gateway_stats.shard_identifies[1]

        # Discord ends shard 1's session only; a trigger is said while it has none.
        run.sim.invalidate_session(resumable=False, shard=1)
        missed = run.say(channel[1], w.alice_id, f"{run.mention()} missed on shard 1")
        await run.wait_until(lambda: run.sim.gateway_stats.shard_identifies[1] > identifies)
        (caught,) = await run.wait_event("catch-up")
        # Long enough (virtual time) for any history read still waiting its channel's fetch
        # cooldown to be made.
        await trio.sleep(CATCH_UP_SETTLED_SECONDS)
        await run.idle()

        assert caught["message_id"] == missed["id"]
        assert len(run.replies_to(int(missed["id"]))) == 1
        assert _history_reads(run, channel[1]) > reads[1]
        # Shard 0's session never ended: its channel's history was not read again.
        assert _history_reads(run, channel[0]) == reads[0]
        assert run.sim.gateway_stats.shard_identifies[0] == 1
