"""Budget arithmetic: period keys, costs, the ceiling check and warn-once."""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime, timedelta, timezone

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.budget import (
    RATE_WINDOW_SECONDS,
    WarnState,
    check,
    cost_usd,
    drop_old_requests,
    period_key,
    should_warn,
    workspace_id,
)


@attrs.frozen
class Price:
    input: float
    output: float


HAIKU = Price(0.10, 0.50)
tokens = st.integers(0, 10_000_000)
prices = st.builds(Price, st.floats(0, 100), st.floats(0, 100))
money = st.floats(0, 1_000, allow_nan=False)


def test_period_keys() -> None:
    now = datetime(2026, 4, 12, 23, 59, 59, tzinfo=UTC)
    assert period_key(now, "day") == "2026-04-12"
    assert period_key(now, "month") == "2026-04"
    # An aware time in another zone is converted to UTC first.
    tokyo = datetime(2026, 5, 1, 8, 0, tzinfo=timezone(timedelta(hours=9)))
    assert period_key(tokyo, "day") == "2026-04-30"
    assert period_key(tokyo, "month") == "2026-04"
    assert period_key(datetime(2026, 1, 2, 3, 4), "day") == "2026-01-02"  # naive means UTC
    with pytest.raises(ValueError, match="day or month"):
        period_key(now, "week")


@given(st.datetimes(timezones=st.just(UTC)), st.sampled_from(["day", "month"]))
def test_period_key_is_monotone_in_time(now: datetime, period: str) -> None:
    later = now + timedelta(hours=1) if now.year < 9999 else now
    assert period_key(now, period) <= period_key(later, period)


def test_workspace_ids() -> None:
    assert workspace_id(None) == "dm"
    assert workspace_id(123456789012345678) == "123456789012345678"


def test_cost_at_haiku_prices() -> None:
    assert cost_usd(1_000_000, 0, HAIKU) == pytest.approx(0.10)
    assert cost_usd(0, 1_000_000, HAIKU) == pytest.approx(0.50)
    assert cost_usd(2_000, 100, HAIKU) == pytest.approx(0.00025)
    with pytest.raises(ValueError, match="negative"):
        cost_usd(-1, 0, HAIKU)
    with pytest.raises(ValueError, match="negative"):
        cost_usd(1, 0, Price(-0.1, 0.5))


@given(tokens, tokens, prices)
def test_cost_is_never_negative(tin: int, tout: int, price: Price) -> None:
    assert cost_usd(tin, tout, price) >= 0


@given(tokens, tokens, st.integers(0, 1_000_000), st.integers(0, 1_000_000), prices)
def test_cost_is_monotone_in_tokens(
    tin: int, tout: int, more_in: int, more_out: int, price: Price
) -> None:
    assert cost_usd(tin, tout, price) <= cost_usd(tin + more_in, tout + more_out, price)


@given(tokens, tokens, prices, st.floats(0, 100))
def test_cost_is_monotone_in_price(tin: int, tout: int, price: Price, bump: float) -> None:
    dearer = Price(price.input + bump, price.output + bump)
    assert cost_usd(tin, tout, price) <= cost_usd(tin, tout, dearer)


@given(money)
def test_ceiling_boundary_is_exact(ceiling: float) -> None:
    assert not check(ceiling, ceiling).allowed  # at the ceiling: no call
    assert not check(ceiling + 0.01, ceiling).allowed
    below = ceiling - max(ceiling * 1e-9, 1e-12)
    if below < ceiling:
        assert check(below, ceiling).allowed


@given(money, money, money)
def test_check_is_monotone_in_spend(spent: float, extra: float, ceiling: float) -> None:
    if not check(spent, ceiling).allowed:
        assert not check(spent + extra, ceiling).allowed


@given(money, money)
def test_remaining_is_never_negative(spent: float, ceiling: float) -> None:
    decision = check(spent, ceiling)
    assert decision.remaining >= 0
    assert decision.allowed == (spent < ceiling)


def test_check_reasons_and_odd_values() -> None:
    blocked = check(5.0, 5.0)
    assert blocked.reason == "budget reached: spent $5.00 of $5.00, no call made"
    assert check(0.0, 0.0).allowed is False  # a zero ceiling means no calls at all
    assert check(float("nan"), 5.0).allowed is False
    assert check(1.25, 5.0).remaining == pytest.approx(3.75)


def test_warn_once_per_workspace_per_period() -> None:
    state = WarnState()
    first, state = should_warn(state, "123", "2026-04-12")
    again, state = should_warn(state, "123", "2026-04-12")
    other, state = should_warn(state, "dm", "2026-04-12")
    next_day, state = should_warn(state, "123", "2026-04-13")
    assert (first, again, other, next_day) == (True, False, True, True)
    # Older periods are forgotten: one entry per workspace.
    assert state.warned == frozenset({("123", "2026-04-13"), ("dm", "2026-04-12")})


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from(["p1", "p2"])), max_size=30))
def test_warn_once_state_stays_small_and_never_warns_twice_in_a_row(
    calls: list[tuple[str, str]],
) -> None:
    state = WarnState()
    last: dict[str, str] = {}
    for ws, key in calls:
        warned, state = should_warn(state, ws, key)
        assert warned == (last.get(ws) != key)
        last[ws] = key
        assert len(state.warned) <= 3


@given(st.lists(st.floats(0, 1000), max_size=50), st.floats(0, 2000))
def test_only_the_starts_inside_the_rate_window_are_kept(starts: list[float], now: float) -> None:
    window = deque(sorted(starts))
    drop_old_requests(window, now)
    assert list(window) == [t for t in sorted(starts) if t > now - RATE_WINDOW_SECONDS]
