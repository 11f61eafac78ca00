"""The response policy (SPEC 6): whether a reply goes to the channel or the requester's DM.

A failed DM is logged and never re-posted in the channel: sensitive answers must not leak.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final, Literal

import attrs

from picortex.types import Snowflake

Target = Literal["channel", "dm"]
TARGETS: Final[tuple[Target, ...]] = ("channel", "dm")
# A broken default (hand-edited file) must not hide replies in DMs nobody asked for.
FALLBACK_TARGET: Final[Target] = "channel"


def _as_target(value: object) -> Target | None:
    if isinstance(value, str):
        text = value.strip().lower()
        if text == "channel":
            return "channel"
        if text == "dm":
            return "dm"
    return None


def decide_target(
    command: str | None,
    default_mode: str,
    sensitive_commands: Collection[str],
    overrides: Mapping[str, str],
) -> Target:
    """Where the reply to `command` goes; `command` is None for a free-chat answer.

    Command names compare case-insensitively; override values that are neither `channel`
    nor `dm` are ignored, and so is an invalid default (which then means `channel`).
    """
    if command is not None:
        name = command.strip().lower()
        for key, value in overrides.items():
            target = _as_target(value)
            if key.strip().lower() == name and target is not None:
                return target
        if name in {s.strip().lower() for s in sensitive_commands}:
            return "dm"
    return _as_target(default_mode) or FALLBACK_TARGET


@attrs.frozen
class PostPlan:
    """How the channel actor posts one reply.

    When `dm_user_id` is set, open (or reuse) a DM with that user and post there; else post
    in `channel_id`. `reply_to` is the trigger to reference (set on the first chunk only).
    `fallback_to_channel` is always False: a failed DM is logged and the reply dropped.
    """

    target: Target
    channel_id: Snowflake | None
    dm_user_id: Snowflake | None
    reply_to: Snowflake | None
    fallback_to_channel: bool = False


def plan_post(
    target: Target,
    *,
    channel_id: Snowflake,
    author_id: Snowflake,
    message_id: Snowflake | None,
    in_dm: bool,
) -> PostPlan:
    """Turn a target into a plan for the message `message_id` by `author_id` in `channel_id`.

    `in_dm` is True for a 1:1 DM with the requester: there the DM *is* the channel, so the
    reply goes into it as a normal reply. A group DM is not a 1:1 DM.
    """
    if target == "dm" and not in_dm:
        return PostPlan("dm", None, author_id, None)
    return PostPlan(target, channel_id, None, message_id)


def allowed_mentions(
    *, ping_replied_user: bool = True, ping_users: bool = True
) -> dict[str, object]:
    """The `allowed_mentions` of every reply: never @everyone, @here or roles.

    `ping_users=False` also keeps `<@id>` in the text from pinging (a trust list, a quote).
    """
    return {"parse": ["users"] if ping_users else [], "replied_user": ping_replied_user}
