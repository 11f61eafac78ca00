"""Which attachments reach the model, and how (SPEC 16).

Images (png, jpeg, gif, webp by the attachment's `content_type`, else its extension) go as
image blocks, at most MAX_IMAGES per message and in all, the request's own first, then the
newest of the recent conversation; text files (plain text, markdown, csv, json, source
code) up to MAX_TEXT_BYTES are inlined; everything else is named with its size. Bodies are
fetched only from Discord's attachment hosts (or the configured API's own host, where the
simulator serves them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, Literal
from urllib.parse import urlsplit

import attrs

from picortex.types import Attachment, Message, Snowflake

# Anthropic's Messages API takes these image types; at most 5 MB each per its docs.
IMAGE_TYPES: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
IMAGE_EXTENSIONS: Final = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
}
MAX_IMAGES: Final = 5
# A Discord message carries at most 10 attachments: a request merged from several messages
# (SPEC 5 step 4) reads no more files than one message could bring (SPEC 9).
MAX_REQUEST_FILES: Final = 10
MAX_IMAGE_BYTES: Final = 5 * 1024 * 1024
# A text file is inlined whole or not at all: 100 KB is about 25k tokens, a fair share of
# one answer's budget.
MAX_TEXT_BYTES: Final = 100 * 1024
# Where Discord serves attachment bodies (its CDN and its media proxy).
DISCORD_ATTACHMENT_HOSTS: Final = frozenset({"cdn.discordapp.com", "media.discordapp.net"})
TEXT_TYPES: Final = frozenset(
    {
        "application/json",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/javascript",
        "application/x-sh",
        "application/sql",
    }
)
TEXT_EXTENSIONS: Final = frozenset(
    [
        "txt",
        "md",
        "markdown",
        "rst",
        "csv",
        "tsv",
        "json",
        "jsonl",
        "xml",
        "yaml",
        "yml",
        "toml",
        "ini",
        "cfg",
        "conf",
        "log",
        "diff",
        "patch",
        "py",
        "pyi",
        "js",
        "mjs",
        "cjs",
        "ts",
        "tsx",
        "jsx",
        "java",
        "kt",
        "kts",
        "scala",
        "go",
        "rs",
        "rb",
        "php",
        "swift",
        "c",
        "h",
        "cc",
        "cpp",
        "cxx",
        "hpp",
        "cs",
        "fs",
        "m",
        "mm",
        "sh",
        "bash",
        "zsh",
        "fish",
        "ps1",
        "bat",
        "sql",
        "html",
        "htm",
        "css",
        "scss",
        "sass",
        "less",
        "vue",
        "svelte",
        "lua",
        "r",
        "pl",
        "pm",
        "hs",
        "ex",
        "exs",
        "erl",
        "clj",
        "dart",
        "jl",
        "nim",
        "zig",
        "tex",
        "gradle",
        "make",
        "dockerfile",
        "proto",
        "graphql",
    ]
)

Kind = Literal["image", "text", "other"]


@attrs.frozen
class Planned:
    """One attachment and what happens to it.

    `skip` is None when its body is fetched; else a short reason it is only named.
    `own` is True for the request's own messages (their text files are inlined).
    """

    attachment: Attachment
    kind: Kind
    media_type: str | None
    author: str
    own: bool
    skip: str | None = None


def _extension(filename: str) -> str:
    name = filename.rsplit("/", 1)[-1].lower()
    return name.rsplit(".", 1)[-1] if "." in name else name


def _content_type(attachment: Attachment) -> str:
    return (attachment.content_type or "").split(";", 1)[0].strip().lower()


def kind_of(attachment: Attachment) -> tuple[Kind, str | None]:
    """The attachment's kind, and for an image its media type.

    The `content_type` Discord sends decides when there is one; else the extension.
    """
    content_type = _content_type(attachment)
    extension = _extension(attachment.filename)
    if content_type:
        if content_type in IMAGE_TYPES:
            return "image", content_type
        if content_type.startswith("text/") or content_type in TEXT_TYPES:
            return "text", None
        if content_type == "application/octet-stream" and extension in TEXT_EXTENSIONS:
            return "text", None  # Discord's fallback type for files it does not know
        return "other", None
    if extension in IMAGE_EXTENSIONS:
        return "image", IMAGE_EXTENSIONS[extension]
    if extension in TEXT_EXTENSIONS:
        return "text", None
    return "other", None


def plan(
    request: Sequence[Message],
    context: Sequence[Message],
    *,
    trusted: Iterable[Snowflake] = (),
) -> list[Planned]:
    """What to do with the attachments of the request's messages and its context.

    The request's images come first (at most MAX_IMAGES per message), then images of the
    recent `context` messages, newest first, from `trusted` authors only, until MAX_IMAGES
    in all. Context text files and other files are not listed: the context lines name them.
    Of the request's own files, at most MAX_REQUEST_FILES are read, however many messages
    it merges.
    """
    trusted_ids = set(trusted)
    planned: list[Planned] = []
    images = 0
    read = 0  # the request's own files whose bodies are fetched
    too_many = f"at most {MAX_REQUEST_FILES} files are read per request"
    for message in request:
        in_message = 0
        for attachment in message.attachments:
            kind, media_type = kind_of(attachment)
            entry = Planned(attachment, kind, media_type, message.author.display_name, True)
            if kind == "image":
                if attachment.size > MAX_IMAGE_BYTES:
                    entry = attrs.evolve(entry, skip=f"larger than {_size(MAX_IMAGE_BYTES)}")
                elif in_message >= MAX_IMAGES or images >= MAX_IMAGES:
                    entry = attrs.evolve(entry, skip=f"at most {MAX_IMAGES} images are sent")
                elif read >= MAX_REQUEST_FILES:
                    entry = attrs.evolve(entry, skip=too_many)
                else:
                    in_message += 1
                    images += 1
                    read += 1
            elif kind == "text":
                if attachment.size > MAX_TEXT_BYTES:
                    entry = attrs.evolve(entry, skip=f"larger than {_size(MAX_TEXT_BYTES)}")
                elif read >= MAX_REQUEST_FILES:
                    entry = attrs.evolve(entry, skip=too_many)
                else:
                    read += 1
            else:
                entry = attrs.evolve(entry, skip="not a kind of file the model reads")
            planned.append(entry)
    own_ids = {m.id for m in request}
    for message in sorted(context, key=lambda m: m.id, reverse=True):
        if images >= MAX_IMAGES:
            break
        if message.id in own_ids or message.author.id not in trusted_ids:
            continue
        in_message = 0
        for attachment in message.attachments:
            kind, media_type = kind_of(attachment)
            if kind != "image" or attachment.size > MAX_IMAGE_BYTES:
                continue
            if in_message >= MAX_IMAGES or images >= MAX_IMAGES:
                break
            planned.append(
                Planned(attachment, kind, media_type, message.author.display_name, False)
            )
            in_message += 1
            images += 1
    return planned


def url_allowed(url: str, api_base: str) -> bool:
    """True when `url` is on Discord's attachment hosts (https) or the API base's host.

    The API base's host counts whatever the port: a self-hosted gateway or the simulator may
    serve files beside its API, and that host is trusted with the token anyway. Over an https
    API base, plain http is refused: a file on the way could be read or changed by anyone.
    """
    try:
        target = urlsplit(url)
        base = urlsplit(api_base)
        target_port = target.port
    except ValueError:
        return False
    host = (target.hostname or "").lower()
    if not host or target.scheme not in ("http", "https"):
        return False
    if target.scheme == "https" and host in DISCORD_ATTACHMENT_HOSTS and target_port in (None, 443):
        return True
    if base.scheme.lower() == "https" and target.scheme != "https":
        return False
    return host == (base.hostname or "").lower()


def sniff_image(data: bytes) -> str | None:
    """The media type the bytes really are (png, jpeg, gif, webp), else None.

    The model refuses an image whose declared type does not match its bytes.
    """
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def decode_text(data: bytes) -> str | None:
    """A text file's content, or None when the bytes are not text."""
    if b"\x00" in data[:4096]:
        return None
    text = data.decode("utf-8", errors="replace")
    if text.count("\ufffd") > max(8, len(text) // 100):
        return None
    return text


def describe(attachment: Attachment, reason: str) -> str:
    """One line naming a file the model does not get, with its size and why."""
    kind = _content_type(attachment) or _extension(attachment.filename) or "file"
    return f"- {attachment.filename} ({kind}, {_size(attachment.size)}): {reason}"


def inline_text(filename: str, text: str) -> str:
    """A text file as a block of the prompt."""
    fence = "````" if "```" in text else "```"
    return f"File {filename}:\n{fence}\n{text.rstrip()}\n{fence}"


def _size(size: int) -> str:
    if size >= 1024 * 1024:
        return f"{size / (1024 * 1024):.1f} MB"
    if size >= 1024:
        return f"{size / 1024:.0f} KB"
    return f"{size} bytes"
