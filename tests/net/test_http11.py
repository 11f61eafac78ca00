"""Tests for the keep-alive HTTP/1.1 pool and its httpx transport, against scripted servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from picortex.net import http11
from picortex.net.http11 import (
    Http11Pool,
    Timeouts,
    TransportFailure,
    httpx_transport,
    proxy_configured,
)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
TIMEOUTS = Timeouts(connect=5, read=5, write=5)


class Server:
    """A TCP server answering each request with the next scripted reply.

    A reply is raw bytes, `None` (close the connection without answering) or an awaitable
    factory for replies that must wait. After each reply the server keeps the connection
    unless `close_after` is set.
    """

    def __init__(self, replies: list[Any], *, close_after: bool = False) -> None:
        self.replies = list(replies)
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0

    async def handle(self, stream: trio.SocketStream) -> None:
        self.connections += 1
        buffer = b""
        async with stream:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = await stream.receive_some(65536)
                    if not data:
                        return
                    buffer += data
                head, _, rest = buffer.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(rest) < length:
                    rest += await stream.receive_some(65536)
                self.requests.append(head + b"\r\n\r\n" + rest[:length])
                buffer = rest[length:]
                reply = self.replies.pop(0) if self.replies else OK
                if callable(reply):
                    reply = await reply()
                if reply is None:
                    return
                await stream.send_all(reply)
                if self.close_after:
                    return


@asynccontextmanager
async def serving(server: Server) -> AsyncIterator[Server]:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(trio.serve_tcp, server.handle, 0)
        server.port = listeners[0].socket.getsockname()[1]
        yield server
        nursery.cancel_scope.cancel()


def origin(server: Server) -> http11.Origin:
    return (b"http", b"127.0.0.1", server.port)


async def get(
    pool: Http11Pool, server: Server, target: bytes = b"/", **kwargs: Any
) -> http11.Response:
    headers = [(b"host", b"127.0.0.1")]
    return await pool.request(b"GET", origin(server), target, headers, b"", TIMEOUTS, **kwargs)


async def test_keep_alive_serves_sequential_requests_over_one_connection() -> None:
    async with serving(Server([])) as server:
        pool = Http11Pool()
        for _ in range(5):
            response = await get(pool, server)
            assert (response.status, response.body) == (200, b"ok")
        await pool.aclose()
    assert server.connections == 1
    assert len(server.requests) == 5


async def test_a_request_carries_its_method_target_headers_and_body() -> None:
    async with serving(Server([])) as server:
        pool = Http11Pool()
        headers = [(b"host", b"example"), (b"content-length", b"5"), (b"x-test", b"yes")]
        await pool.request(b"POST", origin(server), b"/a?b=c", headers, b"hello", TIMEOUTS)
        await pool.aclose()
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /a?b=c HTTP/1.1"
    assert b"x-test: yes" in head.lower()
    assert body == b"hello"


async def test_chunked_answers_are_joined_and_headers_kept() -> None:
    chunked = (
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nX-Ratelimit-Bucket: abc\r\n\r\n"
        b"3\r\nfoo\r\n4\r\nbar!\r\n0\r\n\r\n"
    )
    async with serving(Server([chunked])) as server:
        pool = Http11Pool()
        response = await get(pool, server)
        again = await get(pool, server)
        await pool.aclose()
    assert (response.status, response.reason, response.body) == (201, b"Created", b"foobar!")
    assert (b"x-ratelimit-bucket", b"abc") in response.headers
    assert again.body == b"ok"
    assert server.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    async with serving(Server([], close_after=True)) as server:
        pool = Http11Pool()
        for _ in range(3):
            await get(pool, server)
            await trio.sleep(0.05)  # the server's close reaches us before the next request
        await pool.aclose()
    assert server.connections == 3
    assert len(server.requests) == 3


async def test_a_reused_connection_dropped_before_answering_is_retried_once() -> None:
    # The server takes the second request on the kept connection and drops it unanswered
    # (as a server does when its keep-alive timer fires): the request goes out again.
    async with serving(Server([OK, None, OK])) as server:
        pool = Http11Pool()
        await get(pool, server)
        response = await get(pool, server)
        await pool.aclose()
    assert response.body == b"ok"
    assert server.connections == 2
    assert len(server.requests) == 3


async def test_a_fresh_connection_dropped_before_answering_fails() -> None:
    async with serving(Server([None])) as server:
        pool = Http11Pool()
        with pytest.raises(TransportFailure) as caught:
            await get(pool, server)
        await pool.aclose()
    assert caught.value.kind == "read"
    assert server.connections == 1


async def test_connection_close_is_honoured() -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    async with serving(Server([closing, closing])) as server:
        pool = Http11Pool()
        await get(pool, server)
        await get(pool, server)
        await pool.aclose()
    assert server.connections == 2


async def test_refused_connection_is_a_connect_failure() -> None:
    async with serving(Server([])) as server:
        port = server.port
    pool = Http11Pool()
    with pytest.raises(TransportFailure) as caught:
        await pool.request(
            b"GET", (b"http", b"127.0.0.1", port), b"/", [(b"host", b"x")], b"", TIMEOUTS
        )
    assert caught.value.kind == "connect"
    assert not caught.value.timeout


async def test_a_silent_server_times_out(autojump_clock: trio.testing.MockClock) -> None:
    async def never() -> bytes:
        await trio.sleep_forever()
        raise AssertionError

    async with serving(Server([never])) as server:
        pool = Http11Pool()
        with pytest.raises(TransportFailure) as caught:
            await pool.request(
                b"GET", origin(server), b"/", [(b"host", b"x")], b"", Timeouts(5, 3, 5)
            )
        await pool.aclose()
    assert (caught.value.kind, caught.value.timeout) == ("read", True)


async def test_a_malformed_answer_is_a_protocol_failure() -> None:
    async with serving(Server([b"SMTP ready\r\n\r\n"])) as server:
        pool = Http11Pool()
        with pytest.raises(TransportFailure) as caught:
            await get(pool, server)
        await pool.aclose()
    assert caught.value.kind == "protocol"


async def test_an_answer_cut_short_fails_and_is_not_retried() -> None:
    cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc"

    async def cut_then_close() -> bytes | None:
        return cut

    server = Server([cut_then_close], close_after=True)
    async with serving(server):
        pool = Http11Pool()
        with pytest.raises(TransportFailure) as caught:
            await get(pool, server)
        await pool.aclose()
    # Bytes of the answer arrived, so the request was processed: never sent again.
    assert caught.value.kind == "protocol"
    assert len(server.requests) == 1


async def test_an_oversized_body_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(http11, "MAX_BODY_BYTES", 10)
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n" + b"x" * 20
    async with serving(Server([big])) as server:
        pool = Http11Pool()
        with pytest.raises(TransportFailure, match="too large"):
            await get(pool, server)
        await pool.aclose()


async def test_on_sent_comes_before_the_answer() -> None:
    release = trio.Event()
    seen: list[str] = []

    async def held() -> bytes:
        await release.wait()
        seen.append("answer")
        return OK

    def sent() -> None:
        seen.append("sent")
        release.set()

    async with serving(Server([held])) as server:
        pool = Http11Pool()
        await get(pool, server, on_sent=sent)
        await pool.aclose()
    assert seen == ["sent", "answer"]


async def test_a_cancelled_request_does_not_leave_its_connection_for_reuse() -> None:
    async def slow() -> bytes:
        await trio.sleep(0.2)
        return OK

    async with serving(Server([slow, OK])) as server:
        pool = Http11Pool()
        with trio.move_on_after(0.05):
            await get(pool, server)
        response = await get(pool, server)
        await pool.aclose()
    assert response.body == b"ok"
    assert server.connections == 2


async def test_a_closed_pool_refuses_requests() -> None:
    pool = Http11Pool()
    await pool.aclose()
    with pytest.raises(TransportFailure, match="closed"):
        await pool.request(b"GET", (b"http", b"127.0.0.1", 9), b"/", [], b"", TIMEOUTS)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, False),
        ({"HTTPS_PROXY": "http://proxy:3128"}, True),
        ({"http_proxy": "http://proxy:3128"}, True),
        ({"ALL_PROXY": ""}, False),
        ({"NO_PROXY": "*"}, False),
    ],
)
def test_proxy_configured(environ: dict[str, str], expected: bool) -> None:
    assert proxy_configured(environ) is expected


# ----- as an httpx transport -------------------------------------------------------------


def client_for(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{server.port}", transport=httpx_transport(httpx)
    )


async def test_httpx_requests_and_answers_pass_through() -> None:
    json_answer = (
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n"
        b'{"code":1}'
    )
    async with serving(Server([json_answer])) as server, client_for(server) as client:
        response = await client.post("/x", params={"a": "1 2"}, json={"k": "v"})
    assert response.status_code == 404
    assert response.reason_phrase == "Not Found"
    assert response.headers["content-type"] == "application/json"
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"POST /x?a=1+2 HTTP/1.1"
    assert body == b'{"k":"v"}'


@pytest.mark.parametrize(
    ("replies", "error"),
    [
        ([None], httpx.ReadError),
        ([b"garbage\r\n\r\n"], httpx.RemoteProtocolError),
    ],
)
async def test_httpx_sees_its_own_exception_types(
    replies: list[Any], error: type[Exception]
) -> None:
    async with serving(Server(replies)) as server, client_for(server) as client:
        with pytest.raises(error):
            await client.get("/")


async def test_httpx_connect_errors_and_timeouts_map_to_httpx_types(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with serving(Server([])) as server:
        port = server.port
    async with httpx.AsyncClient(transport=httpx_transport(httpx)) as client:
        with pytest.raises(httpx.ConnectError):
            await client.get(f"http://127.0.0.1:{port}/")

    async def never() -> bytes:
        await trio.sleep_forever()
        raise AssertionError

    async with serving(Server([never])) as server:
        timeout = httpx.Timeout(5.0, read=2.0)
        async with httpx.AsyncClient(transport=httpx_transport(httpx), timeout=timeout) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(f"http://127.0.0.1:{server.port}/")


async def test_httpx_keeps_the_connection_alive() -> None:
    async with serving(Server([])) as server, client_for(server) as client:
        responses = [await client.get(f"/{i}") for i in range(3)]
    assert [r.text for r in responses] == ["ok"] * 3
    assert server.connections == 1


async def test_a_compressed_answer_reaches_httpx_compressed_and_is_decoded_there() -> None:
    import gzip

    body = gzip.compress(b'{"ok":true}')
    answer = (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body
    async with serving(Server([answer])) as server, client_for(server) as client:
        response = await client.get("/")
    assert response.json() == {"ok": True}
