"""The SQLite store: `from picortex.store import Store`."""

from __future__ import annotations

from picortex.store.actor import StoreActor
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
    "ChatConfig",
    "InvocationError",
    "MemoryHit",
    "Store",
    "StoreActor",
    "fts_query",
]
