"""What the router uses, by role: what it reads about trust and the bot (`RouterReads`),
what it feeds with live events (`RouterFeeds`), where its requests' answers go and the tasks
it starts (`RouterPosting`), with what slash commands (`InteractionClients`) and the persona
index (`PersonaIndex`) use. The app builds each role whole (`ReadRole`, `FeedRole`,
`PostRole`, `SlashRole`, `PersonaIndexRole`) and hands the router their `RouterRoles`; a
test, its fakes."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import attrs

from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.clients import (
    ChannelBook,
    ContextFeed,
    CurrentSettings,
    FaultCheck,
    HandledBook,
    InteractionRest,
    ReplyPoster,
    ReplyTarget,
    RouterRest,
    RouterStore,
    Spawner,
)
from picortex.actors.interactions import InteractionClients, InteractionStore
from picortex.actors.persona_answer import PersonaIndex

if TYPE_CHECKING:
    from picortex.actors.clients import PersonaStore
    from picortex.actors.pipeline import TriggerBook
    from picortex.errors import FatalDiscordError
    from picortex.store.personas import PersonaLoader
    from picortex.types import BotIdentity, EventSink


class RouterReads(Protocol):
    """What the router reads about trust, the settings and the bot."""

    @property
    def settings(self) -> CurrentSettings:
        """The settings in force (refreshed per message)."""
        ...

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
    """What the router feeds with live events, the action log among them."""

    @property
    def events(self) -> EventSink:
        """The action log."""
        ...

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


class RouterPosting(Spawner, Protocol):
    """Where the router's requests are answered, the Discord calls it makes itself, and the
    tasks it starts in the background (catch-up, command registration, deferrals)."""

    @property
    def rest(self) -> RouterRest:
        """Who the bot is; registering slash commands, deferring their answers."""
        ...

    @property
    def replies(self) -> ReplyPoster:
        """Where replies go: a message's answer sink posts through it."""
        ...


@attrs.frozen
class ReadRole:
    """`RouterReads`, as the app builds it."""

    settings: CurrentSettings
    store: RouterStore
    bot: BotIdentity
    faults: FaultCheck | None


@attrs.frozen
class FeedRole:
    """`RouterFeeds`, as the app builds it."""

    events: EventSink
    cache: ContextFeed
    handled: HandledBook
    registry: ChannelBook
    answers_seen: AnswersSeen
    triggers: TriggerBook


@attrs.frozen
class PostRole:
    """`RouterPosting`, as the app builds it."""

    rest: RouterRest
    replies: ReplyPoster
    spawn: Callable[..., None]


@attrs.frozen
class SlashRole:
    """`InteractionClients`, as the app builds it."""

    settings: CurrentSettings
    store: InteractionStore
    replies: ReplyTarget
    rest: InteractionRest
    events: EventSink
    spawn: Callable[..., None]
    fatal: Callable[[FatalDiscordError], None]


@attrs.frozen
class PersonaIndexRole:
    """`PersonaIndex`, as the app builds it."""

    personas: PersonaLoader | None
    events: EventSink
    store: PersonaStore


@attrs.frozen
class RouterRoles:
    """Each role the router takes, built whole by the app in dependency order."""

    reads: RouterReads
    feeds: RouterFeeds
    posting: RouterPosting
    slash: InteractionClients
    personas: PersonaIndex
