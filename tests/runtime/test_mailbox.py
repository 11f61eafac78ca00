"""The bounded mailbox: order, overflow counting, the message in hand, statistics."""

from __future__ import annotations

import logging

import pytest
import trio

from picortex.runtime.mailbox import Mailbox, MailboxStatistics


@pytest.mark.parametrize("capacity", [0, -1, 1.5, True, float("inf")])
def test_capacity_must_be_a_positive_whole_number(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity"):
        Mailbox(capacity)  # type: ignore[arg-type]


async def test_messages_come_out_in_order() -> None:
    box: Mailbox[int] = Mailbox(5)
    for i in range(5):
        assert box.send_nowait(i)
    assert box.depth == 5
    assert [await box.receive() for _ in range(5)] == [0, 1, 2, 3, 4]
    assert box.depth == 0


async def test_a_full_mailbox_refuses_without_blocking_and_counts(caplog) -> None:
    box: Mailbox[str] = Mailbox(2, name="chan-1")
    caplog.set_level(logging.WARNING, logger="picortex.runtime.mailbox")
    assert box.send_nowait("a") and box.send_nowait("b")
    assert [box.send_nowait(x) for x in "cdef"] == [False] * 4
    assert box.overflows == 4
    # Logged at the 1st, 2nd and 4th overflow: never silent, never one line per message.
    assert [r.getMessage().split(": ")[-1] for r in caplog.records] == [
        "1 messages refused so far",
        "2 messages refused so far",
        "4 messages refused so far",
    ]
    assert "chan-1" in caplog.records[0].getMessage()
    assert [await box.receive(), await box.receive()] == ["a", "b"]


async def test_send_waits_for_room(autojump_clock) -> None:
    box: Mailbox[int] = Mailbox(1)
    await box.send(1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(box.send, 2)
        await trio.sleep(5)
        assert box.statistics().senders_waiting == 1
        assert await box.receive() == 1
    assert await box.receive() == 2


async def test_the_message_in_hand_is_tracked_until_done_or_the_next_receive() -> None:
    box: Mailbox[str] = Mailbox(4)
    for m in ("a", "b", "c"):
        box.send_nowait(m)
    assert box.in_hand is None
    assert await box.receive() == "a"
    assert box.in_hand == "a"
    box.done()
    assert box.in_hand is None
    await box.receive()
    assert box.receive_nowait() == "c"
    assert box.in_hand == "c"
    assert box.take_in_hand() == "c"
    assert box.take_in_hand() is None
    assert box.in_hand is None


async def test_waiting_for_mail_holds_nothing_in_hand(autojump_clock) -> None:
    box: Mailbox[str] = Mailbox(4)
    box.send_nowait("a")
    await box.receive()
    with trio.move_on_after(1):
        await box.receive()
    assert box.in_hand is None


async def test_statistics_and_async_iteration() -> None:
    box: Mailbox[int] = Mailbox(3, name="m")
    box.send_nowait(1)
    box.send_nowait(2)
    seen = []
    async for item in box:
        seen.append(item)
        if item == 1:
            assert box.statistics() == MailboxStatistics(
                name="m",
                capacity=3,
                depth=1,
                overflows=0,
                in_hand=True,
                senders_waiting=0,
                receivers_waiting=0,
            )
        if len(seen) == 2:
            break
    assert seen == [1, 2]
    assert repr(box) == "<Mailbox m 0/3>"
