"""The pruner: at start-up and hourly, old memory, resolved errors and seen ids go; unresolved
errors are capped and old spend is kept as daily totals."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from picortex.actors import pruner as pruning
from picortex.actors.pruner import DAY, PRUNE_EVERY_SECONDS, Pruner
from picortex.store import Store, StoreActor
from tests.helpers import RecordingSink

NOW = 2_000_000_000.0


def seed(store: Store, now: float) -> None:
    for mid, age_days in ((1, 15), (2, 13)):
        at = now - age_days * DAY
        store.add_memory_message(mid, 10, 1, 9, "alice", f"insomnia {mid}", at)
        store.add_observation("sleep", mid, 10, 1, "insomnia", f"insomnia {mid}", at)
    for age_days, resolved_days in ((200, 91), (200, 89), (200, None)):
        eid = store.add_invocation_error(
            "1", "", "5", "generate", "boom", None, now - age_days * DAY
        )
        if resolved_days is not None:
            store.resolve_invocation_error(eid, "fixed", now - resolved_days * DAY)
    store.mark_seen_many([(100, now - 8 * DAY, None), (101, now - 6 * DAY, 1)])


async def settled(check: Callable[[], bool]) -> None:
    """Wait for a round that runs on the store's thread; virtual time stands still meanwhile."""
    while not check():
        await trio.sleep(0)


async def test_prunes_at_start_and_then_hourly(tmp_path: Path, mock_clock: MockClock) -> None:
    clock = [NOW]
    sink = RecordingSink()
    with Store.open(tmp_path / "picortex.db") as db:
        seed(db, NOW)
    store = StoreActor.open(tmp_path / "picortex.db")
    try:
        pruner = Pruner(store, sink, wall_clock=lambda: clock[0])
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            await nursery.start(pruner.run)
            await settled(lambda: len(sink.of("prune")) == 1)
            (first,) = sink.of("prune")
            assert (first["memory"], first["invocation_errors"], first["seen_ids"]) == (2, 1, 1)
            assert {h.message_id for h in await store.search_memory("insomnia", 0.0, None)} == {2}
            assert len(store.invocation_errors()) == 2  # the unresolved one always stays
            seen = await store.read(lambda db: (db.is_seen(100), db.is_seen(101)))
            assert seen == (False, True)
            # Two days on, the next hourly rounds drop what has aged out since.
            clock[0] = NOW + 2 * DAY
            mock_clock.jump(PRUNE_EVERY_SECONDS)
            await settled(lambda: len(sink.of("prune")) == 2)
            assert pruner.rounds == 2
            second = sink.of("prune")[-1]
            assert (second["memory"], second["seen_ids"]) == (2, 1)
            while pruner.rounds < 4:  # the fourth round starts once the third is over
                mock_clock.jump(PRUNE_EVERY_SECONDS)
                await trio.sleep(0)
            assert len(sink.of("prune")) == 2  # nothing to drop: no event
            nursery.cancel_scope.cancel()
    finally:
        store.close()


async def test_unresolved_errors_are_capped_and_old_spend_kept_by_day(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pruning, "UNRESOLVED_ERRORS_MAX", 2)
    with Store.open(tmp_path / "picortex.db") as db:
        ids = [
            db.add_invocation_error("1", "", str(i), "generate", "boom", None, NOW - i)
            for i in range(4)
        ]
        old_day = (NOW - 100 * DAY) // DAY * DAY
        for hour in range(3):
            db.add_spend("1", "old", 0.25, old_day + hour * 3600, user_id=5)
        for hour in range(2):
            db.add_spend("1", "new", 0.25, NOW - 10 * DAY + hour * 3600, user_id=5)
    store = StoreActor.open(tmp_path / "picortex.db")
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.run)
            dropped = await pruning.prune_once(store, NOW)
            assert (dropped["invocation_errors"], dropped["ledger_rows"]) == (2, 2)
            assert [e.id for e in store.invocation_errors()] == ids[2:]
            assert (store.spend("1", "old"), store.spend("1", "new")) == (0.75, 0.5)
            assert store.daily_spend(0.0)[0][2] == 0.75
            assert (await pruning.prune_once(store, NOW))["ledger_rows"] == 0
            nursery.cancel_scope.cancel()
    finally:
        store.close()
