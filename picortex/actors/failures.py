"""Failed invocations (SPEC 9): each one a `cortex.invocation_failed` event and an error row,
redacted, the event naming the row once it is committed; and the one way an exception
becomes text for an event, a log line or an error row.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Protocol

from picortex.actors.composting import Compost
from picortex.core.budget import REFUSAL_REASONS
from picortex.core.composting import DEFAULT_PERSONA
from picortex.core.redact import redact
from picortex.types import EventSink, Snowflake

if TYPE_CHECKING:
    from picortex.config import CompostSettings
    from picortex.core.composting import Pause

logger = logging.getLogger(__name__)

# An error text in an event or an error row is cut to this many characters.
ERROR_MESSAGE_MAX_CHARS: Final = 500


def error_line(exc: BaseException) -> str:
    """An exception as one redacted line for an event, a log line or an error row."""
    return redact(f"{type(exc).__name__}: {exc}")[:ERROR_MESSAGE_MAX_CHARS]


def skip_reason(outcome: str, limit: str | None) -> str:
    """Why a model call that did not fail gave no answer (a `skip` decision's reason)."""
    if outcome == "no_key":
        return "ANTHROPIC_API_KEY is not set"
    if outcome == "budget":
        return REFUSAL_REASONS.get(limit or "workspace", REFUSAL_REASONS["workspace"])
    return outcome


def failure_text(exc: BaseException) -> tuple[str, str]:
    """An exception as (one-line message, stack trace), both redacted."""
    return error_line(exc), redact("".join(traceback.format_exception(exc)))


class ErrorRows(Protocol):
    """Where error rows are queued (the store actor)."""

    def add_invocation_error(
        self,
        workspace_id: str,
        persona: str,
        signal_id: str,
        stage: str,
        error_message: str,
        stack_trace: str | None,
        created_at: float,
        *,
        on_committed: Callable[[int], None] | None = None,
    ) -> None:
        """Queue an error row; `on_committed(row_id)` runs once it is committed."""
        ...

    async def recent_unresolved_errors(self, since: float) -> list[tuple[str, str, float]]:
        """(persona, stage, created_at) of unresolved errors made at `since` or later."""
        ...


class FailureLog:
    """The failure recorder the app builds once (`picortex.actors.clients.FailureRecorder`)."""

    def __init__(self, store: ErrorRows, events: EventSink) -> None:
        self.store = store
        self.events = events
        self.compost = Compost(store, events)

    async def pauses(self, settings: CompostSettings) -> list[Pause]:
        """The personas and stages paused by their failures now (SPEC 18)."""
        return await self.compost.pauses(settings)

    def record(
        self,
        *,
        stage: str,
        workspace: str,
        persona: str | None,
        signal_id: Snowflake | None,
        error: str,
        stack_trace: str | None,
    ) -> None:
        """A failed invocation: a `cortex.invocation_failed` event and an error row (SPEC 9)."""
        error = redact(error)[:ERROR_MESSAGE_MAX_CHARS]
        trace = redact(stack_trace) if stack_trace else None
        created_at = time.time()

        def emit(row_id: int | None) -> None:
            self.events.emit(
                "cortex.invocation_failed",
                stage=stage,
                workspace=workspace,
                persona=persona,
                signal_id=signal_id,
                error=error,
                error_id=row_id,
            )

        # The event is written once the row is committed, so it can name the row's id.
        try:
            self.store.add_invocation_error(
                workspace_id=workspace,
                persona=persona or DEFAULT_PERSONA,
                signal_id="" if signal_id is None else str(signal_id),
                stage=stage,
                error_message=error,
                stack_trace=trace,
                created_at=created_at,
                on_committed=emit,
            )
        except Exception:
            logger.exception("could not store an invocation error")
            emit(None)
