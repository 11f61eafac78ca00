"""The web actor: serves the panel on its port; a taken port is a warning, never a crash."""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import attrs
import httpx
import pytest
import trio

from picortex.actors.pipeline import ChannelRegistry, SettingsSource
from picortex.actors.web import WebActor
from picortex.config import Settings, WebSettings, load_settings
from picortex.core.personas import PersonaSet
from picortex.errors import ConfigError
from picortex.store import AdminStore, Store
from picortex.web.panel import Panel


@attrs.define
class Sink:
    rows: list[dict[str, object]] = attrs.field(factory=list)

    def emit(self, event: str, /, **fields: object) -> None:
        self.rows.append({"event": event, **fields})


class NoRest:
    async def create_message(self, channel_id: int, content: str, **kw: object) -> dict[str, str]:
        raise AssertionError("not used")


def make_panel(home: Path, store: Store, sink: Sink) -> Panel:
    return Panel(
        settings=SettingsSource(Settings(home=home), AdminStore(store)),
        store=AdminStore(store),
        events=sink,
        home=home,
        action_log_path=home / "actions.jsonl",
        snapshot=lambda: {"gateway": {"state": "connected"}},
        registry=ChannelRegistry(),
        cache=attrs.make_class("C", {})(),  # never asked in these tests
        llm=None,
        rest=NoRest(),  # type: ignore[arg-type]
        personas=PersonaSet,
        triggers=list,
        dm_channels={},
    )


async def test_serves_the_panel_on_a_free_port(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "picortex.db")
    sink = Sink()
    actor = WebActor(WebSettings(port=0), tmp_path, lambda: make_panel(tmp_path, store, sink), sink)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            assert actor.url is not None
            token = (tmp_path / "web.token").read_text().strip()
            async with httpx.AsyncClient(base_url=actor.url) as client:
                r = await client.get("/api/status", headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 200
                assert r.json()["gateway"]["state"] == "connected"
                assert (await client.get("/")).status_code == 303
            nursery.cancel_scope.cancel()
        assert actor.url is None
        assert [r["outcome"] for r in sink.rows if r["event"] == "web"] == ["listening"]
    finally:
        store.close()


async def test_a_taken_port_is_a_warning_not_a_crash(tmp_path: Path, caplog: object) -> None:
    store = Store.open(tmp_path / "picortex.db")
    sink = Sink()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    actor = WebActor(
        WebSettings(port=port), tmp_path, lambda: make_panel(tmp_path, store, sink), sink
    )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)  # returns: started, idle, not raising
            await trio.sleep(0)
            assert actor.url is None
            [event] = [r for r in sink.rows if r["event"] == "web"]
            assert event["outcome"] == "unavailable"
            assert event["address"] == f"127.0.0.1:{port}"
            nursery.cancel_scope.cancel()
    finally:
        blocker.close()
        store.close()


@pytest.mark.parametrize(
    ("host", "setting", "secure"),
    [
        ("127.0.0.1", None, False),
        ("localhost", None, False),
        ("::1", None, False),
        ("0.0.0.0", None, True),
        ("panel.example.org", None, True),
        ("0.0.0.0", False, False),
        ("127.0.0.1", True, True),
    ],
)
def test_cookies_are_secure_unless_the_panel_is_loopback_only(
    host: str, setting: bool | None, secure: bool
) -> None:
    assert WebSettings(host=host, secure_cookies=setting).cookies_secure is secure


def test_secure_cookies_is_read_from_the_config_file(tmp_path: Path) -> None:
    (tmp_path / "picortex.toml").write_text("[web]\nsecure_cookies = false\n")
    settings = load_settings({"PICORTEX_HOME": str(tmp_path)})
    assert settings.web.secure_cookies is False
    (tmp_path / "picortex.toml").write_text('[web]\nsecure_cookies = "yes"\n')
    with pytest.raises(ConfigError, match=r"web\.secure_cookies must be true or false"):
        load_settings({"PICORTEX_HOME": str(tmp_path)})


@pytest.mark.parametrize(("secure_cookies", "warned"), [(None, True), (False, True), (True, False)])
async def test_a_panel_beyond_loopback_without_tls_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, secure_cookies: bool | None, warned: bool
) -> None:
    caplog.set_level(logging.WARNING)
    store = Store.open(tmp_path / "picortex.db")
    sink = Sink()
    settings = WebSettings(host="0.0.0.0", port=0, secure_cookies=secure_cookies)
    actor = WebActor(settings, tmp_path, lambda: make_panel(tmp_path, store, sink), sink)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    outcomes = [r["outcome"] for r in sink.rows if r["event"] == "web"]
    assert ("plain_http" in outcomes) is warned
    assert ("put a TLS proxy in front" in caplog.text) is warned
    assert (tmp_path / "web.metrics_token").stat().st_mode & 0o777 == 0o600


async def test_the_served_panel_stops_reading_a_body_past_its_cap(tmp_path: Path) -> None:
    store = Store.open(tmp_path / "picortex.db")
    sink = Sink()
    actor = WebActor(WebSettings(port=0), tmp_path, lambda: make_panel(tmp_path, store, sink), sink)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            assert actor.url is not None
            host, port = actor.url.removeprefix("http://").rsplit(":", 1)
            sent, answer = await stream_login(host, int(port), 64 * 1024 * 1024)
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert answer.startswith(b"HTTP/1.1 413 ")
    # Socket buffers take a few MiB; reading on would take all 64 (in 64 KiB fields).
    assert sent < 32 * 1024 * 1024


async def stream_login(host: str, port: int, size: int) -> tuple[int, bytes]:
    """POST /login chunked, `size` bytes in 64 KiB fields, until the server stops reading.

    Returns the body bytes sent and what the server answered.
    """
    stream = await trio.open_tcp_stream(host, port)
    head = (
        b"POST /login HTTP/1.1\r\nHost: panel\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\n\r\n"
    )
    chunk = 64 * 1024
    frame = b"%x\r\n" % chunk + b"&f=" + b"x" * (chunk - 3) + b"\r\n"
    answer = bytearray()
    sent = 0

    async def read_answer() -> None:
        while data := await stream.receive_some():
            answer.extend(data)

    async with stream, trio.open_nursery() as nursery:
        nursery.start_soon(read_answer)
        try:
            await stream.send_all(head)
            while sent < size:
                await stream.send_all(frame)
                sent += chunk
            await stream.send_all(b"0\r\n\r\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the server closed the connection: it will read no more
    return sent, bytes(answer)
