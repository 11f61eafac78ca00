"""The last check before a request leaves for Discord: is the shard it answers for still ours?

In a cluster (SPEC 17) a request is answered only by the process holding its shard's lease.
The check travels with the task answering the request (a context variable, like
`picortex.discord.http.when_sent`), so the REST client makes it at the last moment, after
every wait for a rate limit, without each layer in between passing it on. Without a
cluster no task carries one, and the check is one lookup.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Protocol


class LeaseEnded(Exception):
    """A request of a shard this process no longer holds: refused before it was sent."""


class SendFence(Protocol):
    """One request's fence (`picortex.actors.shard_fence.RequestFence`)."""

    # Set once the request was refused or its work stopped: its decision is not final, the
    # shard's next holder makes it (its handled mark is not written).
    stopped: bool

    def allows(self) -> bool:
        """Whether the request's shard is still held (False also sets `stopped`)."""
        ...


_FENCE: ContextVar[SendFence | None] = ContextVar("picortex_send_fence", default=None)


@contextmanager
def fenced(fence: SendFence) -> Iterator[SendFence]:
    """Within the block (and in the tasks it starts), requests to Discord pass `fence`."""
    token = _FENCE.set(fence)
    try:
        yield fence
    finally:
        _FENCE.reset(token)


def task_fence() -> SendFence | None:
    """The fence of the request this task works for, if any."""
    return _FENCE.get()


def check_fence() -> None:
    """Raise LeaseEnded when this task's request is of a shard no longer held."""
    fence = _FENCE.get()
    if fence is not None and not fence.allows():
        raise LeaseEnded("shard lease ended: left to the shard's next holder")
