"""The end-to-end harness's clock: it never jumps over work it cannot see, and its waits
end on the event that proves the bot has done what it was going to do."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio

from picortex.store.store import Store
from tests.e2e.harness import running_bot, settle

pytestmark = pytest.mark.virtual_time


async def test_the_clock_holds_while_a_worker_thread_works() -> None:
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep, 30)  # a deadline the clock would jump to when idle
        # Longer than the autojump threshold, in wall time, with every task waiting.
        await trio.to_thread.run_sync(time.sleep, 0.1)
        assert trio.current_time() == start
        nursery.cancel_scope.cancel()


async def test_the_clock_jumps_once_the_thread_is_done() -> None:
    start = trio.current_time()
    await trio.to_thread.run_sync(time.sleep, 0.05)
    await trio.sleep(30)
    assert trio.current_time() == start + 30


async def test_settle_waits_for_a_thread_started_without_awaiting_it() -> None:
    finished: list[bool] = []

    def work() -> None:
        time.sleep(0.1)
        finished.append(True)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.to_thread.run_sync, work)
        await trio.sleep(0)  # the thread is under way
        await settle()
        assert finished == [True]


async def test_idle_means_every_queued_store_write_is_committed(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "trusted")  # queued, not awaited
        await run.idle()
        # Another connection sees it: committed, not just queued.
        with Store.open(run.bot.store.path) as db:
            assert (w.bob_id, "trusted") in db.trust_list()


async def test_the_clock_holds_while_the_store_thread_commits_a_queued_write(
    tmp_path: Path,
) -> None:
    async with running_bot(tmp_path) as run:
        await run.idle()
        commits = run.bot.store.commits
        start = trio.current_time()
        run.bot.store.set_tier(run.world.bob_id, "trusted")  # queued, not awaited
        await run.wait_until(lambda: run.bot.store.commits > commits)
        # The bot's own deadlines (a heartbeat, a lag probe) were not jumped to meanwhile.
        assert trio.current_time() == start


async def test_wait_until_sees_a_change_made_by_a_later_deadline(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        flag: list[bool] = []

        async def later() -> None:
            await trio.sleep(10)  # no log line, no simulator change
            flag.append(True)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(later)
            start = trio.current_time()
            await run.wait_until(lambda: bool(flag))
            assert trio.current_time() - start == pytest.approx(10, abs=1)
