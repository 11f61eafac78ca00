"""A shard taken over (SPEC 17): the handled marks its last holder made, for this process's
memory before the shard's gateway starts.

Another process marked them, so this process's memory lacks them, and an id above its own
seen floor would count as surely unhandled: a replay after RESUME would be answered again.
Read here: every message handled in the last ADOPT_SECONDS (of any shard: handled marks do
not record their guild, so not only the shard's own). Older ones are far below any replay a
saved session can bring (Discord keeps a session for minutes).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Final, cast

if TYPE_CHECKING:
    from picortex.store.database import Database
    from picortex.store.pg.database import PgDatabase

ADOPT_SECONDS: Final = 15 * 60.0


def handled_lately(db: Database) -> list[int]:
    """The ids of the messages handled in the last ADOPT_SECONDS, by any process."""
    return cast("PgDatabase", db).handled_since(time.time() - ADOPT_SECONDS)
