"""The SQL layer a store runs: SQLite's `Store`, or `PgDatabase` when a database URL is set.

Both have the same methods; the store actor and `AdminStore` decide when they run, never
which SQL they speak.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from picortex.store.pg.database import PgDatabase
    from picortex.store.store import Store

Database: TypeAlias = "Store | PgDatabase"
