"""Discord's REST rate limits as pure bookkeeping: buckets, the global limit, invalid requests.

No I/O and no clock: every method takes `now`. The REST client (`discord.rest`) does the
waiting and the sending around these counters; the numbers are from Discord's rate-limits doc.

The global limit has two lanes: the foreground (answers, typing, interaction responses,
anything a person is waiting for) and the background (catch-up's history fetches), which
takes a slot only when no foreground request waits and FOREGROUND_RESERVE slots stay free,
and goes first once it has waited BACKGROUND_PATIENCE, so it is late but never starved.
Catch-up also holds a slot in that lane for each missed trigger it hands over, so the answers
it causes come out of what the foreground leaves free.
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
# What background requests leave to the foreground: a burst of answers that starts while
# catch-up reads history still finds this many slots free at once (a sixth of the budget).
FOREGROUND_RESERVE: Final = 8
# The longest a background request gives way: then it takes the next free slot before any
# foreground request, so a steady stream of answers delays catch-up but cannot stop it.
BACKGROUND_PATIENCE: Final = 5.0
# A slot held for a caught-up trigger's answer is given back unused after this: by then the
# answer is posted (the model is quick) or comes later on a slot of its own.
HELD_SLOT_SECONDS: Final = 2.0
# At most ten background grants a second: when a full window expires at once, the slots it
# frees must not all go to catch-up, whose answers would then come back as one burst.
BACKGROUND_SPACING: Final = 0.1
# Answers leave at most one per FOREGROUND_PACE on average, a little quicker than the budget,
# with up to PACE_BURST at once beyond that (an answer's history read, typing indicator and
# reply never wait for it). A flood's requests then leave spread over each
# second instead of as one clump the moment the window lets them: a slot is busy a little
# over a second (its request's round trip, then the window), so a clump drifts later every
# second and, crossing the edge of one of Discord's counted seconds, leaves that second many
# requests short; spread, every second is short by one or two. Being quicker than the budget,
# the pace makes up a late moment (a busy event loop) instead of losing it.
FOREGROUND_PACE: Final = GLOBAL_WINDOW / 50
PACE_BURST: Final = 3
# While paced, a cluster's slots are asked ahead for no more requests than the pace lets go
# within PREFETCH_LOOKAHEAD (below): a slot asked for is used at once, not a pace later.
PACED_PREFETCH: Final = 4
# ... and keeps no slot in hand while this many of its own are in use and the pace holds
# its answers (`GlobalLimit.busy`). Typing, too, then gives way to answers waiting for a slot.
BUSY_FROM: Final = 8
# How far ahead of its own next free slots a process of a cluster asks the shared table for
# slots (`SharedGlobalLimit.prefetch`): a few round trips through a busy process's worker.
PREFETCH_LOOKAHEAD: Final = 0.05
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


class GlobalWaiter:
    """A request waiting for a global slot: its lane and since when it waits."""

    __slots__ = ("background", "since")

    def __init__(self, since: float, *, background: bool) -> None:
        self.since = since
        self.background = background

    def overdue(self, now: float) -> bool:
        """A background request that has given way for BACKGROUND_PATIENCE goes first now."""
        return self.background and now >= self.since + BACKGROUND_PATIENCE


class GlobalLimit:
    """The global limit, counted from when a request is sent until GLOBAL_WINDOW after its answer.

    Discord counts a request when it arrives, which is after we send it and before its answer
    comes back. So a request holds its slot while in flight and for GLOBAL_WINDOW after its
    answer: a new request then arrives at least GLOBAL_WINDOW after every request it is not
    counted with, whatever the network's delays.

    Who may take a free slot (see the module's docstring for the lanes): an overdue background
    request first; else a foreground one; else a background or optional (typing) one if no
    foreground request waits and FOREGROUND_RESERVE slots stay free, a background one also
    no sooner than BACKGROUND_SPACING after the previous. A foreground request registers
    (`wait`) only once it has to wait; a background one always does, so its patience is
    counted.

    A slot may also be held (`hold`) in the background lane for an answer about to be made
    (catch-up hands a missed trigger over): the next foreground request takes it, or it is
    given back unused after HELD_SLOT_SECONDS. Nothing was sent on it, so it is simply free
    again then.
    """

    def __init__(self, pace: float = FOREGROUND_PACE) -> None:
        """`pace`: the foreground's average spacing (see FOREGROUND_PACE; 0: none)."""
        self._pace = pace
        self._answered: collections.deque[float] = collections.deque()
        self._in_flight = 0
        # When each held slot is given back unused, oldest first.
        self._held: collections.deque[float] = collections.deque()
        self.blocked_until = -math.inf
        self._foreground_waiting = 0
        # In arrival order, so the first is the one that becomes overdue first.
        self._background: dict[GlobalWaiter, None] = {}
        # The background lane's next grant, BACKGROUND_SPACING after its last.
        self._background_next = -math.inf
        # When the foreground's pace would have let its last request go (see FOREGROUND_PACE):
        # a request may go up to PACE_BURST - 1 paces before it.
        self._paced_at = -math.inf

    def wait(self, now: float, *, background: bool = False) -> GlobalWaiter:
        """Register a request that waits for a slot; `leave` it when it has one or gives up."""
        waiter = GlobalWaiter(now, background=background)
        if background:
            self._background[waiter] = None
        else:
            self._foreground_waiting += 1
        return waiter

    def leave(self, waiter: GlobalWaiter, now: float) -> bool:
        """`waiter` took its slot or gave up; True if the others may go now (wake them)."""
        if waiter.background:
            del self._background[waiter]
            # An overdue request held the foreground back.
            return waiter.overdue(now)
        self._foreground_waiting -= 1
        # The last waiting foreground request held the background back.
        return self._foreground_waiting == 0 and bool(self._background)

    def try_take(
        self, now: float, waiter: GlobalWaiter | None = None, *, optional: bool = False
    ) -> bool:
        """Take a slot if one is free right now for `waiter` (None: a foreground request).

        A foreground request takes a held slot first. An `optional` one (typing, cosmetic)
        never does, and goes only when the background lane could: it never takes a slot an
        answer waits for or one of the FOREGROUND_RESERVE kept for answers.
        """
        if now < self.blocked_until:
            return False
        used = self._used(now)
        background = waiter is not None and waiter.background
        if self._held and not background and not optional:
            self._held.popleft()
            self._in_flight += 1
            return True
        if optional:
            allowed = self._background_may_go(now, used, spaced=False)
        else:
            allowed = self._may_go(now, waiter, used)
        if used >= GLOBAL_BUDGET or not allowed:
            return False
        if background:
            self._background_next = now + BACKGROUND_SPACING
        elif not optional:
            if now < self._pace_free():
                return False
            self._paced_at = max(self._paced_at, now) + self._pace
        self._in_flight += 1
        return True

    def hold(self, now: float, waiter: GlobalWaiter) -> bool:
        """Hold a slot for an answer about to be made, if the background lane may go now."""
        if now < self.blocked_until:
            return False
        used = self._used(now)
        if used >= GLOBAL_BUDGET or not self._may_go(now, waiter, used):
            return False
        self._background_next = now + BACKGROUND_SPACING
        self._held.append(now + HELD_SLOT_SECONDS)
        return True

    def _used(self, now: float) -> int:
        """Slots in use at `now`: in flight, answered within the window, and held."""
        answered = self._answered
        # The same sums as `next_free`, so waking at it always frees the slot.
        while answered and answered[0] + GLOBAL_WINDOW <= now:
            answered.popleft()
        held = self._held
        while held and held[0] <= now:
            held.popleft()
        return self._in_flight + len(answered) + len(held)

    def _may_go(self, now: float, waiter: GlobalWaiter | None, used: int) -> bool:
        """Whether `waiter`'s lane may have a free slot now (see the class docstring)."""
        if waiter is None or not waiter.background:
            return not self._overdue(now)
        return waiter.overdue(now) or self._background_may_go(now, used, spaced=True)

    def _background_may_go(self, now: float, used: int, *, spaced: bool) -> bool:
        """No foreground request waits, none is overdue, the reserve stays free, and (if
        `spaced`) BACKGROUND_SPACING has passed since the background lane's last grant.

        Not `spaced` (typing): while fewer than BUSY_FROM slots are in use, a waiting
        foreground request waits only for its pace, not for a slot, and does not hold it
        back. Busier, it does: in a flood, typing would take slots (and clump) that replies
        wait for."""
        held_back = self._foreground_waiting > 0 and (spaced or used >= BUSY_FROM)
        return (
            not held_back
            and not self._overdue(now)
            and used < GLOBAL_BUDGET - FOREGROUND_RESERVE
            and (not spaced or now >= self._background_next)
        )

    def _overdue(self, now: float) -> bool:
        oldest = next(iter(self._background), None)
        return oldest is not None and oldest.overdue(now)

    def busy(self, now: float) -> bool:
        """Whether answers are being paced: BUSY_FROM slots or more are in use and the pace
        holds a request (one waits, or the next would). An answer's few requests now and
        then never are, however many slots they keep in use."""
        return self._used(now) >= BUSY_FROM and (
            self._foreground_waiting > 0 or now < self._pace_free()
        )

    def next_free(self) -> float:
        """When the next slot frees by itself: the oldest answer leaves the window or a held
        slot is given back (inf: only an answer frees one)."""
        answered = self._answered[0] + GLOBAL_WINDOW if self._answered else math.inf
        return min(answered, self._held[0]) if self._held else answered

    @property
    def waiting(self) -> int:
        """Requests registered as waiting for a slot, in both lanes."""
        return self._foreground_waiting + len(self._background)

    def freeing_by(self, until: float) -> int:
        """Slots that free by themselves by `until` (answers leaving the window, held slots
        given back); those free already are `_used`'s to drop, so call after a `try_take`."""
        answered = 0
        for at in self._answered:
            if at + GLOBAL_WINDOW > until:  # the sum `next_free` makes, so its slot counts
                break
            answered += 1
        held = 0
        for at in self._held:
            if at > until:
                break
            held += 1
        return answered + held

    def next_chance(self, waiter: GlobalWaiter, now: float) -> float:
        """When `waiter` should look again, unless woken: a slot frees, its lane's spacing
        (background) or pace (foreground) ends, or `waiter` becomes overdue."""
        if waiter.background and not waiter.overdue(now):
            spaced = self._background_next if self._background_next > now else math.inf
            return min(self.next_free(), spaced, waiter.since + BACKGROUND_PATIENCE)
        if not waiter.background and self._pace_free() > now:
            return min(self.next_free(), self._pace_free())
        return self.next_free()

    def _pace_free(self) -> float:
        """When the foreground's pace lets its next request go."""
        return self._paced_at - (PACE_BURST - 1) * self._pace

    def release(self, now: float) -> bool:
        """A request's answer (or failure) is in; True if waiters should look again.

        With answers already in the window, waiters wait for the oldest to leave, which is
        sooner than this one; otherwise they waited for an answer or a held slot's end,
        either of which may be later.
        """
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
