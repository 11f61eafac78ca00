"""The simulated gateway against a raw trio-websocket client."""

from __future__ import annotations

import zlib
from urllib.parse import urlsplit

import httpx
import orjson
import pytest
import trio
import trio_websocket

from picortex.sim import DefaultWorld, Simulator, SimURLs

from .conftest import BOT_INTENTS, TOKEN, open_ws, raw_gateway


async def test_hello_identify_ready_guild_create(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with open_ws(urls.gateway_url + "/?v=10&encoding=json") as ws:
        hello = orjson.loads(await ws.get_message())
        assert hello == {"op": 10, "d": {"heartbeat_interval": 41250}, "s": None, "t": None}
        identify = {
            "op": 2,
            "d": {
                "token": TOKEN,
                "intents": BOT_INTENTS,
                "properties": {"os": "linux", "browser": "t", "device": "t"},
                "shard": [0, 1],
            },
        }
        await ws.send_message(orjson.dumps(identify).decode())
        ready = orjson.loads(await ws.get_message())
        guild = orjson.loads(await ws.get_message())
    assert (ready["op"], ready["t"], ready["s"]) == (0, "READY", 1)
    data = ready["d"]
    assert data["v"] == 10
    assert data["user"]["id"] == str(sim.bot_user_id)
    assert data["guilds"] == [{"id": str(world.guild_id), "unavailable": True}]
    assert data["resume_gateway_url"].startswith(urls.gateway_url)
    assert data["shard"] == [0, 1]
    assert data["application"]["id"]
    assert len(data["session_id"]) >= 16
    assert (guild["t"], guild["s"]) == ("GUILD_CREATE", 2)
    assert [c["name"] for c in guild["d"]["channels"]] == ["general", "random"]
    stats = sim.gateway_stats
    assert (stats.connections, stats.identifies) == (1, 1)
    assert stats.last_identify is not None
    assert stats.last_identify["token"] == "[redacted]"
    assert stats.last_identify["intents"] == BOT_INTENTS


async def test_heartbeat_interval_is_configurable(nursery: trio.Nursery) -> None:
    sim = Simulator(TOKEN, heartbeat_interval_ms=1234)
    urls = await nursery.start(sim.serve)
    async with open_ws(urls.gateway_url) as ws:
        assert orjson.loads(await ws.get_message())["d"] == {"heartbeat_interval": 1234}


async def test_user_message_dispatch_shape(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        sim.post_user_message(world.general_id, world.alice_id, f"<@{sim.bot_user_id}> hi")
        created = await gw.recv_dispatch("MESSAGE_CREATE")
        sim.edit_message(world.general_id, int(created["d"]["id"]), "edited")
        updated = await gw.recv_dispatch("MESSAGE_UPDATE")
        sim.add_reaction(world.general_id, int(created["d"]["id"]), world.bob_id, "👍")
        reaction = await gw.recv_dispatch("MESSAGE_REACTION_ADD")
        sim.delete_message(world.general_id, int(created["d"]["id"]))
        deleted = await gw.recv_dispatch("MESSAGE_DELETE")
        dm = sim.open_dm(world.alice_id)
        sim.post_user_message(dm, world.alice_id, "private")
        private = await gw.recv_dispatch("MESSAGE_CREATE")
    d = created["d"]
    assert d["guild_id"] == str(world.guild_id)
    assert d["member"]["roles"] == []
    assert d["mentions"][0]["id"] == str(sim.bot_user_id)
    assert "member" in d["mentions"][0]
    assert updated["d"]["content"] == "edited"
    assert updated["d"]["edited_timestamp"] is not None
    assert reaction["d"]["user_id"] == str(world.bob_id)
    assert reaction["d"]["emoji"] == {"id": None, "name": "👍"}
    assert deleted["d"] == {
        "id": d["id"],
        "channel_id": str(world.general_id),
        "guild_id": str(world.guild_id),
    }
    assert "guild_id" not in private["d"]
    assert "member" not in private["d"]
    seqs = [created["s"], updated["s"], reaction["s"], deleted["s"], private["s"]]
    assert seqs == sorted(seqs)


async def test_wrong_token_closes_4004(sim: Simulator, urls: SimURLs) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.send(2, {"token": "nope", "intents": 1, "properties": {}})
        assert await gw.closed_code() == 4004


@pytest.mark.parametrize(
    ("identify", "code"),
    [
        ({"intents": 1 << 30}, 4013),
        ({"intents": "all"}, 4013),
        ({"shard": [1, 1]}, 4010),
        ({"shard": [0]}, 4010),
    ],
)
async def test_bad_identify_closes(
    sim: Simulator, urls: SimURLs, identify: dict[str, object], code: int
) -> None:
    data = {"token": TOKEN, "intents": 1, "properties": {"os": "x"}, **identify}
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.send(2, data)
        assert await gw.closed_code() == code


async def test_disallowed_privileged_intent_closes_4014(nursery: trio.Nursery) -> None:
    sim = Simulator(TOKEN, allowed_privileged_intents=0)
    urls = await nursery.start(sim.serve)
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.send(2, {"token": TOKEN, "intents": BOT_INTENTS, "properties": {}})
        assert await gw.closed_code() == 4014


async def test_protocol_errors(sim: Simulator, urls: SimURLs) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.ws.send_message("{not json")
        assert await gw.closed_code() == 4002
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.send(3, {"status": "online"})  # before identifying
        assert await gw.closed_code() == 4003
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.send(99, None)
        assert await gw.closed_code() == 4001
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.identify()
        await gw.send(2, {"token": TOKEN, "intents": 1, "properties": {}})
        assert await gw.closed_code() == 4005
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.ws.send_message(orjson.dumps({"op": 1, "d": "x" * 5000}).decode())
        assert await gw.closed_code() == 4002
    async with open_ws(urls.gateway_url + "/?v=6") as ws:
        with pytest.raises(trio_websocket.ConnectionClosed) as info:
            await ws.get_message()
        assert info.value.reason.code == 4012


async def test_send_limit_closes_4008(sim: Simulator, urls: SimURLs) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.identify()
        for _ in range(121):
            await gw.send(3, {"status": "online", "since": None, "activities": [], "afk": False})
        assert await gw.closed_code() == 4008


async def test_heartbeats_are_acked_unless_disabled(sim: Simulator, urls: SimURLs) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.send(1, None)
        assert (await gw.recv())["op"] == 11
        sim.set_heartbeat_ack(False)
        await gw.send(1, None)
        sim.request_heartbeat()
        request = await gw.recv()  # the op 1 request, and no ACK before it
        assert (request["op"], request["d"]) == (1, None)
        sim.set_heartbeat_ack(True)
        await gw.send(1, None)
        assert (await gw.recv())["op"] == 11
    assert sim.gateway_stats.heartbeats == 3


async def test_missed_heartbeats_drop_the_socket_but_keep_the_session(
    autojump_clock: trio.testing.MockClock, sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        with pytest.raises(trio_websocket.ConnectionClosed) as info:
            await gw.recv()  # no heartbeat from us: after 1.5 intervals the sim drops us
        assert info.value.reason.code == 1006
        assert trio.current_time() >= 41.25 * 1.5
    assert sim.gateway_stats.heartbeat_timeouts == 1
    async with raw_gateway(ready["d"]["resume_gateway_url"]) as gw:
        await gw.resume(ready["d"]["session_id"], 2)
        assert (await gw.recv())["t"] == "RESUMED"


async def test_resume_replays_missed_dispatches_then_resumed(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        sim.post_user_message(world.general_id, world.alice_id, "seen")
        seen = await gw.recv_dispatch("MESSAGE_CREATE")
        sim.drop_connections()
        assert await gw.closed_code() == 1006  # abrupt: no close frame
    missed = [
        sim.post_user_message(world.general_id, world.bob_id, f"missed {n}") for n in range(3)
    ]
    resume_url = ready["d"]["resume_gateway_url"]
    async with raw_gateway(resume_url) as gw:
        await gw.resume(ready["d"]["session_id"], seen["s"])
        replayed = [await gw.recv() for _ in range(3)]
        resumed = await gw.recv()
        sim.post_user_message(world.general_id, world.alice_id, "live")
        live = await gw.recv_dispatch("MESSAGE_CREATE")
    assert [p["d"]["id"] for p in replayed] == [m["id"] for m in missed]
    assert [p["s"] for p in replayed] == [seen["s"] + 1, seen["s"] + 2, seen["s"] + 3]
    assert (resumed["t"], resumed["s"]) == ("RESUMED", seen["s"] + 4)
    assert live["s"] == seen["s"] + 5
    stats = sim.gateway_stats
    assert (stats.identifies, stats.resumes, stats.resume_url_connections) == (1, 1, 1)
    assert stats.client_close_codes == ()


async def test_resume_from_an_older_seq_replays_from_there(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        sim.drop_connections()
    async with raw_gateway(ready["d"]["resume_gateway_url"]) as gw:
        await gw.resume(ready["d"]["session_id"], 1)  # we "lost" GUILD_CREATE (seq 2)
        again = await gw.recv()
        assert (again["t"], again["s"]) == ("GUILD_CREATE", 2)
        assert (await gw.recv())["t"] == "RESUMED"


async def test_resume_failures(sim: Simulator, urls: SimURLs, world: DefaultWorld) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.resume("no-such-session", 3)
        assert await gw.recv() == {"op": 9, "d": False, "s": None, "t": None}
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        session = ready["d"]["session_id"]
        sim.drop_connections()
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.resume(session, 999)
        assert await gw.closed_code() == 4007
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.resume(session, 1, token="wrong")
        assert await gw.closed_code() == 4004
    assert sim.gateway_stats.resume_failures == 1


async def test_op7_reconnect_then_resume(
    autojump_clock: trio.testing.MockClock, sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        sim.send_reconnect(close_after=5.0)
        assert await gw.recv() == {"op": 7, "d": None, "s": None, "t": None}
        sim.post_user_message(world.general_id, world.alice_id, "during reconnect")
        await gw.recv_dispatch("MESSAGE_CREATE")
        # We ignore the op 7; the sim drops the socket a few seconds later.
        assert await gw.closed_code() == 1006
    async with raw_gateway(ready["d"]["resume_gateway_url"]) as gw:
        await gw.resume(ready["d"]["session_id"], 3)
        assert (await gw.recv())["t"] == "RESUMED"


async def test_op9_not_resumable_ends_the_session(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        sim.invalidate_session(resumable=False)
        assert await gw.recv() == {"op": 9, "d": False, "s": None, "t": None}
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.resume(ready["d"]["session_id"], 2)
        assert (await gw.recv())["op"] == 9
        fresh = await gw.identify()
        assert fresh["d"]["session_id"] != ready["d"]["session_id"]
        assert fresh["s"] == 1


async def test_op9_resumable_keeps_the_session(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        sim.invalidate_session(resumable=True)
        assert await gw.recv() == {"op": 9, "d": True, "s": None, "t": None}
    async with raw_gateway(ready["d"]["resume_gateway_url"]) as gw:
        await gw.resume(ready["d"]["session_id"], 2)
        assert (await gw.recv())["t"] == "RESUMED"


@pytest.mark.parametrize(("code", "resumable"), [(4000, True), (4009, False), (4014, False)])
async def test_close_connections_with_a_code(
    sim: Simulator, urls: SimURLs, world: DefaultWorld, code: int, resumable: bool
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        sim.close_connections(code)
        assert await gw.closed_code() == code
    async with raw_gateway(ready["d"]["resume_gateway_url"]) as gw:
        await gw.resume(ready["d"]["session_id"], 2)
        answer = await gw.recv()
        assert (answer.get("t") == "RESUMED") is resumable


async def test_client_close_1000_ends_the_session(sim: Simulator, urls: SimURLs) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.ws.aclose(1000)
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.resume(ready["d"]["session_id"], 1)
        assert (await gw.recv())["op"] == 9
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        await gw.ws.aclose(4321)  # any other code keeps it resumable
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.resume(ready["d"]["session_id"], 1)
        assert (await gw.recv())["t"] == "RESUMED"
    await sim.wait_until(lambda: 4321 in sim.gateway_stats.client_close_codes)
    assert sim.gateway_stats.client_close_codes == (1000, 4321)


async def test_held_events_are_replayed_on_resume(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        guild = await gw.recv_dispatch("GUILD_CREATE")
        sim.hold_events(True)
        held = sim.post_user_message(world.general_id, world.alice_id, "held back")
        sim.drop_connections()
        assert await gw.closed_code() == 1006  # the held message never reached us
    sim.hold_events(False)
    async with raw_gateway(ready["d"]["resume_gateway_url"]) as gw:
        await gw.resume(ready["d"]["session_id"], guild["s"])
        replayed = await gw.recv()
        assert replayed["d"]["id"] == held["id"]


async def test_releasing_held_events_sends_them_to_live_connections(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        sim.hold_events(True)
        first = sim.post_user_message(world.general_id, world.alice_id, "one")
        sim.hold_events(False)
        second = sim.post_user_message(world.general_id, world.alice_id, "two")
        got = [await gw.recv_dispatch("MESSAGE_CREATE") for _ in range(2)]
    assert [p["d"]["id"] for p in got] == [first["id"], second["id"]]


async def test_intents_filter_dispatches_and_message_content(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    guilds_only = 1
    no_content = BOT_INTENTS & ~(1 << 15)
    async with raw_gateway(urls.gateway_url) as quiet, raw_gateway(urls.gateway_url) as blind:
        await quiet.identify(intents=guilds_only)
        await blind.identify(intents=no_content)
        await blind.recv_dispatch("GUILD_CREATE")
        sim.post_user_message(world.general_id, world.alice_id, "secret text")
        sim.post_user_message(world.general_id, world.alice_id, f"<@{sim.bot_user_id}> visible")
        sim.add_channel(world.guild_id, "new")
        hidden = await blind.recv_dispatch("MESSAGE_CREATE")
        shown = await blind.recv_dispatch("MESSAGE_CREATE")
        await quiet.recv_dispatch("GUILD_CREATE")
        created = await quiet.recv()  # no MESSAGE_CREATE for a session without GUILD_MESSAGES
    assert hidden["d"]["content"] == ""
    assert shown["d"]["content"].endswith("visible")
    assert created["t"] == "CHANNEL_CREATE"


async def test_shards_route_guild_events_and_dms_to_shard_zero(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    owner = (world.guild_id >> 22) % 2  # Discord's formula picks the guild's shard
    async with raw_gateway(urls.gateway_url) as zero, raw_gateway(urls.gateway_url) as one:
        ready = {0: await zero.identify(shard=[0, 2]), 1: await one.identify(shard=[1, 2])}
        gateways = {0: zero, 1: one}
        assert len(ready[owner]["d"]["guilds"]) == 1
        assert ready[1 - owner]["d"]["guilds"] == []
        seq_before = {n: sim.gateway.sessions[ready[n]["d"]["session_id"]].seq for n in (0, 1)}
        sim.post_user_message(world.general_id, world.alice_id, "guild")
        sim.post_user_message(sim.open_dm(world.alice_id), world.alice_id, "dm")
        guild_event = await gateways[owner].recv_dispatch("MESSAGE_CREATE")
        dm_event = await zero.recv_dispatch("MESSAGE_CREATE")
        seq_after = {n: sim.gateway.sessions[ready[n]["d"]["session_id"]].seq for n in (0, 1)}
    assert guild_event["d"]["content"] == "guild"
    assert dm_event["d"]["content"] == "dm"
    received = {n: seq_after[n] - seq_before[n] for n in (0, 1)}
    assert received == ({0: 2, 1: 0} if owner == 0 else {0: 1, 1: 1})


async def test_required_shards_closes_4011(nursery: trio.Nursery) -> None:
    sim = Simulator(TOKEN, required_shards=2)
    urls = await nursery.start(sim.serve)
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.send(2, {"token": TOKEN, "intents": 1, "properties": {}, "shard": [0, 1]})
        assert await gw.closed_code() == 4011


@pytest.mark.parametrize("compress", ["zlib-stream", "zstd-stream"])
async def test_transport_compression_round_trip(
    sim: Simulator, urls: SimURLs, world: DefaultWorld, compress: str
) -> None:
    async with raw_gateway(urls.gateway_url, compress=compress) as gw:
        await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        texts = [f"message {n} " + "x" * n * 50 for n in range(20)]
        for text in texts:
            sim.post_user_message(world.general_id, world.alice_id, text)
        got = [(await gw.recv_dispatch("MESSAGE_CREATE"))["d"]["content"] for _ in texts]
    assert got == texts
    assert all(isinstance(frame, bytes) for frame in gw.raw_frames)
    if compress == "zlib-stream":
        # One zlib stream per connection: a fresh inflater cannot read a later frame alone.
        with pytest.raises(zlib.error):
            zlib.decompressobj().decompress(gw.raw_frames[-1])


async def test_blast_sends_numbered_message_creates(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url, compress="zlib-stream") as gw:
        await gw.identify()
        guild = await gw.recv_dispatch("GUILD_CREATE")
        result = await sim.blast(300, channels=5, size=1024)
        creates = [await gw.recv_dispatch("MESSAGE_CREATE") for _ in range(300)]
    assert (result.frames, result.connections) == (300, 1)
    assert len({c["d"]["channel_id"] for c in creates}) == 5
    sizes = [len(orjson.dumps(c["d"])) for c in creates]
    assert all(900 <= size <= 1100 for size in sizes)
    assert [c["s"] for c in creates] == list(range(guild["s"] + 6, guild["s"] + 306))
    assert len({c["d"]["id"] for c in creates}) == 300


async def test_rest_actions_reach_the_gateway(
    sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with (
        raw_gateway(urls.gateway_url) as gw,
        httpx.AsyncClient(base_url=urls.api_base, headers={"Authorization": f"Bot {TOKEN}"}) as api,
    ):
        await gw.identify(intents=BOT_INTENTS | (1 << 11))
        await gw.recv_dispatch("GUILD_CREATE")
        posted = (
            await api.post(f"/channels/{world.general_id}/messages", json={"content": "from bot"})
        ).json()
        echoed = await gw.recv_dispatch("MESSAGE_CREATE")
        await api.post(f"/channels/{world.general_id}/typing")
        typing = await gw.recv_dispatch("TYPING_START")
        await api.post(
            f"/channels/{world.general_id}/messages/{posted['id']}/threads", json={"name": "t"}
        )
        thread = await gw.recv_dispatch("THREAD_CREATE")
        update = await gw.recv_dispatch("MESSAGE_UPDATE")
    assert echoed["d"]["id"] == posted["id"]
    assert echoed["d"]["author"]["bot"] is True
    assert echoed["d"]["guild_id"] == str(world.guild_id)
    assert typing["d"]["user_id"] == str(sim.bot_user_id)
    assert thread["d"]["id"] == posted["id"]
    assert thread["d"]["newly_created"] is True
    assert update["d"]["thread"]["id"] == posted["id"]


async def test_identify_pacing_and_stats(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    sim = Simulator(TOKEN, limit_identify_concurrency=True)
    urls = await nursery.start(sim.serve)
    async with raw_gateway(urls.gateway_url) as first:
        await first.identify()
        async with raw_gateway(urls.gateway_url) as second:
            await second.send(2, {"token": TOKEN, "intents": 1, "properties": {}})
            assert await second.recv() == {"op": 9, "d": False, "s": None, "t": None}
            await trio.sleep(5)
            await second.identify()
            await second.send(1, 1)
            assert (await second.recv())["op"] == 11
    stats = sim.gateway_stats
    assert stats.identifies == 2
    assert stats.identify_times[1] - stats.identify_times[0] >= 5
    assert stats.received_ops == {2: 3, 1: 1}
    assert len(stats.heartbeat_times) == 1


async def test_wait_helpers(sim: Simulator, urls: SimURLs, world: DefaultWorld) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gw.identify)
            with trio.fail_after(5):
                await sim.wait_ready()
        assert sim.gateway_stats.ready_sessions == 1
        sim.drop_connections()
        with trio.fail_after(5):
            await sim.wait_until(lambda: sim.gateway_stats.active_connections == 0)
        assert sim.gateway_stats.ready_sessions == 0


async def test_a_session_left_alone_for_minutes_expires(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    sim = Simulator(TOKEN, enforce_heartbeat=False)
    urls = await nursery.start(sim.serve)
    async with raw_gateway(urls.gateway_url) as gw:
        ready = await gw.identify()
        sim.drop_connections()
    await trio.sleep(301)
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.resume(ready["d"]["session_id"], 1)
        assert (await gw.recv())["op"] == 9


def test_the_world_can_be_built_before_trio_runs() -> None:
    sim = Simulator(TOKEN)
    world = sim.add_default_world()
    assert sim.post_user_message(world.general_id, world.alice_id, "early")["content"] == "early"


def test_each_simulator_makes_up_its_own_bot_token() -> None:
    first, second = Simulator(), Simulator()
    assert first.token != second.token
    assert len(first.token) >= 32


@pytest.mark.parametrize("origin", ["https://example.com", "null", "http://127.0.0.1"])
async def test_a_web_page_cannot_open_the_gateway(
    sim: Simulator, urls: SimURLs, origin: str
) -> None:
    split = urlsplit(urls.gateway_url)
    assert split.hostname is not None and split.port is not None
    handshake = (
        "GET /?v=10&encoding=json HTTP/1.1\r\n"
        f"Host: {split.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        f"Origin: {origin}\r\n\r\n"
    )
    async with await trio.open_tcp_stream(split.hostname, split.port) as stream:
        await stream.send_all(handshake.encode())
        answer = await stream.receive_some(4096)
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert sim.gateway_stats.connections == 0
    async with raw_gateway(urls.gateway_url) as gw:  # a bot sends no Origin
        await gw.identify()
