"""How the REST client reaches Discord: the keep-alive HTTP/1.1 pool, or an httpx client.

The pool is the default: a reply's latency is mostly its HTTP requests' CPU. An httpx client
is used when one is handed in (tests mount mock transports on one) or when the environment
names a proxy, which httpx honours and the pool does not speak.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import urlencode, urlsplit

import attrs
import httpx

from picortex.net.http11 import Http11Pool, Timeouts, TransportFailure

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Methods whose requests carry a body by definition: a length must be sent even when empty,
# or some front ends answer 411 Length Required.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


@attrs.frozen(slots=True)
class Answer:
    """One whole HTTP response; header names are lower-case."""

    status_code: int
    reason_phrase: str
    headers: Mapping[str, str]
    content: bytes


class SendFailed(Exception):
    """No answer arrived (connection refused or lost, timeout, malformed response)."""


class Sender(Protocol):
    """Sends one request and returns the whole answer."""

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None,
        params: Mapping[str, str] | None,
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        """Raises SendFailed when no answer arrived; `on_sent` is called once the request
        is on its way (at the latest with its answer)."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class PoolSender:
    """Requests over an `Http11Pool`."""

    def __init__(self, timeout: float) -> None:
        self._pool = Http11Pool()
        self._timeouts = Timeouts(connect=timeout, read=timeout, write=timeout)

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None,
        params: Mapping[str, str] | None,
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        """Send over a pooled connection; raises SendFailed when no answer arrived."""
        split = urlsplit(url)
        scheme = split.scheme.lower()
        host = split.hostname
        if scheme not in _DEFAULT_PORTS or not host:
            raise SendFailed(f"unsupported URL scheme or host in the API base: {scheme!r}")
        try:
            port = split.port or _DEFAULT_PORTS[scheme]
        except ValueError as exc:
            raise SendFailed(f"bad port in the API base: {exc}") from None
        target = split.path or "/"
        query = split.query
        if params:
            query = f"{query}&{urlencode(params)}" if query else urlencode(params)
        if query:
            target = f"{target}?{query}"
        raw = [(b"host", split.netloc.rpartition("@")[2].encode("ascii"))]
        raw.extend((name.encode("ascii"), value.encode("utf-8")) for name, value in headers.items())
        body = content or b""
        if body or method in _BODY_METHODS:
            raw.append((b"content-length", str(len(body)).encode("ascii")))
        try:
            response = await self._pool.request(
                method.encode("ascii"),
                (scheme.encode("ascii"), host.encode("idna"), port),
                target.encode("ascii"),
                raw,
                body,
                self._timeouts,
                on_sent,
            )
        except TransportFailure as exc:
            raise SendFailed(str(exc)) from exc
        return Answer(
            response.status,
            response.reason.decode("latin-1"),
            {name.decode("latin-1"): value.decode("latin-1") for name, value in response.headers},
            response.body,
        )

    async def aclose(self) -> None:
        """Close the pool's connections."""
        await self._pool.aclose()


class HttpxSender:
    """Requests over an httpx client (closed here only if `owned`)."""

    def __init__(self, client: httpx.AsyncClient, *, owned: bool) -> None:
        self._client = client
        self._owned = owned

    async def send(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None,
        params: Mapping[str, str] | None,
        on_sent: Callable[[], None] | None = None,
    ) -> Answer:
        """Send through httpx; raises SendFailed on its transport errors.

        httpx does not say when a request is sent, so `on_sent` comes with the answer.
        """
        try:
            response = await self._client.request(
                method, url, content=content, params=params, headers=headers
            )
        except httpx.TransportError as exc:
            raise SendFailed(f"{type(exc).__name__}: {exc}") from exc
        if on_sent is not None:
            on_sent()
        return Answer(
            response.status_code,
            response.reason_phrase,
            {name.lower(): value for name, value in response.headers.items()},
            response.content,
        )

    async def aclose(self) -> None:
        """Close the client if it is ours."""
        if self._owned:
            await self._client.aclose()
