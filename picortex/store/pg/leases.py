"""The shard lease statements (SPEC 17), on a connection of the lease keeper's own.

Never behind the store's commit group: a renewal waits for nothing but PostgreSQL. Each
change is one statement, times are the database's clock (`picortex_now()`), and every
method is synchronous (the keeper calls them from a thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, cast

import psycopg

from picortex.core.leases import Lease
from picortex.store.pg.database import PgDatabase, Row

# A statement stuck behind a lock gives up rather than hold up the keeper's round.
_STATEMENT_TIMEOUT: Final = "SET statement_timeout = '5s'"

# Free (lapsed, or handed back) or already ours: take it. The epoch moves on only when the
# holder changes, so one epoch is one unbroken holding. A holder that let the lease lapse and
# has not told a heartbeat since is gone: its row goes with the take, so that no process
# counts it among the live ones (it would be owed a fair share of shards: a shard just taken
# over would be handed back to nobody) until its heartbeat, up to LIVE_SECONDS old, ages out.
_TAKE: Final = """
WITH was AS (
    SELECT node, expires_at FROM shard_lease WHERE shard_id = %s
), taken AS (
    INSERT INTO shard_lease AS l (shard_id, shard_count, node, epoch, expires_at)
    VALUES (%s, %s, %s, 1, picortex_now() + %s)
    ON CONFLICT (shard_id) DO UPDATE
    SET shard_count = excluded.shard_count,
        node = excluded.node,
        epoch = l.epoch + CASE WHEN l.node IS NOT DISTINCT FROM excluded.node THEN 0 ELSE 1 END,
        expires_at = excluded.expires_at
    WHERE l.expires_at <= picortex_now() OR l.node IS NULL OR l.node = excluded.node
    RETURNING epoch
), gone AS (
    DELETE FROM cluster_node AS n USING was
    WHERE n.node = was.node AND was.node <> %s AND n.last_seen < was.expires_at
      AND EXISTS (SELECT 1 FROM taken)
)
SELECT epoch FROM taken
"""

# Every held shard in one statement; a lease that lapsed is not renewed (someone may have
# taken it meanwhile, or may now): the keeper counts it lost.
_RENEW: Final = """
UPDATE shard_lease SET expires_at = picortex_now() + %s
WHERE node = %s AND shard_id = ANY(%s) AND expires_at > picortex_now()
RETURNING shard_id
"""

# Lapses at once, and names nobody: whoever takes it next starts a new epoch.
_RELEASE: Final = """
UPDATE shard_lease SET node = NULL, expires_at = picortex_now()
WHERE node = %s AND shard_id = ANY(%s)
"""


class ShardLeases(PgDatabase):
    """The lease table over a connection of its own. Open with `ShardLeases.beside(db)`."""

    @classmethod
    def beside(cls, db: PgDatabase) -> ShardLeases:
        """A connection of its own to `db`'s database (already migrated)."""
        return cast(ShardLeases, cls.open(db._url, migrate=False))

    # The link's reconnect count when the statement timeout was last set (it is set anew on
    # every new connection: the link makes a lost one again by itself).
    _timed = -1

    def _run(self, sql: str, params: tuple[object, ...] = ()) -> psycopg.Cursor[Row]:
        with self._lock:
            if self._timed != self._link.reconnects:
                super()._run(_STATEMENT_TIMEOUT)
                self._timed = self._link.reconnects
            return super()._run(sql, params)

    def take(self, shard: tuple[int, int], node: str, seconds: float) -> int | None:
        """Take shard `shard` for `seconds` when it is free or ours; its epoch, else None."""
        shard_id, count = shard
        epoch = self._one(_TAKE, (shard_id, shard_id, count, node, seconds, node))
        return None if epoch is None else cast(int, epoch)

    def renew(self, shard_ids: Sequence[int], node: str, seconds: float) -> set[int]:
        """Renew every lease of `shard_ids` still ours; the ids renewed (the rest are lost)."""
        rows = self._all(_RENEW, (seconds, node, list(shard_ids)))
        return {cast(int, row[0]) for row in rows}

    def release(self, shard_ids: Sequence[int], node: str) -> int:
        """Hand back the leases of `shard_ids` that are ours; how many."""
        return self._write(_RELEASE, (node, list(shard_ids)))

    def leave(self, node: str) -> None:
        """`node` stops (its shards handed back): no longer one of the live processes."""
        self._write("DELETE FROM cluster_node WHERE node = %s", (node,))

    def now(self) -> float:
        """The database's clock."""
        return cast(float, self._one("SELECT picortex_now()"))

    def leases(self) -> tuple[float, dict[int, Lease]]:
        """The database's clock and every shard's lease, read together."""
        rows = self._all(
            "SELECT picortex_now(), shard_id, node, epoch,"
            " expires_at FROM shard_lease RIGHT JOIN (SELECT 1) AS one ON true ORDER BY shard_id"
        )
        now = cast(float, rows[0][0])
        found = {
            cast(int, shard_id): Lease(
                cast(int, shard_id), cast("str | None", node), cast(int, epoch), cast(float, at)
            )
            for _, shard_id, node, epoch, at in rows
            if shard_id is not None
        }
        return now, found

    def live_nodes(self, now: float) -> list[str]:
        """The processes whose heartbeat is recent at `now` (the database's clock)."""
        return [n.node for n in self.cluster_nodes() if n.live(now)]
