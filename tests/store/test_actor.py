"""The store actor: group commit, awaited durability, coherence with other processes,
handled ids exact across restarts, busy waits off the event loop, SIGKILL safety."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import apsw
import pytest
import trio

from picortex.errors import StoreError
from picortex.store import Store, StoreActor
from picortex.store import actor as actor_mod

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def actor(tmp_path: Path) -> AsyncIterator[StoreActor]:
    a = StoreActor(Store.open(tmp_path / "picortex.db"))
    async with trio.open_nursery() as nursery:
        await nursery.start(a.run)
        yield a
        nursery.cancel_scope.cancel()
    a.close()


async def test_a_burst_of_writes_is_committed_in_a_few_groups(
    actor: StoreActor, tmp_path: Path
) -> None:
    before = actor.commits
    for i in range(1, 2001):
        actor.mark_handled(i, 1.0)
    await actor.flush()
    # 2,000 writes, at most GROUP_ROWS a group: a handful of transactions, not 2,000.
    assert actor.commits - before <= 20
    other = Store.open(tmp_path / "picortex.db")
    try:
        assert all(other.is_seen(i) for i in (1, 1000, 2000))
        assert not other.is_seen(2001)
    finally:
        other.close()


async def test_a_flushed_trust_change_is_durable_and_read_from_memory(
    actor: StoreActor, tmp_path: Path
) -> None:
    actor.set_tier(7, "admin")
    assert actor.get_tier(7) == "admin"  # at once, before the commit
    await actor.flush()
    other = Store.open(tmp_path / "picortex.db")
    try:
        assert other.get_tier(7) == "admin"
    finally:
        other.close()
    assert actor.remove_trust(7) is True
    assert actor.remove_trust(7) is False
    assert actor.get_tier(7) is None


async def test_another_processs_changes_reach_memory_without_losing_our_own(
    actor: StoreActor, tmp_path: Path
) -> None:
    other = Store.open(tmp_path / "picortex.db")
    try:
        version = actor.config_version
        other.set_tier(1, "trusted")
        other.set_runtime_config("wakeword", "!zz")
        other.set_attention_mode(5, "silent", 0.0)
        actor.set_tier(2, "user")  # queued, maybe not yet committed when the reload lands
        with trio.fail_after(10):
            while actor.get_tier(1) is None:
                await trio.sleep(0.01)
        assert actor.trust_list() == [(1, "trusted"), (2, "user")]
        assert actor.runtime_config() == {"wakeword": "!zz"}
        assert actor.config_version > version
        chat = actor.get_chat_config(5)
        assert chat is not None and chat.attention_mode == "silent"
        await actor.flush()
        assert other.get_tier(2) == "user"
    finally:
        other.close()


async def test_one_failing_write_does_not_sink_its_group(actor: StoreActor) -> None:
    def boom(db: Store) -> None:
        raise ValueError("bad row")

    actor.set_tier(3, "user")
    with pytest.raises(ValueError, match="bad row"):
        await actor.call(boom)
    actor.set_tier(4, "user")
    await actor.flush()
    assert await actor.read(lambda db: db.trust_list()) == [(3, "user"), (4, "user")]


async def test_handled_ids_stay_exact_across_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "picortex.db"
    first = StoreActor(Store.open(path))
    for i in (100, 200, 300, 400, 500):
        first.mark_handled(i, 1.0)
    first.note_seen(450)  # chatter: memory only, never persisted
    first.close()
    monkeypatch.setattr(actor_mod, "SEEN_MEMORY", 3)
    again = StoreActor(Store.open(path))
    try:
        # The newest ids are in memory; above them nothing was handled.
        assert [again.seen(i) for i in (300, 400, 500, 600)] == [True, True, True, False]
        assert again.seen(450) is False
        # Older ids: only SQLite knows, and it is asked.
        assert again.seen(200) is None
        assert await again.was_handled(200) is True
        assert await again.was_handled(150) is False
    finally:
        again.close()


async def test_a_locked_database_waits_on_the_store_thread_not_the_event_loop(
    actor: StoreActor, tmp_path: Path
) -> None:
    other = apsw.Connection(str(tmp_path / "picortex.db"))
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    done = trio.Event()

    async def durable_write() -> None:
        actor.set_tier(9, "user")
        await actor.flush()
        done.set()

    ticks = 0
    async with trio.open_nursery() as nursery:
        nursery.start_soon(durable_write)
        for _ in range(10):
            await trio.sleep(0.02)  # the event loop keeps turning meanwhile
            ticks += 1
        assert not done.is_set()
        other.execute("COMMIT")
        with trio.fail_after(10):
            await done.wait()
    other.close()
    assert ticks == 10
    assert actor.get_tier(9) == "user"


async def test_a_group_that_cannot_commit_fails_its_waiters(
    actor: StoreActor, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(actor_mod, "GROUP_SECONDS", 0.0)
    other = apsw.Connection(str(actor.path))
    other.execute("BEGIN IMMEDIATE")
    actor.db._conn.set_busy_timeout(50)
    try:
        with pytest.raises(StoreError, match="not committed"):
            await actor.call(lambda db: db.set_runtime_config("k", "v"))
    finally:
        other.execute("ROLLBACK")
        other.close()
    failures = [r for r in caplog.records if "was not committed" in r.getMessage()]
    assert len(failures) == 1


@pytest.mark.long(seconds=3)
def test_sigkill_never_loses_a_flushed_group(tmp_path: Path) -> None:
    db = tmp_path / "picortex.db"
    committed = 0
    for run in range(5):
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.store.actor_crash_writer", str(db)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(random.uniform(0.05, 0.4))
        os.kill(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        printed = [int(line) for line in out.split() if line.isdigit()]
        if printed:
            committed = max(printed)
        conn = apsw.Connection(str(db))
        try:
            assert conn.execute("PRAGMA integrity_check").get == "ok", run
            seen = {r[0] for r in conn.execute("SELECT message_id FROM seen_events")}
            trust = {r[0] for r in conn.execute("SELECT user_id FROM trust")}
        finally:
            conn.close()
        # Every flushed id is there, in both tables.
        assert set(range(1, committed + 1)) <= seen & trust
