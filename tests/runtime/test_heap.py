"""Freezing the start-up heap: full collections stop walking what start-up left behind,
and do not walk it while start-up makes it."""

from __future__ import annotations

import gc

import pytest

import picortex.app  # noqa: F401  (what `picortex run` imports before it starts)
from picortex.runtime.heap import collection_paused, freeze_startup_heap


def test_start_up_objects_leave_the_collectors_reach() -> None:
    # In this process, thawed again at the end: left frozen, the suite's garbage cycles
    # would never be collected.
    before = len(gc.get_objects())
    try:
        frozen = freeze_startup_heap()
        after = len(gc.get_objects())
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        collected = gc.collect()
    finally:
        gc.unfreeze()
    assert frozen >= before // 2  # the imports' objects are frozen ...
    assert after < before // 10  # ... so a full collection no longer walks them
    assert collected >= 1  # and garbage made after the freeze is still collected
    assert gc.get_freeze_count() == 0


def test_start_up_runs_without_collections_and_the_collector_comes_back() -> None:
    assert gc.isenabled()
    start = gc.get_count()[0]
    with collection_paused():
        assert not gc.isenabled()
        kept = [[n] for n in range(5 * gc.get_threshold()[0])]  # would trigger one
        assert gc.get_count()[0] >= start + len(kept)
    assert gc.isenabled()
    with pytest.raises(ValueError), collection_paused():
        raise ValueError("a start that fails")
    assert gc.isenabled()  # ... leaves the collector on all the same


def test_a_collector_already_off_stays_off() -> None:
    gc.disable()
    try:
        with collection_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
