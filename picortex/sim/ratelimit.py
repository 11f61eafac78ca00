"""The simulator's REST rate limits: fixed-window buckets per route and major parameter.

Pure: every call takes `now` (trio's clock in the simulator, so tests under the autojump
clock see limits reset without real waiting).
"""

from __future__ import annotations

import hashlib
from typing import Final

import attrs

# Discord's global limit: 50 requests per second per bot.
GLOBAL_LIMIT: Final = 50
GLOBAL_PER_SECONDS: Final = 1.0


@attrs.frozen
class RouteLimit:
    """`limit` requests per `per` seconds."""

    limit: int
    per: float


@attrs.frozen
class Verdict:
    """The outcome of one request against the limits, with the header values to send."""

    allowed: bool
    bucket: str
    limit: int
    remaining: int
    reset_after: float
    retry_after: float = 0.0
    scope: str | None = None
    global_: bool = False


@attrs.define
class _Window:
    limit: int
    per: float
    remaining: int
    reset_at: float
    locked_until: float = 0.0
    lock_scope: str = "user"


def bucket_hash(name: str) -> str:
    """A stable opaque bucket id for a route group, shaped like Discord's."""
    return hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


class RateLimiter:
    """Per-(bucket, major parameter) windows plus the global per-bot window."""

    def __init__(
        self,
        *,
        global_limit: int = GLOBAL_LIMIT,
        global_per: float = GLOBAL_PER_SECONDS,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self._global = _Window(global_limit, global_per, global_limit, 0.0)
        self._windows: dict[tuple[str, str], _Window] = {}

    def check(self, bucket: str, major: str, limit: RouteLimit, now: float) -> Verdict:
        """Count one request; says whether it may proceed and what headers to send."""
        window = self._window(bucket, major, limit, now)
        glob = self._roll(self._global, now)
        if now < glob.locked_until:
            return self._global_verdict(bucket, glob.locked_until - now)
        if now < window.locked_until:
            return Verdict(
                False,
                bucket,
                window.limit,
                0,
                window.locked_until - now,
                window.locked_until - now,
                window.lock_scope,
            )
        if not self.enabled:
            return Verdict(True, bucket, window.limit, window.remaining, window.reset_at - now)
        if glob.remaining <= 0:
            return self._global_verdict(bucket, glob.reset_at - now)
        if window.remaining <= 0:
            wait = window.reset_at - now
            return Verdict(False, bucket, window.limit, 0, wait, wait, "user")
        window.remaining -= 1
        glob.remaining -= 1
        return Verdict(True, bucket, window.limit, window.remaining, window.reset_at - now)

    def peek(self, bucket: str, major: str, limit: RouteLimit, now: float) -> Verdict:
        """The bucket's header values without counting a request."""
        window = self._window(bucket, major, limit, now)
        remaining = 0 if now < window.locked_until else window.remaining
        return Verdict(True, bucket, window.limit, remaining, window.reset_at - now)

    def lock(
        self, bucket: str, major: str, limit: RouteLimit, now: float, until: float, scope: str
    ) -> None:
        """Refuse the bucket until `until` (an injected 429 that clients must wait out)."""
        window = self._window(bucket, major, limit, now)
        window.locked_until = max(window.locked_until, until)
        window.lock_scope = scope

    def lock_global(self, until: float) -> None:
        """Refuse every request until `until` (an injected global 429)."""
        self._global.locked_until = max(self._global.locked_until, until)

    def _window(self, bucket: str, major: str, limit: RouteLimit, now: float) -> _Window:
        key = (bucket, major)
        window = self._windows.get(key)
        if window is None or (window.limit, window.per) != (limit.limit, limit.per):
            window = _Window(limit.limit, limit.per, limit.limit, now + limit.per)
            self._windows[key] = window
        return self._roll(window, now)

    @staticmethod
    def _roll(window: _Window, now: float) -> _Window:
        if now >= window.reset_at:
            window.remaining = window.limit
            window.reset_at = now + window.per
        return window

    @staticmethod
    def _global_verdict(bucket: str, wait: float) -> Verdict:
        return Verdict(False, bucket, GLOBAL_LIMIT, 0, wait, wait, "global", True)
