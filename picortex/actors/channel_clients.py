"""What a channel actor reads and uses: its mailbox, and its clients by role: what it reads
about trust and config (`ChatReads`), asks the model (`ModelCalls`), posts (`AnswerPosting`)
and records (`ChannelRecords`), with the roles of the helpers it calls (`ChannelClients`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.clients import (
    ChannelDirectory,
    ChannelRest,
    ChannelStore,
    ContextReader,
    CurrentSettings,
    FailureRecorder,
    FatalReporter,
    FaultCheck,
    HandledMarks,
    ModelClient,
    ReplyPoster,
    Spawner,
)
from picortex.actors.command_changes import Applied
from picortex.actors.composting import CompostClients
from picortex.actors.delivery import Delivery
from picortex.actors.model_route import RouteClients
from picortex.actors.persona_answer import PersonaClients
from picortex.actors.pipeline import TriggerBook
from picortex.actors.polls import PollClients
from picortex.core import commands as cmds
from picortex.store.personas import PersonaLoader
from picortex.types import BotIdentity, EventSink, Interaction, Message, Snowflake


class Inbox(Protocol):
    """The mailbox an actor reads: it belongs to the supervisor and outlives the actor."""

    async def receive(self) -> Delivery: ...

    def receive_nowait(self) -> Delivery: ...

    def done(self) -> None: ...

    @property
    def depth(self) -> int: ...


class ChatReads(Protocol):
    """What a channel actor reads about trust and config."""

    @property
    def settings(self) -> CurrentSettings:
        """The settings in force (refreshed per message)."""
        ...

    @property
    def store(self) -> ChannelStore:
        """Trust list, chat config and recall, read from memory; writes queued."""
        ...

    @property
    def registry(self) -> ChannelDirectory:
        """Channels and threads seen."""
        ...

    @property
    def bot(self) -> BotIdentity:
        """Who the bot is."""
        ...

    @property
    def personas(self) -> PersonaLoader | None:
        """The personas in force (None: none configured)."""
        ...

    @property
    def home(self) -> Path:
        """PICORTEX_HOME (chat homes live under it)."""
        ...

    @property
    def faults(self) -> FaultCheck | None:
        """Fault points (tests only)."""
        ...

    def is_trusted(self, user_id: Snowflake) -> bool:
        """Whether someone's words may be repeated to the model unmarked."""
        ...


class ModelCalls(Protocol):
    """What a channel actor asks the model, with the conversation it gives it and the
    deadlines of its answers."""

    @property
    def llm(self) -> ModelClient:
        """The model."""
        ...

    @property
    def cache(self) -> ContextReader:
        """The context cache."""
        ...

    @property
    def answer_timeout(self) -> float:
        """The deadline of one answer's model call."""
        ...

    @property
    def crash_drain_seconds(self) -> float:
        """How long answers in flight may finish after a crash."""
        ...


class AnswerPosting(FatalReporter, Spawner, Protocol):
    """What a channel actor posts, and the background tasks (polls) it starts."""

    @property
    def replies(self) -> ReplyPoster:
        """Posting, typing and streaming answers."""
        ...

    @property
    def rest(self) -> ChannelRest:
        """Discord calls besides posting replies."""
        ...


class ChannelRecords(Protocol):
    """What a channel actor records: events, failures, triggers, handled marks, and what a
    command changed."""

    @property
    def events(self) -> EventSink:
        """The action log."""
        ...

    @property
    def failures(self) -> FailureRecorder:
        """Failed invocations (SPEC 9)."""
        ...

    @property
    def triggers(self) -> TriggerBook:
        """The trigger log shown by `picortex status`."""
        ...

    @property
    def handled(self) -> HandledMarks:
        """Handled marks (SPEC 12)."""
        ...

    @property
    def answers_seen(self) -> AnswersSeen:
        """The bot's replies seen on the gateway (noted by the router, asked here)."""
        ...

    def finish(self, message: Message | Interaction) -> None:
        """The decision on `message` is final."""
        ...

    async def apply_command_changes(
        self, changes: Sequence[cmds.Change], *, chat_id: Snowflake | None, now: float
    ) -> Applied:
        """Store what a command changed: the poll it starts, what it forgot."""
        ...


class ChannelClients(Protocol):
    """Every role a channel actor takes, each built whole by the app
    (`picortex.actors.channel_roles`; a test, its fakes); a helper that needs one role takes
    that role alone."""

    @property
    def chat(self) -> ChatReads:
        """Trust and config."""
        ...

    @property
    def model(self) -> ModelCalls:
        """The model, the conversation it is given, the answers' deadlines."""
        ...

    @property
    def posting(self) -> AnswerPosting:
        """Posting, and background tasks."""
        ...

    @property
    def records(self) -> ChannelRecords:
        """Events, failures, triggers, handled marks, a command's changes."""
        ...

    @property
    def personas(self) -> PersonaClients:
        """Persona answers."""
        ...

    @property
    def polls(self) -> PollClients:
        """Running polls."""
        ...

    @property
    def route(self) -> RouteClients:
        """Which model tier answers."""
        ...

    @property
    def compost(self) -> CompostClients:
        """A persona stage's pause."""
        ...
