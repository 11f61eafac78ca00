"""Money is shown in dollars, fixed-point (SPEC 13: `$0.000001`, never `1e-06`)."""

from __future__ import annotations

import math
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.money import is_amount, usd


@pytest.mark.parametrize(
    ("amount", "shown"),
    [
        (0.000001, "$0.000001"),
        (1e-6, "$0.000001"),
        (0.0000001234, "$0.0000001234"),
        (5, "$5.00"),
        (5.0, "$5.00"),
        (20.5, "$20.50"),
        (0.1 + 0.2, "$0.30"),
        (1.2345678, "$1.23457"),
        (0, "$0.00"),
        (None, "$0.00"),
        (-0.25, "-$0.25"),
        (1e21, "$1000000000000000000000.00"),
    ],
)
def test_amounts_read_as_dollars(amount: float | None, shown: str) -> None:
    assert usd(amount) == shown


@given(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
def test_never_exponent_notation_and_close_to_the_amount(amount: float) -> None:
    shown = usd(amount)
    assert "e" not in shown.lower()
    number = Decimal(shown.replace("$", ""))
    assert math.isclose(float(number), amount, rel_tol=1e-5, abs_tol=1e-300)


@pytest.mark.parametrize("amount", [math.nan, math.inf, -math.inf, "junk"])
def test_what_is_not_an_amount_reads_as_nothing(amount: object) -> None:
    assert usd(amount) == "$0.00"


def test_log_fields_named_usd_hold_dollars() -> None:
    assert is_amount("cost_usd", 0.000001)
    assert is_amount("ceiling_usd", 5)
    assert not is_amount("cost_usd", "0.1")
    assert not is_amount("cost_usd", True)
    assert not is_amount("latency_ms", 1.5)
