"""`picortex backup PATH`: SQLite's online backup, consistent while the bot writes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import apsw
import pytest

from picortex import cli
from picortex.errors import StoreError
from picortex.store import Store
from picortex.store.backup import backup_database


def _error(store: Store, n: int) -> int:
    return store.add_invocation_error(
        workspace_id="w",
        persona="p",
        signal_id=n,
        stage="generate",
        error_message=f"failure {n}",
        stack_trace=None,
        created_at=1.0,
    )


def test_a_backup_taken_mid_write_holds_exactly_what_was_committed(tmp_path: Path) -> None:
    db = tmp_path / "picortex.db"
    store = Store.open(db)
    for n in range(3):
        _error(store, n)
    # Another writer is in the middle of a transaction, as the running bot may be.
    writer = apsw.Connection(str(db))
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO invocation_errors (workspace_id, persona, signal_id, stage, "
        "error_message, created_at) VALUES ('w', 'p', '9', 'generate', 'uncommitted', 1.0)"
    )
    target = tmp_path / "copy.db"
    size = backup_database(db, target)
    writer.execute("COMMIT")
    writer.close()
    store.close()

    assert size == target.stat().st_size > 0
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert not list(tmp_path.glob(".copy.db*"))
    copy = Store.open(target)
    try:
        messages = sorted(e.error_message for e in copy.invocation_errors())
    finally:
        copy.close()
    assert messages == ["failure 0", "failure 1", "failure 2"]


def test_a_backup_never_overwrites_and_needs_a_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="there is no database"):
        backup_database(tmp_path / "missing.db", tmp_path / "copy.db")
    db = tmp_path / "picortex.db"
    Store.open(db).close()
    existing = tmp_path / "copy.db"
    existing.write_bytes(b"precious")
    with pytest.raises(StoreError, match="already exists"):
        backup_database(db, existing)
    assert existing.read_bytes() == b"precious"


def test_picortex_backup_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("PICORTEX_HOME", str(home))
    home.mkdir()
    store = Store.open(home / "picortex.db")
    _error(store, 1)
    target = tmp_path / "backup.db"
    try:
        assert cli.main(["backup", str(target)]) == 0
    finally:
        store.close()
    assert f"to {target}" in capsys.readouterr().out
    assert cli.main(["backup", str(target)]) == 2
    assert capsys.readouterr().err == (
        f"picortex: {target} already exists; name a new file for the backup\n"
    )
    assert os.path.getsize(target) > 0
