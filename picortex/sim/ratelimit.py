"""The simulator's REST rate limits: fixed-window buckets per route and major parameter.

Pure: every call takes `now` (trio's clock in the simulator, so tests under the autojump
clock see limits reset without real waiting).
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections import deque
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


@attrs.frozen
class GlobalStats:
    """Requests that counted against the global limit, and the global 429s answered.

    `per_second` maps each whole second of the clock to the requests received in it;
    `max_in_any_second` is the most received in any one-second span (sliding, so a burst
    straddling two whole seconds still shows); `global_429s` counts the 429s with
    `global: true` the limit answered.
    """

    requests: int
    per_second: dict[int, int]
    max_in_any_second: int
    global_429s: int


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
        self._per_second: dict[int, int] = {}
        self._last_second: deque[float] = deque()
        self._max_in_any_second = 0
        self._global_requests = 0
        self._global_429s = 0
        # When each request bound by the global limit came, and each global 429 went out
        # (in clock order): what `global_stats(since=...)` counts again.
        self._global_times: list[float] = []
        self._global_429_times: list[float] = []

    def check(
        self, bucket: str, major: str, limit: RouteLimit, now: float, *, global_limit: bool = True
    ) -> Verdict:
        """Count one request; says whether it may proceed and what headers to send.

        `global_limit=False`: a route the global limit does not bind (interaction endpoints).
        """
        window = self._window(bucket, major, limit, now)
        if not global_limit:
            return self._check_route(bucket, window, now)
        self.count_global(now)
        glob = self._roll(self._global, now)
        if now < glob.locked_until:
            return self._global_verdict(bucket, glob.locked_until - now)
        if self.enabled and glob.remaining <= 0 and now >= window.locked_until:
            return self._global_verdict(bucket, glob.reset_at - now)
        verdict = self._check_route(bucket, window, now)
        if verdict.allowed and self.enabled:
            glob.remaining -= 1
        return verdict

    def record_global_429(self, now: float) -> None:
        """Count one 429 with `global: true` sent to the bot."""
        self._global_429s += 1
        self._global_429_times.append(now)

    def global_stats(self, since: float | None = None) -> GlobalStats:
        """A snapshot of what counted against the global limit (from `since` on, if given:
        a benchmark's one phase, without what the bots did before it)."""
        if since is None:
            return GlobalStats(
                self._global_requests,
                dict(self._per_second),
                self._max_in_any_second,
                self._global_429s,
            )
        times = self._global_times[bisect.bisect_left(self._global_times, since) :]
        per_second: dict[int, int] = {}
        busiest = 0
        first = 0
        for index, at in enumerate(times):
            second = math.floor(at)
            per_second[second] = per_second.get(second, 0) + 1
            while times[first] <= at - GLOBAL_PER_SECONDS:
                first += 1
            busiest = max(busiest, index - first + 1)
        refused = len(self._global_429_times) - bisect.bisect_left(self._global_429_times, since)
        return GlobalStats(len(times), per_second, busiest, refused)

    def _check_route(self, bucket: str, window: _Window, now: float) -> Verdict:
        if now < window.locked_until:
            wait = window.locked_until - now
            return Verdict(False, bucket, window.limit, 0, wait, wait, window.lock_scope)
        if not self.enabled:
            return Verdict(True, bucket, window.limit, window.remaining, window.reset_at - now)
        if window.remaining <= 0:
            wait = window.reset_at - now
            return Verdict(False, bucket, window.limit, 0, wait, wait, "user")
        window.remaining -= 1
        return Verdict(True, bucket, window.limit, window.remaining, window.reset_at - now)

    def count_global(self, now: float) -> None:
        """Every request the global limit binds counts, refused or not: it is what was sent."""
        self._global_requests += 1
        self._global_times.append(now)
        second = math.floor(now)
        self._per_second[second] = self._per_second.get(second, 0) + 1
        recent = self._last_second
        recent.append(now)
        while recent[0] <= now - GLOBAL_PER_SECONDS:
            recent.popleft()
        self._max_in_any_second = max(self._max_in_any_second, len(recent))

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
