"""What `picortex cluster status` reads (SPEC 17): the processes' heartbeats and the shards'
saved sessions, and how a process names itself and its shards."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from typing import Final

import attrs

# A running process tells its heartbeat this often; one silent for LIVE_SECONDS is gone.
HEARTBEAT_SECONDS: Final = 5.0
LIVE_SECONDS: Final = 3 * HEARTBEAT_SECONDS
# A process silent this long is forgotten (its row dropped by the next heartbeat of any).
FORGET_SECONDS: Final = 86_400.0


@attrs.frozen
class ClusterNode:
    """One process of the cluster, as its last heartbeat told."""

    node: str
    host: str
    pid: int
    shards: str  # as `format_shards` writes them: "0,2/8"
    started_at: float
    last_seen: float

    def live(self, now: float) -> bool:
        """Whether it told its heartbeat recently enough to be running."""
        return now - self.last_seen < LIVE_SECONDS

    def shard_ids(self) -> list[int]:
        """The shard ids it serves."""
        ids, _, _ = self.shards.partition("/")
        return [int(i) for i in ids.split(",") if i.strip().isdigit()]


@attrs.frozen
class SavedSession:
    """A shard's gateway session, saved so that whoever serves it next can RESUME."""

    shard_id: int
    shard_count: int
    session_id: str
    seq: int
    updated_at: float


def node_name() -> str:
    """This process's name in the cluster: its host and pid (unique while it runs)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def this_node(
    shards: Sequence[tuple[int, int]], started_at: float, now: float, name: str | None = None
) -> ClusterNode:
    """This process's heartbeat (`name`: its node name, if not `node_name()`)."""
    return ClusterNode(
        node=name or node_name(),
        host=socket.gethostname(),
        pid=os.getpid(),
        shards=format_shards(shards),
        started_at=started_at,
        last_seen=now,
    )


def format_shards(shards: Sequence[tuple[int, int]]) -> str:
    """Shards as one text: their ids, then their count ("0,2/8"); "" for none."""
    if not shards:
        return ""
    ids = ",".join(str(shard_id) for shard_id, _ in sorted(shards))
    return f"{ids}/{shards[0][1]}"
