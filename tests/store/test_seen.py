"""The compact set of handled message ids: exact for the newest, a floor below them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.store import seen as seen_mod
from picortex.store.seen import SeenIds


def test_the_newest_ids_are_kept_and_the_floor_is_the_largest_let_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(seen_mod, "BATCH", 4)
    ids = SeenIds(10, [5, 1, 3])
    assert (1 in ids, 2 in ids, 3 in ids, 5 in ids) == (True, False, True, True)
    for message_id in range(100, 120):
        ids.add(message_id)
    assert len(ids) <= 10 + 4
    assert all(message_id in ids for message_id in range(110, 120))
    assert 5 not in ids
    assert ids.floor >= 5
    assert all(message_id not in ids for message_id in range(ids.floor + 1, 100))


def test_an_id_older_than_the_newest_is_folded_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seen_mod, "BATCH", 2)
    ids = SeenIds(100, [10, 20, 30])
    ids.add(25)
    ids.add(40)  # a fold: 25 goes between 20 and 30, 40 at the end
    ids.add(15)
    ids.add(15)  # the same id twice is kept once
    ids.add(50)
    assert [n for n in range(60) if n in ids] == [10, 15, 20, 25, 30, 40, 50]
    assert len(ids) == 7


def test_what_is_no_snowflake_is_ignored() -> None:
    ids = SeenIds(10, [-1, 2**64, 7])
    ids.add(-5)
    ids.add(2**70)
    assert 7 in ids and -5 not in ids and 2**70 not in ids


@given(st.lists(st.integers(min_value=0, max_value=2**63 - 1), max_size=300))
def test_same_answers_as_a_plain_set_above_the_floor(added: list[int]) -> None:
    ids = SeenIds(64)
    for message_id in added:
        ids.add(message_id)
    plain = set(added)
    kept = sorted(plain)[-64:]
    # The newest 64 are surely there; nothing above the floor is claimed that was not added.
    assert all(message_id in ids for message_id in kept)
    probes = added + [n + 1 for n in added] + [n - 1 for n in added if n]
    for message_id in probes:
        if message_id > ids.floor:
            assert (message_id in ids) == (message_id in plain)


def _guild_on(shard: int, count: int) -> int:
    return (100 * count + shard) << 22


def test_a_shard_taken_over_has_its_own_floor_and_others_keep_theirs() -> None:
    ids = SeenIds(10, [50, 60])
    assert (ids.floor, ids.top) == (0, 0)
    ids.adopt((1, 2), [1500, 1600], floor=1000)
    g0, g1 = _guild_on(0, 2), _guild_on(1, 2)
    assert 1500 in ids and 1600 in ids
    assert (ids.floor_of(g1), ids.floor_of(g0), ids.floor_of(None)) == (1000, 0, 0)
    assert ids.floor_of() == ids.top == 1000  # the guild not said: the highest floor
    # Taken over again later: the floor only ever rises.
    ids.adopt((1, 2), [], floor=900)
    assert ids.floor_of(g1) == 1000


def test_trimming_raises_every_shard_s_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(seen_mod, "BATCH", 2)
    ids = SeenIds(3)
    ids.adopt((1, 2), [], floor=10)
    for message_id in (20, 30, 40, 50, 60):
        ids.add(message_id)
    assert ids.floor >= 20
    assert ids.floor_of(_guild_on(0, 2)) == ids.floor
    assert ids.floor_of(_guild_on(1, 2)) == max(10, ids.floor)
    assert ids.top == ids.floor


def test_floors_of_another_shard_count_become_the_floor_of_all() -> None:
    ids = SeenIds(10)
    ids.adopt((1, 2), [], floor=1000)
    ids.adopt((0, 4), [], floor=500)
    # Shard 1 of 2 names other guilds than shard 1 of 4: its floor now holds for every id.
    assert ids.floor == 1000
    assert ids.floor_of(_guild_on(1, 4)) == 1000
    assert ids.floor_of(_guild_on(0, 4)) == 1000
