"""SIGKILL of one of two `picortex run` processes sharing shards through PostgreSQL (SPEC 17):
the other takes the dead one's shard when its lease runs out, RESUMEs the session it saved,
and answers the triggers in flight at the kill, and one sent meanwhile, once each; a reply
the dead one posted just before the kill (never marked handled) is not posted again."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import trio

from picortex.sim import Simulator
from picortex.sim.model import ModelReply
from picortex.sim.simulator import SimURLs
from picortex.store.backends import connect_postgres
from picortex.store.pg.leases import ShardLeases
from tests.e2e.forkserver import ForkedBot, ForkServer, fork_server
from tests.e2e.harness import RELAXED_BUCKETS

LEASE_SECONDS = 3
START_TIMEOUT = 30.0
POLL_SECONDS = 0.05
HOLD_SECONDS = 60.0  # the model holds the answer in flight past the kill


def _env(home: Path, sim: Simulator, urls: SimURLs, owner: int, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICORTEX_", "DISCORD_"))}
    env.update(
        PICORTEX_HOME=str(home),
        DISCORD_BOT_TOKEN=sim.token,
        DISCORD_API_BASE=urls.api_base,
        ANTHROPIC_API_KEY="sk-ant-test-key-0000",
        ANTHROPIC_BASE_URL=urls.anthropic_base_url,
        PICORTEX_OWNER_ID=str(owner),
        PICORTEX_DATABASE_URL=url,
    )
    return env


async def _start(
    server: ForkServer, home: Path, sim: Simulator, urls: SimURLs, owner: int, url: str
) -> ForkedBot:
    home.mkdir()
    (home / "picortex.toml").write_text(
        '[cluster]\nshards = "auto/2"\ncapacity = 2\n'
        f"lease_seconds = {LEASE_SECONDS}\n"
        "[budget]\nuser_requests_per_minute = 0\nuser_daily_usd = 0\n"
        "[web]\nenabled = false\n"
    )
    return await server.start(_env(home, sim, urls, owner, url), home / "run.err")


async def _until(predicate: Any, timeout: float = START_TIMEOUT) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(POLL_SECONDS)


def _replied(home: Path) -> set[str]:
    """The triggers whose answer a process logged as posted (or found posted)."""
    log = home / "actions.jsonl"
    rows = [orjson.loads(line) for line in log.read_bytes().splitlines()] if log.exists() else []
    return {str(r.get("trigger_id")) for r in rows if r.get("event") == "reply"}


def _holders(table: ShardLeases) -> dict[int, str]:
    now, leases = table.leases()
    return {i: lease.node for i, lease in leases.items() if lease.live(now) and lease.node}


@pytest.mark.long(seconds=12)
@pytest.mark.forked_bots
async def test_sigkill_of_a_holder_then_the_other_takes_its_shard_over(
    tmp_path: Path, pg_url: str
) -> None:
    sim = Simulator(heartbeat_interval_ms=5000, max_concurrency=2, recommended_shards=2)
    for bucket in RELAXED_BUCKETS:
        sim.set_rate_limit(bucket, 1000, 1.0)
    guilds = sim.add_guilds(4, channels_per_guild=3)
    world = sim.add_default_world()
    channels_of = {s: next(g for g in guilds if (g[0] >> 22) % 2 == s)[1] for s in (0, 1)}
    mention = f"<@{sim.bot_user_id}>"
    db = connect_postgres(pg_url)
    table = ShardLeases.beside(db)
    try:
        async with fork_server() as server, trio.open_nursery() as nursery:
            urls: SimURLs = await nursery.start(sim.serve)
            a = await _start(server, tmp_path / "a", sim, urls, world.alice_id, pg_url)
            b = await _start(server, tmp_path / "b", sim, urls, world.alice_id, pg_url)
            # They split the shards.
            await _until(lambda: len(set(_holders(table).values())) == 2)
            await _until(lambda: sim.gateway_stats.ready_sessions >= 2)
            holders = _holders(table)
            [a_shard] = [i for i, node in holders.items() if node.endswith(f":{a.pid}")]
            [b_shard] = [i for i, node in holders.items() if node.endswith(f":{b.pid}")]
            # Two triggers to a's shard whose answers the model holds: in flight at the kill.
            sim.model.script(*[ModelReply(text="never posted", delay=HOLD_SECONDS)] * 2)
            calls = len(sim.model.calls)
            channel, other_channel, third_channel = channels_of[a_shard]
            in_flight = sim.post_user_message(channel, world.alice_id, f"{mention} in flight?")
            posted = sim.post_user_message(other_channel, world.alice_id, f"{mention} posted?")
            await _until(lambda: len(sim.model.calls) == calls + 2)
            # The second one's answer reached Discord just before the kill, its handled mark
            # not yet committed: posted as the bot does, with the nonce its trigger names.
            async with httpx.AsyncClient() as client:
                answer = await client.post(
                    f"{urls.api_base}/channels/{other_channel}/messages",
                    headers={"Authorization": f"Bot {sim.token}"},
                    json={
                        "content": "posted before the kill",
                        "nonce": f"{posted['id']}a0",
                        "enforce_nonce": True,
                        "message_reference": {"message_id": posted["id"]},
                    },
                )
            assert answer.status_code == 200, answer.text
            resumes = sim.gateway_stats.resumes
            a.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            await a.wait()
            sim.model.clear_script()
            meanwhile = sim.post_user_message(
                third_channel, world.alice_id, f"{mention} meanwhile?"
            )
            # b takes the shard once a's lease ran out (a's renewals stopped at the kill).
            await _until(lambda: _holders(table).get(a_shard, "").endswith(f":{b.pid}"))
            took = time.monotonic() - killed_at
            assert took <= LEASE_SECONDS + 3
            assert _holders(table)[b_shard].endswith(f":{b.pid}")

            def replies(message: dict[str, Any]) -> list[dict[str, Any]]:
                return [
                    m
                    for m in sim.bot_messages()
                    if (m.get("message_reference") or {}).get("message_id") == message["id"]
                ]

            await _until(lambda: replies(in_flight) and replies(meanwhile))
            assert sim.gateway_stats.resumes == resumes + 1  # a's saved session
            await _until(lambda: len(sim.model.calls) >= calls + 5)  # posted's answered too
            # b is done with all three once it logged how each answer ended.
            triggers = {str(m["id"]) for m in (in_flight, posted, meanwhile)}
            await _until(lambda: triggers <= _replied(tmp_path / "b"))
            assert len(replies(in_flight)) == len(replies(meanwhile)) == 1
            # Answered again by b (a model call), posted once: Discord returned a's message
            # for the nonce, and b finished that one.
            assert [m["id"] for m in replies(posted)] == [answer.json()["id"]]
            assert all(m["content"] != "never posted" for m in sim.bot_messages())
            b.send_signal(signal.SIGTERM)
            with trio.fail_after(START_TIMEOUT):
                assert await b.wait() == 0, (tmp_path / "b" / "run.err").read_text()
            nursery.cancel_scope.cancel()
    finally:
        table.close()
        db.close()
