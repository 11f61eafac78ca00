"""Reply splitting at line boundaries without breaking code blocks."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picortex.core.split import (
    FENCE,
    MIN_LIMIT,
    Chunk,
    split_chunks,
    split_reply,
)
from tests.spec import DISCORD_MESSAGE_LIMIT as DISCORD_LIMIT
from tests.spec import check_reply_parts


def check(text: str, limit: int) -> list[Chunk]:
    chunks = split_chunks(text, limit)
    assert "".join(c.body for c in chunks) == text
    for chunk in chunks:
        assert chunk.body
        assert 0 < len(chunk.text) <= limit
        assert chunk.text == chunk.reopen + chunk.body + chunk.close
    assert split_reply(text, limit) == [c.text for c in chunks]
    if limit == DISCORD_LIMIT and text:
        check_reply_parts(text, [c.text for c in chunks])
    return chunks


def test_short_text_is_one_chunk() -> None:
    assert split_reply("hello\nworld") == ["hello\nworld"]


def test_empty_text_has_no_chunks() -> None:
    assert split_reply("") == []


def test_splits_at_line_boundaries() -> None:
    lines = [f"line {i:03d}" for i in range(500)]
    text = "\n".join(lines)
    chunks = check(text, DISCORD_LIMIT)
    assert len(chunks) > 1
    for chunk in chunks:
        assert chunk.reopen == chunk.close == ""
        # every cut is right after a newline
    for chunk in chunks[:-1]:
        assert chunk.body.endswith("\n")


def test_exactly_at_the_limit_is_one_chunk() -> None:
    text = "a" * DISCORD_LIMIT
    assert split_reply(text) == [text]
    assert split_reply(text + "b") == ["a" * DISCORD_LIMIT, "b"]


def test_long_line_is_hard_split_preferring_spaces() -> None:
    words = " ".join(["word"] * 1000)
    chunks = check(words, DISCORD_LIMIT)
    assert len(chunks) == 3
    for chunk in chunks[:-1]:
        assert chunk.body.endswith(" ")


def test_long_line_without_spaces_is_cut_anywhere() -> None:
    chunks = check("x" * 4500, DISCORD_LIMIT)
    assert [len(c.text) for c in chunks] == [2000, 2000, 500]


def test_code_block_spanning_chunks_is_closed_and_reopened() -> None:
    code = "\n".join(f"print({i})" for i in range(400))
    text = f"Here you go:\n```python\n{code}\n```\nDone."
    chunks = check(text, DISCORD_LIMIT)
    assert len(chunks) >= 2
    assert chunks[0].reopen == ""
    assert chunks[0].close == FENCE
    for chunk in chunks[1:-1]:
        assert chunk.reopen == "```python\n"
        assert chunk.close == FENCE
    assert chunks[-1].reopen == "```python\n"
    assert chunks[-1].close == ""
    assert chunks[-1].text.endswith("```\nDone.")
    for chunk in chunks:
        assert chunk.text.count(FENCE) % 2 == 0


def test_language_tag_is_kept_only_when_it_is_one() -> None:
    code = "\n".join("x" * 30 for _ in range(10))
    chunks = check(f"```\n{code}\n```", 120)
    assert all(c.reopen in ("", "```\n") for c in chunks)
    chunks = check(f"```c++\n{code}\n```", 120)
    assert chunks[1].reopen == "```c++\n"


def test_long_line_inside_code_block() -> None:
    text = "```\n" + "y" * 300 + "\n```"
    chunks = check(text, 100)
    assert len(chunks) > 3
    for chunk in chunks:
        assert chunk.text.count(FENCE) % 2 == 0
    assert chunks[0].close == "\n```"  # cut mid-line: the fence goes on its own line


def test_hard_cut_never_splits_a_fence() -> None:
    text = "a" * 95 + "```py\ncode\n```"
    chunks = check(text, 100)
    for chunk in chunks:
        assert chunk.text.count(FENCE) % 2 == 0


def test_inline_fences_on_one_line_do_not_open_a_block() -> None:
    text = ("use ```x``` here\n" * 300).rstrip("\n")
    chunks = check(text, DISCORD_LIMIT)
    assert all(c.reopen == c.close == "" for c in chunks)


def test_limit_must_leave_room() -> None:
    with pytest.raises(ValueError, match="at least"):
        split_reply("x", MIN_LIMIT - 1)
    check("```\n" + "z" * 100, MIN_LIMIT)


line_text = st.lists(
    st.sampled_from(["a", "b", " ", "`", "```", "```py", "\n", "\u00e9", "\U0001f600"]),
    max_size=40,
).map("".join)
documents = st.lists(
    st.one_of(
        line_text,
        st.just("```python\n"),
        st.just("```\n"),
        st.text(alphabet="xy \n", min_size=50, max_size=400),
    ),
    max_size=30,
).map("".join)


@settings(max_examples=300)
@given(documents, st.integers(MIN_LIMIT, 300))
def test_properties(text: str, limit: int) -> None:
    chunks = check(text, limit)
    if text:
        assert chunks
    # The added fences sit exactly where a block crosses a cut.
    for before, after in itertools.pairwise(chunks):
        assert bool(before.close) == bool(after.reopen)


@settings(max_examples=200)
@given(documents, st.integers(64, 300))
def test_balanced_input_gives_balanced_chunks(text: str, limit: int) -> None:
    if text.count(FENCE) % 2:
        text += "\n```"
    for chunk in check(text, limit):
        assert chunk.text.count(FENCE) % 2 == 0


@settings(max_examples=100)
@given(st.text(max_size=6000))
def test_any_text_at_discord_limit(text: str) -> None:
    for piece in split_reply(text):
        assert 0 < len(piece) <= 2000
