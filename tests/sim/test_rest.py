"""The simulator's REST API v10: paths, payloads, errors, rate-limit headers and 429s."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest
import trio

from picortex.sim import DefaultWorld, Simulator, SimURLs

from .conftest import TOKEN

RATE_HEADERS = (
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
    "x-ratelimit-reset-after",
    "x-ratelimit-bucket",
)


async def test_requests_need_the_bot_token(urls: SimURLs, sim: Simulator) -> None:
    async with httpx.AsyncClient() as client:
        bare = await client.get(urls.api_base + "/users/@me")
        wrong = await client.get(urls.api_base + "/users/@me", headers={"Authorization": TOKEN})
        gateway = await client.get(urls.api_base + "/gateway")
    assert bare.status_code == 401
    assert bare.json() == {"message": "401: Unauthorized", "code": 0}
    assert wrong.status_code == 401
    assert gateway.status_code == 200  # Discord serves GET /gateway without auth
    assert gateway.json() == {"url": urls.gateway_url}
    assert sim.invalid_requests == 2


async def test_current_user_and_gateway_bot(
    api: httpx.AsyncClient, sim: Simulator, urls: SimURLs
) -> None:
    me = (await api.get("/users/@me")).json()
    assert me["id"] == str(sim.bot_user_id)
    assert me["bot"] is True
    body = (await api.get("/gateway/bot")).json()
    assert body["url"] == urls.gateway_url
    assert body["shards"] == 1
    assert set(body["session_start_limit"]) == {
        "total",
        "remaining",
        "reset_after",
        "max_concurrency",
    }


async def test_create_message_returns_full_object_stores_and_records(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    response = await api.post(
        f"/channels/{world.general_id}/messages",
        json={"content": f"hello <@{world.alice_id}>", "allowed_mentions": {"parse": []}},
        headers={"User-Agent": "DiscordBot (https://example.org, 1.0)"},
    )
    assert response.status_code == 200
    message = response.json()
    assert message["content"] == f"hello <@{world.alice_id}>"
    assert message["author"]["id"] == str(sim.bot_user_id)
    assert message["channel_id"] == str(world.general_id)
    assert message["mentions"] == []
    assert "guild_id" not in message  # REST message objects carry no guild_id
    for key in ("id", "timestamp", "edited_timestamp", "tts", "embeds", "attachments", "type"):
        assert key in message
    assert sim.bot_messages(world.general_id) == [message]
    recorded = sim.requests[-1]
    assert (recorded.method, recorded.path, recorded.status) == (
        "POST",
        f"/channels/{world.general_id}/messages",
        200,
    )
    assert recorded.json["allowed_mentions"] == {"parse": []}
    assert recorded.headers["user-agent"].startswith("DiscordBot")


async def test_too_long_and_empty_messages_are_refused(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    long = await api.post(f"/channels/{world.general_id}/messages", json={"content": "x" * 2001})
    assert long.status_code == 400
    assert long.json() == {
        "message": "Invalid Form Body",
        "code": 50035,
        "errors": {
            "content": {
                "_errors": [
                    {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}
                ]
            }
        },
    }
    empty = await api.post(f"/channels/{world.general_id}/messages", json={"content": ""})
    assert (empty.status_code, empty.json()["code"]) == (400, 50006)
    junk = await api.post(
        f"/channels/{world.general_id}/messages",
        content=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    assert (junk.status_code, junk.json()["code"]) == (400, 50109)
    exact = await api.post(f"/channels/{world.general_id}/messages", json={"content": "y" * 2000})
    assert exact.status_code == 200
    assert len(sim.bot_messages()) == 1


async def test_unknown_channel_and_message(api: httpx.AsyncClient, world: DefaultWorld) -> None:
    channel = await api.post("/channels/123/messages", json={"content": "hi"})
    assert channel.status_code == 404
    assert channel.json() == {"message": "Unknown Channel", "code": 10003}
    message = await api.get(f"/channels/{world.general_id}/messages/123")
    assert (message.status_code, message.json()["code"]) == (404, 10008)
    route = await api.get("/nowhere")
    assert route.status_code == 404


async def test_reply_with_reference(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    question = sim.post_user_message(world.general_id, world.alice_id, "why?")
    response = await api.post(
        f"/channels/{world.general_id}/messages",
        json={
            "content": "because",
            "message_reference": {"message_id": question["id"]},
            "allowed_mentions": {"parse": [], "replied_user": False},
        },
    )
    reply = response.json()
    assert reply["type"] == 19
    assert reply["message_reference"]["message_id"] == question["id"]
    assert reply["referenced_message"]["content"] == "why?"
    assert reply["mentions"] == []
    missing = await api.post(
        f"/channels/{world.general_id}/messages",
        json={"content": "x", "message_reference": {"message_id": "1"}},
    )
    assert (missing.status_code, missing.json()["code"]) == (400, 50035)
    lenient = await api.post(
        f"/channels/{world.general_id}/messages",
        json={
            "content": "x",
            "message_reference": {"message_id": "1", "fail_if_not_exists": False},
        },
    )
    assert lenient.status_code == 200
    assert lenient.json()["type"] == 0


async def test_history_newest_first_and_limit_validation(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    ids = [sim.post_user_message(world.general_id, world.bob_id, str(n))["id"] for n in range(6)]
    newest = (await api.get(f"/channels/{world.general_id}/messages", params={"limit": 2})).json()
    assert [m["id"] for m in newest] == [ids[5], ids[4]]
    after = await api.get(f"/channels/{world.general_id}/messages", params={"after": ids[1]})
    assert [m["id"] for m in after.json()] == ids[:1:-1]
    before = await api.get(
        f"/channels/{world.general_id}/messages", params={"before": ids[2], "limit": 100}
    )
    assert [m["id"] for m in before.json()] == [ids[1], ids[0]]
    too_many = await api.get(f"/channels/{world.general_id}/messages", params={"limit": 101})
    assert (too_many.status_code, too_many.json()["code"]) == (400, 50035)
    assert sim.messages(world.general_id)[0]["content"] == "0"  # oldest first here


async def test_channel_thread_dm_and_typing(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    channel = (await api.get(f"/channels/{world.general_id}")).json()
    assert (channel["name"], channel["type"], channel["guild_id"]) == (
        "general",
        0,
        str(world.guild_id),
    )
    source = sim.post_user_message(world.general_id, world.alice_id, "long topic")
    created = await api.post(
        f"/channels/{world.general_id}/messages/{source['id']}/threads",
        json={"name": "Sage responding", "auto_archive_duration": 60},
    )
    assert created.status_code == 201
    thread = created.json()
    assert thread["id"] == source["id"]
    assert (thread["type"], thread["parent_id"], thread["name"]) == (
        11,
        str(world.general_id),
        "Sage responding",
    )
    assert sim.threads() == [thread]
    again = await api.post(
        f"/channels/{world.general_id}/messages/{source['id']}/threads", json={"name": "x"}
    )
    assert (again.status_code, again.json()["code"]) == (400, 160004)
    posted = await api.post(f"/channels/{thread['id']}/messages", json={"content": "in thread"})
    assert posted.json()["channel_id"] == thread["id"]
    dm = (await api.post("/users/@me/channels", json={"recipient_id": str(world.bob_id)})).json()
    assert dm["type"] == 1
    assert dm["recipients"][0]["id"] == str(world.bob_id)
    assert dm["id"] == str(sim.open_dm(world.bob_id))
    nobody = await api.post("/users/@me/channels", json={"recipient_id": "99"})
    assert (nobody.status_code, nobody.json()["code"]) == (400, 50033)
    typing = await api.post(f"/channels/{world.general_id}/typing")
    assert typing.status_code == 204
    assert typing.content == b""


async def test_reactions_with_url_encoded_emoji(
    mock_clock: trio.testing.MockClock,
    api: httpx.AsyncClient,
    sim: Simulator,
    world: DefaultWorld,
) -> None:
    message = sim.post_user_message(world.general_id, world.alice_id, "poll")
    emoji = quote("1️⃣")
    base = f"/channels/{world.general_id}/messages/{message['id']}/reactions/{emoji}"
    put = await api.put(base + "/@me")
    assert put.status_code == 204
    sim.add_reaction(world.general_id, int(message["id"]), world.bob_id, "1️⃣")
    users = (await api.get(base)).json()
    assert sorted(u["id"] for u in users) == sorted([str(sim.bot_user_id), str(world.bob_id)])
    stored = sim.message(world.general_id, int(message["id"]))["reactions"][0]
    assert (stored["count"], stored["me"], stored["emoji"]["name"]) == (2, True, "1️⃣")
    bad = await api.get(f"/channels/{world.general_id}/messages/{message['id']}/reactions/abc")
    assert (bad.status_code, bad.json()["code"]) == (400, 10014)
    too_soon = await api.delete(base + "/@me")
    assert too_soon.status_code == 429  # the reaction bucket allows one request per 0.25 s
    mock_clock.jump(float(too_soon.json()["retry_after"]))
    delete = await api.delete(base + "/@me")
    assert delete.status_code == 204
    assert put.headers["x-ratelimit-bucket"] == delete.headers["x-ratelimit-bucket"]
    assert [u["id"] for u in (await api.get(base)).json()] == [str(world.bob_id)]


async def test_edit_own_message_only(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    mine = (await api.post(f"/channels/{world.general_id}/messages", json={"content": "v1"})).json()
    edited = await api.patch(
        f"/channels/{world.general_id}/messages/{mine['id']}", json={"content": "v2"}
    )
    assert edited.status_code == 200
    assert edited.json()["content"] == "v2"
    assert edited.json()["edited_timestamp"] is not None
    theirs = sim.post_user_message(world.general_id, world.alice_id, "hers")
    refused = await api.patch(
        f"/channels/{world.general_id}/messages/{theirs['id']}", json={"content": "mine now"}
    )
    assert (refused.status_code, refused.json()["code"]) == (403, 50005)


async def test_every_response_carries_rate_limit_headers(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    responses = [
        await api.get("/users/@me"),
        await api.get(f"/channels/{world.general_id}"),
        await api.post(f"/channels/{world.general_id}/messages", json={"content": "a"}),
        await api.post("/channels/1/messages", json={"content": "a"}),
    ]
    for response in responses:
        for header in RATE_HEADERS:
            assert header in response.headers, (response.request.url, header)
    post = responses[2]
    assert post.headers["x-ratelimit-limit"] == "5"
    assert post.headers["x-ratelimit-remaining"] == "4"
    assert float(post.headers["x-ratelimit-reset-after"]) == pytest.approx(5.0, abs=0.01)


async def test_exceeding_a_bucket_gets_a_real_429_then_it_resets(
    autojump_clock: trio.testing.MockClock,
    api: httpx.AsyncClient,
    sim: Simulator,
    world: DefaultWorld,
) -> None:
    url = f"/channels/{world.general_id}/messages"
    statuses = [(await api.post(url, json={"content": str(n)})).status_code for n in range(5)]
    assert statuses == [200] * 5
    refused = await api.post(url, json={"content": "six"})
    assert refused.status_code == 429
    body = refused.json()
    assert body["global"] is False
    assert 0 < body["retry_after"] <= 5.0
    assert refused.headers["x-ratelimit-scope"] == "user"
    assert refused.headers["x-ratelimit-remaining"] == "0"
    assert int(refused.headers["retry-after"]) >= body["retry_after"]
    other_channel = await api.post(f"/channels/{world.random_id}/messages", json={"content": "ok"})
    assert other_channel.status_code == 200  # buckets are per channel
    await trio.sleep(body["retry_after"])
    assert (await api.post(url, json={"content": "six"})).status_code == 200
    assert [m["content"] for m in sim.bot_messages(world.general_id)] == [
        "0",
        "1",
        "2",
        "3",
        "4",
        "six",
    ]
    assert sim.invalid_requests == 1


async def test_global_limit(
    mock_clock: trio.testing.MockClock, api: httpx.AsyncClient, world: DefaultWorld
) -> None:
    paths = ["/users/@me", "/gateway/bot", "/oauth2/applications/@me"] * 20

    async def get(path: str, results: list[httpx.Response]) -> None:
        results.append(await api.get(path))

    results: list[httpx.Response] = []
    async with trio.open_nursery() as nursery:
        for path in paths:  # 20 per route: no route bucket is exhausted, the global one is
            nursery.start_soon(get, path, results)
    limited = [r for r in results if r.status_code == 429]
    assert len(results) - len(limited) == 50  # the clock stands still: one window of 50
    assert len(limited) == 10
    assert all(r.json()["global"] is True for r in limited)
    assert all(r.headers["x-ratelimit-scope"] == "global" for r in limited)
    mock_clock.jump(1.0)
    assert (await api.get("/users/@me")).status_code == 200


async def test_injected_429_holds_the_bucket_for_retry_after(
    autojump_clock: trio.testing.MockClock,
    api: httpx.AsyncClient,
    sim: Simulator,
    world: DefaultWorld,
) -> None:
    sim.inject_rest_error("POST", "/channels/*/messages", 429, retry_after=2.5)
    url = f"/channels/{world.general_id}/messages"
    first = await api.post(url, json={"content": "x"})
    assert first.status_code == 429
    assert first.json() == {
        "message": "You are being rate limited.",
        "retry_after": 2.5,
        "global": False,
    }
    assert first.headers["retry-after"] == "3"
    assert first.headers["x-ratelimit-scope"] == "user"
    early = await api.post(url, json={"content": "x"})
    assert early.status_code == 429  # retrying before retry_after is refused for real
    await trio.sleep(2.5)
    assert (await api.post(url, json={"content": "x"})).status_code == 200
    assert len(sim.bot_messages()) == 1


async def test_injected_global_429_and_5xx(
    autojump_clock: trio.testing.MockClock,
    api: httpx.AsyncClient,
    sim: Simulator,
    world: DefaultWorld,
) -> None:
    sim.inject_rest_error("*", "/users/@me", 429, retry_after=1.0, global_=True)
    limited = await api.get("/users/@me")
    assert limited.json()["global"] is True
    assert limited.headers["x-ratelimit-global"] == "true"
    assert limited.headers["x-ratelimit-scope"] == "global"
    assert (await api.get(f"/channels/{world.general_id}")).status_code == 429
    await trio.sleep(1.0)
    sim.inject_rest_error("POST", "/channels/*/messages", 502, count=2)
    url = f"/channels/{world.general_id}/messages"
    codes = [(await api.post(url, json={"content": "x"})).status_code for _ in range(3)]
    assert codes == [502, 502, 200]
    assert len(sim.bot_messages()) == 1  # a faulted request has no effect
    sim.inject_rest_error("GET", "/channels/*", 500, count=None)
    assert (await api.get(f"/channels/{world.general_id}")).status_code == 500
    assert (await api.get(f"/channels/{world.general_id}")).status_code == 500
    sim.clear_rest_errors()
    assert (await api.get(f"/channels/{world.general_id}")).status_code == 200


async def test_shared_scope_429_is_not_counted_as_invalid(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    sim.inject_rest_error("GET", "/channels/*", 429, retry_after=0.01, scope="shared")
    shared = await api.get(f"/channels/{world.general_id}")
    assert shared.headers["x-ratelimit-scope"] == "shared"
    assert shared.json()["message"] == "The resource is being rate limited."
    assert sim.invalid_requests == 0


async def test_enforce_nonce_returns_the_earlier_message(
    api: httpx.AsyncClient, sim: Simulator, world: DefaultWorld
) -> None:
    url = f"/channels/{world.general_id}/messages"
    body = {"content": "once", "nonce": "abc", "enforce_nonce": True}
    first = (await api.post(url, json=body)).json()
    second = (await api.post(url, json=body)).json()
    assert first["id"] == second["id"]
    assert first["nonce"] == "abc"
    assert len(sim.bot_messages()) == 1
