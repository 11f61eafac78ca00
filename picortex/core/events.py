"""The event types the bot writes to the action log (SPEC 11), one `event` field each."""

from __future__ import annotations

from datetime import UTC, datetime
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
    "compost",
)


def rfc3339(ts: float | None) -> str | None:
    """Unix seconds as an RFC 3339 UTC timestamp (milliseconds), or None."""
    if ts is None:
        return None
    text = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")
