"""`picortex backup PATH`: a consistent copy of `picortex.db`, safe while the bot runs.

SQLite's online backup reads one snapshot of the database; in WAL mode that read blocks no
writer, so the running bot carries on while the copy is made. The copy is written under a
temporary name and renamed into place, so PATH is either the whole backup or absent.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

import apsw

from picortex.errors import StoreError
from picortex.files import private_file

# A busy bot may hold the write lock for a group commit; wait this long for a snapshot.
BUSY_TIMEOUT_MS: Final = 5_000


def backup_database(db_path: Path, target: Path) -> int:
    """Copy the database at `db_path` to the new file `target`; returns the copy's size.

    Raises:
        StoreError: there is no database, `target` exists, or SQLite failed (one sentence).
    """
    if not db_path.is_file():
        raise StoreError(f"there is no database at {db_path} to back up")
    if target.exists():
        raise StoreError(f"{target} already exists; name a new file for the backup")
    if not target.parent.is_dir():
        raise StoreError(f"{target.parent} is not a folder")
    partial = target.with_name(f".{target.name}.partial")
    try:
        # Read-write like the bot, so WAL side files are shared, not recreated; never written.
        source = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READWRITE)
        try:
            source.set_busy_timeout(BUSY_TIMEOUT_MS)
            copy = apsw.Connection(str(partial))
            try:
                with copy.backup("main", source, "main") as job:
                    # One step: one snapshot, so the copy is consistent whatever the bot writes.
                    job.step(-1)
                # A backup is one self-contained file, not a WAL database with side files.
                copy.execute("PRAGMA journal_mode = DELETE")
                check = copy.execute("PRAGMA quick_check").get
            finally:
                copy.close()
        finally:
            source.close()
        if check != "ok":
            raise StoreError(f"the copy failed SQLite's check ({check}); nothing was written")
        private_file(partial)
        os.replace(partial, target)
    except apsw.Error as exc:
        raise StoreError(f"could not back up {db_path}: {exc}") from None
    except OSError as exc:
        raise StoreError(f"could not write {target}: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()
    return target.stat().st_size
