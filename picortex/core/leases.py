"""Shard leases (SPEC 17), the decisions: when to renew, when a shard stops being served,
which shards to take and which to hand back.

Pure: the lease keeper (`picortex.actors.shard_leases`) reads the lease table and the
processes' heartbeats, asks `plan_shards`, and acts. Lease times are the database's clock;
deadlines are the keeper's own (trio's) clock, counted from when a statement was SENT, so a
slow answer only shortens the time a lease is trusted, never lengthens it.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Final

import attrs

# A lease is trusted on our clock for its length minus this much: the time a renewal's answer
# may take to come back, plus how far two clocks may drift apart meanwhile.
MARGIN_SECONDS: Final = 3.0
# ... never more than this share of a (short) lease.
MARGIN_SHARE: Final = 0.3
# Renewals per lease period: two may fail before the lease is at risk.
RENEWALS_PER_LEASE: Final = 3
# A lease another process stopped renewing is looked at again this long after its end (on
# the database's clock its end is strict: at `expires_at` it is still held).
EXPIRY_NUDGE_SECONDS: Final = 0.05


def renew_every(lease_seconds: float) -> float:
    """Seconds between two renewals of every held lease."""
    return lease_seconds / RENEWALS_PER_LEASE


def margin(lease_seconds: float) -> float:
    """How long before the lease ends (on the database's clock) we stop serving the shard."""
    return min(MARGIN_SECONDS, lease_seconds * MARGIN_SHARE)


def deadline(sent_at: float, lease_seconds: float) -> float:
    """When (our clock) a lease taken or renewed by a statement sent at `sent_at` stops being
    ours to act on: the database set its end no earlier than the statement was sent."""
    return sent_at + lease_seconds - margin(lease_seconds)


@attrs.frozen
class Lease:
    """One shard's row of the lease table."""

    shard_id: int
    node: str | None  # None: handed back
    epoch: int
    expires_at: float  # the database's clock

    def live(self, now: float) -> bool:
        """Whether someone holds it at `now` (the database's clock)."""
        return self.node is not None and self.expires_at > now


@attrs.frozen
class Want:
    """What one process serves: named shard ids, or (`auto`) any of `count`, `capacity` at
    most; with `auto`, about its fair share of the live processes."""

    ids: tuple[int, ...]
    count: int
    capacity: int
    auto: bool = False

    def candidates(self) -> tuple[int, ...]:
        """The shard ids this process may take."""
        return tuple(range(self.count)) if self.auto else self.ids


@attrs.frozen
class Plan:
    """What the keeper does this round."""

    take: tuple[int, ...] = ()
    give_back: tuple[int, ...] = ()


def peers(
    me: str, nodes: Collection[str], leases: Mapping[int, Lease], now: float
) -> frozenset[str]:
    """The processes sharing the shards (this one included): those telling a heartbeat, less
    any whose leases all lapsed without being handed back (it stopped renewing: gone)."""
    holders: dict[str, bool] = {}
    for lease in leases.values():
        if lease.node is not None:
            holders[lease.node] = holders.get(lease.node, False) or lease.live(now)
    return frozenset(n for n in nodes if holders.get(n, True)) | {me}


def soonest_expiry(
    want: Want, *, me: str, held: Collection[int], leases: Mapping[int, Lease], now: float
) -> float | None:
    """Seconds until the first lease that another process holds on a shard this one may take
    ends (the database's clock), or None. A dead holder's shards are free from then on: the
    keeper looks again at that moment rather than at its next renewal, up to a third of a
    lease later."""
    ends = [
        lease.expires_at
        for shard_id, lease in leases.items()
        if shard_id in want.candidates()
        and shard_id not in held
        and lease.node not in (None, me)
        and lease.live(now)
    ]
    return min(ends) - now if ends else None


def plan_shards(
    want: Want,
    *,
    me: str,
    held: Collection[int],
    leases: Mapping[int, Lease],
    nodes: Collection[str],
    now: float,
) -> Plan:
    """The shards to take (free ones, up to capacity, with `auto` up to the fair share) and
    to hand back (with `auto`, one above the fair share while another process has less than
    its share and no free shard to take).

    Args:
        held: the shard ids this process serves now.
        leases: the lease table by shard id.
        nodes: the processes whose heartbeat is recent.
        now: the database's clock.
    """
    candidates = want.candidates()
    free = [s for s in candidates if s not in held and not (s in leases and leases[s].live(now))]
    share = want.capacity
    if want.auto:
        together = peers(me, nodes, leases, now)
        share = min(share, math.ceil(want.count / len(together)))
        room = max(0, share - len(held))
        if room or free or len(held) <= share:
            return Plan(take=tuple(free[:room]))
        # Over our share with nothing free: hand one back if another process is short.
        floor = want.count // len(together)
        counts = {n: 0 for n in together if n != me}
        for lease in leases.values():
            if lease.live(now) and lease.node in counts:
                counts[lease.node] += 1
        if any(c < floor for c in counts.values()):
            return Plan(give_back=(max(held),))
        return Plan()
    room = max(0, share - len(held))
    return Plan(take=tuple(free[:room]))
