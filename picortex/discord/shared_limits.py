"""Discord's limits shared by the processes of a cluster (SPEC 17): the global REST limit and
the identify buckets, kept in a database every process reaches (PostgreSQL, see
`picortex.store.pg.limits`).

- The global limit is a table of GLOBAL_BUDGET slots: a grant takes a slot that is free for the
  next GLOBAL_WINDOW, so the cluster as a whole never starts more than the budget in any
  second. A process asks for as many slots as it has requests waiting (one round trip for a
  burst) and keeps what it was granted for less than that window; a few kept in hand for
  its next answer go back to the table unused when another process finds it short. A global
  429 pauses every process (a shared pause-until). Interaction endpoints are not bound by the
  global limit (Discord's rate-limits doc) and never ask. With the database out of reach a
  process keeps to its share: the budget divided by the processes last seen alive.
- An identify bucket (`shard_id % max_concurrency`) is held by one shard of the cluster at a
  time, from before its IDENTIFY until the outcome is known (READY, op 9, or the connection's
  end), and its next IDENTIFY is no sooner than the window after the last one on the
  database's clock. An op 9 answering our IDENTIFY starts the window again.

The bookkeeping (`GrantBook`, `ShareWindow`) is pure and takes `now`; `SharedGlobalLimit` and
`SharedIdentify` are the trio shells the REST client and the gateway use, over a backend whose
answers come back on another thread (`LimitsBackend`): nothing here ever blocks the event loop.
"""

from __future__ import annotations

import collections
import contextlib
import math
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

import attrs
import trio

from picortex.discord.ratelimit import GLOBAL_BUDGET, GLOBAL_WINDOW

T = TypeVar("T")

# How often a shard waiting for a bucket another process holds looks again: a small part of
# the identify window, so the hand-over adds little to it.
BUCKET_POLL_SECONDS: Final = 0.1
# An answer from the database slower than this is not waited for: the request goes on the
# process's share meanwhile (a database that hangs must not stop the bot talking).
ANSWER_PATIENCE: Final = 2.0
# When the table had too few slots free, at least this long before asking again: slots free
# one by one (as they were granted), and waiting a little gathers several into one round
# trip, at a cost of a few percent of the rate while the cluster is at the limit.
MIN_RETRY: Final = 0.02
# A slot a process keeps in hand beyond those its requests wait for, asked for with them (or
# once a request that used the last one is over) while the table grants in full: an answer's
# requests (history, typing, the reply) then each find one in hand instead of waiting a round
# trip.
SPARE_SLOTS: Final = 1
# ... used this soon after it was asked for, or let go: a pause another process's global 429
# started is heard of only with the next grant, and a spare never outlives that by more.
SPARE_SECONDS: Final = 0.25
# While every pause is heard as it starts (the grant line listens), a spare lives this long
# instead: within the window its slot is taken for, less a margin for the two clocks. A
# process that made a request in the last WARM_SECONDS then keeps HELD_SPARES in hand (an
# answer's requests: its history read, typing indicator and reply), asked again as they
# lapse and once its requests have been quiet for QUIET_SECONDS: an answer asks the table
# nothing while it is being made. They are asked only while the table has HELD_MARGIN free
# slots beyond them, and carry this process's name there: when another process finds the
# table short (a burst), those not used are given back at once (`SlotLine.give_back`).
HELD_SPARE_SECONDS: Final = 0.9
HELD_SPARES: Final = 3
HELD_MARGIN: Final = 12
QUIET_SECONDS: Final = 0.05
# Spares this close to lapsing are asked again with those missing (see `GrantBook.refill`).
RENEW_WITHIN_SECONDS: Final = 0.3
WARM_SECONDS: Final = 60.0
# After the table could not answer (out of reach), spares are asked again no sooner.
KEEP_RETRY_SECONDS: Final = 1.0


@attrs.frozen
class Grant:
    """The slot table's answer: slots granted, and when asking again may give more.

    Times are on the database's clock; `paused_until` is the shared pause a global 429 set.
    """

    wanted: int
    granted: int
    now: float
    retry_at: float
    paused_until: float = 0.0

    @property
    def paused(self) -> bool:
        """Whether every process is paused by a global 429."""
        return self.paused_until > self.now


@attrs.frozen
class BucketClaim:
    """An identify bucket's answer: held by us or not, and how long to wait if held.

    `generation` names the database connection that holds it (a lock is gone with its
    connection): releasing it on a later connection only records the IDENTIFY's time.
    """

    held: bool
    wait: float = 0.0
    generation: int = 0


class LimitsBackend(Protocol):
    """The shared tables, asked without blocking: each answer is handed to `done` on another
    thread, None when the database cannot be reached."""

    @property
    def reachable(self) -> bool:
        """False while the database cannot be reached (requests go on the process's share)."""

    @property
    def live(self) -> int:
        """The processes alive at the last count, this one included (at least 1)."""

    def grant(self, wanted: int, done: Callable[[Grant | None], None]) -> None:
        """Take up to `wanted` free slots of the global limit."""

    def pause(self, seconds: float) -> None:
        """Pause every process's requests for `seconds` (a global 429)."""

    def claim_bucket(
        self, bucket: int, window: float, done: Callable[[BucketClaim | None], None]
    ) -> None:
        """Hold identify bucket `bucket` if no other process does."""

    def release_bucket(
        self, bucket: int, claim: BucketClaim, identified_ago: float | None, invalid: bool
    ) -> None:
        """Give the bucket back, recording its IDENTIFY (`identified_ago` seconds ago) or op 9."""


class SlotLine(Protocol):
    """Global slots asked by the event loop itself (a connection it drives): no thread
    between the ask and the answer. The backend still serves everything else, and slots
    while the line is down."""

    def grant(self, wanted: int, answered: Callable[[Grant | None], None]) -> bool:
        """Take up to `wanted` free slots; `answered` gets the grant on the event loop, or
        None when the line could not answer. False: the line is down, nothing was asked."""

    @property
    def hears_pauses(self) -> bool:
        """Whether a pause another process starts is heard at once now."""

    def hear_pauses(self, heard: Callable[[float], None]) -> None:
        """`heard(seconds)` takes each pause of the cluster as it starts (event loop)."""

    def keep(self, wanted: int, margin: int, answered: Callable[[Grant | None], None]) -> bool:
        """`grant` slots to keep in hand, named as this process's in the table (so that it
        can give them back), and only while `margin` more than `wanted` are free."""

    def give_back(self, kept_at: float, count: int) -> None:
        """Free `count` slots this process kept at `kept_at` (the table's time) and did not
        use."""

    def hear_short(self, heard: Callable[[], None]) -> None:
        """`heard()` is called (event loop) when a process found the table short while
        slots were kept in hand."""

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the line up until cancelled."""


class GlobalSlots(Protocol):
    """The global limit shared with other processes, as the REST client takes it."""

    async def take(self, *, wait: bool = True, busy: bool = False) -> bool:
        """Wait for a slot (False: none free now and `wait` is False). `busy`: the process's
        requests are paced (`ratelimit.GlobalLimit.busy`): no slot is kept in hand meanwhile."""

    def refill(self) -> None:
        """A request that took a slot is over: keep one in hand for the next."""

    def prefetch(self, count: int) -> None:
        """Ask now for the slots `count` requests about to go will take."""

    def expect(self, count: int) -> None:
        """`count` requests (an answer's typing and reply) go in a moment: ask for them now."""

    def pause(self, seconds: float) -> None:
        """A global 429: every process waits `seconds`."""


class IdentifyGate(Protocol):
    """Identify buckets shared with other processes, as the gateway takes them."""

    async def claim(self, shard_id: int, bucket: int, window: float) -> float:
        """Wait until the shard holds its bucket and may IDENTIFY; the seconds waited."""

    def identified(self, shard_id: int) -> None:
        """The shard's IDENTIFY was just sent."""

    def settle(self, shard_id: int, *, invalid: bool = False) -> None:
        """The IDENTIFY's outcome is known: let the bucket go."""


def fair_share(live: int, budget: int = GLOBAL_BUDGET) -> int:
    """Requests per window one of `live` processes may send when they cannot share a table."""
    return max(1, budget // max(1, live))


class ShareWindow:
    """A process's share of the global limit while the database is out of reach: at most
    `share` requests started in any GLOBAL_WINDOW."""

    def __init__(self, window: float = GLOBAL_WINDOW) -> None:
        self._window = window
        self._started: collections.deque[float] = collections.deque()

    def take(self, now: float, share: int) -> bool:
        """Start one request now if the share allows it."""
        started = self._started
        while started and started[0] + self._window <= now:
            started.popleft()
        if len(started) >= share:
            return False
        started.append(now)
        return True

    def next_free(self, now: float) -> float:
        """When the oldest request leaves the window (now if none is in it)."""
        return self._started[0] + self._window if self._started else now


class GrantBook:
    """A process's side of the slot table: slots granted and not yet used, who waits, and
    when asking again is worth a round trip.

    A granted slot is used before GLOBAL_WINDOW has passed since it was asked for: the table
    took it at a moment after the asking, so the request starts before the slot is free for
    anyone else.
    """

    def __init__(
        self, budget: int = GLOBAL_BUDGET, window: float = GLOBAL_WINDOW, spare: int = SPARE_SLOTS
    ) -> None:
        self._budget = budget
        self._window = window
        self.spare_seconds = SPARE_SECONDS  # how long a spare granted now lives
        self.spare = spare  # slots to keep in hand (more while pauses are heard)
        # When each granted slot stops being usable, soonest first: those asked for requests
        # that waited, and the spares (used only when none of the others is left), each with
        # the table's time of a slot kept in hand (`kept`; None: an ordinary spare).
        self._stock: collections.deque[float] = collections.deque()
        self._spares: collections.deque[tuple[float, float | None]] = collections.deque()
        # Kept slots let go unused, by the table's time they were kept at: to be given back.
        self._unused: collections.Counter[float] = collections.Counter()
        self.waiting = 0  # requests that want a slot now
        self.asking_since: float | None = None
        self.refilling_since: float | None = None  # a refill's question is out (see `refill`)
        self.refill_failed_at = -math.inf  # the last refill the table could not answer
        self._asked_spare = 0  # of the slots asked for, spares
        self._full = True  # the last grant gave all that was asked (the table has room)
        self.retry_at = -math.inf
        self.answers = 0  # answers received (a request that may not wait sees one and goes)
        self.busy = False  # requests are paced: no spare is kept or used (see `take`)

    def take(self, now: float) -> bool:
        """Use a granted slot, if one is still usable."""
        self._usable(now)
        if self.busy:
            self.let_go()
        if self._stock:
            self._stock.popleft()
            return True
        if self._spares:
            self._spares.popleft()
            return True
        return False

    def _usable(self, now: float) -> int:
        """Drop the slots no longer usable; how many are left (spares included)."""
        stock, spares = self._stock, self._spares
        while stock and stock[0] <= now:
            stock.popleft()
        while spares and spares[0][0] <= now:
            spares.popleft()
        return len(self)

    def let_go(self) -> None:
        """Drop every spare in hand (requests are paced, or another process found the table
        short); those kept in hand are to be given back (`unused`)."""
        for _, kept in self._spares:
            if kept is not None:
                self._unused[kept] += 1
        self._spares.clear()

    def unused(self) -> list[tuple[float, int]]:
        """Kept slots let go unused since the last call: (the table's time they were kept
        at, how many). Their holder frees them in the table (no request was sent on them)."""
        if not self._unused:
            return []
        unused = sorted(self._unused.items())
        self._unused.clear()
        return unused

    def ask(self, now: float, ahead: int = 0) -> int:
        """How many slots to ask for now: 0 while an answer is awaited or none will be free.

        `ahead`: requests about to want a slot (see `SharedGlobalLimit.prefetch`); they are
        asked for only beyond the usable slots in hand.
        """
        if self.asking_since is not None or now < self.retry_at:
            return 0
        if ahead > 0:
            wanted = min(self.waiting + ahead - self._usable(now), self._budget)
            if wanted <= 0:
                return 0
        else:
            wanted = max(1, min(self.waiting, self._budget))
        self.asking_since = now
        self._asked_spare = min(self._spare_room(), self._budget - wanted)
        return wanted + self._asked_spare

    def expect(self, now: float, count: int) -> int:
        """How many slots to ask for now for `count` requests that go in a moment (an
        answer's typing indicator and reply), beyond the usable slots in hand: a spare
        stands for the last of them while the table grants in full. 0: none (in hand, an
        answer awaited, or none free before `retry_at`)."""
        if self.asking_since is not None or now < self.retry_at:
            return 0
        short = min(count - self._usable(now), self._budget)
        if short <= 0:
            return 0
        self.asking_since = now
        self._asked_spare = min(self._spare_room(), short)
        return short

    def refill(self, now: float, *, renew_within: float = 0.0) -> int:
        """How many spares to ask for after a request used a slot in hand (0: none now).

        A refill is a question of its own (`refilled` takes its answer): a request that wants
        a slot meanwhile asks at once rather than wait behind it.
        """
        if self.refilling_since is not None or now < self.retry_at or self.waiting > 1:
            return 0
        self._usable(now)
        if self._full:
            # Spares about to lapse are asked again with those missing: the spares in hand
            # then lapse together, and one question a lifetime keeps them all.
            while self._spares and self._spares[0][0] <= now + renew_within:
                self._spares.popleft()
        room = self._spare_room()
        if room > 0:
            self.refilling_since = now
        return room

    def refilled(self, grant: Grant | None, now: float, *, kept: bool = False) -> None:
        """The table's answer to a refill (None: out of reach). `kept`: the slots carry
        this process's name in the table and may be given back (`let_go`)."""
        asked = now if self.refilling_since is None else self.refilling_since
        self.refilling_since = None
        if grant is None:
            self.refill_failed_at = now
            return
        if grant.paused:
            self.block(now + max(MIN_RETRY, grant.retry_at - grant.now))
            return
        self._full = grant.granted >= grant.wanted
        lapse = asked + min(self._window, self.spare_seconds)
        self._spares.extend([(lapse, grant.now if kept else None)] * grant.granted)

    def _spare_room(self) -> int:
        """Spares to ask for: none while the table is short of slots or a refill is out."""
        if not self._full or self.refilling_since is not None or self.busy:
            return 0
        return max(0, self.spare - len(self))

    def next_lapse(self, now: float) -> float | None:
        """When the first usable spare lapses (None: no spare in hand)."""
        self._usable(now)
        return self._spares[0][0] if self._spares else None

    def short(self, now: float) -> bool:
        """Whether fewer slots are in hand than are to be kept."""
        return self._usable(now) < self.spare

    def stalled(self, now: float) -> bool:
        """Whether the awaited answer is late enough to go on the share meanwhile."""
        return self.asking_since is not None and now - self.asking_since >= ANSWER_PATIENCE

    def answered(self, grant: Grant | None, now: float) -> None:
        """The table's answer (None: out of reach) to the question asked at `asking_since`."""
        asked = now if self.asking_since is None else self.asking_since
        self.asking_since = None
        self.answers += 1
        if grant is None:
            return
        spares, self._asked_spare = self._asked_spare, 0
        if grant.paused:
            # Granted before the pause: Discord would refuse them now.
            self._stock.clear()
            self._spares.clear()
        self._full = grant.granted >= grant.wanted
        # The slots waited for first; what is left of a full grant are spares.
        waited = max(0, grant.granted - spares) if self._full else grant.granted
        self._stock.extend([asked + self._window] * waited)
        life = min(self._window, self.spare_seconds)
        self._spares.extend([(asked + life, None)] * (grant.granted - waited))
        if grant.granted < grant.wanted:
            # The table's clock: how much later than its `now` a slot frees or the pause ends.
            self.retry_at = now + max(MIN_RETRY, grant.retry_at - grant.now)

    def block(self, until: float) -> None:
        """Ask for nothing before `until` (a global 429 seen here)."""
        self._stock.clear()
        self._spares.clear()
        self.retry_at = max(self.retry_at, until)

    def __len__(self) -> int:
        return len(self._stock) + len(self._spares)


def _deliver(token: trio.lowlevel.TrioToken, fn: Callable[[T], None]) -> Callable[[T], None]:
    """`fn` run on the event loop, whichever thread hands it the answer."""

    def done(value: T) -> None:
        # RunFinishedError: the bot stopped while the answer was on its way.
        with contextlib.suppress(trio.RunFinishedError):
            token.run_sync_soon(fn, value)

    return done


class SharedGlobalLimit:
    """The global REST limit for the whole cluster: `take` a slot before sending a request.

    The REST client's own `GlobalLimit` still decides which of this process's requests goes
    next (answers before catch-up); this decides when the cluster lets it go.
    """

    def __init__(self, backend: LimitsBackend, line: SlotLine | None = None) -> None:
        self._backend = backend
        self._line = line
        self._book = GrantBook()
        self._share = ShareWindow()
        self._changed = trio.Event()
        self._last_take: float | None = None  # when this process last took a slot
        self._kick = trio.Event()  # a take or an answer: `keep_spares` looks again
        if line is not None:
            line.hear_pauses(self._heard_pause)
            line.hear_short(self._heard_short)

    @property
    def book(self) -> GrantBook:
        """The bookkeeping (for status and tests)."""
        return self._book

    async def take(self, *, wait: bool = True, busy: bool = False) -> bool:
        """Take a slot of the cluster's global limit; False only when `wait` is False and no
        slot is free now (an optional request, such as typing, is then not sent).

        While `busy`, no spare is kept or used: a request paced by this process's own limit
        would use one a pace after it was granted, and the table could grant its slot to
        another process less than a window after that use."""
        book = self._book
        book.busy = busy
        book.waiting += 1
        answers = book.answers
        self._last_take = trio.current_time()
        self._kick.set()
        try:
            while True:
                now = trio.current_time()
                if book.take(now):
                    return True
                if not self._backend.reachable or book.stalled(now):
                    if self._share.take(now, fair_share(self._backend.live)):
                        return True
                    if not wait:
                        return False
                    await trio.sleep_until(self._share.next_free(now))
                    continue
                if not wait and book.answers > answers and book.asking_since is None:
                    return False  # the table answered since we came and had nothing for us
                wanted = book.ask(now)
                if wanted:
                    self._ask(wanted)
                elif book.asking_since is None and not wait:
                    return False  # nothing frees before retry_at
                changed = self._changed
                if book.asking_since is not None:
                    deadline = book.asking_since + ANSWER_PATIENCE
                else:
                    deadline = book.retry_at
                with trio.move_on_at(deadline):
                    await changed.wait()
        finally:
            book.waiting -= 1
            self._give_back()

    def refill(self) -> None:
        """A request that took a slot is over: ask for a slot to keep in hand, so that the
        next request finds one too. Asked once the request is over, not as it takes its
        slot: the question and the database's work on it then never delay the request.
        While pauses are heard, `keep_spares` asks once the requests are quiet instead."""
        if self._backend.reachable and not self._hears_pauses():
            self._refill(self._book.refill(trio.current_time()))

    def prefetch(self, count: int) -> None:
        """Ask the table now for the slots `count` requests will take in a moment.

        The REST client calls it when its requests wait on its own limit and that many of its
        slots free within `ratelimit.PREFETCH_LOOKAHEAD`: a request holds its own slot from
        when it takes it until a window after its answer, so a round trip to the table made
        inside that span is rate lost for good, while a slot taken that little early costs
        the cluster only that little of the slot's window.
        """
        now = trio.current_time()
        book = self._book
        if not self._backend.reachable or book.stalled(now):
            return
        self._ask(book.ask(now, ahead=count))

    def expect(self, count: int) -> None:
        """`count` requests go in a moment: ask now for those the slots in hand do not
        cover, so that none of them waits a round trip to the table when it goes.

        An answer calls it as its model request is built: its typing indicator goes as soon
        as that request is written, its reply as soon as the model answers, and the round
        trip overlaps the request's own (its budget reservation). The reply's slot is a
        spare, let go soon if the model is slow (as after a typing request today).
        """
        now = trio.current_time()
        book = self._book
        if not self._backend.reachable or book.stalled(now):
            return
        self._ask(book.expect(now, count))

    def _ask(self, wanted: int) -> None:
        if wanted:
            self._grant(wanted, self._answered)

    def _refill(self, room: int) -> None:
        if room:
            self._grant(room, self._refilled)

    def _grant(self, wanted: int, then: Callable[[Grant | None], None]) -> None:
        """Ask for `wanted` slots on the line if it is up, else (or if it is lost before it
        answers) on the backend's thread; `then` takes the answer on the event loop."""
        on_thread = _deliver(trio.lowlevel.current_trio_token(), then)

        def on_line(grant: Grant | None) -> None:
            if grant is None:
                self._backend.grant(wanted, on_thread)  # it says whether the database is up
            else:
                then(grant)

        if self._line is None or not self._line.grant(wanted, on_line):
            self._backend.grant(wanted, on_thread)

    def _refilled(self, grant: Grant | None) -> None:
        self._book.spare_seconds = self._spare_life()
        self._book.refilled(grant, trio.current_time())
        self._wake()

    def _answered(self, grant: Grant | None) -> None:
        self._book.spare_seconds = self._spare_life()
        self._book.answered(grant, trio.current_time())
        self._wake()

    def _hears_pauses(self) -> bool:
        return self._line is not None and self._line.hears_pauses

    def _spare_life(self) -> float:
        """How long a spare granted now may live: long only while pauses are heard."""
        return HELD_SPARE_SECONDS if self._hears_pauses() else SPARE_SECONDS

    def _heard_short(self) -> None:
        """Another process found the table short: the slots kept in hand and not used go
        back to the table at once, not a window after they were kept."""
        self._book.let_go()
        self._give_back()

    def _give_back(self) -> None:
        line = self._line
        unused = self._book.unused()
        if line is not None:
            for kept_at, count in unused:
                line.give_back(kept_at, count)

    def _kept(self, grant: Grant | None) -> None:
        self._book.spare_seconds = self._spare_life()
        self._book.refilled(grant, trio.current_time(), kept=True)
        self._wake()

    def _heard_pause(self, seconds: float) -> None:
        """A process of the cluster (this one too) met a global 429: the slots in hand go."""
        self._book.block(trio.current_time() + seconds)
        self._wake()

    async def keep_spares(self) -> None:
        """While this process is warm and hears every pause, keep HELD_SPARES in hand:
        asked again as they lapse or are used (once the requests are quiet), while the
        table has room for them and more (until cancelled)."""
        book = self._book
        while True:
            now = trio.current_time()
            kick = self._kick = trio.Event()
            last = self._last_take
            if last is None or now - last >= WARM_SECONDS or self._line is None:
                book.spare = SPARE_SLOTS
                await kick.wait()
                continue
            deadline = last + WARM_SECONDS
            hears = self._hears_pauses()
            book.spare = HELD_SPARES if hears else SPARE_SLOTS
            if hears and book.short(now):
                if now < last + QUIET_SECONDS:
                    deadline = last + QUIET_SECONDS  # the answer's requests are still going
                elif now - book.refill_failed_at < KEEP_RETRY_SECONDS:
                    deadline = book.refill_failed_at + KEEP_RETRY_SECONDS
                elif self._backend.reachable and not book.stalled(now):
                    self._keep_up(book.refill(now, renew_within=RENEW_WITHIN_SECONDS))
            lapse = book.next_lapse(now)
            if lapse is not None:
                deadline = min(deadline, lapse)
            if book.retry_at > now:
                deadline = min(deadline, book.retry_at)
            with trio.move_on_at(deadline):
                await kick.wait()

    def _keep_up(self, room: int) -> None:
        """Ask the line for `room` spares, granted only while the table has room to spare."""
        line = self._line
        if room and line is not None and not line.keep(room, HELD_MARGIN, self._kept):
            self._book.refilled(None, trio.current_time())

    def pause(self, seconds: float) -> None:
        """A global 429 here: every process waits `seconds` (this one at once)."""
        self._book.block(trio.current_time() + seconds)
        self._backend.pause(seconds)
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
        self._kick.set()


@attrs.define
class _Held:
    bucket: int
    claim: BucketClaim
    identified_at: float | None = None


@attrs.define
class _Pending:
    """A bucket claim on its way: if its asker gave up, a bucket it got is given back."""

    backend: LimitsBackend
    bucket: int
    event: trio.Event = attrs.Factory(trio.Event)
    value: BucketClaim | None = None
    abandoned: bool = False

    def deliver(self, claim: BucketClaim | None) -> None:
        if self.abandoned:
            if claim is not None and claim.held:
                self.backend.release_bucket(self.bucket, claim, None, False)
            return
        self.value = claim
        self.event.set()


class SharedIdentify:
    """Identify buckets held across processes: `claim` before an IDENTIFY, `identified` when
    it is sent, `settle` once its outcome is known."""

    def __init__(self, backend: LimitsBackend, *, poll: float = BUCKET_POLL_SECONDS) -> None:
        self._backend = backend
        self._poll = poll
        self._held: dict[int, _Held] = {}

    def holds(self, shard_id: int) -> bool:
        """Whether shard `shard_id` holds its bucket now."""
        return shard_id in self._held

    async def claim(self, shard_id: int, bucket: int, window: float) -> float:
        """Wait until shard `shard_id` holds `bucket` and the bucket's window allows an
        IDENTIFY; the seconds waited. Out of reach: at once (the local pacing stands)."""
        self.settle(shard_id)  # a claim left over from an attempt that never settled
        started = trio.current_time()
        while self._backend.reachable:
            claim = await self._ask(bucket, window)
            if claim is None:
                break
            if claim.held:
                self._held[shard_id] = _Held(bucket, claim)
                if claim.wait > 0:
                    try:
                        await trio.sleep(claim.wait)
                    except BaseException:
                        self.settle(shard_id)
                        raise
                break
            await trio.sleep(self._poll)
        return trio.current_time() - started

    async def _ask(self, bucket: int, window: float) -> BucketClaim | None:
        pending = _Pending(self._backend, bucket)
        token = trio.lowlevel.current_trio_token()
        self._backend.claim_bucket(bucket, window, _deliver(token, pending.deliver))
        try:
            await pending.event.wait()
        except BaseException:
            pending.abandoned = True
            raise
        return pending.value

    def identified(self, shard_id: int) -> None:
        """Shard `shard_id`'s IDENTIFY was just sent."""
        held = self._held.get(shard_id)
        if held is not None:
            held.identified_at = trio.current_time()

    def settle(self, shard_id: int, *, invalid: bool = False) -> None:
        """The outcome is known (READY; `invalid`: op 9; or the connection ended): give the
        bucket back, with the IDENTIFY's time for the next shard's wait."""
        held = self._held.pop(shard_id, None)
        if held is None:
            return
        ago = None
        if held.identified_at is not None:
            ago = max(0.0, trio.current_time() - held.identified_at)
        self._backend.release_bucket(held.bucket, held.claim, ago, invalid)


class Startable(Protocol):
    """A backend with a lifetime: started with the bot's services, stopped with them."""

    def start(self) -> None:
        """Start serving (a thread of its own)."""

    def stop(self) -> None:
        """Stop serving and close the connection."""


class SharedLimits:
    """What a process of the cluster shares with the others: the REST client's global limit
    and the gateways' identify buckets, over one backend (`run` is its supervised life)."""

    def __init__(
        self, backend: LimitsBackend, lifetime: Startable, *, line: SlotLine | None = None
    ) -> None:
        self.backend = backend
        self._lifetime = lifetime
        self._line = line
        self.rest = SharedGlobalLimit(backend, line)
        self.identify = SharedIdentify(backend)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled."""
        self._lifetime.start()
        try:
            async with trio.open_nursery() as nursery:
                if self._line is not None:
                    await nursery.start(self._line.run)
                nursery.start_soon(self.rest.keep_spares)
                task_status.started()
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._lifetime.stop)
