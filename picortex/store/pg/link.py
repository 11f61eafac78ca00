"""The store's connection to PostgreSQL, kept alive: a lost one is made again, with backoff.

When the server goes away (a restart, a network cut, a terminated backend) every statement
fails with `DatabaseUnreachable` until a new connection is made. A new one is tried at the
next statement outside a transaction (never inside one: the statements before the loss went
with the old connection), at once after a loss and then no more often than the backoff
allows, so a store that keeps asking costs no connection storm. Messages name the database
by `describe` and redact psycopg's text: never the URL or its password.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import psycopg

from picortex.core.redact import redact
from picortex.errors import DatabaseUnreachable, StoreError
from picortex.store.pg.listener import BACKOFF_SECONDS

CONNECT_TIMEOUT_SECONDS: Final = 10

Row = tuple[object, ...]


def connect(url: str) -> psycopg.Connection[Row]:
    """A new autocommit connection to `url` (raises psycopg.Error).

    TCP keepalives find a server that vanished without a word (a host gone, a network cut)
    within half a minute, instead of leaving a statement waiting on a dead socket.
    """
    return psycopg.connect(
        url,
        autocommit=True,
        connect_timeout=CONNECT_TIMEOUT_SECONDS,
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=5,
        keepalives_count=3,
    )


def reason(exc: psycopg.Error) -> str:
    """psycopg's message in one line, any configured secret redacted."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return redact(text)


class Link:
    """One connection that is made again when lost. Not thread-safe: the caller locks."""

    def __init__(
        self,
        url: str,
        where: str,
        conn: psycopg.Connection[Row],
        *,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        self._url = url
        self._where = where  # what messages name (never the URL)
        self.conn = conn
        self.closed = False
        self._on_reconnect = on_reconnect
        # Wall-clock time the connection was lost and not yet made again; why.
        self.unreachable_since: float | None = None
        self.reason = ""
        self.reconnects = 0  # connections made again after a loss
        self._attempts = 0  # failed attempts since the loss
        self._retry_at = 0.0  # monotonic: no attempt before this

    def live(self, *, in_transaction: bool = False) -> psycopg.Connection[Row]:
        """The connection, made again if it was lost (outside a transaction only).

        Raises:
            DatabaseUnreachable: it is lost and cannot be made again (yet).
            StoreError: the store was closed.
        """
        conn = self.conn
        if not conn.closed:
            return conn
        if self.closed:
            raise StoreError(f"{self._where} is closed")
        if self.unreachable_since is None:
            self._lost("the connection was closed")
        now = time.monotonic()
        if in_transaction or now < self._retry_at:
            raise self._unreachable()
        try:
            conn = connect(self._url)
        except psycopg.Error as exc:
            self._attempts += 1
            delay = BACKOFF_SECONDS[min(self._attempts, len(BACKOFF_SECONDS)) - 1]
            self._retry_at = now + delay
            self.reason = reason(exc)
            raise self._unreachable() from None
        self.conn = conn
        self.unreachable_since = None
        self._attempts = 0
        self.reconnects += 1
        if self._on_reconnect is not None:
            self._on_reconnect()
        return conn

    def error(self, exc: psycopg.Error, *, in_doubt: int | None = None) -> StoreError:
        """The error to raise for `exc`: DatabaseUnreachable when it cost the connection."""
        if self.conn.closed and not self.closed:
            if self.unreachable_since is None:
                self._lost(reason(exc))
            return self._unreachable(in_doubt)
        return StoreError(f"{self._where}: database error ({reason(exc)})")

    def _lost(self, why: str) -> None:
        self.unreachable_since = time.time()
        self.reason = why
        self._retry_at = 0.0  # the first attempt at once: a terminated backend is no outage

    def _unreachable(self, in_doubt: int | None = None) -> DatabaseUnreachable:
        return DatabaseUnreachable(
            f"{self._where} cannot be reached ({self.reason})", in_doubt=in_doubt
        )

    def close(self) -> None:
        """Close the connection for good (no reconnecting after this)."""
        self.closed = True
        self.conn.close()
