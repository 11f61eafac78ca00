"""The bot's replies seen on the gateway: was a request answered before a message was sent?"""

from __future__ import annotations

from picortex.actors.answers_seen import AnswersSeen
from picortex.types import Message, MessageReference, User

BOT = User(9, "bot", bot=True)


def reply(message_id: int, to: int | None) -> Message:
    reference = None if to is None else MessageReference(message_id=to, channel_id=50)
    return Message(
        id=message_id,
        channel_id=50,
        author=BOT,
        content="answer",
        timestamp="2025-06-15T15:06:40+00:00",
        message_reference=reference,
    )


def test_a_message_sent_after_the_first_reply_comes_after_the_answer() -> None:
    seen = AnswersSeen()
    seen.saw(reply(200, to=100))
    seen.saw(reply(300, to=100))  # a later reply to the same message changes nothing
    assert not seen.answered_before(100, 150)
    assert seen.answered_before(100, 250)
    assert not seen.answered_before(101, 250)  # nothing answered 101


def test_a_message_that_replies_to_nothing_answers_nothing() -> None:
    seen = AnswersSeen()
    seen.saw(reply(200, to=None))
    assert not seen.answered_before(200, 300)


def test_only_the_newest_answers_are_kept() -> None:
    seen = AnswersSeen(kept=2)
    for n in range(3):
        seen.saw(reply(1000 + n, to=n))
    assert not seen.answered_before(0, 5000)
    assert seen.answered_before(1, 5000) and seen.answered_before(2, 5000)
