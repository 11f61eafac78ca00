"""PostgreSQL unreachable (SPEC 17): the store keeps what it was given, commits it exactly
once when the database is back, tells waiting callers at once, says so once a minute, and
never prints the database URL or its password.

These tests stop and start the real test server (tests/pg.py), so they restore it whatever
happens; waits on the server are bounded by a generous timeout, never asserted as speeds.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio
import trio.testing

from picortex.cli import main
from picortex.cli.status import format_status
from picortex.errors import DatabaseUnreachable, StoreError
from picortex.store import StoreActor
from picortex.store import actor as actor_mod
from picortex.store import outage as outage_mod
from picortex.store.backends import connect_postgres
from picortex.store.chathome import ChatHome
from picortex.store.outage import OutageWatch
from picortex.store.pg import link as pg_link
from picortex.store.pg.database import BAD_URL, PgDatabase
from tests.helpers import RecordingSink
from tests.pg import Server

NOW = 2_000_000_000.0
PATIENCE_SECONDS = 30.0
PASSWORD = "hunter2-but-much-longer"


@pytest.fixture
def server(pg_server: Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[Server]:
    """The test server, started again after the test whatever it did; reconnects quick."""
    monkeypatch.setattr(pg_link, "BACKOFF_SECONDS", (0.05,))
    try:
        yield pg_server
    finally:
        with contextlib.suppress(RuntimeError):  # already up
            pg_server.up()


def _with_password(url: str) -> str:
    """The same database named with a password (the test server trusts its socket)."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{PASSWORD}@")


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(PATIENCE_SECONDS):
        while not check():
            await trio.sleep(0.02)


async def _until_flushed(store: StoreActor) -> None:
    """Wait until the database is back and everything queued is committed."""
    with trio.fail_after(PATIENCE_SECONDS):
        while True:
            try:
                await store.flush()
            except DatabaseUnreachable:
                await trio.sleep(0.05)
            else:
                return


async def test_writes_queued_while_the_database_is_down_are_committed_once_when_back(
    server: Server, pg_url: str
) -> None:
    store = StoreActor(connect_postgres(pg_url))
    rows: list[object] = []
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            store.set_tier(1, "user")
            store.mark_handled(100)
            await store.flush()
            assert store.database_state() == "up"
            server.down()
            with pytest.raises(DatabaseUnreachable):  # a caller that waits is told at once
                await store.flush()
            state = store.database_state()
            assert state.startswith("unreachable since 20")
            assert f"database:          {state}" in format_status({"database": state})
            store.set_tier(2, "trusted")
            store.add_spend("g1", "2026-12", 0.25, NOW, user_id=7)
            store.add_spend("g1", "2026-12", 0.5, NOW)
            store.mark_handled(101)
            store.add_memory_message(5, 10, 1, 7, "bob", "kept through the outage", NOW)
            store.add_invocation_error(
                "g1", "p", "9", "generate", "boom", None, NOW, on_committed=rows.append
            )
            with pytest.raises(DatabaseUnreachable):
                await store.flush()
            assert store.get_tier(2) == "trusted"  # in force here meanwhile
            # The worker keeps them once it has tried them (a waiter may be told first).
            await _until(lambda: store.kept >= 6)
            server.up()
            await _until_flushed(store)
            await _until(lambda: store.database_state() == "up")
            nursery.cancel_scope.cancel()
    finally:
        store.close()
    with connect_postgres(pg_url) as db:
        assert db.trust_list() == [(1, "user"), (2, "trusted")]
        assert db._one("SELECT count(*) FROM budget_ledger") == 2  # each spend once
        assert db.spend("g1", "2026-12") == pytest.approx(0.75)
        assert db.spend_by_user(0.0) == {7: pytest.approx(0.25)}
        assert [e.error_message for e in db.invocation_errors()] == ["boom"]
        assert rows == [db.invocation_errors()[0].id]
        assert db.is_seen(100) and db.is_seen(101)
        assert [h.message_id for h in db.search_memory("outage", 0.0, None)] == [5]


async def test_writes_kept_when_a_store_stops_during_an_outage_are_committed_at_its_next_start(
    server: Server, pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped while the database is away: the kept writes go to the home's file, not lost;
    the next store (the database back) commits them before anything else, once, and the
    file goes."""
    kept = tmp_path / "unsent-writes.jsonl"
    chats = tmp_path / "chats"
    deleted_home = ChatHome(chats, "77")
    deleted_home.write_prompt("Answer in haiku.", "the owner's voice")
    assert deleted_home.exists()
    with connect_postgres(pg_url) as db:
        db.add_memory_message(6, 77, 1, 7, "bob", "said in a channel deleted later", NOW)
        db.add_memory_message(8, 10, 1, 7, "bob", "before an edit", NOW)
    store = StoreActor(connect_postgres(pg_url))
    store.unsent_path = kept
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            server.down()
            store.set_tier(2, "trusted")
            store.mark_handled(101, NOW, 9)
            store.add_memory_message(5, 10, 1, 7, "bob", "kept through a restart", NOW)
            store.add_invocation_error("g1", "p", "9", "generate", "boom", None, NOW)
            store.save_gateway_session((1, 4), "sess", "wss://resume", 42, NOW)
            # Writes of several steps are kept too, and a deleted channel's chat home.
            store.forget_channel(77, chat_home=chats)
            store.reindex_memory_message(8, 10, 1, "after an edit", [("calm", "edit")], NOW)
            await _until(lambda: store.kept >= 8)
            nursery.cancel_scope.cancel()
    finally:
        with caplog.at_level(logging.ERROR, logger="picortex.store.actor"):
            store.close()
    said = [r.getMessage() for r in caplog.records if "store stopped" in r.getMessage()]
    assert said == [
        "the store stopped with the database unreachable: 8 writes kept in"
        " unsent-writes.jsonl for the next start, 0 lost, 0 in doubt (their commit went"
        " unanswered)"
    ]
    assert kept.stat().st_mode & 0o777 == 0o600
    assert pg_url not in kept.read_text()

    server.up()
    again = StoreActor(connect_postgres(pg_url))
    try:
        assert deleted_home.exists()  # until the kept writes are made
        assert again.replay_unsent(kept) == 8
        assert again.seen(101)  # in force here at once, before its commit
        async with trio.open_nursery() as nursery:
            await nursery.start(again.run)
            await _until_flushed(again)
            nursery.cancel_scope.cancel()
    finally:
        again.close()
    assert not kept.exists()
    assert not deleted_home.exists()
    with connect_postgres(pg_url) as db:
        assert db.trust_list() == [(2, "trusted")]
        assert db.is_seen(101)
        assert [h.message_id for h in db.search_memory("restart", 0.0, None)] == [5]
        assert db.search_memory("deleted", 0.0, None) == []
        # The edited message, and the persona's observation of it recorded again.
        assert [h.message_id for h in db.search_memory("after edit", 0.0, None)] == [8, 8]
        assert db.search_memory("before", 0.0, None) == []
        assert [e.error_message for e in db.invocation_errors()] == ["boom"]
        assert db.gateway_session((1, 4)) == ("sess", "wss://resume", 42)


def test_a_kept_file_naming_anything_but_a_store_write_calls_nothing(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kept = tmp_path / "unsent-writes.jsonl"
    kept.write_text(
        '{"write": "close", "args": [], "kwargs": {}}\n'
        '{"write": "set_tier", "args": [3, "user"], "kwargs": {}}\n'
        '{"seen": ["12", 1.0, null]}\n'
        '{"write": "set_tier", "args": [4], "kwargs": {}}\n'
    )
    store = StoreActor(connect_postgres(pg_url))
    try:
        with caplog.at_level(logging.ERROR):
            assert store.replay_unsent(kept) == 1
        assert sum("does not make" in r.getMessage() for r in caplog.records) == 2
        assert sum("cannot be made" in r.getMessage() for r in caplog.records) == 1
    finally:
        store.close()
    assert not kept.exists()
    with connect_postgres(pg_url) as db:
        assert db.trust_list() == [(3, "user")]


async def test_an_old_id_counts_as_handled_while_only_the_unreachable_database_knows(
    server: Server, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with connect_postgres(pg_url) as db:
        db.mark_seen_many([(10, NOW, None), (20, NOW, None), (30, NOW, None)])
    monkeypatch.setattr(actor_mod, "SEEN_MEMORY", 1)  # memory holds 30 only
    store = StoreActor(connect_postgres(pg_url))
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            assert store.seen(15) is None
            assert not await store.was_handled(15)  # the database says: never handled
            server.down()
            assert await store.was_handled(15)  # unknown: never answered twice
            server.up()
            with trio.fail_after(PATIENCE_SECONDS):
                while await store.was_handled(15):
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    finally:
        store.close()


class _RolledBack(Exception):
    pass


@pytest.mark.parametrize("committed", [True, False])
def test_a_group_whose_commit_went_unanswered_is_looked_up_not_applied_twice(
    pg_url: str, committed: bool
) -> None:
    store = StoreActor(connect_postgres(pg_url))
    db = store.db
    assert isinstance(db, PgDatabase)
    real = db.commit_group
    told: list[tuple[bool, object]] = []

    @contextlib.contextmanager
    def unanswered() -> Iterator[None]:
        xid = None
        with contextlib.suppress(_RolledBack), real():
            yield
            row = db._conn.execute("SELECT pg_current_xact_id()").fetchone()
            assert row is not None
            xid = int(str(row[0]))
            if not committed:
                raise _RolledBack
        db._conn.close()  # the answer to COMMIT never came back
        raise DatabaseUnreachable("cut off during COMMIT", in_doubt=xid)

    ops = [
        actor_mod._Op(actor_mod._WRITE, fn=lambda d: d.add_spend("g1", "2026-12", 0.5, NOW)),
        actor_mod._Op(
            actor_mod._WRITE,
            fn=lambda d: d.add_invocation_error("g1", "p", "9", "generate", "x", None, NOW),
            finish=lambda ok, value: told.append((ok, value)),
        ),
    ]
    try:
        db.commit_group = unanswered  # type: ignore[method-assign]
        stop, kept = store._commit(ops)
        del db.commit_group
        assert (stop, kept, told) == (False, [], [])  # neither kept nor told: in doubt
        store._commit([])  # the database answers again: what became of it is looked up
        assert store._doubt is None
        assert db._one("SELECT count(*) FROM budget_ledger") == 1
        ids = [cast_int(row[0]) for row in db._all("SELECT id FROM invocation_errors")]
        assert told == [(True, ids[0])] and len(ids) == 1
    finally:
        store.close()


def cast_int(value: object) -> int:
    assert isinstance(value, int)
    return value


async def test_an_outage_is_told_once_a_minute_and_its_end_once(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    since: list[float | None] = [None]
    events = RecordingSink()
    watch = OutageWatch("PostgreSQL picortex on db", lambda: since[0], lambda: 3, events)
    with caplog.at_level(logging.INFO, logger=outage_mod.__name__):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch.run)
            await trio.sleep(10)
            assert events.events == []
            since[0] = NOW
            await trio.sleep(5 * outage_mod.COMPLAINT_SECONDS - 2)
            errors = events.of("error")
            assert len(errors) == 5
            assert all(e["scope"] == "database" for e in errors)
            assert "3 writes kept" in errors[0]["message"]
            since[0] = None
            await trio.sleep(10)
            nursery.cancel_scope.cancel()
    assert len(events.of("error")) == 5
    assert [e["state"] for e in events.of("database")] == ["up"]
    levels = [r.levelno for r in caplog.records]
    assert levels == [logging.ERROR] * 5 + [logging.WARNING]


async def test_a_store_cut_off_logs_one_error_a_minute_not_one_per_statement_nor_its_url(
    server: Server,
    pg_url: str,
    autojump_clock: trio.testing.MockClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = _with_password(pg_url)
    store = StoreActor(connect_postgres(url))
    store.events = events = RecordingSink()
    try:
        with caplog.at_level(logging.INFO):
            async with trio.open_nursery() as nursery:
                await nursery.start(store.run)
                await store.flush()
                server.down()
                start = trio.current_time()
                # The clock stands still while the store's thread answers (in real time).
                autojump_clock.autojump_threshold = 0.5
                for n in range(20):  # statements, reads and writes, all failing meanwhile
                    store.set_tier(n, "user")
                    with pytest.raises(DatabaseUnreachable):
                        await store.flush()
                    with pytest.raises(DatabaseUnreachable):
                        await store.search_memory("anything", 0.0, None)
                assert trio.current_time() - start < 10
                autojump_clock.autojump_threshold = 0
                four_and_a_half_minutes = start + 4.5 * outage_mod.COMPLAINT_SECONDS
                await trio.sleep(four_and_a_half_minutes - trio.current_time())
                complaints = len(events.of("error"))
                autojump_clock.autojump_threshold = 0.5  # the reconnection takes real time
                server.up()
                await _until_flushed(store)
                autojump_clock.autojump_threshold = 0
                await trio.sleep(2 * outage_mod.WATCH_SECONDS)  # the watch looks again
                nursery.cancel_scope.cancel()
    finally:
        store.close()
    assert complaints == 5  # at 0, 1, 2, 3 and 4 minutes
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == complaints
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "can be reached again" in warnings[0]
    assert len(events.of("database")) == 1
    assert store.trust_list() == [(n, "user") for n in range(20)]
    said = [r.getMessage() for r in caplog.records] + [str(e) for e in events.events]
    assert all(PASSWORD not in line and url not in line for line in said)


def test_a_database_down_at_start_is_one_sentence_without_its_url(
    server: Server,
    pg_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = _with_password(pg_url)
    monkeypatch.setenv("PICORTEX_HOME", str(tmp_path))
    monkeypatch.setenv("PICORTEX_DATABASE_URL", url)
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "x" * 24 + ".abcdef." + "y" * 27)
    server.down()
    assert main(["run"]) == 2
    assert main(["config", "get"]) == 2
    out, err = capsys.readouterr()
    lines = err.splitlines()
    assert len(lines) == 2 and all("cannot be reached" in line for line in lines)
    assert PASSWORD not in out + err and url not in out + err


def test_a_group_cut_off_midway_is_kept_whole_and_committed_once(pg_url: str) -> None:
    store = StoreActor(connect_postgres(pg_url))
    db = store.db
    assert isinstance(db, PgDatabase)
    cut: list[bool] = []

    def cut_off_once(d: object) -> None:
        if not cut:
            cut.append(True)
            db._conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    ops = [
        actor_mod._Op(actor_mod._WRITE, fn=lambda d: d.add_spend("g1", "2026-12", 0.5, NOW)),
        actor_mod._Op(actor_mod._WRITE, fn=cut_off_once),
        # Never sent on a new connection while its group's transaction is gone.
        actor_mod._Op(actor_mod._WRITE, fn=lambda d: d.add_spend("g1", "2026-12", 0.25, NOW)),
    ]
    try:
        stop, kept = store._commit(ops)
        assert not stop and kept == ops and store._doubt is None
        assert store._commit(kept) == (False, [])  # reconnected: the group, once
        assert db._one("SELECT count(*) FROM budget_ledger") == 2
        assert db.spend("g1", "2026-12") == pytest.approx(0.75)
    finally:
        store.close()


def test_a_connection_made_again_reloads_everything(pg_url: str) -> None:
    with connect_postgres(pg_url) as db:
        before = db.data_version()
        with pytest.raises(DatabaseUnreachable):
            db._run("SELECT pg_terminate_backend(pg_backend_pid())")
        db._version_at = -1e9  # due for a look at the counter
        after = db.data_version()  # made again: what changed meanwhile is unknown
        assert after != before and db.unreachable_since is None


@pytest.mark.virtual_time
async def test_the_bot_keeps_answering_while_postgresql_is_down_and_catches_up_after(
    server: Server, pg_url: str, tmp_path: Path
) -> None:
    from tests.e2e.harness import running_bot, wall_time

    url = _with_password(pg_url)
    async with running_bot(tmp_path, env={"PICORTEX_DATABASE_URL": url}) as run:
        w = run.world
        run.say(w.general_id, w.alice_id, f"{run.mention()} hello there?")
        await run.sim.wait_bot_messages(1, w.general_id)
        server.down()
        with wall_time():
            await _until(lambda: run.bot.snapshot()["database"] != "up")
        assert run.bot.snapshot()["database"].startswith("unreachable since ")
        down = run.say(w.general_id, w.alice_id, f"{run.mention()} still there?")
        replies = await run.sim.wait_bot_messages(2, w.general_id)
        assert "still there" in replies[1]["content"]
        [complaint] = await run.wait_event("error", scope="database")
        server.up()
        await run.wait_event("database", state="up")
        await run.idle()
        home = run.home
    text = (home / "actions.jsonl").read_text()
    assert PASSWORD not in text and url not in text
    assert "cannot be reached" in complaint["message"]
    with connect_postgres(pg_url) as db:
        assert db.is_seen(int(down["id"]))  # its handled mark, kept, then committed


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://picortex:pass word-0042@db.example/picortex",
        "host=db.example password=my secret-word dbname=picortex",
    ],
)
def test_a_malformed_url_is_refused_without_quoting_any_of_it(url: str) -> None:
    with pytest.raises(StoreError) as refused:
        connect_postgres(url)
    assert str(refused.value) == BAD_URL
    assert "secret-word" not in str(refused.value) and "pass word" not in str(refused.value)
