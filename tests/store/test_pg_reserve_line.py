"""The reservation line (SPEC 9, 17): reservations asked by the event loop on a non-blocking
connection answer as the worker thread's do, in the order asked, and a lost connection fails
what was asked (the caller then decides locally) and is made again."""

from __future__ import annotations

import uuid

import outcome
import psycopg
import pytest
import trio

from picortex.errors import DatabaseUnreachable
from picortex.store.pg.ceilings import Answer, Ask, Ceilings
from picortex.store.pg.reserve_line import ReserveLine
from tests.store.lines import serving, until


def ask(*, amount: int = 5_000, global_ceiling: int = 10**9, user: int | None = 42) -> Ask:
    return Ask(
        id=uuid.uuid4(),
        workspace="g1",
        user_id=user,
        amount=amount,
        period="2026-12-04",
        day="2026-12-04",
        ceiling=10**9,
        global_ceiling=global_ceiling,
        user_daily=0,
        user_rate=0,
        user_limited=False,
    )


async def answer(line: ReserveLine, asked: Ask) -> Answer:
    got: list[outcome.Outcome[Answer]] = []
    assert line.ask(asked, got.append)
    await until(lambda: got)
    return got[0].unwrap()


def held(url: str, reservation: uuid.UUID) -> int | None:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT amount_micros FROM budget_reservation WHERE id = %s AND settled_at IS NULL",
            (reservation,),
        ).fetchone()
    return None if row is None else int(row[0])


async def test_a_reservation_on_the_line_is_the_one_the_thread_would_make(pg_url: str) -> None:
    ceilings = Ceilings(pg_url, "node-a")
    try:
        async with serving(ReserveLine(pg_url, "node-a")) as line:
            first = ask()
            on_line = await answer(line, first)
            on_thread = await trio.to_thread.run_sync(ceilings.reserve, ask())
    finally:
        ceilings.close()
    assert on_line.refused is None
    assert held(pg_url, first.id) == first.amount
    # The thread's answer sees the line's reservation held, and is otherwise alike.
    assert on_thread.global_held == on_line.global_held + first.amount
    assert (on_thread.refused, on_thread.live_nodes, on_thread.warn) == (None, 0, False)
    assert on_line.user_held == 0 and on_thread.user_held == first.amount


async def test_questions_asked_at_once_are_answered_in_order(pg_url: str) -> None:
    # A ceiling of one micro-dollar: the first call is admitted (nothing spent or held yet),
    # every later one refused while it is held.
    asks = [ask(global_ceiling=1) for _ in range(4)]
    got: list[tuple[int, outcome.Outcome[Answer]]] = []
    async with serving(ReserveLine(pg_url, "node-a")) as line:
        for n, asked in enumerate(asks):
            assert line.ask(asked, lambda result, n=n: got.append((n, result)))
        await until(lambda: len(got) == len(asks))
    assert [n for n, _ in got] == [0, 1, 2, 3]
    assert [result.unwrap().refused for _, result in got] == [None, "global", "global", "global"]
    assert held(pg_url, asks[0].id) == asks[0].amount
    assert [held(pg_url, a.id) for a in asks[1:]] == [None, None, None]


async def test_a_lost_connection_fails_the_question_and_is_made_again(pg_url: str) -> None:
    line = ReserveLine(pg_url, "node-a", backoff=(0.05,))
    async with serving(line):
        await answer(line, ask())
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(DatabaseUnreachable):
            await answer(line, ask())
        await until(lambda: line.ready)
        again = ask()
        assert (await answer(line, again)).refused is None
        assert line.reconnects == 1
    assert held(pg_url, again.id) == again.amount


async def test_no_question_goes_on_a_line_that_is_down(pg_url: str) -> None:
    line = ReserveLine(pg_url, "node-a")
    assert not line.ask(ask(), lambda result: None)  # not connected yet
    got: list[outcome.Outcome[Answer]] = []
    async with serving(line):
        # Asked, and the line stops before its answer is read: it fails, not hangs.
        assert line.ask(ask(), got.append)
        assert line.ask(ask(), got.append)
    assert len(got) == 2
    assert not line.ready
    assert not line.ask(ask(), lambda result: None)
