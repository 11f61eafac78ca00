"""A model call admitted while its request is being built (SPEC 9, 17).

A cluster's reservation is a round trip to the database, and the model client takes about as
long to build the request. So the reservation is asked for first, on a thread, the request
is built meanwhile, and it waits for the answer just before it is written (the model
client's request hook): no byte of a call leaves before it is admitted, and a refused one is
cut there, unsent.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

import trio

from picortex.core.budget import Refusal, Reservation
from picortex.discord.http import task_watch, when_sent

Verdict = Reservation | Refusal


class PendingReservation:
    """A reservation on its way, resolved once on the event loop. A call that stops waiting
    for it abandons it: a reservation that still comes is then settled at once, for nothing
    (the call was never sent)."""

    def __init__(self, settle: Callable[[Reservation, float], None]) -> None:
        self._settle = settle
        self._done = trio.Event()
        self.verdict: Verdict | None = None
        self.failure: Exception | None = None  # the budget could not decide (a bug)
        self._abandoned = False

    def resolve(self, answer: Verdict | Exception) -> None:
        """The budget's answer (event loop)."""
        if isinstance(answer, Exception):
            self.failure = answer
        else:
            self.verdict = answer
            if self._abandoned and isinstance(answer, Reservation):
                self._settle(answer, 0.0)
        self._done.set()

    async def wait(self) -> None:
        """Until the answer is in."""
        await self._done.wait()

    def held(self) -> Reservation | None:
        """The reservation, if it came; if it has not come yet, it is abandoned."""
        if not self._done.is_set():
            self._abandoned = True
            return None
        return self.verdict if isinstance(self.verdict, Reservation) else None


@runtime_checkable
class ReservesAhead(Protocol):
    """A budget whose reservation may be asked for before the call's request is built."""

    def reserve_ahead(
        self, workspace: str, user_id: int | None, worst_usd: float
    ) -> PendingReservation:
        """Start reserving `worst_usd`; the answer resolves the returned reservation."""
        ...


class Admission:
    """The gate of one call: its request waits here for the reservation (`admit`)."""

    def __init__(self, pending: PendingReservation) -> None:
        self.pending = pending
        self.scope = trio.CancelScope()  # around the call: cancelled when it may not go

    @property
    def cut(self) -> bool:
        """Whether the call was stopped at the gate (refused, or the budget failed)."""
        return self.scope.cancel_called

    async def admit(self) -> None:
        """Wait for the reservation; a refusal (or a failure) cancels the call before a byte
        of it is written."""
        await self.pending.wait()
        if not isinstance(self.pending.verdict, Reservation):
            self.scope.cancel()
            await trio.lowlevel.checkpoint()  # the cancellation, here, inside the call


@contextlib.contextmanager
def gated(admission: Admission | None) -> Iterator[None]:
    """Within the block, this task's model request waits at `admission` (none: goes).

    The gate rides on the task's request watch (`discord.http.when_sent`), which the model
    client's request hook reads: one variable carries what a request must do as it starts.
    """
    if admission is None:
        yield
        return
    watch = task_watch()
    on_sent, on_start = (None, None) if watch is None else (watch.on_sent, watch.on_start)
    with when_sent(on_sent, on_start=on_start, admit=admission.admit), admission.scope:
        yield
