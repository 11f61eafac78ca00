"""What a process could not hand to an unreachable shared database before it stopped (SPEC 17):
kept in a file of its home, one JSON object per line, and handed over at its next start.

A process stopped while PostgreSQL is out of reach would otherwise lose what it held for it
(queued writes, settlements of model calls already paid for). The file is written whole, in
place of the last one (a crash mid-write leaves the old one), readable by its owner only; it
is removed once everything it held is in the database.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

import orjson

logger = logging.getLogger(__name__)

# In PICORTEX_HOME: the store's writes, and the settlements of the cluster's ceilings.
WRITES_FILE: Final = "unsent-writes.jsonl"
SETTLEMENTS_FILE: Final = "unsent-settlements.jsonl"


def save(path: Path, records: Iterable[Mapping[str, Any]]) -> int:
    """Write `records` to `path` in place of what it held (none: the file is removed); how
    many were written.

    Raises:
        OSError: the file could not be written (the caller says what is lost).
    """
    lines = [orjson.dumps(record) for record in records]
    if not lines:
        forget(path)
        return 0
    partial = path.with_name(path.name + ".partial")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(b"\n".join(lines) + b"\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)
    return len(lines)


def load(path: Path) -> list[dict[str, Any]]:
    """The records `path` holds, in order (none if it does not exist); a line that is not a
    JSON object (a damaged file) is skipped and said."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        logger.error("could not read %s: %s", path.name, exc)
        return []
    records: list[dict[str, Any]] = []
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            record = None
        if isinstance(record, dict):
            records.append(record)
        else:
            logger.error("%s line %d is damaged and was skipped", path.name, number)
    return records


def forget(path: Path) -> None:
    """Remove `path`: what it held is in the database."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
