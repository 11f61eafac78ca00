"""The lease keeper (SPEC 17): serves a shard only while this process holds its lease.

Every `lease_seconds / 3` it renews every held lease in one statement (a task of its own,
so a slow take or hand-back never delays it); it takes free shards
(`picortex.core.leases.plan_shards` decides which) and hands back one above its fair share.
A lease another process stopped renewing is looked at again the moment it ends, so a dead
process's shards are taken without waiting for the next round. A shard being handed back
stays renewed until it is released. Each held shard's gateway runs in a cancel scope whose
deadline is the lease's end on OUR clock (the renewal's send time + lease - margin): a
renewal that does not come back in time stops the shard by trio's clock alone, before the
lease can end on the database's.

A shard taken RESUMEs the session its last holder saved (read from the database when it is
taken), after the store has adopted that shard's recent handled marks. A clean stop hands
every shard back: the gateway saves its session and closes with 4000, messages in hand
finish (or stay unhandled below the saved seq, so the next holder gets them again), the
handled marks and the session are committed, and only then is the lease released.

The fence (`picortex.actors.shard_fence`) is told the same deadlines: from the moment a shard
is no longer held (a hand-back past its settle time, a lease not renewed in time, or taken)
nothing more is posted for its requests, and the answers in progress for them are stopped,
unmarked, for the next holder.

The lease statements run on a connection of the keeper's own, from a thread.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, Literal, Protocol

import attrs
import trio

from picortex.core.leases import (
    EXPIRY_NUDGE_SECONDS,
    Lease,
    Plan,
    Want,
    deadline,
    plan_shards,
    renew_every,
    soonest_expiry,
)
from picortex.runtime.groups import lone_error
from picortex.runtime.supervisor import ChildSpec, DynamicSupervisor, RestartPolicy
from picortex.types import EventSink

logger = logging.getLogger(__name__)

# A shard handed back: its gateway's close (4000) and its messages in hand get this long.
HAND_BACK_SECONDS: Final = 10.0
# A shard's answers cancelled at a hand-back get this long to unwind (a post already on its
# way ends, and its handled mark is queued) before the marks are committed.
STOPPED_SECONDS: Final = 2.0
# An unreachable database is complained about once per this long.
COMPLAINT_SECONDS: Final = 60.0
# Surveys in a row within one round while other processes win the races for free shards.
TAKE_ROUNDS: Final = 3

Shard = tuple[int, int]
Session = tuple[str, str, int]


class LeaseTable(Protocol):
    """The lease statements (`picortex.store.pg.leases.ShardLeases`); synchronous."""

    def take(self, shard: Shard, node: str, seconds: float) -> int | None: ...

    def renew(self, shard_ids: Sequence[int], node: str, seconds: float) -> set[int]: ...

    def release(self, shard_ids: Sequence[int], node: str) -> int: ...

    def leave(self, node: str) -> None: ...

    def leases(self) -> tuple[float, dict[int, Lease]]: ...

    def live_nodes(self, now: float) -> list[str]: ...

    def gateway_session(self, shard: Shard) -> Session | None: ...


class Fence(Protocol):
    """The shards this process may answer for (`picortex.actors.shard_fence.ShardFence`)."""

    def serve(self, shard_id: int, until: float) -> None: ...

    def extend(self, shard_id: int, until: float) -> None: ...

    def end(self, shard_id: int) -> int: ...

    async def stopped(self, shard_id: int) -> None: ...


class ShardGateway(Protocol):
    """A shard's gateway actor, as the keeper runs and stops it."""

    leaving: Literal["hand_back", "lost"] | None

    async def run(self, *, task_status: trio.TaskStatus[None] = ...) -> None: ...


@attrs.define(eq=False)
class HeldShard:
    """A shard this process holds the lease of, and its gateway."""

    shard: Shard
    epoch: int
    deadline: float  # our clock: stop serving it by then unless renewed
    gateway: ShardGateway
    scope: trio.CancelScope | None = None
    stopping: bool = False
    ended: trio.Event = attrs.Factory(trio.Event)

    def extend(self, until: float) -> None:
        """A renewal came back: serve until `until` (our clock)."""
        self.deadline = max(self.deadline, until)
        if self.scope is not None:
            self.scope.deadline = self.deadline


class ShardLeaseKeeper:
    """Takes, renews and hands back shard leases; runs each held shard's gateway."""

    def __init__(
        self,
        table: LeaseTable,
        want: Want,
        *,
        node: str,
        lease_seconds: float,
        gateways: DynamicSupervisor,
        make_gateway: Callable[[Shard, Session | None], ShardGateway],
        adopt: Callable[[Shard], Awaitable[None]],
        settle: Callable[[Shard], Awaitable[None]],
        events: EventSink,
        on_held: Callable[[tuple[Shard, ...]], None] = lambda held: None,
        present: Callable[[bool], None] = lambda here: None,
        call: Callable[[Callable[[], Any]], Awaitable[Any]] | None = None,
        fence: Fence | None = None,
        flush: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """`adopt`: load a taken shard's recent handled marks (before its gateway starts);
        `settle`: let a stopped shard's messages in hand finish (before its lease is
        released, at most HAND_BACK_SECONDS); `flush`: commit what is queued (the handled
        marks, the session) before a lease is released; `fence`: told each shard's deadline,
        and when it is no longer held; `on_held`: told the shards held after each change;
        `present`: told True when it starts, False when it stops (cancelled) before it
        leaves the live processes (its heartbeat must stop first); `call`: runs a lease
        statement (default: on a thread, abandoned when cancelled, so a database that hangs
        never holds up a stop)."""
        self._table = table
        self._want = want
        self._node = node
        self._lease = lease_seconds
        self._gateways = gateways
        self._make_gateway = make_gateway
        self._adopt = adopt
        self._settle = settle
        self._flush = flush
        self._fence = fence
        self._events = events
        self._on_held = on_held
        self._present = present
        self.held: dict[int, HeldShard] = {}
        # When (our clock) a lease another process stopped renewing may be taken: the keeper
        # looks then, between its rounds.
        self._look_at = math.inf
        # Shards stopped for a hand-back, renewed until released: their messages in hand
        # finish under a lease that is still ours.
        self._handing_back: dict[int, HeldShard] = {}
        self._complained_at = -math.inf
        self._call = call or functools.partial(trio.to_thread.run_sync, abandon_on_cancel=True)

    def shards(self) -> tuple[Shard, ...]:
        """The shards held, by id."""
        return tuple(h.shard for _, h in sorted(self.held.items()))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the leases until cancelled; then hand every shard back and leave the live
        processes. After a crash, hand them back too (a restart takes them again)."""
        self.held.clear()  # a crashed run's shards were handed back, or lapse
        self._present(True)
        task_status.started()
        every = renew_every(self._lease)
        leaving = False
        try:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._renewing, every)
                    next_at = trio.current_time()
                    while True:
                        await self.tick()
                        # At a fixed rate: a slow round never pushes the next one later.
                        next_at = max(next_at + every, trio.current_time())
                        while self._look_at < next_at:
                            await trio.sleep_until(self._look_at)
                            await self.look()
                        await trio.sleep_until(next_at)
            except BaseExceptionGroup as group:
                # A crash is reported as itself, not as a group around it.
                lone = lone_error(group)
                if lone is None:
                    raise
                raise lone from None
        except BaseException as exc:
            leaving = _only_cancelled(exc)
            raise
        finally:
            with trio.CancelScope(shield=True):
                # Renewed meanwhile: what is in hand finishes under leases still ours.
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._renewing, every)
                    await self.hand_back_all(leave=leaving)
                    nursery.cancel_scope.cancel()

    # ---- one round -------------------------------------------------------------------------

    async def _renewing(self, every: float) -> None:
        """Renew every held lease at a fixed rate: a slow round never pushes the next later."""
        next_at = trio.current_time()
        while True:
            self._forget_ended()
            if self.held or self._handing_back:
                await self._renew()
            next_at = max(next_at + every, trio.current_time())
            await trio.sleep_until(next_at)

    async def tick(self) -> None:
        """Take and hand back as planned (the renewals run on their own)."""
        self._forget_ended()
        await self.look()

    async def look(self) -> None:
        """Take and hand back as planned; again at once when another process was quicker to
        a free shard (another one may still be free)."""
        table = self._table

        def survey() -> tuple[float, dict[int, Lease], list[str]]:
            now, leases = table.leases()
            return now, leases, table.live_nodes(now)

        self._look_at = math.inf
        for _ in range(TAKE_ROUNDS):
            try:
                now, leases, nodes = await self._thread(survey)
            except Exception as exc:
                self._complain(exc)
                return
            surveyed = trio.current_time()
            held = self.held
            plan = plan_shards(
                self._want, me=self._node, held=held, leases=leases, nodes=nodes, now=now
            )
            ends = soonest_expiry(self._want, me=self._node, held=held, leases=leases, now=now)
            if ends is not None:
                self._look_at = surveyed + ends + EXPIRY_NUDGE_SECONDS
            if await self._follow(plan):
                return

    async def _renew(self) -> None:
        ids = sorted({*self.held, *self._handing_back})
        sent = trio.current_time()
        try:
            mine = await self._thread(
                functools.partial(self._table.renew, ids, self._node, self._lease)
            )
        except Exception as exc:
            # The deadlines stand: each shard stops by its own if no renewal comes in time.
            self._complain(exc)
            return
        until = deadline(sent, self._lease)
        for shard_id in ids:
            # A shard being handed back is renewed too: its answers finish under its lease.
            held = self.held.get(shard_id) or self._handing_back.get(shard_id)
            if held is None:
                continue
            if shard_id in mine:
                held.extend(until)
                if self._fence is not None:
                    self._fence.extend(shard_id, held.deadline)
            else:
                await self._stop(held, "lost")

    async def _follow(self, plan: Plan) -> bool:
        """Act on a plan; False when another process took a shard first."""
        await self._hand_back([self.held[i] for i in plan.give_back if i in self.held])
        won = True
        for shard_id in plan.take:
            won = await self._take((shard_id, self._want.count)) and won
        return won

    async def _take(self, shard: Shard) -> bool:
        """Take a free shard and start its gateway; False when another process was quicker."""
        sent = trio.current_time()
        try:
            epoch = await self._thread(
                functools.partial(self._table.take, shard, self._node, self._lease)
            )
            if epoch is None:
                return False
            # Read now, not at start: the session its last holder saved when it left.
            saved = await self._thread(functools.partial(self._table.gateway_session, shard))
            await self._adopt(shard)
        except Exception as exc:
            self._complain(exc)
            return True
        until = deadline(sent, self._lease)
        if until <= trio.current_time():
            return True  # too slow to trust: the lease lapses, or the next round takes it
        gateway = self._make_gateway(shard, saved)
        gateway.leaving = "lost"  # unless handed back: cancelled means the lease ended
        held = HeldShard(shard, epoch, until, gateway)
        self.held[shard[0]] = held
        if self._fence is not None:
            self._fence.serve(shard[0], until)
        self._events.emit(
            "gateway",
            action="lease_taken",
            shard=list(shard),
            epoch=epoch,
            resume=saved is not None,
        )
        await self._gateways.start_child(
            ChildSpec(
                f"gateway-{shard[0]}",
                functools.partial(self._serve, held),
                restart=RestartPolicy.TRANSIENT,
                grace=HAND_BACK_SECONDS,
            )
        )
        self._on_held(self.shards())
        return True

    async def _serve(
        self, held: HeldShard, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """A held shard's gateway, until its lease's deadline or until stopped."""
        with trio.CancelScope(deadline=held.deadline) as scope:
            held.scope = scope
            task_status.started()
            if held.stopping:
                return
            try:
                await held.gateway.run()
            finally:
                held.scope = None
        if not held.stopping:
            # Not renewed in time: the lease may end on the database's clock any moment.
            held.stopping = True
            self._end(held)
            self._events.emit(
                "gateway", action="lease_lost", shard=list(held.shard), reason="not renewed"
            )
        held.ended.set()

    # ---- stopping --------------------------------------------------------------------------

    async def _stop(self, held: HeldShard, how: Literal["hand_back", "lost"]) -> None:
        """Stop serving a shard: its gateway leaves as `how` says; wait until it has."""
        if how == "lost":
            # Another process holds it now (or may any moment): nothing more is posted.
            self._end(held)
        if not held.stopping:
            held.stopping = True
            if how == "lost":
                self._events.emit(
                    "gateway", action="lease_lost", shard=list(held.shard), reason="taken"
                )
        held.gateway.leaving = how
        if held.scope is not None:
            held.scope.cancel()
        with trio.move_on_after(HAND_BACK_SECONDS):
            await held.ended.wait()
        self.held.pop(held.shard[0], None)
        self._on_held(self.shards())

    async def _hand_back(self, shards: list[HeldShard]) -> None:
        """Hand shards to their next holders, together: sessions saved, sockets closed with
        4000, what was in hand finished and committed, then the leases released."""
        if not shards:
            return
        for held in shards:
            self._handing_back[held.shard[0]] = held
        try:
            await self._stop_and_release(shards)
        finally:
            for held in shards:
                self._handing_back.pop(held.shard[0], None)

    async def _stop_and_release(self, shards: list[HeldShard]) -> None:
        async with trio.open_nursery() as nursery:
            for held in shards:
                nursery.start_soon(self._stop, held, "hand_back")
        try:
            with trio.move_on_after(HAND_BACK_SECONDS):
                async with trio.open_nursery() as nursery:
                    for held in shards:
                        nursery.start_soon(self._settle, held.shard)
            await self._stop_answers(shards)
            if self._flush is not None:
                with trio.fail_after(HAND_BACK_SECONDS):
                    await self._flush()
            ids = [held.shard[0] for held in shards]
            await self._thread(functools.partial(self._table.release, ids, self._node))
        except Exception as exc:
            # Not committed, or not released: the leases lapse instead; never handed on early.
            self._complain(exc)
            return
        for held in shards:
            self._events.emit(
                "gateway", action="lease_released", shard=list(held.shard), epoch=held.epoch
            )

    async def _stop_answers(self, shards: list[HeldShard]) -> None:
        """Past their settle time, what is still in hand for these shards is stopped,
        unposted and unmarked: the next holder answers it, never both."""
        for held in shards:
            self._end(held)
        fence = self._fence
        if fence is not None:
            with trio.move_on_after(STOPPED_SECONDS):
                for held in shards:
                    await fence.stopped(held.shard[0])

    async def hand_back_all(self, *, leave: bool = True) -> None:
        """Hand every held shard back and (`leave`) leave the live processes, so that the
        others count their fair shares without this one at once (a clean stop)."""
        with trio.move_on_after(HAND_BACK_SECONDS * 2):
            await self._hand_back(list(self.held.values()))
            if not leave:
                return
            self._present(False)
            try:
                await self._thread(functools.partial(self._table.leave, self._node))
            except Exception as exc:
                self._complain(exc)

    def _end(self, held: HeldShard) -> None:
        """Tell the fence the shard is no longer held: its answers in progress are stopped."""
        if self._fence is None:
            return
        stopped = self._fence.end(held.shard[0])
        if stopped:
            self._events.emit(
                "gateway", action="answers_stopped", shard=list(held.shard), answers=stopped
            )

    def _forget_ended(self) -> None:
        for shard_id, held in list(self.held.items()):
            if held.ended.is_set():
                del self.held[shard_id]
                self._on_held(self.shards())

    # ---- helpers ---------------------------------------------------------------------------

    async def _thread(self, fn: Callable[[], Any]) -> Any:
        return await self._call(fn)

    def _complain(self, exc: Exception) -> None:
        now = trio.current_time()
        if now - self._complained_at >= COMPLAINT_SECONDS:
            self._complained_at = now
            logger.error("shard leases: %s", exc)
            self._events.emit("error", scope="leases", message=f"shard leases: {exc}")


def _only_cancelled(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_cancelled(e) for e in exc.exceptions)
    return isinstance(exc, trio.Cancelled)
