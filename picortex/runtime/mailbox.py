"""A bounded mailbox that outlives the actor reading it, so queued messages survive a restart.

The supervisor (through `ChildSpec.mailbox`) owns it: both ends stay open while the actor
behind it crashes and comes back, and the message in hand at a crash is reported, not retried.
"""

from __future__ import annotations

import logging
from typing import Generic, TypeVar

import attrs
import trio

logger = logging.getLogger(__name__)

T = TypeVar("T")


@attrs.frozen
class MailboxStatistics:
    """A snapshot of one mailbox, for `picortex status` and tests."""

    name: str
    capacity: int
    depth: int
    overflows: int
    in_hand: bool
    senders_waiting: int
    receivers_waiting: int


class Mailbox(Generic[T]):
    """A bounded FIFO between senders and one actor.

    `send_nowait` never blocks (a full mailbox counts an overflow and returns False), so the
    gateway reader can never starve its heartbeat. `receive` marks the returned message as
    "in hand" until the next `receive` or `done`; after a crash the supervisor takes it with
    `take_in_hand` and logs it as dropped, so a poison message is never redelivered.
    """

    def __init__(self, capacity: int, *, name: str = "") -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"a mailbox needs a positive whole-number capacity, not {capacity!r}")
        self.name = name
        self.capacity = capacity
        self.overflows = 0
        self._send, self._receive = trio.open_memory_channel[T](capacity)
        self._in_hand: T | None = None
        # Messages queued and taken so far: a message handed straight to a waiting actor is in
        # neither the buffer nor its hand until the actor runs, yet it is not settled.
        self._sent = 0
        self._taken = 0

    def send_nowait(self, item: T) -> bool:
        """Queue `item` if there is room; False (and one more overflow counted) when full."""
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:
            self.overflows += 1
            # Logged at 1, 2, 4, 8, ... overflows: never silent, never a flood.
            if self.overflows & (self.overflows - 1) == 0:
                logger.warning(
                    "mailbox %s is full (%d messages): %d messages refused so far",
                    self.name or "?",
                    self.capacity,
                    self.overflows,
                )
            return False
        self._sent += 1
        return True

    async def send(self, item: T) -> None:
        """Queue `item`, waiting for room when the mailbox is full."""
        await self._send.send(item)
        self._sent += 1

    async def receive(self) -> T:
        """Wait for the next message; it is in hand until the next `receive` or `done`."""
        self._in_hand = None
        item = await self._receive.receive()
        self._taken += 1
        self._in_hand = item
        return item

    def receive_nowait(self) -> T:
        """Take the next message without waiting (raises trio.WouldBlock when empty)."""
        self._in_hand = None
        item = self._receive.receive_nowait()
        self._taken += 1
        self._in_hand = item
        return item

    def done(self) -> None:
        """The message in hand is handled; a crash from now on drops nothing."""
        self._in_hand = None

    @property
    def in_hand(self) -> T | None:
        """The message being handled, or None."""
        return self._in_hand

    @property
    def settled(self) -> bool:
        """Nothing queued, on its way to the actor or in its hand: everything sent is done."""
        return self._in_hand is None and self._taken == self._sent

    def take_in_hand(self) -> T | None:
        """Return the message in hand (None if none) and forget it: it is never redelivered."""
        item, self._in_hand = self._in_hand, None
        return item

    @property
    def depth(self) -> int:
        """How many messages are queued (not counting the one in hand)."""
        return self._send.statistics().current_buffer_used

    def statistics(self) -> MailboxStatistics:
        """A snapshot of depth, capacity, overflows and waiting tasks."""
        s = self._send.statistics()
        return MailboxStatistics(
            name=self.name,
            capacity=self.capacity,
            depth=s.current_buffer_used,
            overflows=self.overflows,
            in_hand=self._in_hand is not None,
            senders_waiting=s.tasks_waiting_send,
            receivers_waiting=s.tasks_waiting_receive,
        )

    def __aiter__(self) -> Mailbox[T]:
        return self

    async def __anext__(self) -> T:
        return await self.receive()

    def __repr__(self) -> str:
        return f"<Mailbox {self.name or '?'} {self.depth}/{self.capacity}>"
