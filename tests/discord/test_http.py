"""The REST client's own httpx client over real sockets: TLS with a local CA, a proxy, trace."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import orjson
import pytest
import trio
import trio.testing
import trustme

from picortex.discord import http
from picortex.discord.rest import RestClient
from picortex.errors import DiscordHTTPError

TOKEN = "tok.SECRET.value"

Handler = Callable[[bytes, bytes], Awaitable[bytes]]


async def _read_head(stream: trio.abc.Stream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return b""
        data += chunk
    return data


def _response(body: object) -> bytes:
    content = orjson.dumps(body)
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
        b"content-length: " + str(len(content)).encode() + b"\r\n\r\n" + content
    )


@asynccontextmanager
async def serve(
    handler: Handler, *, tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A one-request-per-read HTTP/1.1 server on loopback; yields its port and what it saw."""
    heads: list[bytes] = []

    async def connection(stream: trio.abc.Stream) -> None:
        if tls is not None:
            stream = trio.SSLStream(stream, tls, server_side=True)
        async with stream:
            while True:
                try:
                    head = await _read_head(stream)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                if not head:
                    return
                heads.append(head)
                request_line = head.split(b"\r\n", 1)[0]
                await stream.send_all(await handler(request_line, head))

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, connection, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        yield port, heads
        nursery.cancel_scope.cancel()


async def _gateway(request_line: bytes, head: bytes) -> bytes:
    return _response({"url": "wss://gateway.test", "shards": 1})


async def test_tls_is_verified_against_the_ca_named_by_ssl_cert_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(server_context)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    async with serve(_gateway, tls=server_context) as (port, heads):
        api = f"https://localhost:{port}/api/v10"
        monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
        async with RestClient(api, TOKEN) as rest:
            assert (await rest.get_gateway_bot())["url"] == "wss://gateway.test"
            await rest.get_gateway_bot()
    assert [h.split(b"\r\n", 1)[0] for h in heads] == [b"GET /api/v10/gateway/bot HTTP/1.1"] * 2
    assert b"\r\nAuthorization: Bot tok.SECRET.value\r\n" in heads[0]


async def test_an_untrusted_certificate_is_a_failed_request_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.abc.Clock
) -> None:
    # A certificate from a CA nobody trusts: the client must refuse the connection.
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    trustme.CA().issue_cert("localhost").configure_cert(server_context)
    for name in ("SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    async with (
        serve(_gateway, tls=server_context) as (port, heads),
        RestClient(f"https://localhost:{port}/api/v10", TOKEN) as rest,
    ):
        with pytest.raises(DiscordHTTPError, match="no answer from Discord") as caught:
            await rest.get_gateway_bot()
    assert caught.value.status == 0
    assert "SECRET" not in str(caught.value)
    assert heads == []


async def test_a_proxy_from_the_environment_carries_the_same_requests(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def proxy(request_line: bytes, head: bytes) -> bytes:
        return _response({"id": "42", "username": "bot"})

    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    async with serve(proxy) as (port, heads):
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
        async with RestClient("http://discord.test/api/v10", TOKEN) as rest:
            assert (await rest.get_current_user())["id"] == "42"
    # The proxy saw the absolute URL: the request went through it, on the one code path.
    assert heads[0].startswith(b"GET http://discord.test/api/v10/users/@me HTTP/1.1\r\n")


@pytest.fixture
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


class Written:
    """An `on_sent` callback: counts its calls, and `event` is set at the first."""

    def __init__(self) -> None:
        self.calls = 0
        self.event = trio.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.event.set()

    async def before_answering(self) -> None:
        """The server's side: hold the answer until the client said the request went out."""
        with trio.fail_after(5):
            await self.event.wait()


@pytest.mark.usefixtures("no_proxy")
async def test_on_sent_is_called_when_the_request_is_written_before_the_answer() -> None:
    written = Written()

    async def typing(request_line: bytes, head: bytes) -> bytes:
        await written.before_answering()
        return b"HTTP/1.1 204 No Content\r\n\r\n"

    async with (
        serve(typing) as (port, heads),
        RestClient(f"http://127.0.0.1:{port}/api/v10", TOKEN) as rest,
    ):
        await rest.trigger_typing(7, on_sent=written)
    assert written.calls == 1
    assert heads[0].startswith(b"POST /api/v10/channels/7/typing HTTP/1.1\r\n")


@pytest.mark.usefixtures("no_proxy")
async def test_a_tasks_when_sent_callback_is_called_for_its_requests_only() -> None:
    written = Written()

    async def post(request_line: bytes, head: bytes) -> bytes:
        if b"/channels/7/" in request_line:
            await written.before_answering()
        return _response({"id": "99", "channel_id": "7", "content": "hi"})

    async with (
        serve(post) as (port, _heads),
        RestClient(f"http://127.0.0.1:{port}/api/v10", TOKEN) as rest,
    ):
        with http.when_sent(written):
            await rest.create_message(7, "hi")
        await rest.create_message(8, "outside the block")
    assert written.calls == 1


@pytest.mark.usefixtures("no_proxy")
async def test_an_answer_is_read_only_once_read_after_returns() -> None:
    answered = trio.Event()
    release = trio.Event()
    seen: list[str] = []

    async def typing(request_line: bytes, head: bytes) -> bytes:
        answered.set()
        return b"HTTP/1.1 204 No Content\r\n\r\n"

    async def read_after() -> None:
        seen.append("waiting")
        await release.wait()
        seen.append("released")

    async def show(rest: RestClient) -> None:
        await rest.trigger_typing(7, read_after=read_after)
        seen.append("returned")

    async with (
        serve(typing) as (port, _heads),
        RestClient(f"http://127.0.0.1:{port}/api/v10", TOKEN) as rest,
        trio.open_nursery() as nursery,
    ):
        nursery.start_soon(show, rest)
        with trio.fail_after(5):
            await answered.wait()
            # Discord has answered, and the answer waits unread until read_after returns.
            await trio.testing.wait_all_tasks_blocked()
        assert seen == ["waiting"]
        release.set()
    assert seen == ["waiting", "released", "returned"]


async def test_the_client_states_its_limits() -> None:
    async with http.discord_client() as client:
        assert client.timeout.read == http.READ_TIMEOUT
        assert client.timeout.connect == http.CONNECT_TIMEOUT
        assert client.timeout.pool == http.POOL_TIMEOUT
        assert client.trust_env is True
        assert client.follow_redirects is False
