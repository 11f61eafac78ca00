"""A channel's reply order and the answers it is generating (picortex.actors.channel)."""

from __future__ import annotations

import attrs
import trio

from picortex.actors.answer_gate import Place
from picortex.actors.delivery import AnswerSink
from picortex.core import continuation as cont
from picortex.types import Message


@attrs.define(eq=False)
class ReplySlot:
    """A place in the channel's reply order; `done` once its reply is posted (or given up)."""

    previous: trio.Event | None
    done: trio.Event = attrs.field(factory=trio.Event)

    async def turn(self) -> None:
        """Wait until every earlier reply of the channel is done.

        No scheduler round when nothing is pending: a ready reply goes out before other
        tasks' work is interleaved in front of it.
        """
        if self.previous is not None and not self.previous.is_set():
            await self.previous.wait()


@attrs.define(eq=False)
class Generation:
    """One answer being generated for a request; a restart replaces it in the same slot.

    `after` are the `ended` events of the answers it replaced: it makes its model call only
    once they have ended, so their calls are settled and logged, and their reservations
    released, before it reserves its own (SPEC 9).
    """

    request: cont.Request
    trigger: Message
    slot: ReplySlot
    sink: AnswerSink  # where the answer goes
    after: tuple[trio.Event, ...] = ()
    slash: bool = False  # a slash `ask`: no persona answers it, its context is all cached
    # Why there is no answer, for a person who waits for one (a slash `ask`).
    failure: str = "Sorry, I could not answer that this time."
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    replaced: bool = False
    ended: trio.Event = attrs.field(factory=trio.Event)
    # Its place at the process's answer gate (a slash `ask` has none: its reply is not
    # bound by the global limit); a restart keeps it.
    place: Place | None = None
