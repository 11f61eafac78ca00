"""Discord's shared limits in PostgreSQL (SPEC 17): the global REST slot table, the shared
pause after a global 429, and the identify buckets (see `picortex.discord.shared_limits`).

`PgLimits` is the SQL, on one connection; `LimitsWorker` serves it from a thread of its own
with a connection of its own, never behind the store's commit group, so a grant costs one
round trip (a fraction of a millisecond against 50-150 ms for the Discord call it allows).
While the database cannot be reached the worker answers None at once (each process then keeps
to its share) and reconnects with backoff, logging one error per minute at most.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, Self, cast

import attrs
import outcome
import psycopg
from psycopg import pq

from picortex.core.redact import redact
from picortex.discord.ratelimit import GLOBAL_BUDGET, GLOBAL_WINDOW
from picortex.discord.shared_limits import BucketClaim, Grant, SharedLimits, fair_share
from picortex.store.pg.cluster import HEARTBEAT_SECONDS, LIVE_SECONDS, node_name
from picortex.store.pg.line import BACKOFF_SECONDS as LINE_BACKOFF_SECONDS
from picortex.store.pg.line import Line, columns

logger = logging.getLogger(__name__)

APPLICATION_NAME: Final = "picortex discord limits"  # how it shows in pg_stat_activity
# Short: while it tries, requests wait on nothing (they go on the share), but the worker
# does, and a bucket's release queues behind it.
CONNECT_TIMEOUT_SECONDS: Final = 3
# A statement of this connection never waits on a lock (SKIP LOCKED, try-locks): one that
# takes this long means the server is in trouble, and the share is safer than waiting.
STATEMENT_TIMEOUT_MS: Final = 2_000
# Waits between reconnection attempts: quick at first, then no more than one every 10 s.
BACKOFF_SECONDS: Final = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
# While the database stays unreachable, one error per this long (the rest are debug).
ERROR_EVERY_SECONDS: Final = 60.0
# The advisory-lock class of identify buckets (the second key is the bucket); the two-key
# lock space never meets the one-key one the migrations lock in.
_BUCKET_LOCK: Final = 0x1DE7
# Where a global 429's pause is told to every process (the payload: its seconds left).
PAUSE_CHANNEL: Final = "picortex_global_pause"
# Where a grant that came back short says so while slots are kept in hand (schema V9): their
# holders give back those they did not use.
SHORT_CHANNEL: Final = "picortex_global_short"

Row = tuple[object, ...]


class PgLimits:
    """The shared limits' statements on one connection. Times are the database's clock
    (`clock_timestamp()`), or `clock`'s when given (tests); every time in the answers is on it."""

    def __init__(
        self, conn: psycopg.Connection[Row], *, clock: Callable[[], float] | None = None
    ) -> None:
        self._conn = conn
        self._clock = clock

    @classmethod
    def open(cls, url: str, *, clock: Callable[[], float] | None = None) -> Self:
        """Connect to `url` (already migrated).

        Raises:
            psycopg.Error: when the database cannot be reached.
        """
        conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=APPLICATION_NAME,
            # Its commits do not wait for the server's disk: a slot is taken for a second and
            # a bucket's IDENTIFY counts for five, so a server that crashes loses at most the
            # last moment of them (Discord's own 429 and op 9 still guard the limits).
            options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS} -c synchronous_commit=off",
            # A server that vanishes without a word is noticed in seconds, not hours.
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=2,
            tcp_user_timeout=10_000,
        )
        return cls(conn, clock=clock)

    def close(self) -> None:
        """Close the connection (its bucket locks go with it)."""
        self._conn.close()

    @property
    def closed(self) -> bool:
        """Whether the connection is gone."""
        return bool(self._conn.closed)

    def _at(self) -> float | None:
        return self._clock() if self._clock is not None else None

    def _row(self, sql: str, params: tuple[object, ...]) -> Row:
        row = self._conn.execute(sql, params).fetchone()
        assert row is not None
        return row

    def grant(
        self, wanted: int, *, budget: int = GLOBAL_BUDGET, window: float = GLOBAL_WINDOW
    ) -> Grant:
        """Take up to `wanted` slots free now, each for the next `window` (one statement)."""
        return _grant_of(
            wanted,
            self._row(
                "SELECT * FROM picortex_global_grant(%s::integer, %s::integer,"
                " %s::double precision, %s::double precision)",
                (wanted, budget, window, self._at()),
            ),
        )

    def keep(
        self,
        wanted: int,
        margin: int,
        holder: str,
        *,
        budget: int = GLOBAL_BUDGET,
        window: float = GLOBAL_WINDOW,
    ) -> Grant:
        """Take up to `wanted` slots to keep in hand, named `holder`'s, only while `margin`
        more are free (else none)."""
        return _grant_of(
            wanted,
            self._row(
                "SELECT * FROM picortex_global_keep(%s::integer, %s::integer,"
                " %s::double precision, %s::integer, %s::text, %s::double precision)",
                (wanted, budget, window, margin, holder, self._at()),
            ),
        )

    def give_back(
        self, holder: str, kept_at: float, count: int, *, window: float = GLOBAL_WINDOW
    ) -> int:
        """Free `count` slots `holder` kept at `kept_at` and did not use; how many were."""
        (freed,) = self._row(
            "SELECT picortex_global_give_back(%s::text, %s::double precision,"
            " %s::double precision, %s::integer)",
            (holder, kept_at, window, count),
        )
        return cast(int, freed)

    def pause(self, seconds: float) -> float:
        """Pause every process's global slots for `seconds`; when the pause ends."""
        # Every process hears it at once (their grant lines listen): the seconds it has left.
        (until,) = self._row(
            "WITH t AS (SELECT coalesce(%s::double precision,"
            " extract(epoch FROM clock_timestamp())) AS now),"
            " p AS (UPDATE rest_global_pause SET until = greatest(until, t.now + %s)"
            " FROM t RETURNING until, until - t.now AS left_seconds)"
            " SELECT until FROM p, pg_notify(%s, p.left_seconds::text)",
            (self._at(), seconds, PAUSE_CHANNEL),
        )
        return cast(float, until)

    def claim_bucket(self, bucket: int, window: float) -> BucketClaim:
        """Hold identify bucket `bucket` if no other connection does; how long its window
        still runs from the last IDENTIFY."""
        (held,) = self._row(
            "SELECT pg_try_advisory_lock(%s::integer, %s::integer)", (_BUCKET_LOCK, bucket)
        )
        if not held:
            return BucketClaim(held=False)
        # Read once held (a statement of its own): the last holder wrote before letting go.
        last, now = self._row(
            "SELECT (SELECT identify_at FROM identify_bucket WHERE bucket = %s),"
            " coalesce(%s::double precision, extract(epoch FROM clock_timestamp()))",
            (bucket, self._at()),
        )
        wait = 0.0 if last is None else max(0.0, cast(float, last) + window - cast(float, now))
        return BucketClaim(held=True, wait=wait)

    def release_bucket(
        self, bucket: int, identified_ago: float | None, *, invalid: bool, held: bool
    ) -> None:
        """Record the bucket's IDENTIFY (`identified_ago` seconds ago; `invalid`: answered
        with op 9, whose moment starts the window again), then let the bucket go if `held`."""
        if identified_ago is not None or invalid:
            ago = 0.0 if invalid or identified_ago is None else identified_ago
            self._conn.execute(
                "INSERT INTO identify_bucket AS b (bucket, identify_at) VALUES (%s,"
                " coalesce(%s::double precision, extract(epoch FROM clock_timestamp())) - %s)"
                " ON CONFLICT (bucket) DO UPDATE"
                " SET identify_at = greatest(b.identify_at, excluded.identify_at)",
                (bucket, self._at(), ago),
            )
        if held:
            self._conn.execute(
                "SELECT pg_advisory_unlock(%s::integer, %s::integer)", (_BUCKET_LOCK, bucket)
            )

    def live_processes(self, node: str, now: float) -> int:
        """This process and the others whose heartbeat is recent (`cluster_node`)."""
        (others,) = self._row(
            "SELECT count(*) FROM cluster_node WHERE node <> %s AND last_seen > %s",
            (node, now - LIVE_SECONDS),
        )
        return 1 + cast(int, others)


def _grant_of(wanted: int, row: Row) -> Grant:
    """A grant function's row (granted, db_now, retry_at, paused_until) as a Grant."""
    granted, now, retry_at, paused_until = row
    return Grant(
        wanted=wanted,
        granted=cast(int, granted),
        now=cast(float, now),
        retry_at=cast(float, retry_at),
        paused_until=cast(float, paused_until),
    )


@attrs.define
class _Job:
    run: Callable[[PgLimits], object]
    done: Callable[[object], None] | None


class LimitsWorker:
    """The shared limits served by one thread with a connection of its own (`LimitsBackend`).

    Jobs run in the order given, so a bucket's release always follows its claim. The count of
    live processes is refreshed every heartbeat while connected.
    """

    def __init__(
        self,
        url: str,
        where: str,
        *,
        clock: Callable[[], float] | None = None,
        node: str | None = None,
    ) -> None:
        self._url = url
        self._where = where  # what messages name (never the URL)
        self._clock = clock
        self._node = node or node_name()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._limits: PgLimits | None = None
        self._reachable = True  # until the first attempt says otherwise
        self._live = 1
        self._live_at = -HEARTBEAT_SECONDS
        self._failures = 0
        self._next_attempt = 0.0
        self._last_error_at = -ERROR_EVERY_SECONDS
        self.generation = 0  # connections made so far: a bucket lock lives in one
        self._stopped = False

    # ---- LimitsBackend -------------------------------------------------------------------

    @property
    def reachable(self) -> bool:
        """False while the database cannot be reached."""
        return self._reachable

    @property
    def live(self) -> int:
        """The processes alive at the last count, this one included."""
        return self._live

    def grant(self, wanted: int, done: Callable[[Grant | None], None]) -> None:
        """Take up to `wanted` global slots; the answer goes to `done` (worker thread)."""
        self._submit(lambda db: db.grant(wanted), done)

    def pause(self, seconds: float) -> None:
        """Pause every process for `seconds` (a global 429)."""
        self._submit(lambda db: db.pause(seconds), None)

    def claim_bucket(
        self, bucket: int, window: float, done: Callable[[BucketClaim | None], None]
    ) -> None:
        """Hold identify bucket `bucket` if free; the answer goes to `done`."""

        def claim(db: PgLimits) -> BucketClaim:
            # Named by the connection that holds it: a later one cannot let it go.
            return attrs.evolve(db.claim_bucket(bucket, window), generation=self.generation)

        self._submit(claim, done)

    def release_bucket(
        self, bucket: int, claim: BucketClaim, identified_ago: float | None, invalid: bool
    ) -> None:
        """Give bucket `bucket` back (its lock only if still on the connection that took it)."""

        def release(db: PgLimits) -> None:
            held = claim.held and claim.generation == self.generation
            db.release_bucket(bucket, identified_ago, invalid=invalid, held=held)

        self._submit(release, None)

    def _submit(
        self, run: Callable[[PgLimits], object], done: Callable[[Any], None] | None
    ) -> None:
        if self._stopped:
            if done is not None:
                done(None)  # nobody serves it any more: as if out of reach
            return
        self._jobs.put(_Job(run, done))

    # ---- lifetime ------------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="picortex-limits", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close the connection (bucket locks go with it)."""
        self._stopped = True
        self._reachable = False
        thread = self._thread
        if thread is not None:
            self._jobs.put(None)
            thread.join(CONNECT_TIMEOUT_SECONDS + 1)
            self._thread = None
        # Whatever was still queued is answered, so that nobody waits for it.
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return
            if job is not None and job.done is not None:
                job.done(None)

    # ---- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                if self._limits is None and time.monotonic() >= self._next_attempt:
                    self._connect()
                try:
                    job = self._jobs.get(timeout=self._idle_wait())
                except queue.Empty:
                    self._refresh_live()
                    continue
                if job is None:
                    break
                self._serve(job)
                self._refresh_live()
        finally:
            if self._limits is not None:
                with contextlib.suppress(psycopg.Error):
                    self._limits.close()
                self._limits = None

    def _idle_wait(self) -> float:
        if self._limits is None:
            return max(0.0, self._next_attempt - time.monotonic())
        return max(0.0, self._live_at + HEARTBEAT_SECONDS - time.monotonic())

    def _serve(self, job: _Job) -> None:
        result: object = None
        if self._limits is not None:
            try:
                result = job.run(self._limits)
            except psycopg.Error as exc:
                self._lost(exc)
                result = None
        if job.done is not None:
            try:
                job.done(result)
            except Exception:
                logger.exception("a shared-limits answer could not be handed on")

    def _refresh_live(self) -> None:
        now = time.monotonic()
        if self._limits is None or now < self._live_at + HEARTBEAT_SECONDS:
            return
        self._live_at = now
        try:
            self._live = self._limits.live_processes(self._node, time.time())
        except psycopg.Error as exc:
            self._lost(exc)

    def _connect(self) -> None:
        try:
            self._limits = PgLimits.open(self._url, clock=self._clock)
        except psycopg.Error as exc:
            self._lost(exc)
            return
        self.generation += 1
        if not self._reachable:
            logger.info("%s reached again: Discord's limits are shared again", self._where)
        self._reachable = True
        self._failures = 0
        self._live_at = -HEARTBEAT_SECONDS
        self._refresh_live()

    def _lost(self, exc: psycopg.Error) -> None:
        """The connection failed or never came: go on the share, try again later."""
        if self._limits is not None:
            with contextlib.suppress(psycopg.Error):
                self._limits.close()
            self._limits = None
        self._reachable = False
        self._failures += 1
        pause = BACKOFF_SECONDS[min(self._failures, len(BACKOFF_SECONDS)) - 1]
        self._next_attempt = time.monotonic() + pause
        now = time.monotonic()
        reason = redact(" ".join(str(exc).split()) or type(exc).__name__)
        if now - self._last_error_at >= ERROR_EVERY_SECONDS:
            self._last_error_at = now
            logger.error(
                "%s cannot be reached for Discord's shared limits (%s); each process keeps to "
                "its share of the global limit (%d requests per second of %d) meanwhile",
                self._where,
                reason,
                fair_share(self._live),
                GLOBAL_BUDGET,
            )
        else:
            logger.debug("Discord's shared limits still cannot reach %s: %s", self._where, reason)


_GRANT: Final = b"picortex_grant"
_GRANT_SQL: Final = (
    b"SELECT * FROM picortex_global_grant($1::integer, $2::integer,"
    b" $3::double precision, NULL::double precision)"
)

_KEEP: Final = b"picortex_keep"
# `wanted` slots only while `margin` more are free (else none: a grant of 0 says the table is
# short, and the process keeps nothing in hand), named as the line's holder's.
_KEEP_SQL: Final = (
    b"SELECT * FROM picortex_global_keep($1::integer, $2::integer, $3::double precision,"
    b" $4::integer, $5::text, NULL::double precision)"
)
_GIVE_BACK: Final = b"picortex_give_back"
_GIVE_BACK_SQL: Final = (
    b"SELECT picortex_global_give_back($1::text, $2::double precision, $3::double precision,"
    b" $4::integer)"
)


class GrantLine(Line):
    """Global slots asked by the event loop on a line of their own (`SlotLine`): an
    answer's first request no longer waits for a worker thread to get the interpreter lock
    twice (to ask, then to hand the answer back)."""

    def __init__(self, url: str, *, backoff: Sequence[float] = LINE_BACKOFF_SECONDS) -> None:
        # As the worker's connection, its commits do not wait for the server's disk.
        super().__init__(
            url,
            {_GRANT: _GRANT_SQL, _KEEP: _KEEP_SQL, _GIVE_BACK: _GIVE_BACK_SQL},
            what="global slots",
            backoff=backoff,
            durable=False,
            listen={PAUSE_CHANNEL: self._paused, SHORT_CHANNEL: self._short},
        )
        self._heard: Callable[[float], None] | None = None
        self._heard_short: Callable[[], None] | None = None
        # The name the slots it keeps carry in the table: this line's alone.
        self.holder = secrets.token_hex(8)

    @property
    def hears_pauses(self) -> bool:
        """Whether a pause another process starts is heard at once (the line is up)."""
        return self.ready

    def hear_pauses(self, heard: Callable[[float], None]) -> None:
        """`heard(seconds)` takes each pause of the cluster as it starts, on the event loop."""
        self._heard = heard

    def hear_short(self, heard: Callable[[], None]) -> None:
        """`heard()` is called on the event loop when a process found the table short while
        slots were kept in hand."""
        self._heard_short = heard

    def _short(self, payload: str) -> None:
        if self._heard_short is not None:
            self._heard_short()

    def _paused(self, payload: str) -> None:
        try:
            seconds = float(payload)
        except ValueError:
            return
        if self._heard is not None and seconds > 0:
            self._heard(seconds)

    def grant(
        self,
        wanted: int,
        answered: Callable[[Grant | None], None],
        *,
        budget: int = GLOBAL_BUDGET,
        window: float = GLOBAL_WINDOW,
    ) -> bool:
        """Take up to `wanted` free slots; `answered` gets the grant on the event loop, or
        None when the line could not answer (ask the worker). False: the line is down."""
        return self.send(_GRANT, (wanted, budget, window), _decoded(wanted, answered))

    def keep(
        self,
        wanted: int,
        margin: int,
        answered: Callable[[Grant | None], None],
        *,
        budget: int = GLOBAL_BUDGET,
        window: float = GLOBAL_WINDOW,
    ) -> bool:
        """`grant` slots to keep in hand, named this line's holder's, only while `margin`
        more than `wanted` are free: slots kept ahead of any request never take the last
        free ones."""
        params = (wanted, budget, window, margin, self.holder)
        return self.send(_KEEP, params, _decoded(wanted, answered))

    def give_back(self, kept_at: float, count: int, *, window: float = GLOBAL_WINDOW) -> None:
        """Free `count` slots kept at `kept_at` (the table's time) and not used. Lost with
        the line, they free a window after they were kept, as any other."""
        self.send(_GIVE_BACK, (self.holder, kept_at, window, count), _ignored)


def _ignored(result: outcome.Outcome[pq.abc.PGresult]) -> None:
    """A statement whose answer changes nothing here."""


def _decoded(
    wanted: int, answered: Callable[[Grant | None], None]
) -> Callable[[outcome.Outcome[pq.abc.PGresult]], None]:
    """The grant function's row as a Grant for `answered` (None: the line could not ask)."""

    def decode(result: outcome.Outcome[pq.abc.PGresult]) -> None:
        if isinstance(result, outcome.Error):
            answered(None)
            return
        row = columns(result.unwrap())
        answered(
            Grant(
                wanted=wanted,
                granted=int(row["granted"] or 0),
                now=float(row["db_now"] or 0.0),
                retry_at=float(row["retry_at"] or 0.0),
                paused_until=float(row["paused_until"] or 0.0),
            )
        )

    return decode


def open_limits(url: str, where: str) -> SharedLimits:
    """This process's share of Discord's limits over the database at `url`: slots asked on
    the grant line while it is up, everything else (and slots meanwhile) by the worker."""
    worker = LimitsWorker(url, where)
    return SharedLimits(worker, worker, line=GrantLine(url))
