"""Shard lease decisions (SPEC 17): deadlines on our clock, which shards to take and which
to hand back."""

from __future__ import annotations

from picortex.core.leases import (
    Lease,
    Plan,
    Want,
    deadline,
    margin,
    peers,
    plan_shards,
    renew_every,
    soonest_expiry,
)

NOW = 1000.0


def held_by(
    node: str | None, *ids: int, until: float = NOW + 5, epoch: int = 1
) -> dict[int, Lease]:
    return {i: Lease(i, node, epoch, until) for i in ids}


def test_a_lease_is_trusted_until_a_margin_before_it_ends_counted_from_the_send() -> None:
    assert renew_every(10.0) == 10.0 / 3
    assert margin(10.0) == 3.0
    assert deadline(50.0, 10.0) == 57.0
    # A short lease keeps a share of itself as margin, never all of it.
    assert 0 < margin(2.0) < 2.0
    assert deadline(50.0, 2.0) > 50.0 + renew_every(2.0)


def test_named_shards_are_taken_when_free_up_to_capacity() -> None:
    want = Want(ids=(1, 3, 5), count=8, capacity=2)
    leases = {**held_by("other", 1), **held_by("gone", 3, until=NOW - 1)}
    assert plan_shards(want, me="me", held=(), leases=leases, nodes=["other"], now=NOW) == Plan(
        take=(3, 5)
    )
    assert plan_shards(want, me="me", held=(3,), leases=leases, nodes=[], now=NOW) == Plan(
        take=(5,)
    )
    assert plan_shards(want, me="me", held=(3, 5), leases=leases, nodes=[], now=NOW) == Plan()


def test_a_handed_back_lease_is_free_at_once() -> None:
    want = Want(ids=(0,), count=1, capacity=1)
    leases = held_by(None, 0, until=NOW + 100)
    assert plan_shards(want, me="me", held=(), leases=leases, nodes=[], now=NOW).take == (0,)


def test_auto_takes_its_fair_share_of_the_live_processes() -> None:
    want = Want(ids=(), count=4, capacity=4, auto=True)
    alone = plan_shards(want, me="me", held=(), leases={}, nodes=["me"], now=NOW)
    assert alone.take == (0, 1, 2, 3)
    # Another process heard from (holding nothing yet): half each.
    two = plan_shards(want, me="me", held=(), leases={}, nodes=["me", "b"], now=NOW)
    assert two.take == (0, 1)
    # Capacity caps the share.
    small = Want(ids=(), count=4, capacity=1, auto=True)
    assert plan_shards(small, me="me", held=(), leases={}, nodes=["me"], now=NOW).take == (0,)


def test_a_process_whose_leases_all_lapsed_is_not_a_peer() -> None:
    leases = {**held_by("dead", 0, 1, until=NOW - 1), **held_by("b", 2)}
    assert peers("me", ["me", "dead", "b", "new"], leases, NOW) == {"me", "b", "new"}
    want = Want(ids=(), count=4, capacity=4, auto=True)
    # "dead" still tells a heartbeat (or did lately) but renews nothing: its shards are taken.
    plan = plan_shards(want, me="me", held=(3,), leases=leases, nodes=["me", "dead", "b"], now=NOW)
    assert plan.take == (0,)


def test_auto_hands_one_back_when_over_its_share_and_another_is_short() -> None:
    want = Want(ids=(), count=2, capacity=2, auto=True)
    leases = held_by("me", 0, 1)
    plan = plan_shards(want, me="me", held=(0, 1), leases=leases, nodes=["me", "b"], now=NOW)
    assert plan == Plan(give_back=(1,))
    # Alone, it keeps both.
    assert plan_shards(want, me="me", held=(0, 1), leases=leases, nodes=["me"], now=NOW) == Plan()
    # Named shards are never handed back to even things out.
    named = Want(ids=(0, 1), count=2, capacity=2)
    assert (
        plan_shards(named, me="me", held=(0, 1), leases=leases, nodes=["me", "b"], now=NOW)
        == Plan()
    )


def test_auto_keeps_an_uneven_split_that_is_the_best_there_is() -> None:
    want = Want(ids=(), count=3, capacity=3, auto=True)
    leases = {**held_by("me", 0, 1), **held_by("b", 2)}
    assert (
        plan_shards(want, me="me", held=(0, 1), leases=leases, nodes=["me", "b"], now=NOW) == Plan()
    )


def test_the_soonest_end_of_a_lease_held_elsewhere_on_a_shard_this_one_may_take() -> None:
    leases = {
        **held_by("b", 0, until=NOW + 7),
        **held_by("c", 1, until=NOW + 4),
        **held_by("me", 2, until=NOW + 1),  # its own
        **held_by(None, 3, until=NOW + 2),  # handed back: free already
        **held_by("d", 4, until=NOW - 1),  # lapsed: free already
        **held_by("e", 9, until=NOW + 2),  # not one it may take
    }
    want = Want(ids=(0, 1, 2, 3, 4), count=10, capacity=5)
    assert soonest_expiry(want, me="me", held=(2,), leases=leases, now=NOW) == 4
    assert soonest_expiry(want, me="me", held=(1, 2), leases=leases, now=NOW) == 7
    assert soonest_expiry(want, me="me", held=(0, 1, 2), leases=leases, now=NOW) is None
