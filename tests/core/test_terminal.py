"""Remote text printed to a terminal: control characters become visible escapes."""

from __future__ import annotations

import io
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.cli import status
from picortex.cli.log import format_event
from picortex.cli.status import format_status, run_status
from picortex.config import Settings
from picortex.core.terminal import clean_line, clean_text

EVIL = "hi\x1b[2J\x1b]0;owned\x07\r\x9b31m\u202eevil\x00"


def _unsafe(text: str) -> bool:
    return any(
        (ord(c) < 32 and c not in "\t\n")
        or 0x7F <= ord(c) <= 0x9F
        or c in "\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
        for c in text
    )


def test_escape_sequences_and_controls_are_shown_not_obeyed() -> None:
    out = clean_line(EVIL + "\nsecond")
    assert not _unsafe(out) and "\n" not in out
    assert out.startswith("hi\\u001b[2J")
    assert "\\u202e" in out and "\\u009b" in out
    assert clean_text("a\nb\tc\x1b") == "a\nb\tc\\u001b"


@given(st.text())
def test_cleaned_text_is_always_safe_and_json_stays_json(text: str) -> None:
    assert not _unsafe(clean_line(text))
    assert "\n" not in clean_line(text)
    assert not _unsafe(clean_text(text).replace("\n", ""))
    line = orjson.dumps({"text": text}).decode()
    parsed = orjson.loads(clean_line(line))  # still JSON: escapes only inside strings
    if not _unsafe(text):
        assert parsed == {"text": text}


def test_status_and_log_lines_never_carry_control_characters() -> None:
    snapshot = {
        "triggers": [{"author_name": EVIL, "content": EVIL, "channel_name": EVIL}],
        "mailboxes": [{"name": EVIL, "channel_id": "1", "depth": 1}],
    }
    for line in format_status(snapshot):
        assert not _unsafe(clean_line(line))
    assert not _unsafe(format_event({"ts": "t", "event": "decision", "reason": EVIL}))


def test_run_status_prints_clean_lines(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    snapshot = {"triggers": [{"author_name": EVIL, "content": EVIL}]}
    monkeypatch.setattr(status, "_ask", lambda home, timeout: snapshot)
    out = io.StringIO()
    assert run_status(Settings(home=tmp_path), out=out) == 0
    assert not _unsafe(out.getvalue().replace("\n", ""))
    assert "\\u001b" in out.getvalue()
