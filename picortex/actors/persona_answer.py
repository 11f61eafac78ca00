"""Persona routing for one request (SPEC 8): match, tiebreak, recall, answer in a thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from picortex.actors.llm import ChatTurn, LLMRequest
from picortex.actors.pipeline import Pipeline, failure_text
from picortex.core import personas as pcore
from picortex.core import policy
from picortex.core.continuation import Request
from picortex.errors import ConfigError
from picortex.types import Message

if TYPE_CHECKING:
    from picortex.core.personas import PersonaMatch, PersonaSet

logger = logging.getLogger(__name__)

RECALL_HORIZON_SECONDS: Final = 7 * 24 * 3600  # SPEC 8: the last 7 days
RECALL_LIMIT: Final = 8
TIEBREAK_TIMEOUT_SECONDS: Final = 15.0
TIEBREAK_MAX_TOKENS: Final = 20
THREAD_NAME_MAX: Final = 100  # Discord's limit for a thread name


def current_personas(pipe: Pipeline) -> PersonaSet | None:
    """The configured personas (reloaded when the files changed), or None."""
    loader = pipe.personas
    if loader is None:
        return None
    try:
        loader.reload_if_changed()
    except ConfigError as exc:
        pipe.events.emit("error", scope="personas", message=str(exc))
        logger.error("%s (keeping the previous personas)", exc)
    found = loader.current
    return found if len(found) else None


def observe(pipe: Pipeline, msg: Message, text: str) -> list[PersonaMatch]:
    """Match `text` against the personas and record every match as an observation."""
    personas = current_personas(pipe)
    if personas is None:
        return []
    matches = pcore.match(personas, text)
    for m in matches:
        try:
            pipe.store.add_observation(
                persona=m.persona.id,
                message_id=msg.id,
                channel_id=msg.channel_id,
                guild_id=msg.guild_id,
                trigger=m.trigger,
                content=text,
                created_at=time.time(),
            )
        except Exception:
            logger.exception("could not store an observation for %s", m.persona.id)
    return matches


async def _tiebreak(
    pipe: Pipeline, request: Request, trigger: Message, matches: Sequence[PersonaMatch]
) -> tuple[PersonaMatch, str]:
    """Pick one of several matches with one triage call; fall back to the strongest."""
    candidates = [m.persona for m in matches]
    system, user = pcore.tiebreak_prompt(request.text, candidates)
    result = await pipe.llm.complete(
        LLMRequest(
            stage="tiebreak",
            system=system,
            messages=(ChatTurn("user", user),),
            workspace=pipe.workspace_of(trigger),
            tier="triage",
            max_tokens=TIEBREAK_MAX_TOKENS,
            timeout=TIEBREAK_TIMEOUT_SECONDS,
            signal_id=str(trigger.id),
        )
    )
    if result.ok:
        chosen = pcore.parse_tiebreak(result.text, [c.id for c in candidates])
        if chosen is not None:
            return next(m for m in matches if m.persona.id == chosen), "model picked"
        return matches[0], f"answer {result.text[:40]!r} is not a candidate: strongest match"
    if result.outcome in ("error", "timeout"):
        pipe.record_failure(
            stage="tiebreak",
            workspace=pipe.workspace_of(trigger),
            persona=None,
            signal_id=trigger.id,
            error=result.error or result.outcome,
            stack_trace=result.stack_trace,
        )
    return matches[0], f"tiebreak {result.outcome}: strongest match"


def _recall(pipe: Pipeline, trigger: Message, text: str) -> list[str]:
    terms = pcore.salient_terms(text)
    if not terms:
        return []
    try:
        hits = pipe.store.search_memory(
            " ".join(terms),
            since=time.time() - RECALL_HORIZON_SECONDS,
            workspace=pipe.workspace_of(trigger),
            limit=RECALL_LIMIT + 1,
        )
    except Exception:
        logger.exception("memory recall failed")
        return []
    excerpts = []
    for hit in hits:
        if hit.message_id == trigger.id:
            continue
        who = hit.author_name or (f"{hit.persona} observation" if hit.persona else "someone")
        excerpts.append(f"{who}: {hit.content}")
    return excerpts[:RECALL_LIMIT]


async def maybe_answer(
    pipe: Pipeline, request: Request, trigger: Message, lines: Sequence[str]
) -> bool:
    """Answer as a persona when one matches; False lets the default agent answer."""
    personas = current_personas(pipe)
    if personas is None:
        return False
    matches = pcore.match(personas, request.text)
    if not matches:
        return False
    tiebreak = "single match"
    chosen = matches[0]
    if len(matches) > 1:
        chosen, tiebreak = await _tiebreak(pipe, request, trigger, matches)
    persona = chosen.persona
    excerpts = _recall(pipe, trigger, request.text)
    system, messages = pcore.persona_prompt(
        persona, excerpts, list(lines)[-pcore.RECENT_LINES :], request.text
    )
    in_guild = trigger.guild_id is not None
    in_thread = pipe.registry.is_thread(trigger.channel_id)
    thread_plan = "dm reply" if not in_guild else ("existing thread" if in_thread else "new thread")
    pipe.events.emit(
        "persona",
        message_id=trigger.id,
        channel_id=trigger.channel_id,
        matches=[
            {"id": m.persona.id, "trigger": m.trigger, "strength": m.strength} for m in matches
        ],
        tiebreak=tiebreak,
        selected=persona.id,
        thread=thread_plan,
        recall=len(excerpts),
    )
    result = await pipe.llm.complete(
        LLMRequest(
            stage="generate",
            system=system,
            messages=tuple(ChatTurn("user", m["content"]) for m in messages),
            workspace=pipe.workspace_of(trigger),
            tier=persona.model or "general",
            persona=persona.id,
            signal_id=str(trigger.id),
        )
    )
    if not result.ok:
        if result.outcome in ("error", "timeout"):
            pipe.record_failure(
                stage="generate",
                workspace=pipe.workspace_of(trigger),
                persona=persona.id,
                signal_id=trigger.id,
                error=result.error or result.outcome,
                stack_trace=result.stack_trace,
            )
        else:
            pipe.events.emit(
                "decision",
                message_id=trigger.id,
                channel_id=trigger.channel_id,
                outcome="skip",
                reason=f"persona {persona.id} selected, no answer: {result.outcome}",
            )
        return True
    await _post(pipe, trigger, persona.id, persona.name, result.text, in_guild, in_thread)
    return True


async def _post(
    pipe: Pipeline,
    trigger: Message,
    persona_id: str,
    persona_name: str,
    text: str,
    in_guild: bool,
    in_thread: bool,
) -> None:
    import trio

    with trio.CancelScope(shield=True):
        try:
            if in_guild and not in_thread:
                name = f"{persona_name} responding"[:THREAD_NAME_MAX]
                thread = await pipe.rest.start_thread_from_message(
                    trigger.channel_id, trigger.id, name
                )
                thread_id = int(thread["id"])
                plan = policy.PostPlan("channel", thread_id, None, None)
            elif in_guild:
                thread_id = trigger.channel_id
                plan = policy.PostPlan("channel", thread_id, None, trigger.id)
            else:
                thread_id = None
                plan = policy.PostPlan("channel", trigger.channel_id, None, trigger.id)
            posted = await pipe.post(plan, text, command=None, trigger_id=trigger.id)
        except Exception as exc:
            message, trace = failure_text(exc)
            pipe.record_failure(
                stage="post",
                workspace=pipe.workspace_of(trigger),
                persona=persona_id,
                signal_id=trigger.id,
                error=message,
                stack_trace=trace,
            )
            return
    pipe.events.emit(
        "persona.responded",
        message_id=trigger.id,
        persona=persona_id,
        thread_id=thread_id,
        posted=posted,
    )
