"""One discriminator classification (SPEC 7): the model request and how its result decides."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final

import trio

from picortex.actors.llm import ChatTurn, LLMRequest, LLMResult
from picortex.config import Settings
from picortex.core import discriminator as disc
from picortex.core.attention import AttentionDecision
from picortex.core.budget import workspace_id
from picortex.core.money import usd
from picortex.store.chathome import ChatHome, default_prompt_template
from picortex.types import Message, Snowflake

if TYPE_CHECKING:
    from picortex.actors.channel_clients import ChannelClients

logger = logging.getLogger(__name__)

# Cached messages searched for the ones before the message being classified: newer ones may
# be cached already when the channel is busy, and must not crowd the history out.
HISTORY_SCAN: Final = 200


def history_before(
    cached: Sequence[Message],
    message: Message,
    n: int,
    trusted: Callable[[Snowflake], bool],
) -> list[disc.HistoryLine]:
    """The last `n` of `cached` (oldest first) that came before `message`; `trusted` tells
    whose lines go unmarked."""
    if n <= 0:
        return []
    earlier = [m for m in cached if m.id < message.id]
    return [
        disc.HistoryLine(m.author.display_name, m.text, trusted(m.author.id)) for m in earlier[-n:]
    ]


def discriminator_model(settings: Settings, chat_model: str | None = None) -> str:
    """The model that classifies for a chat: its own `discriminator_model`, else the setting."""
    return chat_model.strip() if chat_model and chat_model.strip() else settings.discriminator.model


def build_request(
    settings: Settings,
    template: str,
    message: Message,
    history: Sequence[disc.HistoryLine],
    chat: disc.ChatMeta,
    workspace: str,
    *,
    model: str | None = None,
) -> LLMRequest:
    """The capped prompt for `message` as an LLM request of stage `discriminate`.

    Args:
        model: the chat's own discriminator model (`chat_config`), if it has one.

    Raises:
        PromptTooLarge: no prompt fits the $0.001 budget at the model's prices; the caller
            fails open or closed as for any unavailable model.
    """
    model_name = discriminator_model(settings, model)
    price = settings.price_for(model_name)
    max_chars = disc.max_prompt_chars(price.input, price.output, disc.MAX_OUTPUT_TOKENS)
    if max_chars == 0:
        raise disc.PromptTooLarge(
            f"{model_name} costs more than {usd(disc.CLASSIFICATION_BUDGET_USD)} per "
            "classification at the configured prices; choose a cheaper discriminator model"
        )
    prompt = disc.render_prompt(
        template,
        history=history,
        message=(message.author.display_name, message.text),
        chat=chat,
        max_chars=max_chars,
    )
    return LLMRequest(
        stage="discriminate",
        system="",
        messages=(ChatTurn("user", prompt),),
        workspace=workspace,
        tier=None,
        model=model_name,
        max_tokens=disc.MAX_OUTPUT_TOKENS,
        timeout=settings.discriminator.timeout_seconds,
        signal_id=str(message.id),
        # A classification counts against its author's per-user limits (SPEC 7).
        user_id=message.author.id,
    )


def interpret(result: LLMResult, *, is_dm: bool, timeout_seconds: float) -> AttentionDecision:
    """The decision for a classification's result; no verdict fails open in a DM, closed else."""
    if result.ok:
        return disc.decide_from_text(result.text, is_dm=is_dm)
    why = {
        "timeout": f"no answer within {timeout_seconds:g} s",
        "budget": "budget ceiling reached",
        "no_key": "no model key (ANTHROPIC_API_KEY is not set)",
    }.get(result.outcome, result.error or result.outcome)
    return disc.fail_decision(is_dm, f"discriminator unavailable: {why}")


async def classify(
    clients: ChannelClients,
    msg: Message,
    rule: AttentionDecision,
    spawn: Callable[[Callable[[], Awaitable[None]]], None],
) -> AttentionDecision:
    """Ask the chat's discriminator; failures fail open in a DM and closed in a group.

    `spawn` runs the typing indicator's last request past the classification.
    """
    settings = clients.settings()
    home = ChatHome(clients.home, str(msg.channel_id))
    try:
        template = await trio.to_thread.run_sync(home.read_prompt)
    except Exception as exc:
        logger.warning("discriminator prompt unavailable, using the default: %s", exc)
        template = default_prompt_template()
    history = history_before(
        clients.cache.recent(msg.channel_id, HISTORY_SCAN),
        msg,
        settings.discriminator.history,
        clients.is_trusted,
    )
    own = clients.store.get_chat_config(msg.channel_id)
    chat = disc.ChatMeta(
        chat_id=str(msg.channel_id),
        kind="dm"
        if msg.is_dm
        else ("thread" if clients.registry.is_thread(msg.channel_id) else "group"),
        name=_channel_name(clients, msg.channel_id),
        bot_name=clients.bot.username,
    )
    try:
        request = build_request(
            settings,
            template,
            msg,
            history,
            chat,
            workspace_id(msg.guild_id),
            model=own.discriminator_model if own is not None else None,
        )
    except disc.PromptTooLarge as exc:
        return disc.fail_decision(msg.is_dm, f"discriminator prompt too large: {exc}")
    async with clients.replies.typing(msg.channel_id, enabled=rule.show_typing, spawn=spawn):
        result = await clients.llm.complete(request)
    if result.failed:
        clients.failures.record(
            stage="discriminate",
            workspace=workspace_id(msg.guild_id),
            persona=None,
            signal_id=msg.id,
            error=result.error or result.outcome,
            stack_trace=result.stack_trace,
        )
    return interpret(
        result, is_dm=msg.is_dm, timeout_seconds=settings.discriminator.timeout_seconds
    )


def _channel_name(clients: ChannelClients, channel_id: Snowflake) -> str:
    ch = clients.registry.get(channel_id)
    return ch.name if ch is not None and ch.name else str(channel_id)
