"""Budget arithmetic: period keys, call costs, the ceiling check and warn-once bookkeeping.

The ledger lives in the store; this module only decides (SPEC 9).
"""

from __future__ import annotations

from collections import deque
from datetime import UTC, datetime
from typing import Final, Literal, Protocol

import attrs

from picortex.core.money import usd
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
        reason = f"spent {usd(spent)} of {usd(ceiling)}"
    else:
        reason = f"budget reached: spent {usd(spent)} of {usd(ceiling)}, no call made"
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


# ---- reservations and limits (SPEC 9) ----------------------------------------------------

# A token is about four characters of English; three is the worst case the reservation
# assumes, so code, other scripts and short words cannot make a call dearer than reserved.
WORST_CHARS_PER_TOKEN: Final = 3
RATE_WINDOW_SECONDS: Final = 60.0  # `user_requests_per_minute` counts the last minute

Limit = Literal["workspace", "global", "user_daily", "user_rate"]

# The one short polite line a user over their own limit gets, once per period.
USER_NOTICES: Final[dict[str, str]] = {
    "user_daily": "Sorry, you've reached your daily limit for answers; I can help again "
    "tomorrow (UTC).",
    "user_rate": "Sorry, that's more questions than I can take in a minute; please ask again "
    "in a moment.",
}


REFUSAL_REASONS: Final[dict[str, str]] = {
    "workspace": "the workspace's budget ceiling is reached",
    "global": "the global budget ceiling is reached",
    "user_daily": "the user's daily spending limit is reached",
    "user_rate": "the user's requests-per-minute limit is reached",
}


@attrs.frozen(eq=False)
class Reservation:
    """Money held for one running call until it is settled (its identity is the handle)."""

    workspace: str
    user_id: int | None
    worst_usd: float


@attrs.frozen
class Refusal:
    """A call refused by a limit; `notice` is the polite line to post to the user, if any."""

    limit: Limit
    notice: str | None = None

    @property
    def reason(self) -> str:
        """Why there is no answer, for the `decision` event."""
        return REFUSAL_REASONS[self.limit]


def worst_input_tokens(prompt_chars: int) -> int:
    """The most input tokens a prompt can be: its characters / 3, rounded up.

    Also what a sent call that reported no usage is charged for (SPEC 9).
    """
    return -(-max(0, prompt_chars) // WORST_CHARS_PER_TOKEN)


def worst_case_usd(prompt_chars: int, max_tokens: int, price: PriceLike) -> float:
    """The most a call can cost: prompt characters / 3 at the input price plus every allowed
    output token at the output price."""
    return cost_usd(worst_input_tokens(prompt_chars), max(0, max_tokens), price)


@attrs.frozen
class Limits:
    """The ceilings that apply to one call; a user limit of 0 means none."""

    ceiling_usd: float
    global_ceiling_usd: float
    user_daily_usd: float = 0.0
    user_requests_per_minute: int = 0


@attrs.frozen
class Usage:
    """Money spent and held by unsettled calls, at each level, and the user's recent calls.

    The user fields are ignored for a call without a user or from the owner.
    """

    workspace_spent: float
    workspace_held: float
    global_spent: float
    global_held: float
    user_spent: float = 0.0
    user_held: float = 0.0
    user_recent_requests: int = 0


def admit(limits: Limits, usage: Usage, *, user_limited: bool) -> Limit | None:
    """Which limit refuses the call, or None when it may go ahead (and reserve).

    A level refuses when what is spent plus what running calls hold has reached its
    ceiling: running calls count at their worst case, so calls started together cannot
    overshoot a ceiling by more than one call's worst case. NaN refuses.
    """
    if not usage.workspace_spent + usage.workspace_held < limits.ceiling_usd:
        return "workspace"
    if not usage.global_spent + usage.global_held < limits.global_ceiling_usd:
        return "global"
    if user_limited:
        daily = limits.user_daily_usd
        if daily > 0 and not usage.user_spent + usage.user_held < daily:
            return "user_daily"
        rate = limits.user_requests_per_minute
        if rate > 0 and usage.user_recent_requests >= rate:
            return "user_rate"
    return None


def drop_old_requests(starts: deque[float], now: float) -> None:
    """Drop the call start times that left the rate window from `starts` (oldest first).

    In place, from the old end: a busy user's minute holds hundreds of starts, and each
    call drops only the few that aged out since the last one.
    """
    cutoff = now - RATE_WINDOW_SECONDS
    while starts and starts[0] <= cutoff:
        starts.popleft()
