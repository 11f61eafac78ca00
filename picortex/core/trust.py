"""Trust tiers (SPEC 5 steps 1-2): whose messages count and which commands each tier may run.

Tiers are ordered `user < trusted < admin`; the owner is always admin.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import Final

from picortex.types import Message, Snowflake


class Tier(enum.IntEnum):
    """A trust tier; comparing tiers compares their power."""

    USER = 1
    TRUSTED = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        """The tier's name as users type it and the store keeps it."""
        return self.name.lower()

    @classmethod
    def parse(cls, text: str | None) -> Tier | None:
        """The tier named by `text` (case-insensitive, surrounding spaces ignored), or None."""
        if text is None:
            return None
        return _BY_LABEL.get(text.strip().lower())


_BY_LABEL: Final[dict[str, Tier]] = {tier.label: tier for tier in Tier}
TIER_LABELS: Final[tuple[str, ...]] = tuple(tier.label for tier in Tier)

# Commands that change who is trusted or how the bot behaves; everything else (poll, speak,
# stay, help and unknown words, which only get a help text) is open to every trusted tier.
# `forget` names other people for admins; `forget me` is open to anyone (see commands).
ADMIN_COMMANDS: Final[frozenset[str]] = frozenset(
    {"whitelist", "config", "attention", "access", "forget"}
)

# Message types a person sends (DEFAULT, REPLY); the others are Discord's system notices.
_PERSON_MESSAGE_TYPES: Final[frozenset[int]] = frozenset({0, 19})


def tier_of(
    user_id: Snowflake, owner_id: Snowflake | None, trust_lookup: Mapping[int, str]
) -> Tier | None:
    """The tier of `user_id`: admin for the owner, the listed tier otherwise, None if untrusted.

    A stored tier name we do not know counts as untrusted: failing closed costs nothing.
    """
    if owner_id is not None and user_id == owner_id:
        return Tier.ADMIN
    return Tier.parse(trust_lookup.get(user_id))


def is_trusted(
    user_id: Snowflake,
    owner_id: Snowflake | None,
    tier_lookup: Callable[[int], str | None],
    *,
    bot_user_id: Snowflake | None = None,
) -> bool:
    """Whether `user_id` is trusted (SPEC 3): the owner or anyone on the trust list; with
    `bot_user_id`, the bot itself too (its own words count where they are repeated).

    `tier_lookup` reads the trust list (`get_tier`); a list that cannot be read trusts no one.
    """
    if owner_id is not None and user_id == owner_id:
        return True
    if bot_user_id is not None and user_id == bot_user_id:
        return True
    try:
        return tier_lookup(user_id) is not None
    except Exception:  # fail closed: an unreadable trust list lets nobody's words through
        return False


def required_tier(command: str) -> Tier:
    """The lowest tier allowed to run `command` (a command name such as `whitelist`)."""
    return Tier.ADMIN if command.lower() in ADMIN_COMMANDS else Tier.USER


def may_run(command: str, tier: Tier | None) -> bool:
    """True when someone of `tier` may run `command`; the untrusted may run nothing."""
    return tier is not None and tier >= required_tier(command)


def should_ignore(message: Message, bot_user_id: Snowflake | None) -> str | None:
    """Why `message` is ignored before any other step (SPEC 5 step 1), or None to go on.

    Reasons: `own message`, `bot author`, `Discord system user`, `webhook`, `system message`.
    """
    if bot_user_id is not None and message.author.id == bot_user_id:
        return "own message"
    if message.author.bot:
        return "bot author"
    if message.author.system:
        return "Discord system user"
    if message.webhook_id is not None:
        return "webhook"
    if message.type not in _PERSON_MESSAGE_TYPES:
        return "system message"
    return None
