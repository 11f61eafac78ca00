"""The trigger log ring buffers."""

from __future__ import annotations

import attrs
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.triggerlog import (
    DELETED_TEXT,
    FORGOTTEN_TEXT,
    TRUSTED_CAPACITY,
    UNTRUSTED_CAPACITY,
    TriggerEntry,
    TriggerLog,
    entry_from_message,
)
from picortex.types import Message, User


def entry(i: int, *, trusted: bool = True) -> TriggerEntry:
    return TriggerEntry(
        id=i,
        channel_id=7,
        guild_id=None,
        author_id=3,
        author_name="alice",
        content=f"message {i}",
        timestamp="2025-01-01T00:00:00+00:00",
        trusted=trusted,
    )


def test_capacities_match_the_seed() -> None:
    assert (TRUSTED_CAPACITY, UNTRUSTED_CAPACITY) == (100, 30)


def test_entry_from_message_copies_the_fields() -> None:
    message = Message(
        id=11,
        channel_id=22,
        guild_id=33,
        author=User(44, "bob", global_name="Bobby"),
        content="<@9> hello",
        timestamp="2025-02-03T04:05:06+00:00",
    )
    made = entry_from_message(message, trusted=True, command=None, context=["10:00 carol: hi"])
    assert made.as_dict() == {
        "id": 11,
        "channel_id": 22,
        "guild_id": 33,
        "author_id": 44,
        "author_name": "bob",
        "content": "<@9> hello",
        "timestamp": "2025-02-03T04:05:06+00:00",
        "trusted": True,
        "command": None,
        "context": ["10:00 carol: hi"],
    }


def test_trusted_buffer_keeps_the_last_hundred() -> None:
    log = TriggerLog()
    for i in range(150):
        log = log.add(entry(i))
    assert len(log.trusted) == 100
    assert [e.id for e in log.trusted][:2] == [50, 51]
    assert log.trusted[-1].id == 149
    assert log.untrusted == ()


def test_untrusted_entries_go_to_their_own_small_buffer() -> None:
    log = TriggerLog()
    for i in range(40):
        log = log.add(entry(i, trusted=False))
    assert len(log.untrusted) == 30
    assert log.trusted == ()
    assert log.snapshot(10) == []


def test_replayed_trigger_is_not_logged_twice() -> None:
    log = TriggerLog().add(entry(1)).add(entry(2)).add(entry(1))
    assert [e.id for e in log.trusted] == [2, 1]


def test_follow_ups_join_the_context() -> None:
    log = TriggerLog().add(entry(1)).add(entry(2))
    log = log.add_follow_up(1, "in Paris").add_follow_up(1, "tomorrow")
    got = log.get(1)
    assert got is not None
    assert got.context == ("in Paris", "tomorrow")
    other = log.get(2)
    assert other is not None
    assert other.context == ()
    assert log.add_follow_up(999, "lost") == log
    assert log.get(999) is None


def test_snapshot_is_the_last_n_oldest_first() -> None:
    log = TriggerLog()
    for i in range(5):
        log = log.add(entry(i))
    snap = log.snapshot(3)
    assert [e["id"] for e in snap] == [2, 3, 4]
    assert log.snapshot(0) == []
    assert len(log.snapshot(100)) == 5


@given(st.lists(st.tuples(st.integers(0, 300), st.booleans()), max_size=300))
def test_buffers_never_exceed_capacity(items: list[tuple[int, bool]]) -> None:
    log = TriggerLog()
    for i, trusted in items:
        log = log.add(entry(i, trusted=trusted))
        assert len(log.trusted) <= TRUSTED_CAPACITY
        assert len(log.untrusted) <= UNTRUSTED_CAPACITY
    ids = [e.id for e in log.trusted]
    assert len(ids) == len(set(ids))
    if items and items[-1][1]:
        assert log.trusted[-1].id == items[-1][0]


def test_a_deleted_trigger_and_follow_up_lose_their_text_but_keep_their_place() -> None:
    log = TriggerLog().add(entry(1)).add(entry(2))
    log = log.add_follow_up(1, "first follow-up", 11).add_follow_up(1, "second follow-up", 12)
    gone = log.forget({1, 12})
    first = gone.get(1)
    assert first is not None
    assert (first.content, first.command) == (DELETED_TEXT, None)
    assert first.context == ("first follow-up", DELETED_TEXT)
    assert gone.get(2) == log.get(2)
    assert log.forget({99}) == log


def test_a_deleted_message_leaves_the_context_lines_it_was_shown_in() -> None:
    log = TriggerLog().add(attrs.evolve(entry(5), context=('[t] "bob": "secret"', "other")))
    gone = log.forget({4}, {'[t] "bob": "secret"'}).get(5)
    assert gone is not None
    assert (gone.content, gone.context) == ("message 5", (DELETED_TEXT, "other"))


def test_forgetting_an_author_empties_their_triggers_and_follow_ups() -> None:
    theirs = attrs.evolve(entry(1), context=("prior line",))
    log = TriggerLog().add(theirs).add(attrs.evolve(entry(2), author_id=4, author_name="carol"))
    log = log.add_follow_up(1, "more from alice", 11)
    forgotten = log.forget_author(3)
    mine = forgotten.get(1)
    assert mine is not None
    assert (mine.author_name, mine.content) == (FORGOTTEN_TEXT, FORGOTTEN_TEXT)
    assert mine.context == ("prior line", FORGOTTEN_TEXT)
    assert forgotten.get(2) == log.get(2)
    assert "more from alice" not in str(forgotten.snapshot())
