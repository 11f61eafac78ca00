"""The gateway's websocket: wsproto driven on one trio stream, read in the gateway's own task.

No reader task and no queue sit between the socket and the gateway: each read of the socket
is fed to wsproto and every complete message it yields goes back to the caller at once, so a
burst costs one wake-up per socket read, not one (or a channel hop) per frame. Pings are
answered, a close from the peer is echoed, and a message beyond the size limit closes the
connection with 1009, as RFC 6455 asks.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from typing import Final, cast
from urllib.parse import urlsplit

import certifi
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError

from picortex.errors import GatewayError, PicortexError

__all__ = ["ABNORMAL_CLOSURE", "WebSocket", "WebSocketClosed", "open_websocket", "tls_context"]

# RFC 6455 7.4.1: the code reported when the connection ended without a close frame.
ABNORMAL_CLOSURE: Final = 1006
# RFC 6455 7.4.1: a message too big to process.
MESSAGE_TOO_BIG: Final = 1009
# Bytes of the upgrade response read at a time during the opening handshake.
HANDSHAKE_READ: Final = 4096


class WebSocketClosed(PicortexError):
    """The websocket is closed; nothing more comes or goes on it (never leaves the gateway).

    Defined here, with the websocket it belongs to; drawn in `picortex.errors`' tree.
    """


def tls_context() -> ssl.SSLContext:
    """A TLS context trusting what the REST client trusts.

    SSL_CERT_FILE or SSL_CERT_DIR when set (a proxy's or a private authority's certificates),
    else certifi's bundle, as httpx does with `trust_env`.
    """
    cafile = os.environ.get("SSL_CERT_FILE")
    if cafile and os.path.isfile(cafile):
        return ssl.create_default_context(cafile=cafile)
    capath = os.environ.get("SSL_CERT_DIR")
    if capath and os.path.isdir(capath):
        return ssl.create_default_context(capath=capath)
    return ssl.create_default_context(cafile=certifi.where())


class WebSocket:
    """One open client websocket. `receive` is called by one task; `send`s may overlap it."""

    def __init__(
        self, stream: trio.abc.Stream, ws: WSConnection, *, max_message: int, read_bytes: int
    ) -> None:
        self._stream = stream
        self._ws = ws
        self._max_message = max_message
        self._read_bytes = read_bytes
        self._send_lock = trio.Lock()
        self._parts: list[str | bytes] = []  # a fragmented message so far
        self._size = 0
        self._replies: list[bytes] = []  # pongs and close replies owed to the peer
        self._ended = False
        #: How the connection ended (ABNORMAL_CLOSURE: without a close frame).
        self.close_code: int | None = None
        self.close_reason = ""

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (a close frame came, or the stream ended)."""
        return self._ended

    async def receive(self) -> list[str | bytes]:
        """The complete messages of the next socket read (at least one), in order.

        Raises:
            WebSocketClosed: the connection ended; `close_code` and `close_reason` say how.
        """
        while True:
            # Frames may already wait in wsproto (those right behind the upgrade response).
            messages = self._events()
            if self._replies:
                await self._send_replies()
            if messages:
                return messages
            if self._ended:
                raise WebSocketClosed
            try:
                data = await self._stream.receive_some(self._read_bytes)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self._end(ABNORMAL_CLOSURE, "connection lost")
                raise WebSocketClosed
            self._ws.receive_data(cast(bytes, data))  # a bytearray from TLS does as well

    def _events(self) -> list[str | bytes]:
        """Every complete message wsproto has; pings, closes and oversize handled on the way."""
        out: list[str | bytes] = []
        if self._ended:
            return out
        ws = self._ws
        for event in ws.events():
            if isinstance(event, TextMessage | BytesMessage):
                raw = event.data
                data = bytes(raw) if isinstance(raw, bytearray) else raw
                if event.message_finished and not self._parts:
                    if len(data) > self._max_message:
                        self._too_big()
                        break
                    out.append(data)
                    continue
                self._parts.append(data)
                self._size += len(data)
                if self._size > self._max_message:
                    self._too_big()
                    break
                if event.message_finished:
                    parts, self._parts, self._size = self._parts, [], 0
                    if isinstance(event, TextMessage):
                        out.append("".join(p for p in parts if isinstance(p, str)))
                    else:
                        out.append(b"".join(p for p in parts if isinstance(p, bytes)))
            elif isinstance(event, Ping):
                self._reply(event.response())
            elif isinstance(event, CloseConnection):
                if ws.state is ConnectionState.REMOTE_CLOSING:
                    self._reply(event.response())
                self._end(event.code, event.reason or "")
                break
        return out

    def _reply(self, event: Event) -> None:
        with contextlib.suppress(LocalProtocolError):  # closing already: nothing is owed
            self._replies.append(self._ws.send(event))

    def _too_big(self) -> None:
        self._parts, self._size = [], 0
        reason = f"message over {self._max_message} bytes"
        self._reply(CloseConnection(code=MESSAGE_TOO_BIG, reason=reason))
        self._end(MESSAGE_TOO_BIG, reason)

    def _end(self, code: int, reason: str) -> None:
        if not self._ended:
            self._ended = True
            self.close_code = code
            self.close_reason = reason

    async def _send_replies(self) -> None:
        replies, self._replies = self._replies, []
        with contextlib.suppress(WebSocketClosed):
            await self._write(b"".join(replies))

    async def send(self, text: str) -> None:
        """Send one text message.

        Raises:
            WebSocketClosed: the connection is closing or closed.
        """
        if self._ended:
            raise WebSocketClosed
        try:
            data = self._ws.send(TextMessage(data=text))
        except LocalProtocolError:
            raise WebSocketClosed from None
        await self._write(data)

    async def send_close(self, code: int, reason: str) -> None:
        """Start the closing handshake; the peer's close reply then ends `receive`."""
        if self._ended or self._ws.state is not ConnectionState.OPEN:
            return
        with contextlib.suppress(WebSocketClosed):
            await self._write(self._ws.send(CloseConnection(code=code, reason=reason)))

    async def _write(self, data: bytes) -> None:
        try:
            async with self._send_lock:
                await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._end(ABNORMAL_CLOSURE, "connection lost")
            raise WebSocketClosed from None

    async def aclose(self) -> None:
        """Close the stream under the websocket (shielded, so it happens even when cancelled)."""
        quiet = contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError)
        with trio.CancelScope(shield=True), quiet:
            await self._stream.aclose()
        self._end(ABNORMAL_CLOSURE, "connection lost")


async def open_websocket(
    url: str, *, max_message: int, read_bytes: int, tls: ssl.SSLContext | None = None
) -> WebSocket:
    """Connect (TCP, TLS for wss://, the HTTP upgrade) and return the open websocket.

    The caller bounds the time it may take.

    Raises:
        GatewayError: the URL is not a websocket URL, or the server refused the upgrade.
        OSError, trio.BrokenResourceError: the connection or the TLS handshake failed.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise GatewayError(f"not a websocket URL: {parts.scheme}://{parts.hostname or ''}")
    secure = parts.scheme == "wss"
    port = parts.port or (443 if secure else 80)
    host = parts.hostname
    stream: trio.abc.Stream = await trio.open_tcp_stream(host, port)
    try:
        if secure:
            tls_stream = trio.SSLStream(stream, tls or tls_context(), server_hostname=host)
            await tls_stream.do_handshake()
            stream = tls_stream
        ws = WSConnection(ConnectionType.CLIENT)
        default_port = parts.port is None or parts.port == (443 if secure else 80)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        await stream.send_all(
            ws.send(Request(host=host if default_port else f"{host}:{port}", target=target))
        )
        await _handshake(stream, ws)
    except BaseException:
        with trio.CancelScope(shield=True), contextlib.suppress(Exception):
            await stream.aclose()
        raise
    return WebSocket(stream, ws, max_message=max_message, read_bytes=read_bytes)


async def _handshake(stream: trio.abc.Stream, ws: WSConnection) -> None:
    status: int | None = None
    while True:
        data = await stream.receive_some(HANDSHAKE_READ)
        if not data:
            raise GatewayError(
                "websocket upgrade refused"
                + (f": HTTP {status}" if status else ": connection closed during the handshake")
            )
        ws.receive_data(cast(bytes, data))
        for event in ws.events():
            if isinstance(event, AcceptConnection):
                return
            if isinstance(event, RejectConnection):
                status = event.status_code
                if not event.has_body:
                    raise GatewayError(f"websocket upgrade refused: HTTP {status}")
            elif isinstance(event, RejectData) and event.body_finished:
                raise GatewayError(f"websocket upgrade refused: HTTP {status}")
