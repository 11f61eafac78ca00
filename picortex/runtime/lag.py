"""Event-loop lag: how late a short sleep wakes up; the worst seen goes to `picortex status`.

A heartbeat is sent by a task like any other: if this probe wakes late, so would it.
"""

from __future__ import annotations

from typing import Final

import trio

# Probe period: short enough to catch a stall that would delay a heartbeat, long enough to
# cost nothing measurable (100 wake-ups a second).
LAG_PROBE_SECONDS: Final = 0.01


class LoopLag:
    """Keeps the worst lag seen, overall and since the last `take()`.

    `probe_seconds`: the probe period (tests on virtual time, where lag is always zero,
    lengthen it so the clock is free to jump).
    """

    def __init__(self, probe_seconds: float = LAG_PROBE_SECONDS) -> None:
        self.probe_seconds = probe_seconds
        self.worst = 0.0
        self._recent = 0.0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Probe until cancelled."""
        task_status.started()
        while True:
            probe = self.probe_seconds
            before = trio.current_time()
            await trio.sleep(probe)
            lag = trio.current_time() - before - probe
            if lag > self._recent:
                self._recent = lag
                if lag > self.worst:
                    self.worst = lag

    def take(self) -> dict[str, float]:
        """The worst lag overall and since the last call, in milliseconds (resets the latter)."""
        recent, self._recent = self._recent, 0.0
        return {"worst": round(self.worst * 1000, 1), "since_last_status": round(recent * 1000, 1)}
