"""The lease keeper's timing (SPEC 17) on trio's MockClock, over a lease table in memory whose
clock is the database's: a shard not renewed in time stops before its lease ends there; an
expired shard is taken, with its saved session; capacity; a clean stop hands back."""

from __future__ import annotations

import itertools
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import attrs
import trio
import trio.testing

from picortex.actors.shard_fence import ShardFence
from picortex.actors.shard_leases import HAND_BACK_SECONDS, ShardLeaseKeeper
from picortex.core.leases import Lease, Want, margin
from picortex.runtime.supervisor import DynamicSupervisor
from tests.helpers import RecordingSink

LEASE = 10.0
Shard = tuple[int, int]
Session = tuple[str, str, int]


@attrs.define
class FakeTable:
    """The lease table as PostgreSQL keeps it; `db_offset` is how far the database's clock is
    ahead of ours; a statement reaches it `before` seconds after it is sent, and its answer
    comes back `after` seconds later."""

    leases: dict[int, Lease] = attrs.Factory(dict)
    sessions: dict[int, Session] = attrs.Factory(dict)
    nodes: list[str] = attrs.Factory(list)
    db_offset: float = 0.0
    before: float = 0.0
    after: float = 0.0
    log: list[tuple[str, float]] = attrs.Factory(list)

    def now(self) -> float:
        return trio.current_time() + self.db_offset

    async def call(self, fn: Callable[[], Any]) -> Any:
        await trio.sleep(self.before)
        result = fn()
        await trio.sleep(self.after)
        return result

    def take(self, shard: Shard, node: str, seconds: float) -> int | None:
        now = self.now()
        old = self.leases.get(shard[0])
        if old is not None and old.live(now) and old.node != node:
            return None
        epoch = 1 if old is None else old.epoch + (old.node != node)
        if old is not None and old.node not in (None, node) and old.node in self.nodes:
            # It let its lease lapse (no heartbeat here to tell it alive since): gone.
            self.nodes.remove(old.node)
        self.leases[shard[0]] = Lease(shard[0], node, epoch, now + seconds)
        self.log.append((f"take {shard[0]}", now))
        return epoch

    def renew(self, shard_ids: Sequence[int], node: str, seconds: float) -> set[int]:
        now = self.now()
        mine = set()
        for i in shard_ids:
            lease = self.leases.get(i)
            if lease is not None and lease.node == node and lease.live(now):
                self.leases[i] = attrs.evolve(lease, expires_at=now + seconds)
                mine.add(i)
        self.log.append(("renew", now))
        return mine

    def release(self, shard_ids: Sequence[int], node: str) -> int:
        now = self.now()
        released = 0
        for i in shard_ids:
            lease = self.leases.get(i)
            if lease is not None and lease.node == node:
                self.leases[i] = attrs.evolve(lease, node=None, expires_at=now)
                released += 1
                self.log.append((f"release {i}", now))
        return released

    def leave(self, node: str) -> None:
        if node in self.nodes:
            self.nodes.remove(node)
        self.log.append((f"leave {node}", self.now()))

    def leases_(self) -> tuple[float, dict[int, Lease]]:
        return self.now(), dict(self.leases)

    def live_nodes(self, now: float) -> list[str]:
        return list(self.nodes)

    def gateway_session(self, shard: Shard) -> Session | None:
        return self.sessions.get(shard[0])


@attrs.define(eq=False)
class FakeGateway:
    shard: Shard
    saved: Session | None
    leaving: Literal["hand_back", "lost"] | None = None
    running: bool = False
    left: str | None = None
    stopped_at: float = math.inf

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.running = True
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            self.running = False
            self.left = self.leaving
            self.stopped_at = trio.current_time()


@attrs.define
class Rig:
    table: FakeTable
    keeper: ShardLeaseKeeper
    gateways: list[FakeGateway]
    order: list[str]


def rig(table: FakeTable, want: Want, supervisor: DynamicSupervisor) -> Rig:
    gateways: list[FakeGateway] = []
    order: list[str] = []

    def make(shard: Shard, saved: Session | None) -> FakeGateway:
        order.append(f"gateway {shard[0]}")
        gateways.append(FakeGateway(shard, saved))
        return gateways[-1]

    async def adopt(shard: Shard) -> None:
        order.append(f"adopt {shard[0]}")

    async def settle(shard: Shard) -> None:
        await trio.sleep(0.5)  # messages in hand finish, the store commits
        order.append(f"settled {shard[0]}")

    keeper = ShardLeaseKeeper(
        _Table(table),
        want,
        node="me",
        lease_seconds=LEASE,
        gateways=supervisor,
        make_gateway=make,
        adopt=adopt,
        settle=settle,
        events=RecordingSink(),
        call=table.call,
    )
    return Rig(table, keeper, gateways, order)


@attrs.define
class _Table:
    """FakeTable under the names the keeper calls."""

    fake: FakeTable

    def take(self, shard: Shard, node: str, seconds: float) -> int | None:
        return self.fake.take(shard, node, seconds)

    def renew(self, shard_ids: Sequence[int], node: str, seconds: float) -> set[int]:
        return self.fake.renew(shard_ids, node, seconds)

    def release(self, shard_ids: Sequence[int], node: str) -> int:
        return self.fake.release(shard_ids, node)

    def leave(self, node: str) -> None:
        self.fake.leave(node)

    def leases(self) -> tuple[float, dict[int, Lease]]:
        return self.fake.leases_()

    def live_nodes(self, now: float) -> list[str]:
        return self.fake.live_nodes(now)

    def gateway_session(self, shard: Shard) -> Session | None:
        return self.fake.gateway_session(shard)


async def _running(table: FakeTable, want: Want, body: Callable[[Rig], Awaitable[None]]) -> Rig:
    supervisor = DynamicSupervisor("gateways", events=RecordingSink())
    r = rig(table, want, supervisor)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        keeper_scope = trio.CancelScope()

        async def keep() -> None:
            with keeper_scope:
                await r.keeper.run()

        nursery.start_soon(keep)
        await body(r)
        keeper_scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return r


async def test_renewed_leases_keep_the_shard_served(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable(after=0.2)

    async def body(r: Rig) -> None:
        await trio.sleep(120)
        [gateway] = r.gateways
        assert gateway.running
        renewals = [at for what, at in r.table.log if what == "renew"]
        assert len(renewals) >= 120 / (LEASE / 3) - 2
        assert max(b - a for a, b in itertools.pairwise(renewals)) < LEASE / 2

    await _running(table, Want(ids=(0,), count=1, capacity=1), body)


async def test_a_shard_not_renewed_stops_before_its_lease_ends_on_the_databases_clock(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # The database's clock is a second behind ours, and its answers are slow.
    table = FakeTable(db_offset=-1.0, before=0.5, after=1.5)
    ends: list[float] = []

    async def body(r: Rig) -> None:
        await trio.sleep(30)
        [gateway] = r.gateways
        assert gateway.running
        # The database stops answering: renewals hang from here on (one sent just before
        # may still land).
        table.before = math.inf
        await trio.sleep(3 * LEASE)
        ends.append(table.leases[0].expires_at)
        assert not gateway.running
        assert gateway.left == "lost"
        # Stopped by our clock alone, at least the margin before the lease ends on the
        # database's clock.
        lease_end_on_our_clock = ends[0] - table.db_offset
        assert gateway.stopped_at <= lease_end_on_our_clock - margin(LEASE)
        assert 0 not in {h for h in r.keeper.held if not r.keeper.held[h].ended.is_set()}

    await _running(table, Want(ids=(0,), count=1, capacity=1), body)


async def test_a_lease_taken_by_another_stops_its_gateway_at_the_next_renewal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable()

    async def body(r: Rig) -> None:
        await trio.sleep(1)
        [gateway] = r.gateways
        # Another process took it (an operator's hand, a clock jump): ours no more.
        table.leases[0] = Lease(0, "other", 2, table.now() + 100)
        await trio.sleep(LEASE / 3 + 0.1)
        assert not gateway.running
        assert gateway.left == "lost"
        assert r.keeper.held == {}
        assert table.leases[0].node == "other"  # never released by us

    await _running(table, Want(ids=(0,), count=1, capacity=1), body)


async def test_an_expired_shard_is_taken_with_its_saved_session(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable()
    table.leases[1] = Lease(1, "dead", 4, 25.0)  # its holder stopped renewing
    table.sessions[1] = ("sess-1", "wss://resume", 41)

    async def body(r: Rig) -> None:
        await trio.sleep(1)
        assert [g.shard for g in r.gateways] == [(0, 2)]
        await trio.sleep(24)
        assert [g.shard for g in r.gateways] == [(0, 2)]  # still the dead one's
        await trio.sleep(LEASE / 3 + 0.1)
        assert [g.shard for g in r.gateways] == [(0, 2), (1, 2)]
        assert r.gateways[1].saved == ("sess-1", "wss://resume", 41)
        assert r.gateways[1].running
        assert r.order.index("adopt 1") < r.order.index("gateway 1")
        assert (table.leases[1].node, table.leases[1].epoch) == ("me", 5)
        taken_at = next(at for what, at in table.log if what == "take 1")
        assert 25.0 <= taken_at <= 25.0 + LEASE / 3 + 0.1

    await _running(table, Want(ids=(0, 1), count=2, capacity=2), body)


async def test_auto_takes_no_more_than_capacity(autojump_clock: trio.testing.MockClock) -> None:
    table = FakeTable(nodes=["me"])

    async def body(r: Rig) -> None:
        await trio.sleep(30)
        assert sorted(r.keeper.held) == [0, 1]
        assert sorted(i for i, lease in table.leases.items() if lease.node == "me") == [0, 1]

    await _running(table, Want(ids=(), count=4, capacity=2, auto=True), body)


async def test_a_clean_stop_hands_every_shard_back_after_settling(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable(nodes=["me"])
    table.leases[1] = Lease(1, "other", 1, 1e9)

    async def body(r: Rig) -> None:
        await trio.sleep(5)

    r = await _running(table, Want(ids=(0, 1, 2), count=4, capacity=3), body)
    assert [g.left for g in r.gateways] == ["hand_back", "hand_back"]
    assert r.order[-2:] == ["settled 0", "settled 2"] or r.order[-2:] == ["settled 2", "settled 0"]
    released = [what for what, _ in table.log if what.startswith("release")]
    assert sorted(released) == ["release 0", "release 2"]
    assert table.leases[0].node is None and table.leases[2].node is None
    assert table.leases[1].node == "other"
    # Released only once settled: the next holder finds the marks and the session committed.
    stopped = max(g.stopped_at for g in r.gateways)
    release_times = [at for what, at in table.log if what.startswith("release")]
    assert min(release_times) >= stopped + 0.5
    # ... and it leaves the live processes last: the others' fair share counts without it.
    assert table.log[-1][0] == "leave me"
    assert table.nodes == []


async def test_auto_hands_one_back_to_a_process_that_has_none(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable(nodes=["me"])

    async def body(r: Rig) -> None:
        await trio.sleep(1)
        assert sorted(r.keeper.held) == [0, 1]
        table.nodes.append("b")  # another process starts, holding nothing
        await trio.sleep(LEASE / 3 + 1)
        assert sorted(r.keeper.held) == [0]
        assert r.gateways[1].left == "hand_back"
        assert table.leases[1].node is None  # free for "b" at once

    await _running(table, Want(ids=(), count=2, capacity=2, auto=True), body)


async def test_a_crashed_keeper_hands_back_but_stays_one_of_the_live_processes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable(nodes=["me"])
    presence: list[bool] = []
    supervisor = DynamicSupervisor("gateways", events=RecordingSink())
    r = rig(table, Want(ids=(0, 1), count=2, capacity=2), supervisor)
    made = 0

    def make(shard: Shard, saved: Session | None) -> FakeGateway:
        nonlocal made
        made += 1
        if made == 2:
            raise RuntimeError("a bug while starting shard 1")
        r.gateways.append(FakeGateway(shard, saved))
        return r.gateways[-1]

    keeper = ShardLeaseKeeper(
        _Table(table),
        Want(ids=(0, 1), count=2, capacity=2),
        node="me",
        lease_seconds=LEASE,
        gateways=supervisor,
        make_gateway=make,
        adopt=lambda shard: trio.sleep(0),
        settle=lambda shard: trio.sleep(0),
        events=RecordingSink(),
        present=presence.append,
        call=table.call,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        try:
            await keeper.run()
        except RuntimeError:
            pass
        else:
            raise AssertionError("the keeper should have crashed")
        assert r.gateways[0].left == "hand_back"
        assert table.leases[0].node is None  # handed back
        assert table.nodes == ["me"] and presence == [True]  # a restart is coming: not gone
        nursery.cancel_scope.cancel()


async def test_a_dead_holders_shard_is_taken_as_its_lease_ends_not_at_the_next_renewal(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable()
    # Renewals come at 0, 3.3, ... 23.3, 26.7: the lease ends in between.
    table.leases[1] = Lease(1, "dead", 4, 25.0)

    async def body(r: Rig) -> None:
        await trio.sleep(30)
        taken_at = next(at for what, at in table.log if what == "take 1")
        assert 25.0 <= taken_at <= 25.0 + 0.1
        assert [g.shard for g in r.gateways] == [(0, 2), (1, 2)]

    await _running(table, Want(ids=(0, 1), count=2, capacity=2), body)


async def test_a_dead_processs_shards_taken_over_are_kept_not_handed_back_to_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Taking over a dead process's shards leaves this one above its old share: the dead
    one, gone from the live processes with the take, is owed none of them."""
    table = FakeTable(nodes=["me", "dead"])
    table.leases[2] = Lease(2, "dead", 1, 12.0)
    table.leases[3] = Lease(3, "dead", 1, 12.0)

    async def body(r: Rig) -> None:
        await trio.sleep(1)
        assert sorted(r.keeper.held) == [0, 1]  # its share of two processes
        await trio.sleep(LEASE * 2)
        assert sorted(r.keeper.held) == [0, 1, 2, 3]
        assert not [what for what, _ in table.log if what.startswith("release")]
        assert table.nodes == ["me"]

    await _running(table, Want(ids=(), count=4, capacity=4, auto=True), body)


@attrs.define
class Raced(FakeTable):
    """Another process takes shard 0 the moment it is free, just before this one asks."""

    def take(self, shard: Shard, node: str, seconds: float) -> int | None:
        if shard[0] == 0 and self.leases[0].node == "dead":
            super().take(shard, "other", seconds)
        return super().take(shard, node, seconds)


async def test_a_shard_another_process_took_first_leads_to_the_next_free_one_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = Raced(nodes=["me", "other"])
    # Two dead holders' shards end together; "other" wins the race for the first.
    table.leases.update({0: Lease(0, "dead", 1, 5.0), 1: Lease(1, "dead", 1, 5.0)})

    async def body(r: Rig) -> None:
        await trio.sleep(5.5)
        assert sorted(r.keeper.held) == [1]
        assert table.leases[0].node == "other"

    # Shards 2 and 3 are held by live processes; the share of three processes is 1 or 2.
    table.leases.update({2: Lease(2, "other", 1, 1e9), 3: Lease(3, "third", 1, 1e9)})
    table.nodes.append("third")
    await _running(table, Want(ids=(), count=4, capacity=1, auto=True), body)


async def test_a_slow_hand_back_neither_holds_up_renewals_nor_lets_its_shard_lapse(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable(nodes=["me"])
    supervisor = DynamicSupervisor("gateways", events=RecordingSink())
    gateways: list[FakeGateway] = []
    live_when_settled: list[bool] = []

    def make(shard: Shard, saved: Session | None) -> FakeGateway:
        gateways.append(FakeGateway(shard, saved))
        return gateways[-1]

    async def settle(shard: Shard) -> None:
        # The messages in hand take nearly all the time a hand-back has.
        await trio.sleep(HAND_BACK_SECONDS - 0.5)
        live_when_settled.append(table.leases[shard[0]].live(table.now()))

    keeper = ShardLeaseKeeper(
        _Table(table),
        Want(ids=(), count=2, capacity=2, auto=True),
        node="me",
        lease_seconds=LEASE,
        gateways=supervisor,
        make_gateway=make,
        adopt=lambda shard: trio.sleep(0),
        settle=settle,
        events=RecordingSink(),
        call=table.call,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        nursery.start_soon(keeper.run)
        await trio.sleep(1)
        assert sorted(keeper.held) == [0, 1]
        table.nodes.append("b")  # one shard goes to "b", slowly
        await trio.sleep(LEASE / 3 + HAND_BACK_SECONDS + 1)
        # Shard 0 was renewed meanwhile: never stopped.
        assert gateways[0].running and sorted(keeper.held) == [0]
        assert table.leases[0].node == "me" and table.leases[0].live(table.now())
        assert gateways[1].left == "hand_back"
        assert live_when_settled == [True]  # ours all along until released
        assert table.leases[1].node is None
        nursery.cancel_scope.cancel()


async def test_a_hand_back_past_its_settle_time_stops_what_is_in_hand_then_commits_then_releases(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable(nodes=["me"])
    supervisor = DynamicSupervisor("gateways", events=RecordingSink())
    fence = ShardFence(2)
    order: list[str] = []
    answer_stopped_at: list[float] = []

    async def settle(shard: Shard) -> None:
        await trio.sleep_forever()  # an answer still with the model

    async def flush() -> None:
        order.append(f"flush, shard 1 held: {fence.holds(1)}")

    async def answer() -> None:
        # An answer in progress on shard 1 (a guild routed there).
        scope = trio.CancelScope()
        with fence.working(1 << 22, scope), scope:
            await trio.sleep_forever()
        answer_stopped_at.append(trio.current_time())

    class Releases(_Table):
        def release(self, shard_ids: Sequence[int], node: str) -> int:
            order.append(f"release {list(shard_ids)}")
            return super().release(shard_ids, node)

    keeper = ShardLeaseKeeper(
        Releases(table),
        Want(ids=(), count=2, capacity=2, auto=True),
        node="me",
        lease_seconds=LEASE,
        gateways=supervisor,
        make_gateway=lambda shard, saved: FakeGateway(shard, saved),
        adopt=lambda shard: trio.sleep(0),
        settle=settle,
        events=RecordingSink(),
        call=table.call,
        fence=fence,
        flush=flush,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        nursery.start_soon(keeper.run)
        await trio.sleep(1)
        assert sorted(keeper.held) == [0, 1] and fence.holds(0) and fence.holds(1)
        nursery.start_soon(answer)
        await trio.sleep(LEASE)  # renewed meanwhile: still held
        assert fence.holds(1) and answer_stopped_at == []
        table.nodes.append("b")  # one shard goes to "b"
        await trio.sleep(LEASE / 3 + HAND_BACK_SECONDS + 1)
        # The highest shard goes back: its answer is stopped at the settle time, before the
        # marks are committed and the lease released; the other shard's stays held.
        assert table.leases[1].node is None and table.leases[0].node == "me"
        assert order == ["flush, shard 1 held: False", "release [1]"]
        [stopped] = answer_stopped_at
        release_at = next(at for what, at in table.log if what == "release 1")
        assert stopped <= release_at
        assert fence.holds(0)
        nursery.cancel_scope.cancel()


async def test_a_lease_taken_or_not_renewed_ends_the_shard_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    table = FakeTable()
    fence = ShardFence(2)
    supervisor = DynamicSupervisor("gateways", events=RecordingSink())
    keeper = ShardLeaseKeeper(
        _Table(table),
        Want(ids=(0, 1), count=2, capacity=2),
        node="me",
        lease_seconds=LEASE,
        gateways=supervisor,
        make_gateway=lambda shard, saved: FakeGateway(shard, saved),
        adopt=lambda shard: trio.sleep(0),
        settle=lambda shard: trio.sleep(0),
        events=RecordingSink(),
        call=table.call,
        fence=fence,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        nursery.start_soon(keeper.run)
        await trio.sleep(1)
        assert fence.holds(0) and fence.holds(1)
        # Another process took shard 0: ended at the next renewal, before its lease would
        # have run out on our clock.
        table.leases[0] = Lease(0, "other", 2, table.now() + 100)
        await trio.sleep(LEASE / 3 + 0.1)
        assert not fence.holds(0) and fence.holds(1)
        # The database stops answering: shard 1 ends by our clock alone, and stays ended.
        table.before = math.inf
        await trio.sleep(LEASE)
        assert not fence.holds(1)
        nursery.cancel_scope.cancel()
