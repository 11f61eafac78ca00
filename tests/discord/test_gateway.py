"""The gateway actor end to end against the built-in simulator, under the autojump clock.

Real loopback sockets; the simulator and the actor share one trio run, so virtual time
jumps only when both sides are idle. A few wire-level faults the simulator cannot produce
(junk frames, a corrupt or split compressed stream) use the small stand-in in fake_gateway.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs
import pytest
import trio

from picortex.discord import gateway as gateway_module
from picortex.discord.gateway import GatewayActor, IdentifyTurns, ZlibStream, build_gateway_url
from picortex.discord.protocol import DEFAULT_INTENTS, FATAL_CLOSE_CODES, RESUME_CLOSE_CODE
from picortex.discord.rest import RestClient
from picortex.errors import FatalDiscordError
from picortex.sim import DefaultWorld, Simulator
from tests.discord.fake_gateway import FakeGateway, FakeRest
from tests.helpers import RecordingSink

TOKEN = "sim-token"


class SimRest:
    """GET /gateway/bot answered straight from the simulator, with optional overrides."""

    def __init__(self, sim: Simulator, **limit: int) -> None:
        self.sim = sim
        self.limit = limit
        self.calls = 0

    async def get_gateway_bot(self) -> dict[str, Any]:
        self.calls += 1
        body = dict(self.sim.gateway.gateway_bot())
        body["session_start_limit"] = {**body["session_start_limit"], **self.limit}
        return body


@attrs.define
class Bot:
    """A running actor, its simulator and what it handed on."""

    actor: GatewayActor
    sim: Simulator
    world: DefaultWorld
    sink: RecordingSink
    dispatched: list[tuple[str, Any]]
    errors: list[BaseException]
    scope: trio.CancelScope

    def names(self) -> list[str]:
        return [name for name, _ in self.dispatched]

    def contents(self) -> list[str]:
        return [d["content"] for name, d in self.dispatched if name == "MESSAGE_CREATE"]

    def events(self, action: str) -> list[dict[str, Any]]:
        return [e for e in self.sink.of("gateway") if e["action"] == action]

    def post(self, content: str) -> None:
        self.sim.post_user_message(self.world.general_id, self.world.alice_id, content)


async def wait_until(check: Callable[[], bool], timeout: float = 600.0) -> None:
    """Poll in virtual time until `check()` holds."""
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.05)


class _Relay:
    """Passes `started()` on with the actor's cancel scope."""

    def __init__(self, status: trio.TaskStatus[trio.CancelScope], scope: trio.CancelScope) -> None:
        self._status = status
        self._scope = scope

    def started(self, value: object = None) -> None:
        self._status.started(self._scope)


@asynccontextmanager
async def running_bot(
    *,
    sim: Simulator | None = None,
    on_dispatch: Callable[[str, Any], None] | None = None,
    rest_limit: dict[str, int] | None = None,
    before_start: Callable[[Simulator], None] | None = None,
    **actor_kwargs: Any,
) -> AsyncIterator[Bot]:
    simulator = sim or Simulator(TOKEN)
    async with trio.open_nursery() as nursery:
        await nursery.start(simulator.serve)
        world = simulator.add_default_world()
        if before_start is not None:
            before_start(simulator)
        sink = RecordingSink()
        got: list[tuple[str, Any]] = []

        def record(name: str, data: Any, seq: int | None) -> None:
            got.append((name, data))
            if on_dispatch is not None:
                on_dispatch(name, data)

        rest = SimRest(simulator, **(rest_limit or {}))
        actor = GatewayActor(TOKEN, rest, sink, record, **actor_kwargs)
        errors: list[BaseException] = []

        async def run_actor(*, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
            with trio.CancelScope() as scope:
                try:
                    await actor.run(task_status=_Relay(task_status, scope))
                except FatalDiscordError as exc:
                    errors.append(exc)

        scope = await nursery.start(run_actor)
        yield Bot(actor, simulator, world, sink, got, errors, scope)
        nursery.cancel_scope.cancel()


# -- connect and identify -------------------------------------------------------------------


async def test_connects_identifies_with_shard_and_reaches_ready(autojump_clock: Any) -> None:
    async with running_bot(shard=(0, 3)) as bot:
        stats = bot.sim.gateway_stats
        assert stats.identifies == 1
        identify = stats.last_identify
        assert identify is not None
        assert identify["shard"] == [0, 3]
        assert identify["intents"] == DEFAULT_INTENTS
        assert identify["compress"] is False
        assert set(identify["properties"]) == {"os", "browser", "device"}
        assert bot.names()[0] == "READY"
        status = bot.actor.status()
        assert status.state == "ready"
        assert status.session_id is not None
        assert status.shard == (0, 3)
        assert status.resume_gateway_url == bot.sim.gateway.resume_url
        assert stats.last_connect_path is not None
        query = dict(parse_qsl(urlsplit(stats.last_connect_path).query))
        assert query == {"v": "10", "encoding": "json", "compress": "zstd-stream"}
        assert [e["action"] for e in bot.sink.of("gateway")][:3] == ["connect", "identify", "ready"]
        assert all(TOKEN not in repr(e) for e in bot.sink.events)
        await trio.sleep(120)
        assert bot.sim.gateway_stats.heartbeats >= 2
        assert bot.sim.gateway_stats.heartbeat_timeouts == 0
        assert bot.actor.status().heartbeat_latency_ms is not None


async def test_the_gateway_url_comes_from_the_rest_client(autojump_clock: Any) -> None:
    sim = Simulator(TOKEN)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(sim.serve)
        sink = RecordingSink()
        async with RestClient(urls.api_base, TOKEN) as rest:
            actor = GatewayActor(TOKEN, rest, sink, lambda n, d, s: None)
            await nursery.start(actor.run)
            connect = sink.of("gateway")[0]
            assert connect["url"].startswith(urls.gateway_url)
            assert sim.gateway_stats.ready_sessions == 1
            nursery.cancel_scope.cancel()


async def test_a_401_from_rest_is_fatal(autojump_clock: Any) -> None:
    sim = Simulator(TOKEN)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(sim.serve)
        async with RestClient(urls.api_base, "not-the-token") as rest:
            actor = GatewayActor("not-the-token", rest, RecordingSink(), lambda n, d, s: None)
            with pytest.raises(FatalDiscordError):
                await actor.run()
        assert sim.gateway_stats.connections == 0
        nursery.cancel_scope.cancel()


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
        for i in range(5):
            bot.post(f"before {i}")
        await wait_until(lambda: len(bot.contents()) == 5)
        seq_before = bot.actor.status().seq
        bot.sim.drop_connections()
        for i in range(5):
            bot.post(f"during {i}")
        await wait_until(lambda: "RESUMED" in bot.names())
        for i in range(3):
            bot.post(f"after {i}")
        await wait_until(lambda: len(bot.contents()) >= 13)
        await trio.sleep(5)
        expected = (
            [f"before {i}" for i in range(5)]
            + [f"during {i}" for i in range(5)]
            + [f"after {i}" for i in range(3)]
        )
        assert bot.contents() == expected
        stats = bot.sim.gateway_stats
        assert stats.identifies == 1
        assert stats.resumes == 1
        assert stats.resume_url_connections == 1
        assert bot.events("resume")[0]["seq"] == seq_before
        assert bot.events("resumed")[0]["replayed"] == 5
        assert bot.events("reconnect")[0]["resume"] is True
        assert bot.events("close")[0]["code"] == 1006
        assert bot.actor.status().reconnects == 1


async def test_op7_reconnect_closes_with_a_resume_code_and_resumes(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        bot.post("one")
        bot.sim.send_reconnect(close_after=None)
        bot.post("two")
        await wait_until(lambda: "RESUMED" in bot.names())
        bot.post("three")
        await wait_until(lambda: len(bot.contents()) == 3)
        assert bot.contents() == ["one", "two", "three"]
        stats = bot.sim.gateway_stats
        assert stats.client_close_codes == (RESUME_CLOSE_CODE,)
        assert stats.identifies == 1
        assert stats.resumes == 1
        assert "op 7" in bot.events("reconnect")[0]["reason"]
        assert bot.events("reconnect_requested")


async def test_op9_resumable_resumes(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        bot.sim.invalidate_session(True)
        await wait_until(lambda: "RESUMED" in bot.names())
        assert bot.sim.gateway_stats.identifies == 1
        assert bot.events("invalid_session")[0]["resumable"] is True


async def test_op9_not_resumable_identifies_afresh_within_the_identify_limit(
    autojump_clock: Any,
) -> None:
    sim = Simulator(TOKEN, limit_identify_concurrency=True)  # a 2nd IDENTIFY within 5 s gets op 9
    async with running_bot(sim=sim) as bot:
        first = bot.actor.status().session_id
        bot.post("lost with the session")
        bot.sim.invalidate_session(False)
        await wait_until(lambda: bot.names().count("READY") == 2)
        stats = bot.sim.gateway_stats
        assert stats.identifies == 2
        assert stats.resumes == 0
        assert bot.actor.status().session_id not in (None, first)
        delay = bot.events("reconnect")[0]["delay"]
        assert 1.0 <= delay <= 5.0
        assert bot.events("invalid_session") == [
            {"event": "gateway", "action": "invalid_session", "resumable": False}
        ]
        bot.post("new session")
        await wait_until(lambda: bot.contents()[-1:] == ["new session"])


@pytest.mark.parametrize("code", [4007, 4009])
async def test_invalid_seq_and_session_timeout_identify_afresh(
    autojump_clock: Any, code: int
) -> None:
    async with running_bot() as bot:
        bot.sim.close_connections(code)
        await wait_until(lambda: bot.names().count("READY") == 2)
        assert bot.sim.gateway_stats.resumes == 0
        assert bot.events("close")[0]["code"] == code


@pytest.mark.parametrize("code", [4000, 4002, 4008])
async def test_resumable_close_codes_resume(autojump_clock: Any, code: int) -> None:
    async with running_bot() as bot:
        bot.sim.close_connections(code)
        await wait_until(lambda: "RESUMED" in bot.names())
        assert bot.sim.gateway_stats.identifies == 1


async def test_a_failing_resume_url_falls_back_to_identify_on_the_base_url(
    autojump_clock: Any,
) -> None:
    def dead_resume_url(sim: Simulator) -> None:
        # Port 9 (discard) is closed on loopback: every connect to it is refused.
        sim.gateway.resume_url = "ws://127.0.0.1:9/resume"

    async with running_bot(before_start=dead_resume_url) as bot:
        bot.sim.drop_connections()
        await wait_until(lambda: bot.names().count("READY") == 2)
        reconnects = bot.events("reconnect")
        assert [r["resume"] for r in reconnects] == [True, True, True, False]
        assert "identifying afresh" in reconnects[-1]["reason"]
        to_dead = [c["url"].startswith("ws://127.0.0.1:9/") for c in bot.events("connect")]
        assert to_dead == [False, True, True, True, False]
        assert bot.sim.gateway_stats.identifies == 2


async def test_reconnect_backoff_grows_while_connects_fail(autojump_clock: Any) -> None:
    def dead_resume_url(sim: Simulator) -> None:
        sim.gateway.resume_url = "ws://127.0.0.1:9/resume"

    async with running_bot(before_start=dead_resume_url) as bot:
        bot.sim.drop_connections()
        await wait_until(lambda: bot.names().count("READY") == 2)
        delays = [r["delay"] for r in bot.events("reconnect")]
        # Attempt n waits base * 2**(n-1) times a jitter in [0.5, 1].
        for n, delay in enumerate(delays[:3]):
            assert 0.5 * 2**n <= delay <= 2**n


# -- fatal --------------------------------------------------------------------------------------


@pytest.mark.parametrize("code", sorted(FATAL_CLOSE_CODES))
async def test_fatal_close_codes_raise_fatal_discord_error(autojump_clock: Any, code: int) -> None:
    async with running_bot() as bot:
        bot.sim.close_connections(code)
        await wait_until(lambda: bool(bot.errors))
        error = bot.errors[0]
        assert isinstance(error, FatalDiscordError)
        assert error.close_code == code
        assert str(code) in str(error)
        assert bot.events("fatal")[0]["code"] == code
        await trio.sleep(60)
        assert bot.sim.gateway_stats.connections == 1  # never reconnects


@pytest.mark.parametrize(
    ("sim_kwargs", "token", "code"),
    [
        ({}, "a-wrong-token", 4004),
        ({"allowed_privileged_intents": 0}, TOKEN, 4014),
        ({"required_shards": 2}, TOKEN, 4011),
    ],
)
async def test_discord_refusing_identify_stops_before_ready(
    autojump_clock: Any, sim_kwargs: dict[str, Any], token: str, code: int
) -> None:
    sim = Simulator(TOKEN, **sim_kwargs)
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        actor = GatewayActor(token, SimRest(sim), RecordingSink(), lambda n, d, s: None)
        with pytest.raises(FatalDiscordError) as info:
            await actor.run()
        assert info.value.close_code == code
        assert str(code) in str(info.value)
        nursery.cancel_scope.cancel()


# -- zombie and heartbeats -------------------------------------------------------------------


async def test_zombie_connection_is_closed_without_1000_and_resumed(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        bot.sim.set_heartbeat_ack(False)
        await wait_until(lambda: bool(bot.events("zombie")))
        bot.sim.set_heartbeat_ack(True)
        bot.post("while zombie")
        await wait_until(lambda: "RESUMED" in bot.names())
        await wait_until(lambda: bot.contents() == ["while zombie"])
        stats = bot.sim.gateway_stats
        assert stats.client_close_codes == (RESUME_CLOSE_CODE,)
        assert stats.identifies == 1
        assert stats.resumes == 1


async def test_server_heartbeat_request_is_answered_at_once(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        before = bot.sim.gateway_stats.heartbeats
        bot.sim.request_heartbeat()
        await wait_until(lambda: bot.sim.gateway_stats.heartbeats == before + 1, 1.0)


# -- compression -------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", ["zlib-stream", "zstd-stream", None])
async def test_transport_compression(autojump_clock: Any, compress: str | None) -> None:
    async with running_bot(compress=compress) as bot:
        path = bot.sim.gateway_stats.last_connect_path
        assert path is not None
        assert dict(parse_qsl(urlsplit(path).query)).get("compress") == compress
        texts = [f"message {i} " + "x" * (i * 50) for i in range(20)]
        for text in texts:
            bot.post(text)
        await wait_until(lambda: len(bot.contents()) == 20)
        assert bot.contents() == texts
        bot.sim.drop_connections()  # a new connection needs a new decompression context
        bot.post("after")
        await wait_until(lambda: bot.contents()[-1:] == ["after"])
        await bot.sim.blast(500, channels=5, size=1024)
        await wait_until(lambda: len(bot.contents()) == 521)


def test_zlib_stream_buffers_until_the_sync_flush_suffix() -> None:
    import zlib

    packer = zlib.compressobj()
    stream = ZlibStream()
    for text in (b'{"op":11}', b'{"op":0,"t":"X","s":1,"d":{"a":"' + b"y" * 3000 + b'"}}'):
        data = packer.compress(text) + packer.flush(zlib.Z_SYNC_FLUSH)
        assert stream.feed(data[:3]) is None
        assert stream.feed(data[3:-4]) is None
        assert stream.feed(data[-4:]) == text


# -- send limit, callbacks, shutdown, pacing, restarts ----------------------------------------


async def test_a_failing_dispatch_callback_does_not_stop_the_reader(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def explode(name: str, data: Any) -> None:
        if name == "MESSAGE_CREATE" and data["content"] == "boom":
            raise ValueError("consumer bug")

    with caplog.at_level(logging.ERROR, logger="picortex.discord.gateway"):
        async with running_bot(on_dispatch=explode) as bot:
            bot.post("boom")
            bot.post("ok")
            await wait_until(lambda: len(bot.contents()) == 2)
            assert bot.events("dispatch_error")[0]["name"] == "MESSAGE_CREATE"
    assert "on_dispatch failed" in caplog.text


async def test_cancel_closes_with_1000_which_ends_the_session(autojump_clock: Any) -> None:
    async with running_bot() as bot:
        bot.scope.cancel()
        await wait_until(lambda: bool(bot.sim.gateway_stats.client_close_codes))
        assert bot.sim.gateway_stats.client_close_codes == (1000,)
        assert bot.actor.status().session_id is None


async def test_identify_waits_when_no_session_starts_remain(autojump_clock: Any) -> None:
    sim = Simulator(TOKEN)
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        sink = RecordingSink()
        rest = SimRest(sim, remaining=0, reset_after=3_600_000)
        actor = GatewayActor(TOKEN, rest, sink, lambda n, d, s: None)
        start = trio.current_time()
        await nursery.start(actor.run)
        waited = [e for e in sink.of("gateway") if e["action"] == "identify_wait"]
        assert waited and waited[0]["seconds"] == 3600.0
        assert trio.current_time() - start >= 3600.0
        assert sim.gateway_stats.identifies == 1
        nursery.cancel_scope.cancel()


async def test_a_crashed_actor_keeps_its_session_and_resumes_on_restart(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sim = Simulator(TOKEN)
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        world = sim.add_default_world()
        got: list[str] = []
        actor = GatewayActor(TOKEN, SimRest(sim), RecordingSink(), lambda n, d, s: got.append(n))
        proto = actor._proto
        real_received = proto.received

        def broken(payload: object, now: float) -> Any:
            if isinstance(payload, bytes) and b"crash me" in payload:
                raise RuntimeError("a bug in the reader")
            return real_received(payload, now)

        monkeypatch.setattr(proto, "received", broken)

        async def first_run() -> None:
            with pytest.raises(RuntimeError, match="a bug in the reader"):
                await actor.run()

        nursery.start_soon(first_run)
        await wait_until(lambda: "READY" in got)
        sim.post_user_message(world.general_id, world.alice_id, "crash me")
        await wait_until(lambda: bool(sim.gateway_stats.client_close_codes))
        assert sim.gateway_stats.client_close_codes == (RESUME_CLOSE_CODE,)
        monkeypatch.setattr(proto, "received", real_received)
        sim.post_user_message(world.general_id, world.alice_id, "after the crash")
        await nursery.start(actor.run)  # what a supervisor does
        await wait_until(lambda: got.count("MESSAGE_CREATE") >= 2)
        assert sim.gateway_stats.identifies == 1
        assert sim.gateway_stats.resumes == 1
        nursery.cancel_scope.cancel()


# -- wire faults the simulator cannot make (stand-in gateway) ---------------------------------


@asynccontextmanager
async def fake_bot(**actor_kwargs: Any) -> AsyncIterator[tuple[GatewayActor, FakeGateway, Any]]:
    gw = FakeGateway(token=TOKEN)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(gw.serve)
        sink = RecordingSink()
        got: list[tuple[str, Any]] = []
        actor = GatewayActor(
            TOKEN, FakeRest(url), sink, lambda n, d, s: got.append((n, d)), **actor_kwargs
        )
        await nursery.start(actor.run)
        yield actor, gw, (sink, got)
        nursery.cancel_scope.cancel()


async def test_junk_frames_are_logged_and_the_connection_survives(autojump_clock: Any) -> None:
    async with fake_bot(compress=None) as (_actor, gw, (sink, got)):
        await gw.send_raw("this is not json")
        await gw.send_raw('{"op": 0, "s": 2}')
        await gw.post_user_message(10, 20, "fine")
        await wait_until(lambda: any(n == "MESSAGE_CREATE" for n, _ in got))
        problems = [e["problem"] for e in sink.of("gateway") if e["action"] == "problem"]
        assert "frame is not valid JSON" in problems
        assert "dispatch without an event name" in problems
        assert gw.gateway_stats["connections"] == 1


async def test_split_zlib_messages_are_reassembled(autojump_clock: Any) -> None:
    async with fake_bot(compress="zlib-stream") as (_actor, gw, (_sink, got)):
        gw.split_zlib = True
        for i in range(10):
            await gw.post_user_message(10, 20, f"split {i}" + "z" * 500)
        await wait_until(lambda: sum(n == "MESSAGE_CREATE" for n, _ in got) == 10)
        contents = [d["content"][:7] for n, d in got if n == "MESSAGE_CREATE"]
        assert contents == [f"split {i}" for i in range(10)]


async def test_corrupt_compressed_stream_reconnects_and_resumes(autojump_clock: Any) -> None:
    async with fake_bot(compress="zlib-stream") as (_actor, gw, (sink, got)):
        await gw.send_raw(b"garbage!" + b"\x00\x00\xff\xff")
        await wait_until(lambda: any(n == "RESUMED" for n, _ in got))
        problems = [e["problem"] for e in sink.of("gateway") if e["action"] == "problem"]
        assert any("zlib-stream" in p for p in problems)
        assert gw.client_close_codes[0] == RESUME_CLOSE_CODE


class FlakyRest(SimRest):
    """GET /gateway/bot fails as if the network were down, `failures` times, then works."""

    def __init__(self, sim: Simulator, failures: int) -> None:
        super().__init__(sim)
        self.failures = failures

    async def get_gateway_bot(self) -> dict[str, Any]:
        if self.failures > 0:
            self.failures -= 1
            self.calls += 1
            raise OSError("network is unreachable")
        return await super().get_gateway_bot()


async def test_startup_outage_is_waited_out_with_backoff(autojump_clock: Any) -> None:
    sim = Simulator(TOKEN)
    sim.add_default_world()
    sink = RecordingSink()
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        rest = FlakyRest(sim, failures=8)
        actor = GatewayActor(TOKEN, rest, sink, lambda name, data, seq: None)
        await nursery.start(actor.run)
        failed = [e for e in sink.of("gateway") if e["action"] == "fetch_failed"]
        assert [e["attempt"] for e in failed] == list(range(1, 9))
        delays = [e["retry_in"] for e in failed]
        assert delays[0] <= 1.0 and max(delays) <= 60.0
        assert delays[-1] > delays[0]
        assert actor.status().session_id is not None
        nursery.cancel_scope.cancel()


# -- the session persisted across processes ----------------------------------------------------


class MemorySessions:
    """A SessionStore in memory: what one process leaves, the next one reads."""

    def __init__(self) -> None:
        self.saved: dict[tuple[int, int], tuple[str, str, int]] = {}
        self.writes = 0

    def gateway_session(self, shard: tuple[int, int]) -> tuple[str, str, int] | None:
        return self.saved.get(shard)

    def save_gateway_session(
        self, shard: tuple[int, int], session_id: str, url: str, seq: int, at: float
    ) -> None:
        self.writes += 1
        self.saved[shard] = (session_id, url, seq)

    def clear_gateway_session(self, shard: tuple[int, int]) -> None:
        self.saved.pop(shard, None)


async def test_a_new_process_resumes_the_persisted_session_and_gets_the_replay(
    autojump_clock: Any,
) -> None:
    sim = Simulator(TOKEN)
    sessions = MemorySessions()
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        world = sim.add_default_world()
        first: list[tuple[str, Any]] = []
        handled_up_to: list[int | None] = [None]
        actor = GatewayActor(
            TOKEN,
            SimRest(sim),
            RecordingSink(),
            lambda n, d, s: first.append((n, d)),
            sessions=sessions,
            safe_seq=lambda: handled_up_to[0],
        )
        killed = trio.CancelScope()
        nursery.start_soon(_run_in, actor, killed)
        await wait_until(lambda: any(n == "READY" for n, _ in first))
        session_id = actor.status().session_id
        assert sessions.saved[(0, 1)][0] == session_id  # saved at READY
        sim.post_user_message(world.general_id, world.alice_id, "handled before the kill")
        await wait_until(lambda: first[-1][1].get("content") == "handled before the kill")
        handled_up_to[0] = actor.seq  # the pipeline finished it
        await trio.sleep(5 * gateway_module.SESSION_SAVE_SECONDS)
        sim.post_user_message(world.general_id, world.alice_id, "caught mid-answer")
        await wait_until(lambda: first[-1][1].get("content") == "caught mid-answer")
        await trio.sleep(5 * gateway_module.SESSION_SAVE_SECONDS)
        # A SIGKILL: nothing runs on the way out, the socket just goes away.
        sim.drop_connections()
        killed.cancel()
        assert sessions.saved[(0, 1)][0] == session_id
        saves = sessions.writes
        sim.post_user_message(world.general_id, world.alice_id, "sent while it was down")

        second: list[tuple[str, Any]] = []
        rest = SimRest(sim)
        restarted = GatewayActor(
            TOKEN,
            rest,
            RecordingSink(),
            lambda n, d, s: second.append((n, d)),
            sessions=sessions,
        )
        await nursery.start(restarted.run)
        await wait_until(lambda: any(n == "RESUMED" for n, _ in second))
        assert sim.gateway_stats.identifies == 1
        assert sim.gateway_stats.resumes == 1
        # A RESUME goes to the saved resume URL: no GET /gateway/bot stands before it.
        assert rest.calls == 0
        replayed = [d["content"] for n, d in second if n == "MESSAGE_CREATE"]
        # Not the finished one; the one in hand at the kill and the one missed meanwhile.
        assert replayed == ["caught mid-answer", "sent while it was down"]
        assert saves < 20  # periodic, never per frame
        nursery.cancel_scope.cancel()


async def _run_in(actor: GatewayActor, scope: trio.CancelScope) -> None:
    with scope:
        await actor.run()


async def test_a_clean_stop_ends_the_persisted_session(autojump_clock: Any) -> None:
    sim = Simulator(TOKEN)
    sessions = MemorySessions()
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        sim.add_default_world()
        got: list[str] = []
        actor = GatewayActor(
            TOKEN, SimRest(sim), RecordingSink(), lambda n, d, s: got.append(n), sessions=sessions
        )
        stop = trio.CancelScope()
        nursery.start_soon(_run_in, actor, stop)
        await wait_until(lambda: "READY" in got)
        assert (0, 1) in sessions.saved
        stop.cancel()
        await wait_until(lambda: sessions.saved == {})
        assert sim.gateway_stats.client_close_codes == (1000,)
        nursery.cancel_scope.cancel()


async def test_shards_starting_together_take_turns_in_their_bucket(autojump_clock: Any) -> None:
    """Two shards of one bucket connect at the same moment: the second waits until the
    first's IDENTIFY is sent and its 5 s have passed, so Discord never answers op 9."""
    sim = Simulator(TOKEN, limit_identify_concurrency=True, max_concurrency=1)
    turns = IdentifyTurns()
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        sim.add_default_world()
        sink = RecordingSink()
        rest = SimRest(sim)
        actors = [
            GatewayActor(TOKEN, rest, sink, lambda *_: None, shard=(i, 2), turns=turns)
            for i in (0, 1)
        ]
        for actor in actors:
            nursery.start_soon(actor.run)
        await wait_until(lambda: sim.gateway_stats.identifies == 2)
        stats = sim.gateway_stats
        assert stats.identify_rate_limited == 0
        first, second = stats.identify_times
        assert second - first >= 5.0
        waits = [e for e in sink.of("gateway") if e["action"] == "identify_wait"]
        # Whichever reached the bucket second waited its turn; the other went at once.
        assert len(waits) == 1 and waits[0]["shard"] in ([0, 2], [1, 2])
        nursery.cancel_scope.cancel()
