"""A small stand-in Discord gateway on loopback, for gateway tests that need a real socket.

It speaks just enough of the protocol (HELLO, IDENTIFY/READY, RESUME with replay,
heartbeats, zlib-stream and zstd-stream) and offers the same fault controls as
`picortex.sim` (drop, op 7, op 9, close codes, no ACKs), plus a record of what it received.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Mapping
from itertools import count
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs
import orjson
import trio
import zstandard
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    serve_websocket,
)

from picortex.errors import FatalDiscordError

# Close codes after which a session cannot be resumed (Discord's table).
_SESSION_ENDING = {4001, 4003, 4004, 4005, 4007, 4009, 4010, 4011, 4012, 4013, 4014}


@attrs.define
class Session:
    """One gateway session: its events, for replay."""

    id: str
    resume_url: str
    events: list[dict[str, Any]] = attrs.Factory(list)

    @property
    def seq(self) -> int:
        return len(self.events)


class _Conn:
    def __init__(self, ws: WebSocketConnection, compress: str | None, split: bool) -> None:
        self.ws = ws
        self.session: Session | None = None
        self.split = split
        self.compress = compress
        self._zlib = zlib.compressobj() if compress == "zlib-stream" else None
        self._zstd = zstandard.ZstdCompressor().compressobj() if compress == "zstd-stream" else None
        self.lock = trio.Lock()

    def encode(self, frame: dict[str, Any]) -> list[str | bytes]:
        text = orjson.dumps(frame)
        if self._zlib is not None:
            data = self._zlib.compress(text) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
            if self.split and len(data) > 8:
                # Exercise the client's buffering: one gateway message in two ws messages.
                return [data[:5], data[5:]]
            return [data]
        if self._zstd is not None:
            return [self._zstd.compress(text) + self._zstd.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)]
        return [text.decode()]

    async def send(self, frame: dict[str, Any]) -> None:
        async with self.lock:
            for part in self.encode(frame):
                await self.ws.send_message(part)


class FakeGateway:
    """The stand-in gateway. Start it with `url = await nursery.start(gw.serve)`."""

    def __init__(
        self,
        *,
        token: str = "sim-token",
        heartbeat_interval_ms: int = 41_250,
        resume_url: str | None = None,
    ) -> None:
        self.token = token
        self.resume_url = resume_url
        self.payload_times: list[tuple[float, int]] = []
        self.identify_times: list[float] = []
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.url = ""
        self.ack = True
        self.split_zlib = False
        self.sessions: dict[str, Session] = {}
        self.conns: list[_Conn] = []
        self.received: list[dict[str, Any]] = []
        self.client_close_codes: list[int | None] = []
        self.urls: list[str] = []
        self.stats = {"connections": 0, "identifies": 0, "resumes": 0, "heartbeats": 0}
        self.reject_next = 0  # refuse this many connections (HTTP 503 on the handshake)
        self._ids = count(1000)
        self._nursery: trio.Nursery | None = None

    # -- running -------------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            server = await nursery.start(serve_websocket, self._handle, "127.0.0.1", 0, None)
            self.url = f"ws://127.0.0.1:{server.port}/"
            task_status.started(self.url)

    async def _handle(self, request: WebSocketRequest) -> None:
        self.urls.append(request.path)
        if self.reject_next > 0:
            self.reject_next -= 1
            await request.reject(503)
            return
        query = dict(parse_qsl(urlsplit(request.path).query))
        ws = await request.accept()
        conn = _Conn(ws, query.get("compress"), self.split_zlib)
        self.conns.append(conn)
        self.stats["connections"] += 1
        try:
            await conn.send({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
            while True:
                message = await ws.get_message()
                await self._on_payload(conn, orjson.loads(message))
        except ConnectionClosed as exc:
            self.client_close_codes.append(exc.reason.code if exc.reason else None)
        finally:
            if conn in self.conns:
                self.conns.remove(conn)

    async def _on_payload(self, conn: _Conn, payload: dict[str, Any]) -> None:
        self.received.append(payload)
        op: Any = payload.get("op")
        self.payload_times.append((trio.current_time(), op))
        d: Any = payload.get("d")
        if op == 1:
            self.stats["heartbeats"] += 1
            if self.ack:
                await conn.send({"op": 11})
        elif op == 2:
            self.stats["identifies"] += 1
            self.identify_times.append(trio.current_time())
            if d.get("token") != self.token:
                await conn.ws.aclose(4004, "Authentication failed.")
                return
            number = next(self._ids)
            session = Session(f"session-{number}", self.resume_url or self.url)
            self.sessions[session.id] = session
            conn.session = session
            ready = {
                "v": 10,
                "session_id": session.id,
                "resume_gateway_url": session.resume_url,
                "user": {"id": "1", "username": "bot", "bot": True},
                "guilds": [],
                "shard": d.get("shard"),
            }
            await self._dispatch(session, "READY", ready)
        elif op == 6:
            self.stats["resumes"] += 1
            found = self.sessions.get(d.get("session_id"))
            seq = d.get("seq")
            if found is None or not isinstance(seq, int) or seq > found.seq:
                await conn.send({"op": 9, "d": False})
                return
            conn.session = found
            for frame in found.events[seq:]:
                await conn.send(frame)
            await self._dispatch(found, "RESUMED", None)

    async def _dispatch(self, session: Session, name: str, data: object) -> None:
        frame = {"op": 0, "t": name, "s": session.seq + 1, "d": data}
        session.events.append(frame)
        for conn in list(self.conns):
            if conn.session is session:
                with contextlib.suppress(ConnectionClosed):
                    await conn.send(frame)

    def _spawn(self, fn: Any, *args: Any) -> None:
        assert self._nursery is not None
        self._nursery.start_soon(fn, *args)

    # -- the controls (same names as picortex.sim) -------------------------------------------

    async def dispatch(self, name: str, data: object) -> None:
        """Emit an event into every session (delivered now, or replayed on resume)."""
        for session in list(self.sessions.values()):
            await self._dispatch(session, name, data)

    async def post_user_message(
        self, channel_id: int, author_id: int, content: str
    ) -> dict[str, Any]:
        message = {
            "id": str(next(self._ids)),
            "channel_id": str(channel_id),
            "guild_id": "1",
            "author": {"id": str(author_id), "username": f"user{author_id}"},
            "content": content,
            "timestamp": "2026-01-01T00:00:00+00:00",
            "mentions": [],
            "attachments": [],
            "type": 0,
        }
        await self.dispatch("MESSAGE_CREATE", message)
        return message

    async def drop_connections(self) -> None:
        """Cut every socket without a close frame."""
        for conn in list(self.conns):
            await conn.ws._stream.aclose()  # a network cut: no close frame

    async def send_reconnect(self) -> None:
        for conn in list(self.conns):
            await conn.send({"op": 7, "d": None})

    async def invalidate_session(self, resumable: bool) -> None:
        for conn in list(self.conns):
            if not resumable and conn.session is not None:
                self.sessions.pop(conn.session.id, None)
                conn.session = None
            await conn.send({"op": 9, "d": resumable})

    async def close_connections(self, code: int) -> None:
        for conn in list(self.conns):
            if code in _SESSION_ENDING and conn.session is not None:
                self.sessions.pop(conn.session.id, None)
            await conn.ws.aclose(code, "closed by the test")

    async def send_raw(self, data: str | bytes) -> None:
        """Send one websocket message as is (junk, or bytes that bypass compression)."""
        for conn in list(self.conns):
            await conn.ws.send_message(data)

    def set_heartbeat_ack(self, enabled: bool) -> None:
        self.ack = enabled

    async def request_heartbeat(self) -> None:
        for conn in list(self.conns):
            await conn.send({"op": 1, "d": None})

    @property
    def gateway_stats(self) -> Mapping[str, int]:
        return dict(self.stats)


class FakeRest:
    """GET /gateway/bot only."""

    def __init__(self, url: str, *, remaining: int = 1000, max_concurrency: int = 1) -> None:
        self.url = url
        self.remaining = remaining
        self.max_concurrency = max_concurrency
        self.calls = 0
        self.unauthorized = False

    async def get_gateway_bot(self) -> dict[str, Any]:
        self.calls += 1
        if self.unauthorized:
            raise FatalDiscordError("Discord answered 401 Unauthorized: the bot token is invalid.")
        return {
            "url": self.url,
            "shards": 1,
            "session_start_limit": {
                "total": 1000,
                "remaining": self.remaining,
                "reset_after": 3_600_000,
                "max_concurrency": self.max_concurrency,
            },
        }
