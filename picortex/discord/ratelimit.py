"""Discord's REST rate limits as pure bookkeeping: buckets, the global limit, invalid requests.

No I/O and no clock: every method takes `now`. The REST client (`discord.rest`) does the
waiting and the sending around these counters; the numbers are from Discord's rate-limits doc.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Mapping
from typing import Any, Final

# Discord's documented global limit for a bot: 50 requests in any one second.
GLOBAL_LIMIT: Final = 50
GLOBAL_WINDOW: Final = 1.0
# What we allow ourselves of it: headroom for what our clock cannot see (clock granularity,
# a proxy's own counting) costs 4% of the rate and keeps us clear of a global 429.
GLOBAL_BUDGET: Final = 48
# Discord bans an IP for a while after 10,000 invalid requests (401, 403, 429) in 10 minutes.
INVALID_WINDOW: Final = 600.0
# Refuse to send well before the ban: a bot that has burned 8,000 is broken, not busy.
INVALID_REFUSE_AT: Final = 8_000
# Say so loudly long before refusing, while someone can still fix the cause.
INVALID_WARN_AT: Final = 1_000
# A 429 without a usable retry_after (a proxy or Cloudflare page) still needs a pause.
DEFAULT_RETRY_AFTER: Final = 5.0
# Headers that report remaining > 0 but no reset time: assume Discord's usual short window.
DEFAULT_RESET_AFTER: Final = 1.0
# Two responses whose reset times differ by less than this describe the same window.
SAME_WINDOW_SLACK: Final = 0.25
# Drop idle buckets once this many exist, so a bot in many channels does not grow forever.
MAX_BUCKETS: Final = 4_096
_MAJOR_PARAMETERS: Final = ("channels", "guilds", "webhooks")


class Bucket:
    """One rate-limit bucket: a route's bucket hash together with one major parameter.

    A bucket starts as "not yet seen" (limit 1), so one request goes out and its response
    tells us the real limit. `remaining - outgoing` is what may still be sent now. Compared
    by identity, so a waiter can key on it.
    """

    __slots__ = ("limit", "outgoing", "remaining", "reset_at")

    def __init__(self) -> None:
        self.limit = 1
        self.remaining = 1
        self.reset_at: float | None = None
        self.outgoing = 0

    def refresh(self, now: float) -> None:
        """Refill the bucket once its window has passed."""
        if self.reset_at is not None and now >= self.reset_at:
            self.remaining = self.limit
            self.reset_at = None
        elif self.reset_at is None and self.remaining <= 0 and self.outgoing == 0:
            # Nothing will ever refill it (no reset time known): let one request probe.
            self.remaining = 1

    def try_reserve(self, now: float) -> bool:
        """Reserve one request if the bucket has room now."""
        self.refresh(now)
        if self.remaining - self.outgoing > 0:
            self.outgoing += 1
            return True
        return False

    def update(self, headers: Mapping[str, str], now: float) -> None:
        """Take the limit, remaining count and reset time from a response's headers."""
        try:
            remaining = int(headers["x-ratelimit-remaining"])
        except (KeyError, ValueError):
            return
        try:
            reset_at = now + max(0.0, float(headers["x-ratelimit-reset-after"]))
        except (KeyError, ValueError):
            reset_at = now + DEFAULT_RESET_AFTER
        try:
            self.limit = max(1, int(headers["x-ratelimit-limit"]))
        except (KeyError, ValueError):
            self.limit = max(self.limit, remaining, 1)
        if self.reset_at is None or reset_at > self.reset_at + SAME_WINDOW_SLACK:
            # A new window: the server's count is the truth.
            self.remaining = remaining
            self.reset_at = reset_at
        else:
            # The same window, answers possibly out of order: keep the lower count.
            self.remaining = min(self.remaining, remaining)
            self.reset_at = max(self.reset_at, reset_at)

    def block_until(self, until: float) -> None:
        """Send nothing more on this bucket before `until` (after a 429)."""
        self.remaining = 0
        self.reset_at = until if self.reset_at is None else max(self.reset_at, until)

    @property
    def idle(self) -> bool:
        """True when nothing is in flight and no window is pending."""
        return self.outgoing == 0 and self.reset_at is None


class Buckets:
    """Routes mapped to Discord's bucket hashes, and one `Bucket` per (hash, major parameter).

    A route not yet seen gets a placeholder bucket, so one request learns its hash; a route
    that answered a success without rate-limit headers has no bucket at all (None).
    """

    def __init__(self) -> None:
        # Route ("METHOD /template") -> bucket hash; None: the route answered without one.
        self._route_bucket: dict[str, str | None] = {}
        self._buckets: dict[tuple[str, str], Bucket] = {}

    def __len__(self) -> int:
        return len(self._buckets)

    def get(self, route: str, major: str, now: float) -> Bucket | None:
        """The bucket a request on `route` for `major` counts against (created on demand)."""
        try:
            bucket_hash = self._route_bucket[route]
        except KeyError:
            key = ("?" + route, major)
        else:
            if bucket_hash is None:
                return None
            key = (bucket_hash, major)
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_BUCKETS:
                self._prune(now)
            bucket = self._buckets[key] = Bucket()
        return bucket

    def learn(
        self,
        route: str,
        major: str,
        used: Bucket | None,
        status: int,
        headers: Mapping[str, str],
        now: float,
    ) -> Bucket | None:
        """Record what a response says about its route; returns the bucket it moved to.

        The returned bucket (if not `used`) is where waiters on the route should look now.
        """
        bucket_hash = headers.get("x-ratelimit-bucket")
        if bucket_hash is not None:
            self._route_bucket[route] = bucket_hash
            target = self.get(route, major, now)
            assert target is not None
            target.update(headers, now)
            if target is not used:
                if used is not None and used.outgoing == 0:
                    self._buckets.pop(("?" + route, major), None)
                return target
        elif status < 300 and route not in self._route_bucket:
            # A success without rate-limit headers: the route has no per-route limit.
            self._route_bucket[route] = None
            self._buckets.pop(("?" + route, major), None)
        return None

    def _prune(self, now: float) -> None:
        for key, bucket in list(self._buckets.items()):
            bucket.refresh(now)
            if bucket.idle and bucket.remaining >= bucket.limit:
                del self._buckets[key]


class GlobalLimit:
    """The global limit, counted from when a request is sent until GLOBAL_WINDOW after its answer.

    Discord counts a request when it arrives, which is after we send it and before its answer
    comes back. So a request holds its slot while in flight and for GLOBAL_WINDOW after its
    answer: a new request then arrives at least GLOBAL_WINDOW after every request it is not
    counted with, whatever the network's delays.
    """

    def __init__(self) -> None:
        self._answered: collections.deque[float] = collections.deque()
        self._in_flight = 0
        self.blocked_until = -math.inf

    def try_take(self, now: float) -> bool:
        """Take a slot if one is free right now (and no global 429 is pending)."""
        if now < self.blocked_until:
            return False
        answered = self._answered
        # The same sum as `next_free`, so waking at it always frees the slot.
        while answered and answered[0] + GLOBAL_WINDOW <= now:
            answered.popleft()
        if self._in_flight + len(answered) < GLOBAL_BUDGET:
            self._in_flight += 1
            return True
        return False

    def next_free(self) -> float:
        """When the oldest answered slot leaves the window (inf: only an answer frees one)."""
        return self._answered[0] + GLOBAL_WINDOW if self._answered else math.inf

    def release(self, now: float) -> bool:
        """A request's answer (or failure) is in; True if waiters had no expiry to wait for."""
        self._in_flight -= 1
        wake = not self._answered
        self._answered.append(now)
        return wake

    def block_until(self, until: float) -> None:
        """Send nothing before `until` (after a global 429)."""
        self.blocked_until = max(self.blocked_until, until)


class InvalidRequests:
    """401/403/429 answers in Discord's rolling ten-minute window."""

    def __init__(self) -> None:
        self._at: collections.deque[float] = collections.deque()
        self._warned = False

    def count(self, now: float) -> int:
        """How many are in the window at `now`."""
        horizon = now - INVALID_WINDOW
        at = self._at
        while at and at[0] <= horizon:
            at.popleft()
        return len(at)

    def record(self, now: float) -> int | None:
        """Count one; returns the count when it just crossed INVALID_WARN_AT (warn once)."""
        self._at.append(now)
        count = self.count(now)
        if count >= INVALID_WARN_AT and not self._warned:
            self._warned = True
            return count
        if count < INVALID_WARN_AT // 2:
            self._warned = False
        return None

    def refused(self, now: float) -> bool:
        """True when sending now would risk Discord's ban."""
        return self.count(now) >= INVALID_REFUSE_AT


def major_parameter(path: str) -> str:
    """The top-level resource of a path: `channels/ID`, `guilds/ID` or `webhooks/ID[/token]`."""
    parts = path.split("/", 4)
    # parts[0] is "" (the path starts with "/").
    if len(parts) >= 3 and parts[1] in _MAJOR_PARAMETERS:
        if parts[1] == "webhooks" and len(parts) >= 4:
            return f"webhooks/{parts[2]}/{parts[3]}"
        return f"{parts[1]}/{parts[2]}"
    return ""


def retry_after(data: Mapping[str, Any], headers: Mapping[str, str]) -> float:
    """Seconds a 429 asks us to wait: the JSON body's, else Retry-After, else a default."""
    value = data.get("retry_after")
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    try:
        return max(0.0, float(headers["retry-after"]))
    except (KeyError, ValueError):
        return DEFAULT_RETRY_AFTER


def is_global_429(data: Mapping[str, Any], headers: Mapping[str, str]) -> bool:
    """Whether a 429 limits every request of the bot rather than one bucket."""
    scope = headers.get("x-ratelimit-scope", "")
    return (
        data.get("global") is True
        or headers.get("x-ratelimit-global", "").lower() == "true"
        or scope == "global"
        # Not Discord's JSON and no scope: a proxy or Cloudflare, which limits all of us.
        or (not data and scope not in ("user", "shared"))
    )
