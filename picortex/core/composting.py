"""Composting (SPEC 18): which personas and stages are paused by their recent failures.

A persona whose own answers (stages `generate` and `post`) failed, or a stage with a fallback
(`discriminate`: the fail-open/fail-closed rule; `tiebreak`: the strongest match) that
failed, `threshold` times within an hour in unresolved errors is paused for `pause_seconds`
from the error that reached the threshold. Resolving the errors lifts the pause: only
unresolved errors count, so the next look finds fewer. Everything here is computed from the
error rows alone, so the bot, `picortex errors --patterns`, the panel and MCP agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Literal

import attrs

WINDOW_SECONDS: Final = 3600.0  # SPEC 18: unresolved errors "over the last hour"
DEFAULT_PERSONA: Final = "default"  # an error row's persona when the default agent failed
PERSONA_STAGES: Final = ("generate", "post")  # a persona's own answer failed
# Stages with a fallback that still answers; the default agent's own answer has none.
PAUSABLE_STAGES: Final = ("discriminate", "tiebreak")

PauseKind = Literal["persona", "stage"]


@attrs.frozen
class ErrorMark:
    """One unresolved error row, as composting reads it."""

    persona: str
    stage: str
    created_at: float


@attrs.frozen
class Pause:
    """A persona or stage paused until `until` (Unix seconds)."""

    kind: PauseKind
    name: str
    errors: int  # unresolved errors within the hour that ended at `since`
    since: float  # the error that reached the threshold
    until: float

    @property
    def key(self) -> str:
        """`persona:<id>` or `stage:<name>`: one pause, for remembering it was announced."""
        return f"{self.kind}:{self.name}"

    def reason(self, threshold: int) -> str:
        """Why, in one sentence (the `compost` event's reason)."""
        return (
            f"{self.errors} unresolved {self.kind} {self.name} errors within an hour"
            f" reached the threshold of {threshold}"
        )


def looked_back(now: float, pause_seconds: float) -> float:
    """The oldest error time that can still hold a pause at `now`."""
    return now - WINDOW_SECONDS - pause_seconds


def counted_as(mark: ErrorMark) -> tuple[PauseKind, str] | None:
    """What an error counts against: its persona, its stage, or nothing that can pause."""
    if mark.stage in PAUSABLE_STAGES:
        return "stage", mark.stage
    if mark.stage in PERSONA_STAGES and mark.persona != DEFAULT_PERSONA:
        return "persona", mark.persona
    return None


def pauses(
    marks: Iterable[ErrorMark], *, threshold: int, pause_seconds: float, now: float
) -> list[Pause]:
    """The pauses in force at `now`, personas first, each by name.

    A key is paused from each error that brings its unresolved errors within the hour before
    it to `threshold`, for `pause_seconds`; a `threshold` of 0 pauses nothing.
    """
    if threshold <= 0 or pause_seconds <= 0:
        return []
    times: dict[tuple[PauseKind, str], list[float]] = {}
    for mark in marks:
        key = counted_as(mark)
        if key is not None and mark.created_at <= now:
            times.setdefault(key, []).append(mark.created_at)
    found = []
    for (kind, name), stamps in times.items():
        latest = _latest_reaching(sorted(stamps), threshold)
        if latest is not None and latest[0] + pause_seconds > now:
            since, errors = latest
            found.append(Pause(kind, name, errors, since, since + pause_seconds))
    found.sort(key=lambda p: (p.kind != "persona", p.name))
    return found


def _latest_reaching(stamps: Sequence[float], threshold: int) -> tuple[float, int] | None:
    """(time, errors in the hour up to it) of the latest error that reaches `threshold`."""
    start = 0
    latest = None
    for end, at in enumerate(stamps):
        while at - stamps[start] > WINDOW_SECONDS:
            start += 1
        count = end - start + 1
        if count >= threshold:
            latest = (at, count)
    return latest


def pause_for(found: Iterable[Pause], persona: str, stage: str) -> Pause | None:
    """The pause that holds errors of `persona` at `stage`, if any."""
    key = counted_as(ErrorMark(persona, stage, 0.0))
    return None if key is None else next((p for p in found if (p.kind, p.name) == key), None)


def paused_persona(found: Iterable[Pause], persona: str) -> Pause | None:
    """The pause holding `persona`, if any."""
    return next((p for p in found if p.kind == "persona" and p.name == persona), None)


def paused_stage(found: Iterable[Pause], stage: str) -> Pause | None:
    """The pause holding `stage`, if any."""
    return next((p for p in found if p.kind == "stage" and p.name == stage), None)
