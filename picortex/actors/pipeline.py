"""What the router and the channel side share, wired once by the app: the settings in force,
the bot's identity, the channels seen, the trigger log, and the `Pipeline`, the composition
root that holds them with the actors and clients.

Nothing is typed by the `Pipeline` itself: the router, catch-up and each channel-side job
take the narrow protocol of what they call (`picortex.actors.clients`); posting lives in
`picortex.actors.replies`, failure recording in `picortex.actors.failures`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Final, Protocol

import attrs

from picortex.actors.answers_seen import AnswersSeen
from picortex.actors.clients import CatchUpRest, ChannelRest, FaultCheck, IdentityRest
from picortex.actors.command_changes import Applied, apply_changes
from picortex.actors.context_cache import ContextCache
from picortex.actors.failures import FailureLog
from picortex.actors.handled import HandledLedger
from picortex.actors.llm import LLMActor
from picortex.actors.replies import PostingRest, Replies
from picortex.config import Settings
from picortex.core import commands as cmds
from picortex.core import trust
from picortex.core.access import role_tier
from picortex.core.context import format_line
from picortex.core.triggerlog import TriggerEntry, TriggerLog
from picortex.errors import FatalDiscordError
from picortex.store.personas import PersonaLoader
from picortex.store.queries import RuntimeConfigQueries, StoreQueries
from picortex.types import (
    BotIdentity,
    Channel,
    ChannelType,
    EventSink,
    Interaction,
    Message,
    Snowflake,
)

logger = logging.getLogger(__name__)

# The deadline of one answer's model call: long answers take a while, a hung call must not.
ANSWER_TIMEOUT_SECONDS: Final = 60.0
# A crashing channel actor lets answers already in flight finish for up to this long (one
# model call's deadline plus a post) before it restarts; what is left is logged as abandoned.
CRASH_DRAIN_SECONDS: Final = ANSWER_TIMEOUT_SECONDS + 10.0
# Members whose roles are remembered: a busy server's active people, a few hundred KiB.
MEMBER_ROLES_KEPT: Final = 10_000


@attrs.frozen
class AnswerDeadlines:
    """How long one answer's model call may take, and answers in flight may finish after a
    crash (tests shorten them)."""

    answer_timeout: float = ANSWER_TIMEOUT_SECONDS
    crash_drain_seconds: float = CRASH_DRAIN_SECONDS


class Rest(ChannelRest, PostingRest, IdentityRest, CatchUpRest, Protocol):
    """The REST calls the router, catch-up and channel side make (`RestClient`)."""


@attrs.define
class ChannelRegistry:
    """Channels and threads seen in GUILD_CREATE / CHANNEL_CREATE / THREAD_CREATE."""

    channels: dict[Snowflake, Channel] = attrs.field(factory=dict)
    guilds: dict[Snowflake, str] = attrs.field(factory=dict)  # guild id -> name
    # Each member's roles as their newest server message carried them, newest last: what an
    # allowed role (SPEC 18) is judged by where only an id is at hand (context, recall).
    roles: dict[Snowflake, tuple[Snowflake, ...]] = attrs.field(factory=dict)

    def note_roles(self, user_id: Snowflake, roles: tuple[Snowflake, ...]) -> None:
        """Remember the roles a member's server message carried (the newest wins)."""
        held = self.roles
        held.pop(user_id, None)
        held[user_id] = roles
        if len(held) > MEMBER_ROLES_KEPT:
            del held[next(iter(held))]

    def roles_of(self, user_id: Snowflake) -> tuple[Snowflake, ...]:
        """The member's roles as last seen; none when never seen in a server."""
        return self.roles.get(user_id, ())

    def name_guild(self, guild_id: Snowflake, name: str) -> None:
        """Remember a guild's name (GUILD_CREATE), for the agent prompt's `{{server_name}}`."""
        self.guilds[guild_id] = name

    def guild_name(self, guild_id: Snowflake) -> str | None:
        """The guild's name, if seen."""
        return self.guilds.get(guild_id)

    def add(self, channel: Channel) -> None:
        """Remember (or update) a channel."""
        self.channels[channel.id] = channel

    def remove(self, channel_id: Snowflake) -> list[Snowflake]:
        """Forget a deleted channel and its threads; returns every id forgotten."""
        gone = [channel_id] + [
            c.id for c in self.channels.values() if c.parent_id == channel_id and c.is_thread
        ]
        for cid in gone:
            self.channels.pop(cid, None)
        return gone

    def get(self, channel_id: Snowflake) -> Channel | None:
        """The channel, if seen."""
        return self.channels.get(channel_id)

    def parent_of(self, channel_id: Snowflake) -> Snowflake | None:
        """The parent channel of a thread, else None."""
        ch = self.channels.get(channel_id)
        return ch.parent_id if ch is not None and ch.is_thread else None

    def is_thread(self, channel_id: Snowflake) -> bool:
        """True when the channel is a known thread."""
        ch = self.channels.get(channel_id)
        return ch is not None and ch.is_thread

    def is_group_dm(self, channel_id: Snowflake) -> bool:
        """True when the channel is a known group DM (commands there need a mention)."""
        ch = self.channels.get(channel_id)
        return ch is not None and ch.type == ChannelType.GROUP_DM


class SettingsSource:
    """The current settings: the file and environment, plus runtime config from the store.

    Runtime changes (this process's, or another's `picortex config set`, which the store
    actor notices) are picked up on the next `refresh`, by comparing the store's
    `config_version`: an integer compare per message, no SQLite call.
    """

    def __init__(self, base: Settings, store: RuntimeConfigQueries) -> None:
        self._base = base
        self._store = store
        self._version: object = None
        self._stored: dict[str, str] | None = None
        self._current = base
        self._listeners: list[Callable[[Settings], None]] = []
        self.refresh(force=True)

    def subscribe(self, listener: Callable[[Settings], None]) -> None:
        """Call `listener(settings)` after each change of the runtime config."""
        self._listeners.append(listener)

    def refresh(self, *, force: bool = False) -> Settings:
        """Re-read runtime config when another connection changed the database (or `force`)."""
        version = self._store.config_version
        if not force and version == self._version:
            return self._current
        self._version = version
        stored = self._store.runtime_config()
        if stored == self._stored:
            return self._current
        try:
            current = self._base.with_runtime(stored)
        except Exception as exc:  # a bad stored value keeps the last good settings
            logger.warning("runtime config not applied: %s", exc)
            return self._current
        self._stored = stored
        self._current = current
        for listener in self._listeners:
            try:
                listener(current)
            except Exception:
                logger.exception("a runtime config listener failed")
        return current

    def __call__(self) -> Settings:
        return self._current


@attrs.define
class TriggerBook:
    """The trigger log rings, shared by all channels (read by `picortex status`)."""

    log: TriggerLog = attrs.field(factory=TriggerLog)

    def add(self, entry: TriggerEntry) -> None:
        """Append a trigger."""
        self.log = self.log.add(entry)

    # How many leading context lines of an entry are the prior conversation (the rest are
    # follow-ups), so a rebuilt context replaces the old one instead of piling up.
    prior: dict[Snowflake, int] = attrs.field(factory=dict)

    def follow_up(self, parent_id: Snowflake, line: str, message_id: Snowflake) -> None:
        """Join follow-up `message_id` to its trigger's context."""
        self.log = self.log.add_follow_up(parent_id, line, message_id)

    def has_channel(self, channel_id: Snowflake) -> bool:
        """Whether any trigger in the log is from `channel_id`."""
        return any(e.channel_id == channel_id for e in (*self.log.trusted, *self.log.untrusted))

    def forget(self, message_ids: Collection[Snowflake], cached: Sequence[Message] = ()) -> None:
        """Drop the text of deleted messages: triggers, follow-ups, and context lines made of
        the deleted ones among `cached` (the channel's cached messages)."""
        ids = frozenset(message_ids)
        lines = {
            format_line(m, trusted=trusted)
            for m in cached
            if m.id in ids
            for trusted in (True, False)
        }
        self.log = self.log.forget(ids, lines)

    def forget_author(self, author_id: Snowflake) -> None:
        """Drop what `author_id` asked (`forget`)."""
        self.log = self.log.forget_author(author_id)

    def set_context(self, entry_id: Snowflake, lines: Sequence[str]) -> None:
        """Record the prior conversation given to the model for entry `entry_id`."""
        old = self.prior.get(entry_id, 0)

        def put(buffer: tuple[TriggerEntry, ...]) -> tuple[TriggerEntry, ...]:
            return tuple(
                attrs.evolve(e, context=(*lines, *e.context[old:])) if e.id == entry_id else e
                for e in buffer
            )

        if self.log.get(entry_id) is None:
            return
        self.log = attrs.evolve(
            self.log, trusted=put(self.log.trusted), untrusted=put(self.log.untrusted)
        )
        self.prior[entry_id] = len(lines)
        if len(self.prior) > 2 * (self.log.trusted_capacity + self.log.untrusted_capacity):
            self.prior = {k: v for k, v in self.prior.items() if self.log.get(k) is not None}


@attrs.define
class Pipeline:
    """The composition root of the message path: the one object the app builds that provides
    the parts the router's and the channel actors' roles are built from
    (`picortex.actors.router_clients`, `picortex.actors.channel_roles`) and what catch-up
    uses (`CatchUpClients`); no code is typed by it whole.
    The reply poster, the failure recorder and the handled ledger are built from the fields
    the app passes in."""

    settings: SettingsSource
    store: StoreQueries
    rest: Rest
    cache: ContextCache
    llm: LLMActor
    events: EventSink
    bot: BotIdentity
    registry: ChannelRegistry
    triggers: TriggerBook
    home: Path
    faults: FaultCheck | None = None
    personas: PersonaLoader | None = None
    # Starts a task in the app's background nursery, which outlives channel actors (polls,
    # deadlines of slash commands, catch-up, command registration), so an idle exit keeps
    # their timers.
    spawn: Callable[..., None] = attrs.field(kw_only=True)
    # Called when Discord refuses the token (HTTP 401): the app stops with exit code 3.
    fatal: Callable[[FatalDiscordError], None] = attrs.field(kw_only=True)
    # Failed invocations (SPEC 9): events and error rows.
    failures: FailureLog = attrs.field(
        default=attrs.Factory(lambda self: FailureLog(self.store, self.events), takes_self=True)
    )
    # Posting, typing and streaming.
    replies: Replies = attrs.field(
        default=attrs.Factory(
            lambda self: Replies(
                self.settings,
                self.rest,
                self.llm,
                self.events,
                fatal=self.fatal,
            ),
            takes_self=True,
        )
    )
    answer_timeout: float = ANSWER_TIMEOUT_SECONDS
    crash_drain_seconds: float = CRASH_DRAIN_SECONDS
    # The bot's replies seen on the gateway: a request replayed after a restart takes no
    # message sent after its answer (SPEC 5.4).
    answers_seen: AnswersSeen = attrs.field(factory=AnswersSeen)
    # Which messages are in hand and which are handled: a decision is final only once made.
    handled: HandledLedger = attrs.field(
        default=attrs.Factory(lambda self: HandledLedger(self.store), takes_self=True)
    )

    def finish(self, message: Message | Interaction) -> None:
        """The decision on `message` is final: it is never handled again."""
        self.handled.finish((message.id,), message.channel_id, message.guild_id)

    async def apply_command_changes(
        self, changes: Sequence[cmds.Change], *, chat_id: Snowflake | None, now: float
    ) -> Applied:
        """Store what a command changed (see `apply_changes`)."""
        return await apply_changes(
            changes,
            store=self.store,
            settings=self.settings,
            home=self.home,
            chat_id=chat_id,
            now=now,
        )

    def is_trusted(self, user_id: Snowflake) -> bool:
        """Whether someone's words may be repeated to the model unmarked (context lines,
        recall): the owner, anyone on the trust list or holding an allowed role (as their
        newest server message showed), and the bot itself, whose own answers are part of the
        conversation."""
        settings = self.settings()
        if trust.is_trusted(
            user_id, settings.owner_id, self.store.get_tier, bot_user_id=self.bot.user_id
        ):
            return True
        allowed = settings.access.allow_roles
        return bool(allowed) and role_tier(self.registry.roles_of(user_id), allowed) is not None
