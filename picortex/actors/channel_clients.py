"""What a channel actor reads and uses: its mailbox, and its clients (the app passes its
`Pipeline`; a test, fakes)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.clients import (
    ChannelRest,
    ChannelStore,
    ContextReader,
    FaultCheck,
    HandledMarks,
    ReplyPoster,
)
from picortex.actors.command_changes import Applied
from picortex.actors.delivery import Delivery
from picortex.actors.interactions import InteractionClients
from picortex.actors.persona_answer import PersonaClients
from picortex.actors.pipeline import TriggerBook
from picortex.actors.polls import PollClients
from picortex.core import commands as cmds
from picortex.types import Interaction, Message, Snowflake


class Inbox(Protocol):
    """The mailbox an actor reads: it belongs to the supervisor and outlives the actor."""

    async def receive(self) -> Delivery: ...

    def receive_nowait(self) -> Delivery: ...

    def done(self) -> None: ...

    @property
    def depth(self) -> int: ...


class ChannelClients(PersonaClients, InteractionClients, PollClients, Protocol):
    """What a channel actor uses (the app passes its `Pipeline`; a test, a fake)."""

    @property
    def store(self) -> ChannelStore:
        """Trust list, chat config and recall, read from memory; writes queued."""
        ...

    @property
    def replies(self) -> ReplyPoster:
        """Posting, typing and streaming answers."""
        ...

    @property
    def rest(self) -> ChannelRest:
        """Discord calls besides posting replies."""
        ...

    @property
    def cache(self) -> ContextReader:
        """The context cache."""
        ...

    @property
    def handled(self) -> HandledMarks:
        """Handled marks (SPEC 12)."""
        ...

    @property
    def triggers(self) -> TriggerBook:
        """The trigger log shown by `picortex status`."""
        ...

    @property
    def answers_seen(self) -> AnswersSeen:
        """The bot's replies seen on the gateway (noted by the router, asked here)."""
        ...

    @property
    def home(self) -> Path:
        """PICORTEX_HOME (chat homes live under it)."""
        ...

    @property
    def faults(self) -> FaultCheck | None:
        """Fault points (tests only)."""
        ...

    @property
    def answer_timeout(self) -> float:
        """The deadline of one answer's model call."""
        ...

    @property
    def crash_drain_seconds(self) -> float:
        """How long answers in flight may finish after a crash."""
        ...

    def finish(self, message: Message | Interaction) -> None:
        """The decision on `message` is final."""
        ...

    async def apply_command_changes(
        self, changes: Sequence[cmds.Change], *, chat_id: Snowflake | None, now: float
    ) -> Applied:
        """Store what a command changed: the poll it starts, what it forgot."""
        ...
