"""Discord's limits shared by the processes of a cluster, over a real PostgreSQL.

Each "process" is a `SharedGlobalLimit` / `SharedIdentify` (and a REST client or gateway
actor) with a database connection of its own. Under the autojump clock the connections run
their statements on the event loop (`DirectLimits`), so virtual time never moves while the
database works, and the database's clock is the virtual one.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator

import httpx
import orjson
import pytest
import trio
import trio.testing

from picortex.discord.gateway import GatewayActor, IdentifyTurns
from picortex.discord.ratelimit import GLOBAL_BUDGET, GLOBAL_WINDOW
from picortex.discord.rest import RestClient
from picortex.discord.shared_limits import (
    ANSWER_PATIENCE,
    HELD_SPARE_SECONDS,
    HELD_SPARES,
    QUIET_SECONDS,
    SPARE_SECONDS,
    WARM_SECONDS,
    BucketClaim,
    Grant,
    GrantBook,
    SharedGlobalLimit,
    SharedIdentify,
    ShareWindow,
    fair_share,
)
from picortex.sim import Simulator
from picortex.store.pg.limits import PgLimits
from tests.discord.test_gateway import TOKEN, SimRest, wait_until
from tests.helpers import RecordingSink

API = "https://discord.test/api/v10"
WINDOW = 5.0  # Discord's identify window


class DirectLimits:
    """A process's connection to the shared tables, answering on the event loop."""

    def __init__(self, db: PgLimits) -> None:
        self.db = db
        self.reachable = True
        self.live = 1
        self.grants: list[Grant] = []

    def grant(self, wanted: int, done: Callable[[Grant | None], None]) -> None:
        grant = self.db.grant(wanted) if self.reachable else None
        if grant is not None:
            self.grants.append(grant)
        done(grant)

    def pause(self, seconds: float) -> None:
        self.db.pause(seconds)

    def claim_bucket(
        self, bucket: int, window: float, done: Callable[[BucketClaim | None], None]
    ) -> None:
        done(self.db.claim_bucket(bucket, window) if self.reachable else None)

    def release_bucket(
        self, bucket: int, claim: BucketClaim, identified_ago: float | None, invalid: bool
    ) -> None:
        self.db.release_bucket(bucket, identified_ago, invalid=invalid, held=claim.held)


@pytest.fixture
def processes(
    pg_url: str, autojump_clock: trio.testing.MockClock
) -> Iterator[Callable[[], DirectLimits]]:
    """Makes one process's connection at a time, on the virtual clock."""
    opened: list[PgLimits] = []

    def one() -> DirectLimits:
        db = PgLimits.open(pg_url, clock=autojump_clock.current_time)
        opened.append(db)
        return DirectLimits(db)

    yield one
    for db in opened:
        db.close()


def busiest_second(times: list[float]) -> int:
    times = sorted(times)
    return max(bisect.bisect_left(times, t + GLOBAL_WINDOW) - i for i, t in enumerate(times))


# ---- the bookkeeping ---------------------------------------------------------------------------


def test_a_granted_slot_is_used_within_the_window_it_was_asked_in_or_never() -> None:
    book = GrantBook(spare=0)
    book.waiting = 3
    assert book.ask(10.0) == 3
    assert book.ask(10.1) == 0  # the answer is awaited
    # The table took the slots a little after the asking, by its own clock.
    book.answered(Grant(wanted=3, granted=3, now=500.2, retry_at=500.2), 10.3)
    assert book.take(10.9) and book.take(10.99)
    assert not book.take(10.0 + GLOBAL_WINDOW)  # the third one is somebody else's by now
    assert len(book) == 0


def test_a_short_grant_waits_for_the_next_free_slot_on_the_tables_clock() -> None:
    book = GrantBook(spare=0)
    book.waiting = 5
    assert book.ask(0.0) == 5
    book.answered(Grant(wanted=5, granted=2, now=100.0, retry_at=100.5), 0.25)
    assert book.ask(0.7) == 0
    assert book.ask(0.75) == 5  # 0.25 (the answer) + 0.5 (the table's wait)


def test_a_pause_drops_the_slots_in_hand() -> None:
    book = GrantBook(spare=0)
    assert book.ask(0.0) == 1
    book.answered(Grant(wanted=1, granted=1, now=0.0, retry_at=0.0), 0.0)
    book.block(3.0)
    assert not book.take(0.1)
    assert book.ask(2.9) == 0
    assert book.ask(3.0) == 1
    book.answered(Grant(wanted=1, granted=0, now=3.0, retry_at=9.0, paused_until=9.0), 3.0)
    assert book.ask(8.9) == 0 and book.ask(9.0) == 1


def test_the_share_of_a_process_out_of_reach() -> None:
    assert [fair_share(live) for live in (0, 1, 2, 3, 4, 100)] == [48, 48, 24, 16, 12, 1]
    window = ShareWindow()
    assert all(window.take(0.0, 2) for _ in range(2))
    assert not window.take(0.5, 2)
    assert window.next_free(0.5) == GLOBAL_WINDOW
    assert window.take(GLOBAL_WINDOW, 2)


# ---- the global limit -------------------------------------------------------------------------


async def test_two_processes_together_stay_within_the_budget_and_sustain_it(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = [SharedGlobalLimit(processes()) for _ in range(2)]
    sent: list[float] = []
    requests = GLOBAL_BUDGET * 5

    async def request(limit: SharedGlobalLimit) -> None:
        await limit.take()
        sent.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for n in range(requests):
            nursery.start_soon(request, limits[n % 2])
    assert len(sent) == requests
    assert busiest_second(sent) <= GLOBAL_BUDGET
    # Sustained: the whole burst took no more than a window beyond what the budget needs.
    assert max(sent) <= requests / GLOBAL_BUDGET


async def test_a_burst_is_granted_in_few_round_trips(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = processes()
    limit = SharedGlobalLimit(backend)
    async with trio.open_nursery() as nursery:
        for _ in range(GLOBAL_BUDGET):
            nursery.start_soon(limit.take)
    assert sum(g.granted for g in backend.grants) == GLOBAL_BUDGET
    assert len(backend.grants) <= 2  # one for the first asker, one for everyone behind it


async def test_the_next_request_of_an_answer_finds_a_slot_in_hand(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    busy, backend = processes(), processes()
    limit = SharedGlobalLimit(backend)
    assert await limit.take()  # the history read: one slot for it, one kept in hand
    assert [g.granted for g in backend.grants] == [2]
    assert busy.db.grant(GLOBAL_BUDGET).granted == GLOBAL_BUDGET - 2
    # The typing indicator goes on the slot in hand, without waiting for the table.
    assert await limit.take(wait=False)
    assert trio.current_time() == 0.0
    # With the table full, nothing more is kept in hand: the reply waits for a free slot.
    assert not await limit.take(wait=False)


async def test_a_slot_kept_in_hand_is_let_go_soon(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    busy, limit = processes(), SharedGlobalLimit(processes())
    assert await limit.take()
    await trio.sleep(SPARE_SECONDS)
    assert busy.db.grant(GLOBAL_BUDGET).granted == GLOBAL_BUDGET - 2
    assert not await limit.take(wait=False)


def test_spares_are_asked_for_only_while_the_table_grants_in_full() -> None:
    book = GrantBook()
    book.waiting = 1
    assert book.ask(0.0) == 2
    book.answered(Grant(wanted=2, granted=1, now=0.0, retry_at=0.5), 0.0)
    assert book.take(0.0) and not book.take(0.0)
    assert book.ask(0.5) == 1  # the table is short: no spare
    book.answered(Grant(wanted=1, granted=1, now=0.5, retry_at=0.5), 0.5)
    assert book.take(0.5)
    assert book.refill(0.5) == 1  # it had room again
    assert book.ask(0.5) == 1  # a refill out holds back no request that wants a slot
    assert book.refill(0.5) == 0  # one refill out at a time
    book.refilled(Grant(wanted=1, granted=1, now=0.51, retry_at=0.51), 0.51)
    assert book.take(0.5 + SPARE_SECONDS - 0.01)
    assert not book.take(0.5 + SPARE_SECONDS - 0.01)


async def test_a_global_429_on_one_process_pauses_the_other(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    one, two = SharedGlobalLimit(processes()), SharedGlobalLimit(processes())
    assert await two.take()  # it has been granted slots before
    one.pause(3.0)
    await trio.sleep(0.5)
    assert await two.take()
    assert trio.current_time() >= 3.0


async def test_an_optional_request_goes_only_when_a_slot_is_free_now(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    busy, idle = processes(), SharedGlobalLimit(processes())
    assert busy.db.grant(GLOBAL_BUDGET).granted == GLOBAL_BUDGET
    assert not await idle.take(wait=False)
    assert trio.current_time() == 0.0  # dropped at once, not delayed
    await trio.sleep(GLOBAL_WINDOW)
    assert await idle.take(wait=False)


async def test_out_of_reach_each_process_keeps_to_its_share(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = processes()
    backend.reachable = False
    backend.live = 3
    limit = SharedGlobalLimit(backend)
    sent: list[float] = []

    async def request() -> None:
        await limit.take()
        sent.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for _ in range(40):
            nursery.start_soon(request)
    share = fair_share(3)
    assert share == GLOBAL_BUDGET // 3
    assert busiest_second(sent) == share
    assert sent.count(0.0) == share
    assert not backend.grants


async def test_a_database_that_does_not_answer_leaves_requests_on_the_share(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Silent(DirectLimits):
        def __init__(self) -> None:
            self.reachable = True
            self.live = 2
            self.grants = []

        def grant(self, wanted: int, done: Callable[[Grant | None], None]) -> None:
            pass  # a server that hangs

    limit = SharedGlobalLimit(Silent())
    assert await limit.take()
    assert trio.current_time() == ANSWER_PATIENCE


# ---- identify buckets -------------------------------------------------------------------------


async def identify(
    gate: SharedIdentify, shard_id: int, bucket: int, *, ready_after: float, invalid: bool = False
) -> float:
    """One shard's IDENTIFY through the gate: when it was sent."""
    await gate.claim(shard_id, bucket, WINDOW)
    sent = trio.current_time()
    gate.identified(shard_id)
    await trio.sleep(ready_after)
    gate.settle(shard_id, invalid=invalid)
    return sent


async def test_two_processes_of_one_bucket_identify_a_window_apart_another_bucket_at_once(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    one, two, three = (SharedIdentify(processes()) for _ in range(3))
    sent: dict[int, float] = {}

    async def shard(gate: SharedIdentify, shard_id: int, start: float) -> None:
        await trio.sleep(start)
        sent[shard_id] = await identify(gate, shard_id, shard_id % 2, ready_after=0.4)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(shard, one, 0, 0.0)
        nursery.start_soon(shard, two, 2, 0.1)  # bucket 0 as well
        nursery.start_soon(shard, three, 1, 0.1)  # bucket 1
    assert sent[0] == 0.0
    assert sent[1] == 0.1  # never waited for bucket 0
    assert WINDOW <= sent[2] - sent[0] <= WINDOW + 0.2


async def test_a_bucket_is_held_until_the_identify_has_its_outcome(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    one, two = SharedIdentify(processes()), SharedIdentify(processes())
    sent: list[float] = []
    async with trio.open_nursery() as nursery:

        async def slow_ready() -> None:
            sent.append(await identify(one, 0, 0, ready_after=8.0))

        nursery.start_soon(slow_ready)
        await trio.sleep(0.5)
        sent.append(await identify(two, 2, 0, ready_after=0.1))
    assert sent[0] == 0.0
    assert 8.0 <= sent[1] <= 8.0 + 0.2  # after READY, not at the end of the window


async def test_an_op_9_gives_the_bucket_a_pause(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    one, two = SharedIdentify(processes()), SharedIdentify(processes())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: identify(one, 0, 0, ready_after=2.0, invalid=True))
        await trio.sleep(0.5)
        sent = await identify(two, 2, 0, ready_after=0.1)
    assert 2.0 + WINDOW <= sent <= 2.0 + WINDOW + 0.2


async def test_a_claim_given_up_lets_the_bucket_go(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Late(DirectLimits):
        """Answers a claim only when told to (as a busy worker thread would)."""

        answer: Callable[[], None] | None = None

        def claim_bucket(
            self, bucket: int, window: float, done: Callable[[BucketClaim | None], None]
        ) -> None:
            self.answer = lambda: done(self.db.claim_bucket(bucket, window))

    late = Late(processes().db)
    gate, other = SharedIdentify(late), SharedIdentify(processes())
    with trio.move_on_after(1.0):
        await gate.claim(0, 0, WINDOW)
    assert late.answer is not None
    late.answer()  # the lock was taken for a claim nobody waits for any more
    await trio.sleep(0)
    await trio.sleep(0)
    assert not gate.holds(0)
    with trio.fail_after(0.5):
        await other.claim(2, 0, WINDOW)
    assert other.holds(2)


async def test_out_of_reach_a_shard_identifies_on_local_pacing_alone(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    holder, cut_off = processes(), processes()
    assert holder.db.claim_bucket(0, WINDOW).held
    cut_off.reachable = False
    assert await SharedIdentify(cut_off).claim(2, 0, WINDOW) == 0.0


# ---- the REST client and the gateway ------------------------------------------------------------


class Discord:
    """Answers every request at once (a global 429 for the first `refuse` of them)."""

    def __init__(self, refuse: int = 0) -> None:
        self.arrivals: list[tuple[float, str]] = []
        self.refuse = refuse

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrivals.append((trio.current_time(), request.url.path))
        if self.refuse:
            self.refuse -= 1
            body = {"message": "You are being rate limited.", "retry_after": 3.0, "global": True}
            headers = {"x-ratelimit-global": "true", "x-ratelimit-scope": "global"}
            return httpx.Response(429, content=orjson.dumps(body), headers=headers)
        return httpx.Response(200, content=orjson.dumps({"id": "1"}))

    def client(self, backend: DirectLimits) -> RestClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self))
        return RestClient(API, "tok", client=http, shared=SharedGlobalLimit(backend))


async def test_rest_clients_of_two_processes_share_discords_global_limit(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    discord = Discord()
    async with (
        discord.client(processes()) as one,
        discord.client(processes()) as two,
        trio.open_nursery() as nursery,
    ):
        for n in range(GLOBAL_BUDGET * 3):
            client = one if n % 2 else two
            nursery.start_soon(client.create_message, 100 + n, "hello")
    assert len(discord.arrivals) == GLOBAL_BUDGET * 3
    assert busiest_second([at for at, _ in discord.arrivals]) <= GLOBAL_BUDGET


async def test_a_slot_for_the_next_request_is_asked_once_a_request_is_over_not_before_it(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The refill's question (and the database's work on it) never goes ahead of the request
    that used the slot in hand; once that request is over, the next finds one in hand."""
    backend = processes()
    asked_at_arrival: list[int] = []

    def discord(request: httpx.Request) -> httpx.Response:
        asked_at_arrival.append(len(backend.grants))
        return httpx.Response(200, content=orjson.dumps({"id": "1"}))

    http = httpx.AsyncClient(transport=httpx.MockTransport(discord))
    async with RestClient(API, "tok", client=http, shared=SharedGlobalLimit(backend)) as rest:
        await rest.create_message(100, "one")  # asks for its slot and a spare
        assert [g.granted for g in backend.grants] == [2]
        await rest.create_message(100, "two")  # on the spare; the refill only after it
        assert asked_at_arrival == [1, 1]
        assert [g.granted for g in backend.grants] == [2, 1]
        await trio.testing.wait_all_tasks_blocked()  # its answer is in
        await rest.create_message(100, "three")  # on the refilled spare: no question first
        assert asked_at_arrival == [1, 1, 2]
    assert trio.current_time() < SPARE_SECONDS


async def test_a_global_429_on_one_rest_client_holds_back_the_other(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    discord = Discord(refuse=1)
    async with discord.client(processes()) as one, discord.client(processes()) as two:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one.create_message, 1, "first")
            await trio.sleep(0.5)
            await two.create_message(2, "second")
        second = [at for at, path in discord.arrivals if path.startswith("/api/v10/channels/2")]
        assert second == [pytest.approx(3.0, abs=0.1)]


async def test_interaction_endpoints_go_while_the_cluster_is_paused(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    paused = processes()
    paused.db.pause(10.0)
    discord = Discord()
    async with discord.client(paused) as client:
        await client.create_interaction_response(5, "itoken", {"type": 5})
        await client.edit_original_interaction_response(7, "itoken", {"content": "done"})
        assert trio.current_time() == 0.0
        await client.create_message(1, "a message waits")
        assert trio.current_time() >= 10.0


async def test_shards_of_one_bucket_in_two_processes_identify_without_op_9(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Three processes start at once, max_concurrency 2: shards 0 and 2 share bucket 0, so
    one waits its window; shard 1 (bucket 1) goes at once."""
    sim = Simulator(TOKEN, limit_identify_concurrency=True, max_concurrency=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        sim.add_default_world()
        sink = RecordingSink()
        for shard_id in (0, 2, 1):
            turns = IdentifyTurns(gate=SharedIdentify(processes()))
            actor = GatewayActor(
                TOKEN, SimRest(sim), sink, lambda *_: None, shard=(shard_id, 4), turns=turns
            )
            nursery.start_soon(actor.run)
        await wait_until(lambda: sim.gateway_stats.identifies == 3)
        await wait_until(
            lambda: len([e for e in sink.of("gateway") if e["action"] == "ready"]) == 3
        )
        stats = sim.gateway_stats
        assert stats.identify_rate_limited == 0
        first, second, third = stats.identify_times
        assert second - first < 1.0  # buckets 0 and 1 at once
        assert third - first >= WINDOW
        waits = [e for e in sink.of("gateway") if e.get("cluster")]
        assert len(waits) == 1 and waits[0]["shard"] in ([0, 4], [2, 4])
        nursery.cancel_scope.cancel()


async def test_a_cold_start_of_eight_shards_over_four_processes_takes_four_windows(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    """max_concurrency 2: two IDENTIFYs per window across the cluster, never op 9."""
    sim = Simulator(TOKEN, limit_identify_concurrency=True, max_concurrency=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(sim.serve)
        sim.add_default_world()
        sink = RecordingSink()
        for process in range(4):
            turns = IdentifyTurns(gate=SharedIdentify(processes()))
            for shard_id in (2 * process, 2 * process + 1):  # one shard in each bucket
                actor = GatewayActor(
                    TOKEN, SimRest(sim), sink, lambda *_: None, shard=(shard_id, 8), turns=turns
                )
                nursery.start_soon(actor.run)
        ready = lambda: [e for e in sink.of("gateway") if e["action"] == "ready"]  # noqa: E731
        await wait_until(lambda: len(ready()) == 8)
        started = trio.current_time()
        stats = sim.gateway_stats
        assert stats.identify_rate_limited == 0
        assert sorted(stats.shard_identifies) == list(range(8))
        times = sorted(stats.identify_times)
        assert times[-1] - times[0] >= 3 * WINDOW  # four rounds of two
        # Every shard READY within ceil(8 / 2) windows of 5.25 s (here: the last IDENTIFY's).
        assert started <= 4 * 5.25
        nursery.cancel_scope.cancel()


class SlowLimits(DirectLimits):
    """A process's connection whose grants answer `delay` seconds after the asking (a round
    trip through a busy process's worker thread)."""

    def __init__(self, db: PgLimits, nursery: trio.Nursery, delay: float) -> None:
        super().__init__(db)
        self.nursery = nursery
        self.delay = delay

    def grant(self, wanted: int, done: Callable[[Grant | None], None]) -> None:
        async def later() -> None:
            await trio.sleep(self.delay)
            super(SlowLimits, self).grant(wanted, done)

        self.nursery.start_soon(later)


class SlowDiscord(Discord):
    """Answers every request `latency` seconds after it arrived."""

    def __init__(self, latency: float) -> None:
        super().__init__()
        self.latency = latency

    async def answer(self, request: httpx.Request) -> httpx.Response:
        response = self(request)
        await trio.sleep(self.latency)
        return response

    def client(self, backend: DirectLimits) -> RestClient:
        http = httpx.AsyncClient(transport=httpx.MockTransport(self.answer))
        return RestClient(API, "tok", client=http, shared=SharedGlobalLimit(backend))


async def test_a_process_at_its_own_limit_asks_the_table_before_its_slots_free(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    discord = SlowDiscord(latency=0.1)
    waves = 5
    async with trio.open_nursery() as worker:
        backend = SlowLimits(processes().db, worker, delay=0.02)
        async with discord.client(backend) as client, trio.open_nursery() as nursery:
            for n in range(GLOBAL_BUDGET * waves):
                nursery.start_soon(client.create_message, 100 + n, "hello")
        worker.cancel_scope.cancel()
    arrivals = sorted(at for at, _ in discord.arrivals)
    assert len(arrivals) == GLOBAL_BUDGET * waves
    assert busiest_second(arrivals) <= GLOBAL_BUDGET
    # The same requests from a process of its own (no table): each wave goes as its own
    # limit lets it. With the table, its round trips are made meanwhile, not added to every
    # wave: only the first asker's, and then everyone's behind it, come on top.
    alone = SlowDiscord(latency=discord.latency)
    http = httpx.AsyncClient(transport=httpx.MockTransport(alone.answer))
    start = trio.current_time()
    async with RestClient(API, "tok", client=http) as client, trio.open_nursery() as nursery:
        for n in range(GLOBAL_BUDGET * waves):
            nursery.start_soon(client.create_message, 100 + n, "hello")
    on_its_own = max(at for at, _ in alone.arrivals) - start
    assert arrivals[-1] <= on_its_own + 2 * backend.delay + 1e-9


def test_slots_asked_for_ahead_are_only_those_not_in_hand() -> None:
    book = GrantBook(spare=0)
    assert book.ask(0.0, ahead=3) == 3
    assert book.ask(0.01, ahead=3) == 0  # the answer is awaited
    book.answered(Grant(wanted=3, granted=3, now=0.02, retry_at=0.02), 0.02)
    assert book.ask(0.5, ahead=3) == 0  # in hand already
    assert book.ask(0.5, ahead=5) == 2
    book.answered(Grant(wanted=2, granted=2, now=0.6, retry_at=0.6), 0.6)
    assert len(book) == 5
    assert book.ask(GLOBAL_WINDOW, ahead=3) == 1  # the first three are no longer usable


def test_an_answers_posts_are_asked_for_beyond_the_slots_in_hand() -> None:
    book = GrantBook()
    # Nothing in hand: one slot for the typing indicator, a spare for the reply.
    assert book.expect(0.0, 2) == 2
    assert book.expect(0.0, 2) == 0  # the answer is awaited
    book.answered(Grant(wanted=2, granted=2, now=0.0, retry_at=0.0), 0.0)
    assert len(book) == 2
    # The spare is let go soon, the other slot keeps its window.
    assert book.take(SPARE_SECONDS) and not book.take(SPARE_SECONDS)
    # A spare in hand already: one more.
    book.answered(Grant(wanted=1, granted=1, now=1.0, retry_at=1.0), 1.0)
    assert book.expect(1.1, 2) == 1
    book.answered(Grant(wanted=1, granted=1, now=1.1, retry_at=1.1), 1.1)
    assert book.expect(1.2, 2) == 0  # both in hand


async def test_an_answers_typing_and_reply_go_on_slots_asked_for_ahead(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    busy, backend = processes(), processes()
    limit = SharedGlobalLimit(backend)
    assert await limit.take()  # the history read, and a spare kept in hand
    limit.expect(2)  # the model request is being built
    assert [g.granted for g in backend.grants] == [2, 1]
    assert busy.db.grant(GLOBAL_BUDGET).granted == GLOBAL_BUDGET - 3
    # The typing indicator, then the reply: neither waits for the table, which is full now.
    assert await limit.take(wait=False)
    assert await limit.take(wait=False)
    assert trio.current_time() == 0.0


async def test_a_rest_client_asks_for_expected_requests_only_in_a_cluster() -> None:
    class Slots:
        def __init__(self) -> None:
            self.expected: list[int] = []

        async def take(self, *, wait: bool = True, busy: bool = False) -> bool:
            return True

        def refill(self) -> None:
            pass

        def prefetch(self, count: int) -> None:
            pass

        def expect(self, count: int) -> None:
            self.expected.append(count)

        def pause(self, seconds: float) -> None:
            pass

    slots = Slots()
    async with RestClient(API, TOKEN, shared=slots) as rest:
        rest.expect(2)
    assert slots.expected == [2]
    async with RestClient(API, TOKEN) as alone:
        alone.expect(2)  # one process: nothing to ask


# ---- a spare held in hand while pauses are heard ------------------------------------------------


class HearingLine:
    """A grant line that is up and hears every pause (`tell` plays one arriving); its
    slots come from the process's own connection, answered on the event loop."""

    def __init__(self, backend: DirectLimits) -> None:
        self.backend = backend
        self.heard: Callable[[float], None] | None = None
        self.heard_short: Callable[[], None] | None = None
        self.hears_pauses = True
        self.holder = f"holder-{id(self)}"
        self.given_back: list[tuple[float, int]] = []

    def grant(self, wanted: int, answered: Callable[[Grant | None], None]) -> bool:
        self.backend.grant(wanted, answered)
        return True

    def keep(self, wanted: int, margin: int, answered: Callable[[Grant | None], None]) -> bool:
        grant = self.backend.db.keep(wanted, margin, self.holder)
        if grant.granted:
            self.backend.grants.append(grant)
        answered(grant)
        return True

    def give_back(self, kept_at: float, count: int) -> None:
        self.given_back.append((kept_at, count))
        self.backend.db.give_back(self.holder, kept_at, count)

    def hear_short(self, heard: Callable[[], None]) -> None:
        self.heard_short = heard

    def short(self) -> None:
        """Another process's grant came back short."""
        assert self.heard_short is not None
        self.heard_short()

    def hear_pauses(self, heard: Callable[[float], None]) -> None:
        self.heard = heard

    def tell(self, seconds: float) -> None:
        assert self.heard is not None
        self.heard(seconds)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await trio.sleep_forever()


@contextlib.asynccontextmanager
async def keeping_spares(limit: SharedGlobalLimit) -> AsyncIterator[None]:
    """`limit.keep_spares` running for the block."""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(limit.keep_spares)
        yield
        nursery.cancel_scope.cancel()


def test_a_spare_lives_as_long_as_the_book_is_told() -> None:
    book = GrantBook()
    book.spare_seconds = HELD_SPARE_SECONDS
    assert book.refill(0.0) == 1
    book.refilled(Grant(wanted=1, granted=1, now=0.0, retry_at=0.0), 0.0)
    assert book.next_lapse(0.1) == HELD_SPARE_SECONDS
    assert book.take(HELD_SPARE_SECONDS - 0.01)
    book.refilled(Grant(wanted=1, granted=1, now=1.0, retry_at=1.0), 1.0)
    assert book.next_lapse(1.0 + HELD_SPARE_SECONDS) is None  # lapsed unused


async def test_a_warm_process_that_hears_pauses_keeps_an_answers_slots_in_hand(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = processes()
    limit = SharedGlobalLimit(backend, HearingLine(backend))
    async with keeping_spares(limit):
        await trio.sleep(5.0)
        assert backend.grants == []  # cold: nothing asked, nothing held
        assert await limit.take()
        taken = len(backend.grants)
        # Long after the spares granted then would have lapsed, an answer's three requests
        # (history read, typing, reply) each find a slot in hand: the table is not asked.
        await trio.sleep(10.0)
        asked = len(backend.grants)
        for _ in range(HELD_SPARES):
            assert await limit.take(wait=False)
        assert len(backend.grants) == asked > taken
        # One question a spare's lifetime keeps them all (they lapse together).
        assert asked - taken <= 10.0 / HELD_SPARE_SECONDS + 2
        assert all(g.granted <= HELD_SPARES for g in backend.grants[taken:])
        # Used: asked again once the requests are quiet, not while they go.
        await trio.sleep(QUIET_SECONDS / 2)
        assert len(backend.grants) == asked
        await trio.sleep(QUIET_SECONDS)
        assert len(backend.grants) == asked + 1
        # Cold again: the spares lapse and none is asked for.
        await trio.sleep(WARM_SECONDS + 1.0)
        cold = len(backend.grants)
        await trio.sleep(30.0)
        assert len(backend.grants) == cold


async def test_a_held_slot_goes_when_a_pause_is_heard_and_none_is_asked_during_it(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = processes()
    line = HearingLine(backend)
    limit = SharedGlobalLimit(backend, line)
    async with keeping_spares(limit):
        assert await limit.take()
        await trio.sleep(0.5)
        line.tell(3.0)  # another process met a global 429
        asked = len(backend.grants)
        assert not await limit.take(wait=False)
        await trio.sleep(2.9)
        assert len(backend.grants) == asked
        assert await limit.take()
        assert trio.current_time() >= 3.5


async def test_no_slot_is_held_while_pauses_are_not_heard(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    backend = processes()
    line = HearingLine(backend)
    line.hears_pauses = False  # the line is down: a pause is heard only with a grant
    limit = SharedGlobalLimit(backend, line)
    async with keeping_spares(limit):
        assert await limit.take()
        asked = len(backend.grants)
        await trio.sleep(SPARE_SECONDS)
        assert not await limit.take(wait=False) or len(backend.grants) > asked
        await trio.sleep(5.0)
        assert len(backend.grants) <= asked + 1


async def test_a_burst_elsewhere_soon_has_the_slot_a_warm_process_held(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    idle_backend, busy = processes(), processes()
    idle = SharedGlobalLimit(idle_backend, HearingLine(idle_backend))
    burst = SharedGlobalLimit(busy)
    starts: list[float] = []

    async def request() -> None:
        await burst.take()
        starts.append(trio.current_time())

    async with keeping_spares(idle), trio.open_nursery() as nursery:
        assert await idle.take()
        await trio.sleep(0.1)
        for _ in range(GLOBAL_BUDGET * 4):
            nursery.start_soon(request)
        await trio.sleep(6.0)
        nursery.cancel_scope.cancel()
    per_second = [sum(1 for t in starts if s <= t - 0.1 < s + 1) for s in range(1, 4)]
    # After the first second the idle process has let its slot go: the burst has them all.
    assert per_second == [GLOBAL_BUDGET] * 3
    assert busiest_second(starts) <= GLOBAL_BUDGET


def test_a_busy_process_keeps_no_slot_in_hand() -> None:
    book = GrantBook()
    assert book.ask(0.0) == 2  # a request's slot and a spare
    book.answered(Grant(wanted=2, granted=2, now=0.0, retry_at=0.0), 0.0)
    book.busy = True  # its requests are paced: a spare would be used a pace late
    assert book.take(0.01)
    assert not book.take(0.01)  # the spare is let go, not used
    assert book.ask(0.02) == 1  # and none is asked for


# ---- slots kept in hand given back -----------------------------------------------------------


def test_kept_slots_let_go_unused_are_to_be_given_back_and_ordinary_spares_are_not() -> None:
    book = GrantBook()
    book.spare = HELD_SPARES
    book.spare_seconds = HELD_SPARE_SECONDS
    assert book.refill(0.0) == HELD_SPARES
    book.refilled(Grant(wanted=3, granted=3, now=100.0, retry_at=100.0), 0.0, kept=True)
    assert book.take(0.1)  # one is used: it is never given back
    book.let_go()  # another process found the table short
    assert not book.take(0.1)
    assert book.unused() == [(100.0, 2)]
    assert book.unused() == []  # told once
    # An ordinary spare (asked with a request's slot) carries no name: nothing to give back.
    assert book.ask(0.2) == 1 + HELD_SPARES
    book.answered(Grant(wanted=4, granted=4, now=101.0, retry_at=101.0), 0.2)
    book.busy = True
    assert book.take(0.3)
    assert book.unused() == []


async def test_a_process_short_of_slots_soon_has_those_another_kept_and_did_not_use(
    processes: Callable[[], DirectLimits],
    autojump_clock: trio.testing.MockClock,
) -> None:
    idle_backend, bursting = processes(), processes()
    line = HearingLine(idle_backend)
    idle = SharedGlobalLimit(idle_backend, line)
    async with keeping_spares(idle):
        assert await idle.take()  # warm: it keeps an answer's slots in hand
        await trio.sleep(0.5)
        assert len(idle.book) == HELD_SPARES
        assert await idle.take(wait=False)  # one used by an answer
        # A burst elsewhere: the table is short by those kept in hand.
        first = bursting.db.grant(GLOBAL_BUDGET)
        assert first.granted < GLOBAL_BUDGET
        line.short()  # the short grant's notification
        # The two not used are free again at once; the one used keeps its window.
        assert [count for _, count in line.given_back] == [HELD_SPARES - 1]
        assert len(idle.book) == 0
        assert bursting.db.grant(GLOBAL_BUDGET).granted == HELD_SPARES - 1
