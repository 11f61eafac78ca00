"""Freezing the start-up heap: full collections stop walking what start-up left behind."""

from __future__ import annotations

import gc

import picortex.app  # noqa: F401  (what `picortex run` imports before it starts)
from picortex.runtime.heap import freeze_startup_heap


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
