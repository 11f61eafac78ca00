"""Poll parsing, vote counting and the poll messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.poll import (
    MAX_OPTION_CHARS,
    NUMBER_EMOJI,
    POLL_HELP,
    Poll,
    PollError,
    PollHelp,
    PollResult,
    emoji_index,
    format_poll,
    format_result,
    parse_poll,
    tally,
)

BOT = 99


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '"What country is best" Sweden // Denmark // Madagaskar',
            Poll("What country is best", ("Sweden", "Denmark", "Madagaskar")),
        ),
        ("Lunch? | Pizza | Sushi", Poll("Lunch?", ("Pizza", "Sushi"))),
        ("Lunch?|Pizza|Sushi", Poll("Lunch?", ("Pizza", "Sushi"))),
        ("Lunch? // Pizza // Sushi", Poll("Lunch?", ("Pizza", "Sushi"))),
        ('"Q" | A | B', Poll("Q", ("A", "B"))),
        ('"Q" // A // B', Poll("Q", ("A", "B"))),
        ("\u201cQ?\u201d A // B", Poll("Q?", ("A", "B"))),
        ('"Is | this // one?" A // B', Poll("Is | this // one?", ("A", "B"))),
        ('"Q" a // b // c // d', Poll("Q", ("a", "b", "c", "d"))),
        (
            '"Which site?" https://a.example // https://b.example/x//y',
            Poll("Which site?", ("https://a.example", "https://b.example/x//y")),
        ),
        ("Best? | x //y | z", Poll("Best?", ("x //y", "z"))),
        ("Mixed? | a // b", Poll("Mixed?", ("a", "b"))),
        ("  Q | A | B  ", Poll("Q", ("A", "B"))),
    ],
)
def test_parse_valid(text: str, expected: Poll) -> None:
    assert parse_poll(text) == expected


@pytest.mark.parametrize("text", ["", "   ", "help", "HELP"])
def test_parse_help(text: str) -> None:
    assert parse_poll(text) == PollHelp()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('"Q A // B', "The question's closing quote is missing."),
        ("Lunch? Pizza Sushi", None),
        ("Q //A //B", None),
        ('"Q" A', "A poll needs 2 to 4 options; this one has 1."),
        ('"Q"', "A poll needs 2 to 4 options; this one has 0."),
        ("Q | A | B | C | D | E", "A poll needs 2 to 4 options; this one has 5."),
        ("Q | A | | B", "Option 2 is empty."),
        ("Q | A |", "Option 2 is empty."),
        ('"" A // B', "The poll needs a question."),
        (" | A | B", "The poll needs a question."),
        ("Q | A | " + "x" * 81, "Option 2 is longer than 80 characters."),
        ("Q" * 1001 + " | A | B", "The question is longer than 1000 characters."),
    ],
)
def test_parse_errors(text: str, message: str | None) -> None:
    result = parse_poll(text)
    assert isinstance(result, PollError)
    if message is None:
        assert result.message.startswith("Separate the question and the options")
    else:
        assert result.message == message


def test_option_of_exactly_80_chars_is_fine() -> None:
    result = parse_poll("Q | A | " + "x" * MAX_OPTION_CHARS)
    assert isinstance(result, Poll)


@given(st.text())
def test_parse_never_raises(text: str) -> None:
    result = parse_poll(text)
    if isinstance(result, Poll):
        assert 2 <= len(result.options) <= 4
        assert all(0 < len(o) <= 80 and o == o.strip() for o in result.options)
        assert result.question


piece = st.text(
    alphabet=st.characters(
        blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"),
        blacklist_characters='|/"\u201c\u201d',
    ),
    min_size=1,
    max_size=30,
)


@given(piece, st.lists(piece, min_size=2, max_size=4), st.booleans())
def test_round_trip_both_forms(question: str, options: list[str], quoted: bool) -> None:
    quoted_form = f'"{question}" ' + " // ".join(options)
    text = quoted_form if quoted else " | ".join([question, *options])
    assert parse_poll(text) == Poll(question, tuple(options))


def test_emoji_index() -> None:
    assert [emoji_index(e) for e in NUMBER_EMOJI] == [0, 1, 2, 3]
    assert emoji_index("1\u20e3") == 0  # keycap without the variation selector
    assert emoji_index("5\ufe0f\u20e3") is None
    assert emoji_index("\U0001f44d") is None
    assert emoji_index("custom:123") is None


def test_tally_excludes_the_bot_and_counts_each_reaction() -> None:
    reactions = {
        NUMBER_EMOJI[0]: {BOT, 1, 2},
        NUMBER_EMOJI[1]: {BOT, 1},  # a user may vote for several options
        NUMBER_EMOJI[2]: {BOT, 3},  # past the last option: not a vote
        "\U0001f44d": {4, 5},
    }
    result = tally(reactions, ["A", "B"], BOT)
    assert result == PollResult((2, 1))
    assert result.total == 3
    assert result.winners == (0,)


def test_tally_with_only_seed_reactions_has_no_winner() -> None:
    result = tally({e: {BOT} for e in NUMBER_EMOJI}, ["A", "B", "C"], BOT)
    assert result.counts == (0, 0, 0)
    assert result.winners == ()


def test_tally_merges_keycap_spellings() -> None:
    result = tally({NUMBER_EMOJI[0]: [1], "1\u20e3": [1, 2]}, ["A", "B"], BOT)
    assert result.counts == (2, 0)


@given(
    st.dictionaries(
        st.sampled_from([*NUMBER_EMOJI, "x"]), st.sets(st.integers(0, 200)), max_size=5
    ),
    st.integers(2, 4),
)
def test_tally_never_counts_the_bot(reactions: dict[str, set[int]], n: int) -> None:
    result = tally(reactions, ["o"] * n, BOT)
    assert len(result.counts) == n
    for i, count in enumerate(result.counts):
        voters = reactions.get(NUMBER_EMOJI[i], set())
        assert count == len(voters - {BOT})


def test_format_poll() -> None:
    assert format_poll("Lunch?", ["Pizza", "Sushi"], 120) == (
        "\U0001f4ca **Lunch?**\n"
        "1\ufe0f\u20e3 Pizza\n"
        "2\ufe0f\u20e3 Sushi\n"
        "React with a number to vote. Voting closes in 2 minutes."
    )
    assert format_poll("Q", ["a", "b"]).endswith("React with a number to vote.")
    assert format_poll("Q", ["a", "b"], 45).endswith("closes in 45 seconds.")
    assert format_poll("Q", ["a", "b"], 60).endswith("closes in 1 minute.")
    assert format_poll("Q", ["a", "b"], float("inf")).endswith("closes in a while.")


def test_format_result() -> None:
    assert format_result("Lunch?", ["Pizza", "Sushi"], PollResult((3, 1))) == (
        "\U0001f4ca Poll closed: **Lunch?**\n"
        "1\ufe0f\u20e3 Pizza: 3 votes\n"
        "2\ufe0f\u20e3 Sushi: 1 vote\n"
        "Winner: Pizza"
    )
    tie = format_result("Q", ["a", "b", "c"], PollResult((2, 2, 2)))
    assert tie.endswith("Tie: a, b and c")
    assert format_result("Q", ["a", "b"], PollResult((0, 0))).endswith("No votes.")


def test_help_mentions_both_forms() -> None:
    assert "//" in POLL_HELP
    assert "|" in POLL_HELP
