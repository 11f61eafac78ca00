"""Trust tiers, command permissions and the ignore rules."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picortex.core.trust import (
    ADMIN_COMMANDS,
    TIER_LABELS,
    Tier,
    is_trusted,
    may_run,
    required_tier,
    should_ignore,
    tier_of,
)
from picortex.types import Message, User

BOT = 900
OWNER = 1


def msg(author: User, *, type_: int = 0, webhook_id: int | None = None) -> Message:
    return Message(
        id=10,
        channel_id=20,
        author=author,
        content="hello",
        timestamp="2025-01-01T00:00:00+00:00",
        type=type_,
        webhook_id=webhook_id,
    )


def test_trusted_is_the_owner_the_list_and_with_its_id_the_bot() -> None:
    tiers = {5: "user"}.get
    assert is_trusted(OWNER, OWNER, tiers)
    assert is_trusted(5, OWNER, tiers)
    assert not is_trusted(6, OWNER, tiers)
    assert not is_trusted(6, None, tiers)  # no owner configured: nobody is the owner
    assert not is_trusted(BOT, OWNER, tiers)
    assert is_trusted(BOT, OWNER, tiers, bot_user_id=BOT)


def test_an_unreadable_trust_list_trusts_no_one_but_the_owner() -> None:
    def broken(user_id: int) -> str | None:
        raise RuntimeError("store closed")

    assert not is_trusted(5, OWNER, broken)
    assert is_trusted(OWNER, OWNER, broken)


def test_tiers_are_ordered_by_power() -> None:
    assert Tier.USER < Tier.TRUSTED < Tier.ADMIN
    assert TIER_LABELS == ("user", "trusted", "admin")


@pytest.mark.parametrize(
    ("text", "tier"),
    [
        ("user", Tier.USER),
        ("TRUSTED", Tier.TRUSTED),
        (" Admin ", Tier.ADMIN),
        ("admins", None),
        ("", None),
        ("owner", None),
        (None, None),
    ],
)
def test_parse_tier(text: str | None, tier: Tier | None) -> None:
    assert Tier.parse(text) is tier


def test_owner_is_always_admin_even_if_listed_lower() -> None:
    assert tier_of(OWNER, OWNER, {OWNER: "user"}) is Tier.ADMIN
    assert tier_of(OWNER, OWNER, {}) is Tier.ADMIN


def test_listed_users_get_their_tier() -> None:
    trust = {2: "user", 3: "trusted", 4: "admin"}
    assert tier_of(2, OWNER, trust) is Tier.USER
    assert tier_of(3, OWNER, trust) is Tier.TRUSTED
    assert tier_of(4, OWNER, trust) is Tier.ADMIN


def test_unlisted_and_unknown_tiers_are_untrusted() -> None:
    assert tier_of(5, OWNER, {2: "user"}) is None
    assert tier_of(6, OWNER, {6: "superuser"}) is None
    assert tier_of(7, None, {}) is None


@pytest.mark.parametrize("command", sorted(ADMIN_COMMANDS))
def test_admin_commands_need_admin(command: str) -> None:
    assert required_tier(command) is Tier.ADMIN
    assert may_run(command, Tier.ADMIN)
    assert may_run(command.upper(), Tier.ADMIN)
    assert not may_run(command, Tier.TRUSTED)
    assert not may_run(command, Tier.USER)
    assert not may_run(command, None)


@pytest.mark.parametrize("command", ["poll", "speak", "stay", "help", "unknown", "frobnicate"])
def test_other_commands_need_any_tier(command: str) -> None:
    assert required_tier(command) is Tier.USER
    for tier in Tier:
        assert may_run(command, tier)
    assert not may_run(command, None)


@given(st.text(max_size=20), st.sampled_from([None, *Tier]))
def test_may_run_is_monotonic_in_tier(command: str, tier: Tier | None) -> None:
    if may_run(command, tier):
        assert tier is not None
        assert all(may_run(command, t) for t in Tier if t >= tier)


def test_ignore_own_messages() -> None:
    assert should_ignore(msg(User(BOT, "picortex", bot=True)), BOT) == "own message"


def test_ignore_other_bots() -> None:
    assert should_ignore(msg(User(55, "otherbot", bot=True)), BOT) == "bot author"


def test_ignore_the_discord_system_user() -> None:
    # Discord's own account (official notices) speaks for no one who could be answered.
    system = User(643945264868098049, "Discord", system=True)
    assert should_ignore(msg(system), BOT) == "Discord system user"


def test_ignore_webhooks_and_system_messages() -> None:
    assert should_ignore(msg(User(56, "hook"), webhook_id=56), BOT) == "webhook"
    assert should_ignore(msg(User(57, "alice"), type_=7), BOT) == "system message"


def test_people_are_not_ignored() -> None:
    assert should_ignore(msg(User(57, "alice")), BOT) is None
    assert should_ignore(msg(User(57, "alice"), type_=19), BOT) is None
    assert should_ignore(msg(User(57, "alice")), None) is None
