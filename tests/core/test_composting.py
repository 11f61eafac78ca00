"""Which personas and stages their failures pause (SPEC 18)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from picortex.core.composting import (
    WINDOW_SECONDS,
    ErrorMark,
    Pause,
    counted_as,
    looked_back,
    paused_persona,
    paused_stage,
    pauses,
)

NOW = 2_000_000_000.0


def _marks(persona: str, stage: str, *ages: float) -> list[ErrorMark]:
    return [ErrorMark(persona, stage, NOW - age) for age in ages]


def test_a_persona_reaching_the_threshold_within_an_hour_is_paused_from_that_error() -> None:
    marks = _marks("sleep", "generate", 300, 200, 100)
    found = pauses(marks, threshold=3, pause_seconds=600, now=NOW)
    assert found == [Pause("persona", "sleep", 3, NOW - 100, NOW + 500)]
    assert paused_persona(found, "sleep") is found[0]
    assert paused_persona(found, "cook") is None
    assert found[0].key == "persona:sleep"
    assert found[0].reason(3) == (
        "3 unresolved persona sleep errors within an hour reached the threshold of 3"
    )


def test_below_the_threshold_nothing_is_paused() -> None:
    assert pauses(_marks("sleep", "post", 20, 10), threshold=3, pause_seconds=600, now=NOW) == []


def test_errors_spread_over_more_than_an_hour_do_not_add_up() -> None:
    marks = _marks("sleep", "generate", 2 * WINDOW_SECONDS, WINDOW_SECONDS / 2, 10)
    assert pauses(marks, threshold=3, pause_seconds=3 * WINDOW_SECONDS, now=NOW) == []


def test_the_pause_ends_after_pause_seconds() -> None:
    marks = _marks("sleep", "generate", 700, 650, 601)
    assert pauses(marks, threshold=3, pause_seconds=600, now=NOW) == []
    assert pauses(marks, threshold=3, pause_seconds=602, now=NOW) != []


def test_a_later_error_at_the_threshold_extends_the_pause() -> None:
    marks = _marks("sleep", "generate", 900, 800, 700, 100)
    (pause,) = pauses(marks, threshold=3, pause_seconds=600, now=NOW)
    assert (pause.errors, pause.since, pause.until) == (4, NOW - 100, NOW + 500)


def test_threshold_zero_pauses_nothing() -> None:
    marks = _marks("sleep", "generate", 3, 2, 1)
    assert pauses(marks, threshold=0, pause_seconds=600, now=NOW) == []


def test_stages_with_a_fallback_pause_whoever_failed_and_default_answers_never_pause() -> None:
    marks = [
        *_marks("sleep", "tiebreak", 30),
        *_marks("default", "tiebreak", 20),
        *_marks("default", "discriminate", 30, 20),
        *_marks("default", "generate", 30, 20, 10),
        *_marks("default", "post", 30, 20, 10),
    ]
    found = pauses(marks, threshold=2, pause_seconds=60, now=NOW)
    assert [(p.kind, p.name) for p in found] == [("stage", "discriminate"), ("stage", "tiebreak")]
    assert paused_stage(found, "tiebreak") is found[1]
    assert paused_stage(found, "generate") is None


def test_personas_come_first_then_by_name() -> None:
    marks = [*_marks("b", "post", 1), *_marks("a", "generate", 1), *_marks("x", "tiebreak", 1)]
    found = pauses(marks, threshold=1, pause_seconds=60, now=NOW)
    assert [p.key for p in found] == ["persona:a", "persona:b", "stage:tiebreak"]


def test_counted_as() -> None:
    assert counted_as(ErrorMark("sleep", "post", NOW)) == ("persona", "sleep")
    assert counted_as(ErrorMark("sleep", "discriminate", NOW)) == ("stage", "discriminate")
    assert counted_as(ErrorMark("default", "generate", NOW)) is None


def test_looked_back_covers_the_window_and_the_pause() -> None:
    assert looked_back(NOW, 600) == NOW - WINDOW_SECONDS - 600


@given(
    st.lists(st.floats(min_value=0, max_value=4 * WINDOW_SECONDS), max_size=30),
    st.integers(min_value=1, max_value=6),
    st.floats(min_value=1, max_value=2 * WINDOW_SECONDS),
)
def test_a_pause_always_rests_on_threshold_errors_within_an_hour(
    ages: list[float], threshold: int, pause_seconds: float
) -> None:
    marks = _marks("sleep", "generate", *ages)
    for pause in pauses(marks, threshold=threshold, pause_seconds=pause_seconds, now=NOW):
        window = [m for m in marks if pause.since - WINDOW_SECONDS <= m.created_at <= pause.since]
        assert len(window) == pause.errors >= threshold
        assert pause.since <= NOW < pause.until == pause.since + pause_seconds
