"""Attachments of a request as model content (SPEC 16): fetched, checked, described.

`core.attachments` decides which files are sent; this fetches their bodies through the REST
client (Discord's hosts only, capped, with a deadline), all at once, and turns them into
image blocks and prompt text. A file that cannot be fetched is named instead, never fatal.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import attrs
import trio

from picortex.core import attachments as core
from picortex.core.llm import ContentPart, ImagePart, TextPart
from picortex.types import Message, Snowflake

logger = logging.getLogger(__name__)

# Every download of one request together: a slow CDN must not hold an answer for long.
FETCH_DEADLINE_SECONDS: Final = 20.0

Download = Callable[..., Awaitable[bytes]]


@attrs.frozen
class RequestFiles:
    """What a request's attachments add: image blocks (each after a caption) and prompt text."""

    images: tuple[ContentPart, ...] = ()
    text: str = ""
    image_count: int = 0

    @property
    def empty(self) -> bool:
        """True when there is nothing to add."""
        return not self.images and not self.text


async def gather(
    download: Download,
    request: Sequence[Message],
    context: Sequence[Message],
    trusted: Sequence[Snowflake],
) -> RequestFiles:
    """Fetch what `core.attachments.plan` picks and build the request's content.

    Args:
        download: the REST client's `download_attachment(url, max_bytes=...)`.
        request: the request's own messages (the trigger and its follow-ups).
        context: the recent messages before it.
        trusted: authors whose images in the context may be sent.
    """
    planned = core.plan(request, context, trusted=trusted)
    if not planned:
        return RequestFiles()
    bodies: dict[int, bytes | str] = {}

    async def fetch(index: int, entry: core.Planned) -> None:
        cap = core.MAX_IMAGE_BYTES if entry.kind == "image" else core.MAX_TEXT_BYTES
        try:
            bodies[index] = await download(entry.attachment.url, max_bytes=cap)
        except Exception as exc:  # one sentence for the prompt; the answer goes on
            logger.info("attachment %s not fetched: %s", entry.attachment.filename, exc)
            bodies[index] = str(exc) or "download failed"

    with trio.move_on_after(FETCH_DEADLINE_SECONDS):
        async with trio.open_nursery() as nursery:
            for index, entry in enumerate(planned):
                if entry.skip is None:
                    nursery.start_soon(fetch, index, entry)
    images: list[ContentPart] = []
    lines: list[str] = []
    inlined: list[str] = []
    for index, entry in enumerate(planned):
        attachment = entry.attachment
        reason = entry.skip
        body = bodies.get(index)
        if reason is None and body is None:
            reason = "download timed out"
        elif reason is None and isinstance(body, str):
            reason = body
        elif reason is None and isinstance(body, bytes):
            if entry.kind == "image":
                media_type = core.sniff_image(body)
                if media_type is None:
                    reason = "not a readable png, jpeg, gif or webp image"
                else:
                    whose = "in the request" if entry.own else "earlier in the conversation"
                    caption = f"Image {attachment.filename}, sent by {entry.author} {whose}:"
                    images.append(TextPart(caption))
                    images.append(ImagePart(media_type, base64.b64encode(body).decode()))
                    continue
            else:
                text = core.decode_text(body)
                if text is None:
                    reason = "not text"
                else:
                    inlined.append(core.inline_text(attachment.filename, text))
                    continue
        if entry.own:
            lines.append(core.describe(attachment, reason or "not sent"))
    parts: list[str] = []
    if inlined:
        parts.append("Attached files:\n\n" + "\n\n".join(inlined))
    if lines:
        parts.append("Attachments not shown to you (name, type, size, why):\n" + "\n".join(lines))
    return RequestFiles(tuple(images), "\n\n".join(parts), len(images) // 2)
