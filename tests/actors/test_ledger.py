"""The budget ledger over the store: the ceiling check, warn-once per period, rollover."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import attrs
import pytest

from picortex.actors.ledger import LedgerBudget
from picortex.config import BudgetSettings, Settings, load_settings
from picortex.core.budget import Refusal, Reservation
from picortex.store import Store
from tests.helpers import RecordingSink

LOGGER = "picortex.actors.ledger"


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store.open(tmp_path / "picortex.db")
    try:
        yield s
    finally:
        s.close()


def make(
    store: Store, clock: Clock, *, ceiling: float = 0.01, period: str = "day"
) -> tuple[LedgerBudget, RecordingSink]:
    base = load_settings({"PICORTEX_HOME": str(store.path.parent)})
    settings: Settings = attrs.evolve(base, budget=BudgetSettings(ceiling, period))
    sink = RecordingSink()
    return LedgerBudget(store, lambda: settings, sink, wall_clock=clock), sink


def allowed(ledger: LedgerBudget, workspace: str, user_id: int | None = None) -> bool:
    """Would a call be made now? (A free call reserved and settled at once.)"""
    held = ledger.reserve(workspace, user_id, 0.0)
    if isinstance(held, Refusal):
        return False
    ledger.settle(held, 0.0)
    return True


def spend(ledger: LedgerBudget, workspace: str, cost: float, user_id: int | None = None) -> None:
    """One call that cost `cost`, made regardless of the ceilings (as a call already running)."""
    held = Reservation(workspace, user_id, 0.0)
    ledger._running.add(held)  # a call the test starts past the checks, on purpose
    ledger.settle(held, cost)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING
    ]


def test_under_the_ceiling_calls_are_allowed_and_recorded(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, sink = make(store, clock, ceiling=0.01)
    assert allowed(ledger, "42")
    spend(ledger, "42", 0.004)
    spend(ledger, "42", 0.004)
    assert allowed(ledger, "42")
    assert store.spend("42", "2026-04-12") == pytest.approx(0.008)
    assert sink.of("budget") == []


def test_at_the_ceiling_no_call_one_event_each_and_one_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, sink = make(store, clock, ceiling=0.01)
    spend(ledger, "42", 0.01)  # exactly at the ceiling counts as spent
    assert not allowed(ledger, "42")
    assert not allowed(ledger, "42")
    events = sink.of("budget")
    assert len(events) == 2
    assert events[0]["workspace"] == "42"
    assert events[0]["period"] == "2026-04-12"
    assert events[0]["spent_usd"] == pytest.approx(0.01)
    assert events[0]["ceiling_usd"] == 0.01
    assert len(warnings(caplog)) == 1
    assert "42" in warnings(caplog)[0]


def test_each_workspace_warns_once_and_others_stay_open(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, _ = make(store, clock, ceiling=0.001)
    spend(ledger, "42", 0.002)
    spend(ledger, "dm", 0.002)
    assert allowed(ledger, "7")  # a workspace that spent nothing
    for _ in range(3):
        assert not allowed(ledger, "42")
        assert not allowed(ledger, "dm")
    lines = warnings(caplog)
    assert len(lines) == 2
    assert any("workspace 42 " in line for line in lines)
    assert any("workspace dm " in line for line in lines)


def test_daily_period_rolls_over_at_midnight_utc(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(datetime(2026, 4, 12, 23, 59, 30, tzinfo=UTC))
    ledger, sink = make(store, clock, ceiling=0.001)
    spend(ledger, "42", 0.005)
    assert not allowed(ledger, "42")
    clock.now += timedelta(minutes=1)  # 2026-04-13 00:00:30
    assert ledger.period_key() == "2026-04-13"
    assert allowed(ledger, "42")
    spend(ledger, "42", 0.003)
    assert not allowed(ledger, "42")
    # One warning per period: the new period warns again, once.
    assert not allowed(ledger, "42")
    assert len(warnings(caplog)) == 2
    assert [e["period"] for e in sink.of("budget")] == ["2026-04-12", "2026-04-13", "2026-04-13"]
    assert store.spend("42", "2026-04-12") == pytest.approx(0.005)
    assert store.spend("42", "2026-04-13") == pytest.approx(0.003)


def test_monthly_period_keeps_spend_across_days(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 1, 0, 0, tzinfo=UTC))
    ledger, _ = make(store, clock, ceiling=0.01, period="month")
    spend(ledger, "42", 0.006)
    clock.now = datetime(2026, 4, 30, 23, 59, tzinfo=UTC)
    spend(ledger, "42", 0.006)
    assert not allowed(ledger, "42")
    clock.now = datetime(2026, 5, 1, 0, 0, tzinfo=UTC)
    assert allowed(ledger, "42")
    assert ledger.period_key() == "2026-05"


def test_a_clock_in_another_zone_counts_in_utc(store: Store) -> None:
    # 01:00 on the 13th in UTC+2 is still the 12th in UTC.
    clock = Clock(datetime(2026, 4, 13, 1, 0, tzinfo=timezone(timedelta(hours=2))))
    ledger, _ = make(store, clock)
    assert ledger.period_key() == "2026-04-12"


def test_summary_shows_spend_against_ceiling_for_this_period(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, _ = make(store, clock, ceiling=2.5)
    spend(ledger, "42", 0.25)
    spend(ledger, "dm", 0.125)
    spend(ledger, "42", 0.25)
    assert ledger.summary() == {
        "42": {"spent_usd": 0.5, "ceiling_usd": 2.5, "period": "2026-04-12"},
        "dm": {"spent_usd": 0.125, "ceiling_usd": 2.5, "period": "2026-04-12"},
    }
    clock.now += timedelta(days=1)
    assert ledger.summary() == {}


def test_ceiling_change_applies_on_the_next_check(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    base = load_settings({"PICORTEX_HOME": str(store.path.parent)})
    current = {"s": attrs.evolve(base, budget=BudgetSettings(0.001, "day"))}
    ledger = LedgerBudget(store, lambda: current["s"], RecordingSink(), wall_clock=clock)
    spend(ledger, "42", 0.002)
    assert not allowed(ledger, "42")
    current["s"] = attrs.evolve(base, budget=BudgetSettings(1.0, "day"))
    assert allowed(ledger, "42")


def test_calls_in_flight_hold_their_worst_case_until_settled(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, sink = make(store, clock, ceiling=0.01)
    spend(ledger, "42", 0.004)
    # Three channels ask at once, each call's worst case 0.003: 0.004 spent + held.
    first = ledger.reserve("42", None, 0.003)  # 0.004 + 0.000 held
    second = ledger.reserve("42", None, 0.003)  # 0.004 + 0.003 held
    assert isinstance(first, Reservation) and isinstance(second, Reservation)
    third = ledger.reserve("42", None, 0.003)  # 0.004 + 0.006 held reaches the ceiling
    assert third == Refusal("workspace", None)
    assert len(sink.of("budget")) == 1
    assert ledger.held_usd() == pytest.approx(0.006)
    ledger.settle(first, 0.0)  # one call failed: its reservation is returned
    assert ledger.held_usd() == pytest.approx(0.003)
    assert allowed(ledger, "42")
    ledger.settle(second, 0.001)  # settled to its real cost
    ledger.settle(second, 0.001)  # a second settle of the same handle changes nothing
    assert ledger.held_usd() == 0.0
    assert store.spend("42", "2026-04-12") == pytest.approx(0.005)


def test_spend_is_read_from_the_store_once_per_workspace_and_period(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    store.add_spend("42", "2026-04-12", 0.004, 0.0)  # spent before a restart
    reads: list[tuple[str, str]] = []
    real_spend = store.spend

    def counting(workspace: str, period_key: str) -> float:
        reads.append((workspace, period_key))
        return real_spend(workspace, period_key)

    monkeypatch.setattr(store, "spend", counting)
    ledger, _ = make(store, clock, ceiling=0.01)
    for _ in range(5):
        assert allowed(ledger, "42")
        spend(ledger, "42", 0.001)  # 0.004 + 5 x 0.001 = 0.009
    assert allowed(ledger, "dm")
    assert reads == [("42", "2026-04-12"), ("dm", "2026-04-12")]
    spend(ledger, "42", 0.001)  # reaches the ceiling in memory and in the store
    assert not allowed(ledger, "42")
    assert real_spend("42", "2026-04-12") == pytest.approx(0.01)
    clock.now += timedelta(days=1)
    assert allowed(ledger, "42")  # a new period is read afresh
    assert reads[-1] == ("42", "2026-04-13")
    # A restarted ledger starts from the store's rows.
    fresh, _ = make(store, Clock(datetime(2026, 4, 12, 11, 0, tzinfo=UTC)), ceiling=0.01)
    assert not allowed(fresh, "42")


def limits(
    store: Store,
    clock: Clock,
    *,
    ceiling: float = 10.0,
    global_ceiling: float = 20.0,
    daily: float = 1.0,
    rate: int = 6,
    owner: int | None = None,
) -> tuple[LedgerBudget, RecordingSink, list[float]]:
    env = {"PICORTEX_HOME": str(store.path.parent)}
    if owner is not None:
        env["PICORTEX_OWNER_ID"] = str(owner)
    base = load_settings(env)
    settings = attrs.evolve(
        base, budget=BudgetSettings(ceiling, "day", global_ceiling, daily, rate)
    )
    sink = RecordingSink()
    now = [0.0]
    ledger = LedgerBudget(store, lambda: settings, sink, wall_clock=clock, monotonic=lambda: now[0])
    return ledger, sink, now


def test_the_global_ceiling_counts_every_workspace(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    store.add_spend("7", "2026-04-12", 0.5, 0.0)  # spent before a restart, elsewhere
    ledger, sink, _ = limits(store, clock, ceiling=1.0, global_ceiling=1.0)
    spend(ledger, "42", 0.3)
    assert allowed(ledger, "dm")  # 0.8 of 1.0
    spend(ledger, "dm", 0.2)
    refused = ledger.reserve("99", None, 0.0)  # a fresh workspace, but all together are at 1.0
    assert refused == Refusal("global", None)
    (event,) = sink.of("budget")
    assert (event["limit"], event["global_spent_usd"], event["workspace"]) == ("global", 1.0, "99")


def test_a_user_over_the_daily_limit_is_told_once_and_the_owner_is_exempt(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, sink, _ = limits(store, clock, daily=0.05, rate=0, owner=1)
    spend(ledger, "42", 0.05, user_id=5)
    first = ledger.reserve("42", 5, 0.001)
    assert isinstance(first, Refusal) and first.limit == "user_daily"
    assert first.notice is not None and "daily limit" in first.notice
    second = ledger.reserve("dm", 5, 0.001)  # the same user anywhere: no second notice
    assert second == Refusal("user_daily", None)
    assert allowed(ledger, "42", user_id=6)  # another user is not affected
    spend(ledger, "42", 0.5, user_id=1)
    assert allowed(ledger, "42", user_id=1)  # the owner has no per-user limit
    assert [e["user_id"] for e in sink.of("budget")] == [5, 5]
    assert len(warnings(caplog)) == 1
    assert "user 5" in warnings(caplog)[0]
    # Who spent what: the status lists users, dearest first, the owner marked.
    users = ledger.users()
    assert list(users) == ["1", "5"]
    assert users["1"]["owner"] is True and users["5"]["spent_usd"] == 0.05
    clock.now += timedelta(days=1)  # a new day: allowed again, and told again when over
    assert allowed(ledger, "42", user_id=5)


def test_requests_per_minute_per_user_and_one_notice_per_minute(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, sink, now = limits(store, clock, daily=0.0, rate=2)
    held = [ledger.reserve("42", 5, 0.001) for _ in range(2)]
    assert all(isinstance(h, Reservation) for h in held)
    refused = ledger.reserve("42", 5, 0.001)
    assert isinstance(refused, Refusal) and refused.limit == "user_rate"
    assert refused.notice is not None
    now[0] = 30.0
    assert ledger.reserve("42", 5, 0.001) == Refusal("user_rate", None)
    assert isinstance(ledger.reserve("42", None, 0.001), Reservation)  # no user: no limit
    now[0] = 61.0  # the first two calls have left the window
    assert isinstance(ledger.reserve("42", 5, 0.001), Reservation)
    assert [e["limit"] for e in sink.of("budget")] == ["user_rate", "user_rate"]
