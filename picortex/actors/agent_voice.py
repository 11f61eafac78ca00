"""The default agent's system prompt for one answer (SPEC 18): the chat's own prompt from
its chat home, else the owner's, filled in by `picortex.core.agent_prompt`."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Protocol

import trio

from picortex.actors.clients import ChannelDirectory, ChatConfigReader
from picortex.core.agent_prompt import PromptFacts, system_prompt
from picortex.core.chat_settings import ChatSettings
from picortex.store.chathome import ChatHome
from picortex.types import Message

logger = logging.getLogger(__name__)


class BotName(Protocol):
    """The bot's own user, as far as its name goes."""

    @property
    def username(self) -> str:
        """The bot's name."""
        ...


async def chat_prompt(home: Path, chat_id: int) -> str | None:
    """The chat's own agent prompt, or None; an unreadable one is logged and skipped."""
    try:
        chat = ChatHome(home, str(chat_id))
        # Most chats have no prompt of their own: one stat says so, without a thread's hop.
        if not chat.agent_prompt_path.exists():
            return None
        return await trio.to_thread.run_sync(chat.read_agent_prompt)
    except Exception as exc:
        logger.warning("agent prompt of chat %s unavailable, using the owner's: %s", chat_id, exc)
        return None


async def answer_system_prompt(
    *,
    home: Path,
    owner_prompt: str,
    registry: ChannelDirectory,
    bot: BotName,
    trigger: Message,
) -> str:
    """The system prompt for an answer to `trigger`."""
    channel = registry.get(trigger.channel_id)
    if trigger.is_dm:
        kind = "dm"
    else:
        kind = "thread" if registry.is_thread(trigger.channel_id) else "group"
    server = registry.guild_name(trigger.guild_id) if trigger.guild_id is not None else None
    facts = PromptFacts(
        bot_name=bot.username,
        chat_name=channel.name if channel is not None and channel.name else "",
        chat_kind=kind,
        server_name=server or "",
        # The date is written out to the model, like a log's timestamp: wall clock, UTC.
        date=time.strftime("%Y-%m-%d", time.gmtime()),
    )
    return system_prompt(await chat_prompt(home, trigger.channel_id), owner_prompt, facts)


async def chat_settings(
    home: Path, store: ChatConfigReader, chat_id: int, default_model: str
) -> ChatSettings:
    """The chat's own prompt, discriminator model and threshold, for `attention ...`."""
    own = store.get_chat_config(chat_id)
    return ChatSettings(
        prompt=await chat_prompt(home, chat_id),
        model=own.discriminator_model if own is not None else None,
        threshold=own.discriminator_threshold if own is not None else None,
        default_model=default_model,
    )
