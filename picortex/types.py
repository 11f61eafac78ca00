"""Value types shared by every part of picortex: Discord entities and normalized events.

Snowflakes are plain ints. Every type is frozen and slotted; normalization
(`picortex.discord.normalize`) is the only place that builds them from raw payloads.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol

import attrs

Snowflake = int


class ChannelType(IntEnum):
    """Discord channel types that picortex cares about."""

    GUILD_TEXT = 0
    DM = 1
    GUILD_VOICE = 2
    GROUP_DM = 3
    GUILD_CATEGORY = 4
    GUILD_ANNOUNCEMENT = 5
    ANNOUNCEMENT_THREAD = 10
    PUBLIC_THREAD = 11
    PRIVATE_THREAD = 12
    GUILD_FORUM = 15


THREAD_TYPES = frozenset(
    {ChannelType.ANNOUNCEMENT_THREAD, ChannelType.PUBLIC_THREAD, ChannelType.PRIVATE_THREAD}
)


@attrs.frozen
class User:
    """A Discord user as it appears in a message."""

    id: Snowflake
    username: str
    global_name: str | None = None
    bot: bool = False

    @property
    def display_name(self) -> str:
        """The name a person sees: the global name when set, else the username."""
        return self.global_name or self.username


@attrs.frozen
class Attachment:
    """A file attached to a message; its body stays on Discord."""

    id: Snowflake
    filename: str
    size: int = 0
    url: str = ""
    content_type: str | None = None


@attrs.frozen
class MessageReference:
    """What a reply points at."""

    message_id: Snowflake | None
    channel_id: Snowflake | None = None
    guild_id: Snowflake | None = None


@attrs.frozen
class Message:
    """A normalized MESSAGE_CREATE (or a message from channel history)."""

    id: Snowflake
    channel_id: Snowflake
    author: User
    content: str
    timestamp: str  # ISO 8601 as Discord sends it
    guild_id: Snowflake | None = None  # None for a DM
    mentions: tuple[User, ...] = ()
    mention_roles: tuple[Snowflake, ...] = ()
    mention_everyone: bool = False
    attachments: tuple[Attachment, ...] = ()
    message_reference: MessageReference | None = None
    # Author of the message this one replies to, when Discord included it.
    referenced_author: User | None = None
    edited_timestamp: str | None = None
    type: int = 0
    webhook_id: Snowflake | None = None

    @property
    def is_dm(self) -> bool:
        """True when the message was sent outside a guild."""
        return self.guild_id is None

    def mentions_user(self, user_id: Snowflake) -> bool:
        """True when `user_id` is in the message's mentions."""
        return any(u.id == user_id for u in self.mentions)


@attrs.frozen
class MessageUpdate:
    """A normalized MESSAGE_UPDATE: only the fields Discord sent are set."""

    id: Snowflake
    channel_id: Snowflake
    guild_id: Snowflake | None = None
    content: str | None = None
    edited_timestamp: str | None = None
    author: User | None = None
    attachments: tuple[Attachment, ...] | None = None


@attrs.frozen
class MessageDelete:
    """A normalized MESSAGE_DELETE."""

    id: Snowflake
    channel_id: Snowflake
    guild_id: Snowflake | None = None


@attrs.frozen
class ReactionEvent:
    """A normalized MESSAGE_REACTION_ADD or MESSAGE_REACTION_REMOVE."""

    added: bool
    user_id: Snowflake
    channel_id: Snowflake
    message_id: Snowflake
    emoji: str  # unicode emoji, or `name:id` for a custom one
    guild_id: Snowflake | None = None


@attrs.frozen
class Channel:
    """A channel or thread the bot can see."""

    id: Snowflake
    type: int
    guild_id: Snowflake | None = None
    parent_id: Snowflake | None = None
    name: str | None = None

    @property
    def is_thread(self) -> bool:
        """True for public, private and announcement threads."""
        return self.type in THREAD_TYPES


@attrs.frozen
class Ready:
    """A normalized READY."""

    session_id: str
    resume_gateway_url: str
    user: User
    guild_ids: tuple[Snowflake, ...] = ()
    shard: tuple[int, int] | None = None
    # READY's `application.id`: the id application commands are registered under.
    application_id: Snowflake | None = None


@attrs.frozen
class GuildCreate:
    """A normalized GUILD_CREATE: the guild, its channels and its active threads."""

    id: Snowflake
    name: str
    channels: tuple[Channel, ...] = ()
    threads: tuple[Channel, ...] = ()
    unavailable: bool = False


@attrs.frozen
class ChannelCreate:
    """A normalized CHANNEL_CREATE or THREAD_CREATE."""

    channel: Channel


@attrs.frozen
class ThreadListSync:
    """A normalized THREAD_LIST_SYNC: active threads of channels the bot just gained."""

    guild_id: Snowflake
    threads: tuple[Channel, ...] = ()


class InteractionType(IntEnum):
    """Discord's interaction types that reach a bot over the gateway."""

    PING = 1
    APPLICATION_COMMAND = 2
    MESSAGE_COMPONENT = 3
    APPLICATION_COMMAND_AUTOCOMPLETE = 4
    MODAL_SUBMIT = 5


@attrs.frozen
class InteractionOption:
    """One option of a slash command as the user filled it in (nested for subcommands)."""

    name: str
    type: int
    value: str | int | float | bool | None = None
    options: tuple[InteractionOption, ...] = ()
    focused: bool = False  # the option being typed, in an autocomplete interaction


@attrs.frozen
class Interaction:
    """A normalized INTERACTION_CREATE (slash command or autocomplete).

    The token answers the interaction for 15 minutes: a secret, never in a repr or a log.
    """

    id: Snowflake
    application_id: Snowflake
    type: int
    token: str = attrs.field(repr=False)
    channel_id: Snowflake
    user: User
    guild_id: Snowflake | None = None  # None in a DM
    command_name: str = ""
    options: tuple[InteractionOption, ...] = ()
    # Users named by user options (`data.resolved.users`), by id.
    resolved_users: tuple[User, ...] = ()

    @property
    def is_dm(self) -> bool:
        """True when the interaction came from outside a guild."""
        return self.guild_id is None


@attrs.frozen
class NormalizeError:
    """A payload that could not be normalized; logged, never raised in the reader."""

    event: str
    reason: str
    excerpt: str = ""


Event = (
    Message
    | MessageUpdate
    | MessageDelete
    | ReactionEvent
    | Ready
    | GuildCreate
    | ChannelCreate
    | ThreadListSync
    | Interaction
    | NormalizeError
)


class EventSink(Protocol):
    """Where actors write action-log events (the action-log actor, or a list in tests)."""

    def emit(self, event: str, /, **fields: object) -> None:
        """Queue one event; never blocks and never raises."""
        ...


class NullSink:
    """An EventSink that drops every event (one-shot commands that keep no log)."""

    def emit(self, event: str, /, **fields: object) -> None:
        """Drop the event."""
