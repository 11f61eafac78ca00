"""The one httpx client the REST API is reached through, with every limit said out loud.

One code path with or without a proxy: `trust_env` lets httpx read HTTP(S)_PROXY, NO_PROXY,
SSL_CERT_FILE and SSL_CERT_DIR, so a proxy or a private certificate authority is the
environment's business, not a second client.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final, Protocol

import httpx

from picortex.tls import tls_context

# Discord answers in well under a second; a half-minute stall is a dead connection.
READ_TIMEOUT: Final = 30.0
# A TCP + TLS handshake to Discord takes tens of milliseconds; ten seconds is a dead route.
CONNECT_TIMEOUT: Final = 10.0
# Waiting this long for a free pooled connection means we are far past the global limit.
POOL_TIMEOUT: Final = 30.0
# Discord allows 50 requests a second; replies take ~100 ms, so ~5-10 are ever in flight.
# Twenty connections leave room for bursts without opening hundreds under a fault.
MAX_CONNECTIONS: Final = 20
MAX_KEEPALIVE_CONNECTIONS: Final = 10
# Close an idle connection before a NAT or Discord's front end silently drops it (they
# drop at about a minute); a dropped one would hang a reply until the read timeout.
KEEPALIVE_EXPIRY: Final = 30.0

# The httpcore trace events that mean the request has left: its body is written.
_SENT_EVENTS: Final = frozenset(
    {"http11.send_request_body.complete", "http2.send_request_body.complete"}
)


def discord_client() -> httpx.AsyncClient:
    """A new AsyncClient for Discord REST (the caller closes it)."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(
            READ_TIMEOUT, connect=CONNECT_TIMEOUT, read=READ_TIMEOUT, pool=POOL_TIMEOUT
        ),
        limits=httpx.Limits(
            max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_KEEPALIVE_CONNECTIONS,
            keepalive_expiry=KEEPALIVE_EXPIRY,
        ),
        # Discord's API never redirects a bot; following one could hand the token elsewhere.
        follow_redirects=False,
        trust_env=True,
        verify=tls_context(),
    )


class Once:
    """Calls a callback the first time it is called, never again."""

    __slots__ = ("_callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback: Callable[[], None] | None = callback

    def __call__(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()


class SendFence(Protocol):
    """One request's fence in a cluster (`picortex.actors.shard_fence.RequestFence`)."""

    # Set once the request was refused or its work stopped: its decision is not final here,
    # the shard's next holder makes it (its handled mark is not written).
    stopped: bool
    shard: int  # the shard id its request came on

    def allows(self) -> bool:
        """Whether the request's shard is still held (False also sets `stopped`)."""
        ...


class RequestWatch:
    """What a task wants told about the HTTP requests it makes: `on_start` when one starts
    (only a client whose request hook asks for it calls it: the model client's), `on_sent`
    once one is written to the socket; `admit`, awaited by that hook before the request goes
    (a model call's reservation, see `picortex.actors.admission`); `fence`, the shard fence
    of the Discord request the task answers, checked by the REST client just before each
    request leaves (`picortex.discord.fence`)."""

    __slots__ = ("admit", "fence", "on_sent", "on_start")

    def __init__(
        self,
        on_sent: Callable[[], None] | None,
        on_start: Callable[[], None] | None = None,
        admit: Callable[[], Awaitable[None]] | None = None,
        fence: SendFence | None = None,
    ) -> None:
        self.on_sent = on_sent
        self.on_start = on_start
        self.admit = admit
        self.fence = fence


# The task's `RequestWatch` (`when_sent`). It exists because the code that must know a request
# went out (the typing indicator waits behind the model request and the answer's first post)
# sits a few layers above the code making it (a streamed reply's surface, the model SDK's
# client): the wish travels with the task rather than through every layer between. One
# variable for the Discord and the model clients alike, so that order has one path.
_WATCH: ContextVar[RequestWatch | None] = ContextVar("picortex_request_watch", default=None)


@contextmanager
def when_sent(
    on_sent: Callable[[], None] | None,
    *,
    on_start: Callable[[], None] | None = None,
    admit: Callable[[], Awaitable[None]] | None = None,
) -> Iterator[None]:
    """Within the block, each request this task makes calls `on_sent` once written (and
    `on_start`, for a client that reports it, as it starts; that client awaits `admit` first).

    For a caller whose request is made a few layers down (a streamed reply's surface, a model
    call), where passing a callback through every layer would widen each of them for one
    signal.
    """
    outer = _WATCH.get()
    fence = None if outer is None else outer.fence  # the task still answers the same request
    token = _WATCH.set(RequestWatch(on_sent, on_start, admit, fence))
    try:
        yield
    finally:
        _WATCH.reset(token)


@contextmanager
def fenced(fence: SendFence) -> Iterator[SendFence]:
    """Within the block (and in the tasks it starts), Discord requests pass `fence` (a
    cluster's shard fence: see `picortex.discord.fence`)."""
    outer = _WATCH.get()
    watch = (
        RequestWatch(None, fence=fence)
        if outer is None
        else RequestWatch(outer.on_sent, outer.on_start, outer.admit, fence)
    )
    token = _WATCH.set(watch)
    try:
        yield fence
    finally:
        _WATCH.reset(token)


def task_fence() -> SendFence | None:
    """The shard fence of the request this task answers, if any (only in a cluster)."""
    watch = _WATCH.get()
    return None if watch is None else watch.fence


def task_watch() -> RequestWatch | None:
    """What `when_sent` set for this task, if anything."""
    return _WATCH.get()


def task_on_sent() -> Callable[[], None] | None:
    """The `on_sent` callback `when_sent` set for this task, if any."""
    watch = _WATCH.get()
    return None if watch is None else watch.on_sent


def sent_trace(
    on_sent: Callable[[], None], read_after: Callable[[], Awaitable[None]] | None = None
) -> Mapping[str, Any]:
    """Request extensions that call `on_sent` once the request is written to the socket.

    With `read_after`, the response is read only once that returns: the request is out, and
    its answer waits in the socket meanwhile (for a cosmetic request whose answer need not
    be handled ahead of more urgent work).

    Uses httpx's documented `trace` extension; a transport that never traces (a mock) gives
    no call, and the caller then treats the answer itself as proof the request went out.
    """

    async def trace(event_name: str, info: Mapping[str, Any]) -> None:
        if event_name in _SENT_EVENTS:
            on_sent()
            if read_after is not None:
                await read_after()

    return {"trace": trace}
