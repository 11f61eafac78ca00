"""Raw gateway and REST payloads into the value types of `picortex.types`.

Never raises: a payload that is not what Discord documents becomes a NormalizeError value
for the reader to log. It runs once per gateway event, so it does only the work it must.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from typing import Any, Final

from picortex.errors import PicortexError
from picortex.types import (
    Attachment,
    Channel,
    ChannelCreate,
    ChannelDelete,
    Event,
    GuildCreate,
    Interaction,
    InteractionOption,
    InteractionType,
    Message,
    MessageDelete,
    MessageDeleteBulk,
    MessageReference,
    MessageSnapshot,
    MessageUpdate,
    NormalizeError,
    Poll,
    ReactionEvent,
    Ready,
    Snowflake,
    ThreadListSync,
    User,
)

# Ids are stored in SQLite's signed 64-bit integers; real snowflakes stay far below this.
SNOWFLAKE_MAX: Final = 2**63 - 1
_EXCERPT: Final = reprlib.Repr()
_EXCERPT.maxstring = 60
_EXCERPT.maxother = 60
_EXCERPT.maxdict = 6
_EXCERPT.maxlist = 4
_EXCERPT.maxlevel = 2
# Users met recently, by (id, username, global_name, bot, nick, system) as sent: a User is
# immutable, so one object serves every message of its author. Cleared when full, which bounds
# the memory a flood of distinct authors can take; a few thousand covers a busy bot's people.
USER_CACHE_MAX: Final = 4096
_users: dict[tuple[str, str, str | None, bool, str | None, bool], User] = {}
# Channel and guild ids as sent, and their numbers: the same few hundred come back all the time.
ID_CACHE_MAX: Final = 4096
_ids: dict[str, Snowflake] = {}


class _Junk(PicortexError):
    """A payload field that is not what Discord documents."""


def _snowflake(value: object, what: str) -> Snowflake:
    # `type(...) is` on purpose: bool is an int, and "-1", "+1", " 1" or "1_0" pass int()
    # but are junk; isdigit() rejects every one of those cheaply.
    if type(value) is str:
        if value.isdigit():
            number = int(value)
            if number <= SNOWFLAKE_MAX:
                return number
    elif type(value) is int and 0 <= value <= SNOWFLAKE_MAX:
        return value
    raise _Junk(f"{what} is not a snowflake")


def _optional_snowflake(value: object, what: str) -> Snowflake | None:
    return None if value is None else _snowflake(value, what)


def _string(value: object, what: str) -> str:
    if type(value) is str:
        return value
    raise _Junk(f"{what} is not a string")


def _optional_string(value: object, what: str) -> str | None:
    if value is None or type(value) is str:
        return value
    raise _Junk(f"{what} is not a string")


def _object(value: object, what: str) -> dict[str, Any]:
    if type(value) is dict:
        return value
    raise _Junk(f"{what} is not an object")


def _array(value: object, what: str) -> list[Any]:
    if type(value) is list:
        return value
    raise _Junk(f"{what} is not an array")


def _member_roles(member: object) -> tuple[Snowflake, ...]:
    """The role ids of a guild member object; none when absent or malformed.

    Roles only ever grant access (`[access] allow_roles`), so a list we cannot read grants
    nothing rather than making the whole message junk.
    """
    if type(member) is not dict:
        return ()
    roles = member.get("roles")
    if not roles or type(roles) is not list:
        return ()
    found: list[Snowflake] = []
    for role in roles:
        try:
            found.append(_snowflake(role, "member.roles"))
        except _Junk:
            return ()
    return tuple(found)


def _nick(member: object, what: str) -> str | None:
    """The server nickname in a (partial) guild member object, if any."""
    if member is None:
        return None
    if type(member) is not dict:
        raise _Junk(f"{what}.member is not an object")
    nick = member.get("nick")
    if nick is None or type(nick) is str:
        return nick or None
    raise _Junk(f"{what}.member.nick is not a string")


def _user(value: object, what: str = "user", member: object = None) -> User:
    if type(value) is not dict:
        raise _Junk(f"{what} is not an object")
    data: dict[str, Any] = value
    get = data.get
    username = data["username"]
    global_name = get("global_name")
    bot = get("bot", False)
    system = get("system", False)
    user_id = get("id")
    nick = _nick(member, what)
    # Fast path: the usual exact types, and the same author as before. Exact types only, so
    # a junk value equal to a good one (1.0 or True for an id, 1 for a bot flag) never hits.
    if (
        type(user_id) is str
        and type(username) is str
        and type(bot) is bool
        and type(system) is bool
        and (global_name is None or type(global_name) is str)
    ):
        key = (user_id, username, global_name, bot, nick, system)
        user = _users.get(key)
        if user is None:
            user = User(_snowflake(user_id, f"{what}.id"), username, global_name, bot, nick, system)
            if len(_users) >= USER_CACHE_MAX:
                _users.clear()
            _users[key] = user
        return user
    if type(username) is not str:
        raise _Junk(f"{what}.username is not a string")
    if global_name is not None and type(global_name) is not str:
        raise _Junk(f"{what}.global_name is not a string")
    if type(bot) is not bool:
        raise _Junk(f"{what}.bot is not a boolean")
    if type(system) is not bool:
        raise _Junk(f"{what}.system is not a boolean")
    return User(_snowflake(data["id"], f"{what}.id"), username, global_name, bot, nick, system)


def _mention(value: object) -> User:
    # Each mentioned user carries its own partial `member` in a guild (with its nickname).
    member = value.get("member") if type(value) is dict else None
    return _user(value, "mention", member)


def _sticker_names(value: object, what: str) -> tuple[str, ...]:
    names = []
    for item in _array(value, what):
        name = _object(item, what).get("name")
        names.append(_string(name, f"{what}.name") if name is not None else "sticker")
    return tuple(names)


def _snapshot(value: object) -> MessageSnapshot:
    data = _object(_object(value, "message_snapshot").get("message"), "message_snapshot.message")
    get = data.get
    attachments = get("attachments")
    stickers = get("sticker_items")
    return MessageSnapshot(
        _string(get("content") or "", "message_snapshot.content"),
        tuple([_attachment(a) for a in _array(attachments, "message_snapshot.attachments")])
        if attachments
        else (),
        _sticker_names(stickers, "message_snapshot.sticker_items") if stickers else (),
    )


def _poll_text(media: object, what: str) -> str:
    data = _object(media, what)
    text = data.get("text")
    if text is not None:
        return _string(text, f"{what}.text")
    # Discord: text "should always be non-null, but please do not depend on that".
    emoji = data.get("emoji")
    name = _object(emoji, f"{what}.emoji").get("name") if emoji is not None else None
    return name if type(name) is str else ""


def _poll(value: object) -> Poll:
    data = _object(value, "poll")
    answers = data.get("answers")
    return Poll(
        _poll_text(data["question"], "poll.question"),
        tuple(
            [
                _poll_text(_object(a, "poll.answer").get("poll_media"), "poll.answer.poll_media")
                for a in _array(answers, "poll.answers")
            ]
        )
        if answers
        else (),
    )


def _attachment(value: object) -> Attachment:
    data = _object(value, "attachment")
    size = data.get("size", 0)
    if type(size) is not int:
        raise _Junk("attachment.size is not an integer")
    return Attachment(
        _snowflake(data["id"], "attachment.id"),
        _string(data.get("filename", ""), "attachment.filename"),
        size,
        _string(data.get("url", ""), "attachment.url"),
        _optional_string(data.get("content_type"), "attachment.content_type"),
    )


def _reference(value: object) -> MessageReference:
    data = _object(value, "message_reference")
    get = data.get
    kind = get("type", 0)
    if type(kind) is not int:
        raise _Junk("message_reference.type is not an integer")
    return MessageReference(
        _optional_snowflake(get("message_id"), "message_reference.message_id"),
        _optional_snowflake(get("channel_id"), "message_reference.channel_id"),
        _optional_snowflake(get("guild_id"), "message_reference.guild_id"),
        kind,
    )


def _referenced_author(value: object) -> User | None:
    author = _object(value, "referenced_message").get("author")
    return None if author is None else _user(author, "referenced_message.author")


def _known_snowflake(value: object, what: str) -> Snowflake:
    """`_snowflake` for ids that recur (channels, guilds), remembered as text."""
    if type(value) is str:
        number = _ids.get(value)
        if number is None:
            number = _snowflake(value, what)
            if len(_ids) >= ID_CACHE_MAX:
                _ids.clear()
            _ids[value] = number
        return number
    return _snowflake(value, what)


def _message(value: object, default_guild_id: Snowflake | None = None) -> Message:
    # The hot path of the gateway reader: every check of `_snowflake` and friends is kept,
    # in the same order, but the common case is inlined or served from the caches above.
    if type(value) is not dict:
        raise _Junk("payload is not an object")
    data: dict[str, Any] = value
    get = data.get
    content = get("content", "")
    if type(content) is not str:
        raise _Junk("content is not a string")
    timestamp = get("timestamp", "")
    if type(timestamp) is not str:
        raise _Junk("timestamp is not a string")
    guild_id = get("guild_id")
    mentions = get("mentions")
    mention_roles = get("mention_roles")
    mention_everyone = get("mention_everyone", False)
    if type(mention_everyone) is not bool:
        raise _Junk("mention_everyone is not a boolean")
    attachments = get("attachments")
    reference = get("message_reference")
    referenced = get("referenced_message")
    edited = get("edited_timestamp")
    if edited is not None and type(edited) is not str:
        raise _Junk("edited_timestamp is not a string")
    kind = get("type", 0)
    if type(kind) is not int:
        raise _Junk("type is not an integer")
    webhook_id = get("webhook_id")
    message_id = data["id"]
    if type(message_id) is str and message_id.isdigit():
        message_id = int(message_id)
        if message_id > SNOWFLAKE_MAX:
            raise _Junk("id is not a snowflake")
    else:
        message_id = _snowflake(message_id, "id")
    channel_id = _known_snowflake(data["channel_id"], "channel_id")
    author = _user(data["author"], "author", get("member"))
    snapshots = get("message_snapshots")
    poll = get("poll")
    stickers = get("sticker_items")
    # Positional arguments, in Message's field order: measurably cheaper on this hot path.
    return Message(
        message_id,
        channel_id,
        author,
        content,
        timestamp,
        default_guild_id if guild_id is None else _known_snowflake(guild_id, "guild_id"),
        # Most messages mention nobody and attach nothing: skip the loops then.
        tuple([_mention(u) for u in _array(mentions, "mentions")]) if mentions else (),
        tuple([_snowflake(r, "mention_roles") for r in _array(mention_roles, "mention_roles")])
        if mention_roles
        else (),
        mention_everyone,
        tuple([_attachment(a) for a in _array(attachments, "attachments")]) if attachments else (),
        None if reference is None else _reference(reference),
        # null means the replied-to message was deleted; absent means Discord did not look.
        None if referenced is None else _referenced_author(referenced),
        edited,
        kind,
        None if webhook_id is None else _snowflake(webhook_id, "webhook_id"),
        tuple([_snapshot(m) for m in _array(snapshots, "message_snapshots")]) if snapshots else (),
        None if poll is None else _poll(poll),
        _sticker_names(stickers, "sticker_items") if stickers else (),
        _member_roles(get("member")),
    )


def _message_update(value: object) -> MessageUpdate:
    data = _object(value, "payload")
    get = data.get
    author = get("author")
    attachments = get("attachments")
    return MessageUpdate(
        id=_snowflake(data["id"], "id"),
        channel_id=_snowflake(data["channel_id"], "channel_id"),
        guild_id=_optional_snowflake(get("guild_id"), "guild_id"),
        content=_optional_string(get("content"), "content"),
        edited_timestamp=_optional_string(get("edited_timestamp"), "edited_timestamp"),
        author=None if author is None else _user(author, "author"),
        attachments=None
        if attachments is None
        else tuple([_attachment(a) for a in _array(attachments, "attachments")]),
    )


def _message_delete(value: object) -> MessageDelete:
    data = _object(value, "payload")
    return MessageDelete(
        _snowflake(data["id"], "id"),
        _snowflake(data["channel_id"], "channel_id"),
        _optional_snowflake(data.get("guild_id"), "guild_id"),
    )


def _message_delete_bulk(value: object) -> MessageDeleteBulk:
    data = _object(value, "payload")
    return MessageDeleteBulk(
        tuple([_snowflake(i, "ids") for i in _array(data["ids"], "ids")]),
        _snowflake(data["channel_id"], "channel_id"),
        _optional_snowflake(data.get("guild_id"), "guild_id"),
    )


def _channel_delete(value: object) -> ChannelDelete:
    # THREAD_DELETE sends only id, guild_id, parent_id and type; CHANNEL_DELETE the channel.
    data = _object(value, "payload")
    get = data.get
    kind = data["type"]
    if type(kind) is not int:
        raise _Junk("type is not an integer")
    return ChannelDelete(
        _snowflake(data["id"], "id"),
        kind,
        _optional_snowflake(get("guild_id"), "guild_id"),
        _optional_snowflake(get("parent_id"), "parent_id"),
    )


def _emoji(value: object) -> str:
    data = _object(value, "emoji")
    name = _optional_string(data.get("name"), "emoji.name")
    emoji_id = _optional_snowflake(data.get("id"), "emoji.id")
    if emoji_id is not None:
        # Custom emoji are addressed as `name:id`; a deleted one may have lost its name.
        return f"{name or '_'}:{emoji_id}"
    if not name:
        raise _Junk("emoji has neither a name nor an id")
    return name


def _reaction(value: object, *, added: bool) -> ReactionEvent:
    data = _object(value, "payload")
    return ReactionEvent(
        added=added,
        user_id=_snowflake(data["user_id"], "user_id"),
        channel_id=_snowflake(data["channel_id"], "channel_id"),
        message_id=_snowflake(data["message_id"], "message_id"),
        emoji=_emoji(data["emoji"]),
        guild_id=_optional_snowflake(data.get("guild_id"), "guild_id"),
    )


def _reaction_add(value: object) -> ReactionEvent:
    return _reaction(value, added=True)


def _reaction_remove(value: object) -> ReactionEvent:
    return _reaction(value, added=False)


def _channel(value: object, default_guild_id: Snowflake | None = None) -> Channel:
    data = _object(value, "channel")
    get = data.get
    kind = data["type"]
    if type(kind) is not int:
        raise _Junk("channel.type is not an integer")
    guild_id = get("guild_id")
    return Channel(
        id=_snowflake(data["id"], "channel.id"),
        type=kind,
        # Channels inside GUILD_CREATE leave out their guild_id.
        guild_id=default_guild_id if guild_id is None else _snowflake(guild_id, "guild_id"),
        parent_id=_optional_snowflake(get("parent_id"), "channel.parent_id"),
        name=_optional_string(get("name"), "channel.name"),
    )


def _channel_create(value: object) -> ChannelCreate:
    return ChannelCreate(_channel(value))


def _ready(value: object) -> Ready:
    data = _object(value, "payload")
    guild_ids = tuple(
        [
            _snowflake(_object(g, "guild")["id"], "guild.id")
            for g in _array(data["guilds"], "guilds")
        ]
        if "guilds" in data
        else []
    )
    shard_value = data.get("shard")
    shard: tuple[int, int] | None = None
    if shard_value is not None:
        shard_list = _array(shard_value, "shard")
        if len(shard_list) != 2 or any(type(n) is not int for n in shard_list):
            raise _Junk("shard is not a pair of integers")
        shard = (shard_list[0], shard_list[1])
    return Ready(
        session_id=_string(data["session_id"], "session_id"),
        resume_gateway_url=_string(data["resume_gateway_url"], "resume_gateway_url"),
        user=_user(data["user"], "user"),
        guild_ids=guild_ids,
        shard=shard,
        application_id=_ready_application(data.get("application")),
    )


def _ready_application(value: object) -> Snowflake | None:
    """READY's `application.id`; None when absent or junk (a READY is never lost over it)."""
    if type(value) is not dict:
        return None
    try:
        return _snowflake(value.get("id"), "application.id")
    except _Junk:
        return None


def _guild_create(value: object) -> GuildCreate:
    data = _object(value, "payload")
    guild_id = _snowflake(data["id"], "id")
    unavailable = data.get("unavailable", False)
    if type(unavailable) is not bool:
        raise _Junk("unavailable is not a boolean")
    if unavailable:
        # An outage: Discord sends only the id now and the full guild later.
        return GuildCreate(id=guild_id, name="", unavailable=True)
    channels = data.get("channels")
    threads = data.get("threads")
    return GuildCreate(
        id=guild_id,
        name=_string(data.get("name", ""), "name"),
        channels=tuple([_channel(c, guild_id) for c in _array(channels, "channels")])
        if channels is not None
        else (),
        threads=tuple([_channel(t, guild_id) for t in _array(threads, "threads")])
        if threads is not None
        else (),
    )


def _thread_list_sync(value: object) -> ThreadListSync:
    data = _object(value, "payload")
    guild_id = _snowflake(data["guild_id"], "guild_id")
    threads = data.get("threads")
    return ThreadListSync(
        guild_id=guild_id,
        threads=tuple([_channel(t, guild_id) for t in _array(threads, "threads")])
        if threads is not None
        else (),
    )


# Subcommands nest at most two levels (group, subcommand) under the command.
_OPTION_DEPTH: Final = 3
_OPTION_VALUE_TYPES: Final = (str, int, float, bool)


def _options(value: object, depth: int = 0) -> tuple[InteractionOption, ...]:
    if value is None:
        return ()
    if depth >= _OPTION_DEPTH:
        raise _Junk("options are nested too deep")
    found: list[InteractionOption] = []
    for raw in _array(value, "options"):
        data = _object(raw, "option")
        kind = data.get("type")
        if type(kind) is not int:
            raise _Junk("option.type is not an integer")
        option_value = data.get("value")
        if option_value is not None and type(option_value) not in _OPTION_VALUE_TYPES:
            raise _Junk("option.value is not a string, number or boolean")
        found.append(
            InteractionOption(
                name=_string(data.get("name"), "option.name"),
                type=kind,
                value=option_value,
                options=_options(data.get("options"), depth + 1),
                focused=data.get("focused") is True,
            )
        )
    return tuple(found)


def _interaction(value: object) -> Interaction:
    data = _object(value, "payload")
    kind = data.get("type")
    if type(kind) is not int:
        raise _Junk("type is not an integer")
    guild_id = _optional_snowflake(data.get("guild_id"), "guild_id")
    member = data.get("member")
    if member is not None:
        # In a guild the user is inside `member` (a nickname may be set there too).
        member_data = _object(member, "member")
        base = _user(member_data.get("user"), "member.user")
        nick = _optional_string(member_data.get("nick"), "member.nick")
        user = User(base.id, base.username, nick or base.global_name, base.bot) if nick else base
    else:
        user = _user(data.get("user"), "user")
    channel_id = data.get("channel_id")
    if channel_id is None and data.get("channel") is not None:
        channel_id = _object(data["channel"], "channel").get("id")
    command = _object(data.get("data") or {}, "data")
    resolved = _object(command.get("resolved") or {}, "data.resolved")
    users = _object(resolved.get("users") or {}, "data.resolved.users")
    token = _string(data.get("token"), "token")
    if not token:
        raise _Junk("token is empty")
    return Interaction(
        id=_snowflake(data.get("id"), "id"),
        application_id=_snowflake(data.get("application_id"), "application_id"),
        type=kind,
        token=token,
        channel_id=_snowflake(channel_id, "channel_id"),
        user=user,
        guild_id=guild_id,
        command_name=_string(command.get("name", ""), "data.name")
        if kind
        in (InteractionType.APPLICATION_COMMAND, InteractionType.APPLICATION_COMMAND_AUTOCOMPLETE)
        else "",
        options=_options(command.get("options")),
        resolved_users=tuple(_user(u, "data.resolved.users[]") for u in users.values()),
        member_roles=_member_roles(member),
    )


_NORMALIZERS: Final[dict[str, Callable[[object], Event]]] = {
    "MESSAGE_CREATE": _message,
    "MESSAGE_UPDATE": _message_update,
    "MESSAGE_DELETE": _message_delete,
    "MESSAGE_DELETE_BULK": _message_delete_bulk,
    "CHANNEL_DELETE": _channel_delete,
    "THREAD_DELETE": _channel_delete,
    "MESSAGE_REACTION_ADD": _reaction_add,
    "MESSAGE_REACTION_REMOVE": _reaction_remove,
    "READY": _ready,
    "GUILD_CREATE": _guild_create,
    "THREAD_CREATE": _channel_create,
    "CHANNEL_CREATE": _channel_create,
    # An un-archived thread arrives as THREAD_UPDATE; both updates keep the registry current.
    "THREAD_UPDATE": _channel_create,
    "CHANNEL_UPDATE": _channel_create,
    "THREAD_LIST_SYNC": _thread_list_sync,
    "INTERACTION_CREATE": _interaction,
}

HANDLED_EVENTS: Final = frozenset(_NORMALIZERS)


def _error(event: str, exc: Exception, data: object) -> NormalizeError:
    if isinstance(exc, _Junk):
        reason = str(exc)
    elif isinstance(exc, KeyError):
        reason = f"missing field {exc.args[0]!r}" if exc.args else "missing field"
    else:
        reason = f"{type(exc).__name__}: {exc}"
    if type(data) is dict and "token" in data:
        # An interaction's token is a secret: it never reaches an error or a log line.
        data = {**data, "token": "[redacted]"}
    try:
        excerpt = _EXCERPT.repr(data)
    except Exception:  # a pathological object must not break the error path itself
        excerpt = f"<{type(data).__name__}>"
    return NormalizeError(event=event, reason=reason, excerpt=excerpt)


def normalize(event_name: str, data: object) -> Event | None:
    """The event for one gateway dispatch; None for event types picortex ignores.

    Never raises: junk becomes a NormalizeError naming what was wrong.
    """
    normalizer = _NORMALIZERS.get(event_name)
    if normalizer is None:
        return None
    try:
        return normalizer(data)
    except Exception as exc:  # junk of any shape is reported, never raised into the reader
        return _error(event_name, exc, data)


def message_from_payload(
    data: object, *, guild_id: Snowflake | None = None
) -> Message | NormalizeError:
    """A message object (gateway or REST history) as a Message, or a NormalizeError.

    Messages fetched over REST carry no guild_id: pass the channel's `guild_id` so a guild
    message is not mistaken for a DM.
    """
    try:
        return _message(data, guild_id)
    except Exception as exc:  # see normalize()
        return _error("MESSAGE_CREATE", exc, data)
