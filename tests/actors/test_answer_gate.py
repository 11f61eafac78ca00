"""The answer gate's line: at most `capacity` answers at once, the rest in order."""

from __future__ import annotations

from picortex.actors.answer_gate import AnswerGate


def test_answers_beyond_the_capacity_wait_and_go_in_order() -> None:
    gate = AnswerGate(2)
    first, second, third, fourth = (gate.place() for _ in range(4))
    assert [p.admitted.is_set() for p in (first, second, third, fourth)] == [
        True,
        True,
        False,
        False,
    ]
    assert gate.waiting == 2
    second.leave()
    assert third.admitted.is_set() and not fourth.admitted.is_set()
    second.leave()  # leaving twice frees nothing more
    assert not fourth.admitted.is_set()
    first.leave()
    assert fourth.admitted.is_set() and gate.waiting == 0


def test_an_answer_that_gives_up_in_line_frees_no_place() -> None:
    gate = AnswerGate(1)
    running, given_up, next_one = gate.place(), gate.place(), gate.place()
    given_up.leave()  # cancelled while it waited: its place in line goes
    assert gate.waiting == 1 and not next_one.admitted.is_set()
    running.leave()
    assert next_one.admitted.is_set() and not given_up.admitted.is_set()
    next_one.leave()
    assert gate.place().admitted.is_set()  # the capacity is whole again
