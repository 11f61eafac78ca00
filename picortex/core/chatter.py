"""Chatter: a message nobody addressed to the bot, in a chat whose mode cannot answer it.

Most of a busy server's traffic is chatter. Deciding it needs no channel state (an untrusted
author never answers and never continues a request), so the router decides it inline: no
mailbox hop, no task switch, no log line of its own; it is counted instead (SPEC 5).
"""

from __future__ import annotations

from typing import Final

from picortex.types import Message, Snowflake

# Modes in which a message that does not address the bot is never answered nor weighed:
# `always` and the discriminate modes log a decision for every message they weigh.
QUIET_MODES: Final = frozenset({"mentions-only", "silent"})


def is_chatter(
    message: Message,
    *,
    bot_user_id: Snowflake | None,
    trusted: bool,
    mode: str,
) -> bool:
    """True when `message` is chatter the router may decide inline.

    Args:
        message: a MESSAGE_CREATE, not the bot's own.
        bot_user_id: the bot's id (None before READY: then nothing is chatter).
        trusted: whether the author is the owner or on the trust list; a trusted author's
            message may continue a request, which only its channel actor knows.
        mode: the chat's effective attention mode.
    """
    if bot_user_id is None or trusted or message.guild_id is None or mode not in QUIET_MODES:
        return False
    for user in message.mentions:  # usually none: a loop, not a generator per message
        if user.id == bot_user_id:
            return False
    if message.message_reference is not None:
        # A reply to the bot addresses it; a reply whose author is unknown might.
        author = message.referenced_author
        if author is None or author.id == bot_user_id:
            return False
    # A mention Discord left out of `mentions` (an edited payload, say) still addresses us.
    content = message.content
    return not (
        "<@" in content and (f"<@{bot_user_id}>" in content or f"<@!{bot_user_id}>" in content)
    )
