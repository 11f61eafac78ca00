"""`picortex cluster init`: create or migrate the shared PostgreSQL schema (SPEC 17)."""

from __future__ import annotations

import argparse

from picortex.cli import common
from picortex.errors import ConfigError
from picortex.store.backends import connect_postgres
from picortex.store.pg.schema import LATEST_VERSION


def command(args: argparse.Namespace) -> int:
    """Bring the schema of PICORTEX_DATABASE_URL's database up to this picortex's version."""
    settings = common.settings()
    if not settings.database_url:
        raise ConfigError(
            "picortex cluster needs PICORTEX_DATABASE_URL (postgresql://...); "
            "without it picortex uses the home's SQLite file and there is nothing to set up"
        )
    db = connect_postgres(settings.database_url)  # creates or migrates the schema
    try:
        version = db.schema_version()
        where = db.path
    finally:
        db.close()
    print(f"{where}: schema version {version} (this picortex's latest: {LATEST_VERSION})")
    return 0
