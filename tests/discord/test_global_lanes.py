"""The global limit's two lanes: answers first, catch-up's reads and held slots behind them.

The bookkeeping is pure (`GlobalLimit` takes `now`); the RestClient tests run a scripted
fake Discord under the autojump clock.
"""

from __future__ import annotations

import bisect
import collections

import httpx
import orjson
import pytest
import trio

from picortex.discord import rest as rest_module
from picortex.discord.ratelimit import (
    BACKGROUND_PATIENCE,
    BACKGROUND_SPACING,
    BUSY_FROM,
    FOREGROUND_PACE,
    FOREGROUND_RESERVE,
    GLOBAL_BUDGET,
    GLOBAL_WINDOW,
    HELD_SLOT_SECONDS,
    PACE_BURST,
    GlobalLimit,
    GlobalWaiter,
)
from picortex.discord.rest import RestClient

API = "https://discord.test/api/v10"
TOKEN = "tok.SECRET.value"


# The bookkeeping tests below look at the lanes at one instant: their limits have no pace
# (`test_ratelimit` tests the pace).
def fill(limit: GlobalLimit, count: int, now: float) -> None:
    for _ in range(count):
        assert limit.try_take(now)


# ---- the bookkeeping --------------------------------------------------------------------------


def test_background_waits_while_a_foreground_request_waits() -> None:
    limit = GlobalLimit(pace=0.0)
    answer = limit.wait(0.0)
    history = limit.wait(0.0, background=True)
    assert not limit.try_take(0.0, history)
    assert limit.leave(answer, 0.0)  # the background may go now: wake it
    assert limit.try_take(0.0, history)


def test_background_and_typing_leave_the_reserve_to_answers() -> None:
    limit = GlobalLimit(pace=0.0)
    fill(limit, GLOBAL_BUDGET - FOREGROUND_RESERVE, 0.0)
    history = limit.wait(0.0, background=True)
    assert not limit.try_take(0.0, history)
    assert not limit.hold(0.0, history)
    assert not limit.try_take(0.0, optional=True)  # typing
    fill(limit, FOREGROUND_RESERVE, 0.0)  # answers still have every reserved slot
    assert not limit.try_take(0.0)


def test_background_grants_are_spaced() -> None:
    limit = GlobalLimit(pace=0.0)
    first = limit.wait(0.0, background=True)
    second = limit.wait(0.0, background=True)
    assert limit.try_take(0.0, first)
    assert not limit.try_take(0.0, second)
    assert limit.next_chance(second, 0.0) == BACKGROUND_SPACING
    assert limit.try_take(BACKGROUND_SPACING, second)
    assert limit.try_take(BACKGROUND_SPACING)  # answers are never spaced


def test_an_overdue_background_request_takes_the_next_free_slot_first() -> None:
    limit = GlobalLimit(pace=0.0)
    fill(limit, GLOBAL_BUDGET, 0.0)
    history = limit.wait(0.0, background=True)
    assert limit.next_chance(history, 0.0) == BACKGROUND_PATIENCE
    for _ in range(GLOBAL_BUDGET):
        limit.release(0.0)
    answer = limit.wait(0.5)
    # Everything frees at GLOBAL_WINDOW, but the answers keep the budget full until the
    # background request has waited BACKGROUND_PATIENCE.
    now = GLOBAL_WINDOW
    assert not limit.try_take(now, history)
    fill(limit, GLOBAL_BUDGET, now)
    for _ in range(GLOBAL_BUDGET):
        limit.release(now)
    now = BACKGROUND_PATIENCE
    assert not limit.try_take(now, answer)  # the overdue one goes first...
    assert not limit.try_take(now, optional=True)
    assert limit.try_take(now, history)  # ...although answers wait
    assert limit.leave(history, now)  # the answers may go again: wake them
    assert limit.try_take(now, answer)


def test_a_held_slot_goes_to_the_next_answer_or_back_after_a_while() -> None:
    limit = GlobalLimit(pace=0.0)
    fill(limit, GLOBAL_BUDGET - FOREGROUND_RESERVE - 1, 0.0)
    catch_up = limit.wait(0.0, background=True)
    assert limit.hold(0.0, catch_up)  # the last slot the background lane may have
    limit.leave(catch_up, 0.0)
    assert not limit.try_take(0.0, optional=True)  # typing takes neither it nor the reserve
    fill(limit, FOREGROUND_RESERVE + 1, 0.0)  # the held slot, then the reserve
    assert not limit.try_take(0.0)

    limit = GlobalLimit(pace=0.0)
    fill(limit, GLOBAL_BUDGET - FOREGROUND_RESERVE - 1, 0.0)  # in flight a long while
    catch_up = limit.wait(0.0, background=True)
    assert limit.hold(0.0, catch_up)
    assert limit.next_free() == HELD_SLOT_SECONDS
    assert not limit.try_take(HELD_SLOT_SECONDS - 0.01, catch_up)  # the held one counts
    assert limit.try_take(HELD_SLOT_SECONDS, catch_up)  # given back unused: free again


def test_the_first_answer_in_the_window_wakes_waiters_that_wait_for_a_held_slot() -> None:
    limit = GlobalLimit(pace=0.0)
    fill(limit, GLOBAL_BUDGET - FOREGROUND_RESERVE - 1, 0.0)
    catch_up = limit.wait(0.0, background=True)
    assert limit.hold(0.0, catch_up)
    assert limit.next_free() == HELD_SLOT_SECONDS
    assert limit.release(0.5)  # frees a slot at 1.5, before the held one's end: look again
    assert limit.next_free() == 0.5 + GLOBAL_WINDOW
    assert not limit.release(0.6)  # waiters already wake at 1.5, sooner than 1.6


def test_a_global_429_stops_every_lane() -> None:
    limit = GlobalLimit(pace=0.0)
    limit.block_until(3.0)
    history = limit.wait(0.0, background=True)
    assert not limit.try_take(2.9)
    assert not limit.try_take(2.9, optional=True)
    assert not limit.hold(2.9, history)
    assert limit.try_take(3.0, history)


# ---- the REST client --------------------------------------------------------------------------


class Discord:
    """Answers every request (at once, or `latency` seconds after it arrived); records when
    each arrived and what it was."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.arrivals.append((trio.current_time(), request.method, request.url.path))
        body = [] if request.method == "GET" else {"id": "1"}
        return httpx.Response(200, content=orjson.dumps(body))

    latency = 0.0  # seconds from a request's arrival to its answer

    async def answer(self, request: httpx.Request) -> httpx.Response:
        response = self(request)
        await trio.sleep(self.latency)
        return response

    def client(self) -> RestClient:
        transport = httpx.MockTransport(self.answer if self.latency else self)
        return RestClient(API, TOKEN, client=httpx.AsyncClient(transport=transport))

    def times(self, method: str, suffix: str) -> list[float]:
        return [at for at, m, path in self.arrivals if m == method and path.endswith(suffix)]

    def busiest_second(self) -> int:
        times = sorted(at for at, _, _ in self.arrivals)
        return max(bisect.bisect_left(times, t + 1.0) - i for i, t in enumerate(times))


async def test_an_answer_is_sent_at_once_while_catch_up_reads_history(
    autojump_clock: trio.abc.Clock,
) -> None:
    discord = Discord()
    async with discord.client() as client, trio.open_nursery() as nursery:
        for channel in range(120):
            nursery.start_soon(
                lambda c=channel: client.get_channel_messages(c + 1, after=1, background=True)
            )
        for n in range(30):
            await trio.sleep_until(0.5 + n * 0.05)
            await client.create_message(7, f"answer {n}", reply_to=9)
            # Not a moment's wait: the background lane left the reserve free.
            assert trio.current_time() == 0.5 + n * 0.05
    assert len(discord.times("GET", "/messages")) == 120  # catch-up finished too
    assert discord.busiest_second() <= GLOBAL_BUDGET


async def test_a_steady_stream_of_answers_delays_a_background_read_but_never_starves_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    discord = Discord()
    done: list[float] = []
    async with discord.client() as client, trio.open_nursery() as nursery:

        async def answers() -> None:
            # Far more answers than the budget: the foreground always has one waiting.
            for n in range(GLOBAL_BUDGET * 8):
                nursery.start_soon(client.create_message, 7, f"answer {n}")
                await trio.sleep(1 / (GLOBAL_BUDGET * 2))

        async def catch_up() -> None:
            await trio.sleep(1.5)  # the budget is full, answers are waiting
            await client.get_channel_messages(5, after=1, background=True)
            done.append(trio.current_time())

        nursery.start_soon(answers)
        nursery.start_soon(catch_up)
    # The bound: BACKGROUND_PATIENCE of giving way, then the next slot to free (a window).
    (finished,) = done
    assert 1.5 + BACKGROUND_PATIENCE <= finished <= 1.5 + BACKGROUND_PATIENCE + GLOBAL_WINDOW
    assert discord.busiest_second() <= GLOBAL_BUDGET
    assert len(discord.times("POST", "/messages")) == GLOBAL_BUDGET * 8


async def test_catch_up_hands_triggers_over_at_the_pace_the_answers_leave_free(
    autojump_clock: trio.abc.Clock,
) -> None:
    discord = Discord()
    handed: list[float] = []
    async with discord.client() as client, trio.open_nursery() as nursery:

        async def catch_up() -> None:
            for n in range(40):
                await client.hold_slot_for_answer()
                handed.append(trio.current_time())
                nursery.start_soon(client.create_message, 8, f"late answer {n}")

        nursery.start_soon(catch_up)
    # Ten a second at most, each answer on the slot held for it: no answer waited.
    assert handed == pytest.approx([n * BACKGROUND_SPACING for n in range(40)])
    assert discord.times("POST", "/messages") == handed
    assert discord.busiest_second() <= GLOBAL_BUDGET


async def test_answers_waiting_for_a_slot_look_at_the_limit_one_at_a_time(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    looks = 0

    class CountingLimit(GlobalLimit):
        def try_take(
            self, now: float, waiter: GlobalWaiter | None = None, *, optional: bool = False
        ) -> bool:
            nonlocal looks
            looks += 1
            return super().try_take(now, waiter, optional=optional)

    monkeypatch.setattr(rest_module, "GlobalLimit", CountingLimit)
    discord = Discord()
    answers = GLOBAL_BUDGET * 10
    async with discord.client() as client, trio.open_nursery() as nursery:
        for n in range(answers):
            nursery.start_soon(client.create_message, 7, f"answer {n}")
    times = discord.times("POST", "/messages")
    assert len(times) == answers
    assert discord.busiest_second() <= GLOBAL_BUDGET
    # A few looks each (its slot, its pace): not every waiter woken for every slot that frees.
    assert max(times) < answers / GLOBAL_BUDGET
    assert looks <= 3 * answers


# ---- the pace ---------------------------------------------------------------------------------


def test_a_few_answers_go_at_once_and_more_one_a_pace() -> None:
    limit = GlobalLimit()
    fill(limit, PACE_BURST, 0.0)  # a few at once: no wait
    assert not limit.try_take(0.0)
    waiter = limit.wait(0.0)
    assert limit.next_chance(waiter, 0.0) == pytest.approx(FOREGROUND_PACE)
    # An answer waiting only for its pace waits for no slot: typing may take one meanwhile,
    # while the process is not busy.
    assert limit.try_take(0.0, optional=True)
    assert limit.try_take(FOREGROUND_PACE, waiter)
    limit.leave(waiter, FOREGROUND_PACE)
    assert not limit.try_take(FOREGROUND_PACE)
    assert limit.try_take(2 * FOREGROUND_PACE)
    # Typing and the background lane keep to rules of their own, not to the pace.
    assert limit.try_take(2 * FOREGROUND_PACE, optional=True)
    # At the pace's rate or slower, nothing waits; after a quiet moment a few go at once again.
    for n in range(20):
        assert limit.try_take(1.0 + n * FOREGROUND_PACE)
    fill(limit, PACE_BURST, 2.0)


def test_typing_gives_way_to_a_waiting_answer_once_the_process_is_busy() -> None:
    limit = GlobalLimit()
    for n in range(BUSY_FROM - 1):
        assert limit.try_take(n * FOREGROUND_PACE)
    now = BUSY_FROM * FOREGROUND_PACE
    limit.wait(now)  # an answer waits (its pace): with few slots in use, typing still goes
    assert limit.try_take(now, optional=True)
    # Now BUSY_FROM are in use: typing would take a slot an answer of a flood waits for.
    assert not limit.try_take(now, optional=True)


async def test_a_flood_of_answers_is_spread_over_every_counted_second(
    autojump_clock: trio.abc.Clock,
) -> None:
    # Each slot is busy a little over a second (the round trip, then the window). Sent as
    # one clump, a second's answers would drift together over the edge of a second Discord
    # counts and leave it nearly empty (here: one request in the fourth); spread by the
    # pace, every second has nearly all.
    discord = Discord()
    discord.latency = 0.02
    answers = GLOBAL_BUDGET * 12
    async with discord.client() as client, trio.open_nursery() as nursery:
        await trio.sleep_until(0.9)
        for n in range(answers):
            nursery.start_soon(client.create_message, 7, f"answer {n}")
    times = discord.times("POST", "/messages")
    assert len(times) == answers
    assert discord.busiest_second() <= GLOBAL_BUDGET
    per_second = collections.Counter(int(at) for at in times)
    whole = [per_second[s] for s in range(1, int(max(times)))]
    assert min(whole) >= GLOBAL_BUDGET - 3, whole


def test_a_process_is_busy_only_while_its_pace_holds_answers() -> None:
    limit = GlobalLimit()
    # An answer's requests now and then (here eight a second, each answer's two a moment
    # apart) never wait for the pace: the process is not busy, however many slots they keep
    # in use (none of these is answered: all 32 are).
    for n in range(BUSY_FROM * 2):
        now = n * 0.25
        assert limit.try_take(now) and limit.try_take(now + 0.01)
        assert not limit.busy(now + 0.01)
    # A few at once use up the pace: the next waits for it, and the process is busy until
    # the pace would let one go at once again.
    now = 10.0
    fill(limit, PACE_BURST, now)
    assert limit.busy(now)
    waiter = limit.wait(now)
    assert not limit.try_take(now, waiter)
    assert limit.try_take(now + FOREGROUND_PACE, waiter)
    limit.leave(waiter, now + FOREGROUND_PACE)
    assert limit.busy(now + FOREGROUND_PACE)
    assert not limit.busy(now + 2 * FOREGROUND_PACE)
