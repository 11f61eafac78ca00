"""Pruning in a cluster (SPEC 17): the tables are shared, so one process prunes at a time.

Each pruning query runs in a transaction that first tries a transaction-level advisory
lock; a process that does not get it skips its turn (another is pruning those same rows
right now, and the next round comes within the hour). Two roll-ups of the ledger at once
would each add the day's totals, doubling them; one at a time, a second finds nothing left.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Concatenate, Final, ParamSpec, Protocol, TypeVar


class Lockable(Protocol):
    """A connection with transactions and advisory locks (`PgDatabase`)."""

    def transaction(self) -> AbstractContextManager[None]: ...

    def try_xact_lock(self, key: int) -> bool: ...


P = ParamSpec("P")
D = TypeVar("D", bound=Lockable)

# The advisory lock key pruning takes (any number no other picortex lock uses).
PRUNE_LOCK: Final = 0x70C0_9E17


def one_pruner(prune: Callable[Concatenate[D, P], int]) -> Callable[Concatenate[D, P], int]:
    """Run `prune` only while holding the cluster's pruning lock; 0 (nothing dropped) when
    another process holds it."""

    @functools.wraps(prune)
    def one_at_a_time(db: D, /, *args: P.args, **kwargs: P.kwargs) -> int:
        with db.transaction():
            if not db.try_xact_lock(PRUNE_LOCK):
                return 0
            return prune(db, *args, **kwargs)

    return one_at_a_time
