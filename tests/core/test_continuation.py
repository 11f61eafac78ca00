"""The continuation window state machine, on Discord's clock (the messages' own times)."""

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
from picortex.types import DISCORD_EPOCH_MS, Message, User

SECONDS = 10.0
# Discord's clock at "0" in these tests, in Unix seconds.
T0 = 1_750_000_000.0
_increments = itertools.count()


def at(seconds: float) -> float:
    """Discord's clock `seconds` after T0."""
    return T0 + seconds


def msg(content: str, *, sent: float = 0.0, author: int = 1, channel: int = 50) -> Message:
    """A message Discord made `sent` seconds after T0 (its id says so, as a snowflake does)."""
    ms = round(at(sent) * 1000) - DISCORD_EPOCH_MS
    return Message(
        id=(ms << 22) | (next(_increments) % 4096),
        channel_id=channel,
        author=User(author, f"user{author}"),
        content=content,
        timestamp="2025-06-15T15:06:40+00:00",
    )


def opened(
    text: str = "what is the weather", sent: float = 0.0
) -> tuple[ContinuationState, Request]:
    state, new = on_trigger(ContinuationState(SECONDS), msg(text, sent=sent))
    return state, new.request


def test_trigger_opens_a_window_from_when_it_was_sent() -> None:
    trigger = msg("<@9> weather?", sent=5.0)
    state, new = on_trigger(ContinuationState(SECONDS), trigger, text="weather?")
    assert isinstance(new, NewTrigger)
    assert new.request == Request(trigger.id, 50, 1, (trigger.id,), ("weather?",), 0)
    window = window_for(state, 50, 1, at(5.0))
    assert window is not None
    assert (window.opened, window.deadline) == (at(5.0), at(15.0))
    assert window.generating


def test_without_a_window_nothing_is_a_follow_up() -> None:
    state, outcome = on_message(ContinuationState(SECONDS), msg("hi"), True)
    assert outcome == NotInWindow("no open continuation window")
    assert state.windows == {}


def test_follow_up_while_generating_restarts_with_merged_request() -> None:
    state, request = opened()
    follow = msg("in Paris", sent=3.0)
    state, outcome = on_message(state, follow, True)
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
    window = window_for(state, 50, 1, at(1.0))
    assert window is not None
    assert not window.generating
    state, outcome = on_message(state, msg("and tomorrow?", sent=4.0), True)
    assert isinstance(outcome, FollowUp)
    assert outcome.text == "what is the weather\nand tomorrow?"
    assert outcome.parent_id == request.parent_id
    # Nothing is generating: the answered request is not restarted, nor superseded.
    window = window_for(state, 50, 1, at(4.0))
    assert window is not None and not window.generating
    assert window.deadline == at(4.0 + SECONDS)
    assert outcome.request.generation == request.generation
    assert not is_superseded(state, request)
    # A second line after the answer: still context, still nothing generating.
    state, again = on_message(state, msg("and the day after?", sent=6.0), True)
    assert isinstance(again, FollowUp)
    assert not is_superseded(state, request)


def test_window_resets_on_each_follow_up() -> None:
    state, _ = opened(sent=0.0)
    for t in (9.0, 18.0, 27.0):
        state, outcome = on_message(state, msg("more", sent=t), True)
        assert not isinstance(outcome, NotInWindow), t
    window = window_for(state, 50, 1, at(27.0))
    assert window is not None
    assert window.deadline == at(37.0)
    assert window.request.texts == ("what is the weather", "more", "more", "more")


def test_window_boundary_is_inclusive_then_closes() -> None:
    state, _ = opened(sent=0.0)
    _, outcome = on_message(state, msg("just in time", sent=10.0), True)
    assert isinstance(outcome, RestartAnswer)
    state, outcome = on_message(state, msg("too late", sent=10.001), True)
    assert outcome == NotInWindow("no open continuation window")
    assert state.windows == {}


def test_a_message_sent_after_the_window_is_its_own_request_however_soon_it_arrives() -> None:
    # After a restart a replayed trigger and a message sent 5 s later arrive together:
    # what counts is when each was sent (SPEC 5.4), and 5 s is past a 1 s window.
    state, request = on_trigger(ContinuationState(1.0), msg("<@9> replayed question"))
    later = msg("<@9> a new question", sent=5.0)
    state, outcome = on_message(state, later, True)
    assert outcome == NotInWindow("no open continuation window")
    state, second = on_trigger(state, later)
    assert not is_superseded(state, request.request)  # both are answered, each on its own
    assert second.request.message_ids == (later.id,)


def test_a_message_sent_before_the_trigger_is_no_follow_up() -> None:
    # Caught up after the trigger (or delivered out of order): it came first, so it is not a
    # follow-up of it, however close.
    state, _ = opened(sent=5.0)
    _, outcome = on_message(state, msg("earlier words", sent=4.5), True)
    assert outcome == NotInWindow("no open continuation window")


def test_a_follow_up_delivered_out_of_order_never_shortens_the_window() -> None:
    state, _ = opened(sent=0.0)
    state, _ = on_message(state, msg("second", sent=8.0), True)
    state, outcome = on_message(state, msg("first", sent=3.0), True)
    assert isinstance(outcome, RestartAnswer)
    window = window_for(state, 50, 1, at(18.0))
    assert window is not None and window.deadline == at(18.0)


def test_no_window_at_zero_seconds_even_within_one_millisecond() -> None:
    state, _ = on_trigger(ContinuationState(0.0), msg("<@9> one", sent=2.0))
    _, outcome = on_message(state, msg("two", sent=2.0), True)  # the same millisecond
    assert outcome == NotInWindow("no open continuation window")


def test_only_same_author_and_channel() -> None:
    state, _ = opened()
    _, outcome = on_message(state, msg("me too", sent=1.0, author=2), True)
    assert isinstance(outcome, NotInWindow)
    _, outcome = on_message(state, msg("elsewhere", sent=1.0, channel=51), True)
    assert isinstance(outcome, NotInWindow)


def test_untrusted_never_joins() -> None:
    state, _ = opened()
    state2, outcome = on_message(state, msg("sneaky", sent=1.0), False)
    assert outcome == NotInWindow("untrusted author")
    assert state2 == state


def test_replayed_message_does_not_join_twice() -> None:
    state, _ = opened()
    follow = msg("in Paris", sent=1.0)
    state, _ = on_message(state, follow, True)
    state2, outcome = on_message(state, follow, True)
    assert outcome == NotInWindow("already part of the request")
    assert state2 == state


def test_stale_answer_does_not_end_the_new_generation() -> None:
    state, request = opened()
    state, outcome = on_message(state, msg("in Paris", sent=1.0), True)
    assert isinstance(outcome, RestartAnswer)
    state = on_answered(state, request)  # the cancelled first generation reports late
    window = window_for(state, 50, 1, at(1.0))
    assert window is not None
    assert window.generating
    state = on_answered(state, outcome.request)
    window = window_for(state, 50, 1, at(1.0))
    assert window is not None
    assert not window.generating


def test_new_trigger_replaces_an_old_window() -> None:
    state, first = opened(sent=0.0)
    state, second = on_trigger(state, msg("new question", sent=20.0))
    assert window_for(state, 50, 1, at(20.0)) is not None
    assert not is_superseded(state, first)  # a different request: its answer still posts
    state = on_answered(state, first)
    window = window_for(state, 50, 1, at(20.0))
    assert window is not None
    assert window.generating
    assert window.request == second.request


def test_expire_drops_only_past_windows() -> None:
    state, _ = opened(sent=0.0)
    state, _ = on_trigger(state, msg("other", sent=5.0, author=2))
    assert expire(state, at(10.0)) is state
    later = expire(state, at(12.0))
    assert set(later.windows) == {(50, 2)}
    assert window_for(state, 50, 1, at(12.0)) is None


def test_empty_texts_are_left_out_of_the_merged_request() -> None:
    state, _ = opened()
    _, outcome = on_message(state, msg("", sent=1.0), True)
    assert isinstance(outcome, RestartAnswer)
    assert outcome.text == "what is the weather"


# A model check: random messages and answers against a straightforward reference.
events = st.lists(
    st.tuples(
        st.sampled_from(["trigger", "message", "answer"]),
        st.integers(1, 2),  # author
        st.integers(50, 51),  # channel
        st.integers(0, 15_000),  # milliseconds since the message before, by Discord's clock
        st.booleans(),  # trusted
    ),
    max_size=40,
)


@settings(max_examples=200)
@given(events)
def test_model(steps: list[tuple[str, int, int, int, bool]]) -> None:
    state = ContinuationState(SECONDS)
    sent = 0.0
    # reference: key -> [deadline, texts, generating, generation]
    ref: dict[tuple[int, int], list[object]] = {}
    requests: dict[tuple[int, int], Request] = {}
    for kind, author, channel, step, trusted in steps:
        sent = round(sent + step / 1000, 3)
        key = (channel, author)
        m = msg(f"m{sent}", sent=sent, author=author, channel=channel)
        now = m.sent_at
        live = key in ref and now <= float(ref[key][0])  # type: ignore[arg-type]
        if kind == "trigger":
            state, new = on_trigger(state, m)
            ref[key] = [now + SECONDS, [m.content], True, 0]
            requests[key] = new.request
        elif kind == "message":
            state, outcome = on_message(state, m, trusted)
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
