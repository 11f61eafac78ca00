"""A small HTTP/1.1 server on trio and h11: keep-alive, one handler.

Bodies are sent whole with a Content-Length, or streamed (chunked) from an async iterator,
as Server-Sent Events are; a stream that raises CutConnection drops the connection midway.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from functools import partial
from http import HTTPStatus
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

import attrs
import h11
import orjson
import trio

from picortex.errors import CutConnection

log = logging.getLogger(__name__)

# Largest request body accepted (Discord's own cap on a message request is 25 MiB).
MAX_BODY_BYTES: Final = 25 * 1024 * 1024
# Largest request head (line plus headers) h11 buffers before giving up.
MAX_HEAD_BYTES: Final = 64 * 1024
# Bytes asked of the socket per read.
READ_SIZE: Final = 65536
SERVER_NAME: Final = "picortex-sim"


@attrs.frozen
class HttpRequest:
    """One parsed request: `path` is still percent-encoded, header names are lower case."""

    method: str
    target: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON (None when empty); raises orjson.JSONDecodeError."""
        if not self.body:
            return None
        return orjson.loads(self.body)


@attrs.frozen
class HttpResponse:
    """A response: status, body bytes and extra headers (Content-Length is added).

    With `stream`, the body is what the iterator yields, each part sent as it comes
    (chunked transfer encoding); `body` is then ignored.
    """

    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    stream: Callable[[], AsyncGenerator[bytes, None]] | None = None

    @classmethod
    def json(
        cls, status: int, payload: object, headers: tuple[tuple[str, str], ...] = ()
    ) -> HttpResponse:
        """A JSON response."""
        return cls(status, orjson.dumps(payload), (("Content-Type", "application/json"), *headers))


Handler = Callable[[HttpRequest], Awaitable[HttpResponse]]


async def serve_http(
    handler: Handler,
    host: str,
    port: int,
    *,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve `handler` on host:port until cancelled; reports the bound port when ready."""
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(trio.serve_listeners, partial(_serve_connection, handler), listeners)
        task_status.started(bound)


async def _serve_connection(handler: Handler, stream: trio.SocketStream) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        while True:
            try:
                request = await _read_request(conn, stream)
            except h11.RemoteProtocolError as exc:
                await _send_protocol_error(conn, stream, exc)
                return
            if request is None:
                return
            try:
                response = await handler(request)
            except Exception:
                log.exception("simulator handler failed on %s %s", request.method, request.path)
                response = HttpResponse.json(
                    500, {"message": "500: Internal Server Error", "code": 0}
                )
            try:
                await _send_response(conn, stream, response)
            except CutConnection:
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await stream.aclose()


async def _next_event(conn: h11.Connection, stream: trio.SocketStream) -> Any:
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await stream.receive_some(READ_SIZE))
            continue
        return event


async def _read_request(conn: h11.Connection, stream: trio.SocketStream) -> HttpRequest | None:
    event = await _next_event(conn, stream)
    if isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
        return None
    if not isinstance(event, h11.Request):
        return None
    chunks: list[bytes] = []
    size = 0
    while True:
        part = await _next_event(conn, stream)
        if isinstance(part, h11.Data):
            size += len(part.data)
            if size > MAX_BODY_BYTES:
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
            chunks.append(bytes(part.data))
        elif isinstance(part, h11.EndOfMessage):
            break
        else:
            return None
    target = event.target.decode("ascii", "replace")
    split = urlsplit(target)
    headers: dict[str, str] = {}
    for name, value in event.headers:
        headers[name.decode("ascii", "replace").lower()] = value.decode("latin-1")
    return HttpRequest(
        method=event.method.decode("ascii", "replace").upper(),
        target=target,
        path=split.path or "/",
        query=dict(parse_qsl(split.query, keep_blank_values=True)),
        headers=headers,
        body=b"".join(chunks),
    )


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode("ascii")
    except ValueError:
        return b""


async def _send_response(
    conn: h11.Connection, stream: trio.SocketStream, response: HttpResponse
) -> None:
    headers = [(name.encode("ascii"), value.encode("latin-1")) for name, value in response.headers]
    headers.append((b"Server", SERVER_NAME.encode("ascii")))
    if response.stream is not None:
        # No length: h11 frames the body with chunked encoding (or closes, for HTTP/1.0).
        # The head waits for the first part, so a stream that has its first part at once
        # goes out in one write with it, as a server writing both to one buffer would.
        head = conn.send(
            h11.Response(
                status_code=response.status, headers=headers, reason=_reason(response.status)
            )
        )
        async with aclosing(response.stream()) as parts:
            async for part in parts:
                if part:
                    await stream.send_all(head + conn.send(h11.Data(data=part)))
                    head = b""
        await stream.send_all(head + conn.send(h11.EndOfMessage()))
        return
    if response.status not in (204, 304):
        headers.append((b"Content-Length", str(len(response.body)).encode("ascii")))
    data = conn.send(
        h11.Response(status_code=response.status, headers=headers, reason=_reason(response.status))
    )
    if response.body and response.status not in (204, 304):
        data += conn.send(h11.Data(data=response.body))
    data += conn.send(h11.EndOfMessage())
    await stream.send_all(data)


async def _send_protocol_error(
    conn: h11.Connection, stream: trio.SocketStream, exc: h11.RemoteProtocolError
) -> None:
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    status = exc.error_status_hint or 400
    body = orjson.dumps({"message": f"{status}: {_reason(status).decode()}", "code": 0})
    headers = [
        (b"Content-Type", b"application/json"),
        (b"Content-Length", str(len(body)).encode("ascii")),
        (b"Connection", b"close"),
    ]
    try:
        data = conn.send(h11.Response(status_code=status, headers=headers))
        data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
    except h11.LocalProtocolError:
        return
    await stream.send_all(data)
