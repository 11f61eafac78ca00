"""What a model call is asked and what it gives back (SPEC 9): plain values.

The LLM actor (`picortex.actors.llm`) performs the calls; everything that builds a request
or reads a result imports these types from here, so nothing needs the actor to speak of a
call.
"""

from __future__ import annotations

from typing import Final, Literal

import attrs

from picortex.core.personas import MODEL_TIERS

CallOutcome = Literal["ok", "error", "cut", "timeout", "cancelled", "no_key", "budget"]
# The outcomes of a call that failed (an `invocation_errors` row); "cancelled" never reaches
# a caller: its cancellation goes on.
FAILED_OUTCOMES: Final = frozenset({"error", "cut", "timeout"})
Role = Literal["user", "assistant"]

# A persona reply should never hang a channel: a minute is generous for one answer.
DEFAULT_TIMEOUT: Final = 60.0
DEFAULT_MAX_TOKENS: Final = 1024
# Anthropic scales an image down to about 1,600 tokens at most; in prompt characters (about
# four per token) that is what one image may cost, for the budget's worst case.
IMAGE_WORST_CHARS: Final = 1600 * 4


@attrs.frozen
class TextPart:
    """A text content block."""

    text: str


@attrs.frozen
class ImagePart:
    """An image content block: base64 data and its media type (image/png, ...)."""

    media_type: str
    data: str


ContentPart = TextPart | ImagePart


@attrs.frozen
class ChatTurn:
    """One turn of the conversation sent to the model: plain text, or content blocks."""

    role: Role
    content: str | tuple[ContentPart, ...]

    @property
    def prompt_chars(self) -> int:
        """The turn's size in prompt characters; an image counts as its worst case."""
        if isinstance(self.content, str):
            return len(self.content)
        return sum(
            len(p.text) if isinstance(p, TextPart) else IMAGE_WORST_CHARS for p in self.content
        )

    @property
    def text(self) -> str:
        """The turn's text (its text blocks joined), for fault checks and logs."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(p.text for p in self.content if isinstance(p, TextPart))


def _validate_tier(_instance: object, _attribute: object, value: str | None) -> None:
    if value is not None and value not in MODEL_TIERS:
        raise ValueError(f"unknown model tier {value!r}; expected one of {', '.join(MODEL_TIERS)}")


@attrs.frozen
class LLMRequest:
    """One model call. Give `model` to name a model, else `tier` picks one from `[models]`.

    Attributes:
        stage: what the call is for (discriminate, tiebreak, generate), for logs and errors.
        workspace: the guild id as text, or "dm": whose budget pays.
        timeout: the deadline for the whole call, in seconds.
    """

    stage: str
    system: str
    messages: tuple[ChatTurn, ...]
    workspace: str
    tier: str | None = attrs.field(default="general", validator=_validate_tier)
    model: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    timeout: float = DEFAULT_TIMEOUT
    persona: str | None = None
    signal_id: str | None = None
    user_id: int | None = None  # whose request this is: per-user limits and "who spent what"

    @property
    def prompt_chars(self) -> int:
        """Characters of the whole prompt (system and turns), for the worst-case reservation."""
        return len(self.system) + sum(turn.prompt_chars for turn in self.messages)


@attrs.frozen
class LLMResult:
    """What one call produced. `text` is empty unless `outcome` is "ok".

    `error` and `stack_trace` (secrets redacted) are set for the failed outcomes ("error",
    "cut", "timeout"), ready for an `invocation_errors` row. A call that was sent costs the
    usage the endpoint reported, or, with none, the input it was sent (SPEC 9).
    """

    text: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    latency_ms: int
    outcome: CallOutcome
    error: str | None = None
    stack_trace: str | None = None
    limit: str | None = None  # for "budget": the limit that refused the call
    notice: str | None = None  # for "budget": a polite line to post to the user, if any

    @property
    def ok(self) -> bool:
        """True when the model answered."""
        return self.outcome == "ok"

    @property
    def failed(self) -> bool:
        """True when the call failed (an error, a cut stream, a timeout): an error row."""
        return self.outcome in FAILED_OUTCOMES
