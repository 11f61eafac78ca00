"""RestClient against a scripted fake Discord (httpx.MockTransport) under the autojump clock."""

from __future__ import annotations

import bisect
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import orjson
import pytest
import trio

from picortex import PROJECT_URL, __version__
from picortex.discord import ratelimit, rest
from picortex.discord.rest import DiscordHTTPError, InvalidRequestGuardError, RestClient
from picortex.errors import FatalDiscordError
from tests.helpers import RecordingSink

API = "https://discord.test/api/v10"
TOKEN = "tok.SECRET.value"

Responder = Callable[[httpx.Request], Awaitable[httpx.Response] | httpx.Response]


class Seen:
    """One request as the fake Discord saw it."""

    def __init__(self, request: httpx.Request, at: float) -> None:
        self.method = request.method
        self.path = request.url.path
        self.raw_path = request.url.raw_path.decode()
        self.query = dict(request.url.params)
        self.headers = request.headers
        self.json: Any = orjson.loads(request.content) if request.content else None
        self.at = at


class FakeDiscord:
    """Records every request and answers with `respond` (a sync or async function)."""

    def __init__(self, respond: Responder | None = None, *, latency: float = 0.0) -> None:
        self.seen: list[Seen] = []
        self.respond = respond or (lambda request: ok({"id": "1"}))
        self.latency = latency
        self.in_flight = 0
        self.max_in_flight = 0

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(Seen(request, trio.current_time()))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                await trio.sleep(self.latency)
            result = self.respond(request)
            if not isinstance(result, httpx.Response):
                result = await result
            return result
        finally:
            self.in_flight -= 1

    def client(self, events: RecordingSink | None = None) -> RestClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self))
        return RestClient(API, TOKEN, client=http, events=events)


def ok(
    body: Any = None, *, headers: dict[str, str] | None = None, status: int = 200
) -> httpx.Response:
    content = b"" if body is None else orjson.dumps(body)
    return httpx.Response(status, content=content, headers=headers or {})


def limits(bucket: str, limit: int, remaining: int, reset_after: float) -> dict[str, str]:
    return {
        "X-RateLimit-Bucket": bucket,
        "X-RateLimit-Limit": str(limit),
        "X-RateLimit-Remaining": str(remaining),
        "X-RateLimit-Reset-After": str(reset_after),
    }


def too_many(retry_after: float, *, scope: str, is_global: bool = False) -> httpx.Response:
    headers = {"X-RateLimit-Scope": scope, "Retry-After": str(int(retry_after) + 1)}
    if is_global:
        headers["X-RateLimit-Global"] = "true"
    else:
        headers.update(limits("msgs", 5, 0, retry_after))
    body = {
        "message": "You are being rate limited.",
        "retry_after": retry_after,
        "global": is_global,
    }
    return ok(body, headers=headers, status=429)


# ---- headers and bodies -----------------------------------------------------------------------


async def test_headers_identify_the_bot_and_the_library() -> None:
    fake = FakeDiscord()
    async with fake.client() as client:
        await client.get_current_user()
    (seen,) = fake.seen
    assert seen.headers["user-agent"] == f"DiscordBot ({PROJECT_URL}, {__version__})"
    assert seen.headers["authorization"] == f"Bot {TOKEN}"
    assert seen.method == "GET"
    assert seen.path == "/api/v10/users/@me"


async def test_reply_references_the_trigger_and_never_pings_everyone_or_roles() -> None:
    fake = FakeDiscord()
    async with fake.client() as client:
        await client.create_message(10, "hi", reply_to=99)
        await client.create_message(10, "plain")
        await client.create_message(
            10, "@everyone", reply_to=99, allowed_mentions={"parse": ["everyone", "roles", "users"]}
        )
        await client.create_message(10, "quiet", allowed_mentions={"parse": []})
    reply, plain, widened, quiet = (s.json for s in fake.seen)
    assert reply["content"] == "hi"
    assert reply["message_reference"]["message_id"] == "99"
    assert reply["allowed_mentions"] == {"parse": ["users"], "replied_user": True}
    assert "message_reference" not in plain
    assert plain["allowed_mentions"] == {"parse": ["users"]}
    assert widened["allowed_mentions"]["parse"] == ["users"]
    assert quiet["allowed_mentions"] == {"parse": []}
    for body in (reply, plain, widened, quiet):
        assert "roles" not in body["allowed_mentions"]
        assert body["enforce_nonce"] is True
        assert 0 < len(body["nonce"]) <= 25
    assert fake.seen[0].headers["content-type"] == "application/json"


async def test_explicit_user_list_is_kept_without_parse() -> None:
    fake = FakeDiscord()
    async with fake.client() as client:
        await client.create_message(10, "<@5>", allowed_mentions={"users": [5]})
    assert fake.seen[0].json["allowed_mentions"] == {"users": ["5"]}


async def test_reaction_emoji_is_url_encoded() -> None:
    fake = FakeDiscord(lambda request: ok(status=204))
    async with fake.client() as client:
        await client.add_reaction(1, 2, "👍")
        await client.add_reaction(1, 2, "blob:123")
    unicode, custom = fake.seen
    assert unicode.method == "PUT"
    assert unicode.raw_path == "/api/v10/channels/1/messages/2/reactions/%F0%9F%91%8D/@me"
    assert custom.raw_path == "/api/v10/channels/1/messages/2/reactions/blob:123/@me"


async def test_other_endpoints_use_discords_paths() -> None:
    fake = FakeDiscord(lambda request: ok([] if request.method == "GET" else {"id": "7"}))
    async with fake.client() as client:
        await client.get_channel_messages(5, after=3, limit=500)
        await client.get_reactions(5, 6, "🎉")
        await client.start_thread_from_message(5, 6, "topic")
        await client.create_dm(42)
        with pytest.raises(ValueError, match="mutually exclusive"):
            await client.get_channel_messages(5, after=1, before=2)
    history, reactions, thread, dm = fake.seen
    assert history.path == "/api/v10/channels/5/messages"
    assert history.query == {"after": "3", "limit": "100"}
    assert reactions.raw_path.startswith("/api/v10/channels/5/messages/6/reactions/%F0%9F%8E%89")
    assert (thread.method, thread.path, thread.json) == (
        "POST",
        "/api/v10/channels/5/messages/6/threads",
        {"name": "topic"},
    )
    assert (dm.path, dm.json) == ("/api/v10/users/@me/channels", {"recipient_id": "42"})


async def test_typing_posts_to_the_channel() -> None:
    fake = FakeDiscord(lambda request: ok(status=204))
    async with fake.client() as client:
        await client.trigger_typing(3)
    assert (fake.seen[0].method, fake.seen[0].path) == ("POST", "/api/v10/channels/3/typing")


# ---- per-route buckets ----------------------------------------------------------------------


async def test_remaining_zero_waits_for_reset_after(autojump_clock: trio.abc.Clock) -> None:
    fake = FakeDiscord(lambda request: ok({"id": "1"}, headers=limits("msgs", 5, 0, 3.0)))
    async with fake.client() as client:
        await client.create_message(1, "a")
        await client.create_message(1, "b")
    first, second = fake.seen
    assert second.at - first.at == pytest.approx(3.0)


async def test_bucket_is_learned_and_separated_by_major_parameter(
    autojump_clock: trio.abc.Clock,
) -> None:
    counts: dict[str, int] = {}

    def respond(request: httpx.Request) -> httpx.Response:
        channel = request.url.path.split("/")[4]
        counts[channel] = counts.get(channel, 0) + 1
        return ok({"id": "1"}, headers=limits("msgs", 2, 2 - counts[channel], 5.0))

    fake = FakeDiscord(respond)
    async with fake.client() as client, trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(client.create_message, 1, "x")
        await trio.sleep(0.5)
        await client.create_message(2, "other channel")
    times_1 = [s.at for s in fake.seen if s.path.endswith("/channels/1/messages")]
    times_2 = [s.at for s in fake.seen if s.path.endswith("/channels/2/messages")]
    # Two fit in channel 1's window; the third waits for its reset at t=5.
    assert times_1[:2] == [0.0, 0.0]
    assert times_1[2] == pytest.approx(5.0)
    # Channel 2 has its own bucket for the same route: it is not held up by channel 1.
    assert times_2 == [pytest.approx(0.5)]


async def test_routes_sharing_a_bucket_hash_share_its_limit(autojump_clock: trio.abc.Clock) -> None:
    # Discord may put two routes in one bucket; the shared hash tells us, not the path.
    sent = 0

    def respond(request: httpx.Request) -> httpx.Response:
        nonlocal sent
        sent += 1
        reset_after = 10.0 - trio.current_time()
        headers = limits("react", 3, max(0, 3 - sent), reset_after)
        if request.method == "GET":
            return ok([], headers=headers)
        return ok(status=204, headers=headers)

    fake = FakeDiscord(respond)
    async with fake.client() as client:
        await client.add_reaction(1, 2, "a")
        await client.get_reactions(1, 2, "a")
        await client.add_reaction(1, 2, "b")
        # Both routes now map to the "react" bucket, which the three requests emptied.
        await client.get_reactions(1, 2, "b")
    assert [s.at for s in fake.seen] == [0.0, 0.0, 0.0, pytest.approx(10.0)]


async def test_one_request_at_a_time_on_an_unseen_bucket(autojump_clock: trio.abc.Clock) -> None:
    sent = 0

    def respond(request: httpx.Request) -> httpx.Response:
        nonlocal sent
        sent += 1
        return ok({"id": "1"}, headers=limits("msgs", 10, 10 - sent, 10.0))

    fake = FakeDiscord(respond, latency=1.0)
    async with fake.client() as client, trio.open_nursery() as nursery:
        for _ in range(4):
            nursery.start_soon(client.create_message, 1, "x")
    starts = sorted(s.at for s in fake.seen)
    # The first goes alone; once its answer names the bucket, the rest go together.
    assert starts == [0.0, 1.0, 1.0, 1.0]


async def test_global_limit_of_50_per_second_is_kept(autojump_clock: trio.abc.Clock) -> None:
    fake = FakeDiscord(lambda request: ok([]))
    async with fake.client() as client, trio.open_nursery() as nursery:
        for channel in range(120):
            nursery.start_soon(client.get_channel_messages, channel + 1)
    times = sorted(s.at for s in fake.seen)
    assert len(times) == 120
    for i, start in enumerate(times):
        in_window = [t for t in times[i:] if t < start + 1.0]
        assert len(in_window) <= 50
    assert times[-1] >= 2.0


async def test_a_burst_never_exceeds_50_arrivals_in_any_second_whatever_the_delays(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Discord counts a request when it arrives: here each takes a varying time to get there
    # and to come back, so send times alone would not keep arrivals under the limit.
    rng = random.Random(7)
    arrivals: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.sleep(rng.uniform(0.0, 0.08))  # on its way to Discord
        arrivals.append(trio.current_time())
        await trio.sleep(rng.uniform(0.0, 0.08))  # the answer on its way back
        return ok([])

    http = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    async with RestClient(API, TOKEN, client=http) as client, trio.open_nursery() as nursery:
        for channel in range(200):
            nursery.start_soon(client.get_channel_messages, channel + 1)
    arrivals.sort()
    assert len(arrivals) == 200
    busiest = max(bisect.bisect_left(arrivals, start + 1.0) - i for i, start in enumerate(arrivals))
    assert 40 <= busiest <= 50  # kept under the limit, yet not far under it
    assert arrivals[-1] < 6.0  # still about 48 a second


async def test_typing_is_skipped_rather_than_wait_for_the_global_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    fake = FakeDiscord(lambda request: ok({"id": "1"}))
    async with fake.client() as client:
        first = trio.current_time()
        for _ in range(rest.GLOBAL_BUDGET):
            await client.get_current_user()
        start = trio.current_time()
        await client.trigger_typing(7)  # the global limit is used up: not sent, not waited
        assert trio.current_time() == start
        assert [s.path for s in fake.seen].count("/api/v10/channels/7/typing") == 0
        await client.get_current_user()  # an answer waits for its slot instead
        assert trio.current_time() >= first + 1.0  # a window after the first answer
        await trio.sleep(1.0)  # every slot free again: typing goes
        await client.trigger_typing(7)
    assert fake.seen[-1].path == "/api/v10/channels/7/typing"


# ---- 429 --------------------------------------------------------------------------------------


async def test_route_429_is_waited_out_and_the_reply_posted_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    posted: list[str] = []
    answers = iter([too_many(2.0, scope="user")])

    def respond(request: httpx.Request) -> httpx.Response:
        answer = next(answers, None)
        if answer is not None:
            return answer
        posted.append(orjson.loads(request.content)["content"])
        return ok({"id": "1"}, headers=limits("msgs", 5, 4, 5.0))

    sink = RecordingSink()
    fake = FakeDiscord(respond)
    async with fake.client(sink) as client:
        result = await client.create_message(1, "answer", reply_to=9)
    assert result == {"id": "1"}
    assert posted == ["answer"]
    assert len(fake.seen) == 2
    assert fake.seen[1].at - fake.seen[0].at == pytest.approx(2.0)
    assert fake.seen[0].json["nonce"] == fake.seen[1].json["nonce"]
    (event,) = sink.of("rest")
    assert event["outcome"] == "rate_limited"
    assert event["scope"] == "user"
    assert client.invalid_request_count() == 1


async def test_route_429_holds_back_that_bucket_only(autojump_clock: trio.abc.Clock) -> None:
    limited = {"done": False}

    def respond(request: httpx.Request) -> httpx.Response:
        if "/channels/1/" in request.url.path and not limited["done"]:
            limited["done"] = True
            return too_many(4.0, scope="user")
        return ok({"id": "1"}, headers=limits("msgs", 5, 4, 5.0))

    fake = FakeDiscord(respond)
    async with fake.client() as client, trio.open_nursery() as nursery:
        nursery.start_soon(client.create_message, 1, "limited")
        await trio.sleep(1.0)
        await client.create_message(2, "free")
    free = [s.at for s in fake.seen if "/channels/2/" in s.path]
    assert free == [pytest.approx(1.0)]
    retried = [s.at for s in fake.seen if "/channels/1/" in s.path]
    assert retried == [0.0, pytest.approx(4.0)]


async def test_global_429_pauses_every_request(autojump_clock: trio.abc.Clock) -> None:
    state = {"limited": False}

    def respond(request: httpx.Request) -> httpx.Response:
        if not state["limited"]:
            state["limited"] = True
            return too_many(3.0, scope="global", is_global=True)
        return ok({"id": "1"})

    sink = RecordingSink()
    fake = FakeDiscord(respond)
    async with fake.client(sink) as client, trio.open_nursery() as nursery:
        nursery.start_soon(client.create_message, 1, "first")
        await trio.sleep(0.5)
        await client.get_current_user()
    other = [s.at for s in fake.seen if s.path.endswith("/users/@me")]
    assert other == [pytest.approx(3.0)]
    assert sink.of("rest")[0]["is_global"] is True


async def test_shared_429_is_waited_out_and_not_counted_as_invalid(
    autojump_clock: trio.abc.Clock,
) -> None:
    answers = iter([too_many(7.0, scope="shared")])
    fake = FakeDiscord(lambda request: next(answers, None) or ok({"id": "1"}))
    async with fake.client() as client:
        await client.create_message(1, "x")
    assert fake.seen[1].at == pytest.approx(7.0)
    assert client.invalid_request_count() == 0


async def test_429_without_discord_json_pauses_everything(autojump_clock: trio.abc.Clock) -> None:
    # A proxy or Cloudflare page: HTML, only a Retry-After header.
    answers = iter(
        [httpx.Response(429, content=b"<html>slow down</html>", headers={"Retry-After": "4"})]
    )
    fake = FakeDiscord(lambda request: next(answers, None) or ok({"id": "1"}))
    async with fake.client() as client:
        await client.get_gateway_bot()
    assert fake.seen[1].at == pytest.approx(4.0)


async def test_a_long_429_streak_is_waited_out_and_the_message_posted_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    # SPEC 4: however many 429s come, the request is resent after each wait; never dropped.
    streak = 40
    answers = iter([too_many(2.0, scope="user") for _ in range(streak)])
    fake = FakeDiscord(lambda request: next(answers, None) or ok({"id": "77"}))
    async with fake.client() as client:
        result = await client.create_message(1, "x", nonce="n1")
    assert result["id"] == "77"
    assert len(fake.seen) == streak + 1
    # Each resend waited out the retry_after it was given.
    assert fake.seen[-1].at == pytest.approx(2.0 * streak)
    bodies = {r.json["nonce"] for r in fake.seen}
    assert bodies == {"n1"}


async def test_endless_429_stops_only_at_the_invalid_request_guard(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ratelimit, "INVALID_REFUSE_AT", 50)
    fake = FakeDiscord(lambda request: too_many(1.0, scope="user"))
    async with fake.client() as client:
        with pytest.raises(InvalidRequestGuardError):
            await client.create_message(1, "x")
    assert len(fake.seen) == 50


# ---- 5xx and 4xx ----------------------------------------------------------------------------


async def test_5xx_is_retried_with_backoff_then_succeeds(autojump_clock: trio.abc.Clock) -> None:
    answers = iter([ok({"message": "oops"}, status=500), ok({"message": "oops"}, status=502)])
    fake = FakeDiscord(lambda request: next(answers, None) or ok({"id": "1"}))
    async with fake.client() as client:
        assert await client.get_current_user() == {"id": "1"}
    gaps = [b.at - a.at for a, b in zip(fake.seen, fake.seen[1:], strict=False)]
    assert len(fake.seen) == 3
    assert gaps[0] >= rest.SERVER_BACKOFF_BASE
    assert gaps[1] >= 2 * rest.SERVER_BACKOFF_BASE


async def test_5xx_retries_are_bounded(autojump_clock: trio.abc.Clock) -> None:
    fake = FakeDiscord(lambda request: ok({"message": "down"}, status=503))
    async with fake.client() as client:
        with pytest.raises(DiscordHTTPError) as caught:
            await client.get_current_user()
    assert caught.value.status == 503
    assert len(fake.seen) == 1 + rest.MAX_SERVER_RETRIES


async def test_network_errors_are_retried_then_reported(autojump_clock: trio.abc.Clock) -> None:
    def respond(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    fake = FakeDiscord(respond)
    async with fake.client() as client:
        with pytest.raises(DiscordHTTPError) as caught:
            await client.get_current_user()
    assert caught.value.status == 0
    assert len(fake.seen) == 1 + rest.MAX_SERVER_RETRIES


async def test_posted_message_appears_once_when_a_5xx_follows_processing(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Discord stored the message, then the answer was lost as a 502; the resend carries the
    # same nonce with enforce_nonce, so Discord returns the stored message instead of a copy.
    stored: dict[str, dict[str, Any]] = {}
    failed = {"done": False}

    def respond(request: httpx.Request) -> httpx.Response:
        body = orjson.loads(request.content)
        assert body["enforce_nonce"] is True
        message = stored.setdefault(
            body["nonce"], {"id": str(len(stored) + 1), "content": body["content"]}
        )
        if not failed["done"]:
            failed["done"] = True
            return ok({"message": "Bad Gateway"}, status=502)
        return ok(message)

    fake = FakeDiscord(respond)
    async with fake.client() as client:
        result = await client.create_message(1, "exactly once", reply_to=3)
    assert len(stored) == 1
    assert result == {"id": "1", "content": "exactly once"}
    assert len(fake.seen) == 2


async def test_4xx_is_raised_without_retry() -> None:
    sink = RecordingSink()
    fake = FakeDiscord(
        lambda request: ok({"message": "Unknown Channel", "code": 10003}, status=404)
    )
    async with fake.client(sink) as client:
        with pytest.raises(DiscordHTTPError) as caught:
            await client.create_message(1, "x")
    assert (caught.value.status, caught.value.code, caught.value.message) == (
        404,
        10003,
        "Unknown Channel",
    )
    assert len(fake.seen) == 1
    assert sink.of("rest")[-1]["status"] == 404
    # 404 is not one of Discord's invalid statuses.
    assert client.invalid_request_count() == 0


async def test_403_counts_as_invalid() -> None:
    fake = FakeDiscord(lambda request: ok({"message": "Missing Access", "code": 50001}, status=403))
    async with fake.client() as client:
        with pytest.raises(DiscordHTTPError):
            await client.create_message(1, "x")
    assert client.invalid_request_count() == 1


async def test_401_is_fatal_and_stops_every_later_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    fake = FakeDiscord(lambda request: ok({"message": "401: Unauthorized", "code": 0}, status=401))
    async with fake.client() as client:
        with pytest.raises(FatalDiscordError) as first:
            await client.get_current_user()
        with pytest.raises(FatalDiscordError):
            await client.create_message(1, "x")
    assert len(fake.seen) == 1
    assert TOKEN not in str(first.value)
    assert "SECRET" not in caplog.text


async def test_invalid_request_guard_refuses_before_discords_ban(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ratelimit, "INVALID_REFUSE_AT", 10)
    monkeypatch.setattr(ratelimit, "INVALID_WARN_AT", 5)
    sink = RecordingSink()
    fake = FakeDiscord(
        lambda request: ok({"message": "Missing Permissions", "code": 50013}, status=403)
    )
    async with fake.client(sink) as client:
        for _ in range(10):
            with pytest.raises(DiscordHTTPError):
                await client.create_message(1, "x")
        with pytest.raises(InvalidRequestGuardError, match="refusing to send"):
            await client.create_message(1, "x")
        assert len(fake.seen) == 10
        assert [e["count"] for e in sink.of("rest") if e["outcome"] == "invalid_requests"] == [5]
        # The window rolls: ten minutes later requests flow again.
        await trio.sleep(rest.INVALID_WINDOW + 1)
        with pytest.raises(DiscordHTTPError) as caught:
            await client.create_message(1, "x")
        assert not isinstance(caught.value, InvalidRequestGuardError)
    assert len(fake.seen) == 11


async def test_own_connections_are_closed_on_exit() -> None:
    client = RestClient(API, TOKEN)
    async with client:
        pass
    with pytest.raises(DiscordHTTPError, match="closed"):
        await client.get_gateway_bot()


async def test_a_client_handed_in_is_left_open() -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(lambda request: httpx.Response(204)))
    async with RestClient(API, TOKEN, client=http):
        pass
    assert not http.is_closed
    await http.aclose()


async def test_interaction_responses_never_wait_for_the_global_limit(
    autojump_clock: trio.abc.Clock,
) -> None:
    fake = FakeDiscord(lambda request: ok({"id": "1"}))
    async with fake.client() as client:
        first = trio.current_time()
        for _ in range(rest.GLOBAL_BUDGET):
            await client.get_current_user()
        start = trio.current_time()
        # Discord does not count interaction endpoints against the global limit.
        await client.create_interaction_response(5, "tok", {"type": 5})
        await client.edit_original_interaction_response(9, "tok", {"content": "done"})
        assert trio.current_time() == start
        await client.get_current_user()  # anything else waits for its slot
        assert trio.current_time() >= first + 1.0  # a window after the first answer
