"""Reservations asked by the event loop itself (SPEC 9, 17): a connection of their own, driven
through libpq's non-blocking calls, no worker thread.

A call's reservation is asked while its model request is built. Asked from a worker thread,
the question waited for the interpreter lock until the event loop went idle, that is until
the request was built, and only then went to the database. Written by the event loop, it is
on the wire at once: the database answers while the request is built, and reading the answer
takes microseconds. One question is out at a time; the others wait their turn, in order.

The statement and its parameters are `ceilings.RESERVE_SQL`'s (prepared once per
connection). When the line is down, `ask` says so and the caller asks on a worker thread.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Final

import attrs
import outcome
import psycopg
import trio
from psycopg import pq

from picortex.core.redact import redact
from picortex.errors import DatabaseUnreachable
from picortex.store.pg.ceilings import (
    CONNECT_TIMEOUT_SECONDS,
    HOLD_SECONDS,
    STATEMENT_TIMEOUT_MS,
    Answer,
    Ask,
    reserve_params,
)
from picortex.store.pg.database import describe

logger = logging.getLogger(__name__)

Answered = Callable[[outcome.Outcome[Answer]], None]

_STATEMENT: Final = b"picortex_reserve"
_SQL: Final = (
    b"SELECT * FROM picortex_budget_reserve("
    b"$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
)
# Pauses before connecting again after a loss (the last one repeats).
BACKOFF_SECONDS: Final = (0.5, 1.0, 2.0, 5.0)
_INTS: Final = frozenset(f.name for f in attrs.fields(Answer) if f.type in (int, "int"))
_BOOLS: Final = frozenset(f.name for f in attrs.fields(Answer) if f.type in (bool, "bool"))


def _text(value: object) -> bytes | None:
    """A parameter in PostgreSQL's text format (None: NULL)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    return str(value).encode()


def answer_of(result: pq.abc.PGresult) -> Answer:
    """The reservation's one row, by column name, from text format."""
    fields: dict[str, object] = {}
    for column in range(result.nfields):
        name = (result.fname(column) or b"").decode()
        raw = result.get_value(0, column)
        value = None if raw is None else raw.decode()
        if name in _INTS:
            fields[name] = int(value or 0)
        elif name in _BOOLS:
            fields[name] = value == "t"
        else:
            fields[name] = value
    return Answer(**fields)  # type: ignore[arg-type]


class ReserveLine:
    """Reservations over one non-blocking connection; `run` is its life (a supervised task)."""

    def __init__(
        self,
        url: str,
        node: str,
        *,
        hold_seconds: float = HOLD_SECONDS,
        backoff: Sequence[float] = BACKOFF_SECONDS,
    ) -> None:
        self._url = url
        self.node = node
        self.where = describe(url)
        self._hold_seconds = hold_seconds
        self._backoff = tuple(backoff)
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._out: Answered | None = None  # waiting for the answer to the question sent
        self._queue: collections.deque[tuple[Ask, Answered]] = collections.deque()
        self._unsent = False  # the question sent is not all written yet
        self._wake = trio.Event()
        self.reconnects = 0  # connections made again after a loss

    @property
    def ready(self) -> bool:
        """Whether a question asked now goes on this line."""
        return self._conn is not None

    def ask(self, ask: Ask, answered: Answered) -> bool:
        """Ask for `ask`'s reservation; `answered` gets the answer (or DatabaseUnreachable),
        on the event loop. False: the line is down, nothing was asked."""
        if self._conn is None:
            return False
        self._queue.append((ask, answered))
        if self._out is None:
            self._send_next()
        return True

    def _send_next(self) -> None:
        conn = self._conn
        if conn is None or not self._queue:
            return
        ask, answered = self._queue.popleft()
        self._out = answered
        try:
            params = reserve_params(ask, self.node, self._hold_seconds, None)
            conn.pgconn.send_query_prepared(_STATEMENT, [_text(p) for p in params])
            self._unsent = conn.pgconn.flush() != 0
        except psycopg.Error as exc:
            self._lost(exc)
            return
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, answer what is asked as answers come, connect again after a loss; at
        the end, fail what is still asked (the caller then decides locally)."""
        task_status.started()
        connected = failures = 0  # connected: a connection was made before
        try:
            while True:
                if self._conn is None:
                    try:
                        self._conn = await trio.to_thread.run_sync(self._connect)
                    except psycopg.Error as exc:
                        failures += 1
                        logger.debug("reservations cannot reach %s: %s", self.where, _reason(exc))
                        await trio.sleep(self._backoff[min(failures, len(self._backoff)) - 1])
                        continue
                    self.reconnects += connected
                    connected, failures = 1, 0
                await self._serve()
        finally:
            self._fail_all(DatabaseUnreachable(f"{self.where}: reservations stopped"))
            self._close()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """(worker thread) A new connection, the statement prepared, in non-blocking mode."""
        conn = psycopg.connect(
            self._url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            options=f"-c statement_timeout={STATEMENT_TIMEOUT_MS}",
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=2,
        )
        try:
            conn.execute(b"PREPARE " + _STATEMENT + b" AS " + _SQL)
            conn.pgconn.nonblocking = 1
        except BaseException:
            conn.close()
            raise
        return conn

    async def _serve(self) -> None:
        """Read answers until the connection is lost."""
        while self._conn is not None:
            pgconn = self._conn.pgconn
            try:
                if self._out is None:
                    wake = self._wake = trio.Event()
                    await wake.wait()
                elif self._unsent:
                    await trio.lowlevel.wait_writable(pgconn.socket)
                    self._unsent = pgconn.flush() != 0
                else:
                    await trio.lowlevel.wait_readable(pgconn.socket)
                    pgconn.consume_input()
                    self._read(pgconn)
            except (psycopg.Error, OSError) as exc:
                self._lost(exc)

    def _read(self, pgconn: pq.abc.PGconn) -> None:
        """Take the answer if it is all in; then send the next question."""
        first: pq.abc.PGresult | None = None
        while not pgconn.is_busy():
            result = pgconn.get_result()
            if result is None:
                break
            first = first or result
        else:
            return  # more to come
        answered, self._out = self._out, None
        assert answered is not None, "an answer comes only to a question"
        if first is not None and first.status == pq.ExecStatus.TUPLES_OK and first.ntuples:
            answered(outcome.Value(answer_of(first)))
        else:
            reason = b"" if first is None else (first.error_message or b"")
            text = redact(" ".join(reason.decode(errors="replace").split())) or "no answer"
            answered(outcome.Error(DatabaseUnreachable(f"{self.where}: {text}")))
            if pgconn.status != pq.ConnStatus.OK:
                self._lost(psycopg.OperationalError(text))
                return
        self._send_next()

    def _lost(self, exc: BaseException) -> None:
        """The connection failed: what was asked fails (asked again elsewhere), the line
        connects again."""
        logger.debug("reservations lost %s: %s", self.where, _reason(exc))
        self._close()
        self._fail_all(DatabaseUnreachable(f"{self.where}: {_reason(exc)}"))

    def _fail_all(self, error: DatabaseUnreachable) -> None:
        waiting = [] if self._out is None else [self._out]
        waiting.extend(answered for _, answered in self._queue)
        self._out = None
        self._queue.clear()
        for answered in waiting:
            answered(outcome.Error(error))

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        self._unsent = False
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                conn.close()


def _reason(exc: BaseException) -> str:
    return redact(" ".join(str(exc).split()) or type(exc).__name__)
