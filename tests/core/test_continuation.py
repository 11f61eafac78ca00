"""The continuation window state machine."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from picortex.core.continuation import (
    ContinuationState,
    FollowUp,
    NewTrigger,
    NotInWindow,
    Request,
    RestartAnswer,
    expire,
    is_superseded,
    on_answered,
    on_message,
    on_trigger,
    window_for,
)
from picortex.types import Message, User

SECONDS = 10.0
_ids = itertools.count(100)


def msg(content: str, *, author: int = 1, channel: int = 50) -> Message:
    return Message(
        id=next(_ids),
        channel_id=channel,
        author=User(author, f"user{author}"),
        content=content,
        timestamp="2025-01-01T00:00:00+00:00",
    )


def opened(
    text: str = "what is the weather", now: float = 0.0
) -> tuple[ContinuationState, Request]:
    state, new = on_trigger(ContinuationState(SECONDS), msg(text), now)
    return state, new.request


def test_trigger_opens_a_window() -> None:
    trigger = msg("<@9> weather?")
    state, new = on_trigger(ContinuationState(SECONDS), trigger, 5.0, text="weather?")
    assert isinstance(new, NewTrigger)
    assert new.request == Request(trigger.id, 50, 1, (trigger.id,), ("weather?",), 0)
    window = window_for(state, 50, 1, 5.0)
    assert window is not None
    assert window.deadline == 15.0
    assert window.generating


def test_without_a_window_nothing_is_a_follow_up() -> None:
    state, outcome = on_message(ContinuationState(SECONDS), msg("hi"), 0.0, True)
    assert outcome == NotInWindow("no open continuation window")
    assert state.windows == {}


def test_follow_up_while_generating_restarts_with_merged_request() -> None:
    state, request = opened()
    follow = msg("in Paris")
    state, outcome = on_message(state, follow, 3.0, True)
    assert isinstance(outcome, RestartAnswer)
    assert outcome.parent_id == request.parent_id
    assert outcome.text == "what is the weather\nin Paris"
    assert outcome.request.message_ids == (request.parent_id, follow.id)
    assert outcome.request.generation == 1
    assert is_superseded(state, request)
    assert not is_superseded(state, outcome.request)


def test_follow_up_after_the_answer_is_context_not_a_new_answer() -> None:
    state, request = opened()
    state = on_answered(state, request)
    window = window_for(state, 50, 1, 1.0)
    assert window is not None
    assert not window.generating
    state, outcome = on_message(state, msg("and tomorrow?"), 4.0, True)
    assert isinstance(outcome, FollowUp)
    assert outcome.text == "what is the weather\nand tomorrow?"
    assert outcome.parent_id == request.parent_id
    # Nothing is generating: the answered request is not restarted, nor superseded.
    window = window_for(state, 50, 1, 4.0)
    assert window is not None and not window.generating
    assert window.deadline == 4.0 + SECONDS
    assert outcome.request.generation == request.generation
    assert not is_superseded(state, request)
    # A second line after the answer: still context, still nothing generating.
    state, again = on_message(state, msg("and the day after?"), 6.0, True)
    assert isinstance(again, FollowUp)
    assert not is_superseded(state, request)


def test_window_resets_on_each_follow_up() -> None:
    state, _ = opened(now=0.0)
    for t in (9.0, 18.0, 27.0):
        state, outcome = on_message(state, msg("more"), t, True)
        assert not isinstance(outcome, NotInWindow), t
    window = window_for(state, 50, 1, 27.0)
    assert window is not None
    assert window.deadline == 37.0
    assert window.request.texts == ("what is the weather", "more", "more", "more")


def test_window_boundary_is_inclusive_then_closes() -> None:
    state, _ = opened(now=0.0)
    _, outcome = on_message(state, msg("just in time"), 10.0, True)
    assert isinstance(outcome, RestartAnswer)
    state, outcome = on_message(state, msg("too late"), 10.001, True)
    assert outcome == NotInWindow("no open continuation window")
    assert state.windows == {}


def test_only_same_author_and_channel() -> None:
    state, _ = opened()
    _, outcome = on_message(state, msg("me too", author=2), 1.0, True)
    assert isinstance(outcome, NotInWindow)
    _, outcome = on_message(state, msg("elsewhere", channel=51), 1.0, True)
    assert isinstance(outcome, NotInWindow)


def test_untrusted_never_joins() -> None:
    state, _ = opened()
    state2, outcome = on_message(state, msg("sneaky"), 1.0, False)
    assert outcome == NotInWindow("untrusted author")
    assert state2 == state


def test_replayed_message_does_not_join_twice() -> None:
    state, _ = opened()
    follow = msg("in Paris")
    state, _ = on_message(state, follow, 1.0, True)
    state2, outcome = on_message(state, follow, 2.0, True)
    assert outcome == NotInWindow("already part of the request")
    assert state2 == state


def test_stale_answer_does_not_end_the_new_generation() -> None:
    state, request = opened()
    state, outcome = on_message(state, msg("in Paris"), 1.0, True)
    assert isinstance(outcome, RestartAnswer)
    state = on_answered(state, request)  # the cancelled first generation reports late
    window = window_for(state, 50, 1, 1.0)
    assert window is not None
    assert window.generating
    state = on_answered(state, outcome.request)
    window = window_for(state, 50, 1, 1.0)
    assert window is not None
    assert not window.generating


def test_new_trigger_replaces_an_old_window() -> None:
    state, first = opened(now=0.0)
    state, second = on_trigger(state, msg("new question"), 20.0)
    assert window_for(state, 50, 1, 20.0) is not None
    assert not is_superseded(state, first)  # a different request: its answer still posts
    state = on_answered(state, first)
    window = window_for(state, 50, 1, 20.0)
    assert window is not None
    assert window.generating
    assert window.request == second.request


def test_expire_drops_only_past_windows() -> None:
    state, _ = opened(now=0.0)
    state, _ = on_trigger(state, msg("other", author=2), 5.0)
    assert expire(state, 10.0) is state
    later = expire(state, 12.0)
    assert set(later.windows) == {(50, 2)}
    assert window_for(state, 50, 1, 12.0) is None


def test_empty_texts_are_left_out_of_the_merged_request() -> None:
    state, _ = opened()
    _, outcome = on_message(state, msg(""), 1.0, True)
    assert isinstance(outcome, RestartAnswer)
    assert outcome.text == "what is the weather"


# A model check: random messages and answers against a straightforward reference.
events = st.lists(
    st.tuples(
        st.sampled_from(["trigger", "message", "answer"]),
        st.integers(1, 2),  # author
        st.integers(50, 51),  # channel
        st.floats(0, 15),  # time step
        st.booleans(),  # trusted
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(events)
def test_model(steps: list[tuple[str, int, int, float, bool]]) -> None:
    state = ContinuationState(SECONDS)
    now = 0.0
    # reference: key -> [deadline, texts, generating, generation]
    ref: dict[tuple[int, int], list[object]] = {}
    requests: dict[tuple[int, int], Request] = {}
    for kind, author, channel, step, trusted in steps:
        now += step
        key = (channel, author)
        m = msg(f"m{now}", author=author, channel=channel)
        live = key in ref and now <= float(ref[key][0])  # type: ignore[arg-type]
        if kind == "trigger":
            state, new = on_trigger(state, m, now)
            ref[key] = [now + SECONDS, [m.content], True, 0]
            requests[key] = new.request
        elif kind == "message":
            state, outcome = on_message(state, m, now, trusted)
            if not trusted or not live:
                assert isinstance(outcome, NotInWindow)
                if not live:
                    ref.pop(key, None)
                continue
            entry = ref[key]
            was_generating = entry[2]
            texts = entry[1]
            assert isinstance(texts, list)
            texts.append(m.content)
            entry[0] = now + SECONDS
            if was_generating:
                # After the answer, a follow-up is context: nothing generates again.
                entry[3] = int(entry[3]) + 1  # type: ignore[call-overload]
            assert isinstance(outcome, RestartAnswer if was_generating else FollowUp)
            assert outcome.request.texts == tuple(texts)
            assert outcome.request.generation == entry[3]
            requests[key] = outcome.request
        elif key in requests:
            state = on_answered(state, requests[key])
            if key in ref:
                ref[key][2] = False
        for k, entry in ref.items():
            window = window_for(state, k[0], k[1], now)
            if now <= float(entry[0]):  # type: ignore[arg-type]
                assert window is not None
                assert window.generating == entry[2]
            else:
                assert window is None
