"""The budget ledger: spend per workspace and period in `picortex.db`, checked before each call."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime

from picortex.config import Settings
from picortex.core import budget
from picortex.store import Store, StoreActor
from picortex.types import EventSink

logger = logging.getLogger(__name__)


class LedgerBudget:
    """Implements the LLM actor's Budget protocol over the store (SPEC 9)."""

    def __init__(
        self,
        store: Store | StoreActor,
        settings: Callable[[], Settings],
        events: EventSink,
        *,
        wall_clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._events = events
        self._now = wall_clock or (lambda: datetime.now(UTC))
        self._warned = budget.WarnState()
        # Calls allowed but not yet settled, per workspace: each holds back the dearest call
        # seen there so far, so channels calling at once cannot all slip under the ceiling.
        self._pending: dict[str, list[float]] = {}
        self._dearest: dict[str, float] = {}
        # Spend per workspace in period `_period`, read from the store once per workspace and
        # period and kept current by `record`, so a check never sums the ledger's rows.
        self._period: str | None = None
        self._spent: dict[str, float] = {}

    def period_key(self) -> str:
        """The current period's key (`2026-11-30` or `2026-11`)."""
        return budget.period_key(self._now(), self._settings().budget.period)

    def check(self, workspace: str) -> bool:
        """True when `workspace` is under its ceiling; else a `budget` event and no call."""
        settings = self._settings()
        key = self.period_key()
        spent = self._spent_in(workspace, key)
        held = sum(self._pending.get(workspace, ()))
        decision = budget.check(spent + held, settings.budget.ceiling_usd)
        if decision.allowed:
            self._pending.setdefault(workspace, []).append(self._dearest.get(workspace, 0.0))
            return True
        self._events.emit(
            "budget",
            workspace=workspace,
            period=key,
            spent_usd=round(spent, 6),
            ceiling_usd=settings.budget.ceiling_usd,
            action="call refused",
        )
        warn, self._warned = budget.should_warn(self._warned, workspace, key)
        if warn:
            logger.warning(
                "budget for workspace %s is spent for %s (%.6g of %.6g USD): no more model "
                "calls there until the next period",
                workspace,
                key,
                spent,
                settings.budget.ceiling_usd,
            )
        return False

    def record(self, workspace: str, cost_usd: float) -> None:
        """Add one call's cost to the ledger and settle its reservation."""
        self.release(workspace)
        self._dearest[workspace] = max(self._dearest.get(workspace, 0.0), cost_usd)
        now = self._now()
        key = budget.period_key(now, self._settings().budget.period)
        # Counted in memory even if the store fails below: the money is spent either way.
        self._spent[workspace] = self._spent_in(workspace, key) + cost_usd
        self._store.add_spend(workspace, key, cost_usd, now.timestamp())

    def _spent_in(self, workspace: str, key: str) -> float:
        """What `workspace` spent in period `key`: from memory, read from the store once."""
        if key != self._period:
            # A new period (or the setting changed): earlier totals no longer apply.
            self._period = key
            self._spent.clear()
        spent = self._spent.get(workspace)
        if spent is None:
            spent = self._spent[workspace] = self._store.spend(workspace, key)
        return spent

    def release(self, workspace: str) -> None:
        """Settle a call that ended without a cost (an error, a timeout, a cancellation)."""
        pending = self._pending.get(workspace)
        if pending:
            pending.pop()
            if not pending:
                del self._pending[workspace]

    def summary(self) -> dict[str, dict[str, float | str]]:
        """Spend against ceiling per workspace in the current period (for `picortex status`).

        Only workspaces that spent something this period are listed.
        """
        ceiling = self._settings().budget.ceiling_usd
        key = self.period_key()
        spent = self._store.spend_by_workspace(key)
        return {
            w: {"spent_usd": round(s, 6), "ceiling_usd": ceiling, "period": key}
            for w, s in sorted(spent.items())
        }
