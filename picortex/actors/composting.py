"""Composting in the running bot (SPEC 18): the pauses in force, each announced once with a
`compost` event, and the few places a pause changes what happens."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from picortex.core import composting as core
from picortex.core.events import rfc3339
from picortex.errors import DatabaseUnreachable
from picortex.types import EventSink, Message

if TYPE_CHECKING:
    from picortex.actors.clients import CurrentSettings, FailureRecorder
    from picortex.config import CompostSettings
    from picortex.core.personas import PersonaMatch

logger = logging.getLogger(__name__)


class RecentErrors(Protocol):
    """The store's read of recent unresolved errors."""

    async def recent_unresolved_errors(self, since: float) -> list[tuple[str, str, float]]:
        """(persona, stage, created_at) of unresolved errors made at `since` or later."""
        ...


class CompostClients(Protocol):
    """What applying a pause uses."""

    @property
    def failures(self) -> FailureRecorder:
        """Failed invocations, and the pauses they make."""
        ...

    @property
    def settings(self) -> CurrentSettings:
        """The settings in force."""
        ...

    @property
    def events(self) -> EventSink:
        """The action log."""
        ...


class Compost:
    """The pauses in force, read from the error rows at each look (so a resolve anywhere
    lifts a pause at the next request); a pause that starts or lifts is one `compost`
    event."""

    def __init__(
        self, store: RecentErrors, events: EventSink, clock: Callable[[], float] = time.time
    ) -> None:
        self._store = store
        self._events = events
        # Error rows carry wall-clock times, so pauses are judged on the same clock.
        self._clock = clock
        self._announced: dict[str, float] = {}  # pause key -> until, as last announced

    async def pauses(self, settings: CompostSettings) -> list[core.Pause]:
        """The pauses in force now; none when composting is off or the store cannot say."""
        now = self._clock()
        found: list[core.Pause] = []
        if settings.threshold > 0:
            try:
                rows = await self._store.recent_unresolved_errors(
                    core.looked_back(now, settings.pause_seconds)
                )
            except DatabaseUnreachable:
                return []  # nothing to go by while the database is out of reach (logged)
            except Exception:  # composting never stops an answer
                logger.exception("could not read recent errors for composting")
                return []
            found = core.pauses(
                (core.ErrorMark(p, s, at) for p, s, at in rows),
                threshold=settings.threshold,
                pause_seconds=settings.pause_seconds,
                now=now,
            )
        self._announce(found, settings.threshold, now)
        return found

    def _announce(self, found: Sequence[core.Pause], threshold: int, now: float) -> None:
        current = {p.key: p for p in found}
        for key, until in list(self._announced.items()):
            if key not in current:
                del self._announced[key]
                if until > now:  # lifted before its time
                    kind, _, name = key.partition(":")
                    why = "errors resolved" if threshold > 0 else "composting turned off"
                    self._events.emit("compost", action="lifted", kind=kind, name=name, reason=why)
        for key, pause in current.items():
            if key not in self._announced:
                self._events.emit(
                    "compost",
                    action="paused",
                    kind=pause.kind,
                    name=pause.name,
                    errors=pause.errors,
                    until=rfc3339(pause.until),
                    reason=pause.reason(threshold),
                )
            self._announced[key] = pause.until


def until_text(pause: core.Pause) -> str:
    """`paused by composting until <time>` for a decision's reason."""
    return f"paused by composting until {rfc3339(pause.until)}"


async def stage_pause(clients: CompostClients, stage: str) -> core.Pause | None:
    """The pause holding `stage` (discriminate, tiebreak), if any."""
    found = await clients.failures.pauses(clients.settings().composting)
    return core.paused_stage(found, stage)


async def unpaused(
    clients: CompostClients, matches: Sequence[PersonaMatch], trigger: Message
) -> list[PersonaMatch]:
    """The persona matches whose persona is not paused; each one left out is a `decision`
    event (with no match left, the default agent answers)."""
    if not matches:
        return []
    found = await clients.failures.pauses(clients.settings().composting)
    kept = []
    for match in matches:
        pause = core.paused_persona(found, match.persona.id)
        if pause is None:
            kept.append(match)
            continue
        clients.events.emit(
            "decision",
            message_id=trigger.id,
            channel_id=trigger.channel_id,
            guild_id=trigger.guild_id,
            author_id=trigger.author.id,
            outcome="composted",
            reason=f"persona {match.persona.id} {until_text(pause)}",
            persona=match.persona.id,
            until=rfc3339(pause.until),
        )
    return kept
