"""What the SPEC says, written down once for tests: numbers and checks taken from its text,
never from the product's own constants or functions (a test must not agree with a bug)."""

from __future__ import annotations

import re
from typing import Final

# SPEC 4: "Replies over 2000 characters are split at line boundaries without breaking code
# blocks."
DISCORD_MESSAGE_LIMIT: Final = 2000
# SPEC 16: "the reply is edited as it grows, at most once per 1.5 s".
STREAM_EDIT_INTERVAL_SECONDS: Final = 1.5

FENCE: Final = "```"
# Room a part may give to fences it adds (a reopening line with its language, a closing one).
FENCE_ROOM: Final = 32
_REOPEN: Final = re.compile(r"```[A-Za-z0-9_+\-.#]*\n")


def check_reply_parts(answer: str, parts: list[str]) -> None:
    """Assert that `parts` are `answer` posted as SPEC 4 says.

    Each part fits in a message and renders on its own (its code fences pair up); a code
    block cut between two parts is closed at the end of one and reopened (with its language)
    at the start of the next; without those added fences the parts are the answer, cut only
    right after a newline, unless the line is too long for any message.
    """
    assert parts, "no parts"
    at = 0  # where in `answer` the next part's own text starts
    for index, part in enumerate(parts):
        assert 0 < len(part) <= DISCORD_MESSAGE_LIMIT, (index, len(part))
        assert part.count(FENCE) % 2 == 0, f"part {index} breaks a code block"
        inside = answer[:at].count(FENCE) % 2 == 1
        body = part
        if inside:
            reopened = _REOPEN.match(body)
            assert reopened, f"part {index} does not reopen the code block it continues"
            body = body[reopened.end() :]
        if index == len(parts) - 1:
            assert answer[at:] == body, f"the last part is not the end of the answer ({index})"
            return
        # A part that ends inside a code block closes it with a fence of its own.
        for close in ("", FENCE, "\n" + FENCE):
            if not body.endswith(close):
                continue
            own = body[: len(body) - len(close)]
            end = at + len(own)
            if answer[at:end] == own and (answer[:end].count(FENCE) % 2 == 1) == bool(close):
                break
        else:
            raise AssertionError(f"part {index} is not the answer's next text")
        if not own.endswith("\n"):
            start = answer.rfind("\n", 0, end) + 1
            stop = answer.find("\n", end)
            line = answer[start : len(answer) if stop < 0 else stop + 1]
            too_long = len(line) > DISCORD_MESSAGE_LIMIT - FENCE_ROOM
            assert too_long, f"part {index} is not cut at a line boundary"
        at = end
