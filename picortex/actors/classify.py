"""The discriminator's call in the running bot (SPEC 7): the chat's prompt, the typing
indicator while the model classifies, and the decision its answer makes."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import trio

from picortex.actors import composting
from picortex.core import discriminate
from picortex.core import discriminator as disc
from picortex.core.attention import AttentionDecision
from picortex.core.budget import workspace_id
from picortex.store.chathome import ChatHome, default_prompt_template
from picortex.types import Message, Snowflake

if TYPE_CHECKING:
    from picortex.actors.channel_clients import ChannelClients, ChatReads

logger = logging.getLogger(__name__)


async def classify(
    clients: ChannelClients,
    msg: Message,
    rule: AttentionDecision,
    spawn: Callable[[Callable[[], Awaitable[None]]], None],
) -> AttentionDecision:
    """Ask the chat's discriminator; failures fail open in a DM and closed in a group, and
    so does a discriminator paused by composting.

    `spawn` runs the typing indicator's last request past the classification.
    """
    settings = clients.chat.settings()
    home = ChatHome(clients.chat.home, str(msg.channel_id))
    try:
        template = await trio.to_thread.run_sync(home.read_prompt)
    except Exception as exc:
        logger.warning("discriminator prompt unavailable, using the default: %s", exc)
        template = default_prompt_template()
    history = discriminate.history_before(
        clients.model.cache.recent(msg.channel_id, discriminate.HISTORY_SCAN),
        msg,
        settings.discriminator.history,
        clients.chat.is_trusted,
    )
    own = clients.chat.store.get_chat_config(msg.channel_id)
    chat = disc.ChatMeta(
        chat_id=str(msg.channel_id),
        kind="dm"
        if msg.is_dm
        else ("thread" if clients.chat.registry.is_thread(msg.channel_id) else "group"),
        name=_channel_name(clients.chat, msg.channel_id),
        bot_name=clients.chat.bot.username,
    )
    try:
        request = discriminate.build_request(
            settings.classifier(own.discriminator_model if own is not None else None),
            template,
            msg,
            history,
            chat,
            workspace_id(msg.guild_id),
        )
    except disc.PromptTooLarge as exc:
        return disc.fail_decision(msg.is_dm, f"discriminator prompt too large: {exc}")
    paused = await composting.stage_pause(clients.compost, "discriminate")
    if paused is not None:
        return disc.fail_decision(msg.is_dm, f"discriminator {composting.until_text(paused)}")
    async with clients.posting.replies.typing(
        msg.channel_id, enabled=rule.show_typing, spawn=spawn
    ):
        result = await clients.model.llm.complete(request)
    if result.failed:
        clients.records.failures.record(
            stage="discriminate",
            workspace=workspace_id(msg.guild_id),
            persona=None,
            signal_id=msg.id,
            error=result.error or result.outcome,
            stack_trace=result.stack_trace,
        )
    return discriminate.interpret(
        result,
        is_dm=msg.is_dm,
        timeout_seconds=settings.discriminator.timeout_seconds,
        threshold=own.discriminator_threshold if own is not None else None,
    )


def _channel_name(clients: ChatReads, channel_id: Snowflake) -> str:
    ch = clients.registry.get(channel_id)
    return ch.name if ch is not None and ch.name else str(channel_id)
