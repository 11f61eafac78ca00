"""What a cluster of bot processes needs from the simulator: many guilds spread over shards,
IDENTIFY paced per `max_concurrency` bucket, the recommended shard count, the global limit
counted per second, and `enforce_nonce` de-duplication for a few minutes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest
import trio
import trio.testing

from picortex.sim import Simulator, SimURLs
from picortex.sim.world import SimError

from .conftest import TOKEN, raw_gateway

REPO = Path(__file__).resolve().parents[2]
INVALID_SESSION = {"op": 9, "d": False, "s": None, "t": None}


def _identify(shard: list[int]) -> dict[str, object]:
    return {"token": TOKEN, "intents": 1 | (1 << 9), "properties": {}, "shard": shard}


def test_a_thousand_guilds_spread_evenly_over_eight_shards() -> None:
    sim = Simulator(TOKEN)
    made = sim.add_guilds(1000, 2)
    assert len(made) == len({guild for guild, _ in made}) == 1000
    assert all(len(channels) == 2 for _, channels in made)
    assert all(sim.world.channel(c).guild_id == g for g, channels in made for c in channels)
    per_shard = Counter((guild >> 22) % 8 for guild, _ in made)
    assert per_shard == {shard: 125 for shard in range(8)}
    later = sim.add_guild("later")  # ids keep increasing after a bulk
    assert later > made[-1][0]


def test_bulk_guilds_refuse_counts_discord_would_not_allow() -> None:
    sim = Simulator(TOKEN)
    with pytest.raises(SimError):
        sim.add_guilds(1, 501)
    with pytest.raises(SimError):
        sim.add_guilds(-1, 2)
    assert sim.world.guilds == {}


async def test_each_shard_gets_only_its_guilds_and_their_messages(
    nursery: trio.Nursery,
) -> None:
    sim = Simulator(TOKEN)
    urls = await nursery.start(sim.serve)
    made = sim.add_guilds(12, 1)
    alice = sim.add_user("alice")
    owned = {n: [g for g, _ in made if (g >> 22) % 3 == n] for n in range(3)}
    async with (
        raw_gateway(urls.gateway_url) as zero,
        raw_gateway(urls.gateway_url) as one,
        raw_gateway(urls.gateway_url) as two,
    ):
        gateways = {0: zero, 1: one, 2: two}
        for n, gw in gateways.items():
            ready = await gw.identify(shard=[n, 3])
            assert [int(g["id"]) for g in ready["d"]["guilds"]] == owned[n]
            creates = [await gw.recv_dispatch("GUILD_CREATE") for _ in owned[n]]
            assert [int(c["d"]["id"]) for c in creates] == owned[n]
        target_guild, [target_channel] = next((g, c) for g, c in made if g in owned[2])
        sim.post_user_message(target_channel, alice, "to shard two")
        sim.post_user_message(sim.open_dm(alice), alice, "a dm")
        seen = await two.recv_dispatch("MESSAGE_CREATE")
        dm = await zero.recv_dispatch("MESSAGE_CREATE")
        sessions = {s.shard: s.seq for s in sim.gateway.sessions.values()}
    assert (seen["d"]["guild_id"], seen["d"]["content"]) == (str(target_guild), "to shard two")
    assert dm["d"]["content"] == "a dm"
    # READY + GUILD_CREATEs, then exactly the one message each shard owns.
    assert sessions == {
        (0, 3): 1 + len(owned[0]) + 1,
        (1, 3): 1 + len(owned[1]),
        (2, 3): 1 + len(owned[2]) + 1,
    }


async def test_identify_is_paced_per_max_concurrency_bucket(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    sim = Simulator(TOKEN, limit_identify_concurrency=True, max_concurrency=2)
    urls = await nursery.start(sim.serve)
    sim.add_guilds(8, 1)
    async with (
        raw_gateway(urls.gateway_url) as zero,
        raw_gateway(urls.gateway_url) as one,
        raw_gateway(urls.gateway_url) as two,
    ):
        # Shards 0 and 1 have rate-limit keys 0 and 1: both may start at once.
        await zero.identify(shard=[0, 8])
        await one.identify(shard=[1, 8])
        # Shard 2 shares key 0 with shard 0, which started under 5 s ago.
        await two.send(2, _identify([2, 8]))
        assert await two.recv() == INVALID_SESSION
        await trio.sleep(5)
        ready = await two.identify(shard=[2, 8])
        assert ready["d"]["shard"] == [2, 8]
    stats = sim.gateway_stats
    assert stats.identify_rate_limited == 1
    assert stats.shard_identifies == {0: 1, 1: 1, 2: 1}
    assert stats.identifies == 3
    assert sim.gateway.gateway_bot()["session_start_limit"]["remaining"] == 1000 - 3


async def test_gateway_bot_recommends_shards_and_reports_max_concurrency(
    nursery: trio.Nursery,
) -> None:
    sim = Simulator(TOKEN, max_concurrency=2, recommended_shards=8)
    urls = await nursery.start(sim.serve)
    sim.add_guilds(1000, 2)
    async with httpx.AsyncClient(
        base_url=urls.api_base, headers={"Authorization": f"Bot {TOKEN}"}
    ) as api:
        body = (await api.get("/gateway/bot")).json()
    assert body["shards"] == 8
    assert body["session_start_limit"]["max_concurrency"] == 2
    counted = Simulator(TOKEN)
    counted.add_guilds(2001, 0)
    assert counted.gateway.gateway_bot()["shards"] == 3  # one per 1,000 guilds


async def test_a_session_with_more_than_2500_guilds_must_shard(nursery: trio.Nursery) -> None:
    sim = Simulator(TOKEN)
    urls = await nursery.start(sim.serve)
    sim.add_guilds(2501, 0)
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.send(2, _identify([0, 1]))
        with trio.fail_after(10):
            assert await gw.closed_code() == 4011
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify(shard=[0, 2])
        guilds = ready["d"]["guilds"]
        # Read them all: a client that stops reading cannot leave a busy socket cleanly.
        for _ in guilds:
            await gw.recv_dispatch("GUILD_CREATE")
    assert 0 < len(guilds) <= 2500


async def test_interaction_endpoints_are_not_bound_by_the_global_limit(
    mock_clock: trio.testing.MockClock, sim: Simulator, api: httpx.AsyncClient
) -> None:
    paths = ["/users/@me", "/gateway/bot", "/oauth2/applications/@me"] * 17
    statuses = [(await api.get(path)).status_code for path in paths]
    assert statuses.count(429) == 1  # the clock stands still: the 51st is over the limit
    callback = await api.post("/interactions/1/token/callback", json={"type": 1})
    assert callback.status_code != 429
    stats = sim.global_stats
    assert stats.requests == 51
    assert stats.global_429s == 1


async def test_global_limit_stats_count_every_second_and_the_busiest_span(
    mock_clock: trio.testing.MockClock, sim: Simulator, api: httpx.AsyncClient
) -> None:
    start = int(trio.current_time())
    mock_clock.jump(start + 1.6 - trio.current_time())
    for _ in range(30):
        await api.get("/users/@me")
    mock_clock.jump(0.6)  # now in the next whole second, but within one second of the first
    for _ in range(30):
        await api.get("/oauth2/applications/@me")
    stats = sim.global_stats
    assert stats.per_second == {start + 1: 30, start + 2: 30}
    assert stats.max_in_any_second == 60
    # The limit's window opens at the first request, so the straddling burst was refused too.
    assert stats.global_429s == 10
    mock_clock.jump(1.5)
    assert (await api.get("/users/@me")).status_code == 200
    assert sim.global_stats.per_second[start + 3] == 1
    assert sim.global_stats.max_in_any_second == 60


async def test_enforce_nonce_deduplicates_for_a_few_minutes_only(
    autojump_clock: trio.testing.MockClock, sim: Simulator, urls: SimURLs
) -> None:
    guild, [channel] = sim.add_guilds(1, 1)[0]
    url = f"/channels/{channel}/messages"
    body = {"content": "once", "nonce": "n-1", "enforce_nonce": True}
    async with httpx.AsyncClient(
        base_url=urls.api_base, headers={"Authorization": f"Bot {TOKEN}"}
    ) as api:
        first = (await api.post(url, json=body)).json()
        await trio.sleep(299)
        again = (await api.post(url, json=body)).json()
        await trio.sleep(2)
        later = (await api.post(url, json=body)).json()
        unenforced = (await api.post(url, json={"content": "twice", "nonce": "n-1"})).json()
    assert again["id"] == first["id"]
    assert later["id"] != first["id"]
    assert unenforced["id"] != later["id"]
    assert [m["content"] for m in sim.bot_messages(channel)] == ["once", "once", "twice"]
    assert guild in sim.world.guilds


def test_picortex_sim_serves_a_cluster_world_from_its_options() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "picortex", "sim", "--guilds", "1000", "--shards", "8"]
    proc = subprocess.Popen(
        [*command, "--max-concurrency", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        lines: list[str] = []
        while not lines or not lines[-1].strip().startswith("users:"):
            line = proc.stdout.readline()
            assert line, "picortex sim stopped before printing its URLs"
            lines.append(line)
        api_base = next(line.split()[-1] for line in lines if "DISCORD_API_BASE" in line)
        token = next(line.split()[-1] for line in lines if "DISCORD_BOT_TOKEN" in line)
        control = next(line.split()[-1] for line in lines if "control token" in line)
        body = httpx.get(api_base + "/gateway/bot", headers={"Authorization": f"Bot {token}"})
        state = httpx.get(
            api_base.replace("/api/v10", "/_sim/state"),
            headers={"Authorization": f"Bearer {control}"},
        ).json()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert any("1000 more guilds with 2 channels each" in line for line in lines)
    assert body.json()["shards"] == 8
    assert body.json()["session_start_limit"]["max_concurrency"] == 2
    assert len(state["guilds"]) == 1001  # the default guild and the thousand
    assert all(len(g["channels"]) == 2 for g in state["guilds"])


def test_picortex_sim_refuses_more_channels_than_discord_allows() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "picortex", "sim", "--guilds", "1", "--channels-per-guild", "501"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert "500 channels" in done.stderr + done.stdout


async def test_global_limit_stats_since_a_moment_leave_out_what_came_before(
    mock_clock: trio.testing.MockClock, sim: Simulator, api: httpx.AsyncClient
) -> None:
    start = int(trio.current_time())
    mock_clock.jump(start + 1.2 - trio.current_time())
    for _ in range(55):  # 50 served, 5 refused with a global 429
        await api.get("/users/@me")
    mock_clock.jump(2.0)
    since = trio.current_time()
    for _ in range(20):
        await api.get("/users/@me")
    mock_clock.jump(0.9)
    for _ in range(10):
        await api.get("/users/@me")
    later = sim.global_stats_since(since)
    assert later.requests == 30
    assert later.per_second == {start + 3: 20, start + 4: 10}
    assert later.max_in_any_second == 30
    assert later.global_429s == 0
    assert sim.global_stats.global_429s == 5
    assert sim.global_stats.max_in_any_second == 55


async def test_deliveries_name_the_connection_each_message_went_to(
    nursery: trio.Nursery,
) -> None:
    sim = Simulator(TOKEN, record_deliveries=True)
    urls = await nursery.start(sim.serve)
    made = sim.add_guilds(4, 1)
    alice = sim.add_user("alice")
    channel = {(g >> 22) % 2: c for g, (c,) in made}
    async with raw_gateway(urls.gateway_url) as zero, raw_gateway(urls.gateway_url) as one:
        await zero.identify(shard=[0, 2])
        await one.identify(shard=[1, 2])
        for _ in range(2):  # read, so that the client's reader is free to close
            await zero.recv_dispatch("GUILD_CREATE")
        first = sim.post_user_message(channel[1], alice, "one")
        await one.recv_dispatch("MESSAGE_CREATE")
        session = next(s for s in sim.gateway.sessions.values() if s.shard == (1, 2))
        assert session.connection is not None
        serial = session.connection.serial
        port = one.ws.local.port
    # Both clients left; shard 1's session stays resumable, and what came meanwhile waits.
    second = sim.post_user_message(channel[1], alice, "two")
    assert sim.deliveries(int(second["id"])) == []
    [delivery] = sim.deliveries(int(first["id"]))
    assert delivery.connection == serial
    assert delivery.peer == ("127.0.0.1", port)
    assert (delivery.session_id, delivery.seq) == (session.id, session.seq - 1)
    async with raw_gateway(urls.gateway_url) as again:
        await again.resume(session.id, session.seq - 1)
        replayed = await again.recv_dispatch("MESSAGE_CREATE")
        assert replayed["d"]["id"] == second["id"]
        [later] = sim.deliveries(int(second["id"]))
        assert later.connection not in (serial, 0)
        assert later.peer == ("127.0.0.1", again.ws.local.port)
        assert later.session_id == session.id
    assert [d.connection for d in sim.deliveries(int(first["id"]))] == [serial]


def test_deliveries_are_kept_only_when_asked_for() -> None:
    sim = Simulator(TOKEN)
    with pytest.raises(SimError):
        sim.deliveries(1)
    assert sim.gateway.deliveries is None
