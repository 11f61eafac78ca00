"""Discord's shared limits in a real PostgreSQL: the global slot table from several
connections, the shared pause, identify buckets, and the worker out of reach.

Times come from a fake clock handed to the connections (the database's own clock in the
concurrent test, where every grant reports the moment the table gave it).
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from picortex.discord.ratelimit import GLOBAL_BUDGET, GLOBAL_WINDOW
from picortex.discord.shared_limits import BucketClaim, Grant
from picortex.store.pg.limits import LimitsWorker, PgLimits
from tests.pg import Server


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def connect(pg_url: str) -> Iterator[Callable[..., PgLimits]]:
    opened: list[PgLimits] = []

    def open_one(clock: Callable[[], float] | None = None) -> PgLimits:
        limits = PgLimits.open(pg_url, clock=clock)
        opened.append(limits)
        return limits

    yield open_one
    for limits in opened:
        limits.close()


def busiest_window(grants: list[tuple[float, int]]) -> int:
    """The most slots granted with times in any [t, t + GLOBAL_WINDOW)."""
    grants = sorted(grants)
    times = [at for at, _ in grants]
    counts = [0]
    for _, granted in grants:
        counts.append(counts[-1] + granted)
    return max(
        counts[bisect.bisect_left(times, at + GLOBAL_WINDOW)] - counts[i]
        for i, at in enumerate(times)
    )


# ---- the global slot table -------------------------------------------------------------------


def test_two_processes_share_one_budget_per_second(
    connect: Callable[..., PgLimits], clock: FakeClock
) -> None:
    one, two = connect(clock), connect(clock)
    assert one.grant(30).granted == 30
    second = two.grant(30)
    assert second.granted == GLOBAL_BUDGET - 30
    assert second.retry_at == GLOBAL_WINDOW  # when the first slots free again
    clock.now = 0.5
    assert one.grant(5).granted == 0
    clock.now = GLOBAL_WINDOW
    assert two.grant(100).granted == GLOBAL_BUDGET  # every slot is free again, none more


def test_slots_granted_concurrently_never_exceed_the_budget_in_any_second(
    connect: Callable[..., PgLimits],
) -> None:
    """Four connections take slots as fast as they can on the database's clock."""
    processes = [connect() for _ in range(4)]
    grants: list[tuple[float, int]] = []
    lock = threading.Lock()
    total = GLOBAL_BUDGET * 3

    def hammer(limits: PgLimits, wanted: int) -> None:
        while True:
            with lock:
                if sum(n for _, n in grants) >= total:
                    return
            grant = limits.grant(wanted)
            with lock:
                if grant.granted:
                    grants.append((grant.now, grant.granted))

    threads = [
        threading.Thread(target=hammer, args=(limits, wanted))
        for limits, wanted in zip(processes, (1, 3, 5, 8), strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(n for _, n in grants) >= total  # the windows rolled over, more than once
    assert busiest_window(grants) <= GLOBAL_BUDGET


def test_a_global_429_pauses_every_process(
    connect: Callable[..., PgLimits], clock: FakeClock
) -> None:
    one, two = connect(clock), connect(clock)
    assert one.pause(5.0) == 5.0
    clock.now = 1.0
    paused = two.grant(3)
    assert paused == Grant(wanted=3, granted=0, now=1.0, retry_at=5.0, paused_until=5.0)
    assert paused.paused
    assert one.pause(2.0) == 5.0  # a shorter pause never shortens a longer one
    clock.now = 5.0
    assert two.grant(3).granted == 3


# ---- identify buckets --------------------------------------------------------------------------


def test_a_bucket_is_held_by_one_process_and_waits_out_the_window(
    connect: Callable[..., PgLimits], clock: FakeClock
) -> None:
    one, two = connect(clock), connect(clock)
    assert one.claim_bucket(0, 5.0) == BucketClaim(held=True, wait=0.0)
    assert two.claim_bucket(0, 5.0) == BucketClaim(held=False)
    assert two.claim_bucket(1, 5.0).held  # another bucket goes at once
    clock.now = 1.0
    one.release_bucket(0, 0.25, invalid=False, held=True)  # READY; IDENTIFY sent at 0.75
    clock.now = 1.5
    assert two.claim_bucket(0, 5.0) == BucketClaim(held=True, wait=4.25)


def test_an_op_9_starts_the_bucket_window_again(
    connect: Callable[..., PgLimits], clock: FakeClock
) -> None:
    one, two = connect(clock), connect(clock)
    assert one.claim_bucket(3, 5.0).held
    clock.now = 2.0
    one.release_bucket(3, 1.5, invalid=True, held=True)
    assert two.claim_bucket(3, 5.0) == BucketClaim(held=True, wait=5.0)


def test_a_bucket_is_free_once_its_holder_is_gone(
    connect: Callable[..., PgLimits], clock: FakeClock
) -> None:
    one, two = connect(clock), connect(clock)
    assert one.claim_bucket(0, 5.0).held
    one.close()  # a killed process: its connection ends, and the lock with it
    # The server lets go once it has seen the connection end (not a moment before).
    for _ in range(200):
        if two.claim_bucket(0, 5.0).held:
            break
        time.sleep(0.025)
    else:
        pytest.fail("the bucket stayed held after its holder's connection ended")


def test_live_processes_count_recent_heartbeats(
    connect: Callable[..., PgLimits], pg_url: str
) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for node, seen in (("a", 100.0), ("b", 99.0), ("c", 10.0), ("me", 100.0)):
            conn.execute("INSERT INTO cluster_node VALUES (%s, 'h', 1, '0/2', 0, %s)", (node, seen))
    assert connect().live_processes("me", 100.0) == 3  # a, b and this one; c is gone


# ---- the worker --------------------------------------------------------------------------------


class Answers:
    def __init__(self) -> None:
        self.got: list[object] = []
        self.event = threading.Event()

    def __call__(self, value: object) -> None:
        self.got.append(value)
        self.event.set()

    def wait(self) -> object:
        assert self.event.wait(30)
        self.event.clear()
        return self.got[-1]


def test_the_worker_answers_in_order_and_counts_live_processes(pg_url: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO cluster_node VALUES ('other', 'h', 1, '1/2', 0, 1e12)")
    worker = LimitsWorker(pg_url, "PostgreSQL test", node="me")
    worker.start()
    try:
        answers = Answers()
        worker.claim_bucket(0, 5.0, answers)
        claim = answers.wait()
        assert isinstance(claim, BucketClaim) and claim.held and claim.generation == 1
        worker.release_bucket(0, claim, 0.0, False)
        worker.grant(2, answers)
        grant = answers.wait()
        assert isinstance(grant, Grant) and grant.granted == 2
        assert worker.live == 2 and worker.reachable
    finally:
        worker.stop()


def test_the_worker_out_of_reach_answers_none_at_once_and_says_so_once(
    pg_url: str, pg_server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    worker = LimitsWorker(pg_url, "PostgreSQL test", node="me")
    worker.start()
    name = pg_url.split("@/", 1)[1].split("?", 1)[0]
    try:
        answers = Answers()
        worker.grant(1, answers)
        assert isinstance(answers.wait(), Grant)
        with psycopg.connect(pg_server.url("postgres"), autocommit=True) as admin:
            admin.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false")  # type: ignore[arg-type]
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                (name,),
            )
        with caplog.at_level(logging.DEBUG, logger="picortex.store.pg.limits"):
            for _ in range(3):
                worker.grant(1, answers)
                assert answers.wait() is None
        assert not worker.reachable
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1
        assert "share" in errors[0].getMessage() and pg_url not in errors[0].getMessage()
    finally:
        worker.stop()


# ---- the bot -----------------------------------------------------------------------------------


@pytest.mark.virtual_time
async def test_a_bot_on_postgresql_takes_its_slots_and_its_bucket_from_the_cluster(
    pg_url: str, tmp_path: Path
) -> None:
    from tests.e2e.harness import running_bot

    async with running_bot(tmp_path, env={"PICORTEX_DATABASE_URL": pg_url}) as run:
        w = run.world
        run.say(w.general_id, w.alice_id, f"{run.mention()} hello there?")
        await run.sim.wait_bot_messages(1, w.general_id)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            used = conn.execute("SELECT count(*) FROM rest_global_slot WHERE free_at > 0")
            buckets = conn.execute("SELECT bucket FROM identify_bucket").fetchall()
            (used_slots,) = used.fetchone() or (0,)
    assert used_slots > 0  # the reply (and the requests before it) took shared slots
    assert buckets == [(0,)]  # its IDENTIFY was recorded for the cluster


def test_a_stopped_worker_answers_what_it_never_served(pg_url: str) -> None:
    worker = LimitsWorker(pg_url, "PostgreSQL test", node="me")
    answers = Answers()
    worker.grant(1, answers)  # queued before the thread ever ran
    worker.stop()
    assert answers.wait() is None
    worker.claim_bucket(0, 5.0, answers)
    assert answers.wait() is None
    assert not worker.reachable
