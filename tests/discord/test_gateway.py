"""The gateway actor end to end over real loopback sockets, under the autojump clock."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs
import pytest
import trio

from picortex.discord.gateway import GatewayActor, build_gateway_url
from picortex.discord.protocol import DEFAULT_INTENTS, FATAL_CLOSE_CODES, RESUME_CLOSE_CODE
from picortex.errors import FatalDiscordError
from tests.discord.fake_gateway import FakeGateway, FakeRest
from tests.helpers import RecordingSink

TOKEN = "sim-token"


@attrs.define
class Bot:
    """A running actor and what it handed on."""

    actor: GatewayActor
    gateway: FakeGateway
    rest: FakeRest
    sink: RecordingSink
    dispatched: list[tuple[str, Any]]
    errors: list[BaseException]
    scope: trio.CancelScope

    def names(self) -> list[str]:
        return [name for name, _ in self.dispatched]

    def message_contents(self) -> list[str]:
        return [d["content"] for name, d in self.dispatched if name == "MESSAGE_CREATE"]

    def gateway_events(self, action: str) -> list[dict[str, Any]]:
        return [e for e in self.sink.of("gateway") if e["action"] == action]


async def wait_until(check: Callable[[], bool], timeout: float = 600.0) -> None:
    """Poll in virtual time until `check()` holds."""
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.05)


@asynccontextmanager
async def running_bot(
    *,
    gateway: FakeGateway | None = None,
    rest: FakeRest | None = None,
    token: str = TOKEN,
    on_dispatch: Callable[[str, Any], None] | None = None,
    **actor_kwargs: Any,
) -> AsyncIterator[Bot]:
    gw = gateway or FakeGateway(token=TOKEN)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(gw.serve)
        api = rest or FakeRest(url)
        api.url = url
        sink = RecordingSink()
        got: list[tuple[str, Any]] = []

        def record(name: str, data: Any) -> None:
            got.append((name, data))
            if on_dispatch is not None:
                on_dispatch(name, data)

        actor = GatewayActor(token, api, sink, record, **actor_kwargs)
        errors: list[BaseException] = []

        async def run_actor(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                try:
                    await actor.run(task_status=_Relay(task_status, scope))
                except FatalDiscordError as exc:
                    errors.append(exc)

        scope = await nursery.start(run_actor)
        yield Bot(actor, gw, api, sink, got, errors, scope)
        nursery.cancel_scope.cancel()


class _Relay:
    """Passes `started()` on with the actor's cancel scope."""

    def __init__(self, status: trio.TaskStatus[trio.CancelScope], scope: trio.CancelScope) -> None:
        self._status = status
        self._scope = scope

    def started(self, value: object = None) -> None:
        self._status.started(self._scope)


def client_payloads(gw: FakeGateway, op: int) -> list[dict[str, Any]]:
    return [p for p in gw.received if p.get("op") == op]


# -- connect and identify -------------------------------------------------------------------


async def test_connects_identifies_with_shard_and_reaches_ready(autojump_clock: Any) -> None:
    async with running_bot(shard=(1, 3)) as bot:
        identify = client_payloads(bot.gateway, 2)
        assert len(identify) == 1
        d = identify[0]["d"]
        assert d["shard"] == [1, 3]
        assert d["intents"] == DEFAULT_INTENTS
        assert d["compress"] is False
        assert d["token"] == TOKEN
        assert set(d["properties"]) == {"os", "browser", "device"}
        assert bot.names() == ["READY"]
        status = bot.actor.status()
        assert status.state == "ready"
        assert status.session_id is not None and status.session_id.startswith("session-")
        assert status.seq == 1
        assert status.shard == (1, 3)
        assert status.resume_gateway_url == bot.gateway.url
        query = dict(parse_qsl(urlsplit(bot.gateway.urls[0]).query))
        assert query == {"v": "10", "encoding": "json", "compress": "zstd-stream"}
        assert [e["action"] for e in bot.sink.of("gateway")][:3] == [
            "connect",
            "identify",
            "ready",
        ]
        assert all(TOKEN not in repr(e) for e in bot.sink.events)
        await trio.sleep(120)
        assert bot.gateway.gateway_stats["heartbeats"] >= 2
        assert bot.actor.status().heartbeat_latency_ms is not None


def test_build_gateway_url_sets_version_encoding_and_compression() -> None:
    assert (
        build_gateway_url("wss://gateway.discord.gg", "zlib-stream")
        == "wss://gateway.discord.gg/?v=10&encoding=json&compress=zlib-stream"
    )
    assert (
        build_gateway_url("wss://g.example/?v=6&x=1", None)
        == "wss://g.example/?x=1&v=10&encoding=json"
    )


# -- resume with replay -----------------------------------------------------------------------


async def test_drop_resumes_and_replays_every_missed_message_once(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        gw = bot.gateway
        for i in range(5):
            await gw.post_user_message(10, 20, f"before {i}")
        await wait_until(lambda: len(bot.message_contents()) == 5)
        await gw.drop_connections()
        for i in range(5):
            await gw.post_user_message(10, 20, f"during {i}")
        await wait_until(lambda: "RESUMED" in bot.names())
        for i in range(3):
            await gw.post_user_message(10, 20, f"after {i}")
        await wait_until(lambda: len(bot.message_contents()) >= 13)
        await trio.sleep(5)
        expected = (
            [f"before {i}" for i in range(5)]
            + [f"during {i}" for i in range(5)]
            + [f"after {i}" for i in range(3)]
        )
        assert bot.message_contents() == expected
        assert gw.gateway_stats["identifies"] == 1
        assert gw.gateway_stats["resumes"] == 1
        resume = client_payloads(gw, 6)[0]["d"]
        assert resume["seq"] == 6 and resume["token"] == TOKEN
        assert bot.gateway_events("resumed")[0]["replayed"] == 5
        reconnect = bot.gateway_events("reconnect")[0]
        assert reconnect["resume"] is True
        assert bot.gateway_events("close")[0]["code"] == 1006
        assert bot.actor.status().reconnects == 1


async def test_op7_reconnect_closes_with_a_resume_code_and_resumes(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        gw = bot.gateway
        await gw.post_user_message(10, 20, "one")
        await gw.send_reconnect()
        await gw.post_user_message(10, 20, "two")
        await wait_until(lambda: "RESUMED" in bot.names())
        await gw.post_user_message(10, 20, "three")
        await wait_until(lambda: len(bot.message_contents()) == 3)
        assert bot.message_contents() == ["one", "two", "three"]
        assert gw.client_close_codes[0] == RESUME_CLOSE_CODE
        assert gw.gateway_stats["identifies"] == 1
        assert gw.gateway_stats["resumes"] == 1
        assert "op 7" in bot.gateway_events("reconnect")[0]["reason"]
        assert bot.gateway_events("reconnect_requested")


async def test_op9_resumable_resumes(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        await bot.gateway.invalidate_session(True)
        await wait_until(lambda: "RESUMED" in bot.names())
        assert bot.gateway.gateway_stats["identifies"] == 1
        assert bot.gateway_events("invalid_session")[0]["resumable"] is True


async def test_op9_not_resumable_identifies_afresh_after_one_to_five_seconds(
    autojump_clock: Any,
) -> None:
    async with running_bot() as bot:
        first = bot.actor.status().session_id
        await bot.gateway.invalidate_session(False)
        await wait_until(lambda: bot.names().count("READY") == 2)
        assert bot.gateway.gateway_stats["identifies"] == 2
        assert bot.gateway.gateway_stats["resumes"] == 0
        assert bot.actor.status().session_id not in (None, first)
        delay = bot.gateway_events("reconnect")[0]["delay"]
        assert 1.0 <= delay <= 5.0
        times = bot.gateway.identify_times
        assert times[1] - times[0] >= 5.0  # max_concurrency 1: one identify per 5 s


@pytest.mark.parametrize("code", [4007, 4009])
async def test_invalid_seq_and_session_timeout_identify_afresh(
    autojump_clock: Any, code: int
) -> None:
    async with running_bot() as bot:
        await bot.gateway.close_connections(code)
        await wait_until(lambda: bot.names().count("READY") == 2)
        assert bot.gateway.gateway_stats["resumes"] == 0
        assert bot.gateway_events("close")[0]["code"] == code


async def test_resumable_close_code_resumes(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        await bot.gateway.close_connections(4000)
        await wait_until(lambda: "RESUMED" in bot.names())
        assert bot.gateway.gateway_stats["identifies"] == 1


async def test_a_failing_resume_url_falls_back_to_identify_on_the_base_url(
    autojump_clock: Any,
) -> None:
    # Port 9 (discard) is closed on loopback: every connect to the resume URL is refused.
    gw = FakeGateway(token=TOKEN, resume_url="ws://127.0.0.1:9/")
    async with running_bot(gateway=gw) as bot:
        await gw.drop_connections()
        await wait_until(lambda: bot.names().count("READY") == 2)
        reconnects = bot.gateway_events("reconnect")
        assert [r["resume"] for r in reconnects] == [True, True, True, False]
        assert "identifying afresh" in reconnects[-1]["reason"]
        connects = bot.gateway_events("connect")
        assert [c["url"].startswith("ws://127.0.0.1:9/") for c in connects] == [
            False,
            True,
            True,
            True,
            False,
        ]
        assert gw.gateway_stats["identifies"] == 2


# -- fatal --------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(FATAL_CLOSE_CODES))
async def test_fatal_close_codes_raise_fatal_discord_error(autojump_clock: Any, code: int) -> None:
    async with running_bot() as bot:
        await bot.gateway.close_connections(code)
        await wait_until(lambda: bool(bot.errors))
        error = bot.errors[0]
        assert isinstance(error, FatalDiscordError)
        assert error.close_code == code
        assert str(code) in str(error)
        assert bot.gateway_events("fatal")[0]["code"] == code
        await trio.sleep(60)
        assert bot.gateway.gateway_stats["connections"] == 1  # no reconnect


async def test_a_bad_token_stops_before_ready(autojump_clock: Any) -> None:
    gw = FakeGateway(token="the-right-one")
    async with trio.open_nursery() as nursery:
        url = await nursery.start(gw.serve)
        actor = GatewayActor("a-wrong-token", FakeRest(url), RecordingSink(), lambda n, d: None)
        with pytest.raises(FatalDiscordError, match="4004"):
            await actor.run()
        nursery.cancel_scope.cancel()


async def test_a_401_from_rest_is_fatal(autojump_clock: Any) -> None:
    rest = FakeRest("ws://127.0.0.1:9/")
    rest.unauthorized = True
    actor = GatewayActor(TOKEN, rest, RecordingSink(), lambda n, d: None)
    with pytest.raises(FatalDiscordError, match="401"):
        await actor.run()


# -- zombie ------------------------------------------------------------------------------------


async def test_zombie_connection_is_closed_without_1000_and_resumed(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        gw = bot.gateway
        gw.set_heartbeat_ack(False)
        await wait_until(lambda: bool(bot.gateway_events("zombie")))
        gw.set_heartbeat_ack(True)
        await gw.post_user_message(10, 20, "while zombie")
        await wait_until(lambda: "RESUMED" in bot.names())
        await wait_until(lambda: bot.message_contents() == ["while zombie"])
        assert gw.client_close_codes[0] == RESUME_CLOSE_CODE
        assert gw.client_close_codes[0] not in (1000, 1001)
        assert gw.gateway_stats["identifies"] == 1


async def test_server_heartbeat_request_is_answered(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        before = bot.gateway.gateway_stats["heartbeats"]
        await bot.gateway.request_heartbeat()
        await wait_until(lambda: bot.gateway.gateway_stats["heartbeats"] == before + 1, 1.0)


# -- compression -------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", ["zlib-stream", "zstd-stream", None])
async def test_transport_compression(autojump_clock: Any, compress: str | None) -> None:
    gw = FakeGateway(token=TOKEN)
    gw.split_zlib = True  # zlib messages arrive in two pieces: the client must buffer
    async with running_bot(gateway=gw, compress=compress) as bot:
        assert bot.actor.compression == compress
        query = dict(parse_qsl(urlsplit(gw.urls[0]).query))
        assert query.get("compress") == compress
        texts = [f"message {i} " + "x" * (i * 50) for i in range(20)]
        for text in texts:
            await gw.post_user_message(10, 20, text)
        await wait_until(lambda: len(bot.message_contents()) == 20)
        assert bot.message_contents() == texts
        await gw.drop_connections()  # a new connection needs a new compression context
        await gw.post_user_message(10, 20, "after")
        await wait_until(lambda: bot.message_contents()[-1:] == ["after"])
        assert bot.actor.status().reconnects == 1


async def test_corrupt_compressed_stream_reconnects_and_resumes(autojump_clock: Any) -> None:
    async with running_bot(compress="zlib-stream") as bot:
        await bot.gateway.send_raw(b"garbage!" + b"\x00\x00\xff\xff")
        await wait_until(lambda: "RESUMED" in bot.names())
        problems = bot.gateway_events("problem")
        assert any("zlib-stream" in p["problem"] for p in problems)
        assert bot.gateway.client_close_codes[0] == RESUME_CLOSE_CODE


# -- junk, callbacks, send limit, shutdown ---------------------------------------------------


async def test_junk_frames_are_logged_and_the_connection_survives(autojump_clock: Any) -> None:
    async with running_bot(compress=None) as bot:
        await bot.gateway.send_raw("this is not json")
        await bot.gateway.send_raw('{"op": 0, "s": 2}')
        await bot.gateway.post_user_message(10, 20, "fine")
        await wait_until(lambda: bot.message_contents() == ["fine"])
        problems = [p["problem"] for p in bot.gateway_events("problem")]
        assert "frame is not valid JSON" in problems
        assert "dispatch without an event name" in problems
        assert bot.gateway.gateway_stats["connections"] == 1


async def test_a_failing_dispatch_callback_does_not_stop_the_reader(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(name: str, data: Any) -> None:
        if name == "MESSAGE_CREATE" and data["content"] == "boom":
            raise ValueError("consumer bug")

    with caplog.at_level(logging.ERROR, logger="picortex.discord.gateway"):
        async with running_bot(on_dispatch=explode) as bot:
            await bot.gateway.post_user_message(10, 20, "boom")
            await bot.gateway.post_user_message(10, 20, "ok")
            await wait_until(lambda: len(bot.message_contents()) == 2)
            assert bot.gateway_events("dispatch_error")[0]["name"] == "MESSAGE_CREATE"
    assert "on_dispatch failed" in caplog.text


async def test_commands_respect_the_send_limit(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        for i in range(250):
            await bot.actor.send_command(3, {"since": None, "activities": [], "status": "online"})
            if i % 50 == 0:
                await trio.sleep(0)
        await wait_until(lambda: len(client_payloads(bot.gateway, 3)) == 250)
        times = sorted(t for t, _ in bot.gateway.payload_times)
        worst = max(sum(1 for u in times if t - 60 < u <= t) for t in times)
        assert worst <= 120
        assert bot.gateway.gateway_stats["connections"] == 1
        assert bot.gateway.gateway_stats["heartbeats"] >= 3


async def test_cancel_closes_with_1000(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        bot.scope.cancel()
        await wait_until(lambda: bool(bot.gateway.client_close_codes))
        assert bot.gateway.client_close_codes == [1000]
        assert bot.actor.status().session_id is None


async def test_identify_waits_when_no_session_starts_remain(autojump_clock: Any) -> None:
    gw = FakeGateway(token=TOKEN)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(gw.serve)
        rest = FakeRest(url, remaining=0)
        sink = RecordingSink()
        actor = GatewayActor(TOKEN, rest, sink, lambda n, d: None)
        start = trio.current_time()
        await nursery.start(actor.run)
        waited = [e for e in sink.of("gateway") if e["action"] == "identify_wait"]
        assert waited and waited[0]["seconds"] == 3600.0
        assert gw.identify_times[0] - start >= 3600.0
        nursery.cancel_scope.cancel()


async def test_a_crashed_actor_keeps_its_session_and_resumes_on_restart(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = FakeGateway(token=TOKEN)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(gw.serve)
        got: list[str] = []
        actor = GatewayActor(TOKEN, FakeRest(url), RecordingSink(), lambda n, d: got.append(n))
        proto = actor._proto
        real_received = proto.received

        def broken(payload: object, now: float) -> Any:
            if b"crash me" in (payload if isinstance(payload, bytes) else b""):
                raise RuntimeError("a bug in the reader")
            return real_received(payload, now)

        monkeypatch.setattr(proto, "received", broken)

        async def first_run() -> None:
            with pytest.raises(RuntimeError, match="a bug in the reader"):
                await actor.run()

        nursery.start_soon(first_run)
        await wait_until(lambda: "READY" in got)
        await gw.post_user_message(10, 20, "crash me")
        await wait_until(lambda: bool(gw.client_close_codes))
        assert gw.client_close_codes == [RESUME_CLOSE_CODE]
        monkeypatch.setattr(proto, "received", real_received)
        await gw.post_user_message(10, 20, "after the crash")
        await nursery.start(actor.run)  # what a supervisor does
        await wait_until(lambda: got.count("MESSAGE_CREATE") >= 2)
        assert gw.gateway_stats["identifies"] == 1
        assert gw.gateway_stats["resumes"] == 1
        nursery.cancel_scope.cancel()
