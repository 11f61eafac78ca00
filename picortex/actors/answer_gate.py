"""How many answers a process makes at once: a flood of triggers is answered in its order, at
the pace Discord lets replies out, not all at once.

Discord lets a bot make 48 requests a second (`discord.ratelimit.GLOBAL_BUDGET`). A thousand
triggers arriving together would otherwise start a thousand model calls in the first second,
whose replies then wait twenty seconds for the global limit: the process spends its first
seconds on work that cannot go out yet, holds every answer in memory meanwhile, and the
requests that could go out wait behind it. With the gate, an answer starts once fewer than
ANSWERS_AT_ONCE are between their start and their posted reply; the others wait in line, in
the order their triggers came.

No deadlock with a channel's reply order: an answer waits for the earlier answers of its
channel, and those took their place in line before it (a place is taken as the answer is
decided, in order), so they hold the gate already or are done. An answer restarted by a
follow-up keeps the place of the one it replaces.
"""

from __future__ import annotations

import collections
from typing import Final

import trio

from picortex.discord.ratelimit import GLOBAL_BUDGET

# Two seconds of the global limit: enough answers ready to keep it busy while the next ones
# are made (a model call and a history read take well under that), few enough that a flood
# does not start its thousand calls at once.
ANSWERS_AT_ONCE: Final = 2 * GLOBAL_BUDGET


class Place:
    """An answer's place: `admitted` once it may go on; `leave` it when it is over."""

    __slots__ = ("_gate", "admitted", "left")

    def __init__(self, gate: AnswerGate) -> None:
        self._gate = gate
        self.admitted = trio.Event()
        self.left = False

    async def wait(self) -> None:
        """Until the answer may go on."""
        await self.admitted.wait()

    def leave(self) -> None:
        """The answer is over (posted, given up, cancelled): the next one may go on."""
        if not self.left:
            self.left = True
            self._gate.leave(self)


class AnswerGate:
    """At most `capacity` answers at once (default ANSWERS_AT_ONCE), in the order their
    places were taken."""

    def __init__(self, capacity: int | None = None) -> None:
        self.capacity = ANSWERS_AT_ONCE if capacity is None else capacity
        self._free = self.capacity
        self._line: collections.deque[Place] = collections.deque()

    @property
    def waiting(self) -> int:
        """Answers waiting for their turn (tests)."""
        return len(self._line)

    def place(self) -> Place:
        """A place for an answer decided now: admitted at once if the gate has room."""
        place = Place(self)
        self._line.append(place)
        self._admit()
        return place

    def leave(self, place: Place) -> None:
        """`place`'s answer is over (see `Place.leave`)."""
        if place.admitted.is_set():
            self._free += 1
            self._admit()
        else:
            self._line.remove(place)

    def _admit(self) -> None:
        line = self._line
        while self._free > 0 and line:
            self._free -= 1
            line.popleft().admitted.set()
