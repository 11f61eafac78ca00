"""Access by role and channel (SPEC 18): who counts as trusted without being listed, and
where the bot stays silent whatever the chat's mode.

`[access] allow_roles`: a guild member holding one of these roles counts as `user` tier.
`allow_channels`: when not empty, only these guild channels (and their threads) are heard;
every other guild channel is silent. `deny_channels`: these channels (and their threads) are
silent. A deny beats an allow. Silent is the attention mode: commands still answer (SPEC 5).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

from picortex.core.trust import Tier
from picortex.types import Snowflake

DENIED: Final = "channel is on [access] deny_channels"
NOT_ALLOWED: Final = "channel is not on [access] allow_channels"


def blocked_reason(
    channel_id: Snowflake,
    parent_id: Snowflake | None,
    *,
    in_guild: bool,
    allow_channels: Collection[int],
    deny_channels: Collection[int],
) -> str | None:
    """Why the channel is silent by access rules, or None when it keeps its own mode.

    A thread follows its parent channel: denying or allowing a channel covers its threads,
    and a thread may be named on its own too. `allow_channels` limits guild channels only:
    1:1 and group DMs are governed by the trust list and `[attention] dm` (an owner who
    means to silence a DM names it in `deny_channels`).
    """
    if deny_channels and (
        channel_id in deny_channels or (parent_id is not None and parent_id in deny_channels)
    ):
        return DENIED
    if (
        allow_channels
        and in_guild
        and channel_id not in allow_channels
        and (parent_id is None or parent_id not in allow_channels)
    ):
        return NOT_ALLOWED
    return None


def role_tier(roles: Iterable[int], allow_roles: Collection[int]) -> Tier | None:
    """`user` when the member holds one of `allow_roles`, else None (roles grant no more)."""
    if not allow_roles:
        return None
    for role in roles:
        if role in allow_roles:
            return Tier.USER
    return None


def with_roles(
    listed: Tier | None, roles: Iterable[int], allow_roles: Collection[int]
) -> Tier | None:
    """The tier of someone listed at `listed` (None: not listed) who holds `roles`: the
    listed tier when there is one (a role never lowers it), else what the roles grant."""
    return listed if listed is not None else role_tier(roles, allow_roles)
