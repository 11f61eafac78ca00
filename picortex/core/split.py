"""Reply splitting (SPEC 4): Discord-sized chunks cut at line boundaries.

A code block spanning a cut is closed and reopened with its language, so each chunk renders.
"""

from __future__ import annotations

import re
from typing import Final

import attrs

DISCORD_LIMIT: Final = 2000  # characters in one Discord message
FENCE: Final = "```"
# Below this, the fences we add could leave no room for content.
MIN_LIMIT: Final = 16
# A hard cut looks back this far (as a share of the room) for a space to cut at.
_SPACE_LOOKBACK: Final = 0.5
# Discord reads a language tag only when it looks like one and ends the fence's line.
_LANGUAGE: Final = re.compile(r"[A-Za-z0-9_+\-.#]+")


@attrs.frozen
class Chunk:
    """One chunk: the original text in `body`, plus the fences added around it."""

    body: str
    reopen: str = ""  # a fence line reopening the code block the previous chunk closed
    close: str = ""  # a fence closing a code block that continues in the next chunk

    @property
    def text(self) -> str:
        """The message to post."""
        return self.reopen + self.body + self.close


def _toggles(piece: str) -> bool:
    """True when `piece` opens or closes a code block (an odd number of fences)."""
    return piece.count(FENCE) % 2 == 1


def _language(piece: str) -> str:
    """The language tag after the last fence of a piece that opens a block, or ``""``.

    Only a whole line counts: a tag cut off by a hard split is not a tag.
    """
    if not piece.endswith("\n"):
        return ""
    tail = piece[piece.rfind(FENCE) + len(FENCE) : -1]
    return tail if _LANGUAGE.fullmatch(tail) else ""


def _close_for(body_end: str) -> str:
    return FENCE if body_end.endswith("\n") else "\n" + FENCE


def _lines(text: str) -> list[str]:
    """Lines with their `\\n` kept; only `\\n` ends a line (as in Discord)."""
    parts = text.split("\n")
    out = [p + "\n" for p in parts[:-1]]
    if parts[-1]:
        out.append(parts[-1])
    return out


class _Builder:
    """Greedy packer: adds pieces to the open chunk while the chunk still fits."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[Chunk] = []
        self.in_block = False
        self.opened_last = False  # the last piece added opened a code block
        self.language = ""
        self.reopen = ""
        self.body: list[str] = []
        self.size = 0

    def _reopen_line(self) -> str:
        # A long tag would eat the room it is meant to decorate; plain fences render fine.
        if len(self.language) > self.limit // 8:
            return FENCE + "\n"
        return FENCE + self.language + "\n"

    def _close_len(self, piece: str) -> int:
        return len(_close_for(piece)) if self.in_block != _toggles(piece) else 0

    def room_for(self, piece: str) -> int:
        """Characters left in the open chunk if `piece` were added (negative: it does not fit)."""
        return self.limit - len(self.reopen) - self.size - len(piece) - self._close_len(piece)

    def needs_cut(self, piece: str) -> bool:
        """True when `piece` would not fit even alone in the next chunk."""
        reopen = len(self._reopen_line()) if self.in_block else 0
        return len(piece) + self._close_len(piece) > self.limit - reopen

    def add(self, piece: str) -> None:
        toggled = _toggles(piece)
        if toggled:
            if not self.in_block:
                self.language = _language(piece)
            self.in_block = not self.in_block
        self.opened_last = toggled and self.in_block
        self.body.append(piece)
        self.size += len(piece)

    def finish(self, *, last: bool = False) -> None:
        if not self.body:
            return
        carry = None
        if self.opened_last and len(self.body) > 1 and not last:
            # Do not end a chunk with an empty block: move its opening line to the next one.
            carry = self.body.pop()
            self.size -= len(carry)
            self.in_block = False
        body = "".join(self.body)
        close = _close_for(body) if self.in_block else ""
        self.chunks.append(Chunk(body, self.reopen, close))
        self.reopen = self._reopen_line() if self.in_block else ""
        self.body = []
        self.size = 0
        self.opened_last = False
        if carry is not None:
            self.add(carry)

    def cut(self, line: str) -> int:
        """How much of a too-long `line` fits in the open chunk (0: none)."""
        room = self.limit - len(self.reopen) - self.size
        if room < 1:
            return 0
        cut = _cut_point(line, room)
        if self.room_for(line[:cut]) >= 0:
            return cut
        room -= len("\n" + FENCE)  # the piece leaves a block open: keep room to close it
        return _cut_point(line, room) if room >= 1 else 0


def _cut_point(line: str, room: int) -> int:
    """Where to cut `line` so the first part has at most `room` characters (room >= 1)."""
    cut = room
    # Never cut inside a run of backticks: that would break a fence in two.
    while 0 < cut < len(line) and line[cut - 1] == "`" and line[cut] == "`":
        cut -= 1
    if cut == 0:
        cut = room
    space = line.rfind(" ", 0, cut)
    if space >= 0 and space + 1 >= cut * _SPACE_LOOKBACK and space + 1 < cut:
        cut = space + 1
    return cut


def split_chunks(text: str, limit: int = DISCORD_LIMIT) -> list[Chunk]:
    """Split `text` into chunks whose `text` is at most `limit` characters.

    The bodies joined give back `text` exactly; empty text gives no chunks. A single line
    longer than a chunk is cut hard (at a space when one is near, never inside a fence).

    Raises:
        ValueError: `limit` is below MIN_LIMIT.
    """
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, not {limit}")
    builder = _Builder(limit)
    for line in _lines(text):
        rest = line
        while rest:
            if builder.room_for(rest) >= 0:
                builder.add(rest)
                break
            if builder.body and not builder.needs_cut(rest):
                builder.finish()
                continue
            # Too long for any chunk: fill the open chunk with its head, go on with the tail.
            cut = builder.cut(rest)
            if cut == 0:
                builder.finish()
                continue
            builder.add(rest[:cut])
            builder.finish()
            rest = rest[cut:]
    builder.finish(last=True)
    return builder.chunks


def split_reply(text: str, limit: int = DISCORD_LIMIT) -> list[str]:
    """The messages to post for `text`: each non-empty, each at most `limit` characters."""
    return [chunk.text for chunk in split_chunks(text, limit)]
