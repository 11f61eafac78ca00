"""A merged request as the model gets it: its follow-ups held to `context_chars` (SPEC 9)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from picortex.core.continuation import Request
from picortex.core.merged import held_request


def merged(*texts: str) -> Request:
    return Request(
        parent_id=100,
        channel_id=50,
        author_id=1,
        message_ids=tuple(100 + n for n in range(len(texts))),
        texts=texts,
        generation=len(texts) - 1,
    )


def test_a_request_that_fits_is_the_request_itself() -> None:
    request = merged("x" * 3000, "more " * 100, "and this")
    assert held_request(request, 4000) is request
    assert held_request(merged("y" * 9000), 4000).text == "y" * 9000  # a trigger is whole


def test_a_storm_keeps_the_trigger_and_the_newest_follow_ups_that_fit() -> None:
    storm = merged("the question", *(f"{n}" * 1000 for n in range(1, 8)))
    held = held_request(storm, 3500)
    assert held.texts == ("the question", "5" * 1000, "6" * 1000, "7" * 1000)
    assert held.message_ids == (100, 105, 106, 107)
    assert (held.parent_id, held.generation) == (storm.parent_id, storm.generation)


def test_the_newest_follow_up_always_goes_cut_to_fit() -> None:
    held = held_request(merged("q", "old", "z" * 500), 100)
    assert held.texts == ("q", "z" * 99 + "…")
    assert held.message_ids == (100, 102)


@given(
    texts=st.lists(st.text(max_size=300), min_size=1, max_size=12),
    max_chars=st.integers(min_value=1, max_value=1000),
)
def test_follow_ups_never_exceed_the_limit(texts: list[str], max_chars: int) -> None:
    request = merged(*texts)
    held = held_request(request, max_chars)
    assert held.texts[0] == texts[0]
    assert sum(map(len, held.texts[1:])) <= max_chars
    assert len(held.texts) == len(held.message_ids)
    assert set(held.message_ids) <= set(request.message_ids)
    assert list(held.message_ids) == sorted(held.message_ids)
    if len(texts) > 1:
        assert held.message_ids[-1] == request.message_ids[-1]  # the newest always goes
