"""Hearing config changes at once: `LISTEN picortex_config` on a connection of its own.

Every change to trust, runtime config or chat config notifies with the config counter's new
value (in the writing transaction, so it is heard at commit). One thread per process listens
and hands each value on; a value that is not the last one plus one (a missed notification),
and every (re)connect, asks for everything to be reloaded. While the database cannot be
reached the thread reconnects with backoff and logs one error per minute at most; the
store's slow poll of the counter is the backstop meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable
from typing import Final

import psycopg

from picortex.core.redact import redact

logger = logging.getLogger(__name__)

CHANNEL: Final = "picortex_config"
APPLICATION_NAME: Final = "picortex config listener"  # how it shows in pg_stat_activity
# How long the thread waits for a notification before polling the connection anyway; `stop()`
# wakes it at once through a pipe, so this bounds nothing a caller waits for.
WAIT_SECONDS: Final = 5.0
CONNECT_TIMEOUT_SECONDS: Final = 10
# Waits between reconnection attempts: quick at first, then no more than one every 10 s.
BACKOFF_SECONDS: Final = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
# While the database stays unreachable, one error per this long (the rest are debug).
ERROR_EVERY_SECONDS: Final = 60.0
# Failed attempts in a row (over a second and a half) before a listener whose store tells
# outages speaks for itself: by then that store has met the outage too, if there is one.
QUIET_FAILURES: Final = 4


class ConfigListener:
    """A daemon thread that hears config changes and tells `on_change(version, reload_all)`.

    `reload_all` is True after a (re)connect or a gap: changes may have been missed.
    """

    def __init__(
        self,
        url: str,
        where: str,
        on_change: Callable[[int, bool], None],
        *,
        name: str = "",
        told: Callable[[], bool] | None = None,
    ) -> None:
        """`told()`: True while the store already tells the outage (this one stays quiet)."""
        self._url = url
        self._told = told
        self._where = where  # what messages name (never the URL)
        self._on_change = on_change
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None  # (read, write) ends: `stop()` writes
        self._conn: psycopg.Connection[tuple[object, ...]] | None = None
        self._name = name or "picortex-config-listener"
        self.listening = False  # connected and listening: the slow poll may be slower
        self.reconnects = 0  # connections made after the first (for tests and benches)
        self.failures = 0  # connection attempts that failed or were cut off
        self._connections = 0
        self._last_error_at = -ERROR_EVERY_SECONDS

    def start(self) -> None:
        """Start listening (idempotent)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stopping.clear()
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and close its connection."""
        self._stopping.set()
        wake = self._wake
        if wake is not None:
            with contextlib.suppress(OSError):
                os.write(wake[1], b"!")
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(CONNECT_TIMEOUT_SECONDS + 1)
            if wake is not None and not thread.is_alive():
                self._wake = None
                for end in wake:
                    os.close(end)
        self._thread = None
        self.listening = False

    @property
    def alive(self) -> bool:
        """Whether the thread runs (it may be between connections)."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        backoff = 0  # failures since the last connection that worked
        while not self._stopping.is_set():
            connections = self._connections
            try:
                self._listen()
            except psycopg.Error as exc:
                self.listening = False
                if self._stopping.is_set():
                    break
                self.failures += 1
                backoff = 1 if self._connections > connections else backoff + 1
                self._log_unreachable(exc, backoff)
                self._stopping.wait(BACKOFF_SECONDS[min(backoff, len(BACKOFF_SECONDS)) - 1])
            finally:
                if self._conn is not None:
                    with contextlib.suppress(psycopg.Error):
                        self._conn.close()
                    self._conn = None
        self.listening = False

    def _listen(self) -> None:
        """Connect, listen and hand on notifications until stopped (raises when cut off)."""
        conn = psycopg.connect(
            self._url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECONDS,
            application_name=APPLICATION_NAME,
        )
        self._conn = conn
        conn.execute(f"LISTEN {CHANNEL}")
        # Read after LISTEN: a change committed in between is both counted and heard, and
        # what was heard at or below this value is simply old news.
        row = conn.execute("SELECT version FROM config_changes").fetchone()
        last = int(row[0]) if row else 0
        if self._connections:
            self.reconnects += 1
            logger.info("listening for config changes on %s again", self._where)
        self._connections += 1
        self._on_change(last, True)  # anything may have changed while nobody listened
        self.listening = True
        wake = self._wake
        while not self._stopping.is_set():
            waiting = [conn.fileno()] if wake is None else [conn.fileno(), wake[0]]
            ready, _, _ = select.select(waiting, [], [], WAIT_SECONDS)
            if wake is not None and wake[0] in ready:
                break  # stop() asked
            for note in conn.notifies(timeout=0):
                if note.channel != CHANNEL:
                    continue
                try:
                    version = int(note.payload)
                except ValueError:
                    self._on_change(last, True)
                    continue
                if version <= last:
                    continue  # counted before this connection read the counter
                self._on_change(version, version != last + 1)
                last = version
                if self._stopping.is_set():
                    break

    def _log_unreachable(self, exc: psycopg.Error, failures: int) -> None:
        now = time.monotonic()
        reason = redact(" ".join(str(exc).split()) or type(exc).__name__)
        # A store that tells outages meets one within its slow poll: the listener, usually
        # first to notice, leaves the telling to it unless the failures go on regardless.
        told = self._told is not None and (failures < QUIET_FAILURES or self._told())
        if not told and now - self._last_error_at >= ERROR_EVERY_SECONDS:
            self._last_error_at = now
            logger.error(
                "%s cannot be reached to hear config changes (%s); retrying, "
                "other processes' changes are polled meanwhile",
                self._where,
                reason,
            )
        else:
            logger.debug("still cannot listen on %s: %s", self._where, reason)
