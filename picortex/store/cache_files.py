"""The context cache's directory: one JSON file per channel, its codec, atomic replacement,
and the index of files in write order. Blocking file I/O; the actor decides when.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from pathlib import Path
from typing import Final

import orjson

from picortex.core.history import ChannelHistory
from picortex.errors import CorruptCacheFile
from picortex.files import open_private, private_dir
from picortex.types import Attachment, Message, MessageReference, Snowflake, User

# Version of the channel file layout; a file of another version is treated as corrupt.
FILE_VERSION: Final = 1
# Suffix of a file being written; one left behind by a crash is deleted at start.
TEMP_SUFFIX: Final = ".tmp"


def channel_path(directory: Path, channel_id: Snowflake) -> Path:
    """Where a channel's file lives in the cache directory."""
    return directory / f"{channel_id}.json"


def read_channel(directory: Path, channel_id: Snowflake) -> ChannelHistory | None:
    """The channel's history from its file, or None when it has none.

    Raises:
        OSError: the file exists but cannot be read.
        CorruptCacheFile: the file is not a channel file of this version for this channel.
    """
    try:
        data = channel_path(directory, channel_id).read_bytes()
    except FileNotFoundError:
        return None
    return decode_channel(data, channel_id)


def remove_channel(directory: Path, channel_id: Snowflake) -> None:
    """Delete a channel's file; a missing one is fine."""
    with contextlib.suppress(FileNotFoundError):
        channel_path(directory, channel_id).unlink()


def index_directory(directory: Path) -> list[tuple[Snowflake, int]]:
    """(channel id, file size) of every channel file, least recently written first.

    Creates the directory (private) when missing and deletes temporary files a crash left
    behind: each is a write interrupted before its rename, so the real file is intact.

    Raises:
        OSError: the directory cannot be created or listed.
    """
    private_dir(directory)
    found: list[tuple[int, Snowflake, int]] = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.name.endswith(TEMP_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                continue
            stem, dot, ext = entry.name.partition(".")
            if ext != "json" or not dot or not stem.isdigit():
                continue
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            found.append((st.st_mtime_ns, int(stem), st.st_size))
    found.sort()
    return [(channel_id, size) for _, channel_id, size in found]


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new file.

    Writes a temporary file in the same directory, fsyncs it, renames it over `path`, then
    fsyncs the directory so the rename itself survives a power cut.
    """
    temp = path.with_name(path.name + TEMP_SUFFIX)
    fd = open_private(temp, os.O_WRONLY | os.O_TRUNC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        # Some file systems cannot fsync a directory; the rename has happened either way.
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def encode_channel(channel: ChannelHistory) -> bytes:
    """The file bytes of a channel: users once, then messages referring to them by index."""
    users: dict[User, int] = {}
    records: list[dict[str, object]] = []
    for m in channel.messages:
        author = users.setdefault(m.author, len(users))
        record: dict[str, object] = {"id": m.id, "author": author, "ts": m.timestamp}
        text = m.text  # forwards, polls and stickers are kept as the text they add
        if text:
            record["text"] = text
        if m.edited_timestamp is not None:
            record["edited"] = m.edited_timestamp
        if m.attachments:
            record["files"] = [[a.id, a.filename, a.size] for a in m.attachments]
        if m.message_reference is not None and m.message_reference.message_id is not None:
            record["reply_to"] = m.message_reference.message_id
        if m.type:
            record["type"] = m.type
        records.append(record)
    return orjson.dumps(
        {
            "v": FILE_VERSION,
            "channel_id": channel.id,
            "guild_id": channel.guild_id,
            "synced_to": channel.synced_to,
            "users": [[u.id, u.username, u.global_name, u.bot, u.nick] for u in users],
            "messages": records,
        }
    )


def decode_channel(data: bytes, channel_id: Snowflake) -> ChannelHistory:
    """Parse a channel file written by `encode_channel`.

    Raises:
        CorruptCacheFile: the bytes are not such a file for this channel.
    """
    try:
        doc = orjson.loads(data)
        if not isinstance(doc, dict) or doc.get("v") != FILE_VERSION:
            raise CorruptCacheFile("not a channel file of this version")
        if doc.get("channel_id") != channel_id:
            raise CorruptCacheFile("file belongs to another channel")
        guild_id = _opt_int(doc.get("guild_id"))
        users = [
            User(
                id=_int(u[0]),
                username=_str(u[1]),
                global_name=_opt_str(u[2]),
                bot=u[3] is True,
                # Files written before nicknames were kept have four fields.
                nick=_opt_str(u[4]) if len(u) > 4 else None,
            )
            for u in doc["users"]
        ]
        messages: list[Message] = []
        for r in doc["messages"]:
            reply_to = _opt_int(r.get("reply_to"))
            messages.append(
                Message(
                    id=_int(r["id"]),
                    channel_id=channel_id,
                    author=users[_int(r["author"])],
                    content=_str(r.get("text", "")),
                    timestamp=_str(r["ts"]),
                    guild_id=guild_id,
                    attachments=tuple(
                        Attachment(id=_int(a[0]), filename=_str(a[1]), size=_int(a[2]))
                        for a in r.get("files", ())
                    ),
                    message_reference=(
                        MessageReference(reply_to, channel_id, guild_id)
                        if reply_to is not None
                        else None
                    ),
                    edited_timestamp=_opt_str(r.get("edited")),
                    type=_int(r.get("type", 0)),
                )
            )
        if any(a.id >= b.id for a, b in itertools.pairwise(messages)):
            raise CorruptCacheFile("messages out of order")
        return ChannelHistory(
            channel_id,
            guild_id=guild_id,
            synced_to=_opt_int(doc.get("synced_to")),
            messages=messages,
        )
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        if isinstance(exc, CorruptCacheFile):
            raise
        raise CorruptCacheFile(f"{type(exc).__name__}: {exc}") from exc


def _int(value: object) -> int:
    if type(value) is not int:
        raise CorruptCacheFile(f"expected an integer, got {type(value).__name__}")
    return value


def _opt_int(value: object) -> int | None:
    return None if value is None else _int(value)


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise CorruptCacheFile(f"expected a string, got {type(value).__name__}")
    return value


def _opt_str(value: object) -> str | None:
    return None if value is None else _str(value)
