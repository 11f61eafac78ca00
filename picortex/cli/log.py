"""`picortex log`: read `actions.jsonl` and its rotated files, filter, print, and follow.

Exit codes: 0 after printing (also when interrupted while following); 1 when there is no log
file at all and `--follow` was not given (nothing has been logged yet, or the path is wrong).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO, Final, TextIO

import orjson

from picortex.cli import common
from picortex.core.jsonids import ids_as_strings
from picortex.core.money import is_amount, usd
from picortex.core.redact import redact
from picortex.core.terminal import clean_line

# How often `--follow` looks for new lines: quick enough to feel live, idle otherwise.
FOLLOW_POLL_SECONDS: Final = 0.25
# Longest value shown in the readable format before it is cut with an ellipsis.
VALUE_MAX_CHARS: Final = 160
# Fields left out of the readable format: long, and `--json` has them.
HIDDEN_FIELDS: Final = frozenset({"ts", "event", "traceback"})
# Separate warnings for unreadable lines before they are only counted.
MAX_WARNINGS: Final = 10


class _Reader:
    """Parses lines, filters them and prints them; remembers the warnings it gave."""

    def __init__(self, events: Sequence[str], as_json: bool, out: TextIO, err: TextIO) -> None:
        self.events = frozenset(events)
        self.as_json = as_json
        self.out = out
        self.err = err
        self.skipped = 0

    def parse(self, raw: bytes, where: str) -> dict[str, object] | None:
        """The event in `raw` if it is whole and passes the filter, else None (warned)."""
        if not raw.strip():
            return None
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            self.skipped += 1
            if self.skipped <= MAX_WARNINGS:
                self.err.write(f"warning: skipped an unreadable line ({where})\n")
            return None
        if self.events and record.get("event") not in self.events:
            return None
        return record

    def show(self, raw: bytes, record: dict[str, object]) -> None:
        if self.as_json:
            # Lines written before ids were strings are printed with string ids (SPEC 11).
            fixed = ids_as_strings(record)
            if fixed != record:
                raw = orjson.dumps(fixed)
            line = raw.rstrip(b"\r\n").decode("utf-8", "replace")
            # Lines written before a secret was configured are redacted on the way out too.
            self.out.write(clean_line(redact(line)) + "\n")
        else:
            self.out.write(format_event(record) + "\n")

    def finish(self) -> None:
        if self.skipped > MAX_WARNINGS:
            more = self.skipped - MAX_WARNINGS
            self.err.write(f"warning: skipped {more} more unreadable lines\n")


def log_files(path: Path) -> list[Path]:
    """The log's files, oldest first: `actions.jsonl.N` ... `.1`, then `actions.jsonl`."""
    rotated: list[tuple[int, Path]] = []
    prefix = path.name + "."
    if path.parent.is_dir():
        for entry in path.parent.iterdir():
            suffix = entry.name[len(prefix) :]
            if entry.name.startswith(prefix) and suffix.isdigit() and entry.is_file():
                rotated.append((int(suffix), entry))
    files = [p for _, p in sorted(rotated, reverse=True)]
    if path.is_file():
        files.append(path)
    return files


def format_event(record: dict[str, object]) -> str:
    """One readable line: time, event type, then the other fields as `key=value`."""
    ts = str(record.get("ts", "?")).replace("T", " ")
    event = str(record.get("event", "?"))
    parts = [f"{ts}  {event:<12}"]
    for key, value in record.items():
        if key in HIDDEN_FIELDS:
            continue
        shown = usd(value) if is_amount(key, value) else _format_value(value)
        parts.append(f"{key}={shown}")
    return clean_line(redact(" ".join(parts).rstrip()))


def _format_value(value: object) -> str:
    if isinstance(value, str):
        text = value
        if not text or not text.isprintable() or any(c in text for c in " \"'="):
            text = orjson.dumps(text).decode()  # quoted, newlines escaped: one line per event
    else:
        text = orjson.dumps(value).decode()
    if len(text) > VALUE_MAX_CHARS:
        text = text[: VALUE_MAX_CHARS - 1] + "…"
    return text


def _lines(handle: BinaryIO, name: str) -> Iterator[tuple[bytes, str]]:
    for number, raw in enumerate(handle, start=1):
        yield raw, f"{name} line {number}"


def run_log(
    path: Path,
    *,
    n: int | None,
    follow: bool,
    events: Sequence[str],
    as_json: bool,
    out: TextIO,
    err: TextIO,
    poll_seconds: float = FOLLOW_POLL_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Print the log's events, oldest first; `picortex log`.

    Args:
        path: `actions.jsonl`; its rotated files sit next to it.
        n: print only the last `n` matching events (None: all).
        follow: keep printing new events until interrupted (handles rotation).
        events: only these event types (empty: all).
        as_json: print the raw JSON lines instead of the readable format.
        out, err: where events and warnings go.

    Returns:
        0, or 1 when there is no log at all and `follow` is off.
    """
    reader = _Reader(events, as_json, out, err)
    files = log_files(path)
    if not files:
        err.write(f"No action log at {path} yet: picortex writes it once the bot has run.\n")
        if not follow:
            return 1
    try:
        tail: deque[tuple[bytes, dict[str, object]]] | None = (
            deque(maxlen=max(n, 0)) if n is not None else None
        )
        for file in files:
            try:
                with open(file, "rb") as handle:
                    for raw, where in _lines(handle, file.name):
                        record = reader.parse(raw, where)
                        if record is None:
                            continue
                        if tail is not None:
                            tail.append((raw, record))
                        else:
                            reader.show(raw, record)
            except FileNotFoundError:
                continue  # rotated away while we listed the directory
        if tail is not None:
            for raw, record in tail:
                reader.show(raw, record)
        out.flush()
        if follow:
            _follow(path, reader, poll_seconds, sleep)
    except KeyboardInterrupt:
        pass
    except BrokenPipeError:
        return 0
    finally:
        reader.finish()
    return 0


def _follow(
    path: Path, reader: _Reader, poll_seconds: float, sleep: Callable[[float], None]
) -> None:
    """Print lines appended to `path` from its current end; reopen it when it rotates."""
    handle: BinaryIO | None = None
    identity: tuple[int, int] | None = None
    partial = b""
    try:
        try:
            handle = open(path, "rb")  # noqa: SIM115 (held open across polls)
            handle.seek(0, os.SEEK_END)
            st = os.fstat(handle.fileno())
            identity = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            handle = None
        while True:
            if handle is not None:
                chunk = handle.read()
                if chunk:
                    partial = _emit_lines(reader, partial + chunk, path.name)
                    reader.out.flush()
                    continue
            # No new bytes: has the file been rotated (or created)?
            try:
                st = os.stat(path)
            except FileNotFoundError:
                sleep(poll_seconds)
                continue
            if handle is None or identity != (st.st_dev, st.st_ino):
                if handle is not None:
                    # Whatever reached the old file before the rename was read above; files
                    # rotated in and out since (several rotations between two polls) are
                    # read whole, oldest first, before the current one.
                    handle.close()
                    for missed in _rotated_since(path, identity):
                        _read_whole(reader, missed)
                handle = open(path, "rb")  # noqa: SIM115
                identity = (st.st_dev, st.st_ino)
                partial = b""
                continue
            if st.st_size < handle.tell():
                # Truncated in place (a torn line repaired at start-up): go on from its end.
                handle.seek(st.st_size)
                partial = b""
                continue
            sleep(poll_seconds)
    finally:
        if handle is not None:
            handle.close()


def _rotated_since(path: Path, identity: tuple[int, int] | None) -> list[Path]:
    """The rotated files newer than the file `identity` names, oldest first (all of them
    when that file has been rotated off the end)."""
    rotated = log_files(path)
    if rotated and rotated[-1] == path:
        rotated.pop()
    for index, file in enumerate(rotated):
        try:
            st = os.stat(file)
        except FileNotFoundError:
            continue
        if (st.st_dev, st.st_ino) == identity:
            return rotated[index + 1 :]
    return rotated


def _read_whole(reader: _Reader, file: Path) -> None:
    """Print every line of a rotated (so complete) file."""
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        return  # rotated off the end while we looked
    if data and not data.endswith(b"\n"):
        data += b"\n"  # a torn last line is reported as such, as when reading the files
    _emit_lines(reader, data, file.name)
    reader.out.flush()


def _emit_lines(reader: _Reader, data: bytes, name: str) -> bytes:
    """Print the whole lines in `data`; return the unfinished tail (still being written)."""
    *whole, rest = data.split(b"\n")
    for raw in whole:
        record = reader.parse(raw, f"{name}, following")
        if record is not None:
            reader.show(raw, record)
    return rest


def command(args: argparse.Namespace) -> int:
    """Print (and follow) the action log."""
    settings = common.reading_settings()
    return run_log(
        settings.action_log_path,
        n=args.n,
        follow=args.follow,
        events=tuple(args.event),
        as_json=args.json,
        out=sys.stdout,
        err=sys.stderr,
    )
