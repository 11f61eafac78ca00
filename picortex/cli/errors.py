"""`picortex errors`: list, group and resolve the failed invocations kept in `picortex.db`."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, TextIO

import attrs
import orjson

from picortex.cli import common
from picortex.config import CompostSettings
from picortex.core import composting
from picortex.core.events import rfc3339
from picortex.core.redact import redact, redact_json_bytes
from picortex.core.terminal import clean_line, clean_text
from picortex.errors import ConfigError
from picortex.store import RESOLUTIONS, AdminQueries, InvocationError
from picortex.store.queries import ErrorQueries

MESSAGE_WIDTH: Final = 72  # the table's error column is cut here so a row fits one line
COLUMNS: Final = (
    "id",
    "workspace_id",
    "persona",
    "signal_id",
    "stage",
    "error_message",
    "stack_trace",
    "created_at",
    "resolved_at",
    "resolution",
)


@attrs.frozen
class FailurePattern:
    """Unresolved failures of one persona at one stage."""

    persona: str
    stage: str
    count: int
    first_at: float
    latest_at: float
    latest_message: str


def _short_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _one_line(text: str, width: int = MESSAGE_WIDTH) -> str:
    """Text on one printable line (no control characters from remote errors), cut to width."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def error_record(error: InvocationError) -> dict[str, object]:
    """One error as a JSON object with the table's columns; times in RFC 3339 UTC."""
    record: dict[str, object] = {name: getattr(error, name) for name in COLUMNS}
    record["created_at"] = rfc3339(error.created_at)
    record["resolved_at"] = rfc3339(error.resolved_at)
    return record


def failure_patterns(errors: Sequence[InvocationError]) -> list[FailurePattern]:
    """Unresolved errors grouped by persona and stage, the most frequent first."""
    groups: dict[tuple[str, str], list[InvocationError]] = {}
    for error in errors:
        if error.resolved_at is None:
            groups.setdefault((error.persona, error.stage), []).append(error)
    patterns = []
    for (persona, stage), members in groups.items():
        latest = max(members, key=lambda e: (e.created_at, e.id))
        patterns.append(
            FailurePattern(
                persona=persona,
                stage=stage,
                count=len(members),
                first_at=min(e.created_at for e in members),
                latest_at=latest.created_at,
                latest_message=latest.error_message,
            )
        )
    patterns.sort(key=lambda p: (-p.count, -p.latest_at, p.persona, p.stage))
    return patterns


def current_pauses(
    store: ErrorQueries, settings: CompostSettings, now: float
) -> list[composting.Pause]:
    """The personas and stages composting pauses at `now` (what the running bot finds)."""
    rows = store.unresolved_errors_since(composting.looked_back(now, settings.pause_seconds))
    return composting.pauses(
        (composting.ErrorMark(p, s, at) for p, s, at in rows),
        threshold=settings.threshold,
        pause_seconds=settings.pause_seconds,
        now=now,
    )


def pause_record(pause: composting.Pause, threshold: int) -> dict[str, object]:
    """One pause as a JSON object: what is paused, until when and why."""
    return {
        "kind": pause.kind,
        "name": pause.name,
        "errors": pause.errors,
        "since": rfc3339(pause.since),
        "until": rfc3339(pause.until),
        "reason": pause.reason(threshold),
    }


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], out: TextIO) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        out.write(clean_line(redact("  ".join(cells).rstrip())) + "\n")


def _dump(value: object, out: TextIO) -> None:
    text = orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
    out.write(clean_text(redact_json_bytes(text.encode()).decode()) + "\n")


def run_errors(
    store: AdminQueries,
    *,
    unresolved: bool,
    as_json: bool,
    patterns: bool,
    out: TextIO,
    composted: CompostSettings | None = None,
    now: float | None = None,
) -> int:
    """List invocation errors (`--unresolved`, `--json`) or group them (`--patterns`, with
    what composting pauses at `now` under `composted`, the settings in force).

    Returns:
        The exit code: 0.
    """
    if patterns:
        found = failure_patterns(store.invocation_errors(unresolved_only=True))
        settings = composted or CompostSettings()
        paused = current_pauses(store, settings, time.time() if now is None else now)

        def until(p: FailurePattern) -> str | None:
            pause = composting.pause_for(paused, p.persona, p.stage)
            return None if pause is None else rfc3339(pause.until)

        if as_json:
            _dump(
                [
                    {
                        "persona": p.persona,
                        "stage": p.stage,
                        "count": p.count,
                        "first_at": rfc3339(p.first_at),
                        "latest_at": rfc3339(p.latest_at),
                        "latest_message": p.latest_message,
                        "paused_until": until(p),
                    }
                    for p in found
                ],
                out,
            )
        elif not found:
            out.write("No unresolved invocation errors.\n")
        else:
            rows = [
                [
                    str(p.count),
                    _one_line(p.persona, 24),
                    p.stage,
                    _short_time(p.latest_at),
                    _paused_cell(paused, p),
                    _one_line(p.latest_message),
                ]
                for p in found
            ]
            header = ["COUNT", "PERSONA", "STAGE", "LATEST (UTC)", "PAUSED UNTIL", "LATEST ERROR"]
            _table(header, rows, out)
            for pause in paused:
                out.write(
                    clean_line(
                        f"Paused: {pause.kind} {pause.name} until {_short_time(pause.until)} UTC"
                        f" ({pause.reason(settings.threshold)})."
                    )
                    + "\n"
                )
        return 0

    errors = store.invocation_errors(unresolved_only=unresolved)
    if as_json:
        _dump([error_record(e) for e in errors], out)
        return 0
    if not errors:
        out.write("No unresolved invocation errors.\n" if unresolved else "No invocation errors.\n")
        return 0
    rows = [
        [
            str(e.id),
            _short_time(e.created_at),
            _one_line(e.workspace_id, 24),
            _one_line(e.persona, 24),
            e.stage,
            _one_line(e.signal_id, 24),
            e.resolution or "open",
            _one_line(e.error_message),
        ]
        for e in errors
    ]
    header = ["ID", "CREATED (UTC)", "WORKSPACE", "PERSONA", "STAGE", "SIGNAL", "STATUS", "ERROR"]
    _table(header, rows, out)
    return 0


def _paused_cell(paused: Sequence[composting.Pause], pattern: FailurePattern) -> str:
    pause = composting.pause_for(paused, pattern.persona, pattern.stage)
    return "-" if pause is None else _short_time(pause.until)


def run_resolve(
    store: AdminQueries,
    id: int,
    resolution: str,
    out: TextIO,
    now: float,
    *,
    err: TextIO | None = None,
) -> int:
    """`picortex errors resolve ID --as fixed|dismissed|composted`.

    Returns:
        0 when resolved; 2 (one sentence on `err`) for an unknown id or resolution.
    """
    err = sys.stderr if err is None else err
    if resolution not in RESOLUTIONS:
        err.write(
            f"--as must be one of {', '.join(RESOLUTIONS)}, got {_one_line(resolution, 40)!r}\n"
        )
        return 2
    if not store.resolve_invocation_error(id, resolution, now):
        err.write(f"No invocation error has id {id}.\n")
        return 2
    out.write(f"Invocation error {id} resolved as {resolution}.\n")
    return 0


def command(args: argparse.Namespace) -> int:
    """List failed invocations, or resolve one."""
    settings = common.reading_settings()
    store = common.open_store(settings)
    try:
        if args.errors_command == "resolve":
            return run_resolve(
                store, args.id, args.resolution, sys.stdout, time.time(), err=sys.stderr
            )
        try:
            live = settings.with_runtime(store.runtime_config())
        except ConfigError:  # a bad stored value: the file's settings still show the errors
            live = settings
        return run_errors(
            store,
            unresolved=args.unresolved,
            as_json=args.json,
            patterns=args.patterns,
            out=sys.stdout,
            composted=live.composting,
        )
    finally:
        store.close()
