"""The `/_sim/` control API that drives a simulator running in another process."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from picortex.sim import DefaultWorld, Simulator, SimURLs

from .conftest import TOKEN, raw_gateway


@pytest.fixture
async def control(urls: SimURLs) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=urls.control_url, headers={"Authorization": f"Bearer {urls.control_token}"}
    ) as client:
        yield client


async def test_state_and_world_building(
    control: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    state = (await control.get("/state")).json()
    assert state["bot_user_id"] == str(sim.bot_user_id)
    assert state["guilds"][0]["name"] == "picortex-sim"
    assert [c["name"] for c in state["guilds"][0]["channels"]] == ["general", "random"]
    carol = (await control.post("/users", json={"username": "carol"})).json()["id"]
    channel = (
        await control.post("/channels", json={"guild_id": str(world.guild_id), "name": "dev"})
    ).json()["id"]
    dm = (await control.post("/dms", json={"user_id": carol})).json()["id"]
    assert sim.world.users[int(carol)].username == "carol"
    assert sim.world.channels[int(channel)].name == "dev"
    assert sim.open_dm(int(carol)) == int(dm)


async def test_inject_messages_and_read_bot_replies(
    control: httpx.AsyncClient, api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    posted = await control.post(
        "/messages",
        json={"channel_id": str(world.general_id), "author": "alice", "content": "hi bot"},
    )
    assert posted.status_code == 200
    message_id = posted.json()["id"]
    assert sim.messages(world.general_id)[-1]["content"] == "hi bot"

    async def reply_later() -> None:
        await trio.sleep(0.05)
        await api.post(f"/channels/{world.general_id}/messages", json={"content": "hello alice"})

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reply_later)
        waited = await control.get(
            "/messages", params={"bot": "1", "after": message_id, "wait": "5"}
        )
    assert [m["content"] for m in waited.json()] == ["hello alice"]
    edited = await control.post(
        "/edit",
        json={"channel_id": str(world.general_id), "message_id": message_id, "content": "hi!"},
    )
    assert edited.json()["content"] == "hi!"
    reacted = await control.post(
        "/reactions",
        json={
            "channel_id": str(world.general_id),
            "message_id": message_id,
            "user_id": str(world.bob_id),
            "emoji": "👍",
        },
    )
    assert reacted.status_code == 204
    deleted = await control.post(
        "/delete", json={"channel_id": str(world.general_id), "message_id": message_id}
    )
    assert deleted.status_code == 204
    requests = (await control.get("/requests")).json()
    assert requests[-1]["headers"]["authorization"] == "[redacted]"
    assert requests[-1]["path"] == f"/channels/{world.general_id}/messages"


async def test_faults_and_stats(
    control: httpx.AsyncClient, sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url) as gw:
        await gw.identify()
        await control.post("/faults/invalidate", json={"resumable": True})
        assert (await gw.recv_dispatch("GUILD_CREATE"))["op"] == 0
        assert await gw.recv() == {"op": 9, "d": True, "s": None, "t": None}
        await control.post("/faults/close", json={"code": 4000})
        assert await gw.closed_code() == 4000
    await control.post(
        "/faults/rest_error",
        json={"method": "GET", "path_pattern": "/users/@me", "status": 500},
    )
    async with httpx.AsyncClient(headers={"Authorization": f"Bot {TOKEN}"}) as client:
        assert (await client.get(urls.api_base + "/users/@me")).status_code == 500
    stats = (await control.get("/stats")).json()
    assert stats["identifies"] == 1
    assert stats["received_ops"] == {"2": 1}
    assert stats["requests"] == 1
    bad = await control.post("/faults/nope")
    assert bad.status_code == 400


async def test_blast_over_http(
    control: httpx.AsyncClient, sim: Simulator, urls: SimURLs, world: DefaultWorld
) -> None:
    async with raw_gateway(urls.gateway_url, compress="zlib-stream") as gw:
        await gw.identify()
        await gw.recv_dispatch("GUILD_CREATE")
        result = (await control.post("/blast", json={"count": 50, "channels": 2})).json()
        got = [await gw.recv_dispatch("MESSAGE_CREATE") for _ in range(50)]
    assert (result["frames"], result["connections"]) == (50, 1)
    assert len({m["d"]["channel_id"] for m in got}) == 2


async def test_model_script_over_http(
    control: httpx.AsyncClient, sim: Simulator, urls: SimURLs
) -> None:
    scripted = await control.post(
        "/model/script", json={"replies": ["one", {"status": 500}, {"text": "three", "delay": 0}]}
    )
    assert scripted.json() == {"pending": 3}
    assert sim.model.pending_script == 3
    wrong = await control.post("/model/script", json={"replies": [{"colour": "red"}]})
    assert wrong.status_code == 400
    assert (await control.get("/model/calls")).json() == []


async def test_the_control_api_needs_the_token_and_json(urls: SimURLs, world: DefaultWorld) -> None:
    message = {"channel_id": str(world.general_id), "author": "alice", "content": "hi"}
    async with httpx.AsyncClient(base_url=urls.control_url) as anyone:
        refused = await anyone.post("/messages", json=message)
        assert refused.status_code == 401
        assert "control token" in refused.json()["error"]
        wrong = await anyone.post(
            "/messages", json=message, headers={"Authorization": "Bearer guess"}
        )
        assert wrong.status_code == 401
        assert (await anyone.get("/state")).status_code == 401
        # A web page's form post: the right token would still need a JSON content type.
        form = await anyone.post(
            "/messages",
            content=b"channel_id=1&content=hi",
            headers={
                "Authorization": f"Bearer {urls.control_token}",
                "Content-Type": "application/x-www-form-urlencoded",
            },
        )
        assert form.status_code == 415
    assert urls.control_token and len(urls.control_token) >= 32
    assert Simulator().control_token != Simulator().control_token


async def test_bulk_guilds_and_global_limit_stats(
    control: httpx.AsyncClient, api: httpx.AsyncClient, sim: Simulator
) -> None:
    made = await control.post("/guilds/bulk", json={"count": 16, "channels_per_guild": 2})
    guilds = made.json()["guilds"]
    assert len(guilds) == 16
    assert all(len(g["channel_ids"]) == 2 for g in guilds)
    assert {(int(g["id"]) >> 22) % 2 for g in guilds} == {0, 1}  # spread over two shards
    refused = await control.post("/guilds/bulk", json={"count": 1, "channels_per_guild": 501})
    assert refused.status_code == 400
    assert len(sim.world.guilds) == 16
    for _ in range(3):
        await api.get("/users/@me")
    stats = (await control.get("/stats")).json()
    assert stats["global"]["requests"] == 3
    assert sum(stats["global"]["per_second"].values()) == 3
    assert stats["global"]["max_in_any_second"] >= 1
    assert stats["global"]["global_429s"] == 0
    assert stats["identify_rate_limited"] == 0
