"""A shard taken over (SPEC 17): the handled marks its last holder made, in this process's
memory before the shard's gateway starts.

Another process marked them, so this process's memory lacks them, and an id above its own
seen floor would count as surely unhandled: a replay after RESUME would be answered again.
Loaded here: every message handled in the last ADOPT_SECONDS (whichever shard; guild ids of
handled marks are not recorded, so not only the shard's own). Older ones are far below any
replay a saved session can bring (Discord keeps a session for minutes).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    from picortex.store.actor import StoreActor
    from picortex.store.database import Database
    from picortex.store.pg.database import PgDatabase

ADOPT_SECONDS: Final = 15 * 60.0


async def adopt_shard(store: StoreActor, shard: tuple[int, int]) -> None:
    """Remember in `store`'s memory the messages handled lately, before serving `shard`."""
    since = time.time() - ADOPT_SECONDS

    def read(db: Database) -> list[int]:
        return cast("PgDatabase", db).handled_since(since)

    for message_id in await store.read(read):
        store.note_seen(message_id)
