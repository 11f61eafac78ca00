"""Reservations asked by the event loop on a line of their own (SPEC 9, 17; see `line`).

A call's reservation is asked while its model request is built: on the line it is on the wire
at once, and the database answers while the request is built. The statement and its
parameters are `ceilings.RESERVE_SQL`'s. When the line is down, `ask` says so and the caller
asks on a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

import attrs
import outcome
from psycopg import pq

from picortex.store.pg.ceilings import (
    HOLD_SECONDS,
    STATEMENT_TIMEOUT_MS,
    Answer,
    Ask,
    reserve_params,
)
from picortex.store.pg.line import BACKOFF_SECONDS, Line, columns

Reserved = Callable[[outcome.Outcome[Answer]], None]

_STATEMENT: Final = b"picortex_reserve"
_SQL: Final = (
    b"SELECT * FROM picortex_budget_reserve("
    b"$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
)
_INTS: Final = frozenset(f.name for f in attrs.fields(Answer) if f.type in (int, "int"))
_BOOLS: Final = frozenset(f.name for f in attrs.fields(Answer) if f.type in (bool, "bool"))


def answer_of(result: pq.abc.PGresult) -> Answer:
    """The reservation's one row, from text format."""
    fields: dict[str, object] = {}
    for name, value in columns(result).items():
        if name in _INTS:
            fields[name] = int(value or 0)
        elif name in _BOOLS:
            fields[name] = value == "t"
        else:
            fields[name] = value
    return Answer(**fields)  # type: ignore[arg-type]


class ReserveLine(Line):
    """Reservations over one non-blocking connection; `run` is its life."""

    def __init__(
        self,
        url: str,
        node: str,
        *,
        hold_seconds: float = HOLD_SECONDS,
        backoff: Sequence[float] = BACKOFF_SECONDS,
    ) -> None:
        # A reservation may wait its turn on the counters' locks: the ceilings' patience.
        super().__init__(
            url,
            {_STATEMENT: _SQL},
            what="reservations",
            backoff=backoff,
            statement_timeout_ms=STATEMENT_TIMEOUT_MS,
        )
        self.node = node
        self._hold_seconds = hold_seconds

    def ask(self, ask: Ask, answered: Reserved) -> bool:
        """Ask for `ask`'s reservation; `answered` gets the answer (or DatabaseUnreachable),
        on the event loop. False: the line is down, nothing was asked."""

        def decode(result: outcome.Outcome[pq.abc.PGresult]) -> None:
            if isinstance(result, outcome.Error):
                answered(outcome.Error(result.error))
            else:
                answered(outcome.capture(answer_of, result.unwrap()))

        return self.send(
            _STATEMENT, reserve_params(ask, self.node, self._hold_seconds, None), decode
        )
