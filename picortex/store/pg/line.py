"""Questions asked by the event loop itself: one connection of their own, driven through
libpq's non-blocking calls, no worker thread (SPEC 17's reservations and global slots).

A question asked from a worker thread waits for the interpreter lock until the event loop
goes idle, and its answer waits for it again; asked by the event loop, it is on the wire at
once, and reading the answer takes microseconds. One question is out at a time; the others
wait their turn, in order. Each kind of question is a statement prepared once per
connection. When the line is down, `send` says so and the caller asks another way.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import outcome
import psycopg
import trio
from psycopg import pq

from picortex.core.redact import redact
from picortex.errors import DatabaseUnreachable
from picortex.store.pg.database import describe

logger = logging.getLogger(__name__)

# The answer's first result (TUPLES_OK with its rows), or why there is none.
Answered = Callable[[outcome.Outcome[pq.abc.PGresult]], None]

# Pauses before connecting again after a loss (the last one repeats).
BACKOFF_SECONDS: Final = (0.5, 1.0, 2.0, 5.0)
CONNECT_TIMEOUT_SECONDS: Final = 3
# A statement that takes this long means the server is in trouble: the caller's other way is
# safer than waiting (a line whose statements wait on locks passes its own).
STATEMENT_TIMEOUT_MS: Final = 2_000


def text_param(value: object) -> bytes | None:
    """A parameter in PostgreSQL's text format (None: NULL)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    return str(value).encode()


class Line:
    """Prepared statements over one non-blocking connection; `run` is its life (a
    supervised task). `what` names it in logs ("reservations", "global slots").

    `listen`: channels the connection LISTENs on, each with what takes a notification's
    payload (on the event loop, as it arrives; while the line is idle, it waits for them).
    """

    def __init__(
        self,
        url: str,
        statements: Mapping[bytes, bytes],
        *,
        what: str,
        backoff: Sequence[float] = BACKOFF_SECONDS,
        statement_timeout_ms: int = STATEMENT_TIMEOUT_MS,
        durable: bool = True,
        listen: Mapping[str, Callable[[str], None]] | None = None,
    ) -> None:
        self._url = url
        self._listen = dict(listen or {})
        self._timeout_ms = statement_timeout_ms
        # Not durable: a commit does not wait for the server's disk (what a server crash
        # could lose is worth less than the wait on every question).
        self._durable = durable
        self._statements = dict(statements)
        self.what = what
        self.where = describe(url)
        self._backoff = tuple(backoff)
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._out: Answered | None = None  # waiting for the answer to the question sent
        self._queue: collections.deque[tuple[bytes, list[bytes | None], Answered]] = (
            collections.deque()
        )
        self._unsent = False  # the question sent is not all written yet
        self._wake = trio.Event()
        self._idle: trio.CancelScope | None = None  # waiting for notifications, nothing out
        self.reconnects = 0  # connections made again after a loss

    @property
    def ready(self) -> bool:
        """Whether a question asked now goes on this line."""
        return self._conn is not None

    def send(self, statement: bytes, params: Sequence[object], answered: Answered) -> bool:
        """Ask prepared `statement` with `params`; `answered` gets the first result (or
        DatabaseUnreachable), on the event loop. False: the line is down, nothing was asked."""
        if self._conn is None:
            return False
        self._queue.append((statement, [text_param(p) for p in params], answered))
        if self._out is None:
            self._send_next()
        return True

    def _send_next(self) -> None:
        conn = self._conn
        if conn is None or not self._queue:
            return
        statement, params, answered = self._queue.popleft()
        self._out = answered
        try:
            conn.pgconn.send_query_prepared(statement, params)
            self._unsent = conn.pgconn.flush() != 0
        except psycopg.Error as exc:
            self._lost(exc)
            return
        self._wake.set()
        if self._idle is not None:
            self._idle.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Connect, answer what is asked as answers come, connect again after a loss; at
        the end, fail what is still asked (the caller then decides another way)."""
        task_status.started()
        connected = failures = 0  # connected: a connection was made before
        try:
            while True:
                if self._conn is None:
                    try:
                        self._conn = await trio.to_thread.run_sync(self._connect)
                    except psycopg.Error as exc:
                        failures += 1
                        logger.debug("%s cannot reach %s: %s", self.what, self.where, _reason(exc))
                        await trio.sleep(self._backoff[min(failures, len(self._backoff)) - 1])
                        continue
                    self.reconnects += connected
                    connected, failures = 1, 0
                await self._serve()
        finally:
            self._fail_all(DatabaseUnreachable(f"{self.where}: {self.what} stopped"))
            self._close()

    def _connect(self) -> psycopg.Connection[tuple[object, ...]]:
        """(worker thread) A new connection, the statements prepared, in non-blocking mode."""
        conn = psycopg.connect(
            self._url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            options=f"-c statement_timeout={self._timeout_ms}"
            + ("" if self._durable else " -c synchronous_commit=off"),
            # A server that vanishes without a word is noticed in seconds, not hours.
            keepalives=1,
            keepalives_idle=5,
            keepalives_interval=2,
            keepalives_count=2,
        )
        try:
            for name, sql in self._statements.items():
                conn.execute(b"PREPARE " + name + b" AS " + sql)
            for channel in self._listen:
                conn.execute(f"LISTEN {channel}")
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
                if self._out is None and not self._listen:
                    wake = self._wake = trio.Event()
                    await wake.wait()
                elif self._out is None:
                    # Notifications come while nothing is asked; a question ends the wait.
                    with trio.CancelScope() as self._idle:
                        await trio.lowlevel.wait_readable(pgconn.socket)
                        pgconn.consume_input()
                    self._idle = None
                    self._notified(pgconn)
                elif self._unsent:
                    await trio.lowlevel.wait_writable(pgconn.socket)
                    self._unsent = pgconn.flush() != 0
                else:
                    await trio.lowlevel.wait_readable(pgconn.socket)
                    pgconn.consume_input()
                    self._notified(pgconn)
                    self._read(pgconn)
            except (psycopg.Error, OSError) as exc:
                self._idle = None
                self._lost(exc)

    def _notified(self, pgconn: pq.abc.PGconn) -> None:
        """Hand on the notifications read so far."""
        while (note := pgconn.notifies()) is not None:
            heard = self._listen.get(note.relname.decode())
            if heard is not None:
                heard(note.extra.decode(errors="replace"))

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
            answered(outcome.Value(first))
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
        logger.debug("%s lost %s: %s", self.what, self.where, _reason(exc))
        self._close()
        self._fail_all(DatabaseUnreachable(f"{self.where}: {_reason(exc)}"))

    def _fail_all(self, error: DatabaseUnreachable) -> None:
        waiting = [] if self._out is None else [self._out]
        waiting.extend(answered for _, _, answered in self._queue)
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


def columns(result: pq.abc.PGresult) -> dict[str, str | None]:
    """The first row of `result`, by column name, in text format."""
    row: dict[str, str | None] = {}
    for column in range(result.nfields):
        raw = result.get_value(0, column)
        row[(result.fname(column) or b"").decode()] = None if raw is None else raw.decode()
    return row


def _reason(exc: BaseException) -> str:
    return redact(" ".join(str(exc).split()) or type(exc).__name__)
