"""Budget arithmetic: period keys, call costs, the ceiling check and warn-once bookkeeping.

The ledger lives in the store; this module only decides (SPEC 9).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final, Literal, Protocol

import attrs

from picortex.types import Snowflake

Period = Literal["day", "month"]

PERIODS: Final[tuple[Period, ...]] = ("day", "month")
DM_WORKSPACE: Final = "dm"  # every DM shares one workspace: it has no guild
TOKENS_PER_PRICE_UNIT: Final = 1_000_000  # prices are USD per million tokens


class PriceLike(Protocol):
    """A model's price in USD per million tokens (config's `Price`)."""

    @property
    def input(self) -> float: ...

    @property
    def output(self) -> float: ...


def workspace_id(guild_id: Snowflake | None) -> str:
    """The budget workspace of a message: its guild id as text, or `dm`."""
    return DM_WORKSPACE if guild_id is None else str(guild_id)


def period_key(now_utc: datetime, period: str) -> str:
    """The ledger key of the period holding `now_utc`: `2026-04-12` (day) or `2026-04` (month).

    A naive datetime is taken as UTC; an aware one is converted to UTC first.

    Raises:
        ValueError: `period` is not `day` or `month`.
    """
    now = now_utc.replace(tzinfo=UTC) if now_utc.tzinfo is None else now_utc.astimezone(UTC)
    if period == "day":
        return f"{now.year:04d}-{now.month:02d}-{now.day:02d}"
    if period == "month":
        return f"{now.year:04d}-{now.month:02d}"
    raise ValueError(f"budget period must be day or month, not {period!r}")


def cost_usd(input_tokens: int, output_tokens: int, price: PriceLike) -> float:
    """What a call cost, from the response's token usage and the model's price.

    Raises:
        ValueError: a negative token count or price.
    """
    if input_tokens < 0 or output_tokens < 0:
        raise ValueError("token counts must not be negative")
    if price.input < 0 or price.output < 0:
        raise ValueError("prices must not be negative")
    return (input_tokens * price.input + output_tokens * price.output) / TOKENS_PER_PRICE_UNIT


@attrs.frozen
class BudgetDecision:
    """Whether a call may be made, with the numbers behind it."""

    allowed: bool
    spent: float
    ceiling: float
    reason: str

    @property
    def remaining(self) -> float:
        """What is left before the ceiling (never negative)."""
        return max(0.0, self.ceiling - self.spent) if self.allowed else 0.0


def check(spent: float, ceiling: float) -> BudgetDecision:
    """May the workspace make another call? Not when its spend is at or over the ceiling.

    A spend that is not a number (NaN) blocks the call: unknown spend is not room to spend.
    """
    allowed = spent < ceiling  # False for NaN on either side
    if allowed:
        reason = f"spent ${spent:.4f} of ${ceiling:.4f}"
    else:
        reason = f"budget reached: spent ${spent:.4f} of ${ceiling:.4f}, no call made"
    return BudgetDecision(allowed, spent, ceiling, reason)


@attrs.frozen
class WarnState:
    """The (workspace, period key) pairs already warned about; one per workspace at most."""

    warned: frozenset[tuple[str, str]] = frozenset()


def should_warn(state: WarnState, workspace: str, period_key: str) -> tuple[bool, WarnState]:
    """True the first time a workspace hits its ceiling in a period, False after that.

    The new state forgets the workspace's older periods, so it stays one entry per workspace.
    """
    if (workspace, period_key) in state.warned:
        return False, state
    kept = {pair for pair in state.warned if pair[0] != workspace}
    kept.add((workspace, period_key))
    return True, WarnState(frozenset(kept))
