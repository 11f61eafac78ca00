"""The store: named queries (`StoreQueries`, `AdminQueries`) over SQLite, or over
PostgreSQL when `PICORTEX_DATABASE_URL` is set (`picortex.store.backends` chooses).

The running bot's store is `StoreActor`; a command run outside the bot opens `AdminStore`.
`Store` (the apsw connection and its SQL) and `picortex.store.pg` are for `picortex.store`
and tests only.
"""

from __future__ import annotations

from picortex.store.actor import StoreActor
from picortex.store.admin import AdminStore
from picortex.store.queries import AdminQueries, StoreQueries
from picortex.store.store import (
    DM_WORKSPACE,
    RESOLUTIONS,
    STAGES,
    TRUST_TIERS,
    ChatConfig,
    InvocationError,
    MemoryHit,
    Store,
    fts_query,
)

__all__ = [
    "DM_WORKSPACE",
    "RESOLUTIONS",
    "STAGES",
    "TRUST_TIERS",
    "AdminQueries",
    "AdminStore",
    "ChatConfig",
    "InvocationError",
    "MemoryHit",
    "Store",
    "StoreActor",
    "StoreQueries",
    "fts_query",
]


def _conforms(bot: StoreActor, admin: AdminStore) -> tuple[StoreQueries, AdminQueries]:
    """Never called: mypy checks here that each store answers the protocol it is typed by."""
    return bot, admin
