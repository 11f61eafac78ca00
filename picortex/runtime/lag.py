"""Event-loop lag: how late a short sleep wakes up; the worst seen goes to `picortex status`.

A heartbeat is sent by a task like any other: if this probe wakes late, so would it. The
probe wakes often only while the process works: an idle bot (most of a small server's day,
and most processes of a cluster) would otherwise spend a few percent of a core on the probe
alone. A stall longer than the idle period is caught either way; one shorter than it, in the
first moment of work after a quiet spell, may not be.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import trio

# Probe period while the process works: short enough to catch a stall that would delay a
# heartbeat.
LAG_PROBE_SECONDS: Final = 0.01
# ... and while it is idle: ten wake-ups a second instead of a hundred.
IDLE_PROBE_SECONDS: Final = 0.1
# Working: the process used more than this share of a core since the probe last woke.
BUSY_CPU_SHARE: Final = 0.05


class LoopLag:
    """Keeps the worst lag seen, overall and since the last `take()`.

    `probe_seconds`: the probe period while working (tests on virtual time, where lag is
    always zero, lengthen it so the clock is free to jump); idle, it is never shorter than
    that. `cpu`: the process's CPU seconds so far (tests pass their own).
    """

    def __init__(
        self,
        probe_seconds: float = LAG_PROBE_SECONDS,
        *,
        idle_probe_seconds: float = IDLE_PROBE_SECONDS,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self.probe_seconds = probe_seconds
        self.idle_probe_seconds = idle_probe_seconds
        self._cpu = cpu
        self.worst = 0.0
        self._recent = 0.0
        self.wakeups = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Probe until cancelled."""
        task_status.started()
        busy = True  # starting up is work
        while True:
            probe = self.probe_seconds if busy else max(self.probe_seconds, self.idle_probe_seconds)
            before, cpu_before = trio.current_time(), self._cpu()
            await trio.sleep(probe)
            now = trio.current_time()
            self.wakeups += 1
            lag = now - before - probe
            if lag > self._recent:
                self._recent = lag
                if lag > self.worst:
                    self.worst = lag
            busy = self._cpu() - cpu_before > BUSY_CPU_SHARE * (now - before)

    def take(self) -> dict[str, float]:
        """The worst lag overall and since the last call, in milliseconds (resets the latter)."""
        recent, self._recent = self._recent, 0.0
        return {"worst": round(self.worst * 1000, 1), "since_last_status": round(recent * 1000, 1)}
