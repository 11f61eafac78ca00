"""What the router and the channel actor both read of a chat and keep of its messages: the
chat's attention mode, and a message kept for recall.
"""

from __future__ import annotations

import logging
import time

from picortex.actors.clients import ChatConfigReader, RecallStore, ThreadParents, UserModesReader
from picortex.config import AccessSettings
from picortex.core.access import blocked_reason
from picortex.core.attention import (
    AttentionDefaults,
    AttentionMode,
    ModeChoice,
    as_mode,
    choose_mode,
    mode_for_chat,
)
from picortex.types import Message

logger = logging.getLogger(__name__)


def attention_mode(
    store: ChatConfigReader,
    registry: ThreadParents,
    message: Message,
    defaults: AttentionDefaults,
) -> AttentionMode:
    """The mode of the message's chat: its own, else its parent channel's, else the default.

    Read from memory. The parent is looked up only when the chat has no usable mode of its
    own (the router asks this for every message of a busy server).
    """
    own = store.get_chat_config(message.channel_id)
    own_mode = own.attention_mode if own is not None else None
    parent_mode = None
    if own_mode is None or as_mode(own_mode) is None:
        parent_id = registry.parent_of(message.channel_id)
        if parent_id is not None:
            parent = store.get_chat_config(parent_id)
            parent_mode = parent.attention_mode if parent is not None else None
    return mode_for_chat(own_mode, parent_mode, message.is_dm, defaults)


def mode_choice(
    store: ChatConfigReader,
    registry: ThreadParents,
    message: Message,
    defaults: AttentionDefaults,
    access: AccessSettings,
) -> ModeChoice:
    """The mode for this message's author here (SPEC 18): silent in a channel access rules
    block, else the author's own mode in the chat (or in a thread's parent channel), else the
    chat's mode. Read from memory, like `attention_mode`.
    """
    chat_mode = attention_mode(store, registry, message, defaults)
    channel_id = message.channel_id
    blocked = None
    if access.allow_channels or access.deny_channels:
        blocked = blocked_reason(
            channel_id,
            registry.parent_of(channel_id),
            in_guild=message.guild_id is not None,
            allow_channels=access.allow_channels,
            deny_channels=access.deny_channels,
        )
    user_mode = None
    if blocked is None:
        author = message.author.id
        user_mode = store.get_user_attention(channel_id, author)
        if user_mode is None:
            parent_id = registry.parent_of(channel_id)
            if parent_id is not None:
                user_mode = store.get_user_attention(parent_id, author)
    return choose_mode(chat_mode, user_mode=user_mode, blocked=blocked)


def user_modes(store: UserModesReader, chat_id: int) -> dict[int, str]:
    """Users' own attention modes in one chat (user id -> mode), for `attention show`."""
    return {row.user_id: row.mode for row in store.user_attentions() if row.chat_id == chat_id}


def remember(store: RecallStore, message: Message, content: str) -> None:
    """Keep a message for recall (SPEC 8), queued for the store's next group; a failure is
    logged, never raised (the message is still handled).

    Only a trusted author's message or one of the bot's own answers is kept: the caller has
    checked which it is.
    """
    try:
        store.add_memory_message(
            message_id=message.id,
            channel_id=message.channel_id,
            guild_id=message.guild_id,
            author_id=message.author.id,
            author_name=message.author.display_name,
            content=content,
            created_at=time.time(),
        )
    except Exception:
        logger.exception("could not store message %s for recall", message.id)
