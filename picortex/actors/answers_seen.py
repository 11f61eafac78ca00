"""The bot's own replies seen on the gateway, by the message each answers (SPEC 5.4, 12).

A request replayed after a restart may have been answered by the killed process already: its
reply comes back in the replay, before the messages sent after it. The router notes each
reply as it routes it (in gateway order, so before any later message reaches a mailbox); the
channel actor asks here whether a message was sent after its request's answer, by Discord's
clock, so that it does not join the request being answered again.
"""

from __future__ import annotations

from typing import Final

from picortex.types import Message, Snowflake

# Answers kept, the newest: a continuation window lasts seconds, so older ones never matter.
ANSWERS_KEPT: Final = 4096


class AnswersSeen:
    """The first reply seen to each message, for the newest ANSWERS_KEPT of them."""

    def __init__(self, kept: int = ANSWERS_KEPT) -> None:
        self._first: dict[Snowflake, Snowflake] = {}
        self._kept = kept

    def saw(self, reply: Message) -> None:
        """Note one of the bot's messages; a reply answers the message it references."""
        ref = reply.message_reference
        if ref is None or ref.message_id is None or ref.message_id in self._first:
            return
        self._first[ref.message_id] = reply.id
        if len(self._first) > self._kept:
            del self._first[next(iter(self._first))]  # the oldest noted

    def answered_before(self, message_id: Snowflake, sent: Snowflake) -> bool:
        """Whether a reply to `message_id` was made before the message `sent` was.

        Snowflakes order by the time Discord made them: the comparison is on its clock.
        """
        first = self._first.get(message_id)
        return first is not None and first < sent
