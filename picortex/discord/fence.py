"""The last check before a request leaves for Discord: is the shard it answers for still ours?

In a cluster (SPEC 17) a request is answered only by the process holding its shard's lease.
The check rides on the task's request watch (`picortex.discord.http.fenced`), so the REST
client makes it at the last moment, after every wait for a rate limit, without each layer in
between passing it on. Without a cluster no task carries a fence, and the check is one
lookup.
"""

from __future__ import annotations

from picortex.discord.http import task_fence
from picortex.errors import LeaseEnded

__all__ = ["LEFT_TO_NEXT_HOLDER", "LeaseEnded", "check_fence"]

# Why a request of a shard no longer held is not answered here (the action log's reason).
LEFT_TO_NEXT_HOLDER = "shard lease ended: left to the shard's next holder"


def check_fence() -> None:
    """Raise LeaseEnded when this task's request is of a shard no longer held."""
    fence = task_fence()
    if fence is not None and not fence.allows():
        raise LeaseEnded(LEFT_TO_NEXT_HOLDER)
