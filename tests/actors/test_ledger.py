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


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING
    ]


def test_under_the_ceiling_calls_are_allowed_and_recorded(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, sink = make(store, clock, ceiling=0.01)
    assert ledger.check("42")
    ledger.record("42", 0.004)
    ledger.record("42", 0.004)
    assert ledger.check("42")
    assert store.spend("42", "2026-04-12") == pytest.approx(0.008)
    assert sink.of("budget") == []


def test_at_the_ceiling_no_call_one_event_each_and_one_warning(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, sink = make(store, clock, ceiling=0.01)
    ledger.record("42", 0.01)  # exactly at the ceiling counts as spent
    assert not ledger.check("42")
    assert not ledger.check("42")
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
    ledger.record("42", 0.002)
    ledger.record("dm", 0.002)
    assert ledger.check("7")  # a workspace that spent nothing
    for _ in range(3):
        assert not ledger.check("42")
        assert not ledger.check("dm")
    lines = warnings(caplog)
    assert len(lines) == 2
    assert any("workspace 42 " in line for line in lines)
    assert any("workspace dm " in line for line in lines)


def test_daily_period_rolls_over_at_midnight_utc(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock(datetime(2026, 4, 12, 23, 59, 30, tzinfo=UTC))
    ledger, sink = make(store, clock, ceiling=0.001)
    ledger.record("42", 0.005)
    assert not ledger.check("42")
    clock.now += timedelta(minutes=1)  # 2026-04-13 00:00:30
    assert ledger.period_key() == "2026-04-13"
    assert ledger.check("42")
    ledger.record("42", 0.003)
    assert not ledger.check("42")
    # One warning per period: the new period warns again, once.
    assert not ledger.check("42")
    assert len(warnings(caplog)) == 2
    assert [e["period"] for e in sink.of("budget")] == ["2026-04-12", "2026-04-13", "2026-04-13"]
    assert store.spend("42", "2026-04-12") == pytest.approx(0.005)
    assert store.spend("42", "2026-04-13") == pytest.approx(0.003)


def test_monthly_period_keeps_spend_across_days(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 1, 0, 0, tzinfo=UTC))
    ledger, _ = make(store, clock, ceiling=0.01, period="month")
    ledger.record("42", 0.006)
    clock.now = datetime(2026, 4, 30, 23, 59, tzinfo=UTC)
    ledger.record("42", 0.006)
    assert not ledger.check("42")
    clock.now = datetime(2026, 5, 1, 0, 0, tzinfo=UTC)
    assert ledger.check("42")
    assert ledger.period_key() == "2026-05"


def test_a_clock_in_another_zone_counts_in_utc(store: Store) -> None:
    # 01:00 on the 13th in UTC+2 is still the 12th in UTC.
    clock = Clock(datetime(2026, 4, 13, 1, 0, tzinfo=timezone(timedelta(hours=2))))
    ledger, _ = make(store, clock)
    assert ledger.period_key() == "2026-04-12"


def test_summary_shows_spend_against_ceiling_for_this_period(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, _ = make(store, clock, ceiling=2.5)
    ledger.record("42", 0.25)
    ledger.record("dm", 0.125)
    ledger.record("42", 0.25)
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
    ledger.record("42", 0.002)
    assert not ledger.check("42")
    current["s"] = attrs.evolve(base, budget=BudgetSettings(1.0, "day"))
    assert ledger.check("42")


def test_calls_in_flight_hold_back_budget_until_settled(store: Store) -> None:
    clock = Clock(datetime(2026, 4, 12, 10, 0, tzinfo=UTC))
    ledger, sink = make(store, clock, ceiling=0.01)
    assert ledger.check("42")
    ledger.record("42", 0.004)  # the dearest call seen here costs 0.004
    # Three channels ask at once: 0.004 spent, each call in flight holds 0.004 back.
    assert ledger.check("42")  # 0.004 + 0.000 held
    assert ledger.check("42")  # 0.004 + 0.004 held
    assert not ledger.check("42")  # 0.004 + 0.008 held reaches the ceiling
    assert len(sink.of("budget")) == 1
    ledger.release("42")  # one call failed: its reservation is returned
    assert ledger.check("42")
    ledger.record("42", 0.004)
    ledger.record("42", 0.001)
    assert store.spend("42", "2026-04-12") == pytest.approx(0.009)


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
        assert ledger.check("42")
        ledger.record("42", 0.001)  # 0.004 + 5 x 0.001 = 0.009
    assert ledger.check("dm")
    assert reads == [("42", "2026-04-12"), ("dm", "2026-04-12")]
    ledger.record("42", 0.001)  # reaches the ceiling in memory and in the store
    assert not ledger.check("42")
    assert real_spend("42", "2026-04-12") == pytest.approx(0.01)
    clock.now += timedelta(days=1)
    assert ledger.check("42")  # a new period is read afresh
    assert reads[-1] == ("42", "2026-04-13")
    # A restarted ledger starts from the store's rows.
    fresh, _ = make(store, Clock(datetime(2026, 4, 12, 11, 0, tzinfo=UTC)), ceiling=0.01)
    assert not fresh.check("42")
