"""The budget of a cluster on PostgreSQL (SPEC 9, 17): one set of ceilings for every process.

Each call's reservation is one round trip to the database (`picortex.store.pg.ceilings`),
asked by the event loop on a non-blocking connection of its own (`reserve_line`), or from a
worker thread while that line is down, so the event loop never waits on it. Settling never
waits: the LLM actor settles in a `finally` that must not checkpoint, so the settlement is
queued here and a sender (`run`) delivers it, again after a failure, until the database has
it; until then the reservation is still held there. With the database unreachable, the
ceilings are enforced here, conservatively: this process takes its share (1 / live
processes) of what was left when the database last answered, and logs one error a minute.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, Final, Protocol

import attrs
import outcome
import trio

import picortex.store.unsent as unsent_file
from picortex.actors.admission import PendingReservation
from picortex.actors.ledger import WarnOnce, loop_clock, refusal_period, report_refusal
from picortex.config import Settings
from picortex.core import budget
from picortex.core.budget import Refusal, Reservation
from picortex.core.money import usd
from picortex.errors import DatabaseUnreachable
from picortex.store.pg.ceilings import (
    Answer,
    Ask,
    Ceilings,
    Settlement,
    micros,
    usd_of,
)
from picortex.store.pg.cluster import node_name
from picortex.store.pg.reserve_line import ReserveLine
from picortex.types import EventSink

logger = logging.getLogger(__name__)

# A settlement the database refused is sent again this often; the cluster's spend shown by
# `picortex status` is read this often.
RETRY_SECONDS: Final = 2.0
STATUS_SECONDS: Final = 10.0
# Settled and expired reservations are forgotten this often.
PRUNE_SECONDS: Final = 600.0
# At shutdown, settlements still queued get this long to reach the database.
FLUSH_SECONDS: Final = 5.0
# A settlement goes this long after its call ended, with any that came meanwhile: the call's
# reply is being posted right then, and the database's work would take a core from it. The
# reservation counts at its worst case until then (conservative for every ceiling).
GATHER_SECONDS: Final = 0.05
COMPLAINT_SECONDS: Final = 60.0

Key = tuple[str, str, str]  # (level, name, period) as the database's counters are keyed


class CeilingsPort(Protocol):
    """The database side (`picortex.store.pg.ceilings.Ceilings`); synchronous, thread-safe."""

    def reserve(self, ask: Ask) -> Answer: ...

    def settle(self, settled: Settlement) -> bool: ...

    def spent(self, period: str, day: str) -> tuple[dict[str, int], int, dict[int, int]]: ...

    def prune(self) -> int: ...

    def close(self) -> None: ...


class ClusterBudget:
    """Implements the LLM actor's Budget protocol over the cluster's ceilings."""

    def __init__(
        self,
        ceilings: CeilingsPort,
        settings: Callable[[], Settings],
        events: EventSink,
        *,
        wall_clock: Callable[[], datetime] | None = None,
        monotonic: Callable[[], float] | None = None,
        line: ReserveLine | None = None,
        unsent: Path | None = None,
    ) -> None:
        self._ceilings = ceilings
        # Reservations asked by the event loop itself (`run` keeps it up); else on a thread.
        self._line = line
        self._settings = settings
        self._events = events
        self._now = wall_clock or (lambda: datetime.now(UTC))
        self._monotonic = monotonic or loop_clock
        # Calls running now (their reservation ids), and settlements not yet delivered.
        self._open: dict[Reservation, uuid.UUID] = {}
        self._pending: deque[Settlement] = deque()
        # Where settlements a stop could not deliver are kept; those an earlier run kept go
        # first (settling twice counts once), and the file goes once they are delivered.
        self._unsent = unsent
        self._replaying = False
        if unsent is not None:
            kept = [_settlement_of(record) for record in unsent_file.load(unsent)]
            self._pending.extend(s for s in kept if s is not None)
            self._replaying = True
            if self._pending:
                logger.info(
                    "%d model calls' costs kept by the last run go to the ledger now",
                    len(self._pending),
                )
        self._wake = trio.Event()
        # What the database last said each level had spent and held, and what this process
        # spent since: the base of the local share while the database is unreachable.
        self._known: dict[Key, int] = {}
        self._since: dict[Key, int] = {}
        self._live = 1
        self._current: tuple[str, str] | None = None  # the period and day they are about
        self._starts: dict[int, deque[float]] = {}
        self._warnings = WarnOnce()  # while the database cannot decide who warns
        self._complained_at: float | None = None
        self._last_prune: float | None = None
        # The cluster's spend as last read, for `picortex status`.
        self._spent: tuple[str, str, dict[str, int], int, dict[int, int]] | None = None

    # ---- the Budget protocol -------------------------------------------------------------

    async def reserve(
        self, workspace: str, user_id: int | None, worst_usd: float
    ) -> Reservation | Refusal:
        """Hold `worst_usd` for a call about to start, or refuse it with the limit it hit.

        A refusal emits a `budget` event; the process that wins the period's one warning
        (in the database) logs it.
        """
        settings = self._settings()
        ask = self._ask(settings, workspace, user_id, worst_usd)
        try:
            # Not cancellable once sent: its answer (a reservation) is never dropped.
            answer = await trio.to_thread.run_sync(self._ceilings.reserve, ask)
        except DatabaseUnreachable as exc:
            self._complain(exc)
            return self._reserve_here(ask, settings)
        # No checkpoint from here on: the reservation reaches the caller.
        return self._decide(ask, answer, settings)

    def reserve_ahead(
        self, workspace: str, user_id: int | None, worst_usd: float
    ) -> PendingReservation:
        """`reserve`, answered into the returned pending reservation: the database is asked
        at once, while the caller builds the call's request (by the event loop on the
        reservation line when it is up, else on a worker thread)."""
        settings = self._settings()
        ask = self._ask(settings, workspace, user_id, worst_usd)
        pending = PendingReservation(self.settle)
        token = trio.lowlevel.current_trio_token()

        def decide(result: outcome.Outcome[Answer]) -> None:  # on the event loop
            verdict: Reservation | Refusal | Exception
            try:
                try:
                    answer = result.unwrap()
                except DatabaseUnreachable as exc:
                    self._complain(exc)
                    verdict = self._reserve_here(ask, settings)
                else:
                    verdict = self._decide(ask, answer, settings)
            except Exception as exc:  # a bug: the call is not made, and says why
                verdict = exc
            pending.resolve(verdict)

        def deliver(result: outcome.Outcome[Answer]) -> None:  # on the worker thread
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(decide, result)

        def on_thread() -> None:
            trio.lowlevel.start_thread_soon(partial(self._ceilings.reserve, ask), deliver)

        def on_line(result: outcome.Outcome[Answer]) -> None:  # on the event loop
            if isinstance(result, outcome.Error) and isinstance(result.error, DatabaseUnreachable):
                # The line's connection was lost (an idle one is found out only now): asked
                # again on a thread, which says whether the database itself is unreachable.
                on_thread()
            else:
                decide(result)

        if self._line is None or not self._line.ask(ask, on_line):
            on_thread()
        return pending

    def _ask(
        self, settings: Settings, workspace: str, user_id: int | None, worst_usd: float
    ) -> Ask:
        now = self._now()
        key = budget.period_key(now, settings.budget.period)
        day = budget.period_key(now, "day")
        b = settings.budget
        return Ask(
            id=uuid.uuid4(),
            workspace=workspace,
            user_id=user_id,
            amount=micros(max(0.0, worst_usd)),
            period=key,
            day=day,
            ceiling=micros(b.ceiling_usd),
            global_ceiling=micros(b.global_ceiling_usd),
            user_daily=micros(b.user_daily_usd),
            user_rate=max(0, b.user_requests_per_minute),
            user_limited=user_id is not None and user_id != settings.owner_id,
        )

    def _decide(self, ask: Ask, answer: Answer, settings: Settings) -> Reservation | Refusal:
        """The database's answer to `ask`: the reservation held here, or the refusal."""
        self._learn(ask, answer)
        limits = _limits(settings)
        if answer.refused is not None:
            usage = budget.Usage(
                usd_of(answer.workspace_spent),
                usd_of(answer.workspace_held),
                usd_of(answer.global_spent),
                usd_of(answer.global_held),
                usd_of(answer.user_spent),
                usd_of(answer.user_held),
                answer.user_recent,
            )
            limit: budget.Limit = answer.refused  # type: ignore[assignment]
            return self._report(ask, limit, usage, limits, warn=answer.warn, tell=answer.tell)
        return self._hold(ask)

    def settle(self, held: Reservation, cost_usd: float) -> None:
        """Release a reservation and record the call's real cost (0 for a failed call).

        Never waits: the settlement is queued for the sender, and the call counts here as
        spent until the database has it.
        """
        reservation_id = self._open.pop(held, None)
        if reservation_id is None:
            return  # settled already
        now = self._now()
        key = budget.period_key(now, self._settings().budget.period)
        day = budget.period_key(now, "day")
        cost = micros(cost_usd) if cost_usd > 0 else 0
        settled = Settlement(
            reservation_id, held.workspace, held.user_id, cost, key, day, now.timestamp()
        )
        self._pending.append(settled)
        for level in _keys(held.workspace, held.user_id, key, day):
            self._since[level] = self._since.get(level, 0) + cost
        self._wake.set()

    def held_usd(self) -> float:
        """Money held by this process's running calls right now."""
        return sum(held.worst_usd for held in self._open)

    def unsettled(self) -> int:
        """Settlements not yet in the database."""
        return len(self._pending)

    # ---- the sender ------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver settlements as they come (again after a failure), read the cluster's spend
        for `status` now and then, and forget old reservations; at shutdown, deliver what
        is left (within FLUSH_SECONDS)."""
        async with trio.open_nursery() as nursery:
            if self._line is not None:
                await nursery.start(self._line.run)
            task_status.started()
            status_at = -STATUS_SECONDS
            try:
                while True:
                    with trio.move_on_after(RETRY_SECONDS):
                        await self._wake.wait()
                    if self._pending:
                        await trio.sleep(GATHER_SECONDS)
                    self._wake = trio.Event()
                    await self.deliver()
                    if self._monotonic() - status_at >= STATUS_SECONDS:
                        status_at = self._monotonic()
                        await self._read_status()
            finally:
                with trio.move_on_after(FLUSH_SECONDS, shield=True):
                    await self.deliver()

    async def deliver(self) -> bool:
        """Send the queued settlements in order; False if the database could not be asked."""
        while self._pending:
            batch = list(self._pending)
            # One trip to the worker thread for the lot, each settlement its own statement.
            sent, failure = await trio.to_thread.run_sync(self._settle_each, batch)
            for _ in range(sent):
                self._pending.popleft()
            if failure is not None:
                self._complain(failure)
                return False
        self._replayed()
        return True

    def _replayed(self) -> None:
        """Everything an earlier run kept is in the database: its file goes."""
        if self._replaying and self._unsent is not None:
            self._replaying = False
            unsent_file.forget(self._unsent)

    def _settle_each(self, batch: list[Settlement]) -> tuple[int, DatabaseUnreachable | None]:
        """(worker thread) Settle `batch` in order: how many went (a bug's counts as gone,
        as sending it again would loop forever), and the outage that stopped the rest."""
        for sent, settled in enumerate(batch):
            try:
                self._ceilings.settle(settled)
            except DatabaseUnreachable as exc:
                return sent, exc
            except Exception:
                logger.exception("could not record a call's cost (%s)", usd(usd_of(settled.cost)))
        return len(batch), None

    def close(self) -> None:
        """Deliver what is still queued (the bot has stopped), then close the connection;
        what the database cannot take now is kept for the next start (in its home)."""
        while self._pending:
            try:
                self._ceilings.settle(self._pending[0])
            except DatabaseUnreachable as exc:
                self._keep(exc)
                break
            self._pending.popleft()
        else:
            self._replayed()
        self._ceilings.close()

    def _keep(self, exc: DatabaseUnreachable) -> None:
        """The database cannot take the queued settlements: into the home's file, or lost."""
        lost = sum(s.cost for s in self._pending)
        if self._unsent is not None:
            try:
                unsent_file.save(self._unsent, map(_settlement_record, self._pending))
            except OSError as error:
                exc_text = f"{exc}; and {self._unsent.name} could not be written: {error}"
            else:
                logger.error(
                    "%d model calls (%s) could not be recorded in the ledger: %s; kept in %s, "
                    "recorded at the next start",
                    len(self._pending),
                    usd(usd_of(lost)),
                    exc,
                    self._unsent.name,
                )
                self._replaying = False  # the file holds them now
                return
        else:
            exc_text = str(exc)
        logger.error(
            "%d model calls (%s) could not be recorded in the ledger: %s; their "
            "reservations count as spent until they expire",
            len(self._pending),
            usd(usd_of(lost)),
            exc_text,
        )

    async def _read_status(self) -> None:
        now = self._now()
        key = budget.period_key(now, self._settings().budget.period)
        day = budget.period_key(now, "day")
        try:
            workspaces, total, users = await trio.to_thread.run_sync(self._ceilings.spent, key, day)
            if self._last_prune is None or self._monotonic() - self._last_prune >= PRUNE_SECONDS:
                self._last_prune = self._monotonic()
                await trio.to_thread.run_sync(self._ceilings.prune)
        except DatabaseUnreachable as exc:
            self._complain(exc)
            return
        self._spent = (key, day, workspaces, total, users)

    # ---- status --------------------------------------------------------------------------

    def refresh(self) -> None:
        """Read the cluster's spend now (at start, before the event loop is busy)."""
        now = self._now()
        key = budget.period_key(now, self._settings().budget.period)
        day = budget.period_key(now, "day")
        try:
            self._spent = (key, day, *self._ceilings.spent(key, day))
        except DatabaseUnreachable as exc:
            self._complain(exc)

    def _status(self) -> tuple[str, str, dict[str, int], int, dict[int, int]]:
        now = self._now()
        key = budget.period_key(now, self._settings().budget.period)
        day = budget.period_key(now, "day")
        spent = self._spent
        workspaces, total, users = ({}, 0, {}) if spent is None else spent[2:]
        if spent is not None and spent[0] != key:
            workspaces, total = {}, 0
        if spent is not None and spent[1] != day:
            users = {}
        return key, day, workspaces, total, users

    def summary(self) -> dict[str, dict[str, float | str]]:
        """The cluster's spend against ceiling per workspace this period (`picortex status`)."""
        ceiling = self._settings().budget.ceiling_usd
        key, _, workspaces, _, _ = self._status()
        return {
            w: {"spent_usd": round(usd_of(s), 6), "ceiling_usd": ceiling, "period": key}
            for w, s in sorted(workspaces.items())
        }

    def totals(self) -> dict[str, float | str]:
        """The cluster's spend this period against `global_ceiling_usd`; money held here."""
        key, _, _, total, _ = self._status()
        return {
            "spent_usd": round(usd_of(total), 6),
            "ceiling_usd": self._settings().budget.global_ceiling_usd,
            "held_usd": round(self.held_usd(), 6),
            "period": key,
        }

    def users(self) -> dict[str, dict[str, object]]:
        """Who spent what today (UTC) across the cluster, dearest first."""
        settings = self._settings()
        _, day, _, _, users = self._status()
        return {
            str(uid): {
                "spent_usd": round(usd_of(s), 6),
                "daily_usd": settings.budget.user_daily_usd,
                "day": day,
                "owner": uid == settings.owner_id,
            }
            for uid, s in sorted(users.items(), key=lambda item: (-item[1], item[0]))
        }

    # ---- internals -------------------------------------------------------------------------

    def _hold(self, ask: Ask) -> Reservation:
        held = Reservation(ask.workspace, ask.user_id, usd_of(ask.amount))
        self._open[held] = ask.id
        if ask.user_id is not None:
            self._starts.setdefault(ask.user_id, deque()).append(self._monotonic())
        return held

    def _learn(self, ask: Ask, answer: Answer) -> None:
        """Keep what the database said, the base of the local share if it goes away."""
        self._live = max(1, answer.live_nodes)
        if (ask.period, ask.day) != self._current:
            # A new period: what earlier ones spent no longer limits anything.
            self._current = (ask.period, ask.day)
            self._known = {k: v for k, v in self._known.items() if k[2] in self._current}
            self._since = {k: v for k, v in self._since.items() if k[2] in self._current}
        seen = [
            answer.global_spent + answer.global_held,
            answer.workspace_spent + answer.workspace_held,
        ]
        if ask.user_id is not None:
            seen.append(answer.user_spent + answer.user_held)
        for level, amount in zip(
            _keys(ask.workspace, ask.user_id, ask.period, ask.day), seen, strict=True
        ):
            self._known[level] = amount
            self._since[level] = 0

    def _reserve_here(self, ask: Ask, settings: Settings) -> Reservation | Refusal:
        """The database is unreachable: admit against this process's share of what was
        left when it last answered (of the whole ceiling where it never did)."""
        share = self._live
        global_key, workspace_key, *user_key = _keys(
            ask.workspace, ask.user_id, ask.period, ask.day
        )
        recent: deque[float] = deque()
        if ask.user_id is not None:
            recent = self._starts.setdefault(ask.user_id, deque())
            budget.drop_old_requests(recent, self._monotonic())
        held_workspace = sum(h.worst_usd for h in self._open if h.workspace == ask.workspace)
        held_user = sum(h.worst_usd for h in self._open if h.user_id == ask.user_id)
        usage = budget.Usage(
            workspace_spent=self._spent_here(workspace_key),
            workspace_held=held_workspace,
            global_spent=self._spent_here(global_key),
            global_held=self.held_usd(),
            user_spent=self._spent_here(user_key[0]) if user_key else 0.0,
            user_held=held_user if user_key else 0.0,
            user_recent_requests=len(recent),
        )
        b = settings.budget
        rate = b.user_requests_per_minute
        limits = budget.Limits(
            self._share(b.ceiling_usd, workspace_key, share),
            self._share(b.global_ceiling_usd, global_key, share),
            self._share(b.user_daily_usd, user_key[0], share) if user_key and b.user_daily_usd > 0
            else 0.0,
            max(1, rate // share) if rate > 0 else 0,
        )  # fmt: skip
        refused = budget.admit(limits, usage, user_limited=ask.user_limited)
        if refused is None:
            return self._hold(ask)
        # The database may have taken the reservation before the connection failed: release
        # it once it can be told.
        self._pending.append(
            Settlement(ask.id, ask.workspace, ask.user_id, 0, ask.period, ask.day, 0.0)
        )
        minute = str(int(self._monotonic() // budget.RATE_WINDOW_SECONDS))
        period = refusal_period(refused, ask.period, ask.day, minute)
        warn, tell = self._warnings.decide(refused, ask.workspace, ask.user_id, period)
        return self._report(ask, refused, usage, limits, warn=warn, tell=tell)

    def _spent_here(self, level: Key) -> float:
        return usd_of(self._known.get(level, 0) + self._since.get(level, 0))

    def _share(self, ceiling: float, level: Key, share: int) -> float:
        """This process's ceiling: what it knew spent, plus its share of what was left."""
        known = usd_of(self._known.get(level, 0))
        return known + max(0.0, ceiling - known) / share

    def _report(
        self,
        ask: Ask,
        limit: budget.Limit,
        usage: budget.Usage,
        limits: budget.Limits,
        *,
        warn: bool,
        tell: bool,
    ) -> Refusal:
        minute = str(int(self._monotonic() // budget.RATE_WINDOW_SECONDS))
        return report_refusal(
            self._events,
            limit,
            ask.workspace,
            ask.user_id,
            ask.period,
            usage,
            limits,
            warn=warn,
            tell=tell,
            period=refusal_period(limit, ask.period, ask.day, minute),
        )

    def _complain(self, exc: DatabaseUnreachable) -> None:
        """One error a minute while the database cannot be asked."""
        now = self._monotonic()
        if self._complained_at is not None and now - self._complained_at < COMPLAINT_SECONDS:
            return
        self._complained_at = now
        logger.error(
            "the cluster's ceilings cannot be checked (%s): enforcing them in this process "
            "with its share (1/%d) until the database answers",
            exc,
            self._live,
        )


def _limits(settings: Settings) -> budget.Limits:
    b = settings.budget
    return budget.Limits(
        b.ceiling_usd, b.global_ceiling_usd, b.user_daily_usd, b.user_requests_per_minute
    )


def _keys(workspace: str, user_id: int | None, key: str, day: str) -> list[Key]:
    """The counters a call touches: global, workspace, then the user's day if any."""
    levels: list[Key] = [("global", "", key), ("workspace", workspace, key)]
    if user_id is not None:
        levels.append(("user", str(user_id), day))
    return levels


def cluster_budget(
    url: str, settings: Callable[[], Settings], events: EventSink, *, home: Path | None = None
) -> ClusterBudget:
    """The budget of this process of the cluster at `url`; settlements a stop could not
    deliver are kept in `home` for the next start."""
    node = node_name()
    line = ReserveLine(url, node)
    unsent_path = None if home is None else home / unsent_file.SETTLEMENTS_FILE
    return ClusterBudget(Ceilings(url, node), settings, events, line=line, unsent=unsent_path)


def _settlement_record(settled: Settlement) -> dict[str, object]:
    return {**attrs.asdict(settled), "id": str(settled.id)}


def _settlement_of(record: dict[str, Any]) -> Settlement | None:
    """A settlement kept by an earlier run (None: a record it did not write)."""
    try:
        user_id = record["user_id"]
        settled = Settlement(
            uuid.UUID(str(record["id"])),
            str(record["workspace"]),
            None if user_id is None else int(user_id),
            int(record["cost"]),
            str(record["period"]),
            str(record["day"]),
            float(record["at"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    return settled if settled.cost >= 0 else None
