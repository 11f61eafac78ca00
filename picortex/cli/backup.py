"""`picortex backup PATH`: a consistent copy of picortex.db, safe while the bot runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from picortex.cli import common
from picortex.errors import ConfigError
from picortex.store.backup import backup_database


def command(args: argparse.Namespace) -> int:
    """Copy the database to the new file `args.path`."""
    settings = common.reading_settings()
    if settings.database_url:
        # The store is not in the home's file then: a copy of it would hold nothing current.
        raise ConfigError(
            "picortex backup copies the SQLite file; with PICORTEX_DATABASE_URL set, "
            "back up PostgreSQL with pg_dump"
        )
    target = Path(args.path).expanduser()
    size = backup_database(settings.db_path, target)
    print(f"backed up {settings.db_path} to {target} ({size:,} bytes)")
    return 0
