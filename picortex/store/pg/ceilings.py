"""The cluster's ceilings in PostgreSQL (SPEC 9, 17): reserve and settle, one call each.

Each runs one function of the schema (`picortex_budget_reserve`, `picortex_budget_settle`)
in one transaction that locks the counters it reads in one fixed order (global, user,
workspace), so calls made at once on any process overshoot a ceiling by one call at most.
The calls are synchronous, on a connection of their own (never behind the store actor's
commit group), made from a worker thread; money is integer micro-dollars.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from collections.abc import Callable
from typing import Final, cast

import attrs
import psycopg

from picortex.core.redact import redact
from picortex.errors import DatabaseUnreachable
from picortex.store.pg.cluster import LIVE_SECONDS
from picortex.store.pg.database import describe

MICROS_PER_USD: Final = 1_000_000
MAX_USD: Final = 1e12  # far above any ceiling; its micro-dollars still fit a bigint
# A call never runs longer than a streamed answer may (STREAM_MAX_SECONDS, 300 s): a dead
# process's reservations count as spent at their worst case until this has passed.
HOLD_SECONDS: Final = 360.0
# Settled reservations are kept this long: a settlement sent again (its answer lost with the
# connection) finds its row and counts once.
KEEP_SETTLED_SECONDS: Final = 86_400.0
CONNECT_TIMEOUT_SECONDS: Final = 3
# One call takes a millisecond; one that takes seconds is a database in trouble: give up and
# enforce locally rather than hold a call back.
STATEMENT_TIMEOUT_MS: Final = 5_000
# After a failure, calls go straight to the local share for this long before trying again.
RETRY_SECONDS: Final = 2.0


# A call's reservation; its parameters are `reserve_params`.
RESERVE_SQL: Final = (
    "SELECT * FROM picortex_budget_reserve("
    "%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def reserve_params(
    ask: Ask, node: str, hold_seconds: float, now: float | None
) -> tuple[object, ...]:
    """`picortex_budget_reserve`'s parameters, in order: `ask` held by `node` for `hold_seconds`
    at most; `now` (Unix seconds) for tests, None: the database's clock."""
    return (
        ask.id,
        node,
        ask.workspace,
        ask.user_id,
        ask.amount,
        ask.period,
        ask.day,
        ask.ceiling,
        ask.global_ceiling,
        ask.user_daily,
        ask.user_rate,
        ask.user_limited,
        hold_seconds,
        LIVE_SECONDS,
        now,
    )


def micros(amount_usd: float) -> int:
    """USD as micro-dollars, rounded up (a call is never cheaper in the database than it
    was); float dust (0.1 * 1e6 = 100000.00000000001) is not a micro-dollar more. Not a
    number is nothing (a ceiling of nothing refuses); the most is what a bigint holds."""
    if not amount_usd > 0:
        return 0
    return math.ceil(round(min(amount_usd, MAX_USD) * MICROS_PER_USD, 3))


def usd_of(amount_micros: int) -> float:
    """Micro-dollars as USD."""
    return amount_micros / MICROS_PER_USD


@attrs.frozen
class Ask:
    """One call's reservation request, with the limits in force (micro-dollars)."""

    id: uuid.UUID
    workspace: str
    user_id: int | None
    amount: int
    period: str  # the period's key (`2026-11-30` or `2026-11`)
    day: str  # today's key (UTC), for the user's daily limit
    ceiling: int
    global_ceiling: int
    user_daily: int  # 0: none
    user_rate: int  # 0: none
    user_limited: bool  # False for the owner and for a call made for no user


@attrs.frozen
class Answer:
    """What the cluster said: the limit that refused (or None: reserved) and the numbers."""

    refused: str | None
    workspace_spent: int
    workspace_held: int
    global_spent: int
    global_held: int
    user_spent: int
    user_held: int
    user_recent: int
    warn: bool  # this process is the one to log the refusal for this period
    tell: bool  # ... and to tell the user
    live_nodes: int


@attrs.frozen
class Settlement:
    """A call's real cost, to record against the period and day it ended in."""

    id: uuid.UUID
    workspace: str
    user_id: int | None
    cost: int
    period: str
    day: str
    at: float  # Unix seconds, when the call ended


class Ceilings:
    """The ceilings' own connection; opened on first use, reopened after a failure.

    Thread-safe: calls are serialised on the one connection.
    """

    def __init__(
        self,
        url: str,
        node: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        hold_seconds: float = HOLD_SECONDS,
    ) -> None:
        self._url = url
        self.node = node
        self.where = describe(url)
        self._clock = clock
        self._hold_seconds = hold_seconds
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._retry_at = -math.inf
        self.closed = False

    def reserve(self, ask: Ask, *, now: float | None = None) -> Answer:
        """Reserve `ask.amount` for a call, or say which limit refuses it.

        `now` (Unix seconds) is for tests; by default the database's clock decides.

        Raises:
            DatabaseUnreachable: the database could not be asked.
        """
        row = self._call(RESERVE_SQL, reserve_params(ask, self.node, self._hold_seconds, now))
        return Answer(*row)  # type: ignore[arg-type]

    def settle(self, settled: Settlement, *, now: float | None = None) -> bool:
        """Record a call's cost and release its reservation; False if it was settled already.

        Raises:
            DatabaseUnreachable: the database could not be asked (send it again later).
        """
        row = self._call(
            "SELECT picortex_budget_settle(%s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                settled.id,
                self.node,
                settled.workspace,
                settled.user_id,
                settled.cost,
                settled.period,
                settled.day,
                settled.at,
                now,
            ),
        )
        return bool(row[0])

    def spent(self, period: str, day: str) -> tuple[dict[str, int], int, dict[int, int]]:
        """What the cluster spent: per workspace and in all this period, per user today.

        Raises:
            DatabaseUnreachable: the database could not be asked.
        """
        rows = self._rows(
            "SELECT scope, name, spent_micros FROM budget_counter WHERE spent_micros > 0"
            " AND ((scope IN ('global', 'workspace') AND period = %s)"
            " OR (scope = 'user' AND period = %s))",
            (period, day),
        )
        workspaces: dict[str, int] = {}
        users: dict[int, int] = {}
        total = 0
        for scope, name, amount in rows:
            spent = cast(int, amount)
            if scope == "global":
                total = spent
            elif scope == "workspace":
                workspaces[cast(str, name)] = spent
            else:
                users[int(cast(str, name))] = spent
        return workspaces, total, users

    def prune(self, *, now: float | None = None) -> int:
        """Forget settled and long-expired reservations and old call starts; how many.

        Raises:
            DatabaseUnreachable: the database could not be asked.
        """
        row = self._call(
            "WITH t AS (SELECT coalesce(%s, extract(epoch FROM clock_timestamp())) AS now),"
            " r AS (DELETE FROM budget_reservation USING t"
            " WHERE settled_at < t.now - %s OR expires_at < t.now - %s RETURNING 1),"
            " q AS (DELETE FROM budget_request USING t WHERE at <= t.now - 60 RETURNING 1)"
            " SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM q)",
            (now, KEEP_SETTLED_SECONDS, KEEP_SETTLED_SECONDS),
        )
        return cast(int, row[0])

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self.closed = True
            self._drop()

    def _call(self, sql: str, params: tuple[object, ...]) -> tuple[object, ...]:
        rows = self._rows(sql, params)
        return rows[0]

    def _rows(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        with self._lock:
            if self.closed:
                raise DatabaseUnreachable(f"{self.where}: the ceilings' connection is closed")
            if self._conn is None and self._clock() < self._retry_at:
                raise DatabaseUnreachable(f"{self.where} could not be reached a moment ago")
            try:
                conn = self._connection()
                return conn.execute(sql, params).fetchall()
            except psycopg.Error as exc:
                self._drop()
                self._retry_at = self._clock() + RETRY_SECONDS
                reason = redact(" ".join(str(exc).split()) or type(exc).__name__)
                raise DatabaseUnreachable(f"{self.where}: {reason}") from None

    def _connection(self) -> psycopg.Connection[tuple[object, ...]]:
        if self._conn is None or self._conn.closed:
            conn = psycopg.connect(
                self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_SECONDS
            )
            conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
            self._conn = conn
        return self._conn

    def _drop(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
