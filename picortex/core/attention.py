"""Attention gating: whether a trusted, non-command message gets an answer (SPEC 5 step 5, 7).

Hard rules run first; the chat's mode decides only when no rule fires.
"""

from __future__ import annotations

from typing import Final, Literal, Protocol, get_args

import attrs

from picortex.types import Message, Snowflake

AttentionMode = Literal["always", "mentions-only", "discriminate", "discriminate-quiet", "silent"]
AttentionOutcome = Literal["respond", "skip", "discriminate", "record"]

MODES: Final[tuple[AttentionMode, ...]] = get_args(AttentionMode)
# A stored mode we do not know (a hand-edited database) must not stop the chat: the strictest
# mode that still answers a direct mention is the least surprising stand-in.
FALLBACK_MODE: Final[AttentionMode] = "mentions-only"


@attrs.frozen
class AttentionDecision:
    """What to do with a message, and why (the reason goes into the `decision` event).

    `show_typing` says whether a typing indicator may be shown now: while the answer is
    generated (`respond`) or while the discriminator classifies (`discriminate` mode only).
    """

    outcome: AttentionOutcome
    reason: str
    show_typing: bool = False
    confidence: float | None = None  # the discriminator's, when it gave one (0-1)


class AttentionDefaults(Protocol):
    """The `[attention]` settings: the default mode for 1:1 DMs and for everything else."""

    @property
    def dm(self) -> str: ...

    @property
    def group(self) -> str: ...


def as_mode(text: str) -> AttentionMode | None:
    """The mode named by `text` (exact, lower-case), or None."""
    for mode in MODES:
        if mode == text:
            return mode
    return None


def mode_for_chat(
    chat_mode: str | None,
    parent_mode: str | None,
    is_dm: bool,
    defaults: AttentionDefaults,
) -> AttentionMode:
    """The chat's effective mode: its own, else its parent channel's (threads), else the default.

    Args:
        chat_mode: the mode stored for this chat, if any.
        parent_mode: the mode stored for the thread's parent channel, if this is a thread.
        is_dm: True for a 1:1 DM (group DMs use the group default).
        defaults: the `[attention]` settings.
    """
    for candidate in (chat_mode, parent_mode, defaults.dm if is_dm else defaults.group):
        if candidate is not None:
            mode = as_mode(candidate)
            if mode is not None:
                return mode
    return FALLBACK_MODE


@attrs.frozen
class ModeChoice:
    """A message's effective mode and what chose it: `why` is empty when the chat's own mode
    (or its default) applies, else a few words for the `decision` reason; `blocked` says why
    access rules silence the chat, when they do."""

    mode: AttentionMode
    why: str = ""
    blocked: str | None = None


USER_OVERRIDE: Final = "the author's own attention mode in this chat"


def choose_mode(
    chat_mode: AttentionMode, *, user_mode: str | None, blocked: str | None
) -> ModeChoice:
    """The mode for one author's message (SPEC 18): access rules first (a blocked channel is
    `silent` whatever its mode), then the author's override in the chat, then the chat's mode.

    Args:
        chat_mode: the chat's effective mode (see `mode_for_chat`).
        user_mode: the author's override in this chat (or its parent channel), if any; a
            stored mode we do not know is ignored.
        blocked: why access rules silence the channel (see `core.access`), if they do.
    """
    if blocked is not None:
        return ModeChoice("silent", blocked, blocked)
    if user_mode is not None:
        mode = as_mode(user_mode)
        if mode is not None:
            return ModeChoice(mode, USER_OVERRIDE)
    return ModeChoice(chat_mode)


def _mentions_bot(message: Message, bot_user_id: Snowflake) -> bool:
    if message.mentions_user(bot_user_id):
        return True
    # Discord fills `mentions`, but a raw mention in the text means the same thing.
    return f"<@{bot_user_id}>" in message.content or f"<@!{bot_user_id}>" in message.content


def _replies_to_bot(message: Message, bot_user_id: Snowflake, replied_to_bot: bool) -> bool:
    author = message.referenced_author
    return replied_to_bot or (author is not None and author.id == bot_user_id)


def decide_attention(
    message: Message,
    *,
    bot_user_id: Snowflake,
    owner_id: Snowflake | None,
    mode: str,
    is_dm: bool,
    replied_to_bot: bool,
) -> AttentionDecision:
    """Decide whether to answer a trusted message that is not a command.

    Rules first: a reply to the bot, a mention of the bot, then the owner's DM (which answers
    even in `silent`, the only rule that does: `silent` never answers anyone else), then a
    message without text (attachments only), which only `always` answers. Then the mode.

    Args:
        message: the message, already past the trust check.
        bot_user_id: the bot's own user id.
        owner_id: the owner's user id, if configured.
        mode: the chat's effective mode (see `mode_for_chat`).
        is_dm: True for a 1:1 DM with the bot; a group DM counts as a group.
        replied_to_bot: True when the message replies to a message the bot sent (the caller
            may know this from its cache when Discord did not include the referenced author).
    """
    known = as_mode(mode)
    note = ""
    if known is None:
        known = FALLBACK_MODE
        note = f" (unknown attention mode {mode!r}, treated as {FALLBACK_MODE})"
    owner_dm = is_dm and owner_id is not None and message.author.id == owner_id

    if known == "silent":
        if owner_dm:
            return AttentionDecision(
                "respond", "direct message from the owner: answered in every mode", True
            )
        if _replies_to_bot(message, bot_user_id, replied_to_bot):
            return AttentionDecision(
                "record", "silent mode: a reply to the bot is recorded, never answered"
            )
        if _mentions_bot(message, bot_user_id):
            return AttentionDecision(
                "record", "silent mode: a mention of the bot is recorded, never answered"
            )
        return AttentionDecision("record", "silent mode: recorded, never answered")

    if _replies_to_bot(message, bot_user_id, replied_to_bot):
        return AttentionDecision("respond", "reply to a message from the bot" + note, True)
    if _mentions_bot(message, bot_user_id):
        return AttentionDecision("respond", "the message mentions the bot" + note, True)
    if owner_dm:
        return AttentionDecision("respond", "direct message from the owner" + note, True)
    if not message.text.strip():
        what = "attachments only" if message.attachments else "no text"
        if known == "always":
            return AttentionDecision("respond", f"message with {what}: {known} mode answers", True)
        return AttentionDecision(
            "skip", f"message with {what}: only always mode answers, this chat is {known}" + note
        )
    if known == "always":
        return AttentionDecision("respond", "always mode answers every message", True)
    if known == "mentions-only":
        return AttentionDecision(
            "skip", "mentions-only mode: no mention of the bot and not a reply to it" + note
        )
    if known == "discriminate":
        return AttentionDecision(
            "discriminate", "discriminate mode: no rule fired, asking the discriminator", True
        )
    return AttentionDecision(
        "discriminate",
        "discriminate-quiet mode: no rule fired, asking the discriminator without typing",
        False,
    )
