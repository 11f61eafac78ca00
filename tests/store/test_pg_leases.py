"""The shard lease statements on a real PostgreSQL (SPEC 17): take, renew, lose, hand back,
epochs, and two connections racing for one shard."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
import trio

from picortex.errors import StoreError
from picortex.store import StoreActor
from picortex.store.backends import connect_postgres
from picortex.store.pg.cluster import ClusterNode
from picortex.store.pg.leases import ShardLeases
from picortex.store.shards import ADOPT_SECONDS
from picortex.types import snowflake_at

LEASE = 10.0


@pytest.fixture
def two(pg_url: str) -> Iterator[tuple[ShardLeases, ShardLeases]]:
    db = connect_postgres(pg_url)
    a, b = ShardLeases.beside(db), ShardLeases.beside(db)
    try:
        yield a, b
    finally:
        a.close()
        b.close()
        db.close()


def _expire(leases: ShardLeases, shard_id: int) -> None:
    """The lease lapsed (its holder stopped renewing): its end is in the past."""
    leases._write(
        "UPDATE shard_lease SET expires_at = extract(epoch FROM clock_timestamp()) - 1"
        " WHERE shard_id = %s",
        (shard_id,),
    )


def test_take_a_free_shard_then_only_its_holder_may(two: tuple[ShardLeases, ShardLeases]) -> None:
    a, b = two
    before = a.now()
    assert a.take((3, 8), "a", LEASE) == 1
    assert b.take((3, 8), "b", LEASE) is None  # held
    assert a.take((3, 8), "a", LEASE) == 1  # ours again: the same epoch
    now, leases = b.leases()
    lease = leases[3]
    assert (lease.node, lease.epoch) == ("a", 1)
    assert before + LEASE <= lease.expires_at <= now + LEASE
    assert lease.live(now)


def test_renew_all_held_in_one_statement_and_a_lapsed_one_is_lost(
    two: tuple[ShardLeases, ShardLeases],
) -> None:
    a, b = two
    for shard_id in (0, 1, 2):
        assert a.take((shard_id, 4), "a", LEASE) == 1
    _, first = a.leases()
    _expire(a, 1)
    assert b.take((2, 4), "b", LEASE) is None
    assert a.renew([0, 1, 2], "a", LEASE) == {0, 2}  # 1 lapsed: lost, never renewed
    _, after = a.leases()
    assert after[0].expires_at > first[0].expires_at
    # Taken by another: its new holder, a new epoch; the old holder's renewal misses it.
    assert b.take((1, 4), "b", LEASE) == 2
    assert a.renew([0, 1, 2], "a", LEASE) == {0, 2}
    assert b.renew([1], "b", LEASE) == {1}


def test_release_hands_back_only_our_leases(two: tuple[ShardLeases, ShardLeases]) -> None:
    a, b = two
    assert a.take((0, 2), "a", LEASE) == 1
    assert b.take((1, 2), "b", LEASE) == 1
    assert a.release([0, 1], "a") == 1  # shard 1 is b's: untouched
    now, leases = a.leases()
    assert not leases[0].live(now) and leases[0].node is None
    assert leases[1].live(now) and leases[1].node == "b"
    assert b.take((0, 2), "b", LEASE) == 2  # at once, a new holder: a new epoch
    # Handed back and taken again by its old holder: still a new holding, a new epoch.
    assert b.release([0], "b") == 1
    assert b.take((0, 2), "b", LEASE) == 3
    assert a.renew([0], "a", LEASE) == set()


def _beat(leases: ShardLeases, node: str, at: float) -> None:
    """`node` told its heartbeat at `at`."""
    leases.note_node(ClusterNode(node, "host", 1, "", at, at))


def test_taking_a_lapsed_lease_drops_its_holder_if_silent_since(
    two: tuple[ShardLeases, ShardLeases],
) -> None:
    """A holder that let its lease lapse and told no heartbeat since is no longer counted
    live (else the others owe it a share of shards and hand one back to nobody); one that
    did tell one, or that handed its shard back, still is."""
    a, b = two
    now = a.now()
    for node in ("dead", "slow", "left"):
        _beat(a, node, now - 1.0)
    for shard_id, node in enumerate(("dead", "slow", "left")):
        assert a.take((shard_id, 4), node, LEASE) == 1
    _expire(a, 0)
    _expire(a, 1)
    _beat(a, "slow", a.now())  # alive: told a heartbeat after its lease ended
    assert a.release([2], "left") == 1
    assert b.take((3, 4), "b", LEASE) == 1  # a shard no one held: nobody is dropped
    assert set(b.live_nodes(b.now())) == {"dead", "slow", "left"}
    assert b.take((0, 4), "b", LEASE) == 2
    assert b.take((1, 4), "b", LEASE) == 2
    assert b.take((2, 4), "b", LEASE) == 2
    assert set(b.live_nodes(b.now())) == {"slow", "left"}
    # A take refused (the lease is live) drops no one.
    _beat(a, "dead", a.now() - 1.0)
    assert a.take((0, 4), "dead", LEASE) is None
    assert "dead" in b.live_nodes(b.now())


def test_two_connections_racing_for_one_shard_one_wins(
    two: tuple[ShardLeases, ShardLeases],
) -> None:
    a, b = two
    for round_ in range(20):
        shard = (round_, 32)
        won: dict[str, int | None] = {}
        go = threading.Barrier(2)

        def take(
            leases: ShardLeases,
            node: str,
            shard: tuple[int, int] = shard,
            go: threading.Barrier = go,
            won: dict[str, int | None] = won,
        ) -> None:
            go.wait()
            won[node] = leases.take(shard, node, LEASE)

        threads = [threading.Thread(target=take, args=(x, n)) for x, n in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(won.values(), key=str) == [1, None], won


def test_the_database_clock_decides_expiry(two: tuple[ShardLeases, ShardLeases]) -> None:
    a, b = two
    assert a.take((0, 1), "a", 1.0) == 1
    assert b.take((0, 1), "b", LEASE) is None
    time.sleep(1.1)  # the shortest lease there is, run out on PostgreSQL's clock
    assert b.take((0, 1), "b", LEASE) == 2


async def test_a_shard_taken_over_adopts_the_handled_marks_its_last_holder_made(
    pg_url: str,
) -> None:
    old, new = StoreActor(connect_postgres(pg_url)), StoreActor(connect_postgres(pg_url))
    now = time.time()
    handled, stale = snowflake_at(now - 5), snowflake_at(now - ADOPT_SECONDS - 60)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(old.run)
            await nursery.start(new.run)
            old.mark_handled(stale, time.time() - ADOPT_SECONDS - 60)
            old.mark_handled(handled)
            await old.flush()
            # Marked by another process: this one's memory says "surely not handled".
            assert new.seen(handled) is False
            await new.adopt_shard((1, 2))
            assert new.seen(handled) is True
            # Older than any replay: not loaded, below the shard's floor, so asked of the
            # database rather than taken for unhandled.
            assert new.seen(stale) is None
            assert await new.was_handled(stale)
            nursery.cancel_scope.cancel()
    finally:
        old.close()
        new.close()


def test_a_broken_lease_connection_is_opened_again_for_the_next_statement(
    two: tuple[ShardLeases, ShardLeases],
) -> None:
    a, b = two
    assert a._one("SHOW statement_timeout") == "5s"
    assert a.take((0, 1), "a", LEASE) == 1
    pid = a._one("SELECT pg_backend_pid()")
    b._write("SELECT pg_terminate_backend(%s)", (pid,))  # PostgreSQL restarted, say
    with pytest.raises(StoreError):
        a.renew([0], "a", LEASE)
    assert a.renew([0], "a", LEASE) == {0}  # connected again
    # A statement stuck behind a lock gives up, on the new connection too.
    assert a._one("SHOW statement_timeout") == "5s"
