"""What a streamed reply writes next (SPEC 16): sentences, splits, one edit at a time."""

from __future__ import annotations

import pytest

from picortex.core import stream
from tests.spec import check_reply_parts


@pytest.mark.parametrize(
    ("text", "ready"),
    [
        ("", False),
        ("Sure", False),
        ("Sure thing", False),
        ("Pi is 3.14 and", False),
        ("Sure thing. ", True),
        ("Really? Yes", True),
        ("A list:\n", True),
        ('He said "go." Then', True),
        ("x" * stream.FIRST_POST_MAX_CHARS, True),
    ],
)
def test_the_first_post_waits_for_a_sentence(text: str, ready: bool) -> None:
    assert stream.first_sentence_ready(text) is ready


def test_writes_post_new_messages_and_edit_one_message_at_a_time() -> None:
    first = "Intro. " + "a" * 100
    assert stream.next_writes([], first, can_edit=True) == [stream.Write(0, first, new=True)]
    grown = first + "\n" + "\n".join(f"line {n} " + "b" * 60 for n in range(60))
    writes = stream.next_writes([first], grown, can_edit=True)
    wanted = [w.text for w in writes]
    check_reply_parts(grown, wanted)  # the messages SPEC 4 asks for
    assert len(wanted) >= 3
    # The first message is completed, the rest posted; never two edits at once.
    assert writes[0] == stream.Write(0, wanted[0], new=False)
    assert [w.index for w in writes[1:]] == list(range(1, len(wanted)))
    assert all(w.new for w in writes[1:])
    assert sum(1 for w in writes if not w.new) == 1
    # Without an edit allowed, only the posts.
    assert [w.new for w in stream.next_writes([first], grown, can_edit=False)] == [True] * (
        len(wanted) - 1
    )
    assert stream.is_settled(wanted, grown)
    assert stream.next_writes(wanted, grown, can_edit=True) == []


def test_a_cut_answer_keeps_its_text_and_says_so_in_one_line() -> None:
    assert stream.with_cut_notice("Half an answer  ") == "Half an answer\n" + stream.CUT_NOTICE
    assert stream.with_cut_notice("") == stream.CUT_NOTICE
