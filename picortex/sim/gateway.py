"""The simulated Discord gateway: sessions, sequence numbers, resume with replay, faults.

Served with trio-websocket. Outgoing frames are queued per connection and written by one
writer task, which compresses them (`zlib-stream`: one zlib context per connection, every
message ending in a Z_SYNC_FLUSH; `zstd-stream`: one zstd stream, a block flush per
message) and frames them itself so that a burst goes out in a few large socket writes.
"""

from __future__ import annotations

import itertools
import math
import secrets
import struct
import zlib
from collections import deque
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import parse_qsl, urlsplit

import attrs
import orjson
import trio
import trio_websocket

from picortex.sim.world import (
    INTENT_MESSAGE_CONTENT,
    PRIVILEGED_INTENTS,
    VALID_INTENTS,
    Dispatch,
    Json,
    World,
)

zstandard: Any
try:  # zstd-stream is offered only where the zstandard module is importable.
    import zstandard
except ImportError:  # pragma: no cover - zstandard is a test dependency
    zstandard = None

# What the recorded IDENTIFY shows instead of the token.
REDACTED: Final = "[redacted]"

# Discord's default heartbeat interval, in milliseconds.
DEFAULT_HEARTBEAT_MS: Final = 41_250
# A client that sends no heartbeat for this many intervals is dropped (resumable), as Discord does.
HEARTBEAT_GRACE_INTERVALS: Final = 1.5
# Discord closes with 4002 on a payload over 4096 bytes.
MAX_PAYLOAD_BYTES: Final = 4096
# Discord's send limit: 120 payloads per connection per 60 seconds, else close 4008.
SEND_LIMIT: Final = 120
SEND_WINDOW_SECONDS: Final = 60.0
# Dispatches kept per session for replay on resume; an older seq gets op 9 d=false.
REPLAY_LIMIT: Final = 250_000
# A session left without a connection this long is gone ("times out after a few minutes").
SESSION_RESUME_WINDOW: Final = 300.0
# Discord closes the socket a few seconds after an op 7 if the client has not.
RECONNECT_CLOSE_AFTER: Final = 5.0
# Seconds to wait for the client's half of a closing handshake.
CLOSE_HANDSHAKE_TIMEOUT: Final = 2.0
# Identify is limited per 5 seconds by session_start_limit.max_concurrency.
IDENTIFY_WINDOW_SECONDS: Final = 5.0
SESSION_START_TOTAL: Final = 1000
SESSION_START_RESET_MS: Final = 86_400_000
# A session may handle at most this many guilds, else close 4011 (Discord's sharding docs).
MAX_GUILDS_PER_SHARD: Final = 2500
# Guilds per shard behind the recommended shard count of GET /gateway/bot.
GUILDS_PER_RECOMMENDED_SHARD: Final = 1000
# zlib's fastest level: twice the speed of the default for a few percent more bytes, and a
# client inflates either at the same cost.
ZLIB_LEVEL: Final = 1
# How many identify and heartbeat times the stats keep.
TIMES_KEPT: Final = 1000
# Writer batching: frames are coalesced into socket writes of up to this many bytes.
WRITE_BATCH_BYTES: Final = 256 * 1024
# A blast waits for a connection's queue to fall under this many frames before adding more.
QUEUE_HIGH_WATER: Final = 4096

# What a websocket reports when the peer vanished without a close frame.
ABNORMAL_CLOSURE: Final = 1006
# Close codes after which Discord will not resume the session (its close-code table).
NON_RESUMABLE_CLOSE_CODES: Final = frozenset(
    {4001, 4003, 4004, 4005, 4007, 4009, 4010, 4011, 4012, 4013, 4014}
)
_CLOSE_REASONS: Final = {
    4000: "Unknown error.",
    4001: "Unknown opcode.",
    4002: "Decode error.",
    4003: "Not authenticated.",
    4004: "Authentication failed.",
    4005: "Already authenticated.",
    4007: "Invalid seq.",
    4008: "Rate limited.",
    4009: "Session timed out.",
    4010: "Invalid shard.",
    4011: "Sharding required.",
    4012: "Invalid API version.",
    4013: "Invalid intent(s).",
    4014: "Disallowed intent(s).",
}

_TRACE: Final = ['["picortex-sim",{"micros":0}]']
_RESUMED_BODY: Final = orjson.dumps({"_trace": _TRACE})


@attrs.frozen
class GatewayStats:
    """A snapshot of the gateway's counters.

    `connections`, `identifies`, `resumes` and `heartbeats` count since start;
    `active_connections` and `ready_sessions` are current; `identify_times` and
    `heartbeat_times` are trio clock readings (the last `TIMES_KEPT`); `received_ops`
    counts client payloads by opcode; `client_close_codes` are the codes clients closed
    with, and `client_drops` the clients that vanished without a close frame.
    `identify_rate_limited` counts IDENTIFYs answered with op 9 because their
    `max_concurrency` bucket had started a session within 5 s; `shard_identifies` counts
    sessions started per shard id (0 for IDENTIFYs without `shard`).
    """

    connections: int
    identifies: int
    resumes: int
    heartbeats: int
    last_identify: Json | None
    active_connections: int
    ready_sessions: int
    resume_failures: int
    heartbeat_timeouts: int
    client_close_codes: tuple[int, ...]
    client_drops: int
    last_connect_path: str | None
    resume_url_connections: int
    identify_times: tuple[float, ...]
    heartbeat_times: tuple[float, ...]
    received_ops: dict[int, int]
    identify_rate_limited: int = 0
    shard_identifies: dict[int, int] = attrs.Factory(dict)


@attrs.frozen
class Delivery:
    """A MESSAGE_CREATE handed to a connection: which connection (its serial number and the
    client's address and port), on which session, at which seq."""

    message_id: int
    connection: int
    peer: tuple[str, int] | None
    session_id: str
    seq: int


@attrs.define(eq=False)
class Session:
    """A gateway session: survives its connections until invalidated."""

    id: str
    intents: int
    shard: tuple[int, int] | None
    seq: int = 0
    buffer: deque[tuple[int, bytes, bytes]] = attrs.Factory(lambda: deque(maxlen=REPLAY_LIMIT))
    connection: GatewayConnection | None = None
    valid: bool = True
    detached_at: float | None = None

    def wants(self, intent: int | None, guild_id: int | None) -> bool:
        """True when this session receives a dispatch with this intent and guild."""
        if intent is not None and not self.intents & intent:
            return False
        return _on_shard(guild_id, self.shard)


def _on_shard(guild_id: int | None, shard: tuple[int, int] | None) -> bool:
    """True when events of `guild_id` (None: DMs, which go to shard 0) reach `shard`."""
    if shard is None:
        return True
    shard_id, count = shard
    if guild_id is None:
        return shard_id == 0
    return (guild_id >> 22) % count == shard_id


@attrs.frozen
class _Close:
    code: int
    reason: str


def _dispatch_frame(name: bytes, seq: int, body: bytes) -> bytes:
    return b'{"t":"' + name + b'","s":' + str(seq).encode() + b',"op":0,"d":' + body + b"}"


class GatewayConnection:
    """One websocket client: an outgoing queue drained by a writer task."""

    def __init__(
        self,
        ws: Any,
        compress: str | None,
        path: str,
        now: float,
        *,
        serial: int = 0,
        peer: tuple[str, int] | None = None,
    ) -> None:
        self.ws = ws
        self.path = path
        self.serial = serial
        self.peer = peer  # the client's address and port
        self.compress = compress
        self.session: Session | None = None
        self.delivered = 0
        self.last_beat = now
        self.received: deque[float] = deque()
        self.server_closing = False
        self.finished = False
        self._out: deque[bytes | _Close] = deque()
        self._wake = trio.Event()
        self._drained = trio.Event()
        self._zlib = zlib.compressobj(ZLIB_LEVEL) if compress == "zlib-stream" else None
        self._zstd = (
            zstandard.ZstdCompressor().compressobj()
            if compress == "zstd-stream" and zstandard is not None
            else None
        )

    @property
    def pending(self) -> int:
        """Frames queued and not yet written."""
        return len(self._out)

    def push(self, payload: bytes) -> None:
        """Queue one JSON payload."""
        if self.server_closing:
            return
        self._out.append(payload)
        self._wake.set()

    def push_op(self, op: int, d: object) -> None:
        """Queue one non-dispatch payload."""
        self.push(orjson.dumps({"op": op, "d": d, "s": None, "t": None}))

    def close(self, code: int, reason: str | None = None) -> None:
        """Queue a close frame with `code` after what is already queued."""
        if self.server_closing:
            return
        self._out.append(
            _Close(code, reason if reason is not None else _CLOSE_REASONS.get(code, ""))
        )
        self.server_closing = True
        self._wake.set()

    def drop(self) -> None:
        """Close the TCP connection now, without a close frame; queued frames are lost.

        Like a network failure: what the kernel already took may still arrive, the rest
        never does, and a resuming client gets it replayed from its last seq.
        """
        if self.finished:
            return
        self.server_closing = True
        self._out.clear()
        # Closing the socket wakes any task blocked on it with ClosedResourceError.
        self.ws._stream.socket.close()
        self._wake.set()

    async def wait_drained(self, limit: int = QUEUE_HIGH_WATER) -> None:
        """Wait until at most `limit` frames are queued (or the connection is gone)."""
        while len(self._out) > limit and not self.finished:
            self._drained = trio.Event()
            await self._drained.wait()

    async def run_writer(self) -> None:
        """Write queued frames until a close or drop, or until the socket breaks."""
        try:
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                while self._out:
                    if await self._write_some():
                        return
        except (
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            trio_websocket.ConnectionClosed,
        ):
            return
        finally:
            self.finished = True
            self._drained.set()

    async def _write_some(self) -> bool:
        """Write one batch; True when the connection is finished."""
        batch = bytearray()
        while self._out and len(batch) < WRITE_BATCH_BYTES:
            item = self._out[0]
            if isinstance(item, bytes):
                self._out.popleft()
                batch += self._frame(item)
                continue
            if batch:
                break
            self._out.popleft()
            await self._finish(item)
            return True
        if batch:
            await self._send_raw(bytes(batch))
        self._drained.set()
        return False

    async def _finish(self, item: _Close) -> None:
        with trio.move_on_after(CLOSE_HANDSHAKE_TIMEOUT):
            await self.ws.aclose(item.code, item.reason)
        await self.ws._stream.aclose()

    async def _send_raw(self, data: bytes) -> None:
        # trio-websocket serializes its own writes (pongs, close frames) with this lock, and
        # negotiates no extensions, so whole unfragmented frames can be written beside it.
        async with self.ws._stream_lock:
            await self.ws._stream.send_all(data)

    def _frame(self, payload: bytes) -> bytes:
        if self._zlib is not None:
            data = self._zlib.compress(payload) + self._zlib.flush(zlib.Z_SYNC_FLUSH)
            first = 0x82
        elif self._zstd is not None:
            data = self._zstd.compress(payload) + self._zstd.flush(
                zstandard.COMPRESSOBJ_FLUSH_BLOCK
            )
            first = 0x82
        else:
            data = payload
            first = 0x81
        size = len(data)
        if size < 126:
            return bytes((first, size)) + data
        if size < 65536:
            return struct.pack("!BBH", first, 126, size) + data
        return struct.pack("!BBQ", first, 127, size) + data


@attrs.define
class _Counters:
    connections: int = 0
    identifies: int = 0
    resumes: int = 0
    heartbeats: int = 0
    resume_failures: int = 0
    heartbeat_timeouts: int = 0
    resume_url_connections: int = 0
    last_identify: Json | None = None
    last_connect_path: str | None = None
    client_drops: int = 0
    client_close_codes: list[int] = attrs.Factory(list)
    identify_times: deque[float] = attrs.Factory(lambda: deque(maxlen=TIMES_KEPT))
    heartbeat_times: deque[float] = attrs.Factory(lambda: deque(maxlen=TIMES_KEPT))
    received_ops: dict[int, int] = attrs.Factory(dict)
    identify_rate_limited: int = 0
    shard_identifies: dict[int, int] = attrs.Factory(dict)


class GatewayHub:
    """All gateway sessions and connections, and the faults that act on them."""

    def __init__(
        self,
        world: World,
        token: str,
        *,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_MS,
        enforce_heartbeat: bool = True,
        allowed_privileged_intents: int = PRIVILEGED_INTENTS,
        required_shards: int | None = None,
        limit_identify_concurrency: bool = False,
        max_concurrency: int = 1,
        recommended_shards: int | None = None,
        record_deliveries: bool = False,
        notify: Callable[[], None] = lambda: None,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        if recommended_shards is not None and recommended_shards < 1:
            raise ValueError("recommended_shards must be at least 1")
        self.world = world
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.enforce_heartbeat = enforce_heartbeat
        self.allowed_privileged_intents = allowed_privileged_intents
        self.required_shards = required_shards
        self.limit_identify_concurrency = limit_identify_concurrency
        self.max_concurrency = max_concurrency
        self.recommended_shards = recommended_shards
        self.heartbeat_ack = True
        self.hold = False
        self.url = ""
        self.resume_url = ""
        self.sessions: dict[str, Session] = {}
        self.connections: set[GatewayConnection] = set()
        self.session_starts_remaining = SESSION_START_TOTAL
        self.counters = _Counters()
        self._notify = notify
        # rate_limit_key (shard_id % max_concurrency) -> when that bucket last started a session.
        self._last_identify_at: dict[int, float] = {}
        self._nursery: trio.Nursery | None = None
        self._serials = itertools.count(1)
        # Message id -> every connection its MESSAGE_CREATE was handed to (None: not kept).
        self.deliveries: dict[int, list[Delivery]] | None = {} if record_deliveries else None

    # ------------------------------------------------------------------ serving

    async def serve(
        self,
        host: str,
        port: int,
        *,
        task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Serve the gateway on host:port until cancelled; reports the bound port."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            server = await nursery.start(
                trio_websocket.serve_websocket, self._handle, host, port, None
            )
            task_status.started(server.port)

    async def _handle(self, request: Any) -> None:
        if any(name.lower() == b"origin" for name, _ in request.headers):
            # Bots send no Origin; browsers always do. Refused, no web page the owner opens
            # can read the simulated server (`sim --chat` may carry real conversations).
            await request.reject(403, body=b"browsers may not connect to the gateway\n")
            return
        split = urlsplit(request.path)
        query = dict(parse_qsl(split.query))
        compress = query.get("compress")
        ws = await request.accept()
        remote = ws.remote
        peer = None if isinstance(remote, str) else (str(remote.address), int(remote.port))
        conn = GatewayConnection(
            ws,
            compress,
            request.path,
            trio.current_time(),
            serial=next(self._serials),
            peer=peer,
        )
        self.connections.add(conn)
        self.counters.connections += 1
        self.counters.last_connect_path = request.path
        if split.path.startswith("/resume"):
            self.counters.resume_url_connections += 1
        self._notify()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.run_writer)
                problem = _check_query(query)
                if problem is not None:
                    self._close(conn, *problem)
                else:
                    conn.push_op(10, {"heartbeat_interval": self.heartbeat_interval_ms})
                    if self.enforce_heartbeat:
                        nursery.start_soon(self._watch_heartbeats, conn)
                await self._read_loop(conn)
                nursery.cancel_scope.cancel()
        finally:
            self._detach(conn)
            self.connections.discard(conn)
            self._notify()

    async def _read_loop(self, conn: GatewayConnection) -> None:
        while True:
            try:
                message = await conn.ws.get_message()
            except trio_websocket.ConnectionClosed as exc:
                if not conn.server_closing and exc.reason is not None:
                    code = int(exc.reason.code)
                    if code == ABNORMAL_CLOSURE:
                        self.counters.client_drops += 1
                    else:
                        self.counters.client_close_codes.append(code)
                    # A client closing with 1000/1001 ends its session (Discord's rule).
                    if code in (1000, 1001) and conn.session is not None:
                        self._invalidate(conn.session)
                return
            if conn.server_closing:
                continue
            self._on_payload(conn, message)

    def _on_payload(self, conn: GatewayConnection, message: str | bytes) -> None:
        now = trio.current_time()
        conn.received.append(now)
        while conn.received and conn.received[0] <= now - SEND_WINDOW_SECONDS:
            conn.received.popleft()
        if len(conn.received) > SEND_LIMIT:
            self._close(conn, 4008)
            return
        raw = message.encode() if isinstance(message, str) else message
        if len(raw) > MAX_PAYLOAD_BYTES:
            self._close(conn, 4002)
            return
        try:
            payload = orjson.loads(raw)
        except orjson.JSONDecodeError:
            self._close(conn, 4002)
            return
        if not isinstance(payload, dict) or not isinstance(payload.get("op"), int):
            self._close(conn, 4002)
            return
        op = payload["op"]
        data = payload.get("d")
        self.counters.received_ops[op] = self.counters.received_ops.get(op, 0) + 1
        if op == 1:
            self._on_heartbeat(conn, now)
        elif op == 2:
            self._on_identify(conn, data, now)
        elif op == 6:
            self._on_resume(conn, data)
        elif op in (3, 4, 8, 31):
            if conn.session is None:
                self._close(conn, 4003)
            elif op == 8:
                self._on_request_members(conn, data)
        else:
            self._close(conn, 4001)

    def _on_heartbeat(self, conn: GatewayConnection, now: float) -> None:
        self.counters.heartbeats += 1
        self.counters.heartbeat_times.append(now)
        conn.last_beat = now
        if self.heartbeat_ack:
            conn.push(b'{"op":11,"d":null,"s":null,"t":null}')
        self._notify()

    def _on_identify(self, conn: GatewayConnection, data: Any, now: float) -> None:
        if conn.session is not None:
            self._close(conn, 4005)
            return
        if not isinstance(data, dict) or not isinstance(data.get("properties"), dict):
            self._close(conn, 4001)
            return
        if data.get("token") != self.token:
            self._close(conn, 4004)
            return
        intents = data.get("intents")
        if not isinstance(intents, int) or isinstance(intents, bool):
            self._close(conn, 4013)
            return
        shard_ok, shard = _parse_shard(data.get("shard"))
        if not shard_ok:
            self._close(conn, 4010)
            return
        if self.required_shards is not None and (shard is None or shard[1] < self.required_shards):
            self._close(conn, 4011)
            return
        if intents & ~VALID_INTENTS:
            self._close(conn, 4013)
            return
        if intents & PRIVILEGED_INTENTS & ~self.allowed_privileged_intents:
            self._close(conn, 4014)
            return
        shard_id = shard[0] if shard is not None else 0
        guild_ids = [g for g in self.world.guilds if _on_shard(g, shard)]
        if len(guild_ids) > MAX_GUILDS_PER_SHARD:
            self._close(conn, 4011)
            return
        # Each rate_limit_key bucket may start one session per 5 s (Discord's Max Concurrency).
        key = shard_id % self.max_concurrency
        last = self._last_identify_at.get(key)
        too_soon = last is not None and now - last < IDENTIFY_WINDOW_SECONDS
        if self.limit_identify_concurrency and too_soon:
            self.counters.identify_rate_limited += 1
            conn.push_op(9, False)
            self._notify()
            return
        if self.session_starts_remaining <= 0:
            conn.push_op(9, False)
            return
        self._last_identify_at[key] = now
        self.session_starts_remaining -= 1
        starts = self.counters.shard_identifies
        starts[shard_id] = starts.get(shard_id, 0) + 1
        recorded = dict(data)
        recorded["token"] = REDACTED
        self.counters.identifies += 1
        self.counters.identify_times.append(now)
        self.counters.last_identify = recorded
        session = Session(secrets.token_hex(16), intents, shard)
        self.sessions[session.id] = session
        self._attach(session, conn)
        self._send_ready(session, guild_ids, data.get("shard") is not None)
        self._notify()

    def _send_ready(self, session: Session, guild_ids: list[int], shard_sent: bool) -> None:
        world = self.world
        ready: Json = {
            "v": 10,
            "user": world.bot_user_payload(),
            "guilds": [{"id": str(g), "unavailable": True} for g in guild_ids],
            "session_id": session.id,
            "resume_gateway_url": self.resume_url,
            "session_type": "normal",
            "private_channels": [],
            "presences": [],
            "relationships": [],
            "user_settings": {},
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": ["simulated"],
            "application": {
                "id": str(world.application_id),
                "flags": (1 << 12) | (1 << 14) | (1 << 18),
            },
            "_trace": _TRACE,
        }
        if shard_sent and session.shard is not None:
            ready["shard"] = list(session.shard)
        self._append(session, b"READY", orjson.dumps(ready))
        for guild_id in guild_ids:
            self._append(
                session, b"GUILD_CREATE", orjson.dumps(world.guild_create_payload(guild_id))
            )

    def _on_resume(self, conn: GatewayConnection, data: Any) -> None:
        if conn.session is not None:
            self._close(conn, 4005)
            return
        if not isinstance(data, dict) or not isinstance(data.get("session_id"), str):
            self._close(conn, 4001)
            return
        if data.get("token") != self.token:
            self._close(conn, 4004)
            return
        self._expire(trio.current_time())
        session = self.sessions.get(data["session_id"])
        seq = data.get("seq")
        if seq is None:
            seq = 0
        if not isinstance(seq, int) or isinstance(seq, bool):
            self._close(conn, 4001)
            return
        oldest = session.buffer[0][0] if session is not None and session.buffer else None
        if session is None or not session.valid or (oldest is not None and seq < oldest - 1):
            self.counters.resume_failures += 1
            conn.push_op(9, False)
            self._notify()
            return
        if seq > session.seq:
            self._close(conn, 4007)
            return
        old = session.connection
        if old is not None and old is not conn:
            old.session = None
            old.drop()
        self._attach(session, conn)
        for entry_seq, name, body in session.buffer:
            if entry_seq > seq:
                self._deliver(conn, session, entry_seq, name, body)
        conn.delivered = session.seq
        self.counters.resumes += 1
        self._append(session, b"RESUMED", _RESUMED_BODY)
        self._notify()

    def _on_request_members(self, conn: GatewayConnection, data: Any) -> None:
        if not isinstance(data, dict) or conn.session is None:
            return
        raw_guild = data.get("guild_id")
        guild_id = (
            int(raw_guild)
            if isinstance(raw_guild, (str, int)) and str(raw_guild).isdigit()
            else None
        )
        if guild_id is None or guild_id not in self.world.guilds:
            return
        chunk: Json = {
            "guild_id": str(guild_id),
            "members": [self.world.member_payload(u, with_user=True) for u in self.world.users],
            "chunk_index": 0,
            "chunk_count": 1,
        }
        if data.get("nonce") is not None:
            chunk["nonce"] = data["nonce"]
        self._append(conn.session, b"GUILD_MEMBERS_CHUNK", orjson.dumps(chunk))

    async def _watch_heartbeats(self, conn: GatewayConnection) -> None:
        grace = self.heartbeat_interval_ms / 1000 * HEARTBEAT_GRACE_INTERVALS
        while not conn.server_closing:
            wait = conn.last_beat + grace - trio.current_time()
            if wait <= 0:
                # Discord forces a late heartbeater to resume: drop the socket, keep the session.
                self.counters.heartbeat_timeouts += 1
                self._detach(conn)
                conn.drop()
                self._notify()
                return
            await trio.sleep(wait)

    # ---------------------------------------------------------------- dispatching

    def dispatch(self, event: Dispatch) -> None:
        """Send one world event to every session that may see it."""
        if not self.sessions:
            return  # also lets the world be built before the trio run starts
        self._expire(trio.current_time())
        full: bytes | None = None
        stripped: bytes | None = None
        name = event.name.encode()
        for session in list(self.sessions.values()):
            if not session.wants(event.intent, event.guild_id):
                continue
            if event.strippable and not session.intents & INTENT_MESSAGE_CONTENT:
                if stripped is None:
                    stripped = orjson.dumps(_strip_content(event.data))
                self._append(session, name, stripped)
            else:
                if full is None:
                    full = orjson.dumps(event.data)
                self._append(session, name, full)

    def _append(self, session: Session, name: bytes, body: bytes) -> None:
        session.seq += 1
        seq = session.seq
        session.buffer.append((seq, name, body))
        conn = session.connection
        if conn is not None and not self.hold:
            self._deliver(conn, session, seq, name, body)
            conn.delivered = seq

    def _deliver(
        self, conn: GatewayConnection, session: Session, seq: int, name: bytes, body: bytes
    ) -> None:
        """Queue one dispatch on `conn`; a MESSAGE_CREATE is recorded when deliveries are."""
        if conn.server_closing:
            return  # what a closing connection would drop anyway
        conn.push(_dispatch_frame(name, seq, body))
        if self.deliveries is not None and name == b"MESSAGE_CREATE":
            message_id = int(orjson.loads(body)["id"])
            self.deliveries.setdefault(message_id, []).append(
                Delivery(message_id, conn.serial, conn.peer, session.id, seq)
            )

    async def blast(self, bodies: list[bytes], *, guild_id: int, intent: int) -> int:
        """Send pre-serialized MESSAGE_CREATE bodies to every live session; frames sent."""
        targets = [
            s
            for s in self.sessions.values()
            if s.connection is not None and s.wants(intent, guild_id)
        ]
        sent = 0
        async with trio.open_nursery() as nursery:
            for session in targets:
                nursery.start_soon(self._blast_one, session, bodies)
                sent += len(bodies)
        return sent

    async def _blast_one(self, session: Session, bodies: list[bytes]) -> None:
        step = QUEUE_HIGH_WATER // 2
        for start in range(0, len(bodies), step):
            conn = session.connection
            if conn is None:
                return
            for body in bodies[start : start + step]:
                self._append(session, b"MESSAGE_CREATE", body)
            await conn.wait_drained()
            await trio.lowlevel.checkpoint()
        conn = session.connection
        if conn is not None:
            # "Sent" means handed to the socket, so a caller can time the client's side.
            await conn.wait_drained(0)

    # --------------------------------------------------------------------- faults

    def drop_connections(self) -> None:
        """Close every client's TCP connection abruptly; sessions stay resumable."""
        for conn in list(self.connections):
            self._detach(conn)
            conn.drop()
        self._notify()

    def send_reconnect(self, *, close_after: float | None = RECONNECT_CLOSE_AFTER) -> None:
        """Send op 7 to every client; drop the socket `close_after` seconds later if still open."""
        for conn in list(self.connections):
            conn.push_op(7, None)
            if close_after is not None and self._nursery is not None:
                self._nursery.start_soon(self._drop_later, conn, close_after)

    async def _drop_later(self, conn: GatewayConnection, delay: float) -> None:
        await trio.sleep(delay)
        if conn in self.connections and not conn.server_closing:
            self._detach(conn)
            conn.drop()
            self._notify()

    def invalidate_session(self, resumable: bool, shard: int | None = None) -> None:
        """Send op 9 with d=`resumable` to every identified client (of shard id `shard` only,
        when given); d=false ends the sessions."""
        for conn in list(self.connections):
            session = conn.session
            if session is None:
                continue
            if shard is not None and (session.shard or (0, 1))[0] != shard:
                continue
            conn.push_op(9, resumable)
            if not resumable:
                self._invalidate(session)
        self._notify()

    def close_connections(self, code: int, reason: str | None = None) -> None:
        """Close every client with `code`; codes Discord will not resume end the sessions."""
        for conn in list(self.connections):
            self._close(conn, code, reason)
        self._notify()

    def request_heartbeat(self) -> None:
        """Send op 1 to every client: each must heartbeat at once."""
        for conn in list(self.connections):
            conn.push_op(1, None)

    def release_held(self) -> None:
        """Deliver every dispatch held back while `hold` was set to the attached connections."""
        self.hold = False
        for session in self.sessions.values():
            conn = session.connection
            if conn is None:
                continue
            for seq, name, body in session.buffer:
                if seq > conn.delivered:
                    self._deliver(conn, session, seq, name, body)
            conn.delivered = session.seq

    # -------------------------------------------------------------------- queries

    def stats(self) -> GatewayStats:
        """A snapshot of the counters."""
        c = self.counters
        return GatewayStats(
            connections=c.connections,
            identifies=c.identifies,
            resumes=c.resumes,
            heartbeats=c.heartbeats,
            last_identify=c.last_identify,
            active_connections=len(self.connections),
            ready_sessions=sum(
                1 for s in self.sessions.values() if s.valid and s.connection is not None
            ),
            resume_failures=c.resume_failures,
            heartbeat_timeouts=c.heartbeat_timeouts,
            client_close_codes=tuple(c.client_close_codes),
            client_drops=c.client_drops,
            last_connect_path=c.last_connect_path,
            resume_url_connections=c.resume_url_connections,
            identify_times=tuple(c.identify_times),
            heartbeat_times=tuple(c.heartbeat_times),
            received_ops=dict(c.received_ops),
            identify_rate_limited=c.identify_rate_limited,
            shard_identifies=dict(c.shard_identifies),
        )

    def gateway_bot(self) -> Json:
        """The body of GET /gateway/bot: the recommended shard count and session start limit."""
        shards = self.recommended_shards
        if shards is None:
            shards = max(1, math.ceil(len(self.world.guilds) / GUILDS_PER_RECOMMENDED_SHARD))
        return {
            "url": self.url,
            "shards": shards,
            "session_start_limit": {
                "total": SESSION_START_TOTAL,
                "remaining": self.session_starts_remaining,
                "reset_after": SESSION_START_RESET_MS,
                "max_concurrency": self.max_concurrency,
            },
        }

    def live_sessions(self) -> list[Session]:
        """Sessions with a connection attached."""
        return [s for s in self.sessions.values() if s.connection is not None]

    # ------------------------------------------------------------------ internals

    def _close(self, conn: GatewayConnection, code: int, reason: str | None = None) -> None:
        """Close `conn` with `code`: its session ends if Discord would not resume after it."""
        session = conn.session
        if session is not None and code in NON_RESUMABLE_CLOSE_CODES:
            self._invalidate(session)
        else:
            self._detach(conn)
        conn.close(code, reason)

    def _detach(self, conn: GatewayConnection) -> None:
        session = conn.session
        if session is not None and session.connection is conn:
            session.connection = None
            session.detached_at = trio.current_time()

    def _attach(self, session: Session, conn: GatewayConnection) -> None:
        conn.session = session
        session.connection = conn
        session.detached_at = None

    def _expire(self, now: float) -> None:
        """Forget sessions that have had no connection for longer than Discord keeps them."""
        for session in list(self.sessions.values()):
            if (
                session.detached_at is not None
                and now - session.detached_at > SESSION_RESUME_WINDOW
            ):
                self._invalidate(session)

    def _invalidate(self, session: Session) -> None:
        session.valid = False
        self.sessions.pop(session.id, None)
        conn = session.connection
        if conn is not None:
            conn.session = None
        session.connection = None


def _check_query(query: dict[str, str]) -> tuple[int, str] | None:
    version = query.get("v")
    if version is not None and version not in ("9", "10"):
        return 4012, "Invalid API version."
    encoding = query.get("encoding", "json")
    if encoding != "json":
        return 4002, "The simulator speaks encoding=json only."
    compress = query.get("compress")
    if compress not in (None, "zlib-stream", "zstd-stream"):
        return 4002, f"Unknown transport compression {compress!r}."
    if compress == "zstd-stream" and zstandard is None:
        return 4002, "zstd-stream needs the zstandard module."
    return None


def _parse_shard(raw: Any) -> tuple[bool, tuple[int, int] | None]:
    """(valid, (id, count)); the shard is None when IDENTIFY had none."""
    if raw is None:
        return True, None
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in raw)
    ):
        return False, None
    shard_id, count = raw
    if count < 1 or not 0 <= shard_id < count:
        return False, None
    return True, (shard_id, count)


def _strip_content(data: Json) -> Json:
    """A message payload as a session without MESSAGE_CONTENT sees it."""
    out = dict(data)
    out["content"] = ""
    out["embeds"] = []
    out["attachments"] = []
    out["components"] = []
    out.pop("poll", None)
    return out
