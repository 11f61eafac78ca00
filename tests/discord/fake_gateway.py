"""A tiny stand-in gateway on loopback for wire faults the simulator does not make.

It speaks just enough of the protocol (HELLO, IDENTIFY/READY, RESUME with replay, ACKs,
zlib-stream and zstd-stream) and can send raw junk or split one zlib message in two.
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


@attrs.define
class Session:
    """One gateway session: its events, for replay."""

    id: str
    events: list[dict[str, Any]] = attrs.Factory(list)

    @property
    def seq(self) -> int:
        return len(self.events)


class _Conn:
    def __init__(self, ws: WebSocketConnection, compress: str | None, gateway: FakeGateway) -> None:
        self.ws = ws
        self.session: Session | None = None
        self.gateway = gateway
        self._zlib = zlib.compressobj() if compress == "zlib-stream" else None
        self._zstd = zstandard.ZstdCompressor().compressobj() if compress == "zstd-stream" else None
        self.lock = trio.Lock()

    def encode(self, frame: dict[str, Any]) -> list[str | bytes]:
        text = orjson.dumps(frame)
        if self._zlib is not None:
            data = self._zlib.compress(text) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
            if self.gateway.split_zlib and len(data) > 8:
                # One gateway message in two websocket messages: the client must buffer.
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

    def __init__(self, *, token: str = "sim-token", heartbeat_interval_ms: int = 41_250) -> None:
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.url = ""
        self.split_zlib = False
        self.sessions: dict[str, Session] = {}
        self.conns: list[_Conn] = []
        self.client_close_codes: list[int | None] = []
        self.stats = {"connections": 0, "identifies": 0, "resumes": 0, "heartbeats": 0}
        self._ids = count(1000)

    async def serve(self, *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            server = await nursery.start(serve_websocket, self._handle, "127.0.0.1", 0, None)
            self.url = f"ws://127.0.0.1:{server.port}/"
            task_status.started(self.url)

    async def _handle(self, request: WebSocketRequest) -> None:
        query = dict(parse_qsl(urlsplit(request.path).query))
        ws = await request.accept()
        conn = _Conn(ws, query.get("compress"), self)
        self.conns.append(conn)
        self.stats["connections"] += 1
        try:
            await conn.send({"op": 10, "d": {"heartbeat_interval": self.heartbeat_interval_ms}})
            while True:
                await self._on_payload(conn, orjson.loads(await ws.get_message()))
        except ConnectionClosed as exc:
            self.client_close_codes.append(exc.reason.code if exc.reason else None)
        finally:
            self.conns.remove(conn)

    async def _on_payload(self, conn: _Conn, payload: dict[str, Any]) -> None:
        op: Any = payload.get("op")
        d: Any = payload.get("d")
        if op == 1:
            self.stats["heartbeats"] += 1
            await conn.send({"op": 11})
        elif op == 2:
            self.stats["identifies"] += 1
            session = Session(f"session-{next(self._ids)}")
            self.sessions[session.id] = session
            conn.session = session
            ready = {"v": 10, "session_id": session.id, "resume_gateway_url": self.url}
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

    async def post_user_message(
        self, channel_id: int, author_id: int, content: str
    ) -> dict[str, Any]:
        """Dispatch a MESSAGE_CREATE into every session."""
        message = {
            "id": str(next(self._ids)),
            "channel_id": str(channel_id),
            "author": {"id": str(author_id), "username": f"user{author_id}"},
            "content": content,
            "timestamp": "2026-01-01T00:00:00+00:00",
        }
        for session in list(self.sessions.values()):
            await self._dispatch(session, "MESSAGE_CREATE", message)
        return message

    async def send_raw(self, data: str | bytes) -> None:
        """Send one websocket message as is (junk, or bytes that skip compression)."""
        for conn in list(self.conns):
            await conn.ws.send_message(data)

    @property
    def gateway_stats(self) -> Mapping[str, int]:
        return dict(self.stats)


class FakeRest:
    """GET /gateway/bot only."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def get_gateway_bot(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "shards": 1,
            "session_start_limit": {
                "total": 1000,
                "remaining": 1000,
                "reset_after": 3_600_000,
                "max_concurrency": 1,
            },
        }
