"""The newest action-log events that match a filter, read from the end of the log.

The panel never reads the whole log: it walks back from the end of `actions.jsonl` (then its
rotated files) in blocks, and stops once it has `n` matches or has looked at SCAN_MAX_BYTES.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import attrs
import orjson

from picortex.cli.log import log_files

BLOCK_BYTES: Final = 64 * 1024
# How far back one request looks: a few tens of thousands of lines, a few tens of ms.
SCAN_MAX_BYTES: Final = 8 * 1024 * 1024
# Fields that name the message an event is about (a decision, its LLM call, the reply).
MESSAGE_FIELDS: Final = ("message_id", "signal_id", "trigger_id", "parent_id")
# Fields that name the user behind an event.
USER_FIELDS: Final = ("author_id", "user_id", "requester")


@attrs.frozen
class LogFilter:
    """What to keep; empty fields match everything. Ids are compared as text."""

    events: frozenset[str] = frozenset()
    channel_id: str = ""
    user_id: str = ""
    message_id: str = ""

    @property
    def needles(self) -> tuple[bytes, ...]:
        """Byte strings a matching raw line must contain: a cheap test before parsing."""
        return tuple(v.encode() for v in (self.channel_id, self.user_id, self.message_id) if v)

    def matches(self, record: dict[str, Any]) -> bool:
        """True when the event passes every given condition."""
        if self.events and record.get("event") not in self.events:
            return False
        if self.channel_id and _text(record.get("channel_id")) != self.channel_id:
            return False
        if self.user_id and not any(_text(record.get(f)) == self.user_id for f in USER_FIELDS):
            return False
        return not self.message_id or any(
            _text(record.get(f)) == self.message_id for f in MESSAGE_FIELDS
        )


@attrs.frozen
class TailResult:
    """Matches oldest first; `complete` is False when the scan stopped at its byte budget."""

    records: list[dict[str, Any]]
    complete: bool
    scanned_bytes: int


def _text(value: object) -> str:
    return "" if value is None else str(value)


def _reverse_lines(path: Path, budget: int) -> Iterator[tuple[bytes, int]]:
    """Whole lines of `path`, last first, with the bytes read so far.

    A last line without its newline is being written (or was torn by a crash): skipped.
    """
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed in the finally below
    except FileNotFoundError:
        return
    try:
        end = os.fstat(handle.fileno()).st_size
        read = 0
        carry = b""  # the start of a line whose beginning is in an earlier block
        skip_last = True  # the bytes after the final newline are not a whole line
        while end > 0 and read < budget:
            size = min(BLOCK_BYTES, end)
            end -= size
            handle.seek(end)
            block = handle.read(size)
            read += len(block)
            lines = (block + carry).split(b"\n")
            carry = lines.pop(0) if end > 0 else b""
            for line in reversed(lines):
                if skip_last:
                    skip_last = False
                    continue
                if line:
                    yield line, read
    finally:
        handle.close()


def tail(path: Path, n: int, where: LogFilter, *, budget: int = SCAN_MAX_BYTES) -> TailResult:
    """The last `n` events (oldest first) of the log at `path` that pass `where`."""
    found: list[dict[str, Any]] = []
    needles = where.needles
    event_needles = tuple(orjson.dumps(e) for e in where.events)
    one_event = event_needles[0] if len(event_needles) == 1 else None
    scanned = 0
    complete = True
    for file in reversed(log_files(path)):
        left = budget - scanned
        if left <= 0:
            complete = False
            break
        read = 0
        for raw, read_so_far in _reverse_lines(file, left):
            read = read_so_far
            # Substring tests before parsing: most lines of a big log fail them.
            if needles and not all(nd in raw for nd in needles):
                continue
            if one_event is not None:
                if one_event not in raw:
                    continue
            elif event_needles and not any(nd in raw for nd in event_needles):
                continue
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(record, dict) and where.matches(record):
                found.append(record)
                if len(found) >= n:
                    break
        scanned += read
        if len(found) >= n:
            break
        if read >= left:
            complete = False  # the budget ran out inside this file
            break
    found.reverse()
    return TailResult(found, complete, scanned)
