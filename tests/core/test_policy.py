"""The response policy: where replies go, and the post plan."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.policy import PostPlan, allowed_mentions, decide_target, plan_post

SENSITIVE = ("whitelist", "config")


@pytest.mark.parametrize(
    ("command", "default", "overrides", "expected"),
    [
        (None, "channel", {}, "channel"),
        (None, "dm", {}, "dm"),
        ("help", "channel", {}, "channel"),
        ("help", "dm", {}, "dm"),
        ("whitelist", "channel", {}, "dm"),
        ("Config", "channel", {}, "dm"),
        ("whitelist", "channel", {"whitelist": "channel"}, "channel"),  # override beats list
        ("poll", "dm", {"poll": "channel"}, "channel"),  # override beats default
        ("help", "channel", {"HELP": "DM"}, "dm"),
        ("help", "channel", {"help": "elsewhere"}, "channel"),  # bad override ignored
        ("whitelist", "channel", {"whitelist": "nowhere"}, "dm"),
        (None, "channel", {"help": "dm"}, "channel"),
        ("help", "bogus", {}, "channel"),  # bad default means channel
    ],
)
def test_decide_target(
    command: str | None, default: str, overrides: dict[str, str], expected: str
) -> None:
    assert decide_target(command, default, SENSITIVE, overrides) == expected


@given(
    st.none() | st.sampled_from(["whitelist", "config", "poll", "help", "speak"]),
    st.sampled_from(["channel", "dm"]),
    st.lists(st.sampled_from(["whitelist", "config", "poll"]), unique=True),
    st.dictionaries(
        st.sampled_from(["whitelist", "config", "poll", "help"]), st.sampled_from(["channel", "dm"])
    ),
)
def test_precedence(
    command: str | None,
    default: str,
    sensitive: list[str],
    overrides: dict[str, str],
) -> None:
    target = decide_target(command, default, sensitive, overrides)
    if command in overrides:
        assert target == overrides[command]
    elif command in sensitive:
        assert target == "dm"
    else:
        assert target == default


def test_plan_for_channel_replies_references_the_trigger() -> None:
    plan = plan_post("channel", channel_id=5, author_id=6, message_id=7, in_dm=False)
    assert plan == PostPlan("channel", 5, None, 7)
    assert plan.fallback_to_channel is False


def test_plan_for_dm_from_a_guild_opens_a_dm_and_never_falls_back() -> None:
    plan = plan_post("dm", channel_id=5, author_id=6, message_id=7, in_dm=False)
    assert plan == PostPlan("dm", None, 6, None)
    assert plan.fallback_to_channel is False


def test_plan_for_dm_inside_a_dm_replies_in_place() -> None:
    plan = plan_post("dm", channel_id=5, author_id=6, message_id=7, in_dm=True)
    assert plan == PostPlan("dm", 5, None, 7)


def test_allowed_mentions_never_ping_everyone_or_roles() -> None:
    mentions = allowed_mentions()
    assert mentions == {"parse": ["users"], "replied_user": True}
    assert allowed_mentions(ping_replied_user=False)["replied_user"] is False
    mentions["parse"] = []
    assert allowed_mentions()["parse"] == ["users"]  # a fresh dict each time
