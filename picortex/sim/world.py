"""The simulated Discord world: users, guilds, channels, threads, DMs and messages.

Pure state with no I/O. Every change that Discord would announce on the gateway appends a
`Dispatch` to `World.outbox`; the simulator drains it into the gateway sessions. Payloads
follow Discord's v10 shapes: REST message objects carry no `guild_id`/`member` (those are
gateway extras), and guild channels inside GUILD_CREATE carry no `guild_id`.
"""

from __future__ import annotations

import base64
import binascii
import re
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from picortex.errors import ApiError as ApiError
from picortex.errors import SimError as SimError
from picortex.sim.snowflake import SnowflakeFactory, iso_timestamp
from picortex.types import snowflake_ms

Json = dict[str, Any]

# Gateway intents the simulator routes on (Discord's bit values).
INTENT_GUILDS: Final = 1 << 0
INTENT_GUILD_MEMBERS: Final = 1 << 1
INTENT_GUILD_PRESENCES: Final = 1 << 8
INTENT_GUILD_MESSAGES: Final = 1 << 9
INTENT_GUILD_MESSAGE_REACTIONS: Final = 1 << 10
INTENT_GUILD_MESSAGE_TYPING: Final = 1 << 11
INTENT_DIRECT_MESSAGES: Final = 1 << 12
INTENT_DIRECT_MESSAGE_REACTIONS: Final = 1 << 13
INTENT_DIRECT_MESSAGE_TYPING: Final = 1 << 14
INTENT_MESSAGE_CONTENT: Final = 1 << 15
# Every intent bit Discord defines; any other bit closes the gateway with 4013.
VALID_INTENTS: Final = sum(1 << bit for bit in (*range(17), 20, 21, 24, 25))
PRIVILEGED_INTENTS: Final = INTENT_GUILD_MEMBERS | INTENT_GUILD_PRESENCES | INTENT_MESSAGE_CONTENT

# Channel types used here (Discord's values).
GUILD_TEXT: Final = 0
DM: Final = 1
GUILD_ANNOUNCEMENT: Final = 5
ANNOUNCEMENT_THREAD: Final = 10
PUBLIC_THREAD: Final = 11
THREAD_TYPES: Final = frozenset({ANNOUNCEMENT_THREAD, PUBLIC_THREAD, 12})
# Message types and flags used here.
MESSAGE_DEFAULT: Final = 0
MESSAGE_REPLY: Final = 19
FLAG_HAS_THREAD: Final = 1 << 5
FLAG_HAS_SNAPSHOT: Final = 1 << 14
REFERENCE_FORWARD: Final = 1
# Poll layout DEFAULT, and the sticker format of a plain PNG sticker.
POLL_LAYOUT_DEFAULT: Final = 1
STICKER_FORMAT_PNG: Final = 1
POLL_HOURS_DEFAULT: Final = 24
# Discord's limit on message content, in characters.
MAX_CONTENT_CHARS: Final = 2000
# Discord's cap on a guild's channels, and a bound on guilds made at once (memory, not Discord).
MAX_GUILD_CHANNELS: Final = 500
MAX_BULK_GUILDS: Final = 100_000
# Default thread auto-archive duration in minutes (a value Discord accepts).
THREAD_ARCHIVE_MINUTES: Final = 1440
# Permissions of @everyone in the simulated guilds: Discord's default set for new guilds.
EVERYONE_PERMISSIONS: Final = "2248473465835073"

_USER_MENTION = re.compile(r"<@!?(\d+)>")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")
_EVERYONE = re.compile(r"@(everyone|here)\b")


def form_error(field: str, code: str, message: str) -> ApiError:
    """Discord's 50035 "Invalid Form Body" error for one field."""
    errors = {field: {"_errors": [{"code": code, "message": message}]}}
    return ApiError(400, 50035, "Invalid Form Body", errors)


def unknown_channel() -> ApiError:
    """Discord's 404 for a channel id it does not know."""
    return ApiError(404, 10003, "Unknown Channel")


def unknown_message() -> ApiError:
    """Discord's 404 for a message id it does not know."""
    return ApiError(404, 10008, "Unknown Message")


@attrs.frozen
class Dispatch:
    """One gateway DISPATCH the world wants sent to the sessions that may see it.

    `intent` is the intent a session needs (None: always sent); `guild_id` drives shard
    routing (None: shard 0 only); `strippable` marks message payloads whose content fields
    are blanked for sessions without MESSAGE_CONTENT.
    """

    name: str
    data: Json
    guild_id: int | None
    intent: int | None
    strippable: bool = False


@attrs.define
class SimUser:
    """A user of the simulated world (people and bots)."""

    id: int
    username: str
    global_name: str | None
    bot: bool
    discriminator: str
    system: bool = False
    nick: str | None = None  # the server nickname (every user is in every guild)
    roles: list[int] = attrs.Factory(list)  # role ids, each of one guild (`member.roles`)

    def payload(self) -> Json:
        """The user object Discord sends."""
        out: Json = {
            "id": str(self.id),
            "username": self.username,
            "global_name": self.global_name,
            "avatar": None,
            "discriminator": self.discriminator,
            "public_flags": 0,
            "flags": 0,
            "banner": None,
            "accent_color": None,
            "avatar_decoration_data": None,
        }
        if self.bot:
            out["bot"] = True
        if self.system:
            out["system"] = True
        return out


@attrs.define
class SimMessage:
    """A stored message; payloads are rendered from it on demand."""

    id: int
    channel_id: int
    guild_id: int | None
    author_id: int
    content: str
    type: int = MESSAGE_DEFAULT
    mentions: list[int] = attrs.Factory(list)
    mention_roles: list[int] = attrs.Factory(list)
    mention_everyone: bool = False
    attachments: list[Json] = attrs.Factory(list)
    embeds: list[Json] = attrs.Factory(list)
    reference: Json | None = None
    reactions: dict[str, list[int]] = attrs.Factory(dict)
    edited_ms: int | None = None
    nonce: str | int | None = None
    tts: bool = False
    flags: int = 0
    position: int | None = None
    thread_id: int | None = None
    snapshots: list[Json] = attrs.Factory(list)
    poll: Json | None = None
    sticker_items: list[Json] = attrs.Factory(list)


@attrs.define
class SimChannel:
    """A guild channel, thread or DM with its message history (ids ascending)."""

    id: int
    type: int
    name: str | None
    guild_id: int | None
    parent_id: int | None = None
    position: int = 0
    recipient_id: int | None = None
    owner_id: int | None = None
    messages: list[SimMessage] = attrs.Factory(list)
    by_id: dict[int, SimMessage] = attrs.Factory(dict)
    message_count: int = 0
    total_message_sent: int = 0
    archive_minutes: int = THREAD_ARCHIVE_MINUTES

    @property
    def is_thread(self) -> bool:
        """True for threads."""
        return self.type in THREAD_TYPES

    @property
    def last_message_id(self) -> int | None:
        """Id of the newest message, if any."""
        return self.messages[-1].id if self.messages else None


@attrs.define
class SimGuild:
    """A guild the bot is in; every simulated user is a member of every guild."""

    id: int
    name: str
    owner_id: int
    channel_ids: list[int] = attrs.Factory(list)
    thread_ids: list[int] = attrs.Factory(list)
    roles: dict[int, str] = attrs.Factory(dict)  # role id -> name, besides @everyone


class World:
    """Everything the simulated Discord knows, plus the queue of dispatches to send."""

    def __init__(self, snowflakes: SnowflakeFactory, *, bot_username: str = "picortex") -> None:
        self.snowflakes = snowflakes
        self.users: dict[int, SimUser] = {}
        self.guilds: dict[int, SimGuild] = {}
        self.channels: dict[int, SimChannel] = {}
        self.dm_by_user: dict[int, int] = {}
        self.outbox: list[Dispatch] = []
        self.application_id = snowflakes.next()
        self.bot_user_id = self.add_user(bot_username, bot=True)
        # nonce -> message id of the bot's recent messages, for `enforce_nonce`.
        self._bot_nonces: dict[str, int] = {}
        # Where attachment bodies are served (the simulator's own origin once it serves;
        # Discord's CDN otherwise), and the bodies by attachment id.
        self.attachment_base = "https://cdn.discordapp.com"
        self.attachment_bodies: dict[int, tuple[bytes, str | None]] = {}

    # ----------------------------------------------------------------- world building

    def add_user(
        self,
        username: str,
        *,
        bot: bool = False,
        global_name: str | None = None,
        system: bool = False,
        nick: str | None = None,
    ) -> int:
        """Create a user (a member of every guild) and return its id.

        `system` makes an Official Discord System user (`system: true`, as Discord's own
        announcements come from); `nick` is the user's server nickname.
        """
        user_id = self.snowflakes.next()
        discriminator = f"{user_id % 10000:04d}" if bot else "0"
        self.users[user_id] = SimUser(
            user_id, username, global_name, bot, discriminator, system=system, nick=nick
        )
        return user_id

    def set_nick(self, user_id: int, nick: str | None) -> None:
        """Change a user's server nickname (as shown in every guild's `member.nick`)."""
        self.user(user_id).nick = nick

    def add_role(self, guild_id: int, name: str) -> int:
        """Create a role in a guild and return its id (seen in later GUILD_CREATEs)."""
        role_id = self.snowflakes.next()
        self.guild(guild_id).roles[role_id] = name
        return role_id

    def give_role(self, user_id: int, role_id: int) -> None:
        """Give a user a role (seen in later payloads' `member.roles` in its guild)."""
        if not any(role_id in g.roles for g in self.guilds.values()):
            raise KeyError(f"no role {role_id}")
        user = self.user(user_id)
        if role_id not in user.roles:
            user.roles.append(role_id)

    def add_guild(self, name: str, *, owner_id: int | None = None) -> int:
        """Create a guild the bot is in; announces it with GUILD_CREATE."""
        return self._add_guild(self.snowflakes.next(), name, owner_id)

    def add_guilds(
        self, count: int, channels_per_guild: int, *, prefix: str = "guild"
    ) -> list[tuple[int, list[int]]]:
        """Create `count` guilds (`guild-0`, ...) with `channels_per_guild` text channels each.

        The guilds' ids are a millisecond apart, so they spread over shards as on Discord.
        Returns (guild id, channel ids) per guild.
        """
        if not 0 <= count <= MAX_BULK_GUILDS:
            raise SimError(f"the guild count must be between 0 and {MAX_BULK_GUILDS}")
        if not 0 <= channels_per_guild <= MAX_GUILD_CHANNELS:
            raise SimError(f"a guild has between 0 and {MAX_GUILD_CHANNELS} channels")
        made = []
        for index, guild_id in enumerate(self.snowflakes.spaced(count)):
            self._add_guild(guild_id, f"{prefix}-{index}", None)
            channels = [
                self.add_channel(guild_id, f"channel-{n}") for n in range(channels_per_guild)
            ]
            made.append((guild_id, channels))
        return made

    def _add_guild(self, guild_id: int, name: str, owner_id: int | None) -> int:
        owner = owner_id if owner_id is not None else self.bot_user_id
        self.user(owner)
        self.guilds[guild_id] = SimGuild(guild_id, name, owner)
        self.outbox.append(
            Dispatch("GUILD_CREATE", self.guild_create_payload(guild_id), guild_id, None)
        )
        return guild_id

    def add_channel(self, guild_id: int, name: str, *, type: int = GUILD_TEXT) -> int:
        """Create a text (or announcement) channel; announces it with CHANNEL_CREATE."""
        guild = self.guild(guild_id)
        if type not in (GUILD_TEXT, GUILD_ANNOUNCEMENT):
            raise SimError(f"the simulator makes text and announcement channels, not type {type}")
        channel_id = self.snowflakes.next()
        channel = SimChannel(channel_id, type, name, guild_id, position=len(guild.channel_ids))
        self.channels[channel_id] = channel
        guild.channel_ids.append(channel_id)
        self.outbox.append(
            Dispatch("CHANNEL_CREATE", self.channel_payload(channel), guild_id, INTENT_GUILDS)
        )
        return channel_id

    def open_dm(self, user_id: int) -> int:
        """The DM channel between `user_id` and the bot, created on first use."""
        user = self.user(user_id)
        if user.id == self.bot_user_id:
            raise ApiError(400, 50033, "Invalid Recipient(s)")
        existing = self.dm_by_user.get(user_id)
        if existing is not None:
            return existing
        channel_id = self.snowflakes.next()
        self.channels[channel_id] = SimChannel(channel_id, DM, None, None, recipient_id=user_id)
        self.dm_by_user[user_id] = channel_id
        return channel_id

    def start_thread(
        self,
        channel_id: int,
        name: str,
        *,
        owner_id: int,
        message_id: int | None = None,
        auto_archive_duration: int = THREAD_ARCHIVE_MINUTES,
    ) -> SimChannel:
        """Start a public thread, from a message (same id as the message) or standalone."""
        parent = self.channel(channel_id)
        if parent.type not in (GUILD_TEXT, GUILD_ANNOUNCEMENT):
            raise ApiError(400, 50024, "Cannot execute action on this channel type")
        if not name or len(name) > 100:
            raise form_error("name", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 100 in length.")
        source = None
        if message_id is not None:
            source = parent.by_id.get(message_id)
            if source is None:
                raise unknown_message()
            if source.thread_id is not None:
                raise ApiError(400, 160004, "A thread has already been created for this message")
        thread_id = message_id if message_id is not None else self.snowflakes.next()
        thread_type = ANNOUNCEMENT_THREAD if parent.type == GUILD_ANNOUNCEMENT else PUBLIC_THREAD
        assert parent.guild_id is not None
        thread = SimChannel(
            thread_id,
            thread_type,
            name,
            parent.guild_id,
            parent_id=parent.id,
            owner_id=owner_id,
            archive_minutes=auto_archive_duration,
        )
        self.channels[thread_id] = thread
        self.guild(parent.guild_id).thread_ids.append(thread_id)
        created = self.channel_payload(thread)
        created["newly_created"] = True
        self.outbox.append(Dispatch("THREAD_CREATE", created, parent.guild_id, INTENT_GUILDS))
        if source is not None:
            source.thread_id = thread_id
            source.flags |= FLAG_HAS_THREAD
            self._dispatch_message("MESSAGE_UPDATE", source)
        return thread

    # ------------------------------------------------------------------ lookups

    def user(self, user_id: int) -> SimUser:
        """The user with `user_id` (SimError if unknown)."""
        try:
            return self.users[user_id]
        except KeyError:
            raise SimError(f"no user {user_id} in the simulated world") from None

    def guild(self, guild_id: int) -> SimGuild:
        """The guild with `guild_id` (SimError if unknown)."""
        try:
            return self.guilds[guild_id]
        except KeyError:
            raise SimError(f"no guild {guild_id} in the simulated world") from None

    def channel(self, channel_id: int) -> SimChannel:
        """The channel with `channel_id` (Discord's 10003 error if unknown)."""
        channel = self.channels.get(channel_id)
        if channel is None:
            raise unknown_channel()
        return channel

    def message(self, channel_id: int, message_id: int) -> SimMessage:
        """The message `message_id` in `channel_id` (Discord's 10008 error if unknown)."""
        found = self.channel(channel_id).by_id.get(message_id)
        if found is None:
            raise unknown_message()
        return found

    # -------------------------------------------------------------- messages

    def create_message(
        self,
        channel_id: int,
        author_id: int,
        content: str,
        *,
        mentions: Iterable[int] = (),
        reply_to: int | None = None,
        reply_ping: bool = True,
        attachments: Sequence[str | Mapping[str, Any]] = (),
        embeds: Sequence[Mapping[str, Any]] = (),
        allowed_mentions: Mapping[str, Any] | None = None,
        nonce: str | int | None = None,
        tts: bool = False,
        poll: Mapping[str, Any] | None = None,
        stickers: Sequence[str] = (),
    ) -> SimMessage:
        """Store a new message and announce it with MESSAGE_CREATE.

        `poll` is a poll create request (`question`, `answers`, `duration`, ...), stored as
        Discord's poll object; `stickers` are sticker names, sent as `sticker_items`.

        Mentions are parsed from `<@id>`, `<@&id>`, `@everyone` and `@here` in `content`, as
        Discord does, then filtered by `allowed_mentions`; `mentions` adds user ids on top.
        """
        channel = self.channel(channel_id)
        author = self.user(author_id)
        if channel.type == DM and author.id not in (self.bot_user_id, channel.recipient_id):
            raise SimError(f"user {author_id} is not in DM channel {channel_id}")
        reference = None
        replied_author = None
        if reply_to is not None:
            target = channel.by_id.get(reply_to)
            if target is None:
                raise form_error(
                    "message_reference", "MESSAGE_REFERENCE_UNKNOWN_MESSAGE", "Unknown message"
                )
            reference = {"type": 0, "channel_id": str(channel.id), "message_id": str(target.id)}
            if channel.guild_id is not None:
                reference["guild_id"] = str(channel.guild_id)
            replied_author = target.author_id
        user_ids, role_ids, everyone = self._parse_mentions(content, allowed_mentions)
        for extra in mentions:
            self.user(extra)
            if extra not in user_ids:
                user_ids.append(extra)
        ping_reply = (
            reply_ping
            if allowed_mentions is None
            else bool(allowed_mentions.get("replied_user", False))
        )
        if (
            replied_author is not None
            and ping_reply
            and replied_author != author_id
            and replied_author not in user_ids
        ):
            user_ids.append(replied_author)
        message_id = self.snowflakes.next()
        message = SimMessage(
            id=message_id,
            channel_id=channel.id,
            guild_id=channel.guild_id,
            author_id=author.id,
            content=content,
            type=MESSAGE_REPLY if reference is not None else MESSAGE_DEFAULT,
            mentions=user_ids,
            mention_roles=role_ids,
            mention_everyone=everyone,
            attachments=[self._attachment(channel.id, a) for a in attachments],
            embeds=[dict(e) for e in embeds],
            reference=reference,
            nonce=nonce,
            tts=tts,
            poll=self._poll_object(message_id, poll) if poll is not None else None,
            sticker_items=[
                {"id": str(self.snowflakes.next()), "name": name, "format_type": STICKER_FORMAT_PNG}
                for name in stickers
            ],
        )
        if channel.is_thread:
            message.position = channel.total_message_sent
            channel.message_count += 1
            channel.total_message_sent += 1
        channel.messages.append(message)
        channel.by_id[message_id] = message
        if author.id == self.bot_user_id and nonce is not None:
            self._bot_nonces[str(nonce)] = message_id
        self._dispatch_message("MESSAGE_CREATE", message)
        return message

    def forward_message(
        self, channel_id: int, author_id: int, source_channel_id: int, source_message_id: int
    ) -> SimMessage:
        """`author_id` forwards a message into `channel_id` (MESSAGE_CREATE).

        As Discord does: empty content, a FORWARD `message_reference` to the original, and
        one `message_snapshots` entry holding the original's minimal fields (no author),
        taken now and never updated.
        """
        channel = self.channel(channel_id)
        author = self.user(author_id)
        source = self.message(source_channel_id, source_message_id)
        if source.poll is not None:
            raise ApiError(400, 50035, "Invalid Form Body")  # polls cannot be forwarded
        reference: Json = {
            "type": REFERENCE_FORWARD,
            "channel_id": str(source.channel_id),
            "message_id": str(source.id),
        }
        if source.guild_id is not None:
            reference["guild_id"] = str(source.guild_id)
        snapshot: Json = {
            "type": source.type,
            "content": source.content,
            "embeds": list(source.embeds),
            "attachments": list(source.attachments),
            "timestamp": iso_timestamp(snowflake_ms(source.id)),
            "edited_timestamp": (
                iso_timestamp(source.edited_ms) if source.edited_ms is not None else None
            ),
            "flags": source.flags,
            "mentions": [self.user_payload(u) for u in source.mentions],
            "mention_roles": [str(r) for r in source.mention_roles],
            "sticker_items": list(source.sticker_items),
            "components": [],
        }
        message_id = self.snowflakes.next()
        message = SimMessage(
            id=message_id,
            channel_id=channel.id,
            guild_id=channel.guild_id,
            author_id=author.id,
            content="",
            reference=reference,
            flags=FLAG_HAS_SNAPSHOT,
            snapshots=[{"message": snapshot}],
        )
        channel.messages.append(message)
        channel.by_id[message_id] = message
        self._dispatch_message("MESSAGE_CREATE", message)
        return message

    def delete_messages_bulk(self, channel_id: int, message_ids: Sequence[int]) -> None:
        """Remove several messages at once and announce MESSAGE_DELETE_BULK."""
        channel = self.channel(channel_id)
        for message_id in message_ids:
            message = self.message(channel_id, message_id)
            channel.messages.remove(message)
            del channel.by_id[message_id]
        data: Json = {"ids": [str(i) for i in message_ids], "channel_id": str(channel_id)}
        if channel.guild_id is not None:
            data["guild_id"] = str(channel.guild_id)
        self.outbox.append(
            Dispatch("MESSAGE_DELETE_BULK", data, channel.guild_id, INTENT_GUILD_MESSAGES)
        )

    def delete_channel(self, channel_id: int) -> None:
        """Delete a guild channel (CHANNEL_DELETE) or thread (THREAD_DELETE, ids only).

        A channel's threads go with it; Discord announces only the channel.
        """
        channel = self.channel(channel_id)
        if channel.guild_id is None:
            raise ApiError(400, 50003, "Cannot execute action on a DM channel")
        guild = self.guild(channel.guild_id)
        if channel.is_thread:
            data: Json = {
                "id": str(channel.id),
                "guild_id": str(channel.guild_id),
                "parent_id": str(channel.parent_id),
                "type": channel.type,
            }
            self.outbox.append(Dispatch("THREAD_DELETE", data, channel.guild_id, INTENT_GUILDS))
            guild.thread_ids = [t for t in guild.thread_ids if t != channel.id]
        else:
            payload = self.channel_payload(channel)
            self.outbox.append(Dispatch("CHANNEL_DELETE", payload, channel.guild_id, INTENT_GUILDS))
            guild.channel_ids = [c for c in guild.channel_ids if c != channel.id]
            for thread_id in [
                t for t in guild.thread_ids if self.channels[t].parent_id == channel.id
            ]:
                guild.thread_ids.remove(thread_id)
                del self.channels[thread_id]
        del self.channels[channel.id]

    def _poll_object(self, message_id: int, request: Mapping[str, Any]) -> Json:
        """Discord's poll object for a poll create request."""
        hours = int(request.get("duration", POLL_HOURS_DEFAULT))
        answers = list(request.get("answers", []))
        return {
            "question": {"text": str(request["question"]["text"])},
            "answers": [
                {"answer_id": n, "poll_media": dict(a.get("poll_media", {}))}
                for n, a in enumerate(answers, start=1)
            ],
            "expiry": iso_timestamp(snowflake_ms(message_id) + hours * 3_600_000),
            "allow_multiselect": bool(request.get("allow_multiselect", False)),
            "layout_type": int(request.get("layout_type", POLL_LAYOUT_DEFAULT)),
            "results": {"is_finalized": False, "answer_counts": []},
        }

    def bot_message_for_nonce(self, nonce: str | int) -> SimMessage | None:
        """The bot's earlier message sent with `nonce`, if it still exists."""
        message_id = self._bot_nonces.get(str(nonce))
        if message_id is None:
            return None
        for channel in self.channels.values():
            found = channel.by_id.get(message_id)
            if found is not None:
                return found
        return None

    def edit_message(
        self,
        channel_id: int,
        message_id: int,
        content: str,
        *,
        allowed_mentions: Mapping[str, Any] | None = None,
    ) -> SimMessage:
        """Change a message's content (mentions recomputed) and announce MESSAGE_UPDATE."""
        message = self.message(channel_id, message_id)
        message.content = content
        message.mentions, message.mention_roles, message.mention_everyone = self._parse_mentions(
            content, allowed_mentions
        )
        message.edited_ms = snowflake_ms(self.snowflakes.next())
        self._dispatch_message("MESSAGE_UPDATE", message)
        return message

    def delete_message(self, channel_id: int, message_id: int) -> None:
        """Remove a message and announce MESSAGE_DELETE."""
        channel = self.channel(channel_id)
        message = self.message(channel_id, message_id)
        channel.messages.remove(message)
        del channel.by_id[message_id]
        if channel.is_thread:
            channel.message_count = max(0, channel.message_count - 1)
        data: Json = {"id": str(message_id), "channel_id": str(channel_id)}
        if channel.guild_id is not None:
            data["guild_id"] = str(channel.guild_id)
        intent = INTENT_GUILD_MESSAGES if channel.guild_id is not None else INTENT_DIRECT_MESSAGES
        self.outbox.append(Dispatch("MESSAGE_DELETE", data, channel.guild_id, intent))

    def add_reaction(self, channel_id: int, message_id: int, user_id: int, emoji: str) -> bool:
        """Add `user_id`'s reaction; False (and no event) when it was already there."""
        message = self.message(channel_id, message_id)
        self.user(user_id)
        parsed = parse_emoji(emoji)
        users = message.reactions.setdefault(emoji, [])
        if user_id in users:
            return False
        users.append(user_id)
        data = self._reaction_event(message, user_id, parsed)
        data["message_author_id"] = str(message.author_id)
        data["burst_colors"] = []
        if message.guild_id is not None:
            data["member"] = self.member_payload(user_id, with_user=True)
        self.outbox.append(
            Dispatch("MESSAGE_REACTION_ADD", data, message.guild_id, _reaction_intent(message))
        )
        return True

    def remove_reaction(self, channel_id: int, message_id: int, user_id: int, emoji: str) -> bool:
        """Remove `user_id`'s reaction; False (and no event) when it was not there."""
        message = self.message(channel_id, message_id)
        parsed = parse_emoji(emoji)
        users = message.reactions.get(emoji, [])
        if user_id not in users:
            return False
        users.remove(user_id)
        if not users:
            del message.reactions[emoji]
        data = self._reaction_event(message, user_id, parsed)
        self.outbox.append(
            Dispatch("MESSAGE_REACTION_REMOVE", data, message.guild_id, _reaction_intent(message))
        )
        return True

    def typing(self, channel_id: int, user_id: int, unix_seconds: int) -> None:
        """Announce TYPING_START for `user_id` in `channel_id`."""
        channel = self.channel(channel_id)
        data: Json = {
            "channel_id": str(channel.id),
            "user_id": str(user_id),
            "timestamp": unix_seconds,
        }
        if channel.guild_id is not None:
            data["guild_id"] = str(channel.guild_id)
            data["member"] = self.member_payload(user_id, with_user=True)
            intent = INTENT_GUILD_MESSAGE_TYPING
        else:
            intent = INTENT_DIRECT_MESSAGE_TYPING
        self.outbox.append(Dispatch("TYPING_START", data, channel.guild_id, intent))

    def history(
        self,
        channel_id: int,
        *,
        before: int | None = None,
        after: int | None = None,
        around: int | None = None,
        limit: int = 50,
    ) -> list[SimMessage]:
        """Messages as GET /channels/{id}/messages returns them: newest first."""
        messages = self.channel(channel_id).messages
        if around is not None:
            older = [m for m in messages if m.id < around][-(limit // 2) :] if limit // 2 else []
            rest = [m for m in messages if m.id >= around][: limit - len(older)]
            chosen = older + rest
        elif before is not None:
            chosen = [m for m in messages if m.id < before][-limit:]
        elif after is not None:
            chosen = [m for m in messages if m.id > after][:limit]
        else:
            chosen = messages[-limit:]
        return chosen[::-1]

    # --------------------------------------------------------------- payloads

    def user_payload(self, user_id: int) -> Json:
        """The user object for `user_id`."""
        return self.user(user_id).payload()

    def bot_user_payload(self) -> Json:
        """The bot's own user object, as GET /users/@me and READY give it."""
        out = self.user_payload(self.bot_user_id)
        out.update(
            {"verified": True, "mfa_enabled": False, "email": None, "locale": "en-US", "bio": ""}
        )
        return out

    def member_payload(self, user_id: int, *, with_user: bool, guild_id: int | None = None) -> Json:
        """A guild member object for `user_id` (every user is a member of every guild); with
        `guild_id`, the user's roles in that guild (Discord never lists @everyone there)."""
        joined = iso_timestamp(snowflake_ms(user_id))
        roles = self.user(user_id).roles
        guild = self.guilds.get(guild_id) if guild_id is not None else None
        out: Json = {
            "roles": [str(r) for r in roles if guild is not None and r in guild.roles],
            "nick": self.user(user_id).nick,
            "avatar": None,
            "banner": None,
            "premium_since": None,
            "joined_at": joined,
            "deaf": False,
            "mute": False,
            "pending": False,
            "flags": 0,
            "communication_disabled_until": None,
        }
        if with_user:
            out["user"] = self.user_payload(user_id)
        return out

    def channel_payload(self, channel: SimChannel, *, in_guild_create: bool = False) -> Json:
        """The channel object Discord sends for `channel`."""
        last = channel.last_message_id
        last_id = str(last) if last is not None else None
        if channel.type == DM:
            assert channel.recipient_id is not None
            return {
                "id": str(channel.id),
                "type": DM,
                "last_message_id": last_id,
                "flags": 0,
                "recipients": [self.user_payload(channel.recipient_id)],
            }
        if channel.is_thread:
            created = iso_timestamp(snowflake_ms(channel.id))
            return {
                "id": str(channel.id),
                "type": channel.type,
                "guild_id": str(channel.guild_id),
                "parent_id": str(channel.parent_id),
                "owner_id": str(channel.owner_id),
                "name": channel.name,
                "last_message_id": last_id,
                "message_count": channel.message_count,
                "member_count": 1,
                "rate_limit_per_user": 0,
                "flags": 0,
                "total_message_sent": channel.total_message_sent,
                "thread_metadata": {
                    "archived": False,
                    "auto_archive_duration": channel.archive_minutes,
                    "archive_timestamp": created,
                    "locked": False,
                    "create_timestamp": created,
                },
            }
        out: Json = {
            "id": str(channel.id),
            "type": channel.type,
            "name": channel.name,
            "position": channel.position,
            "permission_overwrites": [],
            "parent_id": None,
            "topic": None,
            "nsfw": False,
            "rate_limit_per_user": 0,
            "last_message_id": last_id,
            "flags": 0,
        }
        if not in_guild_create:
            out["guild_id"] = str(channel.guild_id)
        return out

    def guild_create_payload(self, guild_id: int) -> Json:
        """GUILD_CREATE for `guild_id`: the guild with members, channels and active threads."""
        guild = self.guild(guild_id)
        everyone_role = {
            "id": str(guild.id),
            "name": "@everyone",
            "description": None,
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": 0,
            "permissions": EVERYONE_PERMISSIONS,
            "managed": False,
            "mentionable": False,
            "flags": 0,
        }
        # Without GUILD_PRESENCES Discord lists only the bot itself among the members.
        members = [self.member_payload(self.bot_user_id, with_user=True)]
        text_ids = [c for c in guild.channel_ids if c in self.channels]
        system_channel = str(text_ids[0]) if text_ids else None
        return {
            "id": str(guild.id),
            "name": guild.name,
            "icon": None,
            "splash": None,
            "discovery_splash": None,
            "banner": None,
            "description": None,
            "owner_id": str(guild.owner_id),
            "afk_channel_id": None,
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "premium_subscription_count": 0,
            "premium_progress_bar_enabled": False,
            "preferred_locale": "en-US",
            "features": [],
            "roles": [everyone_role, *(self.role_payload(r, n) for r, n in guild.roles.items())],
            "emojis": [],
            "stickers": [],
            "system_channel_id": system_channel,
            "system_channel_flags": 0,
            "rules_channel_id": None,
            "public_updates_channel_id": None,
            "safety_alerts_channel_id": None,
            "vanity_url_code": None,
            "application_id": None,
            "max_members": 500000,
            "max_video_channel_users": 25,
            "max_stage_video_channel_users": 50,
            "joined_at": iso_timestamp(snowflake_ms(guild.id)),
            "large": False,
            "unavailable": False,
            "lazy": True,
            "member_count": len(self.users),
            "voice_states": [],
            "members": members,
            "channels": [
                self.channel_payload(self.channels[c], in_guild_create=True) for c in text_ids
            ],
            "threads": [
                self.channel_payload(self.channels[t])
                for t in guild.thread_ids
                if t in self.channels
            ],
            "presences": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }

    def message_payload(self, message: SimMessage, *, gateway: bool) -> Json:
        """The message object: REST shape, or with the gateway's `guild_id`/`member` extras."""
        out: Json = {
            "type": message.type,
            "tts": message.tts,
            "timestamp": iso_timestamp(snowflake_ms(message.id)),
            "pinned": False,
            "mentions": [self._mention_payload(u, message, gateway) for u in message.mentions],
            "mention_roles": [str(r) for r in message.mention_roles],
            "mention_everyone": message.mention_everyone,
            "id": str(message.id),
            "flags": message.flags,
            "embeds": list(message.embeds),
            "edited_timestamp": (
                iso_timestamp(message.edited_ms) if message.edited_ms is not None else None
            ),
            "content": message.content,
            "components": [],
            "channel_id": str(message.channel_id),
            "author": self.user_payload(message.author_id),
            "attachments": list(message.attachments),
        }
        if message.nonce is not None:
            out["nonce"] = message.nonce
        if message.position is not None:
            out["position"] = message.position
        if message.reactions:
            out["reactions"] = [
                self._reaction_payload(emoji, users) for emoji, users in message.reactions.items()
            ]
        if message.snapshots:
            out["message_snapshots"] = [dict(s) for s in message.snapshots]
        if message.poll is not None:
            out["poll"] = dict(message.poll)
        if message.sticker_items:
            out["sticker_items"] = list(message.sticker_items)
        if message.reference is not None and message.reference.get("type") == REFERENCE_FORWARD:
            out["message_reference"] = dict(message.reference)
        elif message.reference is not None:
            out["message_reference"] = dict(message.reference)
            target_id = int(message.reference["message_id"])
            channel = self.channels.get(message.channel_id)
            target = channel.by_id.get(target_id) if channel is not None else None
            # A reply whose target was deleted carries `referenced_message: null`.
            out["referenced_message"] = (
                self._referenced_payload(target, gateway) if target is not None else None
            )
        if message.thread_id is not None and message.thread_id in self.channels:
            out["thread"] = self.channel_payload(self.channels[message.thread_id])
        if gateway and message.guild_id is not None:
            out["guild_id"] = str(message.guild_id)
            out["member"] = self.member_payload(
                message.author_id, with_user=False, guild_id=message.guild_id
            )
        return out

    # --------------------------------------------------------------- internals

    @staticmethod
    def role_payload(role_id: int, name: str) -> Json:
        """The role object Discord sends (in GUILD_CREATE and resolved interaction data)."""
        return {
            "id": str(role_id),
            "name": name,
            "description": None,
            "color": 0,
            "colors": {"primary_color": 0, "secondary_color": None, "tertiary_color": None},
            "hoist": False,
            "icon": None,
            "unicode_emoji": None,
            "position": 1,
            "permissions": "0",
            "managed": False,
            "mentionable": True,
            "flags": 0,
        }

    def _referenced_payload(self, message: SimMessage, gateway: bool) -> Json:
        inner = self.message_payload(message, gateway=False)
        # One level deep, as Discord does: the replied-to message does not nest its own target.
        inner.pop("referenced_message", None)
        if gateway and message.guild_id is not None:
            inner["member"] = self.member_payload(message.author_id, with_user=False)
        return inner

    def _mention_payload(self, user_id: int, message: SimMessage, gateway: bool) -> Json:
        out = self.user_payload(user_id)
        if gateway and message.guild_id is not None:
            out["member"] = self.member_payload(user_id, with_user=False)
        return out

    def _reaction_payload(self, emoji: str, users: list[int]) -> Json:
        mine = self.bot_user_id in users
        return {
            "emoji": parse_emoji(emoji),
            "count": len(users),
            "count_details": {"burst": 0, "normal": len(users)},
            "burst_colors": [],
            "me_burst": False,
            "burst_me": False,
            "me": mine,
            "burst_count": 0,
        }

    def _reaction_event(self, message: SimMessage, user_id: int, emoji: Json) -> Json:
        data: Json = {
            "user_id": str(user_id),
            "type": 0,
            "message_id": str(message.id),
            "emoji": emoji,
            "channel_id": str(message.channel_id),
            "burst": False,
        }
        if message.guild_id is not None:
            data["guild_id"] = str(message.guild_id)
        return data

    def _dispatch_message(self, name: str, message: SimMessage) -> None:
        data = self.message_payload(message, gateway=True)
        intent = INTENT_GUILD_MESSAGES if message.guild_id is not None else INTENT_DIRECT_MESSAGES
        # Discord keeps content for the bot's own messages, DMs and messages mentioning the bot.
        exempt = (
            message.author_id == self.bot_user_id
            or message.guild_id is None
            or self.bot_user_id in message.mentions
        )
        self.outbox.append(Dispatch(name, data, message.guild_id, intent, strippable=not exempt))

    def _parse_mentions(
        self, content: str, allowed: Mapping[str, Any] | None
    ) -> tuple[list[int], list[int], bool]:
        users: list[int] = []
        for match in _USER_MENTION.finditer(content):
            user_id = int(match.group(1))
            if user_id in self.users and user_id not in users:
                users.append(user_id)
        roles: list[int] = []
        for match in _ROLE_MENTION.finditer(content):
            role_id = int(match.group(1))
            if role_id not in roles:
                roles.append(role_id)
        everyone = _EVERYONE.search(content) is not None
        if allowed is None:
            return users, roles, everyone
        parse = set(allowed.get("parse") or ())
        allowed_users = {int(u) for u in allowed.get("users") or ()}
        allowed_roles = {int(r) for r in allowed.get("roles") or ()}
        users = [u for u in users if "users" in parse or u in allowed_users]
        roles = [r for r in roles if "roles" in parse or r in allowed_roles]
        return users, roles, everyone and "everyone" in parse

    def _attachment(self, channel_id: int, spec: str | Mapping[str, Any]) -> Json:
        """An attachment object as Discord sends it, its body kept to be served.

        A spec is a file name, or a mapping with `filename` and optionally `data` (bytes),
        `text`, `data_base64`, `size` (what Discord reports; defaults to the body's
        length), `content_type` (else guessed from the name; `None` sends none), `url` (to
        point elsewhere than where the simulator serves it), `width`,
        `height`, `description`. Without a body, one of the reported size is made up (a
        real tiny image for an image name).
        """
        attachment_id = self.snowflakes.next()
        info: Mapping[str, Any] = {"filename": spec} if isinstance(spec, str) else spec
        filename = str(info.get("filename", "file.bin"))
        content_type = (
            info["content_type"] if "content_type" in info else _guess_content_type(filename)
        )
        body = _attachment_body(info, filename)
        size = int(info.get("size", len(body) if body is not None else 1024))
        if body is None:
            body = _made_up_body(filename, size)
        self.attachment_bodies[attachment_id] = (body, content_type)
        url = str(
            info.get("url")
            or f"{self.attachment_base}/attachments/{channel_id}/{attachment_id}/{filename}"
        )
        proxy = url.replace("cdn.discordapp.com", "media.discordapp.net")
        out: Json = {
            "id": str(attachment_id),
            "filename": filename,
            "size": size,
            "url": url,
            "proxy_url": proxy,
        }
        if content_type is not None:
            out["content_type"] = content_type
        for key in ("width", "height", "description"):
            if key in info:
                out[key] = info[key]
        return out

    def attachment_body(self, attachment_id: int) -> tuple[bytes, str | None] | None:
        """The body and content type of an attachment, if it exists."""
        return self.attachment_bodies.get(attachment_id)


def _attachment_body(info: Mapping[str, Any], filename: str) -> bytes | None:
    if isinstance(info.get("data"), bytes | bytearray):
        return bytes(info["data"])
    if isinstance(info.get("text"), str):
        return str(info["text"]).encode()
    if isinstance(info.get("data_base64"), str):
        try:
            return base64.b64decode(info["data_base64"], validate=True)
        except (binascii.Error, ValueError):
            raise SimError(f"attachment {filename}: data_base64 is not base64") from None
    return None


def _made_up_body(filename: str, size: int) -> bytes:
    """A body for an attachment given only by name: a tiny real image for an image name."""
    if filename.lower().endswith(".png"):
        return tiny_png()
    return (b"simulated attachment body\n" * (size // 26 + 1))[: max(0, min(size, 1 << 20))]


def tiny_png(width: int = 2, height: int = 2, rgb: tuple[int, int, int] = (200, 40, 40)) -> bytes:
    """A small valid PNG of one colour (what a screenshot in a test looks like)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = b"\x00" + bytes(rgb) * width
    pixels = zlib.compress(row * height)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def parse_emoji(emoji: str) -> Json:
    """A reaction emoji as Discord's partial emoji object; 10014 when it is not an emoji.

    Unicode emoji are given as themselves, custom ones as `name:id` (Discord's URL form).
    """
    if not emoji or emoji.isspace():
        raise ApiError(400, 10014, "Unknown Emoji")
    if ":" in emoji:
        name, _, raw_id = emoji.partition(":")
        if not name or not raw_id.isdigit():
            raise ApiError(400, 10014, "Unknown Emoji")
        return {"id": raw_id, "name": name, "animated": False}
    if emoji.isascii():
        # Plain ASCII text is not a unicode emoji (keycap digits like 1️⃣ carry non-ASCII).
        raise ApiError(400, 10014, "Unknown Emoji")
    return {"id": None, "name": emoji}


def _reaction_intent(message: SimMessage) -> int:
    if message.guild_id is not None:
        return INTENT_GUILD_MESSAGE_REACTIONS
    return INTENT_DIRECT_MESSAGE_REACTIONS


def _guess_content_type(filename: str) -> str | None:
    suffix = filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    return {
        "png": "image/png",
        "jpg": "image/jpeg",
        "jpeg": "image/jpeg",
        "gif": "image/gif",
        "webp": "image/webp",
        "txt": "text/plain; charset=utf-8",
        "md": "text/markdown; charset=utf-8",
        "csv": "text/csv; charset=utf-8",
        "json": "application/json; charset=utf-8",
        "py": "text/x-python; charset=utf-8",
        "pdf": "application/pdf",
        "mp3": "audio/mpeg",
        "ogg": "audio/ogg",
    }.get(suffix)
