"""The action-log actor: appends one redacted JSON line per event to `actions.jsonl` (SPEC 11).

`emit` (the EventSink every actor writes to) serializes and queues without blocking; `run`
writes what it finds waiting in one write per batch, rotates, and drains on shutdown.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import attrs
import orjson
import trio

from picortex.core.jsonids import fields_ids_as_strings
from picortex.core.redact import redact_json_bytes
from picortex.errors import FaultInjected
from picortex.files import open_private
from picortex.runtime.faults import FaultPoints

logger = logging.getLogger(__name__)

# Bytes of serialized events held for the writer before new ones are dropped (and counted):
# tens of thousands of typical lines, so memory stays bounded if the disk stalls.
PENDING_MAX_BYTES: Final = 16 * 1024 * 1024
# How many rotated files to keep by default (`actions.jsonl.1` ... `.5`, SPEC 11).
DEFAULT_KEEP: Final = 5
# Where a torn last line found at start-up is moved, next to the log.
TORN_SUFFIX: Final = ".torn"
# Bytes read per step while looking backwards for the last newline at start-up.
TAIL_CHUNK_BYTES: Final = 65_536

# Fallback serialization of odd values: how deep it goes, and how much text it keeps.
LENIENT_MAX_DEPTH: Final = 50
LENIENT_REPR_MAX_CHARS: Final = 2_000

# Distinct event names remembered as ready-made JSON; there are a few dozen in practice.
EVENT_NAME_CACHE: Final = 1_024

# Flood control (SPEC 11): errors of one kind are written this many times per window, then
# only counted; the count is written as one `error` line with `repeated` when the window
# ends. Junk arriving by the thousand per second cannot rotate the real history away.
FLOOD_LINES: Final = 3
FLOOD_WINDOW_SECONDS: Final = 60.0
# Kinds tracked at once; past this a flood of ever-new kinds is counted under one catch-all.
FLOOD_KINDS_MAX: Final = 512
# Events under flood control: errors, and the gateway's reports of junk it received.
FLOOD_EVENTS: Final = frozenset({"error", "gateway"})
FLOOD_GATEWAY_ACTIONS: Final = frozenset({"problem", "dispatch_error"})
# Fields that say what kind of error it is (the excerpt of the payload does not).
_KIND_FIELDS: Final = ("scope", "actor", "action", "event_name", "name")
_TEXT_FIELDS: Final = ("message", "error", "problem", "reason")
FLOOD_TEXT_CHARS: Final = 120

_DUMPS_OPTIONS: Final = orjson.OPT_APPEND_NEWLINE
_dumps: Final = orjson.dumps
_COMMA: Final = ord(",")
_NEWLINE: Final = b"\n"


class ActionLog:
    """An EventSink that writes `actions.jsonl`; run it as the first child of the root.

    Args:
        path: the log file (`PICORTEX_ACTION_LOG`, default `PICORTEX_HOME/actions.jsonl`).
        max_bytes: rotate before a file would grow past this size.
        keep: rotated files to keep.
        faults: fault points; the `log` actor raises on a line containing a `log:` substring.
        max_pending_bytes: queued bytes before further events are dropped and counted.
        clock: wall-clock seconds for `ts` (tests pass a fixed one).
    """

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        keep: int = DEFAULT_KEEP,
        faults: FaultPoints | None = None,
        *,
        max_pending_bytes: int = PENDING_MAX_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_bytes < 1 or keep < 1 or max_pending_bytes < 1:
            raise ValueError("max_bytes, keep and max_pending_bytes must be positive")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.keep = keep
        self._faults = faults if faults else None
        self._max_pending = max_pending_bytes
        self._clock = clock
        # Serialized lines, back to back: one growing buffer instead of one object per event
        # keeps `emit` cheap (many small retained objects cost more than the serializing).
        self._pending = bytearray()
        self._pending_lines = 0
        self._wake = trio.Event()
        self._writer_idle = False
        self._dropped = 0
        self._dropped_total = 0
        self._written = 0
        self._fd: int | None = None
        self._size = 0
        self._ts_ms = -1
        self._ts = ""
        # `{"ts":"<this millisecond>","event":"<name>"` per event name, as ready-made JSON.
        self._prefixes: dict[str, bytes] = {}
        self._floods: dict[tuple[str, ...], _Flood] = {}

    # -- flood control --------------------------------------------------------------------

    def _flooded(self, event: str, fields: dict[str, object]) -> bool:
        """True when this event is one more of a kind already written FLOOD_LINES times."""
        if event == "gateway" and fields.get("action") not in FLOOD_GATEWAY_ACTIONS:
            return False
        kind = _flood_kind(event, fields)
        floods = self._floods
        flood = floods.get(kind)
        now = self._clock()
        if flood is not None and now - flood.start >= FLOOD_WINDOW_SECONDS:
            self._write_repeated(kind, flood)
            flood = None
        if flood is None:
            if len(floods) >= FLOOD_KINDS_MAX:
                self.flush_floods(force=False)
            if len(floods) >= FLOOD_KINDS_MAX:
                kind = (event, "*")  # one catch-all for a flood of ever-new kinds
                flood = floods.get(kind)
            if flood is None:
                flood = floods[kind] = _Flood(now, _kind_fields(event, fields))
        if flood.written < FLOOD_LINES:
            flood.written += 1
            return False
        flood.repeated += 1
        return True

    def _write_repeated(self, kind: tuple[str, ...], flood: _Flood) -> None:
        del self._floods[kind]
        if flood.repeated:
            event, fields = flood.fields
            self._queue(
                event,
                {
                    **fields,
                    "repeated": flood.repeated,
                    "window_seconds": FLOOD_WINDOW_SECONDS,
                },
            )

    def flush_floods(self, *, force: bool = True) -> None:
        """Write the `repeated` count of each flood whose window ended (every one if `force`)."""
        now = self._clock()
        for kind, flood in list(self._floods.items()):
            if force or now - flood.start >= FLOOD_WINDOW_SECONDS:
                self._write_repeated(kind, flood)

    # -- EventSink ----------------------------------------------------------------------

    def emit(self, event: str, /, **fields: object) -> None:
        """Queue one event with `ts` added; never blocks, never raises (drops are counted)."""
        if event in FLOOD_EVENTS:
            try:
                if self._flooded(event, fields):
                    return
            except Exception:
                logger.exception("action log flood control failed for a %r event", event)
        self._queue(event, fields)

    def _queue(self, event: str, fields: dict[str, object]) -> None:
        # Every caller pays for this on its own time: keep it lean (see bench_action_log.py).
        try:
            pending = self._pending
            if len(pending) >= self._max_pending:
                self._dropped += 1
                self._dropped_total += 1
                return
            ms = int(self._clock() * 1000)
            if ms != self._ts_ms:
                self._ts_ms = ms
                self._ts = _rfc3339(ms)
                self._prefixes = {}
            prefix = self._prefixes.get(event)
            if prefix is None:
                prefix = self._prefix(event)
            body = None
            if fields:
                fields_ids_as_strings(fields)  # SPEC 11: Discord ids are JSON strings
            if fields and "ts" not in fields and "event" not in fields:
                try:
                    body = _dumps(fields, default=_to_json, option=_DUMPS_OPTIONS)
                except TypeError:
                    body = None  # odd values: the slow path below serializes them leniently
            if body is not None:
                # `{"ts":..,"event":..` + the fields' own object with its `{` made a `,`:
                # no second dict, and orjson serializes each field once.
                pending += prefix
                brace = len(pending)
                pending += body
                pending[brace] = _COMMA
            elif not fields:
                pending += prefix
                pending += b"}\n"
            else:
                pending += self._slow_line(event, fields)
            self._pending_lines += 1
            if self._writer_idle:
                self._writer_idle = False
                self._wake.set()
        except Exception:
            self._dropped += 1
            self._dropped_total += 1
            logger.exception("action log could not queue a %r event", event)

    def _prefix(self, event: str) -> bytes:
        if len(self._prefixes) >= EVENT_NAME_CACHE:
            self._prefixes.clear()
        prefix = b'{"ts":"' + self._ts.encode() + b'","event":' + _dumps(event, default=str)
        self._prefixes[event] = prefix
        return prefix

    def _slow_line(self, event: str, fields: dict[str, object]) -> bytes:
        """The line for fields that clash with `ts`/`event` or that orjson refused."""
        if "ts" in fields or "event" in fields:
            record = _rename_clashes(self._ts, event, fields)
        else:
            record = {"ts": self._ts, "event": event, **fields}
        try:
            return _dumps(record, default=_to_json, option=_DUMPS_OPTIONS)
        except TypeError:
            return _dumps_lenient(record)

    # -- actor ----------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open (repairing a torn last line), signal ready, write batches until cancelled.

        Everything still queued is written on the way out, cancelled or not.
        """
        self._open()
        try:
            task_status.started()
            while True:
                if not self._pending and not self._dropped:
                    self._wake = trio.Event()
                    self._writer_idle = True
                    if self._floods:
                        # Counted floods are written once their window ends, even in silence.
                        with trio.move_on_after(FLOOD_WINDOW_SECONDS / 4):
                            await self._wake.wait()
                        self._writer_idle = False
                        self.flush_floods(force=False)
                    else:
                        await self._wake.wait()
                self._write_pending(check_faults=True)
        finally:
            self._writer_idle = False
            self.flush_floods()
            # Synchronous writes: the final drain needs no checkpoint, so a cancel cannot cut it
            # (no shielded scope needed). A SIGKILL during a write can leave at most a partial
            # last line: readers skip it, and the next start moves it aside.
            try:
                self._write_pending(check_faults=False)
            except OSError:
                logger.exception(
                    "action log could not write its last %d lines", self._pending_lines
                )
            finally:
                self._close()

    def flush(self) -> None:
        """Write whatever is queued now, from outside `run` (e.g. after the root exited)."""
        opened = self._fd is None
        if opened:
            self._open()
        try:
            self._write_pending(check_faults=False)
        finally:
            if opened:
                self._close()

    def statistics(self) -> LogStatistics:
        """Queued, written and dropped event counts, for `picortex status`."""
        return LogStatistics(
            pending=self._pending_lines,
            written=self._written,
            dropped=self._dropped_total,
            file_bytes=self._size,
        )

    # -- writing --------------------------------------------------------------------------

    def _write_pending(self, *, check_faults: bool) -> None:
        if not self._pending and not self._dropped:
            return
        data = bytes(self._pending)
        count = self._pending_lines
        self._pending = bytearray()
        self._pending_lines = 0
        if self._dropped:
            data += self._internal_line(_dropped_fields(self._dropped))
            count += 1
            self._dropped = 0
        if self._faults is not None:
            lines = data.splitlines(keepends=True)
            self._apply_faults(lines, raise_fault=check_faults)
            data, count = b"".join(lines), len(lines)
        self._write(redact_json_bytes(data))
        self._written += count

    def _apply_faults(self, lines: list[bytes], *, raise_fault: bool) -> None:
        """Drop (and report) a line that trips a `log:` fault; raise unless draining at exit."""
        assert self._faults is not None
        for i, line in enumerate(lines):
            try:
                self._faults.check("log", line.decode("utf-8", "replace"))
            except FaultInjected as exc:
                note = self._internal_line(
                    {
                        "event": "error",
                        "error": f"message dropped: log crashed while writing it ({exc})",
                        "actor": "log",
                    }
                )
                if not raise_fault:
                    lines[i] = note
                    continue
                # Keep the order: lines before the bad one are written now, the rest after
                # the restart; the bad one is never retried.
                rest = lines[i + 1 :]
                self._pending[:0] = b"".join([note, *rest])
                self._pending_lines += 1 + len(rest)
                del lines[i:]
                if lines:
                    self._write(redact_json_bytes(b"".join(lines)))
                    self._written += len(lines)
                raise

    def _write(self, data: bytes) -> None:
        """Append whole lines, rotating so no file passes max_bytes (unless one line does)."""
        pos, n = 0, len(data)
        while pos < n:
            room = self.max_bytes - self._size
            if n - pos <= room:
                self._write_all(data[pos:] if pos else data)
                return
            cut = data.rfind(_NEWLINE, pos, pos + room) + 1 if room > 0 else 0
            if cut > pos:
                self._write_all(data[pos:cut])
                pos = cut
            elif self._size == 0:
                # One line longer than the limit gets a file of its own.
                cut = data.find(_NEWLINE, pos) + 1 or n
                self._write_all(data[pos:cut])
                pos = cut
            self._rotate()

    def _write_all(self, chunk: bytes) -> None:
        assert self._fd is not None
        view = memoryview(chunk)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
        self._size += len(chunk)

    def _rotate(self) -> None:
        self._close()
        base = str(self.path)
        for i in range(self.keep - 1, 0, -1):
            src = f"{base}.{i}"
            if os.path.exists(src):
                os.replace(src, f"{base}.{i + 1}")
        if self.path.exists():
            os.replace(base, f"{base}.1")
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_private(self.path, os.O_RDWR | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            if size:
                size = self._repair_tail(fd, size)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._size = size

    def _close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def _repair_tail(self, fd: int, size: int) -> int:
        """Make the file end on a whole line; return its new size.

        A tail without a newline is what a crash mid-write (or a full disk) leaves. If it is a
        whole JSON object it only lacks its newline; otherwise it is moved to `<log>.torn`.
        """
        if os.pread(fd, 1, size - 1) == _NEWLINE:
            return size
        end = size
        cut = 0
        while end > 0:
            start = max(0, end - TAIL_CHUNK_BYTES)
            i = os.pread(fd, end - start, start).rfind(_NEWLINE)
            if i >= 0:
                cut = start + i + 1
                break
            end = start
        tail = os.pread(fd, size - cut, cut)
        try:
            whole = isinstance(orjson.loads(tail), dict)
        except orjson.JSONDecodeError:
            whole = False
        if whole:
            os.write(fd, _NEWLINE)
            return size + 1
        torn_path = Path(f"{self.path}{TORN_SUFFIX}")
        torn_fd = open_private(torn_path, os.O_WRONLY | os.O_APPEND)
        with os.fdopen(torn_fd, "ab") as torn:
            torn.write(tail + _NEWLINE)
        os.ftruncate(fd, cut)
        self.emit(
            "error",
            error=f"repaired a torn last line in {self.path.name}: "
            f"{len(tail)} bytes moved to {torn_path.name}",
            actor="log",
            bytes=len(tail),
        )
        return cut

    def _internal_line(self, fields: dict[str, object]) -> bytes:
        ts = _rfc3339(int(self._clock() * 1000))
        return orjson.dumps({"ts": ts, **fields}, option=_DUMPS_OPTIONS)


@attrs.define
class _Flood:
    """One kind of error within its window: lines written, and how many more were counted."""

    start: float
    fields: tuple[str, dict[str, object]]
    written: int = 0
    repeated: int = 0


def _flood_kind(event: str, fields: dict[str, object]) -> tuple[str, ...]:
    kind = [event]
    for name in _KIND_FIELDS:
        value = fields.get(name)
        if value is not None:
            kind.append(f"{name}={value}"[:FLOOD_TEXT_CHARS])
    for name in _TEXT_FIELDS:
        value = fields.get(name)
        if value is not None:
            kind.append(str(value)[:FLOOD_TEXT_CHARS])
            break
    return tuple(kind)


def _kind_fields(event: str, fields: dict[str, object]) -> tuple[str, dict[str, object]]:
    """What the `repeated` line says about the kind: its naming fields, not one payload's."""
    kept: dict[str, object] = {k: fields[k] for k in (*_KIND_FIELDS, *_TEXT_FIELDS) if k in fields}
    return event, kept


@attrs.frozen
class LogStatistics:
    """Counters of the action log."""

    pending: int
    written: int
    dropped: int
    file_bytes: int


def _rfc3339(ms: int) -> str:
    """RFC 3339 UTC with milliseconds: `2025-06-01T12:00:00.123Z`."""
    seconds, millis = divmod(ms, 1000)
    return f"{_utc_second(seconds)}.{millis:03d}Z"


# Every event is stamped, and an answer's events fall within the same second or two.
@functools.lru_cache(maxsize=4)
def _utc_second(seconds: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds))


def _dropped_fields(count: int) -> dict[str, object]:
    return {
        "event": "error",
        "error": f"action log queue was full: {count} events dropped",
        "actor": "log",
        "dropped": count,
    }


def _rename_clashes(ts: str, event: str, fields: dict[str, object]) -> dict[str, object]:
    """Keep `ts` and `event` ours; a caller's fields of those names get a `field_` prefix."""
    record: dict[str, object] = {"ts": ts, "event": event}
    for key, value in fields.items():
        record[f"field_{key}" if key in ("ts", "event") else key] = value
    return record


def _to_json(obj: object) -> object:
    """orjson's fallback for types it does not know: readable, never an exception."""
    if attrs.has(type(obj)):
        return attrs.asdict(obj, recurse=False)  # type: ignore[arg-type]
    if isinstance(obj, BaseException):
        text = str(obj)
        return f"{type(obj).__name__}: {text}" if text else type(obj).__name__
    if isinstance(obj, bytes | bytearray):
        return bytes(obj).decode("utf-8", "replace")
    if isinstance(obj, set | frozenset):
        return list(obj)
    return str(obj)


def _dumps_lenient(record: dict[str, object]) -> bytes:
    """Serialize what orjson refused (huge ints, odd keys, deep nesting) as text."""
    try:
        return orjson.dumps(_plain(record, 0), default=_to_json, option=_DUMPS_OPTIONS)
    except TypeError:
        head = {k: record[k] for k in ("ts", "event")}
        text = repr(record)[:LENIENT_REPR_MAX_CHARS]
        fallback = {**head, "error": "event fields could not be serialized", "repr": text}
        return orjson.dumps(fallback, option=_DUMPS_OPTIONS)


def _plain(obj: object, depth: int) -> object:
    """`obj` with non-string keys and out-of-range integers turned into strings."""
    if depth > LENIENT_MAX_DEPTH:
        return repr(obj)[:LENIENT_REPR_MAX_CHARS]
    if isinstance(obj, dict):
        return {k if isinstance(k, str) else str(k): _plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v, depth + 1) for v in obj]
    if isinstance(obj, int) and not isinstance(obj, bool) and not -(2**63) <= obj < 2**64:
        return str(obj)
    return obj
