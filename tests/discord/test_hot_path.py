"""The gateway's hot path: the reader's batches in a burst and their public fallback, and
normalize()'s caches."""

from __future__ import annotations

from typing import Any

import pytest
from trio_websocket import WebSocketConnection

from picortex.discord import gateway
from picortex.discord import normalize as normalize_module
from picortex.discord.normalize import normalize
from picortex.types import Message, NormalizeError
from tests.discord.test_gateway import running_bot, wait_until

BURST = 600


def _count_waits(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the reader's calls of get_message (each one a scheduler round at least)."""
    calls = [0]
    get_message = WebSocketConnection.get_message

    async def counted(self: WebSocketConnection) -> str | bytes:
        calls[0] += 1
        return await get_message(self)

    monkeypatch.setattr(WebSocketConnection, "get_message", counted)
    return calls


async def _blast_through(monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[str, Any]], int]:
    """The MESSAGE_CREATE payloads of a burst and one message after it, and the reader's waits."""
    calls = _count_waits(monkeypatch)
    async with running_bot() as bot:
        before = calls[0]
        await bot.sim.blast(BURST, channels=5, size=512)
        await wait_until(lambda: len(bot.contents()) == BURST)
        bot.post("after the burst")
        await wait_until(lambda: len(bot.contents()) == BURST + 1)
        return [d for name, d in bot.dispatched if name == "MESSAGE_CREATE"], calls[0] - before


def _in_order(messages: list[dict[str, Any]]) -> bool:
    """Every message once, in the order sent (snowflakes grow)."""
    ids = [int(m["id"]) for m in messages]
    return ids == sorted(set(ids))


async def test_a_burst_is_taken_in_batches_in_order(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    messages, waits = await _blast_through(monkeypatch)
    assert _in_order(messages)
    assert messages[-1]["content"] == "after the burst"
    # Most frames of the burst were taken from the queue without a wait each.
    assert waits < BURST // 2


async def test_a_full_queue_makes_the_socket_reader_wait_and_loses_nothing(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway, "MESSAGE_QUEUE", 4)
    messages, waits = await _blast_through(monkeypatch)
    assert _in_order(messages)
    assert messages[-1]["content"] == "after the burst"
    assert waits < BURST // 2


async def test_without_the_queue_the_reader_waits_for_every_frame(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gateway, "_batched_reader", lambda ws: None)
    messages, waits = await _blast_through(monkeypatch)
    assert _in_order(messages)
    assert messages[-1]["content"] == "after the burst"
    assert waits >= BURST


async def test_the_installed_trio_websocket_offers_the_queued_read(autojump_clock: Any) -> None:
    taken: list[bool] = []
    real = gateway._batched_reader

    def spy(ws: WebSocketConnection) -> Any:
        take = real(ws)
        taken.append(take is not None)
        return take

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gateway, "_batched_reader", spy)
        async with running_bot() as bot:
            bot.post("fast path")
            await wait_until(lambda: bot.contents() == ["fast path"])
    # If this fails, trio-websocket changed: check `_batched_reader` against the new release.
    assert taken == [True]


async def test_without_the_private_queue_a_drop_still_resumes(autojump_clock: Any) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gateway, "_batched_reader", lambda ws: None)
        async with running_bot() as bot:
            for i in range(30):
                bot.post(f"m{i}")
            await wait_until(lambda: len(bot.contents()) == 30)
            bot.sim.drop_connections()
            bot.post("after the drop")
            await wait_until(lambda: len(bot.contents()) == 31)
    assert bot.contents() == [f"m{i}" for i in range(30)] + ["after the drop"]
    assert bot.sim.gateway_stats.resumes == 1


def test_a_connection_without_the_private_queue_gets_no_taker() -> None:
    assert gateway._batched_reader(object()) is None  # type: ignore[arg-type]


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
