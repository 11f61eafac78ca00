"""SIGKILL a writing process 30 times: the file stays sound and no committed row is lost.

Every third kill lands while the store opens (at once after the fork); the others after the
writer's first few commits, counted in committed ids, not timed: inside its write loop.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from picortex.store import Store

RUNS = 30
# Commits a writer makes before its kill (inside the write loop), at most.
COMMITS_MAX = 20
REPO = Path(__file__).resolve().parents[2]


def _writers() -> subprocess.Popen[str]:
    """The process that forks the writers (tests/store/crash_writer.py)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.store.crash_writer"],
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
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


@pytest.mark.long(seconds=6)
def test_sigkill_while_opening_or_writing_loses_no_committed_row(tmp_path: Path) -> None:
    db = tmp_path / "picortex.db"
    rng = random.Random(2026)
    committed: set[int] = set()
    runs_with_commits = 0
    pid = 0
    with _writers() as writers:
        assert writers.stdin is not None
        assert writers.stdout is not None
        try:
            for run in range(RUNS):
                fifo = tmp_path / f"run{run}.fifo"
                os.mkfifo(fifo)
                writers.stdin.write(f"{db} {fifo}\n")
                writers.stdin.flush()
                pid = int(writers.stdout.readline())
                # Opens once the writer has: it is running from here on.
                with fifo.open(encoding="utf-8") as out:
                    read = ""
                    if run % 3 != 0:
                        first = out.readline()
                        assert first == "ready\n", first
                        # Killed after some commits: the next transaction is under way.
                        for _ in range(rng.randint(1, COMMITS_MAX)):
                            read += out.readline()
                    os.kill(pid, signal.SIGKILL)
                    written = read + out.read()
                status = int(writers.stdout.readline())
                pid = 0
                assert os.WIFSIGNALED(status)
                assert os.WTERMSIG(status) == signal.SIGKILL
                ids = {int(line) for line in written.split() if line.isdigit()}
                runs_with_commits += bool(ids)
                assert not ids & committed, "an id was handed out twice"
                committed |= ids
                _check(db, committed)
        finally:
            if pid:  # a failure left a writer running: the server waits for it
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    # Every kill counted from "ready" landed inside the write loop, after commits.
    assert runs_with_commits >= RUNS - (RUNS + 2) // 3
    with Store.open(db) as store:
        assert store.pragma("integrity_check") == "ok"
        assert {e.id for e in store.invocation_errors()} >= committed
