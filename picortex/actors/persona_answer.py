"""Persona routing for one request (SPEC 8): match, tiebreak, recall, answer in a thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Final, Protocol

import attrs
import trio

from picortex.actors import composting, model_route
from picortex.actors.attachment_parts import RequestFiles
from picortex.actors.clients import (
    ChannelDirectory,
    CurrentSettings,
    FailureRecorder,
    FatalReporter,
    ModelClient,
    PersonaStore,
    ReplyPoster,
    ThreadStarter,
)
from picortex.actors.delivery import ChannelReply
from picortex.actors.failures import error_line, failure_text, skip_reason
from picortex.core import personas as pcore
from picortex.core import policy
from picortex.core.budget import workspace_id
from picortex.core.context import quoted
from picortex.core.continuation import Request
from picortex.core.llm import ChatTurn, LLMRequest, LLMResult, TextPart
from picortex.discord.normalize import normalize
from picortex.discord.rest import DiscordHTTPError
from picortex.errors import ConfigError, DatabaseUnreachable, FatalDiscordError
from picortex.types import ChannelCreate, EventSink, Message, MessageUpdate, Snowflake

if TYPE_CHECKING:
    from picortex.core.personas import PersonaMatch, PersonaSet
    from picortex.store.personas import PersonaLoader

logger = logging.getLogger(__name__)

RECALL_HORIZON_SECONDS: Final = 7 * 24 * 3600  # SPEC 8: the last 7 days
RECALL_LIMIT: Final = pcore.RECALL_MAX_EXCERPTS
# Extra hits fetched so that dropping duplicates and the request's own messages still
# leaves RECALL_LIMIT excerpts (a message and its observations share a text).
RECALL_FETCH: Final = 3 * RECALL_LIMIT
# A triage call answers a few tokens; this is generous and still keeps a channel moving.
TIEBREAK_TIMEOUT_SECONDS: Final = 15.0
TIEBREAK_MAX_TOKENS: Final = 20  # a persona id, with room for stray quotes or a full stop
THREAD_NAME_MAX: Final = 100  # Discord's limit for a thread name
THREAD_EXISTS_CODE: Final = 160004  # "A thread has already been created for this message"
TIEBREAK_TEXT_IN_LOG: Final = 40  # how much of an unusable tiebreak answer the log keeps
# How often observing a message looks for edited persona files (a few stats per look, and
# trusted chatter comes by the hundred): an observation may match against a set this old.
# An answer always looks, so an edit reaches the very next request.
PERSONA_CHECK_SECONDS: Final = 1.0


class PersonaIndex(Protocol):
    """What keeping persona observations current uses (edits and deletes too)."""

    @property
    def personas(self) -> PersonaLoader | None:
        """The persona files, or None when there are none."""
        ...

    @property
    def events(self) -> EventSink:
        """The action log."""
        ...

    @property
    def store(self) -> PersonaStore:
        """Recall: messages and observations."""
        ...


class PersonaClients(PersonaIndex, FatalReporter, Protocol):
    """What a persona answer uses."""

    @property
    def failures(self) -> FailureRecorder:
        """Failed invocations (SPEC 9)."""
        ...

    @property
    def replies(self) -> ReplyPoster:
        """Posting and streaming the answer."""
        ...

    @property
    def settings(self) -> CurrentSettings:
        """The settings in force."""
        ...

    @property
    def llm(self) -> ModelClient:
        """The model."""
        ...

    @property
    def registry(self) -> ChannelDirectory:
        """Channels and threads seen (answers go to threads)."""
        ...

    @property
    def rest(self) -> ThreadStarter:
        """Starting the answer's thread."""
        ...

    def is_trusted(self, user_id: Snowflake) -> bool:
        """Whether recall may repeat someone's words unmarked."""
        ...


@attrs.frozen
class Placement:
    """Where a persona answer goes.

    `how` is one of `new thread` (start one from the trigger), `existing thread` (post in
    `channel_id`, a thread), `dm reply` (a reply in the 1:1 DM) or `dm` (the response
    policy sends answers to the author's DM).
    """

    how: str
    channel_id: Snowflake | None
    reply_to: Snowflake | None = None


def current_personas(clients: PersonaIndex, *, observing: bool = False) -> PersonaSet | None:
    """The configured personas (reloaded when the files changed), or None.

    With `observing`, the files are looked at only when the last look (by anyone) is
    PERSONA_CHECK_SECONDS old.
    """
    loader = clients.personas
    if loader is None:
        return None
    now = trio.current_time()
    if observing and now - loader.looked_at < PERSONA_CHECK_SECONDS:
        found = loader.current
        return found if len(found) else None
    try:
        if loader.reload_if_changed(now) is not None:
            clients.events.emit("personas", action="reloaded", count=len(loader.current))
            for warning in loader.current.warnings:
                logger.warning("%s", warning)
    except ConfigError as exc:
        # The loader reports one bad edit once; the previous personas stay in use.
        clients.events.emit("error", scope="personas", message=str(exc))
        logger.error("%s (keeping the previous personas)", exc)
    found = loader.current
    return found if len(found) else None


def observe(clients: PersonaIndex, msg: Message, text: str) -> list[PersonaMatch]:
    """Match `text` against the personas and record every match as an observation (the
    router's trusted chatter and the channel actor's messages alike)."""
    personas = current_personas(clients, observing=True)
    if personas is None:
        return []
    return record_matches(clients, personas, msg, text)


def record_matches(
    clients: PersonaIndex, personas: PersonaSet, msg: Message, text: str
) -> list[PersonaMatch]:
    """Match `text` against `personas` and record every match as an observation."""
    matches = pcore.match(personas, text)
    for m in matches:
        try:
            clients.store.add_observation(
                persona=m.persona.id,
                message_id=msg.id,
                channel_id=msg.channel_id,
                guild_id=msg.guild_id,
                trigger=m.trigger,
                content=text,
                created_at=time.time(),
                author_id=msg.author.id,
            )
        except Exception:
            logger.exception("could not store an observation for %s", m.persona.id)
    return matches


async def _tiebreak(
    clients: PersonaClients, request: Request, trigger: Message, matches: Sequence[PersonaMatch]
) -> tuple[PersonaMatch, str]:
    """Pick one of several matches with one triage call; fall back to the strongest."""
    strongest = matches[0]
    paused = await composting.stage_pause(clients, "tiebreak")
    if paused is not None:
        return strongest, f"tiebreak {composting.until_text(paused)}: strongest match"
    candidates = [m.persona for m in matches]
    system, user = pcore.tiebreak_prompt(request.text, candidates)
    result = await clients.llm.complete(
        LLMRequest(
            stage="tiebreak",
            system=system,
            messages=(ChatTurn("user", user),),
            workspace=workspace_id(trigger.guild_id),
            tier="triage",
            max_tokens=TIEBREAK_MAX_TOKENS,
            timeout=TIEBREAK_TIMEOUT_SECONDS,
            signal_id=str(trigger.id),
            user_id=trigger.author.id,
        )
    )
    if result.ok:
        chosen = pcore.parse_tiebreak(result.text, [c.id for c in candidates])
        if chosen is not None:
            return next(m for m in matches if m.persona.id == chosen), "model picked"
        said = result.text.strip()[:TIEBREAK_TEXT_IN_LOG]
        logger.info(
            "tiebreak for message %s answered %r, not a candidate: %s answers (strongest match)",
            trigger.id,
            said,
            strongest.persona.id,
        )
        return strongest, f"answer {said!r} is not a candidate: strongest match"
    if result.failed:
        clients.failures.record(
            stage="tiebreak",
            workspace=workspace_id(trigger.guild_id),
            persona=strongest.persona.id,
            signal_id=trigger.id,
            error=result.error or result.outcome,
            stack_trace=result.stack_trace,
        )
    return strongest, f"tiebreak {result.outcome}: strongest match"


async def recall(clients: PersonaClients, request: Request, trigger: Message) -> list[str]:
    """Short excerpts of what was said about the request's subject in the last 7 days.

    Searches only the conversation the trigger is in (SPEC 8): its channel, a thread with
    its parent channel, or the DM, so nothing said elsewhere (a private channel, another
    person's DM) reaches the answer. The request's own messages are left out, and so are
    repeats of the same text. Each excerpt's name and text are JSON strings, like context
    lines.
    """
    terms = pcore.salient_terms(request.text)
    if not terms:
        return []
    try:
        since = time.time() - RECALL_HORIZON_SECONDS
        channels = recall_channels(clients, trigger)
        hits = await clients.store.search_memory(
            " ".join(terms),
            since=since,
            workspace=workspace_id(trigger.guild_id),
            limit=RECALL_FETCH,
            channel_ids=channels,
        )
    except DatabaseUnreachable:
        return []  # no recall while the database is out of reach (its outage is logged)
    except Exception:
        logger.exception("memory recall failed")
        return []
    own = set(request.message_ids) | {trigger.id}
    # Whatever was stored, only what people trusted now (and the bot) said is recalled,
    # observations included: someone removed from the trust list, or a stranger, never
    # speaks through a persona's memory. An observation of unknown author is not recalled.
    hits = [h for h in hits if h.author_id is not None and clients.is_trusted(h.author_id)]
    # Text (folded) -> [who, text]; a message's author beats an observation's persona label.
    found: dict[str, list[str]] = {}
    for hit in hits:
        text = " ".join(hit.content.split())
        if hit.message_id in own or not text:
            continue
        key = text.casefold()
        if key in found:
            if hit.author_name and found[key][0].endswith(" observation"):
                found[key][0] = hit.author_name
            continue
        if len(found) >= RECALL_LIMIT:
            continue  # keep looking only to name an excerpt's author
        who = hit.author_name or (f"{hit.persona} observation" if hit.persona else "someone")
        found[key] = [who, text]
    return [f"{quoted(who)}: {quoted(text)}" for who, text in found.values()]


def recall_channels(clients: PersonaClients, trigger: Message) -> list[Snowflake]:
    """The channels recall may search for `trigger`: its own, and a thread's parent."""
    channels = [trigger.channel_id]
    parent = clients.registry.parent_of(trigger.channel_id)
    if parent is not None and clients.registry.is_thread(trigger.channel_id):
        channels.append(parent)
    return channels


def reindex(clients: PersonaIndex, update: MessageUpdate) -> None:
    """Apply a MESSAGE_UPDATE to memory: the new text replaces the old, whose observations
    go; a stored message is observed again under its new text."""
    content = update.content
    if content is None:
        return  # an embed or pin update: the text did not change
    personas = current_personas(clients, observing=True)
    matches = pcore.match(personas, content) if personas is not None else []
    clients.store.reindex_memory_message(
        update.id,
        update.channel_id,
        update.guild_id,
        content,
        [(m.persona.id, m.trigger) for m in matches],
        time.time(),
    )


def forget(clients: PersonaIndex, message_ids: Sequence[Snowflake]) -> None:
    """Forget deleted messages and their observations (MESSAGE_DELETE, and bulk deletes)."""
    try:
        clients.store.forget_messages(message_ids)
    except Exception:
        logger.exception("could not forget %d deleted messages", len(message_ids))


def placement(clients: PersonaClients, request: Request, trigger: Message) -> Placement:
    """Where the answer to `trigger` goes (SPEC 8), honouring a response policy of `dm`."""
    target = clients.replies.reply_target(None)
    if trigger.guild_id is None:
        return Placement("dm reply", trigger.channel_id, trigger.id)
    if target == "dm":
        return Placement("dm", None)
    if clients.registry.is_thread(trigger.channel_id):
        return Placement("existing thread", trigger.channel_id, trigger.id)
    # A follow-up joins the answer already given: the thread started from the request's
    # first message has that message's id (Discord's rule).
    parent = clients.registry.get(request.parent_id)
    if parent is not None and parent.is_thread and parent.parent_id == trigger.channel_id:
        return Placement("existing thread", parent.id, None)
    return Placement("new thread", trigger.channel_id)


async def maybe_answer(
    clients: PersonaClients,
    sink: ChannelReply,
    request: Request,
    trigger: Message,
    lines: Sequence[str],
    files: Callable[[], Awaitable[RequestFiles]] | None = None,
    matches: Sequence[PersonaMatch] | None = None,
) -> bool:
    """Answer as a persona when one matches, through the request's `sink`; False lets the
    default agent answer.

    `files` gives the request's attachments as model content (SPEC 16), fetched only once
    a persona is chosen. `matches` are the request's matches when the caller has them
    already (so the persona files are not checked and matched twice).
    """
    if matches is None:
        personas = current_personas(clients)
        if personas is None:
            return False
        matches = pcore.match(personas, request.text)
    matches = await composting.unpaused(clients, matches, trigger)
    if not matches:
        return False
    tiebreak = "single match"
    chosen = matches[0]
    if len(matches) > 1:
        chosen, tiebreak = await _tiebreak(clients, request, trigger, matches)
    persona = chosen.persona
    excerpts = await recall(clients, request, trigger)
    system, messages = pcore.persona_prompt(
        persona, excerpts, list(lines)[-pcore.RECENT_LINES :], request.text
    )
    where = placement(clients, request, trigger)
    clients.events.emit(
        "persona",
        message_id=trigger.id,
        channel_id=trigger.channel_id,
        matches=[
            {"id": m.persona.id, "trigger": m.trigger, "strength": m.strength} for m in matches
        ],
        tiebreak=tiebreak,
        selected=persona.id,
        thread=where.how,
        recall=len(excerpts),
    )
    turns = [ChatTurn("user", m["content"]) for m in messages]
    attached = await files() if files is not None else None
    if attached is not None and not attached.empty and turns:
        last = turns[-1].text
        text = f"{last}\n\n{attached.text}" if attached.text else last
        turns[-1] = ChatTurn(
            "user", (*attached.images, TextPart(text)) if attached.images else text
        )
    call = LLMRequest(
        stage="generate",
        system=system,
        messages=tuple(turns),
        workspace=workspace_id(trigger.guild_id),
        tier=await model_route.answer_tier(clients, trigger, request.text, persona.model),
        persona=persona.id,
        signal_id=str(trigger.id),
        user_id=trigger.author.id,
    )
    if clients.settings().replies.stream:
        await _stream(clients, sink, call, trigger, persona, where)
        return True
    result = await clients.llm.complete(call)
    if not result.ok:
        await _not_answered(clients, sink, trigger, persona, result)
        return True
    await _post(clients, sink, trigger, persona, result.text, where)
    return True


async def _not_answered(
    clients: PersonaClients,
    sink: ChannelReply,
    trigger: Message,
    persona: pcore.Persona,
    result: LLMResult,
) -> None:
    """Record a persona call that gave no answer: an error row, or a skip decision."""
    if result.failed:
        clients.failures.record(
            stage="generate",
            workspace=workspace_id(trigger.guild_id),
            persona=persona.id,
            signal_id=trigger.id,
            error=result.error or result.outcome,
            stack_trace=result.stack_trace,
        )
        return
    reason = skip_reason(result.outcome, result.limit)
    clients.events.emit(
        "decision",
        message_id=trigger.id,
        channel_id=trigger.channel_id,
        guild_id=trigger.guild_id,
        author_id=trigger.author.id,
        outcome="skip",
        reason=f"persona {persona.id} selected, no answer: {reason}",
    )
    if result.notice:
        # A user over their own limit is told once per period, politely.
        await _post_notice(sink, trigger, result.notice)


async def _stream(
    clients: PersonaClients,
    sink: ChannelReply,
    request: LLMRequest,
    trigger: Message,
    persona: pcore.Persona,
    where: Placement,
) -> None:
    """The persona's answer streamed into its thread (opened at the first sentence)."""
    thread: list[Snowflake | None] = []

    async def plan() -> policy.PostPlan:
        resolved, thread_id = await _plan_for(clients, trigger, persona, where)
        thread.append(thread_id)
        return await clients.replies.resolve_plan(resolved)

    streamed = await sink.stream_at(request, plan)
    failure = streamed.reply.failure
    if failure is not None:
        message, trace = failure_text(failure)
        clients.failures.record(
            stage="post",
            workspace=workspace_id(trigger.guild_id),
            persona=persona.id,
            signal_id=trigger.id,
            error=message,
            stack_trace=trace,
        )
        return
    result = streamed.result
    if result is not None and not result.ok:
        await _not_answered(clients, sink, trigger, persona, result)
    if streamed.reply.started:
        clients.events.emit(
            "persona.responded",
            message_id=trigger.id,
            channel_id=trigger.channel_id,
            persona=persona.id,
            thread_id=thread[0] if thread else None,
            posted=streamed.message_ids,
        )


async def _plan_for(
    clients: PersonaClients, trigger: Message, persona: pcore.Persona, where: Placement
) -> tuple[policy.PostPlan, Snowflake | None]:
    """Where the answer is posted, opening its thread when it needs a new one."""
    thread_id: Snowflake | None = None
    if where.how == "dm":
        return policy.PostPlan("dm", None, trigger.author.id, None), None
    if where.how == "new thread":
        name = f"{persona.name} responding"[:THREAD_NAME_MAX]
        thread_id = await _open_thread(clients, trigger, name)
        if thread_id is None:
            return policy.PostPlan("channel", trigger.channel_id, None, trigger.id), None
        return policy.PostPlan("channel", thread_id, None, None), thread_id
    if where.how == "existing thread":
        thread_id = where.channel_id
    return policy.PostPlan("channel", where.channel_id, None, where.reply_to), thread_id


async def _post_notice(sink: ChannelReply, trigger: Message, text: str) -> None:
    try:
        await sink.post(text)
    except Exception as exc:
        logger.warning("could not tell %s about their limit: %s", trigger.author.id, exc)


def _remember_thread(clients: PersonaClients, data: dict[str, object]) -> Snowflake:
    """The new thread's id; the registry learns it now rather than at THREAD_CREATE."""
    event = normalize("THREAD_CREATE", data)
    if isinstance(event, ChannelCreate):
        clients.registry.add(event.channel)
    return int(str(data["id"]))


async def _open_thread(clients: PersonaClients, trigger: Message, name: str) -> Snowflake | None:
    """Start the answer's thread from the trigger; None when Discord will not (reply instead)."""
    try:
        data = await clients.rest.start_thread_from_message(trigger.channel_id, trigger.id, name)
    except FatalDiscordError:
        raise
    except DiscordHTTPError as exc:
        if exc.code == THREAD_EXISTS_CODE:
            return trigger.id  # someone started one already: it has the message's id
        if exc.status == 0 or exc.status >= 500:
            raise
        # No permission, a channel type without threads...: the answer still goes out.
        logger.warning("no thread for message %s (%s): replying in the channel", trigger.id, exc)
        clients.events.emit("error", scope="thread", message_id=trigger.id, message=error_line(exc))
        return None
    return _remember_thread(clients, data)


async def _post(
    clients: PersonaClients,
    sink: ChannelReply,
    trigger: Message,
    persona: pcore.Persona,
    text: str,
    where: Placement,
) -> None:
    thread_id: Snowflake | None = None
    # Shielded: an answer that is paid for is posted even if a follow-up arrives now.
    with trio.CancelScope(shield=True):
        try:
            plan, thread_id = await _plan_for(clients, trigger, persona, where)
            posted = await sink.post_at(plan, text)
        except Exception as exc:
            if isinstance(exc, FatalDiscordError):
                clients.fatal(exc)
            message, trace = failure_text(exc)
            clients.failures.record(
                stage="post",
                workspace=workspace_id(trigger.guild_id),
                persona=persona.id,
                signal_id=trigger.id,
                error=message,
                stack_trace=trace,
            )
            return
    clients.events.emit(
        "persona.responded",
        message_id=trigger.id,
        channel_id=trigger.channel_id,
        persona=persona.id,
        thread_id=thread_id,
        posted=posted,
    )
