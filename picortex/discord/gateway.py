"""The gateway actor: drives `GatewayProtocol` over trio-websocket with transport compression.

It owns the one websocket (trio-websocket's client on a TCP or TLS stream it opens and
closes itself), hands every DISPATCH to `on_dispatch` synchronously, writes `gateway` events
to the action log and raises FatalDiscordError when Discord refuses us.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import ssl
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
import orjson
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    WebSocketConnection,
    wrap_client_stream,
)

from picortex.discord.protocol import (
    Action,
    Close,
    Dispatch,
    Fatal,
    GatewayProtocol,
    GatewayState,
    GatewayStatus,
    GatewayTimings,
    IdentifyPacer,
    Notify,
    Reconnect,
    Report,
    Send,
)
from picortex.errors import ConfigError, FatalDiscordError, GatewayError
from picortex.tls import tls_context
from picortex.types import EventSink

if TYPE_CHECKING:
    from picortex.discord.shared_limits import IdentifyGate

_zstd: ModuleType | None
try:  # zstd-stream is used when the optional zstandard module is there.
    import zstandard as _zstd
except ImportError:  # pragma: no cover - exercised only where zstandard is missing
    _zstd = None

__all__ = [
    "GatewayActor",
    "GatewayBotSource",
    "GatewayStatus",
    "ZlibStream",
    "ZstdStream",
    "build_gateway_url",
    "default_compression",
]

log = logging.getLogger(__name__)

Compression = Literal["zlib-stream", "zstd-stream"]

API_VERSION: Final = 10
# zlib-stream marks the end of each gateway message with this Z_SYNC_FLUSH trailer.
ZLIB_SUFFIX: Final = b"\x00\x00\xff\xff"
# Seconds for the TCP + TLS + websocket handshake before we call the attempt failed.
CONNECT_TIMEOUT: Final = 30.0
# Seconds a single send may take before the connection counts as stalled.
SEND_TIMEOUT: Final = 10.0
# Seconds we wait for the peer to answer our close frame before dropping the socket.
CLOSE_TIMEOUT: Final = 5.0
# When the actor is cancelled or fails, the close frame gets this long to go out. Nobody is
# left to read the reply (the library's reader is cancelled too), so the whole wait is spent
# on every shutdown and hand-back; the frame itself reaches the kernel within a send call.
ABANDON_CLOSE_TIMEOUT: Final = 0.1
# Seconds for GET /gateway/bot (the REST client retries inside this).
REST_TIMEOUT: Final = 60.0
# Retrying the first GET /gateway/bot: quick at first, then at most once a minute.
FETCH_RETRY_BASE: Final = 1.0
FETCH_RETRY_CAP: Final = 60.0
# A GUILD_CREATE of a big guild is large; a message beyond this is refused by the socket.
MAX_MESSAGE_BYTES: Final = 16 * 2**20
# Bytes per socket read: a bigger read means fewer wake-ups of the socket's reader in a burst.
RECEIVE_BYTES: Final = 64 * 2**10
# Whole messages the socket's reader task may queue ahead of us: more than one socket read
# brings in a burst (so a read is handed on whole), few enough that TCP pushes back on
# Discord when we fall behind.
MESSAGE_QUEUE: Final = 256
# RFC 6455 7.4.1: the code reported when the connection ended without a close frame.
ABNORMAL_CLOSURE: Final = 1006
# How often the session's seq is persisted while connected (and at READY/RESUMED, and when
# we stop): never per frame. A restart resumes from at most this far back, which only means
# a few more replayed events, each dropped as already handled.
SESSION_SAVE_SECONDS: Final = 1.0


class SessionStore(Protocol):
    """Where the gateway session is kept across processes (the store, in the app)."""

    def gateway_session(self, shard: tuple[int, int]) -> tuple[str, str, int] | None: ...

    def save_gateway_session(
        self, shard: tuple[int, int], session_id: str, url: str, seq: int, at: float
    ) -> None: ...

    def clear_gateway_session(self, shard: tuple[int, int]) -> None: ...


class GatewayBotSource(Protocol):
    """What the actor needs from the REST client: GET /gateway/bot."""

    async def get_gateway_bot(self) -> Mapping[str, Any]:
        """The gateway URL and session start limit."""
        ...


def default_compression() -> Compression:
    """zstd-stream when zstandard is importable, else zlib-stream."""
    return "zstd-stream" if _zstd is not None else "zlib-stream"


def build_gateway_url(base: str, compress: Compression | None) -> str:
    """`base` with `v`, `encoding` and `compress` query parameters set."""
    parts = urlsplit(base)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in {"v", "encoding", "compress"}]
    query += [("v", str(API_VERSION)), ("encoding", "json")]
    if compress is not None:
        query.append(("compress", compress))
    return urlunsplit((parts.scheme, parts.netloc, parts.path or "/", urlencode(query), ""))


class ZlibStream:
    """One connection's zlib-stream context: buffer until Z_SYNC_FLUSH, then inflate."""

    errors: Final = (zlib.error,)

    def __init__(self) -> None:
        self._inflate = zlib.decompressobj()
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> bytes | None:
        """Add one websocket message; the inflated gateway message once it is complete."""
        if chunk[-4:] != ZLIB_SUFFIX:
            self._buffer += chunk
            return None
        if self._buffer:
            self._buffer += chunk
            chunk = bytes(self._buffer)
            self._buffer.clear()
        return self._inflate.decompress(chunk)


class ZstdStream:
    """One connection's zstd-stream context: each websocket message is one gateway message."""

    errors: Final[tuple[type[Exception], ...]] = (_zstd.ZstdError,) if _zstd is not None else ()

    def __init__(self) -> None:
        if _zstd is None:  # pragma: no cover - guarded by default_compression()
            raise ConfigError("zstd-stream needs the zstandard module")
        self._decompress = _zstd.ZstdDecompressor().decompressobj().decompress

    def feed(self, chunk: bytes) -> bytes | None:
        """Decompress one websocket message into one gateway message."""
        return self._decompress(chunk) or None


Inflater = ZlibStream | ZstdStream


@attrs.define
class _Connection:
    """One open socket and how it ended."""

    ws: WebSocketConnection
    close_code: int | None = None
    close_reason: str = ""
    closed_by_us: bool = False
    # Set once our closing handshake is over (answered, or given up on).
    close_done: trio.Event = attrs.Factory(trio.Event)


class IdentifyTurns:
    """The session start limit shared by the shards of one process (and, given a `gate`, by
    every process of a cluster).

    Holds the one pacer they all count their IDENTIFYs in, and one turn per rate-limit
    bucket: a shard takes its bucket's turn before waiting out the pacer and gives it back
    once its IDENTIFY is sent (or the connection failed first), so two shards of a bucket
    never identify within one window (Discord would answer op 9). Then it `claim`s the bucket
    from the `gate`, which holds it for the cluster until the IDENTIFY's outcome is known.
    """

    def __init__(self, window: float = 5.0, *, gate: IdentifyGate | None = None) -> None:
        self.pacer = IdentifyPacer(window=window)
        self._window = window
        self._turns: dict[int, trio.Semaphore] = {}
        self._gate = gate

    def turn(self, shard_id: int) -> trio.Semaphore:
        """The turn of shard `shard_id`'s bucket (a semaphore: any task may give it back)."""
        return self._turns.setdefault(self.pacer.bucket(shard_id), trio.Semaphore(1))

    async def claim(self, shard_id: int) -> float:
        """Wait for the bucket's turn across processes; the seconds waited (0 without a gate)."""
        if self._gate is None:
            return 0.0
        return await self._gate.claim(shard_id, self.pacer.bucket(shard_id), self._window)

    def identified(self, shard_id: int) -> None:
        """Shard `shard_id`'s IDENTIFY was just sent."""
        if self._gate is not None:
            self._gate.identified(shard_id)

    def settle(self, shard_id: int, *, invalid: bool = False) -> None:
        """The IDENTIFY's outcome is known (READY, op 9, or the connection ended)."""
        if self._gate is not None:
            self._gate.settle(shard_id, invalid=invalid)


class GatewayActor:
    """Holds the bot's gateway session and keeps it alive until cancelled or refused."""

    def __init__(
        self,
        token: str,
        rest: GatewayBotSource,
        events: EventSink,
        on_dispatch: Callable[[str, Any, int | None], None],
        *,
        shard: tuple[int, int] = (0, 1),
        compress: Compression | Literal["auto"] | None = "auto",
        timings: GatewayTimings | None = None,
        rng: random.Random | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        send_timeout: float = SEND_TIMEOUT,
        close_timeout: float = CLOSE_TIMEOUT,
        sessions: SessionStore | None = None,
        safe_seq: Callable[[], int | None] | None = None,
        turns: IdentifyTurns | None = None,
    ) -> None:
        shard_id, shard_count = shard
        if not 0 <= shard_id < shard_count:
            raise ConfigError(f"shard {shard_id}/{shard_count} is not a valid shard")
        self._rest = rest
        self._events = events
        self._on_dispatch = on_dispatch
        self._compress: Compression | None = (
            default_compression() if compress == "auto" else compress
        )
        if self._compress == "zstd-stream" and _zstd is None:
            raise ConfigError("zstd-stream compression needs the zstandard module")
        self._connect_timeout = connect_timeout
        self._send_timeout = send_timeout
        self._close_timeout = close_timeout
        self._rng = rng or random.Random()
        window = (timings or GatewayTimings()).identify_window
        self._turns = turns or IdentifyTurns(window)
        self._proto = GatewayProtocol(
            token, shard=shard, timings=timings, rng=self._rng, pacer=self._turns.pacer
        )
        # The bucket turn this shard holds until its IDENTIFY is sent, if any.
        self._turn: trio.Semaphore | None = None
        self._base_url: str | None = None
        self._timer_scope: trio.CancelScope | None = None
        self._task_status: trio.TaskStatus[None] | None = None
        self._conn: _Connection | None = None
        self._sessions = sessions
        # The seq below which every dispatch is handled for good (None: the live seq).
        self._safe_seq = safe_seq
        self._saved: tuple[str, str, int] | None = None
        self._restored = False
        # How a cancelled run leaves (SPEC 17): None ends the session (close 1000);
        # "hand_back" saves it and closes with 4000 for the shard's next holder; "lost"
        # (the lease is gone: the session may be another's now) closes with 4000 and
        # neither saves nor forgets it.
        self.leaving: Literal["hand_back", "lost"] | None = None

    @property
    def seq(self) -> int | None:
        """The last sequence number received (that of the dispatch being handed on)."""
        return self._proto.seq

    def _restore_session(self) -> None:
        """Once per process: take up the session a previous process left resumable."""
        if self._restored or self._sessions is None:
            return
        self._restored = True
        try:
            saved = self._sessions.gateway_session(self._proto.shard)
        except Exception:
            log.exception("could not read the persisted gateway session")
            return
        if saved is None:
            return
        session_id, url, seq = saved
        self._proto.restore_session(session_id, url, seq)
        self._saved = saved
        self._events.emit("gateway", action="session_restored", session_id=session_id, seq=seq)

    def save_session(self, *, ready: bool = False) -> None:
        """Persist (session_id, resume URL, safe seq) when it changed; cheap when it did not.

        The seq saved is the router's safe one: a RESUME from it replays every message not
        yet handled for good. At READY nothing came before it in the new session, so its own
        seq is safe.
        """
        proto = self._proto
        if self._sessions is None or proto.session_id is None or not proto.resume_gateway_url:
            return
        if proto.state is not GatewayState.READY or proto.seq is None:
            return
        seq = proto.seq
        if self._safe_seq is not None and not ready:
            safe = self._safe_seq()
            if safe is None:
                return  # nothing routed in this session yet: the last save stands
            seq = max(0, min(seq, safe))
        record = (proto.session_id, proto.resume_gateway_url, seq)
        if record == self._saved:
            return
        try:
            self._sessions.save_gateway_session(proto.shard, *record, time.time())
        except Exception:
            log.exception("could not persist the gateway session")
            return
        self._saved = record

    def _forget_saved_session(self) -> None:
        if self._sessions is None or self._saved is None:
            return
        try:
            self._sessions.clear_gateway_session(self._proto.shard)
        except Exception:
            log.exception("could not clear the persisted gateway session")
            return
        self._saved = None

    def status(self) -> GatewayStatus:
        """Connection state, session, last seq, heartbeat latency, resume URL, reconnects."""
        return self._proto.status()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, stay connected, reconnect; `started()` once the first READY/RESUMED arrives.

        Raises:
            FatalDiscordError: a fatal close code (4004, 4010-4014), or a 401 from REST.
        """
        self._task_status = task_status
        proto = self._proto
        self._restore_session()
        fetched = False
        while True:
            if not proto.will_resume or not (fetched or proto.resume_gateway_url):
                # Discord: fetch the URL first, and again when a fresh session is needed. A
                # saved session resumes on its own URL at once (a shard taken over does not
                # wait for the fetch); the fetch comes if it has to IDENTIFY after all.
                fetched = await self._fetch_gateway(required=not fetched) or fetched
            resume = proto.will_resume
            try:
                if not resume:
                    await self._take_turn()
                target = proto.resume_gateway_url if resume and proto.resume_gateway_url else None
                target = target or self._base_url
                assert target is not None  # fetched above unless a resume URL is known
                url = build_gateway_url(target, self._compress)
                self._events.emit(
                    "gateway", action="connect", url=url, resume=resume, shard=list(proto.shard)
                )
                decision = await self._attempt(url)
            finally:
                self._give_turn()
                self._turns.settle(proto.shard[0])
            for action in decision:
                if isinstance(action, Fatal):
                    self._events.emit(
                        "gateway", action="fatal", code=action.code, reason=action.reason
                    )
                    raise FatalDiscordError(action.reason, close_code=action.code)
                if isinstance(action, Reconnect):
                    self._events.emit(
                        "gateway",
                        action="reconnect",
                        reason=action.reason,
                        resume=action.resume,
                        delay=round(action.delay, 3),
                    )
                    await trio.sleep(action.delay)
                else:
                    self._perform_now(action)

    async def _take_turn(self) -> None:
        """Wait for this shard's bucket to be free and its pacing to allow an IDENTIFY."""
        proto = self._proto
        turn = self._turns.turn(proto.shard[0])
        await turn.acquire()
        self._turn = turn
        while (wait := proto.identify_delay(trio.current_time())) > 0:
            self._events.emit(
                "gateway",
                action="identify_wait",
                seconds=round(wait, 3),
                remaining=proto.pacer.remaining,
                shard=list(proto.shard),
            )
            await trio.sleep(wait)
        # Other processes' shards of the bucket: held for the cluster until the outcome.
        waited = await self._turns.claim(proto.shard[0])
        if waited > 0:
            self._events.emit(
                "gateway",
                action="identify_wait",
                seconds=round(waited, 3),
                shard=list(proto.shard),
                cluster=True,
            )

    def _give_turn(self) -> None:
        if self._turn is not None:
            self._turn.release()
            self._turn = None

    # -- one connection --------------------------------------------------------------------

    async def _fetch_gateway(self, *, required: bool) -> bool:
        """GET /gateway/bot; without a URL yet, retry with backoff until it works.

        Only a refused token (401, FatalDiscordError) is final: a bot started before the
        network is up waits for it instead of crashing into its supervisor's limit.
        """
        failures = 0
        while True:
            try:
                with trio.fail_after(REST_TIMEOUT):
                    info = await self._rest.get_gateway_bot()
                break
            except FatalDiscordError:
                raise
            except Exception as exc:
                if not required:
                    log.warning("GET /gateway/bot failed, keeping the cached URL: %r", exc)
                    return False
                failures += 1
                delay = min(FETCH_RETRY_CAP, FETCH_RETRY_BASE * 2 ** (failures - 1))
                delay *= 0.5 + self._rng.random() / 2
                self._events.emit(
                    "gateway",
                    action="fetch_failed",
                    reason=_describe(exc),
                    attempt=failures,
                    retry_in=round(delay, 3),
                )
                log.warning("GET /gateway/bot failed (%s); retrying in %.1f s", exc, delay)
                await trio.sleep(delay)
        url = info.get("url") if isinstance(info, Mapping) else None
        if not isinstance(url, str) or not url.startswith(("ws://", "wss://")):
            if required:
                raise GatewayError("GET /gateway/bot returned no usable websocket url")
            return False
        self._base_url = url
        now = trio.current_time()
        for action in self._proto.set_session_start_limit(info.get("session_start_limit"), now):
            self._perform_now(action)
        shards = info.get("shards")
        if isinstance(shards, int) and shards > self._proto.shard[1]:
            log.warning(
                "Discord recommends %d shards; this process runs shard %d/%d",
                shards,
                *self._proto.shard,
            )
        return True

    async def _attempt(self, url: str) -> list[Action]:
        """Open one connection, run it until it ends, and return the protocol's decision."""
        proto = self._proto
        conn: _Connection | None = None
        try:
            async with open_socket(url, connect_timeout=self._connect_timeout) as ws:
                conn = _Connection(ws)
                try:
                    await self._session(conn)
                except BaseException as exc:
                    await self._abandon(conn, exc)
                    raise
        except (GatewayError, OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            if conn is not None:
                raise  # from the session itself, already handled by _abandon
            return proto.closed(None, trio.current_time(), _describe(exc))
        return proto.closed(conn.close_code, trio.current_time(), conn.close_reason)

    async def _abandon(self, conn: _Connection, exc: BaseException) -> None:
        """Leave a connection on cancellation (close 1000: shutdown) or on a bug of ours."""
        proto = self._proto
        now = trio.current_time()
        if _only_cancelled(exc) and self.leaving is not None:
            if self.leaving == "hand_back":
                self.save_session()
            await self._close_shielded(conn, proto.hand_back())
        elif _only_cancelled(exc):
            # Closing with 1000 ends the session on Discord's side: nothing left to resume.
            await self._close_shielded(conn, proto.shutdown())
            self._forget_saved_session()
        else:
            # Keep the session resumable for the actor's next run.
            await self._close_shielded(conn, proto.transport_error(f"actor failed: {exc!r}", now))
        self._perform_now_all(
            [a for a in proto.closed(conn.close_code, now, "left") if isinstance(a, Notify)]
        )

    async def _session(self, conn: _Connection) -> None:
        self._perform_now_all(self._proto.connected(trio.current_time()))
        self._conn = conn
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._heartbeat_loop, conn)
                if self._sessions is not None:
                    nursery.start_soon(self._save_loop)
                await self._read_loop(conn)
                nursery.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # Surface a lone error as itself, so a supervisor logs what actually failed.
            if len(group.exceptions) == 1 and not _only_cancelled(group):
                raise group.exceptions[0] from None
            raise
        finally:
            self._conn = None

    def _reschedule(self) -> None:
        """Move the heartbeat loop's wake-up to the protocol's next deadline."""
        scope = self._timer_scope
        if scope is not None:
            deadline = self._proto.next_deadline()
            scope.deadline = math.inf if deadline is None else deadline

    async def _read_loop(self, conn: _Connection) -> None:
        """The hot path: receive, inflate, parse, hand on. Returns when the socket closes.

        A burst is read in batches: every message a socket read brought is queued before we
        run (see `_batched_reader`), and taken without a scheduler round each.
        """
        proto = self._proto
        received = proto.received
        clock = trio.lowlevel.current_clock().current_time  # trio.current_time, minus a call
        ws = conn.ws
        get_message = ws.get_message
        take = _batched_reader(ws)
        on_dispatch = self._on_dispatch
        inflater: Inflater | None = None
        if self._compress == "zlib-stream":
            inflater = ZlibStream()
        elif self._compress == "zstd-stream":
            inflater = ZstdStream()
        feed = inflater.feed if inflater is not None else None
        errors = inflater.errors if inflater is not None else ()
        while True:
            message: str | bytes | None
            try:
                message = take() if take is not None else None
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                message = None  # empty or closed: get_message below waits, or reports the close
            if message is None:
                try:
                    message = await get_message()
                except ConnectionClosed as exc:
                    if conn.closed_by_us:
                        # Our close is under way (perhaps from the heartbeat loop): let its
                        # handshake finish before the session's tasks are cancelled.
                        await conn.close_done.wait()
                    else:
                        conn.close_code, conn.close_reason = _close_code(exc)
                    return
            data: str | bytes | None = message
            if feed is not None and type(message) is bytes:
                try:
                    data = feed(message)
                except errors as exc:
                    problem = f"{self._compress} stream broke: {exc}"
                    await self._perform(conn, proto.transport_error(problem, clock()))
                    continue
                if data is None:
                    continue
            actions = received(data, clock())
            if len(actions) == 1:
                action = actions[0]
                if type(action) is Dispatch:
                    # Fast path: one plain event, nothing else to do.
                    try:
                        on_dispatch(action.name, action.data, action.seq)
                    except Exception:
                        self._dispatch_failed(action.name)
                    continue
            await self._perform(conn, actions)
            self._reschedule()

    async def _save_loop(self) -> None:
        while True:
            await trio.sleep(SESSION_SAVE_SECONDS)
            self.save_session()

    async def _heartbeat_loop(self, conn: _Connection) -> None:
        proto = self._proto
        while True:
            deadline = proto.next_deadline()
            with trio.move_on_at(math.inf if deadline is None else deadline) as scope:
                self._timer_scope = scope
                await trio.sleep_forever()
            self._timer_scope = None
            await self._perform(conn, proto.tick(trio.current_time()))

    # -- performing actions ----------------------------------------------------------------

    async def _perform(self, conn: _Connection, actions: list[Action]) -> None:
        for action in actions:
            if isinstance(action, Send):
                await self._send(conn, action)
            elif isinstance(action, Close):
                await self._close(conn, action)
            else:
                self._perform_now(action)

    def _perform_now_all(self, actions: list[Action]) -> None:
        for action in actions:
            self._perform_now(action)

    def _perform_now(self, action: Action) -> None:
        """Actions that need no socket."""
        if isinstance(action, Dispatch):
            try:
                self._on_dispatch(action.name, action.data, action.seq)
            except Exception:
                self._dispatch_failed(action.name)
        elif isinstance(action, Notify):
            self._events.emit("gateway", action=action.action, **action.fields)
            if action.action == "ready":
                self._turns.settle(self._proto.shard[0])
                self.save_session(ready=True)
            elif action.action == "invalid_session":
                self._turns.settle(self._proto.shard[0], invalid=True)
                if not action.fields.get("resumable"):
                    self._forget_saved_session()
            if action.action in ("ready", "resumed") and self._task_status is not None:
                status, self._task_status = self._task_status, None
                status.started()
        elif isinstance(action, Report):
            log.warning("gateway: %s", action.problem)
            self._events.emit(
                "gateway", action="problem", problem=action.problem, excerpt=action.excerpt
            )
        else:  # pragma: no cover - Send/Close need the socket; Reconnect/Fatal end `run`
            log.error("gateway: %r cannot be performed here", action)

    def _dispatch_failed(self, name: str) -> None:
        log.exception("on_dispatch failed for %s", name)
        self._events.emit("gateway", action="dispatch_error", name=name)

    async def _send(self, conn: _Connection, action: Send) -> None:
        text = orjson.dumps(action.payload).decode()
        try:
            with trio.fail_after(self._send_timeout):
                await conn.ws.send_message(text)
        except ConnectionClosed:
            return  # the reader sees the close and ends the connection
        except trio.TooSlowError:
            problem = f"{action.kind} send stalled for {self._send_timeout:g} s"
            await self._perform(conn, self._proto.transport_error(problem, trio.current_time()))
        finally:
            if action.kind == "identify":
                # Counted by the pacer: the next shard of the bucket may wait its window.
                self._give_turn()
                self._turns.identified(self._proto.shard[0])

    async def _close(self, conn: _Connection, action: Close, timeout: float | None = None) -> None:
        """Send our close frame and wait for the peer's answer, `timeout` at most.

        trio-websocket closes the stream once the handshake is over or given up on; the
        reader's `get_message` ends at once, with the code we sent kept in `conn`.
        """
        conn.closed_by_us = True
        conn.close_code = action.code
        conn.close_reason = action.reason
        try:
            with trio.move_on_after(self._close_timeout if timeout is None else timeout):
                await conn.ws.aclose(action.code, action.reason)
        finally:
            conn.close_done.set()

    async def _close_shielded(self, conn: _Connection, actions: list[Action]) -> None:
        # Cancelled: nobody reads the peer's close reply any more; our close frame goes out
        # with only a moment given to it.
        with trio.CancelScope(shield=True):
            for action in actions:
                if isinstance(action, Close):
                    await self._close(conn, action, ABANDON_CLOSE_TIMEOUT)
                elif not isinstance(action, Send):
                    self._perform_now(action)


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)


def _describe(exc: BaseException) -> str:
    """A short reason for a failed connect, for the log."""
    if isinstance(exc, trio.TooSlowError):
        return "connect timed out"
    cause = exc.__cause__
    text = type(exc).__name__
    if cause is not None:
        text += f" ({type(cause).__name__}: {cause})"
    elif str(exc):
        text += f": {exc}"
    return text[:200]


def _batched_reader(ws: WebSocketConnection) -> Callable[[], str | bytes] | None:
    """Let `ws` queue a whole socket read at once; a non-blocking take of what it queued.

    trio-websocket's reader task puts each message in a memory channel with `send`, a
    checkpoint even when the queue has room, and `get_message` is another: two scheduler
    rounds per message, where a burst brings a hundred messages per socket read. Here the
    reader's send skips its round while the queue has room (a full queue still waits, so TCP
    pushes back on Discord), and we take what is queued straight from the channel; a burst
    then costs a round per socket read, and the router gets it in batches
    (scripts/bench_ingest.py measures it). This is the only place picortex touches those
    (private) channels. Checked against trio-websocket 0.12.2, where `_send_channel` and
    `_recv_channel` are trio memory channels. Should a release rename them or change their
    type, this returns None and the reader uses the public `get_message` alone (tested).
    """
    sender = getattr(ws, "_send_channel", None)
    receiver = getattr(ws, "_recv_channel", None)
    if not isinstance(sender, trio.MemorySendChannel) or not isinstance(
        receiver, trio.MemoryReceiveChannel
    ):
        return None
    send_nowait = sender.send_nowait
    send = sender.send

    async def send_without_a_round(message: str | bytes) -> None:
        try:
            send_nowait(message)
        except trio.WouldBlock:
            await send(message)  # the queue is full: wait for us to take

    sender.send = send_without_a_round  # type: ignore[method-assign,assignment]
    take: Callable[[], str | bytes] = receiver.receive_nowait
    return take


def _close_code(exc: ConnectionClosed) -> tuple[int, str]:
    """How the peer (or the network) ended the connection: its close code and reason."""
    reason = exc.reason
    if reason is None:  # pragma: no cover - trio-websocket always gives one to a reader
        return ABNORMAL_CLOSURE, "connection lost"
    return reason.code, reason.reason or ""


@asynccontextmanager
async def open_socket(
    url: str, *, connect_timeout: float, tls: ssl.SSLContext | None = None
) -> AsyncIterator[WebSocketConnection]:
    """trio-websocket's client on a TCP (TLS for wss://) stream opened and closed here.

    `open_websocket_url` would leave the TCP stream open when the peer closes first or the
    network drops (its `aclose()` returns early once a close reason is known, and its reader
    waits for the peer to end TCP); owning the stream, we close it however the connection
    ended. Its reader task lives in a nursery of ours and ends with the block.

    Raises:
        GatewayError: not a websocket URL, or the server refused the upgrade.
        OSError, trio.BrokenResourceError: the connection or the TLS handshake failed.
        trio.TooSlowError: connecting took longer than `connect_timeout`.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise GatewayError(f"not a websocket URL: {parts.scheme}://{parts.hostname or ''}")
    secure = parts.scheme == "wss"
    default_port = 443 if secure else 80
    host = parts.hostname
    port = parts.port or default_port
    resource = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    deadline = trio.current_time() + connect_timeout
    with trio.fail_at(deadline):
        tcp = await trio.open_tcp_stream(host, port)
    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream] = tcp
    try:
        if secure:
            stream = trio.SSLStream(
                tcp, tls or tls_context(), server_hostname=host, https_compatible=True
            )
            # Here, so a refused certificate fails the attempt at once: inside the library's
            # reader it would only end that task, and the upgrade would wait for the timeout.
            with trio.fail_at(deadline):
                await stream.do_handshake()
        with _lone_error():
            async with trio.open_nursery() as nursery:
                try:
                    with trio.fail_at(deadline):
                        ws = await wrap_client_stream(
                            nursery,
                            stream,
                            host if port == default_port else f"{host}:{port}",
                            resource,
                            message_queue_size=MESSAGE_QUEUE,
                            max_message_size=MAX_MESSAGE_BYTES,
                            receive_buffer_size=RECEIVE_BYTES,
                        )
                    yield ws
                finally:
                    nursery.cancel_scope.cancel()
    finally:
        quiet = contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, OSError)
        with trio.CancelScope(shield=True), quiet:
            await stream.aclose()


@contextlib.contextmanager
def _lone_error() -> Iterator[None]:
    """Raise a nursery's lone error as itself; a refused upgrade as a GatewayError."""
    try:
        yield
    except BaseExceptionGroup as group:
        if len(group.exceptions) != 1:
            raise
        error = group.exceptions[0]
        if isinstance(error, ConnectionRejected):
            raise GatewayError(f"websocket upgrade refused: HTTP {error.status_code}") from None
        raise error from None
