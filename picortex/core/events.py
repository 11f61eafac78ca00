"""The event types the bot writes to the action log (SPEC 11), one `event` field each."""

from __future__ import annotations

from typing import Final

# `picortex log --event TYPE` takes these; `picortex log --help` lists them.
EVENT_TYPES: Final = (
    "trigger",
    "continuation",
    "command",
    "decision",
    "context",
    "reply",
    "persona",
    "persona.responded",
    "personas",
    "llm",
    "budget",
    "cortex.invocation_failed",
    "poll",
    "reaction",
    "message-edit",
    "message-delete",
    "gateway",
    "rest",
    "supervisor",
    "slash",
    "interaction",
    "error",
)
