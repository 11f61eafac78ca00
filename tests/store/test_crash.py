"""SIGKILL a writing process 30 times: the file stays sound and no committed row is lost."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import apsw

from picortex.store import Store

RUNS = 30
REPO = Path(__file__).resolve().parents[2]


def _spawn(db: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.crash_writer", str(db)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _check(db: Path, committed: set[int]) -> None:
    conn = apsw.Connection(str(db))
    try:
        assert conn.execute("PRAGMA integrity_check").get == "ok"
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema")}
        if "memory_observations_fts" not in tables:
            # Killed before the store finished its first open: nothing can be committed yet.
            assert not committed
            return
        for table in ("memory_messages_fts", "memory_observations_fts"):
            conn.execute(f"INSERT INTO {table} ({table}) VALUES ('integrity-check')")
        present = {row[0] for row in conn.execute("SELECT id FROM invocation_errors")}
        missing = committed - present
        assert not missing, f"committed ids lost: {sorted(missing)[:10]}"
        # The other writes of each transaction landed with it, or not at all.
        for table, column in (
            ("memory_messages", "message_id"),
            ("memory_observations", "message_id"),
            ("seen_events", "message_id"),
            ("trust", "user_id"),
        ):
            ids = {row[0] for row in conn.execute(f"SELECT {column} FROM {table}")}
            assert ids == present, table
        spend = conn.execute("SELECT count(*) FROM budget_ledger").get
        assert spend == len(present)
    finally:
        conn.close()


def test_sigkill_at_random_moments_loses_no_committed_row(tmp_path: Path) -> None:
    db = tmp_path / "picortex.db"
    rng = random.Random(2026)
    committed: set[int] = set()
    runs_with_commits = 0
    for run in range(RUNS):
        proc = _spawn(db)
        assert proc.stdout is not None
        # Every third run is killed counting from the spawn, so the kill may land while the
        # store opens; the others count from "ready", so it lands inside the write loop.
        if run % 3 != 0:
            first = proc.stdout.readline()
            assert first == "ready\n", proc.stderr.read() if proc.stderr else first
        time.sleep(rng.uniform(0.02, 0.2))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        ids = {int(line) for line in out.split() if line.isdigit()}
        runs_with_commits += bool(ids)
        assert not ids & committed, "an id was handed out twice"
        committed |= ids
        _check(db, committed)
    assert runs_with_commits >= RUNS // 3  # the kills did land inside the write loop
    with Store.open(db) as store:
        assert store.integrity_check() == "ok"
        assert {e.id for e in store.invocation_errors()} >= committed
