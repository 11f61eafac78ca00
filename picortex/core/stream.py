"""What a streamed reply writes next (SPEC 16): posts and edits toward the growing answer.

A streamed answer is shown as one or more Discord messages: the first is posted once the
first sentence is ready, then edited as the text grows; past 2000 characters the answer
continues in a new message, split as `core.split` splits any reply (code blocks closed and
reopened). Edits are paced by the caller; this module only says which writes bring what is
shown closer to the text, at most one edit at a time, so no two edits are ever sent together.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final

import attrs

from picortex.core.split import DISCORD_LIMIT, split_reply

# Discord's own pace is 5 edits per 5 s per channel; 1.5 s keeps a reply well inside it
# and still reads as live.
EDIT_INTERVAL_SECONDS: Final = 1.5
# The first post waits for a full sentence, but not for ever: a long run-on first sentence
# (a list, a code block) is shown once this much has arrived.
FIRST_POST_MAX_CHARS: Final = 200
# The line added to a reply whose stream stopped midway.
CUT_NOTICE: Final = "*(The answer was cut off: the model stopped before it finished.)*"

# A sentence ends at . ! ? (or …) followed by white space, or at a line break.
_SENTENCE_END: Final = re.compile(r"[.!?\u2026][\"')\]]*\s|\n")


def first_sentence_ready(text: str) -> bool:
    """True when `text` holds a whole sentence (or enough to show without one)."""
    if len(text) >= FIRST_POST_MAX_CHARS:
        return True
    stripped = text.lstrip()
    return bool(stripped) and _SENTENCE_END.search(stripped) is not None


@attrs.frozen
class Write:
    """One request: post message `index` (`new`), or edit it, to show `text`."""

    index: int
    text: str
    new: bool


def next_writes(shown: Sequence[str], text: str, *, can_edit: bool) -> list[Write]:
    """The writes that bring the messages `shown` closer to showing `text`.

    New messages are posted as soon as the text needs them; of the messages already posted,
    only the first that differs is edited, and only when `can_edit` (pacing is the
    caller's), before the posts, so the earlier message is complete first. Calling again
    after the writes converges: the result is empty once `shown` equals the split text.
    """
    wanted = split_reply(text, DISCORD_LIMIT)
    writes: list[Write] = []
    if can_edit:
        for index, (have, want) in enumerate(zip(shown, wanted, strict=False)):
            if have != want:
                writes.append(Write(index, want, new=False))
                break
    writes.extend(Write(index, wanted[index], new=True) for index in range(len(shown), len(wanted)))
    return writes


def is_settled(shown: Sequence[str], text: str) -> bool:
    """True when the messages show exactly `text` (as split), nothing more or less.

    A message once posted is never deleted, so a text that now needs fewer messages than
    were posted keeps the extra ones: only the first `len(split)` are compared then.
    """
    wanted = split_reply(text, DISCORD_LIMIT)
    return list(shown[: len(wanted)]) == wanted and len(shown) >= len(wanted)


def with_cut_notice(text: str) -> str:
    """What a cut stream leaves: the text written so far and one line saying it was cut."""
    body = text.rstrip()
    return f"{body}\n{CUT_NOTICE}" if body else CUT_NOTICE
