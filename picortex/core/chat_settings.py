"""A chat's own settings beside its mode (SPEC 7, 18): its agent prompt, discriminator model
and confidence threshold. `attention prompt|model|threshold ...` in chat and slash, the
panel and MCP all read values and answer through here.
"""

from __future__ import annotations

import math
import unicodedata
from typing import ClassVar, Final, Literal

import attrs

from picortex.core.agent_prompt import PROMPT_MAX_CHARS
from picortex.errors import ConfigError

DEFAULT_WORD: Final = "default"  # `attention model default`: the chat follows the default
RESET_WORD: Final = "reset"  # `attention prompt reset`: the owner's prompt applies again
MODEL_MAX_CHARS: Final = 100
Field = Literal["prompt", "model", "threshold"]
FIELDS: Final[tuple[Field, ...]] = ("prompt", "model", "threshold")


@attrs.frozen
class ChatSettingSet:
    """`attention prompt TEXT|reset`, `attention model ID|default` or `attention threshold
    0-1|default`: set one of the chat's own settings; `value` None returns it to the default."""

    NAME: ClassVar[str] = "attention"
    field: Field
    value: str | float | None


@attrs.frozen
class ChatSettingChange:
    """Store one of the chat's own settings (None: back to the default)."""

    field: Field
    value: str | float | None


@attrs.frozen
class ChatSettings:
    """What the chat has now: its own values (None: the default) and the defaults."""

    prompt: str | None = None
    model: str | None = None
    threshold: float | None = None
    default_model: str = ""


def _has_invisible(text: str, allowed: str = "") -> bool:
    return any(unicodedata.category(c) in ("Cc", "Cf") and c not in allowed for c in text)


def parse_model(text: str) -> str | None:
    """A discriminator model id, or None for `default`.

    Raises:
        ConfigError: not one word of at most 100 characters.
    """
    word = text.strip()
    if word.lower() == DEFAULT_WORD:
        return None
    if not word or len(word) > MODEL_MAX_CHARS or any(c.isspace() for c in word):
        raise ConfigError("Give one model id such as `claude-haiku-5-5`, or `default`.")
    if _has_invisible(word):
        raise ConfigError("A model id cannot hold control or format characters.")
    return word


def parse_threshold(text: str) -> float | None:
    """A confidence threshold from 0 to 1, or None for `default` (no threshold).

    Raises:
        ConfigError: not a number from 0 to 1.
    """
    word = text.strip()
    if word.lower() in (DEFAULT_WORD, "none", "off"):
        return None
    try:
        number = float(word)
    except ValueError:
        number = math.nan
    if not 0 <= number <= 1:  # nan compares false
        raise ConfigError("The threshold is a number from 0 to 1, or `default`.")
    return number


def parse_prompt(text: str) -> str | None:
    """The chat's own agent prompt, or None for `reset` (the owner's applies again).

    Raises:
        ConfigError: empty, too long or holding control characters other than line breaks.
    """
    body = text.replace("\r\n", "\n").strip()  # a browser's form sends CRLF line breaks
    if body.lower() in (RESET_WORD, DEFAULT_WORD):
        return None
    if not body:
        raise ConfigError("Give the prompt's text, or `reset` to use the owner's prompt again.")
    if len(body) > PROMPT_MAX_CHARS:
        raise ConfigError(f"The prompt is at most {PROMPT_MAX_CHARS} characters.")
    if _has_invisible(body, allowed="\n\t"):
        raise ConfigError("The prompt cannot hold control or format characters.")
    return body


def parse_value(field: Field, text: str) -> str | float | None:
    """One setting's value from text (see the `parse_*` functions).

    Raises:
        ConfigError: one sentence.
    """
    if field == "prompt":
        return parse_prompt(text)
    if field == "model":
        return parse_model(text)
    return parse_threshold(text)


def parse(field: Field, text: str) -> ChatSettingSet | str:
    """`attention <field> <text>`: the command, or one sentence saying what is wrong."""
    try:
        return ChatSettingSet(field, parse_value(field, text))
    except ConfigError as exc:
        return str(exc)


def render(command: ChatSettingSet) -> str:
    """Command text that `parse` reads back."""
    value = command.value
    if value is None:
        value = RESET_WORD if command.field == "prompt" else DEFAULT_WORD
    elif isinstance(value, float):
        value = f"{value:g}"
    return f"attention {command.field} {value}"


def describe(settings: ChatSettings) -> str:
    """The chat's own settings in words, for `attention show`."""
    model = (
        f"`{settings.model}` (this chat's own)"
        if settings.model
        else f"`{settings.default_model}` (the default)"
        if settings.default_model
        else "the default"
    )
    threshold = (
        f"`{settings.threshold:g}`" if settings.threshold is not None else "none (the default)"
    )
    prompt = (
        f"this chat's own ({len(settings.prompt)} characters)" if settings.prompt else "the owner's"
    )
    return (
        f"Discriminator model: {model}. Confidence threshold: {threshold}. Agent prompt: {prompt}."
    )


def execute(command: ChatSettingSet, current: ChatSettings) -> tuple[str, ChatSettingChange | None]:
    """The reply and the change for `command` given the chat's `current` settings."""
    field, value = command.field, command.value
    if field == "prompt":
        if value is None:
            if current.prompt is None:
                return "This chat already uses the owner's prompt.", None
            return "This chat uses the owner's prompt again.", ChatSettingChange(field, None)
        if value == current.prompt:
            return "This chat's prompt is already that.", None
        return "This chat's agent prompt is set.", ChatSettingChange(field, value)
    now = current.model if field == "model" else current.threshold
    name = "discriminator model" if field == "model" else "confidence threshold"
    if value == now:
        return f"This chat's {name} is already that.", None
    if value is None:
        return f"This chat's {name} is back to the default.", ChatSettingChange(field, None)
    shown = f"{value:g}" if isinstance(value, float) else value
    return f"This chat's {name} is now `{shown}`.", ChatSettingChange(field, value)
