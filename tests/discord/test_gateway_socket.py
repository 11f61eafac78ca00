"""The gateway's trio-websocket connection: the stream we own, the upgrade, TLS, the size limit."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme
from trio_websocket import ConnectionClosed, WebSocketRequest, serve_websocket

from picortex.discord import gateway as gateway_module
from picortex.discord.gateway import open_socket
from picortex.errors import GatewayError
from tests.discord.test_gateway import fake_bot, wait_until

Handler = Callable[[WebSocketRequest], Awaitable[None]]


@asynccontextmanager
async def serving(
    handler: Handler, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1"
) -> AsyncIterator[int]:
    """A trio-websocket server on loopback running `handler`; yields its port."""
    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, handler, host, 0, tls)
        yield server.port
        nursery.cancel_scope.cancel()


def opened_streams(monkeypatch: pytest.MonkeyPatch) -> list[trio.SocketStream]:
    """Records every TCP stream the gateway opens."""
    streams: list[trio.SocketStream] = []
    real = trio.open_tcp_stream

    async def recording(host: str, port: int, **kwargs: Any) -> trio.SocketStream:
        stream = await real(host, port, **kwargs)
        streams.append(stream)
        return stream

    monkeypatch.setattr(trio, "open_tcp_stream", recording)
    return streams


async def test_the_peers_close_code_reaches_us_and_our_socket_is_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def close_first(request: WebSocketRequest) -> None:
        ws = await request.accept()
        await ws.send_message("last")
        await ws.aclose(4004, "Authentication failed.")

    streams = opened_streams(monkeypatch)
    async with serving(close_first) as port:
        async with open_socket(f"ws://127.0.0.1:{port}/?v=10", connect_timeout=10) as ws:
            assert await ws.get_message() == "last"
            with pytest.raises(ConnectionClosed) as closed:
                await ws.get_message()
        assert closed.value.reason is not None
        assert (closed.value.reason.code, closed.value.reason.reason) == (
            4004,
            "Authentication failed.",
        )
        # trio-websocket's own client leaves this socket open when the peer closes first.
        (stream,) = streams
        assert stream.socket.fileno() == -1


async def test_a_refused_upgrade_is_a_gateway_error() -> None:
    async def refuse(request: WebSocketRequest) -> None:
        await request.reject(403)

    async with serving(refuse) as port:
        with pytest.raises(GatewayError, match="websocket upgrade refused: HTTP 403"):
            async with open_socket(f"ws://127.0.0.1:{port}/", connect_timeout=10):
                pass  # pragma: no cover - never opened


async def test_only_websocket_urls_are_opened() -> None:
    with pytest.raises(GatewayError, match="not a websocket URL"):
        async with open_socket("https://discord.test/", connect_timeout=10):
            pass  # pragma: no cover - never opened


async def _hello(request: WebSocketRequest) -> None:
    ws = await request.accept()
    await ws.send_message("hello over TLS")
    await ws.get_message()


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ssl.SSLContext, Path]:
    """A server context with a certificate for localhost, and its authority's bundle."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    return server_context, bundle


async def test_wss_trusts_the_certificate_file_from_the_environment(
    tls_server: tuple[ssl.SSLContext, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server_context, bundle = tls_server
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    async with (
        serving(_hello, server_context) as port,
        open_socket(f"wss://localhost:{port}/", connect_timeout=10) as ws,
    ):
        assert await ws.get_message() == "hello over TLS"


async def test_wss_refuses_a_certificate_nobody_trusts(
    tls_server: tuple[ssl.SSLContext, Path],
) -> None:
    server_context, _ = tls_server
    async with serving(_hello, server_context) as port:
        with pytest.raises((OSError, trio.BrokenResourceError)):
            async with open_socket(f"wss://localhost:{port}/", connect_timeout=10):
                pass  # pragma: no cover - never opened


async def test_a_message_over_the_limit_closes_with_1009_and_resumes(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway_module, "MAX_MESSAGE_BYTES", 4096)
    async with fake_bot(compress=None) as (_actor, gw, (_sink, got)):
        await gw.send_raw('{"op": 0, "t": "HUGE", "s": 2, "d": "' + "x" * 5000 + '"}')
        await wait_until(lambda: any(n == "RESUMED" for n, _ in got))
        assert gw.client_close_codes[0] == 1009
        assert "HUGE" not in [n for n, _ in got]
