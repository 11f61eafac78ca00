"""The budget ledger: spend per workspace, period and user in `picortex.db`, with reservations.

Before a call the LLM actor reserves the call's worst case; after it, the reservation is
settled to the real cost (SPEC 9). Ceilings count spent plus reserved money, so calls made
at once cannot overshoot a ceiling by more than one call's worst case.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime

import trio

from picortex.config import Settings
from picortex.core import budget
from picortex.core.budget import Refusal, Reservation
from picortex.core.money import usd
from picortex.store.queries import SpendQueries
from picortex.types import EventSink

logger = logging.getLogger(__name__)


def loop_clock() -> float:
    """Trio's clock inside the event loop (a virtual one in tests), else a monotonic one."""
    try:
        return trio.current_time()
    except RuntimeError:  # outside trio (a CLI check): any monotonic clock will do
        return time.monotonic()


class LedgerBudget:
    """Implements the LLM actor's Budget protocol over the store (SPEC 9)."""

    def __init__(
        self,
        store: SpendQueries,
        settings: Callable[[], Settings],
        events: EventSink,
        *,
        wall_clock: Callable[[], datetime] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self._store = store
        self._settings = settings
        self._events = events
        self._now = wall_clock or (lambda: datetime.now(UTC))
        self._monotonic = monotonic or loop_clock
        self._warnings = WarnOnce()
        # Reservations of running calls: what each workspace, user and all hold now.
        self._running: set[Reservation] = set()
        self._held_by_workspace: dict[str, float] = {}
        self._held_by_user: dict[int, float] = {}
        self._held_total = 0.0
        # Call start times per user in the last minute (for user_requests_per_minute).
        self._starts: dict[int, deque[float]] = {}
        # Spend per workspace in period `_period`, read from the store once per workspace and
        # period and kept current by `settle`, so a check never sums the ledger's rows.
        self._period: str | None = None
        self._spent: dict[str, float] = {}
        self._global_spent: float | None = None
        # Spend per user in UTC day `_day`, likewise.
        self._day: str | None = None
        self._user_spent: dict[int, float] = {}

    def period_key(self) -> str:
        """The current period's key (`2026-11-30` or `2026-11`)."""
        return budget.period_key(self._now(), self._settings().budget.period)

    def reserve(
        self, workspace: str, user_id: int | None, worst_usd: float
    ) -> Reservation | Refusal:
        """Hold `worst_usd` for a call about to start, or refuse it with the limit it hit.

        A refusal emits a `budget` event and logs one warning line per limit and period.
        The owner (and a call made for no user) is exempt from the per-user limits.
        """
        settings = self._settings()
        now = self._now()
        key = budget.period_key(now, settings.budget.period)
        day = budget.period_key(now, "day")
        user_limited = user_id is not None and user_id != settings.owner_id
        recent: deque[float] = deque()
        if user_id is not None:
            recent = self._starts.setdefault(user_id, deque())
            budget.drop_old_requests(recent, self._monotonic())
        usage = budget.Usage(
            workspace_spent=self._spent_in(workspace, key),
            workspace_held=self._held_by_workspace.get(workspace, 0.0),
            global_spent=self._global_in(key),
            global_held=self._held_total,
            user_spent=self._user_spent_on(user_id, day) if user_id is not None else 0.0,
            user_held=self._held_by_user.get(user_id, 0.0) if user_id is not None else 0.0,
            user_recent_requests=len(recent),
        )
        b = settings.budget
        limits = budget.Limits(
            b.ceiling_usd, b.global_ceiling_usd, b.user_daily_usd, b.user_requests_per_minute
        )
        refused = budget.admit(limits, usage, user_limited=user_limited)
        if refused is not None:
            return self._refuse(refused, workspace, user_id, key, day, usage, limits)
        held = Reservation(workspace, user_id, max(0.0, worst_usd))
        self._hold(held, +1)
        if user_id is not None:
            recent.append(self._monotonic())
        return held

    def settle(self, held: Reservation, cost_usd: float) -> None:
        """Release a reservation and record the call's real cost (0 for a failed call)."""
        if held not in self._running:
            return  # settled already
        self._hold(held, -1)
        if cost_usd <= 0:
            return
        now = self._now()
        key = budget.period_key(now, self._settings().budget.period)
        day = budget.period_key(now, "day")
        # Counted in memory even if the store fails below: the money is spent either way.
        self._spent[held.workspace] = self._spent_in(held.workspace, key) + cost_usd
        self._global_spent = self._global_in(key) + cost_usd
        if held.user_id is not None:
            self._user_spent[held.user_id] = self._user_spent_on(held.user_id, day) + cost_usd
        self._store.add_spend(held.workspace, key, cost_usd, now.timestamp(), user_id=held.user_id)

    def held_usd(self) -> float:
        """Money held by running calls right now."""
        return self._held_total

    def _hold(self, held: Reservation, sign: int) -> None:
        if sign > 0:
            self._running.add(held)
        else:
            self._running.discard(held)
        amount = sign * held.worst_usd
        ws = self._held_by_workspace.get(held.workspace, 0.0) + amount
        self._held_by_workspace[held.workspace] = ws
        self._held_total += amount
        if held.user_id is not None:
            self._held_by_user[held.user_id] = self._held_by_user.get(held.user_id, 0.0) + amount
        if not self._running:
            # Nothing runs: drop float dust, so an idle ledger holds exactly nothing.
            self._held_by_workspace.clear()
            self._held_by_user.clear()
            self._held_total = 0.0

    def _refuse(
        self,
        limit: budget.Limit,
        workspace: str,
        user_id: int | None,
        key: str,
        day: str,
        usage: budget.Usage,
        limits: budget.Limits,
    ) -> Refusal:
        minute = str(int(self._monotonic() // budget.RATE_WINDOW_SECONDS))
        period = refusal_period(limit, key, day, minute)
        warn, tell = self._warnings.decide(limit, workspace, user_id, period)
        return report_refusal(
            self._events,
            limit,
            workspace,
            user_id,
            key,
            usage,
            limits,
            warn=warn,
            tell=tell,
            period=period,
        )

    def _spent_in(self, workspace: str, key: str) -> float:
        """What `workspace` spent in period `key`: from memory, read from the store once."""
        self._roll_period(key)
        spent = self._spent.get(workspace)
        if spent is None:
            spent = self._spent[workspace] = self._store.spend(workspace, key)
        return spent

    def _global_in(self, key: str) -> float:
        """What all workspaces spent in period `key`: from memory, read from the store once."""
        self._roll_period(key)
        if self._global_spent is None:
            self._global_spent = sum(self._store.spend_by_workspace(key).values())
        return self._global_spent

    def _roll_period(self, key: str) -> None:
        if key != self._period:
            # A new period (or the setting changed): earlier totals no longer apply.
            self._period = key
            self._spent.clear()
            self._global_spent = None

    def _user_spent_on(self, user_id: int, day: str) -> float:
        if day != self._day:
            self._day = day
            self._user_spent.clear()
        spent = self._user_spent.get(user_id)
        if spent is None:
            spent = self._user_spent[user_id] = self._store.user_spend(user_id, _day_start(day))
        return spent

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

    def totals(self) -> dict[str, float | str]:
        """All workspaces' spend in the period against `global_ceiling_usd`, and money held."""
        settings = self._settings()
        key = self.period_key()
        spent = sum(self._store.spend_by_workspace(key).values())
        return {
            "spent_usd": round(spent, 6),
            "ceiling_usd": settings.budget.global_ceiling_usd,
            "held_usd": round(self._held_total, 6),
            "period": key,
        }

    def users(self) -> dict[str, dict[str, object]]:
        """Who spent what today (UTC), per user id, dearest first (for `picortex status`)."""
        settings = self._settings()
        day = budget.period_key(self._now(), "day")
        spent = self._store.spend_by_user(_day_start(day))
        return {
            str(uid): {
                "spent_usd": round(s, 6),
                "daily_usd": settings.budget.user_daily_usd,
                "day": day,
                "owner": uid == settings.owner_id,
            }
            for uid, s in sorted(spent.items(), key=lambda item: (-item[1], item[0]))
        }


def _day_start(day: str) -> float:
    """The Unix time of the start of UTC day `2026-11-30`."""
    return datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC).timestamp()


class WarnOnce:
    """This process's warn-once flags: a limit's warning line, and a user's polite line,
    once per period each."""

    def __init__(self) -> None:
        self._warned = budget.WarnState()
        self._noticed = budget.WarnState()

    def decide(
        self, limit: budget.Limit, workspace: str, user_id: int | None, period: str
    ) -> tuple[bool, bool]:
        """Whether to log the refusal's warning, and whether to tell the user, this time."""
        scope = refusal_scope(limit, workspace, user_id)
        warn, self._warned = budget.should_warn(self._warned, f"{limit}:{scope}", period)
        tell = False
        if limit in budget.USER_NOTICES and user_id is not None:
            tell, self._noticed = budget.should_warn(self._noticed, f"{limit}:{user_id}", period)
        return warn, tell


def refusal_scope(limit: budget.Limit, workspace: str, user_id: int | None) -> str:
    """What ran out, as the warning line names it."""
    if limit == "workspace":
        return f"budget for workspace {workspace}"
    if limit == "global":
        return "budget for all workspaces"
    if limit == "user_daily":
        return f"daily budget for user {user_id}"
    return f"user {user_id}"


def refusal_period(limit: budget.Limit, key: str, day: str, minute: str) -> str:
    """The period a refusal is warned about once: the budget period, the user's UTC day, or
    the minute (the per-minute limit)."""
    if limit in ("workspace", "global"):
        return key
    return day if limit == "user_daily" else minute


def report_refusal(
    events: EventSink,
    limit: budget.Limit,
    workspace: str,
    user_id: int | None,
    key: str,
    usage: budget.Usage,
    limits: budget.Limits,
    *,
    warn: bool,
    tell: bool,
    period: str,
) -> Refusal:
    """Emit a refused call's `budget` event; log its warning line when `warn` (once per
    `period`, see `refusal_period`); with `tell`, the refusal carries the user's polite line."""
    if limit == "workspace":
        spent, ceiling = usage.workspace_spent, limits.ceiling_usd
    elif limit == "global":
        spent, ceiling = usage.global_spent, limits.global_ceiling_usd
    elif limit == "user_daily":
        spent, ceiling = usage.user_spent, limits.user_daily_usd
    else:
        spent, ceiling = usage.user_recent_requests, limits.user_requests_per_minute
    fields: dict[str, object] = {
        "workspace": workspace,
        "period": key,
        "spent_usd": round(usage.workspace_spent, 6),
        "ceiling_usd": limits.ceiling_usd,
        "limit": limit,
        "action": "call refused",
    }
    if limit == "global":
        fields["global_spent_usd"] = round(usage.global_spent, 6)
        fields["global_ceiling_usd"] = limits.global_ceiling_usd
    if user_id is not None:
        fields["user_id"] = user_id
        fields["user_spent_usd"] = round(usage.user_spent, 6)
    if limit == "user_rate":
        fields["requests_last_minute"] = usage.user_recent_requests
    events.emit("budget", **fields)
    scope = refusal_scope(limit, workspace, user_id)
    if warn and limit == "user_rate":
        logger.warning(
            "%s made %d model requests in the last minute (limit %d): refused until the "
            "minute has passed",
            scope,
            spent,
            ceiling,
        )
    elif warn:
        logger.warning(
            "%s is spent for %s (%s of %s): no more model calls there until the next period",
            scope,
            period,
            usd(spent),
            usd(ceiling),
        )
    notice = budget.USER_NOTICES.get(limit) if tell and user_id is not None else None
    return Refusal(limit, notice)
