"""Reaction polls (SPEC 6): parse `poll ...`, count number-emoji votes, format the messages.

Forms: `poll "Q" A // B [// C [// D]]` and `poll Q | A | B`; `//` needs whitespace both sides.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Final

import attrs

from picortex.types import Snowflake

MIN_OPTIONS: Final = 2
MAX_OPTIONS: Final = 4  # one number emoji per option, and four keeps a poll readable
MAX_OPTION_CHARS: Final = 80
# Keeps the poll message well under Discord's 2000-character limit with four long options.
MAX_QUESTION_CHARS: Final = 1000

NUMBER_EMOJI: Final[tuple[str, ...]] = (
    "1\ufe0f\u20e3",
    "2\ufe0f\u20e3",
    "3\ufe0f\u20e3",
    "4\ufe0f\u20e3",
)

POLL_HELP: Final = (
    'Start a poll with `poll "Question" Option 1 // Option 2` (up to 4 options) '
    "or `poll Question | Option 1 | Option 2`; vote by reacting with the number emoji."
)

_OPEN_QUOTES: Final = '"\u201c'
_CLOSE_QUOTES: Final = '"\u201d'
# `|` with any spacing, or `//` with whitespace on both sides.
_SEPARATOR: Final = re.compile(r"\s*\|\s*|\s+//\s+")


@attrs.frozen
class Poll:
    """A valid poll: a question and 2-4 options."""

    question: str
    options: tuple[str, ...]


@attrs.frozen
class PollHelp:
    """A bare `poll` or `poll help`: show how to start one."""


@attrs.frozen
class PollError:
    """A poll that cannot be started; `message` is one sentence for the user."""

    message: str


@attrs.frozen
class PollResult:
    """Votes per option (in option order) once the bot's own reactions are left out."""

    counts: tuple[int, ...]

    @property
    def total(self) -> int:
        """Every counted reaction."""
        return sum(self.counts)

    @property
    def winners(self) -> tuple[int, ...]:
        """Indexes of the options with the most votes; empty when nobody voted."""
        best = max(self.counts, default=0)
        if best == 0:
            return ()
        return tuple(i for i, n in enumerate(self.counts) if n == best)


def parse_poll(text: str) -> Poll | PollHelp | PollError:
    """Parse the text after the word `poll`; never raises."""
    body = text.strip()
    if body.lower() in ("", "help"):
        return PollHelp()
    if body[0] in _OPEN_QUOTES:
        close = _find_close_quote(body, 1)
        if close < 0:
            return PollError("The question's closing quote is missing.")
        question = body[1:close].strip()
        parts = _SEPARATOR.split(" " + body[close + 1 :].strip())
        # The text after the quote may start with a separator (`"Q" | A | B`) or not.
        options = [p.strip() for p in parts]
        if options and options[0] == "":
            options = options[1:]
    else:
        parts = _SEPARATOR.split(body)
        if len(parts) < 2:
            return PollError(
                "Separate the question and the options with `|` or ` // ` "
                '(or put the question in "quotes").'
            )
        question = parts[0].strip()
        options = [p.strip() for p in parts[1:]]
    return _check(question, options)


def check_poll(question: str, options: list[str]) -> Poll | PollError:
    """A poll from a question and options given separately (a slash command's fields)."""
    return _check(question.strip(), [o.strip() for o in options])


def _find_close_quote(text: str, start: int) -> int:
    for i in range(start, len(text)):
        if text[i] in _CLOSE_QUOTES:
            return i
    return -1


def _check(question: str, options: list[str]) -> Poll | PollError:
    if not question:
        return PollError("The poll needs a question.")
    if len(question) > MAX_QUESTION_CHARS:
        return PollError(f"The question is longer than {MAX_QUESTION_CHARS} characters.")
    if not MIN_OPTIONS <= len(options) <= MAX_OPTIONS:
        return PollError(
            f"A poll needs {MIN_OPTIONS} to {MAX_OPTIONS} options; this one has {len(options)}."
        )
    for number, option in enumerate(options, start=1):
        if not option:
            return PollError(f"Option {number} is empty.")
        if len(option) > MAX_OPTION_CHARS:
            return PollError(f"Option {number} is longer than {MAX_OPTION_CHARS} characters.")
    return Poll(question, tuple(options))


def emoji_index(emoji: str) -> int | None:
    """The option index (0-3) a reaction emoji votes for, or None for any other emoji.

    Clients sometimes send keycaps without the variation selector, so it is optional.
    """
    bare = emoji.replace("\ufe0f", "")
    for i, number in enumerate(NUMBER_EMOJI):
        if bare == number.replace("\ufe0f", ""):
            return i
    return None


def tally(
    reactions: Mapping[str, Collection[Snowflake]],
    options: Sequence[str],
    bot_user_id: Snowflake | None,
) -> PollResult:
    """Count votes: each user's number reaction is one vote (several per user allowed).

    Args:
        reactions: emoji -> the users who reacted with it (as Discord lists them).
        options: the poll's options; reactions past the last option are not votes.
        bot_user_id: the bot, whose seeding reactions never count.
    """
    voters: list[set[Snowflake]] = [set() for _ in options[:MAX_OPTIONS]]
    for emoji, users in reactions.items():
        index = emoji_index(emoji)
        if index is None or index >= len(voters):
            continue
        voters[index].update(u for u in users if u != bot_user_id)
    return PollResult(tuple(len(v) for v in voters))


def format_poll(question: str, options: Sequence[str], seconds: float | None = None) -> str:
    """The poll message; the bot then seeds one number reaction per option."""
    lines = [f"\U0001f4ca **{question}**"]
    lines += [f"{NUMBER_EMOJI[i]} {option}" for i, option in enumerate(options[:MAX_OPTIONS])]
    closing = f" Voting closes in {_duration(seconds)}." if seconds is not None else ""
    lines.append(f"React with a number to vote.{closing}")
    return "\n".join(lines)


def format_result(question: str, options: Sequence[str], result: PollResult) -> str:
    """The result message posted when the poll closes."""
    lines = [f"\U0001f4ca Poll closed: **{question}**"]
    for i, option in enumerate(options[:MAX_OPTIONS]):
        n = result.counts[i] if i < len(result.counts) else 0
        lines.append(f"{NUMBER_EMOJI[i]} {option}: {n} vote{'' if n == 1 else 's'}")
    winners = [options[i] for i in result.winners if i < len(options)]
    if not winners:
        lines.append("No votes.")
    elif len(winners) == 1:
        lines.append(f"Winner: {winners[0]}")
    else:
        lines.append("Tie: " + ", ".join(winners[:-1]) + f" and {winners[-1]}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "a while"
    whole = max(0, round(seconds))
    if whole >= 60 and whole % 60 == 0:
        minutes = whole // 60
        return f"{minutes} minute{'' if minutes == 1 else 's'}"
    return f"{whole} second{'' if whole == 1 else 's'}"
