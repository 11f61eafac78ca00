"""HTTP/1.1 keep-alive connections over trio, served to httpx as a transport.

A bot sends thousands of small requests to two hosts (Discord and the model API). httpx's own
transport spends most of each request's CPU in its pool, locks and backend layers, which
shows directly in reply latency; this pool keeps one idle deque per origin and speaks HTTP
through h11, so a request costs little more than its h11 events and socket calls.

It does not speak to proxies: `proxy_configured()` tells callers to keep httpx's own
transport when the environment names one.
"""

from __future__ import annotations

import os
import ssl
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import Any, Final

import attrs
import h11
import trio

# Idle connections kept per origin; a bot rarely has more requests in flight to one host.
MAX_IDLE_PER_ORIGIN: Final = 32
# A response body larger than this is refused rather than held in memory (Discord's largest
# JSON answers are well under a megabyte).
MAX_BODY_BYTES: Final = 64 * 1024 * 1024
RECEIVE_SIZE: Final = 65_536
_PROXY_VARIABLES: Final = ("http_proxy", "https_proxy", "all_proxy")
_DEFAULT_PORTS: Final = {b"http": 80, b"https": 443}

Origin = tuple[bytes, bytes, int]
Headers = list[tuple[bytes, bytes]]


def proxy_configured(environ: Any = None) -> bool:
    """True when the environment names an HTTP proxy (which this transport does not use)."""
    env = os.environ if environ is None else environ
    return any(env.get(name) or env.get(name.upper()) for name in _PROXY_VARIABLES)


class TransportFailure(Exception):
    """A request got no complete answer.

    `kind` is one of connect, write, read, protocol; `timeout` says a deadline ran out.
    """

    def __init__(self, kind: str, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.timeout = timeout


class _Connection:
    """One keep-alive connection and its h11 state."""

    __slots__ = ("socket", "state", "stream")

    def __init__(self, stream: trio.abc.Stream, socket: trio.socket.SocketType) -> None:
        self.stream = stream
        self.socket = socket
        self.state = h11.Connection(our_role=h11.CLIENT)

    def is_stale(self) -> bool:
        """An idle connection the server closed (or wrote to unasked) cannot be reused."""
        return self.socket.is_readable()

    def close(self) -> None:
        """Drop the connection (a TLS close_notify adds nothing: responses are framed)."""
        self.socket.close()


class Response:
    """A whole HTTP response."""

    __slots__ = ("body", "headers", "reason", "status")

    def __init__(self, status: int, reason: bytes, headers: Headers, body: bytes) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body


class Timeouts:
    """Deadlines in seconds for each phase; None waits forever."""

    __slots__ = ("connect", "read", "write")

    def __init__(
        self, connect: float | None = None, read: float | None = None, write: float | None = None
    ) -> None:
        self.connect = connect
        self.read = read
        self.write = write


@attrs.frozen(slots=True)
class _Outgoing:
    """One request as it is sent."""

    method: bytes
    target: bytes
    headers: Headers
    body: bytes
    timeouts: Timeouts
    on_sent: Callable[[], None] | None


class Http11Pool:
    """Keep-alive HTTP/1.1 connections to any number of origins."""

    def __init__(self, ssl_context: Callable[[], ssl.SSLContext] | None = None) -> None:
        self._idle: dict[Origin, deque[_Connection]] = {}
        self._ssl_factory = ssl_context or _default_ssl_context
        self._ssl: ssl.SSLContext | None = None
        self._closed = False

    async def request(
        self,
        method: bytes,
        origin: Origin,
        target: bytes,
        headers: Headers,
        body: bytes,
        timeouts: Timeouts,
        on_sent: Callable[[], None] | None = None,
    ) -> Response:
        """Send one request and read its whole response.

        A reused connection the server closed meanwhile is replaced and the request sent
        again once, as nothing of it was processed. `on_sent` is called once the request's
        last byte is handed to the connection, before its answer arrives.

        Raises:
            TransportFailure: no complete response arrived.
        """
        if self._closed:
            raise TransportFailure("connect", "the HTTP transport is closed")
        out = _Outgoing(method, target, headers, body, timeouts, on_sent)
        conn = self._take_idle(origin)
        if conn is not None:
            try:
                return await self._exchange(conn, origin, out)
            except _UnusedConnection:
                pass  # closed under us before answering: a fresh connection below
        conn = await self._connect(origin, timeouts.connect)
        try:
            return await self._exchange(conn, origin, out)
        except _UnusedConnection as exc:
            raise TransportFailure("read", str(exc)) from exc

    async def aclose(self) -> None:
        """Close every idle connection; later requests fail."""
        self._closed = True
        idle, self._idle = self._idle, {}
        for conns in idle.values():
            for conn in conns:
                conn.close()

    def _take_idle(self, origin: Origin) -> _Connection | None:
        conns = self._idle.get(origin)
        while conns:
            conn = conns.pop()
            if not conn.is_stale():
                return conn
            conn.close()
        return None

    def _put_idle(self, origin: Origin, conn: _Connection) -> bool:
        conns = self._idle.setdefault(origin, deque())
        if self._closed or len(conns) >= MAX_IDLE_PER_ORIGIN:
            return False
        conns.append(conn)
        return True

    async def _connect(self, origin: Origin, timeout: float | None) -> _Connection:
        scheme, host, port = origin
        try:
            with trio.fail_after(_forever(timeout)):
                tcp = await trio.open_tcp_stream(host.decode("ascii"), port)
                if scheme != b"https":
                    return _Connection(tcp, tcp.socket)
                if self._ssl is None:
                    self._ssl = self._ssl_factory()
                tls = trio.SSLStream(
                    tcp, self._ssl, server_hostname=host.decode("ascii"), https_compatible=True
                )
                try:
                    await tls.do_handshake()
                except BaseException:
                    await trio.aclose_forcefully(tcp)
                    raise
                return _Connection(tls, tcp.socket)
        except trio.TooSlowError:
            raise TransportFailure("connect", "timed out connecting", timeout=True) from None
        except (OSError, trio.BrokenResourceError) as exc:
            raise TransportFailure("connect", f"cannot connect: {exc}") from exc

    async def _exchange(self, conn: _Connection, origin: Origin, out: _Outgoing) -> Response:
        """Send `out` on `conn`, read the answer, and keep `conn` if it may be reused."""
        keep = False
        try:
            await self._send(conn, out)
            response = await self._receive(conn, out.timeouts.read)
            state = conn.state
            if state.our_state is h11.DONE and state.their_state is h11.DONE:
                state.start_next_cycle()
                keep = self._put_idle(origin, conn)
            return response
        finally:
            if not keep:
                conn.close()

    async def _send(self, conn: _Connection, out: _Outgoing) -> None:
        state = conn.state
        try:
            data = state.send(
                h11.Request(method=out.method, target=out.target, headers=out.headers)
            )
            if out.body:
                data = (data or b"") + (state.send(h11.Data(data=out.body)) or b"")
            data = (data or b"") + (state.send(h11.EndOfMessage()) or b"")
        except h11.LocalProtocolError as exc:
            raise TransportFailure("protocol", f"bad request: {exc}") from exc
        try:
            with trio.fail_after(_forever(out.timeouts.write)):
                await conn.stream.send_all(data)
        except trio.TooSlowError:
            raise TransportFailure("write", "timed out sending", timeout=True) from None
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise _UnusedConnection(f"connection lost while sending: {exc}") from exc
        if out.on_sent is not None:
            out.on_sent()

    async def _receive(self, conn: _Connection, timeout: float | None) -> Response:
        state = conn.state
        head: h11.Response | None = None
        chunks: list[bytes] = []
        size = 0
        got_bytes = False
        while True:
            try:
                event = state.next_event()
            except h11.RemoteProtocolError as exc:
                raise TransportFailure("protocol", f"malformed response: {exc}") from exc
            if event is h11.NEED_DATA:
                try:
                    with trio.fail_after(_forever(timeout)):
                        data = await conn.stream.receive_some(RECEIVE_SIZE)
                except trio.TooSlowError:
                    raise TransportFailure("read", "timed out reading", timeout=True) from None
                except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    if not got_bytes:
                        raise _UnusedConnection(f"connection lost: {exc}") from exc
                    raise TransportFailure("read", f"connection lost: {exc}") from exc
                if not data and not got_bytes:
                    raise _UnusedConnection("the server closed the connection")
                got_bytes = True
                state.receive_data(bytes(data))
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                size += len(event.data)
                if size > MAX_BODY_BYTES:
                    raise TransportFailure("read", "response body too large")
                chunks.append(bytes(event.data))
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return Response(head.status_code, head.reason, list(head.headers), b"".join(chunks))
            elif isinstance(event, h11.ConnectionClosed):
                raise TransportFailure("read", "the server closed the connection mid-response")
            # InformationalResponse (1xx) is skipped: the final response follows.


class _UnusedConnection(Exception):
    """The connection died before any response byte: the request was not processed."""


def _forever(timeout: float | None) -> float:
    return float("inf") if timeout is None else timeout


def _default_ssl_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    try:
        import certifi

        context.load_verify_locations(certifi.where())
    except ImportError:  # the system's store alone is fine where certifi is missing
        pass
    context.set_alpn_protocols(["http/1.1"])
    return context


class HttpxTransport:
    """An httpx (or API-compatible) async transport over an `Http11Pool`.

    `module` is the httpx package whose Request/Response/exception types the client uses
    (the model SDK may ship its own copy of httpx). Clients that check a transport's class
    get one from `httpx_transport`.
    """

    def __init__(self, module: ModuleType, pool: Http11Pool | None = None) -> None:
        self._httpx = module
        self._pool = pool or Http11Pool()

    async def handle_async_request(self, request: Any) -> Any:
        """Send an httpx request; answer with an httpx response or raise httpx's errors."""
        url = request.url
        scheme = url.raw_scheme
        port = url.port or _DEFAULT_PORTS.get(scheme, 80)
        body = await request.aread()
        raw_timeouts = request.extensions.get("timeout") or {}
        timeouts = Timeouts(
            raw_timeouts.get("connect"), raw_timeouts.get("read"), raw_timeouts.get("write")
        )
        try:
            response = await self._pool.request(
                request.method.encode("ascii"),
                (scheme, url.raw_host, port),
                url.raw_path,
                list(request.headers.raw),
                body,
                timeouts,
            )
        except TransportFailure as exc:
            raise self._error(exc, request) from exc
        return self._httpx.Response(
            response.status,
            headers=response.headers,
            stream=self._httpx.ByteStream(response.body),
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason},
        )

    def _error(self, exc: TransportFailure, request: Any) -> Exception:
        names = {
            ("connect", True): "ConnectTimeout",
            ("connect", False): "ConnectError",
            ("write", True): "WriteTimeout",
            ("write", False): "WriteError",
            ("read", True): "ReadTimeout",
            ("read", False): "ReadError",
            ("protocol", False): "RemoteProtocolError",
        }
        cls = getattr(self._httpx, names.get((exc.kind, exc.timeout), "TransportError"))
        error: Exception = cls(str(exc), request=request)
        return error

    async def aclose(self) -> None:
        """Close the pool's connections."""
        await self._pool.aclose()


_TRANSPORT_CLASSES: dict[str, type[HttpxTransport]] = {}


def httpx_transport(module: ModuleType, pool: Http11Pool | None = None) -> Any:
    """An `HttpxTransport` that is also an instance of `module.AsyncBaseTransport`."""
    cls = _TRANSPORT_CLASSES.get(module.__name__)
    if cls is None:
        cls = type("HttpxTransport", (HttpxTransport, module.AsyncBaseTransport), {})
        _TRANSPORT_CLASSES[module.__name__] = cls
    return cls(module, pool)
