"""Background tasks: built whole before the tree runs, started in the service's nursery."""

from __future__ import annotations

import trio
import trio.testing

from picortex.runtime.background import BackgroundTasks


async def test_a_task_runs_in_the_services_nursery_and_outlives_who_asked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    tasks = BackgroundTasks()
    done: list[float] = []

    async def later(seconds: float) -> None:
        await trio.sleep(seconds)
        done.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        await nursery.start(tasks.run)
        async with trio.open_nursery() as asker:
            asker.start_soon(trio.sleep, 0)
            tasks.spawn(later, 5.0)
        # The asker is gone; the task goes on.
        await trio.sleep(6.0)
        nursery.cancel_scope.cancel()
    assert done == [5.0]
    assert tasks.dropped == 0


async def test_a_task_asked_for_while_the_service_is_down_is_counted_not_run() -> None:
    tasks = BackgroundTasks()
    ran: list[int] = []

    async def task() -> None:
        ran.append(1)

    tasks.spawn(task)
    await trio.testing.wait_all_tasks_blocked()
    assert ran == []
    assert tasks.dropped == 1
