"""The discriminator's prompt and answer: render a capped prompt, parse the JSON verdict.

Sizes are counted in UTF-8 bytes ("chars" below), which equals characters for ASCII text and
over-counts other scripts, so the 3-chars-per-token estimate stays conservative everywhere.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Final, Literal

import attrs
import orjson

from picortex.core.attention import AttentionDecision
from picortex.core.context import UNTRUSTED_MARK, quoted
from picortex.errors import PromptTooLarge as PromptTooLarge

ChatKind = Literal["dm", "group", "thread"]

CLASSIFICATION_BUDGET_USD: Final = 0.001  # SPEC 7: one classification costs less than this
# Keep 10% of the budget back for the tokenizer doing worse than the estimate.
COST_SAFETY: Final = 0.9
CHARS_PER_TOKEN: Final = 3  # conservative; English averages closer to 4
# Role markers and message framing the Messages API adds around the prompt.
REQUEST_OVERHEAD_TOKENS: Final = 30
# The verdict is one short JSON object (~30 tokens); a longer answer is cut and fails to parse.
MAX_OUTPUT_TOKENS: Final = 100
# A verdict needs a few recent messages; a bigger prompt adds latency against the timeout,
# not accuracy, even when a cheap model would allow more.
ABSOLUTE_MAX_PROMPT_CHARS: Final = 12_000
HISTORY_LINE_MAX_CHARS: Final = 400  # one earlier message in the history block
MESSAGE_MAX_CHARS: Final = 1_500  # the new message
NAME_MAX_CHARS: Final = 64  # author, chat and bot names
REASON_MAX_CHARS: Final = 200  # the model's reason as it lands in the `decision` event
ELLIPSIS: Final = "…"
LINE_BREAK: Final = " ⏎ "  # one line per value, so a chat's name cannot fake a prompt line

_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
# Every line break `str.splitlines` knows: CR, LF, VT, FF, FS, GS, RS, NEL, U+2028, U+2029.
_BREAKS = re.compile(r"\s*[\r\n\v\f\x1c\x1d\x1e\x85\u2028\u2029]+\s*")
_FENCED = re.compile(r"```(?:[ \t]*json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_KIND_TEXT: Final[Mapping[str, str]] = {
    "dm": "direct message",
    "group": "group channel",
    "thread": "thread",
}


@attrs.frozen
class ChatMeta:
    """What the prompt tells the model about the chat."""

    chat_id: str
    kind: ChatKind
    name: str
    bot_name: str


@attrs.frozen
class HistoryLine:
    """One earlier message as the discriminator sees it; `trusted` is False for people the
    bot does not trust (their line is marked)."""

    author: str
    text: str
    trusted: bool = True


@attrs.frozen
class DiscriminatorAnswer:
    """A well-formed verdict from the model."""

    should_respond: bool
    reason: str
    confidence: float | None = None  # 0-1, when the model gave one


@attrs.frozen
class ParseFailure:
    """Why the model's answer was not a verdict."""

    reason: str


def prompt_chars(text: str) -> int:
    """The size of `text` as the cap counts it (UTF-8 bytes)."""
    return len(text.encode("utf-8"))


def estimate_tokens(text: str) -> int:
    """A conservative token count for `text` at `CHARS_PER_TOKEN`."""
    return math.ceil(prompt_chars(text) / CHARS_PER_TOKEN)


def worst_case_cost_usd(
    prompt: str,
    price_input_per_mtok: float,
    price_output_per_mtok: float,
    max_output_tokens: int = MAX_OUTPUT_TOKENS,
) -> float:
    """What one classification with `prompt` costs at most (estimated input, full output)."""
    tokens_in = estimate_tokens(prompt) + REQUEST_OVERHEAD_TOKENS
    return (tokens_in * price_input_per_mtok + max_output_tokens * price_output_per_mtok) / 1e6


def max_prompt_chars(
    price_input_per_mtok: float,
    price_output_per_mtok: float,
    max_output_tokens: int = MAX_OUTPUT_TOKENS,
) -> int:
    """The largest rendered prompt whose classification stays under the budget.

    Returns 0 when the output alone would use up the budget (the caller then does not call
    and fails open or closed as for any unavailable model).
    """
    if price_input_per_mtok < 0 or price_output_per_mtok < 0 or max_output_tokens < 0:
        raise ValueError("prices and token counts must not be negative")
    budget = CLASSIFICATION_BUDGET_USD * COST_SAFETY
    left = budget - max_output_tokens * price_output_per_mtok / 1e6
    if left <= 0:
        return 0
    if price_input_per_mtok == 0:
        return ABSOLUTE_MAX_PROMPT_CHARS
    tokens = math.floor(left * 1e6 / price_input_per_mtok) - REQUEST_OVERHEAD_TOKENS
    return max(0, min(ABSOLUTE_MAX_PROMPT_CHARS, tokens * CHARS_PER_TOKEN))


def _clip(text: str, limit: int) -> str:
    """`text` cut to at most `limit` chars (UTF-8 bytes), marked with an ellipsis if cut."""
    if prompt_chars(text) <= limit:
        return text
    room = limit - prompt_chars(ELLIPSIS)
    if room <= 0:
        return ""
    return text.encode("utf-8")[:room].decode("utf-8", "ignore").rstrip() + ELLIPSIS


def _one_line(text: str) -> str:
    return _BREAKS.sub(LINE_BREAK, text.strip())


def _line(author: str, text: str, limit: int, *, trusted: bool = True) -> str:
    """One message on one line, fenced like every context line: the name and the text are
    JSON strings (no break or quote inside them can start a line of its own), and only the
    `untrusted` mark is ours."""
    name = _clip(author.strip(), NAME_MAX_CHARS) or "unknown"
    mark = "" if trusted else UNTRUSTED_MARK + " "
    return f"{mark}{quoted(name)}: {quoted(_clip(text.strip(), limit))}"


def _history_block(lines: Sequence[str], omitted: int) -> str:
    noun = "message" if omitted == 1 else "messages"
    out = [f"({omitted} earlier {noun} left out)"] if omitted else []
    out.extend(lines)
    return "\n".join(out) if out else "(none)"


def _substitute(template: str, values: Mapping[str, str]) -> str:
    # One pass, so text inside a message that looks like a placeholder stays as it is.
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def render_prompt(
    template: str,
    *,
    history: Sequence[HistoryLine],
    message: tuple[str, str],
    chat: ChatMeta,
    max_chars: int = ABSOLUTE_MAX_PROMPT_CHARS,
) -> str:
    """Fill the template's placeholders and keep the result within `max_chars`.

    Placeholders: `{{bot_name}}`, `{{chat_kind}}`, `{{chat_name}}`, `{{chat_id}}`,
    `{{history}}` and `{{message}}`; unknown ones are left as written. Each earlier message
    is one line `"author": "text"` (JSON strings; `untrusted` first for people the bot does
    not trust), oldest first. Over the cap, the oldest history goes first, then the new
    message is shortened.

    Args:
        template: the chat's prompt (the default template or a hand-edited one).
        history: earlier messages, oldest first.
        message: the new message as (author, text).
        chat: the chat's metadata.
        max_chars: the cap, normally `max_prompt_chars(...)` at the model's prices.

    Raises:
        PromptTooLarge: the template and metadata alone do not fit.
    """
    values = {
        "bot_name": _clip(_one_line(chat.bot_name), NAME_MAX_CHARS),
        "chat_kind": _KIND_TEXT.get(chat.kind, chat.kind),
        "chat_name": _clip(_one_line(chat.name), NAME_MAX_CHARS),
        "chat_id": _clip(_one_line(chat.chat_id), NAME_MAX_CHARS),
    }
    lines = [_line(h.author, h.text, HISTORY_LINE_MAX_CHARS, trusted=h.trusted) for h in history]
    author, text = message
    new = _line(author, text, MESSAGE_MAX_CHARS)
    for start in range(len(lines) + 1):
        values["history"] = _history_block(lines[start:], start)
        values["message"] = new
        rendered = _substitute(template, values)
        if prompt_chars(rendered) <= max_chars:
            return rendered
    # No history left and still too big: find the longest cut of the new message that fits.
    low, high, best = 0, MESSAGE_MAX_CHARS, None
    while low <= high:
        mid = (low + high) // 2
        values["message"] = _line(author, text, mid)
        rendered = _substitute(template, values)
        if prompt_chars(rendered) <= max_chars:
            best, low = rendered, mid + 1
        else:
            high = mid - 1
    if best is None:
        raise PromptTooLarge(
            f"the discriminator prompt does not fit in {max_chars} characters even without "
            "history; shorten the prompt or use a cheaper discriminator model"
        )
    return best


def _excerpt(text: str) -> str:
    return repr(_clip(_one_line(text), 80))


def parse_answer(text: str) -> DiscriminatorAnswer | ParseFailure:
    """Read the model's verdict: one JSON object, bare or alone in one fenced code block.

    The object must have a boolean `should_respond` and a string `reason`, and may have a
    `confidence` from 0 to 1; other keys are ignored. Prose around the JSON is not accepted.
    """
    body = text.strip()
    if not body:
        return ParseFailure("the discriminator gave an empty answer")
    if body.startswith("```"):
        fenced = _FENCED.fullmatch(body)
        if fenced is None or "```" in fenced.group(1):
            return ParseFailure(
                f"the discriminator's answer is not one code block: {_excerpt(text)}"
            )
        body = fenced.group(1).strip()
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return ParseFailure(f"the discriminator's answer is not JSON: {_excerpt(text)}")
    if not isinstance(data, dict):
        return ParseFailure(f"the discriminator's answer is not a JSON object: {_excerpt(text)}")
    should = data.get("should_respond")
    reason = data.get("reason")
    if not isinstance(should, bool):
        return ParseFailure("the discriminator's answer has no boolean should_respond")
    if not isinstance(reason, str):
        return ParseFailure("the discriminator's answer has no string reason")
    confidence = data.get("confidence")
    if confidence is None:
        return DiscriminatorAnswer(should, reason)
    if (
        not isinstance(confidence, int | float)
        or isinstance(confidence, bool)
        or not 0 <= confidence <= 1
    ):
        return ParseFailure("the discriminator's confidence is not a number from 0 to 1")
    return DiscriminatorAnswer(should, reason, float(confidence))


def decision_from_answer(
    answer: DiscriminatorAnswer, threshold: float | None = None
) -> AttentionDecision:
    """The attention decision for a well-formed verdict.

    With the chat's `threshold`, a verdict to respond whose `confidence` is below it stays
    quiet; a verdict without a confidence stands as given.
    """
    why = _clip(_one_line(answer.reason), REASON_MAX_CHARS) or "no reason given"
    confidence = answer.confidence
    if not answer.should_respond:
        return AttentionDecision("skip", f"discriminator: {why}", False, confidence)
    if threshold is not None and confidence is not None and confidence < threshold:
        return AttentionDecision(
            "skip",
            f"discriminator: confidence {confidence:g} is below the chat's threshold"
            f" {threshold:g}: {why}",
            False,
            confidence,
        )
    return AttentionDecision("respond", f"discriminator: {why}", True, confidence)


def fail_decision(is_dm: bool, reason: str) -> AttentionDecision:
    """The decision when the discriminator gave no verdict (bad JSON, API error, timeout).

    A 1:1 DM fails open (someone wrote to the bot alone); a group fails closed.
    """
    if is_dm:
        return AttentionDecision("respond", f"{reason}; failing open in a direct message", True)
    return AttentionDecision("skip", f"{reason}; failing closed in a group", False)


def decide_from_text(
    text: str, *, is_dm: bool, threshold: float | None = None
) -> AttentionDecision:
    """Parse the model's answer and decide (with the chat's confidence `threshold`), failing
    open or closed when it is not a verdict."""
    parsed = parse_answer(text)
    if isinstance(parsed, ParseFailure):
        return fail_decision(is_dm, parsed.reason)
    return decision_from_answer(parsed, threshold)
