"""The gateway's hot path: a burst through the reader, and normalize()'s caches."""

from __future__ import annotations

from typing import Any

import pytest

from picortex.discord import normalize as normalize_module
from picortex.discord.normalize import normalize
from picortex.discord.websocket import WebSocket
from picortex.types import Message, NormalizeError
from tests.discord.test_gateway import running_bot, wait_until

BURST = 600


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reader's socket reads (each one a wake-up)."""
    calls = [0]
    receive = WebSocket.receive

    async def counted(self: WebSocket) -> list[str | bytes]:
        calls[0] += 1
        return await receive(self)

    monkeypatch.setattr(WebSocket, "receive", counted)
    return calls


async def test_a_burst_arrives_whole_in_order_with_no_more_reads_than_frames(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _count_reads(monkeypatch)
    async with running_bot() as bot:
        before = reads[0]
        await bot.sim.blast(BURST, channels=5, size=512)
        await wait_until(lambda: len(bot.contents()) == BURST)
        bot.post("after the burst")
        await wait_until(lambda: len(bot.contents()) == BURST + 1)
        messages = [d for name, d in bot.dispatched if name == "MESSAGE_CREATE"]
    ids = [int(m["id"]) for m in messages]
    assert ids == sorted(set(ids))  # every message once, in the order sent
    assert messages[-1]["content"] == "after the burst"
    # Each read brings one frame or more (tests/discord/test_websocket.py: all that arrived).
    assert reads[0] - before <= BURST + 1


# -- normalize's caches ---------------------------------------------------------------------

AUTHOR = {"id": "53908232506183680", "username": "alice", "global_name": "Alice", "bot": False}


def _message(author: object, channel_id: object = "290926798999357250", id_: int = 1) -> object:
    return normalize(
        "MESSAGE_CREATE",
        {
            "id": str(1100000000000000000 + id_),
            "channel_id": channel_id,
            "guild_id": "81384788765712384",
            "author": author,
            "content": "hi",
            "timestamp": "2024-05-01T12:00:00.000000+00:00",
        },
    )


def test_one_user_object_serves_every_message_of_an_author() -> None:
    first, second = _message(AUTHOR, id_=1), _message(dict(AUTHOR), id_=2)
    assert isinstance(first, Message) and isinstance(second, Message)
    assert first.author is second.author
    renamed = _message({**AUTHOR, "global_name": "Alice B."}, id_=3)
    assert isinstance(renamed, Message)
    assert renamed.author.global_name == "Alice B."
    assert renamed.author.id == first.author.id


@pytest.mark.parametrize(
    ("field", "junk", "reason"),
    [
        ("bot", 0, "author.bot is not a boolean"),
        ("id", 53908232506183680.0, "author.id is not a snowflake"),
        ("id", True, "author.id is not a snowflake"),
    ],
)
def test_junk_equal_to_a_cached_value_is_still_junk(field: str, junk: object, reason: str) -> None:
    assert isinstance(_message(AUTHOR), Message)  # cached now
    error = _message({**AUTHOR, field: junk})
    assert isinstance(error, NormalizeError)
    assert error.reason == reason


def test_a_cached_channel_id_does_not_vouch_for_an_equal_number_of_another_type() -> None:
    assert isinstance(_message(AUTHOR, channel_id="5"), Message)
    for junk in (5.0, True, "+5", " 5"):
        error = _message(AUTHOR, channel_id=junk)
        assert isinstance(error, NormalizeError)
        assert error.reason == "channel_id is not a snowflake"
    message = _message(AUTHOR, channel_id=5)
    assert isinstance(message, Message) and message.channel_id == 5


def test_the_caches_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(normalize_module, "USER_CACHE_MAX", 8)
    monkeypatch.setattr(normalize_module, "ID_CACHE_MAX", 8)
    for n in range(50):
        author = {**AUTHOR, "id": str(1000 + n), "username": f"user{n}"}
        message = _message(author, channel_id=str(2000 + n), id_=n)
        assert isinstance(message, Message)
        assert (message.author.id, message.author.username) == (1000 + n, f"user{n}")
        assert message.channel_id == 2000 + n
        assert len(normalize_module._users) <= 8
        assert len(normalize_module._ids) <= 8
