"""The roles a channel actor takes (`picortex.actors.channel_clients`), each built whole by
the app from the parts of its `Pipeline` (`channel_roles`): what the actor reads about trust
and config, asks the model, posts and records, with what persona answers, polls, model
routing and composting use. A test hands in its fakes instead."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.channel_clients import (
    AnswerPosting,
    ChannelRecords,
    ChatReads,
    ModelCalls,
)
from picortex.actors.clients import (
    ChannelDirectory,
    ChannelRest,
    ChannelStore,
    ContextReader,
    CurrentSettings,
    FailureRecorder,
    FaultCheck,
    HandledMarks,
    ModelClient,
    PersonaStore,
    Poster,
    ReactionsRest,
    ReplyPoster,
    ThreadStarter,
)
from picortex.actors.composting import CompostClients
from picortex.actors.model_route import RouteClients
from picortex.actors.persona_answer import PersonaClients
from picortex.actors.polls import PollClients

if TYPE_CHECKING:
    from picortex.actors.command_changes import Applied
    from picortex.actors.pipeline import Pipeline, TriggerBook
    from picortex.errors import FatalDiscordError
    from picortex.store.personas import PersonaLoader
    from picortex.types import BotIdentity, EventSink, Interaction, Message, Snowflake


@attrs.frozen
class ChatRole:
    """`ChatReads`, as the app builds it."""

    settings: CurrentSettings
    store: ChannelStore
    registry: ChannelDirectory
    bot: BotIdentity
    personas: PersonaLoader | None
    home: Path
    faults: FaultCheck | None
    is_trusted: Callable[[Snowflake], bool]


@attrs.frozen
class ModelRole:
    """`ModelCalls`, as the app builds it."""

    llm: ModelClient
    cache: ContextReader
    answer_timeout: float
    crash_drain_seconds: float


@attrs.frozen
class PostingRole:
    """`AnswerPosting`, as the app builds it."""

    replies: ReplyPoster
    rest: ChannelRest
    spawn: Callable[..., None]
    fatal: Callable[[FatalDiscordError], None]


@attrs.frozen
class RecordsRole:
    """`ChannelRecords`, as the app builds it."""

    events: EventSink
    failures: FailureRecorder
    triggers: TriggerBook
    handled: HandledMarks
    answers_seen: AnswersSeen
    finish: Callable[[Message | Interaction], None]
    apply_command_changes: Callable[..., Coroutine[Any, Any, Applied]]


@attrs.frozen
class PersonaRole:
    """`PersonaClients`, as the app builds it."""

    personas: PersonaLoader | None
    events: EventSink
    store: PersonaStore
    failures: FailureRecorder
    replies: ReplyPoster
    settings: CurrentSettings
    llm: ModelClient
    registry: ChannelDirectory
    rest: ThreadStarter
    fatal: Callable[[FatalDiscordError], None]
    is_trusted: Callable[[Snowflake], bool]


@attrs.frozen
class PollRole:
    """`PollClients`, as the app builds it."""

    settings: CurrentSettings
    events: EventSink
    bot: BotIdentity
    rest: ReactionsRest
    replies: Poster


@attrs.frozen
class RouteRole:
    """`RouteClients` (which model tier answers), as the app builds it."""

    settings: CurrentSettings
    llm: ModelClient
    events: EventSink


@attrs.frozen
class CompostRole:
    """`CompostClients` (a persona stage's pause), as the app builds it."""

    failures: FailureRecorder
    settings: CurrentSettings
    events: EventSink


@attrs.frozen
class ChannelRoles:
    """`ChannelClients`: each role a channel actor takes, and the helpers it calls with them."""

    chat: ChatReads
    model: ModelCalls
    posting: AnswerPosting
    records: ChannelRecords
    personas: PersonaClients
    polls: PollClients
    route: RouteClients
    compost: CompostClients


def channel_roles(pipe: Pipeline) -> ChannelRoles:
    """The channel actors' roles, built whole from the app's parts."""
    return ChannelRoles(
        chat=ChatRole(
            pipe.settings,
            pipe.store,
            pipe.registry,
            pipe.bot,
            pipe.personas,
            pipe.home,
            pipe.faults,
            pipe.is_trusted,
        ),
        model=ModelRole(pipe.llm, pipe.cache, pipe.answer_timeout, pipe.crash_drain_seconds),
        posting=PostingRole(pipe.replies, pipe.rest, pipe.spawn, pipe.fatal),
        records=RecordsRole(
            pipe.events,
            pipe.failures,
            pipe.triggers,
            pipe.handled,
            pipe.answers_seen,
            pipe.finish,
            pipe.apply_command_changes,
        ),
        personas=PersonaRole(
            pipe.personas,
            pipe.events,
            pipe.store,
            pipe.failures,
            pipe.replies,
            pipe.settings,
            pipe.llm,
            pipe.registry,
            pipe.rest,
            pipe.fatal,
            pipe.is_trusted,
        ),
        polls=PollRole(pipe.settings, pipe.events, pipe.bot, pipe.rest, pipe.replies),
        route=RouteRole(pipe.settings, pipe.llm, pipe.events),
        compost=CompostRole(pipe.failures, pipe.settings, pipe.events),
    )
