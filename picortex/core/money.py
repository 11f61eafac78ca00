"""Amounts of money as people read them: dollars in fixed-point, never in exponent notation.

One helper for chat, the command line, the panel and the demo (SPEC 13: `$0.000001`, never
`1e-06`).
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Final

# Six significant digits show a one-token call's cost and a ceiling alike.
SIGNIFICANT_DIGITS: Final = 6
# Whole dollars and cents always show their cents: `$5.00`, not `$5`.
MIN_DECIMALS: Final = 2
# Log fields that hold dollars are named so (`cost_usd`, `spent_usd`, `ceiling_usd`).
USD_FIELD_SUFFIX: Final = "_usd"


def usd(amount: object) -> str:
    """An amount in US dollars: `$0.000001`, `$5.00`, `-$0.25` (None and junk: `$0.00`)."""
    value = float(amount) if isinstance(amount, int | float) else 0.0
    if not math.isfinite(value):
        value = 0.0
    text = format(Decimal(f"{abs(value):.{SIGNIFICANT_DIGITS}g}"), "f")
    whole, _, decimals = text.partition(".")
    decimals = decimals.rstrip("0").ljust(MIN_DECIMALS, "0")
    sign = "-" if value < 0 and (whole, decimals) != ("0", "00") else ""
    return f"{sign}${whole}.{decimals}"


def is_amount(field: str, value: object) -> bool:
    """True for a log field that holds dollars (named `*_usd`, a number)."""
    return (
        field.endswith(USD_FIELD_SUFFIX)
        and isinstance(value, int | float)
        and not isinstance(value, bool)
    )
