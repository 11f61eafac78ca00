"""Tests for picortex.core.history: what a channel keeps, merged, trimmed, edited, deleted."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from picortex.core.history import (
    ChannelHistory,
    merge_messages,
    plan_eviction,
)
from picortex.types import (
    Attachment,
    Message,
    MessageDelete,
    MessageDeleteBulk,
    MessageUpdate,
    User,
)

ALICE = User(id=1, username="alice", global_name="Alice A.")
ALICE_NICK = User(id=1, username="alice", global_name="Alice A.", nick="Ali")


def msg(i: int, content: str = "", *, author: User = ALICE, channel_id: int = 10) -> Message:
    return Message(
        id=i,
        channel_id=channel_id,
        author=author,
        content=content or f"text {i}",
        timestamp="2024-05-01T12:34:56.789000+00:00",
        guild_id=20,
    )


def history(*ids: int) -> ChannelHistory:
    return ChannelHistory(10, guild_id=20, messages=[msg(i) for i in ids])


def ids(h: ChannelHistory) -> list[int]:
    return [m.id for m in h.messages]


# ----- merge / cap / newest ---------------------------------------------------------------


def test_merge_dedupes_orders_and_prefers_incoming() -> None:
    old = [msg(1, "a"), msg(3, "old three")]
    new = [msg(5, "e"), msg(3, "new three"), msg(2, "b")]
    merged = merge_messages(old, new)
    assert [m.id for m in merged] == [1, 2, 3, 5]
    assert merged[2].content == "new three"


@given(st.lists(st.integers(1, 50)), st.lists(st.integers(1, 50)))
def test_merge_is_a_sorted_union(a: list[int], b: list[int]) -> None:
    merged = merge_messages([msg(i) for i in a], [msg(i) for i in b])
    assert [m.id for m in merged] == sorted(set(a) | set(b))


def test_merge_takes_in_a_tail_with_the_sync_mark_it_moved() -> None:
    h = history(4, 5)
    h.synced_to = 5
    tail = ChannelHistory(10, synced_to=9, messages=[msg(9)])
    h.merge(tail, cap=2)
    assert ids(h) == [5, 9]
    assert h.synced_to == 9
    h.merge(ChannelHistory(10, synced_to=3), cap=2)
    assert h.synced_to == 9  # an older mark never moves it back


# ----- eviction plan ----------------------------------------------------------------------


def test_plan_eviction_takes_least_recently_written_first() -> None:
    files = [(1, 40), (2, 30), (3, 20), (4, 10)]
    assert plan_eviction(files, 100) == []
    assert plan_eviction(files, 99) == [1]
    assert plan_eviction(files, 30) == [1, 2]
    assert plan_eviction(files, 5) == [1, 2, 3, 4]
    assert plan_eviction(files, 50, pinned=frozenset({1})) == [2, 3]
    assert plan_eviction(files, 30, pinned=frozenset({1})) == [2, 3, 4]


@given(
    st.lists(st.integers(0, 500), max_size=30),
    st.integers(0, 5000),
)
def test_plan_eviction_leaves_the_longest_fitting_suffix(sizes: list[int], limit: int) -> None:
    files = list(enumerate(sizes))
    victims = plan_eviction(files, limit)
    kept = [(c, s) for c, s in files if c not in victims]
    assert sum(s for _, s in kept) <= limit
    # Victims are a prefix of the write order, and no shorter prefix would do.
    assert victims == [c for c, _ in files[: len(victims)]]
    if victims:
        assert sum(s for _, s in files[len(victims) - 1 :]) > limit


def test_merge_keeps_a_nickname_that_fetched_history_lacks() -> None:
    merged = merge_messages([msg(1, "a", author=ALICE_NICK)], [msg(1, "a edited")])
    assert merged[0].author.nick == "Ali"
    assert merged[0].content == "a edited"


# ----- ChannelHistory ---------------------------------------------------------------------


def test_index_of_finds_cached_ids_only() -> None:
    h = history(2, 4, 6)
    assert [h.index_of(i) for i in (2, 4, 6)] == [0, 1, 2]
    assert [h.index_of(i) for i in (1, 3, 7)] == [None, None, None]


def test_absorb_appends_a_new_newest_message_and_trims_to_the_cap() -> None:
    h = history(1, 2, 3)
    assert h.absorb(20, [msg(4)], cap=3)
    assert ids(h) == [2, 3, 4]


def test_absorb_merges_older_and_repeated_messages() -> None:
    h = history(2, 5)
    assert h.absorb(20, [msg(1), msg(5, "new five"), msg(3)], cap=10)
    assert ids(h) == [1, 2, 3, 5]
    assert h.messages[3].content == "new five"


def test_absorb_of_what_is_already_cached_changes_nothing() -> None:
    h = history(1, 2)
    assert not h.absorb(20, [msg(1), msg(2)], cap=10)
    assert not h.absorb(20, [], cap=10)
    assert ids(h) == [1, 2]


def test_absorb_fills_in_an_unknown_guild_only() -> None:
    h = ChannelHistory(10)
    assert not h.absorb(30, [], cap=10)
    assert h.guild_id == 30
    h.absorb(40, [msg(1)], cap=10)
    assert h.guild_id == 30


@given(st.lists(st.integers(1, 60)), st.lists(st.integers(1, 60)), st.integers(0, 30))
def test_absorb_keeps_the_newest_of_the_union(cached: list[int], new: list[int], cap: int) -> None:
    h = ChannelHistory(10, messages=[msg(i) for i in sorted(set(cached))])
    h.trim(cap)
    before = set(ids(h))
    h.absorb(20, [msg(i) for i in new], cap=cap)
    union = sorted(before | set(new))
    assert ids(h) == (union[-cap:] if cap else [])


def test_trim_keeps_the_newest() -> None:
    h = history(1, 2, 3, 4)
    h.trim(2)
    assert ids(h) == [3, 4]
    h.trim(5)
    assert ids(h) == [3, 4]


def test_fetched_moves_synced_to_forward_only() -> None:
    h = ChannelHistory(10, synced_to=8)
    assert not h.fetched([])
    assert h.synced_to == 8
    assert h.fetched([msg(3), msg(5)])
    assert h.synced_to == 8  # a fetch of older messages never moves the mark back
    assert h.fetched([msg(9), msg(12)])
    assert h.synced_to == 12


def test_delivered_moves_synced_to_to_a_newer_live_message() -> None:
    h = ChannelHistory(10)
    assert h.delivered(msg(5))
    assert h.synced_to == 5
    assert not h.delivered(msg(4))
    assert h.synced_to == 5


def test_apply_update_edits_the_cached_message() -> None:
    h = history(1, 2)
    files = (Attachment(id=7, filename="a.png"),)
    edit = h.apply_update(
        MessageUpdate(
            id=2, channel_id=10, content="edited", edited_timestamp="t", attachments=files
        )
    )
    assert edit.changed
    assert edit.cached == msg(2)
    assert h.messages[1].content == "edited"
    assert h.messages[1].edited_timestamp == "t"
    assert h.messages[1].attachments == files


def test_apply_update_keeps_what_the_update_leaves_out() -> None:
    h = history(1)
    edit = h.apply_update(MessageUpdate(id=1, channel_id=10))
    assert not edit.changed
    assert edit.cached == msg(1)
    assert h.messages == [msg(1)]


def test_apply_update_of_an_uncached_message() -> None:
    h = history(1)
    edit = h.apply_update(MessageUpdate(id=9, channel_id=10, content="x"))
    assert edit.cached is None
    assert not edit.changed
    assert ids(h) == [1]


def test_apply_delete() -> None:
    h = history(1, 2, 3)
    assert h.apply_delete(MessageDelete(id=2, channel_id=10))
    assert not h.apply_delete(MessageDelete(id=2, channel_id=10))
    assert ids(h) == [1, 3]


def test_apply_delete_bulk_counts_the_cached() -> None:
    h = history(1, 2, 3, 4)
    assert h.apply_delete_bulk(MessageDeleteBulk(ids=(2, 4, 99), channel_id=10)) == 2
    assert ids(h) == [1, 3]
    assert h.apply_delete_bulk(MessageDeleteBulk(ids=(99,), channel_id=10)) == 0


def test_clear() -> None:
    h = history(1, 2)
    assert h.clear()
    assert h.messages == []
    assert not h.clear()
