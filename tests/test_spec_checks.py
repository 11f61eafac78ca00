"""The SPEC checks of tests/spec.py catch what they are meant to catch."""

from __future__ import annotations

import pytest

from tests.spec import check_reply_parts


def _answer() -> str:
    lines = [f"Step {n}: do the thing." for n in range(40)]
    code = ["```python", *(f"x_{n} = {n} * {n}" for n in range(120)), "```"]
    return "\n".join([*lines, *code, "That is all."])


def _split_by_hand(answer: str) -> list[str]:
    """The answer cut by hand where SPEC 4 allows, the code block closed and reopened."""
    lines = answer.splitlines(keepends=True)
    first = "".join(lines[:100])  # 40 steps, the fence line and 59 lines of code
    second = "".join(lines[100:])
    return [first + "```", "```python\n" + second]


def test_a_correct_split_passes() -> None:
    answer = _answer()
    parts = _split_by_hand(answer)
    assert all(len(p) <= 2000 for p in parts)
    check_reply_parts(answer, parts)
    check_reply_parts("short", ["short"])
    # A line longer than a message cannot wait for its end.
    check_reply_parts("x" * 2500 + "\nend", ["x" * 2000, "x" * 500 + "\nend"])


@pytest.mark.parametrize(
    "breaks",
    [
        lambda parts: [parts[0][:-3], parts[1]],  # the block is not closed
        lambda parts: [parts[0], parts[1].removeprefix("```python\n")],  # nor reopened
        lambda parts: [parts[0][:-10] + parts[0][-3:], parts[1]],  # text lost
        lambda parts: [parts[0][:-4] + "```", parts[1]],  # cut inside a line
        lambda parts: [parts[0] + "x" * 2000, parts[1]],  # too long
        lambda parts: parts[:1],  # the end is missing
        lambda parts: [parts[0][:100], parts[0][100:], parts[1]],  # a short line cut
    ],
)
def test_a_wrong_split_fails(breaks: object) -> None:
    answer = _answer()
    assert callable(breaks)
    with pytest.raises(AssertionError):
        check_reply_parts(answer, breaks(_split_by_hand(answer)))
