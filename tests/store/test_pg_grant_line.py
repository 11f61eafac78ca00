"""The grant line (SPEC 17): global slots asked by the event loop on a non-blocking connection
come from the same table the worker thread grants from, a lost line says so (the slots are
then asked of the worker) and connects again, and a process's limit uses the line while it
is up and the worker otherwise."""

from __future__ import annotations

import psycopg

from picortex.discord.ratelimit import GLOBAL_BUDGET
from picortex.discord.shared_limits import Grant, SharedGlobalLimit
from picortex.store.pg.limits import GrantLine, PgLimits
from picortex.store.pg.reserve_line import ReserveLine
from tests.discord.test_shared_limits import DirectLimits
from tests.store.lines import serving, until


async def granted(line: GrantLine, wanted: int) -> Grant | None:
    got: list[Grant | None] = []
    assert line.grant(wanted, got.append)
    await until(lambda: bool(got))
    return got[0]


async def test_slots_on_the_line_come_from_the_table_the_worker_grants_from(pg_url: str) -> None:
    db = PgLimits.open(pg_url)
    try:
        async with serving(GrantLine(pg_url)) as line:
            first = await granted(line, 30)
            assert first is not None and first.granted == 30 and not first.paused
            # The worker's connection finds only what the line left.
            assert db.grant(GLOBAL_BUDGET).granted == GLOBAL_BUDGET - 30
            # ... and the line, nothing: the next slot frees a window after the first.
            none = await granted(line, 1)
            assert none is not None and none.granted == 0
            assert none.retry_at > none.now
    finally:
        db.close()


async def test_a_lost_line_answers_none_and_connects_again(pg_url: str) -> None:
    line = GrantLine(pg_url, backoff=(0.05,))
    async with serving(line):
        assert await granted(line, 1) is not None
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        assert await granted(line, 1) is None
        await until(lambda: line.ready)
        again = await granted(line, 1)
        assert again is not None and again.granted == 1
        assert line.reconnects == 1


async def test_a_process_takes_its_slots_on_the_line_and_on_the_worker_while_it_is_down(
    pg_url: str,
) -> None:
    db = PgLimits.open(pg_url)
    worker = DirectLimits(db)  # the worker thread's side, answering at once
    line = GrantLine(pg_url)
    limit = SharedGlobalLimit(worker, line)
    try:
        # Not connected yet: the worker is asked.
        assert await limit.take()
        assert [g.wanted for g in worker.grants] == [2]  # the slot, and one kept in hand
        async with serving(line):
            limit.expect(5)  # beyond the slot in hand: asked on the line, not of the worker
            await until(lambda: len(limit.book) == 5)
            assert [g.wanted for g in worker.grants] == [2]
        assert db.grant(GLOBAL_BUDGET).granted == GLOBAL_BUDGET - 6
    finally:
        db.close()


def test_slots_do_not_wait_for_the_servers_disk_and_reservations_do(pg_url: str) -> None:
    # Where the session's value comes from: "client" when the connection set it itself
    # (the test server turns it off for everyone, from its command line).
    sql = "SELECT setting, source FROM pg_settings WHERE name = 'synchronous_commit'"

    def setting(conn: psycopg.Connection[tuple[object, ...]]) -> object:
        try:
            return conn.execute(sql).fetchone()
        finally:
            conn.close()

    db = PgLimits.open(pg_url)
    try:
        assert db._conn.execute(sql).fetchone() == ("off", "client")
    finally:
        db.close()
    assert setting(GrantLine(pg_url)._connect()) == ("off", "client")
    reserved = setting(ReserveLine(pg_url, "node-a")._connect())
    assert isinstance(reserved, tuple) and reserved[1] != "client"


async def test_a_pause_is_heard_on_every_line_at_once_and_questions_still_go(
    pg_url: str,
) -> None:
    db = PgLimits.open(pg_url)
    heard: list[float] = []
    try:
        async with serving(GrantLine(pg_url)) as line:
            line.hear_pauses(heard.append)
            assert line.hears_pauses
            first = await granted(line, 1)  # a question between notifications
            assert first is not None and first.granted == 1
            db.pause(2.0)  # another process met a global 429
            await until(lambda: bool(heard))
            assert 1.5 < heard[0] <= 2.0
            paused = await granted(line, 1)
            assert paused is not None and paused.paused and paused.granted == 0
        assert not line.hears_pauses
    finally:
        db.close()


async def test_slots_kept_in_hand_are_given_back_when_another_process_finds_the_table_short(
    pg_url: str,
) -> None:
    shorts: list[str] = []
    async with serving(GrantLine(pg_url)) as keeper, serving(GrantLine(pg_url)) as other:
        keeper.hear_short(lambda: shorts.append("keeper"))
        other.hear_short(lambda: shorts.append("other"))
        # Short with nothing kept in hand: nobody is told (a notification committed before
        # a question is read before its answer).
        taken = await granted(other, GLOBAL_BUDGET)
        assert taken is not None and taken.granted == GLOBAL_BUDGET
        assert await granted(other, 1) is not None
        assert await granted(keeper, 1) is not None
        assert shorts == []
    db = PgLimits.open(pg_url)  # a fresh table's worth of time later: reset every slot
    try:
        db._conn.execute("UPDATE rest_global_slot SET free_at = 0, holder = NULL")
        async with serving(GrantLine(pg_url)) as keeper, serving(GrantLine(pg_url)) as other:
            keeper.hear_short(lambda: shorts.append("keeper"))
            kept: list[Grant | None] = []
            # Only while the table has the margin free beyond them.
            assert keeper.keep(3, GLOBAL_BUDGET, kept.append)
            await until(lambda: bool(kept))
            assert kept[0] is not None and kept[0].granted == 0
            assert keeper.keep(3, 12, kept.append)
            await until(lambda: len(kept) == 2)
            hand = kept[1]
            assert hand is not None and hand.granted == 3
            burst = await granted(other, GLOBAL_BUDGET)
            assert burst is not None and burst.granted == GLOBAL_BUDGET - 3
            await until(lambda: shorts == ["keeper"])  # told at once
            keeper.give_back(hand.now, 2)  # one of the three was used
            await granted(keeper, 0)  # its questions are answered in order
            again = await granted(other, GLOBAL_BUDGET)
            assert again is not None and again.granted == 2
            # The one used keeps its window.
            last = await granted(other, 1)
            assert last is not None and last.granted == 0
    finally:
        db.close()
