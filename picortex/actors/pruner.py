"""The pruner: at start-up and then hourly, drops what the bot no longer needs to keep.

Memory (messages and observations) older than 14 days (recall looks back 7), invocation
errors resolved more than 90 days ago and unresolved ones beyond the newest 10,000, seen
message ids older than 7 days (Discord never replays that far back); ledger rows older than
90 days are rolled up into one per day (totals unchanged). Each round that dropped anything
writes a `prune` event.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

import trio

from picortex.errors import DatabaseUnreachable
from picortex.store.queries import PruneQueries
from picortex.types import EventSink

logger = logging.getLogger(__name__)

DAY: Final = 24 * 3600.0
MEMORY_KEEP_SECONDS: Final = 14 * DAY  # SPEC 8: recall needs 7 days; keep a margin
RESOLVED_ERRORS_KEEP_SECONDS: Final = 90 * DAY  # a resolved failure is history after a season
SEEN_KEEP_SECONDS: Final = 7 * DAY  # Discord replays minutes, not weeks
LEDGER_DETAIL_SECONDS: Final = 90 * DAY  # SPEC 8: older spend is kept as daily totals
UNRESOLVED_ERRORS_MAX: Final = 10_000  # SPEC 8: a failure storm must not fill the disk
PRUNE_EVERY_SECONDS: Final = 3600.0


async def prune_once(store: PruneQueries, now: float) -> dict[str, int]:
    """One round of pruning at wall-clock time `now`; returns what was dropped, by kind.

    Each query runs on the store's own thread, in its order: a long delete never stalls the
    bot. They read whole tables (scope: global), so a cluster prunes once, not per node.
    """
    # Whole UTC days only, so a day is never half detail, half total.
    ledger_before = (now - LEDGER_DETAIL_SECONDS) // DAY * DAY
    return {
        "memory": await store.prune_memory(now - MEMORY_KEEP_SECONDS),
        "invocation_errors": await store.prune_resolved_errors(now - RESOLVED_ERRORS_KEEP_SECONDS)
        + await store.cap_unresolved_errors(UNRESOLVED_ERRORS_MAX),
        "seen_ids": await store.prune_seen(now - SEEN_KEEP_SECONDS),
        "ledger_rows": await store.roll_up_ledger(ledger_before),
    }


class Pruner:
    """Runs `prune_once` at start and every PRUNE_EVERY_SECONDS; a failed round is logged."""

    def __init__(
        self,
        store: PruneQueries,
        events: EventSink,
        *,
        wall_clock: Callable[[], float] = time.time,
        every: float = PRUNE_EVERY_SECONDS,
    ) -> None:
        self._store = store
        self._events = events
        self._clock = wall_clock
        self._every = every
        self.rounds = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Prune now, then hourly, until cancelled."""
        task_status.started()
        while True:
            await self._round()
            await trio.sleep(self._every)

    async def _round(self) -> None:
        self.rounds += 1
        try:
            dropped = await prune_once(self._store, self._clock())
        except DatabaseUnreachable:
            return  # the store tells the outage; the next round prunes
        except Exception as exc:  # a busy or full disk: try again next round
            logger.warning("pruning failed, retrying in an hour: %s", exc)
            return
        if any(dropped.values()):
            self._events.emit("prune", **dropped)
