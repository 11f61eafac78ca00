"""One process, many shards (SPEC 17): each shard gets its own guilds, every trigger is
answered once, and IDENTIFYs keep to Discord's `max_concurrency` buckets."""

from __future__ import annotations

from pathlib import Path

import pytest

from picortex.sim import Simulator
from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time


@pytest.mark.parametrize("max_concurrency", [1, 2])
async def test_two_shards_in_one_process(tmp_path: Path, max_concurrency: int) -> None:
    sim = Simulator(
        heartbeat_interval_ms=5000,
        limit_identify_concurrency=True,
        max_concurrency=max_concurrency,
        recommended_shards=2,
    )
    guilds = sim.add_guilds(4)
    on_shard = {shard: [g for g in guilds if (g[0] >> 22) % 2 == shard] for shard in (0, 1)}
    assert on_shard[0] and on_shard[1]
    async with running_bot(tmp_path, sim=sim, shards=((0, 2), (1, 2))) as run:
        readies = await run.wait_event("gateway", 2, action="ready")
        guilds_seen = {tuple(e["shard"]): e["guilds"] for e in readies}
        # The default world's guild rides on one of the shards too.
        home_shard = (run.world.guild_id >> 22) % 2
        for shard in (0, 1):
            assert guilds_seen[(shard, 2)] == len(on_shard[shard]) + (home_shard == shard)

        stats = run.sim.gateway_stats
        assert stats.identify_rate_limited == 0
        assert stats.shard_identifies == {0: 1, 1: 1}
        first, second = sorted(stats.identify_times)
        if max_concurrency == 1:
            # One bucket: the second shard waits out the first's 5 s window.
            assert second - first >= 5.0
        else:
            # Shards 0 and 1 are in different buckets: both identify at once.
            assert second - first < 1.0

        for shard in (0, 1):
            channel = on_shard[shard][0][1][0]
            sent = run.say(channel, run.world.alice_id, f"{run.mention()} hello shard {shard}?")
            await run.sim.wait_bot_messages(1, channel)
            await run.idle()
            replies = run.replies_to(int(sent["id"]))
            assert len(replies) == 1
            assert f"hello shard {shard}" in replies[0]["content"]

        status = run.bot.snapshot()
        assert [s["shard"] for s in status["shards"]] == [[0, 2], [1, 2]]
        assert all(s["state"] == "ready" and s["session_id"] for s in status["shards"])
