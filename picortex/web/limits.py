"""What the panel reads from a request it has not yet trusted (SPEC 13).

Every body is capped while it is received, whether or not the client sent `Content-Length`:
past the cap the request is answered 413 and the rest is never read. Requests without a live
session are limited in number, so guessers and slow senders cannot hold the bot's memory or
line up behind the wrong-token delay without bound.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from picortex.errors import PicortexError

# A form or JSON body; a prompt save or a manual message may be larger (a 20,000-character
# prompt, percent-encoded, is up to ~540 KiB).
MAX_BODY_BYTES: Final = 64 * 1024
MAX_LARGE_BODY_BYTES: Final = 1024 * 1024
LARGE_BODY_PATHS: Final = re.compile(r"/api/send|/chats/[^/]+/prompt")
# Requests without a session served at once; more are answered 503 before anything is read
# or checked, so a flood of guesses costs a bounded amount and learns nothing.
MAX_UNAUTHENTICATED: Final = 16


def body_cap(path: str) -> int:
    """The most body bytes the panel reads for a request to `path`."""
    return MAX_LARGE_BODY_BYTES if LARGE_BODY_PATHS.fullmatch(path) else MAX_BODY_BYTES


class BodyTooLarge(PicortexError):
    """A request body went past its cap while being received."""


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


class RequestGuard:
    """ASGI middleware: caps every body as it arrives and limits sessionless requests.

    `has_session(scope)` tells a request of a logged-in browser from any other (bearer calls
    included: their token is checked, with its delay, inside the limit). `refuse(scope,
    status)` is the response sent for 413 and 503.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        has_session: Callable[[Scope], bool],
        refuse: Callable[[Scope, int], ASGIApp],
        max_unauthenticated: int = MAX_UNAUTHENTICATED,
    ) -> None:
        self.app = app
        self.has_session = has_session
        self.refuse = refuse
        self.max_unauthenticated = max_unauthenticated
        self.unauthenticated = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        cap = body_cap(scope["path"])
        declared = _declared_length(scope)
        if declared is not None and declared > cap:
            await self.refuse(scope, 413)(scope, receive, send)
            return
        if self.has_session(scope):
            await self.app(scope, _capped(receive, cap), send)
            return
        if self.unauthenticated >= self.max_unauthenticated:
            await self.refuse(scope, 503)(scope, receive, send)
            return
        self.unauthenticated += 1
        try:
            await self.app(scope, _capped(receive, cap), send)
        finally:
            self.unauthenticated -= 1


def _capped(receive: Receive, cap: int) -> Receive:
    """`receive` that raises BodyTooLarge once more than `cap` body bytes have come."""
    received = 0

    async def capped() -> Message:
        nonlocal received
        message = await receive()
        if message["type"] == "http.request":
            received += len(message.get("body", b""))
            if received > cap:
                raise BodyTooLarge
        return message

    return capped


__all__ = ["MAX_BODY_BYTES", "MAX_LARGE_BODY_BYTES", "BodyTooLarge", "RequestGuard", "body_cap"]
