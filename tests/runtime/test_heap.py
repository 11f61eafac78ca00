"""Freezing the start-up heap: full collections stop walking what start-up left behind."""

from __future__ import annotations

import subprocess
import sys

# Run in a child process: freezing this test process would keep the suite's garbage cycles.
_CHILD = """
import gc
import picortex.app  # what `picortex run` imports before it starts
from picortex.runtime.heap import freeze_startup_heap
before = len(gc.get_objects())
frozen = freeze_startup_heap()
after = len(gc.get_objects())
cycle = []
cycle.append(cycle)
del cycle
print(before, frozen, after, gc.collect())
"""


def test_start_up_objects_leave_the_collectors_reach() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    before, frozen, after, collected = (int(n) for n in out.split())
    assert frozen >= before // 2  # the imports' objects are frozen ...
    assert after < before // 10  # ... so a full collection no longer walks them
    assert collected >= 1  # and garbage made after the freeze is still collected
