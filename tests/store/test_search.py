"""Memory search takes any user text as a query: no FTS5 syntax error, ever."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from picortex.store import Store, fts_query


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as tmp, Store.open(Path(tmp) / "picortex.db") as opened:
        opened.add_memory_message(1, 10, None, 7, "ann", 'he said "NEAR(a b)" AND -x*', 5.0)
        opened.add_observation("arnold", 1, 10, None, "near", "quoted: \"'", 5.0)
        yield opened


ODD_QUERIES = [
    '"',
    '""',
    "*",
    "NEAR(",
    "a:b",
    "-x",
    "^start",
    "AND",
    "OR OR NOT",
    "()",
    "{col}: x",
    "\x00",
    "a\x00b",
    "😀🔥",
    "déjà vu",
    "ﬁ ligature",
    "İstanbul",
    "東京タワー",
    "x" * 5000,
    " ".join(f"w{i}" for i in range(200)),
]


@settings(max_examples=150, deadline=None)
@given(query=st.text())
@example(query=ODD_QUERIES[0])
def test_any_query_never_raises(store: Store, query: str) -> None:
    hits = store.search_memory(query, 0.0, None)
    assert isinstance(hits, list)


@pytest.mark.parametrize("query", ODD_QUERIES)
def test_odd_queries(store: Store, query: str) -> None:
    assert isinstance(store.search_memory(query, 0.0, "dm"), list)


def test_syntax_words_are_plain_words(store: Store) -> None:
    hits = store.search_memory("near", 0.0, None)
    assert {h.kind for h in hits} == {"message", "observation"}


def test_fts_query_quotes_every_term() -> None:
    assert fts_query('say "hi" or NEAR(x)') == '"say" OR "hi" OR "or" OR "NEAR" OR "x"'
    assert fts_query("?!* ()") is None
    assert fts_query("a a a") == '"a"'


_words = st.lists(
    st.text(st.characters(categories=("Lu", "Ll", "Nd")), min_size=1, max_size=10),
    min_size=1,
    max_size=6,
)


@settings(max_examples=60, deadline=None)
@given(words=_words, sep=st.sampled_from([" ", ", ", "! ", " -- ", "\n", ' "']), data=st.data())
def test_a_stored_message_is_found_by_any_of_its_words(
    store: Store, words: list[str], sep: str, data: st.DataObject
) -> None:
    # Each example gets its own channel, so earlier examples cannot crowd it out.
    channel = data.draw(st.integers(10**6, 10**12))
    message_id = channel
    store.add_memory_message(message_id, channel, None, 7, "ann", sep.join(words), 100.0)
    word = data.draw(st.sampled_from(words))
    hits = store.search_memory(f"what about {word}?", 0.0, "dm", channel_id=channel)
    assert [h.message_id for h in hits] == [message_id]


@settings(max_examples=60, deadline=None)
@given(content=st.text(), query=st.text())
def test_any_stored_text_and_query_never_raise(store: Store, content: str, query: str) -> None:
    store.add_memory_message(2, 20, 5, 7, "bob", content, 1.0)
    store.add_observation("p", 2, 20, 5, query[:20], content, 1.0)
    assert isinstance(store.search_memory(query, 0.0, "5"), list)
    assert isinstance(store.search_memory(content, 0.0, None), list)


def _fresh(tmp_path: Path) -> Store:
    return Store.open(tmp_path / "recall.db")


def _add(store: Store, mid: int, channel: int, text: str, author: int = 9) -> None:
    store.add_memory_message(mid, channel, 1, author, "alice", text, 100.0)
    store.add_observation("sleep", mid, channel, 1, "insomnia", text, 100.0, author_id=author)


def test_search_is_limited_to_the_given_channels(tmp_path: Path) -> None:
    with _fresh(tmp_path) as store:
        _add(store, 1, 10, "insomnia in ten")
        _add(store, 2, 20, "insomnia in twenty")
        _add(store, 3, 30, "insomnia in thirty")
        hits = store.search_memory("insomnia", 0.0, "1", limit=20, channel_ids=[10, 20])
        assert {h.channel_id for h in hits} == {10, 20}
        assert {h.author_id for h in hits if h.kind == "message"} == {9}
        assert store.search_memory("insomnia", 0.0, "1", limit=20, channel_ids=[]) == []


def test_forget_messages_drops_messages_and_their_observations(tmp_path: Path) -> None:
    with _fresh(tmp_path) as store:
        for mid in (1, 2, 3):
            _add(store, mid, 10, f"insomnia number {mid}")
        assert store.forget_messages([1, 3, 99]) == 2
        hits = store.search_memory("insomnia", 0.0, None, limit=20)
        assert {h.message_id for h in hits} == {2}
        assert store.forget_messages([]) == 0


def test_an_edit_reindexes_the_text_and_drops_stale_observations(tmp_path: Path) -> None:
    with _fresh(tmp_path) as store:
        _add(store, 1, 10, "insomnia secret before the edit")
        assert store.reindex_memory_message(1, "all fine now") == 9
        assert store.search_memory("secret", 0.0, None, limit=20) == []
        (hit,) = store.search_memory("fine", 0.0, None, limit=20)
        assert (hit.kind, hit.message_id) == ("message", 1)
        assert store.reindex_memory_message(77, "never stored") is None


def test_an_observation_keeps_its_author(tmp_path: Path) -> None:
    with _fresh(tmp_path) as store:
        _add(store, 1, 10, "insomnia again", author=42)
        hits = store.search_memory("insomnia", 0.0, None, limit=20)
        assert {(h.kind, h.author_id) for h in hits} == {("message", 42), ("observation", 42)}


def test_forget_user_drops_their_messages_and_observations_at_once(tmp_path: Path) -> None:
    with _fresh(tmp_path) as store:
        _add(store, 1, 10, "insomnia from bob", author=42)
        _add(store, 2, 20, "insomnia from bob elsewhere", author=42)
        _add(store, 3, 10, "insomnia from carol", author=43)
        # An observation whose author was never recorded, of one of bob's stored messages.
        store.add_observation("night", 2, 20, 1, "insomnia", "insomnia from bob", 100.0)
        assert store.forget_user(42) == (2, 3)
        hits = store.search_memory("insomnia", 0.0, None, limit=20)
        assert {(h.kind, h.message_id) for h in hits} == {("message", 3), ("observation", 3)}
        assert store.forget_user(42) == (0, 0)
