"""Coherent settings on PostgreSQL (SPEC 17): a config change is heard by every process as it
commits; a missed notification or a reconnect reloads everything; a slow poll backs it up.

The listener is a real thread on a real server: tests wait for what it hands on with a
generous timeout and never assert how fast it was.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
import trio

from picortex.store import StoreActor
from picortex.store.backends import connect_postgres
from picortex.store.pg import database as pg_database
from picortex.store.pg import listener as pg_listener
from picortex.store.pg.database import PgDatabase

PATIENCE_SECONDS = 20.0


def _wait_for(check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + PATIENCE_SECONDS
    while not check():
        assert time.monotonic() < deadline, "the listener never handed the change on"
        time.sleep(0.01)


@pytest.fixture
def pair(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[PgDatabase, PgDatabase]]:
    """A writer and a listening reader whose backstop poll never runs on its own."""
    monkeypatch.setattr(pg_database, "BACKSTOP_SECONDS", 1e9)
    writer, reader = connect_postgres(pg_url), connect_postgres(pg_url)
    reader.data_version()  # the first read; from here on only the listener moves it
    reader.listen()
    assert reader._listener is not None
    _wait_for(lambda: reader._listener is not None and reader._listener.listening)
    yield writer, reader
    writer.close()
    reader.close()


def _counter(db: PgDatabase) -> int:
    return db.data_version()[0]  # type: ignore[index,no-any-return]


def _committed(db: PgDatabase) -> int:
    return db._one("SELECT version FROM config_changes")  # type: ignore[return-value]


def _reloads(db: PgDatabase) -> int:
    return db.data_version()[1]  # type: ignore[index,no-any-return]


def test_a_change_on_one_process_is_heard_on_another_as_it_commits(
    pair: tuple[PgDatabase, PgDatabase],
) -> None:
    writer, reader = pair
    before, reloads = _counter(reader), _reloads(reader)
    writer.set_tier(42, "trusted")
    after = _committed(writer)
    assert after > before
    _wait_for(lambda: _counter(reader) == after)
    writer.set_runtime_config("agent.max_tokens", "900")
    after = _committed(writer)
    _wait_for(lambda: _counter(reader) == after)
    assert _reloads(reader) == reloads  # each heard in turn: nothing missed


def test_a_missed_notification_reloads_everything(pair: tuple[PgDatabase, PgDatabase]) -> None:
    writer, reader = pair
    reloads = _reloads(reader)
    # The counter moves without a notification (as if one were lost), then a real change.
    writer._run("UPDATE config_changes SET version = version + 3")
    writer.set_tier(42, "admin")
    after = _committed(writer)
    _wait_for(lambda: _counter(reader) == after)
    assert _reloads(reader) == reloads + 1


def test_a_listener_cut_off_reconnects_and_reloads_everything(
    pair: tuple[PgDatabase, PgDatabase], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = pair
    listener = reader._listener
    assert listener is not None
    reloads = _reloads(reader)
    writer._run(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (pg_listener.APPLICATION_NAME,),
    )
    _wait_for(lambda: listener.reconnects == 1 and listener.listening)
    assert _reloads(reader) == reloads + 1
    writer.set_tier(7, "user")
    after = _committed(writer)
    _wait_for(lambda: _counter(reader) == after)


def test_a_deaf_listener_is_backed_up_by_the_slow_poll(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = connect_postgres(pg_url), connect_postgres(pg_url)
    now = [1000.0]
    reader._clock = lambda: now[0]
    reader.listen()
    listener = reader._listener
    assert listener is not None
    _wait_for(lambda: listener.listening)
    monkeypatch.setattr(listener, "_on_change", lambda version, reload_all: None)
    try:
        before = reader.data_version()
        writer.set_tier(42, "trusted")
        now[0] += pg_database.BACKSTOP_SECONDS - 0.1
        assert reader.data_version() == before  # listening: the poll waits longer
        now[0] += 0.1
        assert reader.data_version() != before
        listener.stop()  # no listener at all: the poll is quick again
        before = reader.data_version()
        writer.set_tier(42, "admin")
        now[0] += pg_database.COHERENCE_SECONDS
        assert reader.data_version() != before
    finally:
        writer.close()
        reader.close()


def test_an_unreachable_database_is_logged_once_a_minute_without_its_url(
    pg_server: object,
    tmp_path: object,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(pg_listener, "BACKOFF_SECONDS", (0.01,))
    url = f"postgresql://bot:hunter2-secret@/nowhere?host={tmp_path}"
    listener = pg_listener.ConfigListener(url, "PostgreSQL nowhere", lambda v, r: None)
    with caplog.at_level(logging.DEBUG, logger=pg_listener.__name__):
        listener.start()
        try:
            _wait_for(lambda: listener.failures >= 3)
        finally:
            listener.stop()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert "PostgreSQL nowhere cannot be reached" in errors[0].getMessage()
    assert all("hunter2" not in r.getMessage() for r in caplog.records)
    assert not listener.alive


async def test_a_trust_change_on_one_store_is_in_force_on_another(pg_url: str) -> None:
    here, there = StoreActor(connect_postgres(pg_url)), StoreActor(connect_postgres(pg_url))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(here.run)
            await nursery.start(there.run)
            here.set_tier(42, "trusted")
            here.set_runtime_config("agent.max_tokens", "900")
            await here.flush()
            with trio.fail_after(PATIENCE_SECONDS):
                while there.get_tier(42) != "trusted" or not there.runtime_config():
                    await trio.sleep(0.01)
            assert there.runtime_config() == {"agent.max_tokens": "900"}
            nursery.cancel_scope.cancel()
    finally:
        here.close()
        there.close()


async def test_a_change_heard_wakes_the_other_store_which_never_polls(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Neither the store's own look nor the backstop poll would ever run: only the listener
    # telling the store's worker brings the change in.
    monkeypatch.setattr(PgDatabase, "coherence_seconds", 1e9)
    monkeypatch.setattr(pg_database, "BACKSTOP_SECONDS", 1e9)
    here, there = StoreActor(connect_postgres(pg_url)), StoreActor(connect_postgres(pg_url))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(here.run)
            await nursery.start(there.run)
            listener = there.db._listener  # type: ignore[union-attr]
            with trio.fail_after(PATIENCE_SECONDS):
                while listener is None or not listener.listening:
                    await trio.sleep(0.01)
                    listener = there.db._listener  # type: ignore[union-attr]
            here.set_tier(42, "trusted")
            await here.flush()
            with trio.fail_after(PATIENCE_SECONDS):
                while there.get_tier(42) != "trusted":
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
    finally:
        here.close()
        there.close()


def test_the_notification_carries_the_new_counter(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as listening:
        listening.execute("LISTEN picortex_config")
        writer = connect_postgres(pg_url)
        try:
            before = _committed(writer)
            writer.set_runtime_config("agent.max_tokens", "900")
            after = _committed(writer)
        finally:
            writer.close()
        notes = list(listening.notifies(timeout=PATIENCE_SECONDS, stop_after=after - before))
    # One per statement the triggers saw (an upsert is two), each the counter's new value.
    assert [n.payload for n in notes] == [str(v) for v in range(before + 1, after + 1)]


def test_stop_wakes_a_listener_waiting_for_notifications(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A listener that would wait an hour for a notification: only a wake-up ends it soon.
    monkeypatch.setattr(pg_listener, "WAIT_SECONDS", 3600.0)
    listener = pg_listener.ConfigListener(pg_url, "PostgreSQL test", lambda v, r: None)
    listener.start()
    try:
        _wait_for(lambda: listener.listening)
    finally:
        stopper = threading.Thread(target=listener.stop, daemon=True)
        stopper.start()
        stopper.join(PATIENCE_SECONDS)
    assert not stopper.is_alive(), "stop() waited for the listener's timeout"
    assert not listener.alive
