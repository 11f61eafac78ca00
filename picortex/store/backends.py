"""Which database a store runs on: PostgreSQL when `PICORTEX_DATABASE_URL` is set (SPEC 17),
else the home's SQLite file. psycopg is imported only in the first case."""

from __future__ import annotations

from typing import TYPE_CHECKING

from picortex.errors import StoreError
from picortex.store.actor import StoreActor
from picortex.store.admin import AdminStore
from picortex.store.store import Store

if TYPE_CHECKING:
    from collections.abc import Sequence

    from picortex.config import Settings
    from picortex.discord.shared_limits import SharedLimits
    from picortex.store.database import Database
    from picortex.store.pg.database import PgDatabase
    from picortex.store.shards import Shard

MISSING_PSYCOPG = (
    "PICORTEX_DATABASE_URL is set but the PostgreSQL driver is not installed: "
    "install picortex[cluster] (pip install 'picortex[cluster]')"
)


def connect_postgres(url: str) -> PgDatabase:
    """Connect to PostgreSQL at `url`, creating or migrating the schema.

    Raises:
        StoreError: one sentence when psycopg is missing or the database cannot be used.
    """
    try:
        from picortex.store.pg.database import PgDatabase
    except ImportError as exc:
        if (exc.name or "").split(".")[0] != "psycopg":
            raise
        raise StoreError(MISSING_PSYCOPG) from None
    return PgDatabase.open(url)


def open_database(settings: Settings) -> Database:
    """The settings' database, created or migrated if needed."""
    if settings.database_url:
        return connect_postgres(settings.database_url)
    return Store.open(settings.db_path)


def open_store(settings: Settings, *, shards: Sequence[Shard] = ((0, 1),)) -> StoreActor:
    """The running bot's store over the settings' database, for the shards it serves."""
    return StoreActor(open_database(settings), shards=shards)


def open_admin(settings: Settings) -> AdminStore:
    """The store a command run outside the bot uses, over the settings' database."""
    return AdminStore(open_database(settings))


def open_shared_limits(settings: Settings) -> SharedLimits | None:
    """Discord's limits shared with the cluster's other processes (SPEC 17); None without
    `PICORTEX_DATABASE_URL` (one process keeps them alone)."""
    if not settings.database_url:
        return None
    from picortex.store.pg.database import describe
    from picortex.store.pg.limits import open_limits

    return open_limits(settings.database_url, describe(settings.database_url))
