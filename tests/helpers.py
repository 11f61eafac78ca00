"""Small test doubles shared by the test suite."""

from __future__ import annotations

from typing import Any


class RecordingSink:
    """An EventSink that keeps every event in memory, in order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: str, /, **fields: object) -> None:
        """Record one event."""
        self.events.append({"event": event, **fields})

    def of(self, event: str) -> list[dict[str, Any]]:
        """Every recorded event of one type."""
        return [e for e in self.events if e["event"] == event]
