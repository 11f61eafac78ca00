"""The event-loop lag probe: how late a short sleep wakes, often only while there is work."""

from __future__ import annotations

import time

import trio

from picortex.runtime.lag import IDLE_PROBE_SECONDS, LAG_PROBE_SECONDS, LoopLag


async def _wakeups_over(lag: LoopLag, seconds: float) -> int:
    async with trio.open_nursery() as nursery:
        await nursery.start(lag.run)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()
    return lag.wakeups


async def test_an_idle_process_is_probed_ten_times_a_second(autojump_clock: object) -> None:
    lag = LoopLag(cpu=lambda: 0.0)  # no CPU used: idle
    wakeups = await _wakeups_over(lag, 10.0)
    assert 10.0 / IDLE_PROBE_SECONDS - 2 <= wakeups <= 10.0 / IDLE_PROBE_SECONDS + 2


async def test_a_working_process_is_probed_a_hundred_times_a_second(
    autojump_clock: object,
) -> None:
    # Half a core used all along: working.
    lag = LoopLag(cpu=lambda: trio.current_time() / 2)
    wakeups = await _wakeups_over(lag, 10.0)
    assert 10.0 / LAG_PROBE_SECONDS - 2 <= wakeups <= 10.0 / LAG_PROBE_SECONDS + 2


async def test_work_after_a_quiet_spell_is_probed_often_again(autojump_clock: object) -> None:
    working = False
    used = 0.0
    last = 0.0

    def cpu() -> float:
        nonlocal used, last
        now = trio.current_time()
        if working:
            used += now - last
        last = now
        return used

    lag = LoopLag(cpu=cpu)
    async with trio.open_nursery() as nursery:
        await nursery.start(lag.run)
        await trio.sleep(5.0)
        quiet = lag.wakeups
        working = True
        await trio.sleep(5.0)
        nursery.cancel_scope.cancel()
    assert quiet <= 5.0 / IDLE_PROBE_SECONDS + 2
    assert lag.wakeups - quiet >= 5.0 / LAG_PROBE_SECONDS - 12


async def test_a_task_that_blocks_the_loop_is_seen_as_lag() -> None:
    lag = LoopLag()
    async with trio.open_nursery() as nursery:
        await nursery.start(lag.run)
        time.sleep(0.05)  # blocks the loop, as a stuck task would, inside the first probe
        await trio.sleep(0.02)
        seen = lag.take()
        again = lag.take()
        nursery.cancel_scope.cancel()
    assert seen["worst"] >= 40.0
    assert seen["since_last_status"] >= 40.0
    assert again == {"worst": seen["worst"], "since_last_status": 0.0}
