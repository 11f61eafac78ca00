"""Pruning in a cluster (SPEC 17): processes share the tables, so one prunes at a time and
another trying meanwhile skips its turn; the ledger is rolled up once, its totals kept."""

from __future__ import annotations

import threading

from picortex.actors.pruner import prune_once
from picortex.store import StoreActor
from picortex.store.pg.database import PgDatabase

DAY = 86_400.0
NOW = 2_000_000_000.0
OLD = NOW - 200 * DAY  # older than anything pruning keeps


def _fill(db: PgDatabase) -> None:
    """Old rows of every kind pruning drops, and two old days of ledger detail."""
    with db.transaction():
        for hour in range(3):
            db.add_spend("1", "2019-09", 0.25, OLD + hour * 3600, user_id=5)
            db.add_spend("1", "2019-09", 0.5, OLD + DAY + hour * 3600, user_id=5)
        db.add_memory_message(1, 10, 1, 9, "alice", "an old line", OLD)
        db.mark_seen_many([(2, OLD, 1), (3, OLD, None)])
        error = db.add_invocation_error("1", "p", "", "post", "x", None, OLD)
        db.resolve_invocation_error(error, "fixed", OLD)


def _prune_all(db: PgDatabase) -> list[int]:
    """Every pruning query, as one round runs them."""
    return [
        db.prune_memory(NOW - 14 * DAY),
        db.prune_resolved_errors(NOW - 90 * DAY),
        db.cap_unresolved_errors(10_000),
        db.prune_seen(NOW - 7 * DAY),
        db.roll_up_ledger(NOW - 90 * DAY),
    ]


def test_two_processes_pruning_at_once_prune_once(pg_url: str) -> None:
    first, second = PgDatabase.open(pg_url), PgDatabase.open(pg_url)
    try:
        _fill(first)
        before = first.daily_spend(0.0)
        # The second would wait on a row the first holds (and fail here) rather than skip.
        second._run("SET lock_timeout = '5s'")
        results: dict[str, object] = {}

        def prune_second() -> None:
            try:
                results["second"] = _prune_all(second)
            except Exception as exc:
                results["second"] = exc

        with first.transaction():  # the first's round is under way until this commits
            results["first"] = _prune_all(first)
            other = threading.Thread(target=prune_second)
            other.start()
            other.join()
        # Another process pruning at this moment: the second skipped every query.
        assert results["second"] == [0, 0, 0, 0, 0]
        assert results["first"] == [1, 1, 0, 2, 4]  # 6 ledger rows became 2
        assert first.daily_spend(0.0) == before  # rolled up once: the same totals
        # Once the first has committed, a later round finds nothing left to do.
        assert _prune_all(second) == [0, 0, 0, 0, 0]
        assert first.daily_spend(0.0) == before
    finally:
        first.close()
        second.close()


async def test_a_round_of_the_running_bot_is_skipped_while_another_process_prunes(
    pg_url: str,
) -> None:
    other = PgDatabase.open(pg_url)
    db = PgDatabase.open(pg_url)
    db._run("SET lock_timeout = '5s'")  # fail rather than wait, were it to wait
    actor = StoreActor(db)
    try:
        _fill(other)
        with other.transaction():
            assert _prune_all(other)[0] == 1
            assert await prune_once(actor, NOW) == {
                "memory": 0,
                "invocation_errors": 0,
                "seen_ids": 0,
                "ledger_rows": 0,
            }
    finally:
        actor.close()
        other.close()
