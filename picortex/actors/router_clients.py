"""What the router uses, by role: what it reads about trust and the bot (`RouterReads`),
what it feeds with live events (`RouterFeeds`) and where its requests' answers go
(`RouterPosting`). The app passes its `Pipeline`; a test, a fake."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.clients import (
    ChannelBook,
    ContextFeed,
    FaultCheck,
    HandledBook,
    ReplyPoster,
    RouterRest,
    RouterStore,
)
from picortex.actors.interactions import InteractionClients
from picortex.actors.persona_answer import PersonaIndex

if TYPE_CHECKING:
    from picortex.actors.pipeline import TriggerBook
    from picortex.types import BotIdentity


class RouterReads(Protocol):
    """What the router reads about trust and the bot."""

    @property
    def store(self) -> RouterStore:
        """Handled ids, trust list, chat config and recall."""
        ...

    @property
    def bot(self) -> BotIdentity:
        """Who the bot is (set from READY)."""
        ...

    @property
    def faults(self) -> FaultCheck | None:
        """Fault points (tests only): with any, every message takes the mailbox's way."""
        ...


class RouterFeeds(Protocol):
    """What the router feeds with live events."""

    @property
    def cache(self) -> ContextFeed:
        """The context cache."""
        ...

    @property
    def handled(self) -> HandledBook:
        """Messages in hand and handled (SPEC 12)."""
        ...

    @property
    def registry(self) -> ChannelBook:
        """Channels and threads seen."""
        ...

    @property
    def answers_seen(self) -> AnswersSeen:
        """The bot's replies seen on the gateway (noted here, asked by the channel actors)."""
        ...

    @property
    def triggers(self) -> TriggerBook:
        """The trigger log (a deleted message's text leaves it)."""
        ...


class RouterPosting(Protocol):
    """Where the router's requests are answered, and the Discord calls it makes itself."""

    @property
    def rest(self) -> RouterRest:
        """Who the bot is; registering slash commands, deferring their answers."""
        ...

    @property
    def replies(self) -> ReplyPoster:
        """Where replies go: a message's answer sink posts through it."""
        ...


class RouterClients(
    RouterReads, RouterFeeds, RouterPosting, InteractionClients, PersonaIndex, Protocol
):
    """Everything the router uses, by role, with what slash-command answers and persona
    bookkeeping use (it starts both)."""
