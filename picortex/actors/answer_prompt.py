"""What the model is asked for an answer: the request's context lines, its files, and the
prompt built from them (SPEC 8, 9, 16); and why no answer came, when none did."""

from __future__ import annotations

import logging
from typing import Final

import trio

from picortex.actors import agent_voice, attachment_parts, model_route
from picortex.actors.channel_clients import ChannelClients, ChannelRecords
from picortex.actors.command_run import decision_event
from picortex.actors.failures import error_line, skip_reason
from picortex.core import continuation as cont
from picortex.core.budget import workspace_id
from picortex.core.context import CONTEXT_FORMAT_NOTE
from picortex.core.llm import (
    FAILED_OUTCOMES,
    ChatTurn,
    ContentPart,
    LLMRequest,
    LLMResult,
    TextPart,
)
from picortex.core.trust import is_trusted
from picortex.types import Message

logger = logging.getLogger(__name__)

# How far back in the channel's cache the request's follow-ups and recent images are sought.
ATTACHMENT_SCAN: Final = 200
# An answer never waits longer than this for its context.
CONTEXT_TIMEOUT_SECONDS: Final = 30.0


async def request_files(
    clients: ChannelClients, trigger: Message, asked: cont.Request
) -> attachment_parts.RequestFiles:
    """The request's attachments and recent images, as model content (SPEC 16)."""
    settings = clients.chat.settings()
    recent = clients.model.cache.recent(trigger.channel_id, ATTACHMENT_SCAN)
    own_ids = set(asked.message_ids) - {trigger.id}
    own = [trigger, *(m for m in recent if m.id in own_ids)]
    context = [m for m in recent if m.id < trigger.id][-settings.context_messages :]
    if not any(m.attachments for m in (*own, *context)):
        return attachment_parts.RequestFiles()
    owner = settings.owner_id
    # Files of the owner and the trust list only: not the bot's own (`is_trusted` without
    # the bot's id), it posts none worth fetching back.
    trusted = [
        author
        for author in {m.author.id for m in context if m.attachments}
        if is_trusted(author, owner, clients.chat.store.get_tier)
    ]
    try:
        return await attachment_parts.gather(
            clients.posting.rest.download_attachment, own, context, trusted
        )
    except Exception as exc:  # the answer goes on without its files
        logger.warning("attachments of %s unavailable: %s", trigger.id, exc)
        return attachment_parts.RequestFiles()


async def context_lines(
    clients: ChannelClients, trigger: Message, request: cont.Request, *, from_discord: bool
) -> tuple[str, ...]:
    """The trigger's context lines from the cache (none when it cannot give them).

    `from_discord` is False for a slash `ask`: an interaction, not a message Discord sent.
    """
    settings = clients.chat.settings()
    try:
        with trio.fail_after(CONTEXT_TIMEOUT_SECONDS):
            lines = await clients.model.cache.context_for(
                trigger,
                max_messages=settings.context_messages,
                max_chars=settings.context_chars,
                trusted=clients.chat.is_trusted,
                from_discord=from_discord,
            )
    except Exception as exc:
        logger.warning("context for %s unavailable: %s", trigger.id, exc)
        clients.records.events.emit(
            "error", scope="context", message_id=trigger.id, message=error_line(exc)
        )
        lines = ()
    clients.records.events.emit(
        "context",
        message_id=request.parent_id,
        channel_id=trigger.channel_id,
        context_count=len(lines),
    )
    clients.records.triggers.set_context(request.parent_id, lines)
    return lines


async def answer_request(
    clients: ChannelClients,
    trigger: Message,
    asked: cont.Request,
    lines: tuple[str, ...],
    files: attachment_parts.RequestFiles,
) -> LLMRequest:
    """The model request of an answer: the context, the request, its files, on the tier the
    route gives it (SPEC 18)."""
    prompt = asked.text
    if lines:
        conversation = "\n".join(lines)
        prompt = (
            f"Recent conversation, oldest first. {CONTEXT_FORMAT_NOTE}\n"
            f"{conversation}\n\nThe request from {trigger.author.display_name}:\n"
            f"{asked.text}"
        )
    prompt = prompt or "(no text)"
    content: str | tuple[ContentPart, ...] = prompt
    if not files.empty:
        text = f"{prompt}\n\n{files.text}" if files.text else prompt
        content = (*files.images, TextPart(text)) if files.images else text
    return LLMRequest(
        stage="generate",
        system=await agent_voice.answer_system_prompt(
            home=clients.chat.home,
            owner_prompt=clients.chat.settings().agent.system_prompt,
            registry=clients.chat.registry,
            bot=clients.chat.bot,
            trigger=trigger,
        ),
        max_tokens=clients.chat.settings().agent.max_tokens,
        messages=(ChatTurn("user", content),),
        workspace=workspace_id(trigger.guild_id),
        tier=await model_route.answer_tier(clients.route, trigger, asked.text),
        signal_id=str(trigger.id),
        timeout=clients.model.answer_timeout,
        user_id=trigger.author.id,
    )


def log_no_answer(clients: ChannelRecords, trigger: Message, result: LLMResult) -> str | None:
    """Log why a model call gave no answer: a failure (an event and an error row), or a skip
    (a `decision` line), whose reason is returned."""
    if result.outcome in FAILED_OUTCOMES:
        clients.failures.record(
            stage="generate",
            workspace=workspace_id(trigger.guild_id),
            persona=None,
            signal_id=trigger.id,
            error=result.error or result.outcome,
            stack_trace=result.stack_trace,
        )
        return None
    reason = f"no answer: {skip_reason(result.outcome, result.limit)}"
    decision_event(clients.events, trigger, "skip", reason)
    return reason
