"""Value types shared by every part of picortex: Discord entities and normalized events.

Snowflakes are plain ints. Every type is frozen and slotted; normalization
(`picortex.discord.normalize`) is the only place that builds them from raw payloads.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final, Protocol

import attrs

Snowflake = int
# Discord's epoch: snowflakes count milliseconds from 2015-01-01T00:00:00Z.
DISCORD_EPOCH_MS: Final = 1_420_070_400_000


def snowflake_ms(snowflake: Snowflake) -> int:
    """When Discord made `snowflake`, in Unix milliseconds."""
    return (snowflake >> 22) + DISCORD_EPOCH_MS


def snowflake_seconds(snowflake: Snowflake) -> float:
    """When Discord made `snowflake`, in Unix seconds by Discord's clock."""
    return snowflake_ms(snowflake) / 1000.0


def snowflake_at(unix_seconds: float) -> Snowflake:
    """The smallest snowflake Discord could have made at `unix_seconds`."""
    return max(0, int(unix_seconds * 1000) - DISCORD_EPOCH_MS) << 22


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
    """A Discord user as it appears in a message.

    `nick` is the author's server nickname, when the message came with its `member`;
    `system` marks Discord's own official system user (never a person to answer).
    """

    id: Snowflake
    username: str
    global_name: str | None = None
    bot: bool = False
    nick: str | None = None
    system: bool = False

    @property
    def display_name(self) -> str:
        """The name a person sees: the server nickname, else the global name, else the username."""
        return self.nick or self.global_name or self.username


@attrs.frozen
class Attachment:
    """A file attached to a message; its body stays on Discord."""

    id: Snowflake
    filename: str
    size: int = 0
    url: str = ""
    content_type: str | None = None


# message_reference.type: a reply (DEFAULT) or a forward (FORWARD, with message_snapshots).
REFERENCE_DEFAULT = 0
REFERENCE_FORWARD = 1


@attrs.frozen
class MessageReference:
    """What a reply (or a forward) points at."""

    message_id: Snowflake | None
    channel_id: Snowflake | None = None
    guild_id: Snowflake | None = None
    type: int = REFERENCE_DEFAULT


@attrs.frozen
class MessageSnapshot:
    """What a forwarded message said when it was forwarded (Discord omits its author)."""

    content: str = ""
    attachments: tuple[Attachment, ...] = ()
    sticker_names: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """One line for the context: marked as forwarded, with its file and sticker names."""
        parts = ["[forwarded message]"]
        if self.content:
            parts.append(self.content)
        if self.attachments:
            parts.append("[attachments: " + ", ".join(a.filename for a in self.attachments) + "]")
        parts.extend(f"[sticker: {name}]" for name in self.sticker_names)
        return " ".join(parts)


@attrs.frozen
class Poll:
    """A poll in a message: its question and the text of each answer."""

    question: str
    answers: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """The poll as one line: `[poll] question (1) answer (2) answer`."""
        choices = " ".join(f"({n}) {answer}" for n, answer in enumerate(self.answers, start=1))
        return f"[poll] {self.question} {choices}".rstrip()


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
    snapshots: tuple[MessageSnapshot, ...] = ()
    poll: Poll | None = None
    sticker_names: tuple[str, ...] = ()
    # The author's role ids in the guild (`member.roles`), for `[access] allow_roles`.
    member_roles: tuple[Snowflake, ...] = ()

    @property
    def text(self) -> str:
        """What the message says: its content, then what Discord nests in it (SPEC 5).

        Forwarded messages (marked as such), the poll's question and answers and sticker
        names; the author's own attachments are listed apart, by whoever shows the message.
        Commands and mentions are read from `content` alone.
        """
        if not (self.snapshots or self.poll is not None or self.sticker_names):
            return self.content
        parts = [self.content] if self.content else []
        parts.extend(snapshot.text for snapshot in self.snapshots)
        if self.poll is not None:
            parts.append(self.poll.text)
        parts.extend(f"[sticker: {name}]" for name in self.sticker_names)
        return "\n".join(parts)

    @property
    def sent_at(self) -> float:
        """When Discord made the message, in Unix seconds by Discord's clock (from its id)."""
        return snowflake_seconds(self.id)

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
class MessageDeleteBulk:
    """A normalized MESSAGE_DELETE_BULK: several messages of one channel deleted at once."""

    ids: tuple[Snowflake, ...]
    channel_id: Snowflake
    guild_id: Snowflake | None = None


@attrs.frozen
class ChannelDelete:
    """A normalized CHANNEL_DELETE or THREAD_DELETE (a thread's has only ids and type)."""

    id: Snowflake
    type: int
    guild_id: Snowflake | None = None
    parent_id: Snowflake | None = None

    @property
    def channel_id(self) -> Snowflake:
        """The deleted channel's id (the same as `id`)."""
        return self.id


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
    # The user's role ids in the guild (`member.roles`), for `[access] allow_roles`.
    member_roles: tuple[Snowflake, ...] = ()

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
    | MessageDeleteBulk
    | ChannelDelete
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


@attrs.define
class BotIdentity:
    """Who the bot is; known after READY."""

    user_id: Snowflake | None = None
    username: str = "picortex"
