"""`picortex errors`: the table, --unresolved, --json, --patterns and resolve."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from picortex.cli.errors import COLUMNS, failure_patterns, rfc3339, run_errors, run_resolve
from picortex.config import CompostSettings
from picortex.store import Store

T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(tmp_path / "picortex.db") as opened:
        yield opened


def _run(store: Store, *, now: float = T0 + 600, **flags: bool) -> str:
    out = io.StringIO()
    options = {"unresolved": False, "as_json": False, "patterns": False, **flags}
    assert run_errors(store, out=out, now=now, **options) == 0
    return out.getvalue()


def _seed(store: Store) -> list[int]:
    return [
        store.add_invocation_error("42", "arnold", 1001, "generate", "model timed out", "tb1", T0),
        store.add_invocation_error("42", "arnold", 1002, "generate", "HTTP 529", None, T0 + 60),
        store.add_invocation_error("dm", "default", 1003, "post", "403 Forbidden", None, T0 + 5),
        store.add_invocation_error("42", "sage", 1004, "tiebreak", "bad answer", None, T0 + 9),
    ]


def test_empty(store: Store) -> None:
    assert _run(store) == "No invocation errors.\n"
    assert _run(store, unresolved=True) == "No unresolved invocation errors.\n"
    assert _run(store, as_json=True).strip() == "[]"
    assert _run(store, patterns=True) == "No unresolved invocation errors.\n"


def test_table_lists_every_error(store: Store) -> None:
    ids = _seed(store)
    store.resolve_invocation_error(ids[2], "dismissed", T0 + 100)
    lines = _run(store).splitlines()
    assert lines[0].split() == [
        "ID", "CREATED", "(UTC)", "WORKSPACE", "PERSONA", "STAGE", "SIGNAL", "STATUS", "ERROR",
    ]  # fmt: skip
    assert len(lines) == 5
    assert lines[1].split()[:9] == [
        str(ids[0]), "2026-01-01", "00:00:00", "42", "arnold", "generate", "1001", "open", "model",
    ]  # fmt: skip
    assert "dismissed" in lines[3]
    assert "403 Forbidden" in lines[3]


def test_unresolved_hides_resolved(store: Store) -> None:
    ids = _seed(store)
    store.resolve_invocation_error(ids[0], "fixed", T0 + 100)
    text = _run(store, unresolved=True)
    assert "model timed out" not in text
    assert "HTTP 529" in text


def test_table_flattens_hostile_messages(store: Store) -> None:
    store.add_invocation_error("dm", "p", 1, "post", "line one\nline two\x1b[31mred", None, T0)
    text = _run(store)
    assert "\x1b" not in text
    assert len(text.splitlines()) == 2
    assert "line one line two" in text


def test_long_messages_are_cut_in_the_table(store: Store) -> None:
    store.add_invocation_error("dm", "p", 1, "post", "x" * 500, None, T0)
    assert "x" * 69 + "..." in _run(store)
    assert "x" * 500 in _run(store, as_json=True)


def test_json_has_the_table_columns(store: Store) -> None:
    ids = _seed(store)
    store.resolve_invocation_error(ids[1], "composted", T0 + 120.5)
    rows = orjson.loads(_run(store, as_json=True))
    assert [list(row) for row in rows] == [list(COLUMNS)] * 4
    assert rows[0] == {
        "id": ids[0],
        "workspace_id": "42",
        "persona": "arnold",
        "signal_id": "1001",
        "stage": "generate",
        "error_message": "model timed out",
        "stack_trace": "tb1",
        "created_at": "2026-01-01T00:00:00.000Z",
        "resolved_at": None,
        "resolution": None,
    }
    assert rows[1]["resolved_at"] == "2026-01-01T00:02:00.500Z"
    assert rows[1]["resolution"] == "composted"
    only_open = orjson.loads(_run(store, as_json=True, unresolved=True))
    assert [row["id"] for row in only_open] == [ids[0], ids[2], ids[3]]


def test_patterns_group_unresolved_by_persona_and_stage(store: Store) -> None:
    ids = _seed(store)
    store.resolve_invocation_error(ids[3], "fixed", T0 + 100)
    found = failure_patterns(store.invocation_errors())
    assert [(p.persona, p.stage, p.count, p.latest_message) for p in found] == [
        ("arnold", "generate", 2, "HTTP 529"),
        ("default", "post", 1, "403 Forbidden"),
    ]
    lines = _run(store, patterns=True).splitlines()
    assert lines[0].split() == [
        "COUNT",
        *("PERSONA", "STAGE", "LATEST", "(UTC)", "PAUSED", "UNTIL", "LATEST", "ERROR"),
    ]
    assert lines[1].split()[:3] == ["2", "arnold", "generate"]
    assert lines[1].endswith("HTTP 529")
    assert len(lines) == 3
    assert "sage" not in "\n".join(lines)


def test_patterns_as_json(store: Store) -> None:
    _seed(store)
    rows = orjson.loads(_run(store, patterns=True, as_json=True))
    assert rows[0] == {
        "persona": "arnold",
        "stage": "generate",
        "count": 2,
        "first_at": "2026-01-01T00:00:00.000Z",
        "latest_at": "2026-01-01T00:01:00.000Z",
        "latest_message": "HTTP 529",
        "paused_until": None,
    }
    assert len(rows) == 3


def test_patterns_show_what_composting_paused_and_until_when(store: Store) -> None:
    ids = _seed(store)
    for i in range(3):
        store.add_invocation_error("42", "arnold", 2000 + i, "post", "gone", None, T0 + 100 + i)
    store.add_invocation_error("42", "sage", 1005, "tiebreak", "bad", None, T0 + 200)
    settings = CompostSettings(threshold=5, pause_seconds=600)
    out = io.StringIO()
    run_errors(
        store,
        unresolved=False,
        as_json=True,
        patterns=True,
        out=out,
        composted=settings,
        now=T0 + 300,
    )
    rows = {(r["persona"], r["stage"]): r["paused_until"] for r in orjson.loads(out.getvalue())}
    # arnold: 2 generate + 3 post errors within the hour, the fifth at T0 + 102.
    assert rows[("arnold", "generate")] == rows[("arnold", "post")] == "2026-01-01T00:11:42.000Z"
    assert rows[("sage", "tiebreak")] is None and rows[("default", "post")] is None
    out = io.StringIO()
    run_errors(
        store,
        unresolved=False,
        as_json=False,
        patterns=True,
        out=out,
        composted=settings,
        now=T0 + 300,
    )
    lines = out.getvalue().splitlines()
    assert lines[-1] == (
        "Paused: persona arnold until 2026-01-01 00:11:42 UTC (5 unresolved persona arnold"
        " errors within an hour reached the threshold of 5)."
    )
    assert "2026-01-01 00:11:42" in next(line for line in lines if " generate " in line)
    # Resolving one of them lifts the pause; after pause_seconds it ends by itself.
    store.resolve_invocation_error(ids[0], "fixed", T0 + 301)
    out = io.StringIO()
    run_errors(
        store,
        unresolved=False,
        as_json=False,
        patterns=True,
        out=out,
        composted=settings,
        now=T0 + 302,
    )
    assert "Paused:" not in out.getvalue()


def test_resolve(store: Store) -> None:
    ids = _seed(store)
    out, err = io.StringIO(), io.StringIO()
    assert run_resolve(store, ids[0], "fixed", out, T0 + 500, err=err) == 0
    assert out.getvalue() == f"Invocation error {ids[0]} resolved as fixed.\n"
    assert err.getvalue() == ""
    resolved = store.invocation_error(ids[0])
    assert resolved is not None
    assert (resolved.resolution, resolved.resolved_at) == ("fixed", T0 + 500)


def test_resolve_unknown_id(store: Store) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert run_resolve(store, 999, "fixed", out, T0, err=err) == 2
    assert err.getvalue() == "No invocation error has id 999.\n"
    assert out.getvalue() == ""


def test_resolve_unknown_resolution(store: Store) -> None:
    ids = _seed(store)
    out, err = io.StringIO(), io.StringIO()
    assert run_resolve(store, ids[0], "ignored", out, T0, err=err) == 2
    assert err.getvalue() == "--as must be one of fixed, dismissed, composted, got 'ignored'\n"
    assert store.invocation_errors(unresolved_only=True)[0].id == ids[0]


def test_resolve_writes_to_stderr_by_default(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_resolve(store, 5, "fixed", io.StringIO(), T0) == 2
    assert capsys.readouterr().err == "No invocation error has id 5.\n"


def test_rfc3339() -> None:
    assert rfc3339(None) is None
    assert rfc3339(T0 + 0.25) == "2026-01-01T00:00:00.250Z"
