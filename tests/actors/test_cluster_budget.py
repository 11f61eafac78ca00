"""The budget of a cluster (SPEC 9, 17): reservations asked of the database off the event
loop, settlements that survive a cancellation and an outage, and the process's share while
the database cannot be asked."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import psycopg
import pytest
import trio

from picortex.actors.cluster_budget import GATHER_SECONDS, RETRY_SECONDS, ClusterBudget
from picortex.actors.ledger import LedgerBudget
from picortex.actors.llm import LLMActor
from picortex.app import Bot
from picortex.config import BUILTIN_PRICES, BudgetSettings, Settings, load_settings
from picortex.core.budget import Refusal, Reservation
from picortex.errors import DatabaseUnreachable
from picortex.store.pg.ceilings import Answer, Ask, Ceilings, Settlement
from picortex.store.pg.reserve_line import ReserveLine
from tests.actors.test_llm import (
    KEY,
    MODELS,
    FakeModel,
    estimate,
    make_actor,
    request,
    running,
    sdk_http,
)
from tests.helpers import RecordingSink

LOGGER = "picortex.actors.cluster_budget"
NOON = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def settings_with(tmp_path: Path, budget: BudgetSettings) -> Settings:
    base = load_settings({"PICORTEX_HOME": str(tmp_path)})
    return attrs.evolve(base, budget=budget)


def answer(**changes: Any) -> Answer:
    fields: dict[str, Any] = dict.fromkeys(
        (
            "workspace_spent",
            "workspace_held",
            "global_spent",
            "global_held",
            "user_spent",
            "user_held",
            "user_recent",
        ),
        0,
    )
    fields.update(refused=None, warn=False, tell=False, live_nodes=1)
    fields.update(changes)
    return Answer(**fields)


class FakeCeilings:
    """The database side: answers `answers` in turn (an exception is raised), records
    settlements; `down` makes every call fail as an unreachable database does."""

    def __init__(self, *answers: Answer | BaseException) -> None:
        self.answers = list(answers)
        self.asked: list[Ask] = []
        self.settled: list[Settlement] = []
        self.down = False
        self.closed = False

    def reserve(self, ask: Ask) -> Answer:
        self.asked.append(ask)
        if self.down:
            raise DatabaseUnreachable("PostgreSQL picortex on db: connection refused")
        given = self.answers.pop(0) if self.answers else answer()
        if isinstance(given, BaseException):
            raise given
        return given

    def settle(self, settled: Settlement) -> bool:
        if self.down:
            raise DatabaseUnreachable("PostgreSQL picortex on db: connection refused")
        self.settled.append(settled)
        return True

    def spent(self, period: str, day: str) -> tuple[dict[str, int], int, dict[int, int]]:
        if self.down:
            raise DatabaseUnreachable("PostgreSQL picortex on db: connection refused")
        return {}, 0, {}

    def prune(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True


class SlowCeilings(FakeCeilings):
    """Reservations that wait, on the worker thread, until the test lets them go."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def reserve(self, ask: Ask) -> Answer:
        self.entered.set()
        self.release.wait(10)
        return super().reserve(ask)


def budget_over(
    ceilings: Any, settings: Settings, sink: RecordingSink | None = None
) -> ClusterBudget:
    return ClusterBudget(
        ceilings, lambda: settings, sink or RecordingSink(), wall_clock=lambda: NOON
    )


@pytest.mark.parametrize("on_line", [False, True], ids=["thread", "line"])
async def test_a_cancelled_call_is_settled_in_the_clusters_database(
    pg_url: str, tmp_path: Path, on_line: bool
) -> None:
    sink = RecordingSink()
    settings = settings_with(tmp_path, BudgetSettings(5.0, "day", 20.0, 0.0, 0))
    ceilings = Ceilings(pg_url, "node-a")
    line = ReserveLine(pg_url, "node-a") if on_line else None
    budget = ClusterBudget(ceilings, lambda: settings, sink, line=line)
    arrived = trio.Event()

    async def held(body: dict[str, Any]) -> Any:
        arrived.set()
        await trio.sleep_forever()

    one = request()
    actor = make_actor(FakeModel(held), sink, budget=budget)  # type: ignore[arg-type]
    async with trio.open_nursery() as outer:
        await outer.start(budget.run)
        with trio.fail_after(30):
            while line is not None and not line.ready:
                await trio.sleep(0.01)
        async with running(actor), trio.open_nursery() as nursery:
            nursery.start_soon(actor.complete, one)
            await arrived.wait()
            assert budget.held_usd() > 0
            nursery.cancel_scope.cancel()
        # Settled in a `finally` without a checkpoint: queued, then sent by the sender.
        with trio.fail_after(30):
            while budget.unsettled():
                await trio.sleep(0.01)
        outer.cancel_scope.cancel()
    budget.close()
    assert budget.held_usd() == 0.0
    (event,) = sink.of("llm")
    assert (event["outcome"], event["usage"]) == ("cancelled", "estimated")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        ledger = conn.execute("SELECT workspace, cost_usd FROM budget_ledger").fetchall()
        open_calls = conn.execute(
            "SELECT count(*) FROM budget_reservation WHERE settled_at IS NULL"
        ).fetchone()
    assert ledger == [(one.workspace, pytest.approx(estimate(one), abs=1e-6))]
    assert open_calls == (0,)
    if line is not None:
        assert line.reconnects == 0  # the reservation went on the line, not on a thread


async def test_calls_on_four_processes_overshoot_the_global_ceiling_by_one_call_at_most(
    pg_url: str, tmp_path: Path
) -> None:
    ceiling, worst = 0.25, 0.011  # calls that each cost exactly their worst case
    settings = settings_with(tmp_path, BudgetSettings(100.0, "day", ceiling, 0.0, 0))
    budgets = [
        ClusterBudget(Ceilings(pg_url, f"p{i}"), lambda: settings, RecordingSink())
        for i in range(4)
    ]

    async def calls(budget: ClusterBudget) -> None:
        for _ in range(30):
            held = await budget.reserve("g1", None, worst)
            if isinstance(held, Reservation):
                await trio.sleep(0)  # the call
                budget.settle(held, worst)

    async with trio.open_nursery() as senders:
        for budget in budgets:
            await senders.start(budget.run)
        async with trio.open_nursery() as nursery:
            for budget in budgets * 2:  # two channels per process
                nursery.start_soon(calls, budget)
        with trio.fail_after(30):
            while any(b.unsettled() for b in budgets):
                await trio.sleep(0.01)
        senders.cancel_scope.cancel()
    for budget in budgets:
        budget.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT sum(cost_usd) FROM budget_ledger").fetchone()
    assert row is not None
    assert ceiling / 2 < row[0] <= ceiling + worst + 1e-9


async def test_a_reservation_answered_as_its_caller_is_cancelled_reaches_the_caller(
    tmp_path: Path,
) -> None:
    ceilings = SlowCeilings()
    entered, release = ceilings.entered, ceilings.release
    budget = budget_over(ceilings, settings_with(tmp_path, BudgetSettings(5.0, "day")))
    got: list[Reservation | Refusal] = []
    with trio.CancelScope() as scope:

        async def call() -> None:
            got.append(await budget.reserve("g1", 7, 0.5))
            await trio.sleep(0)  # the cancellation lands here, after the answer

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            while not entered.is_set():
                await trio.sleep(0.001)
            scope.cancel()  # a follow-up restarting the call, while the database answers
            release.set()
    assert scope.cancelled_caught
    (held,) = got
    assert isinstance(held, Reservation)
    assert budget.held_usd() == 0.5  # held until its caller settles it
    budget.settle(held, 0.0)
    assert budget.held_usd() == 0.0 and budget.unsettled() == 1


# The clock stands still while a worker thread asks the database (tests/e2e/harness.py).
@pytest.mark.virtual_time
async def test_a_settlement_waits_out_an_outage_and_is_recorded_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ceilings = FakeCeilings()
    budget = budget_over(ceilings, settings_with(tmp_path, BudgetSettings(5.0, "day")))
    held = await budget.reserve("g1", 7, 0.5)
    assert isinstance(held, Reservation)
    ceilings.down = True
    async with trio.open_nursery() as nursery:
        await nursery.start(budget.run)
        with caplog.at_level(logging.ERROR, logger=LOGGER):
            budget.settle(held, 0.25)
            budget.settle(held, 0.25)  # settled once only
            await trio.sleep(10 * RETRY_SECONDS)
            assert ceilings.settled == [] and budget.unsettled() == 1
            ceilings.down = False
            await trio.sleep(RETRY_SECONDS + 0.1)
        nursery.cancel_scope.cancel()
    (settled,) = ceilings.settled
    assert (settled.id, settled.cost, settled.user_id) == (ceilings.asked[0].id, 250_000, 7)
    assert budget.unsettled() == 0
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # one a minute, however often it tried
    assert "connection refused" in errors[0].getMessage()


@pytest.mark.virtual_time
async def test_settlements_go_a_moment_after_their_calls_together(tmp_path: Path) -> None:
    ceilings = FakeCeilings()
    budget = budget_over(ceilings, settings_with(tmp_path, BudgetSettings(5.0, "day")))
    first, second = await budget.reserve("g1", 7, 0.5), await budget.reserve("g1", 8, 0.5)
    assert isinstance(first, Reservation) and isinstance(second, Reservation)
    async with trio.open_nursery() as nursery:
        await nursery.start(budget.run)
        budget.settle(first, 0.25)
        await trio.sleep(GATHER_SECONDS / 2)
        budget.settle(second, 0.125)
        # Not while the calls' replies are being posted: held at their worst case meanwhile.
        assert ceilings.settled == [] and budget.unsettled() == 2
        await trio.sleep(GATHER_SECONDS * 3 / 4)  # the first's moment is over, not the second's
        # Both at once, in order: the second did not wait a moment of its own.
        assert [s.cost for s in ceilings.settled] == [250_000, 125_000]
        assert budget.unsettled() == 0
        nursery.cancel_scope.cancel()


# The clock stands still while a worker thread asks the database (tests/e2e/harness.py).
@pytest.mark.virtual_time
async def test_an_unreachable_database_leaves_this_process_its_share(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The database last said: $0.20 of the $1.00 global ceiling spent, four processes live.
    ceilings = FakeCeilings(answer(global_spent=200_000, live_nodes=4))
    sink = RecordingSink()
    settings = settings_with(tmp_path, BudgetSettings(100.0, "day", 1.0, 0.0, 0))
    budget = budget_over(ceilings, settings, sink)
    first = await budget.reserve("g1", None, 0.05)
    assert isinstance(first, Reservation)
    budget.settle(first, 0.05)
    ceilings.down = True
    made = 0
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        for _ in range(20):
            held = await budget.reserve("g1", None, 0.05)
            if isinstance(held, Refusal):
                break
            made += 1
            budget.settle(held, 0.05)
        # Its share of the $0.80 left is $0.20: what it spent since counts against it.
        assert made == 3
        assert isinstance(held, Refusal) and held.limit == "global"
        await trio.sleep(61)
        await budget.reserve("g1", None, 0.05)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # one a minute
    assert "share (1/4)" in errors[0]
    assert [e["limit"] for e in sink.of("budget")] == ["global", "global"]


# The clock stands still while a worker thread asks the database (tests/e2e/harness.py).
@pytest.mark.virtual_time
async def test_a_users_requests_per_minute_are_shared_out_while_the_database_is_away(
    tmp_path: Path,
) -> None:
    ceilings = FakeCeilings(answer(live_nodes=2))
    settings = settings_with(tmp_path, BudgetSettings(100.0, "day", 100.0, 0.0, 6))
    budget = budget_over(ceilings, settings)
    assert isinstance(await budget.reserve("g1", 7, 0.01), Reservation)
    ceilings.down = True
    made = [await budget.reserve("g1", 7, 0.01) for _ in range(4)]
    # 6 a minute for two processes: 3 here, the one the database admitted among them.
    assert [isinstance(m, Reservation) for m in made] == [True, True, False, False]
    refused = made[2]
    assert isinstance(refused, Refusal) and refused.limit == "user_rate"
    assert refused.notice is not None  # told once
    refused_again = made[3]
    assert isinstance(refused_again, Refusal) and refused_again.notice is None
    # A refusal here releases what the database may have taken before it went away.
    assert budget.unsettled() == 2


def actor_over(budget: ClusterBudget, model: FakeModel, sink: RecordingSink, built: Any) -> Any:
    """An LLM actor whose model client tells `built` (a threading.Event) once it has built a
    request, before anything of it is sent."""

    async def on_request(request: Any) -> None:
        built.set()

    return LLMActor(
        api_key=KEY,
        base_url="http://model.test",
        models=MODELS,
        prices=BUILTIN_PRICES,
        events=sink,
        budget=budget,
        http_client_factory=lambda: sdk_http.AsyncClient(
            transport=sdk_http.MockTransport(model), event_hooks={"request": [on_request]}
        ),
    )


async def test_the_reservation_is_asked_while_the_request_is_built_and_sent_only_after_it(
    tmp_path: Path,
) -> None:
    built = threading.Event()
    order: list[str] = []

    class Overlapped(FakeCeilings):
        def reserve(self, ask: Ask) -> Answer:
            # The database's round trip and the building of the request go on together.
            order.append("built before the answer" if built.wait(2) else "built after")
            return super().reserve(ask)

    sink = RecordingSink()
    budget = budget_over(Overlapped(), settings_with(tmp_path, BudgetSettings(5.0, "day")), sink)
    model = FakeModel()
    original = model.answer

    async def answer_after(body: dict[str, Any]) -> Any:
        order.append("sent")
        return await original(body)

    model.answer = answer_after
    async with running(actor_over(budget, model, sink, built)) as actor:
        result = await actor.complete(request())
    assert result.ok
    assert order == ["built before the answer", "sent"]
    assert budget.held_usd() == 0.0 and budget.unsettled() == 1


async def test_a_call_the_cluster_refuses_is_cut_before_it_is_sent(tmp_path: Path) -> None:
    sink = RecordingSink()
    refused = answer(refused="global", global_spent=20_000_000)
    budget = budget_over(
        FakeCeilings(refused), settings_with(tmp_path, BudgetSettings(5.0, "day", 20.0)), sink
    )
    model = FakeModel()
    async with running(actor_over(budget, model, sink, threading.Event())) as actor:
        result = await actor.complete(request())
    assert (result.outcome, result.limit) == ("budget", "global")
    assert model.requests == []
    (event,) = sink.of("llm")
    assert (event["outcome"], event["cost_usd"]) == ("budget", 0.0)
    assert budget.held_usd() == 0.0 and budget.unsettled() == 0


async def test_a_call_cancelled_before_its_reservation_came_releases_it_unsent(
    tmp_path: Path,
) -> None:
    ceilings = SlowCeilings()
    entered, release = ceilings.entered, ceilings.release
    sink = RecordingSink()
    budget = budget_over(ceilings, settings_with(tmp_path, BudgetSettings(5.0, "day")), sink)
    model = FakeModel()
    async with running(actor_over(budget, model, sink, threading.Event())) as actor:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(actor.complete, request())
            while not entered.is_set():
                await trio.sleep(0.001)
            nursery.cancel_scope.cancel()  # a follow-up restarting the answer
        release.set()
        with trio.fail_after(5):
            while not budget.unsettled():
                await trio.sleep(0.001)
    assert model.requests == []
    assert budget.held_usd() == 0.0
    await budget.deliver()
    (settled,) = ceilings.settled
    assert settled.id == ceilings.asked[0].id and settled.cost == 0


def test_the_bot_takes_the_clusters_ceilings_only_with_a_database_url(
    pg_url: str, tmp_path: Path
) -> None:
    env = {"PICORTEX_HOME": str(tmp_path / "a"), "DISCORD_BOT_TOKEN": "token-for-the-test"}
    embedded = Bot(load_settings(env))
    try:
        assert isinstance(embedded.budget, LedgerBudget)
        assert "ceilings" not in embedded.services.restart_counts()
    finally:
        embedded.store.close()
    env = {**env, "PICORTEX_HOME": str(tmp_path / "b"), "PICORTEX_DATABASE_URL": pg_url}
    clustered = Bot(load_settings(env))
    try:
        assert isinstance(clustered.budget, ClusterBudget)
        assert "ceilings" in clustered.services.restart_counts()
    finally:
        clustered.budget.close()
        clustered.store.close()


def test_a_cluster_bot_hands_over_what_its_last_run_kept_in_its_home(
    pg_url: str, tmp_path: Path
) -> None:
    """The files a stop during an outage left are read by the next bot on that home: the
    writes and the model calls' costs reach the database, and the files go."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "unsent-writes.jsonl").write_text(
        '{"write": "set_tier", "args": [5, "trusted"], "kwargs": {}}\n'
    )
    (home / "unsent-settlements.jsonl").write_text(
        '{"id": "6b1f0b3c-3a55-4f7e-9d2c-1f6d3f3b9a01", "workspace": "g1", "user_id": 7,'
        ' "cost": 250000, "period": "2026-12-03", "day": "2026-12-03", "at": 1.0}\n'
    )
    env = {
        "PICORTEX_HOME": str(home),
        "DISCORD_BOT_TOKEN": "token-for-the-test",
        "PICORTEX_DATABASE_URL": pg_url,
    }
    bot = Bot(load_settings(env))
    try:
        assert isinstance(bot.budget, ClusterBudget)
        assert bot.store.get_tier(5) == "trusted"  # in force at once
        assert bot.budget.unsettled() == 1
    finally:
        bot.budget.close()
        bot.store.close()
    assert not (home / "unsent-writes.jsonl").exists()
    assert not (home / "unsent-settlements.jsonl").exists()
    with psycopg.connect(pg_url) as conn:
        tiers = conn.execute("SELECT tier FROM trust WHERE user_id = 5").fetchall()
        ledger = conn.execute("SELECT cost_usd, user_id FROM budget_ledger").fetchall()
    assert tiers == [("trusted",)]
    assert ledger == [(0.25, 7)]


def test_an_embedded_bot_keeps_its_ledger_and_never_imports_psycopg(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from picortex.app import Bot\n"
        "from picortex.actors.ledger import LedgerBudget\n"
        "from picortex.config import load_settings\n"
        f"env = {{'PICORTEX_HOME': {str(tmp_path)!r}, 'DISCORD_BOT_TOKEN': 'token-for-test'}}\n"
        "bot = Bot(load_settings(env))\n"
        "bot.store.close()\n"
        "assert type(bot.budget) is LedgerBudget, type(bot.budget)\n"
        "assert 'psycopg' not in sys.modules, 'psycopg imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


async def test_status_shows_what_the_whole_cluster_spent(pg_url: str, tmp_path: Path) -> None:
    settings = settings_with(tmp_path, BudgetSettings(5.0, "day", 20.0, 1.0, 0))
    here = ClusterBudget(Ceilings(pg_url, "here"), lambda: settings, RecordingSink())
    there = ClusterBudget(Ceilings(pg_url, "there"), lambda: settings, RecordingSink())
    for budget, workspace, user_id, cost in ((here, "g1", 7, 0.25), (there, "g2", 8, 0.5)):
        held = await budget.reserve(workspace, user_id, cost)
        assert isinstance(held, Reservation)
        budget.settle(held, cost)
        assert await budget.deliver()
    running = await here.reserve("g1", 7, 0.125)
    here.refresh()
    assert {w: s["spent_usd"] for w, s in here.summary().items()} == {"g1": 0.25, "g2": 0.5}
    totals = here.totals()
    assert (totals["spent_usd"], totals["held_usd"]) == (0.75, 0.125)
    assert {u: s["spent_usd"] for u, s in here.users().items()} == {"8": 0.5, "7": 0.25}
    assert list(here.users()) == ["8", "7"]  # dearest first
    assert isinstance(running, Reservation)
    here.close()
    there.close()


async def test_at_shutdown_what_is_unsettled_reaches_the_database_or_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_with(tmp_path, BudgetSettings(5.0, "day"))
    ceilings = FakeCeilings()
    budget = budget_over(ceilings, settings)
    held = await budget.reserve("g1", 7, 0.5)
    assert isinstance(held, Reservation)
    budget.settle(held, 0.25)  # the sender has stopped: nothing sent it yet
    budget.close()
    assert [s.cost for s in ceilings.settled] == [250_000] and ceilings.closed
    # With the database away, the loss is named (its reservation counts until it expires).
    ceilings = FakeCeilings()
    budget = budget_over(ceilings, settings)
    held = await budget.reserve("g1", 7, 0.5)
    assert isinstance(held, Reservation)
    budget.settle(held, 0.25)
    ceilings.down = True
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        budget.close()
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "1 model calls ($0.25)" in error and ceilings.closed


async def test_settlements_a_stop_could_not_deliver_are_kept_and_recorded_at_the_next_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped while the database is away: the calls' costs go to the home's file, and the
    next run (the database back) records them first, once, and removes the file."""
    settings = settings_with(tmp_path, BudgetSettings(5.0, "day"))
    kept = tmp_path / "unsent-settlements.jsonl"
    ceilings = FakeCeilings()
    budget = ClusterBudget(
        ceilings, lambda: settings, RecordingSink(), wall_clock=lambda: NOON, unsent=kept
    )
    paid = []
    for user, cost in ((7, 0.25), (None, 0.125)):
        held = await budget.reserve("g1", user, 0.5)
        assert isinstance(held, Reservation)
        budget.settle(held, cost)
        paid.append(held)
    ceilings.down = True
    with caplog.at_level(logging.ERROR, logger=LOGGER):
        budget.close()
    (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert "2 model calls ($0.375)" in error and "recorded at the next start" in error
    assert kept.stat().st_mode & 0o777 == 0o600
    assert len(kept.read_text().splitlines()) == 2

    again = FakeCeilings()
    budget = ClusterBudget(
        again, lambda: settings, RecordingSink(), wall_clock=lambda: NOON, unsent=kept
    )
    assert budget.unsettled() == 2
    assert await budget.deliver()
    assert [(s.user_id, s.cost, s.workspace) for s in again.settled] == [
        (7, 250_000, "g1"),
        (None, 125_000, "g1"),
    ]
    assert not kept.exists()
    budget.close()
    assert len(again.settled) == 2  # once each


def test_a_damaged_line_of_kept_settlements_is_skipped_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_with(tmp_path, BudgetSettings(5.0, "day"))
    kept = tmp_path / "unsent-settlements.jsonl"
    good = (
        '{"id": "6b1f0b3c-3a55-4f7e-9d2c-1f6d3f3b9a01", "workspace": "g1", "user_id": null,'
        ' "cost": 5, "period": "2026-12-03", "day": "2026-12-03", "at": 1.0}'
    )
    kept.write_text(good + "\n{not json\n" + '{"id": "x"}\n')
    with caplog.at_level(logging.ERROR):
        budget = ClusterBudget(
            FakeCeilings(), lambda: settings, RecordingSink(), wall_clock=lambda: NOON, unsent=kept
        )
    assert budget.unsettled() == 1
    assert any("line 2 is damaged" in r.getMessage() for r in caplog.records)
    budget.close()
    assert not kept.exists()


async def test_calls_reserved_on_the_line_overshoot_the_global_ceiling_by_one_call_at_most(
    pg_url: str, tmp_path: Path
) -> None:
    ceiling, worst = 0.25, 0.011  # calls that each cost exactly their worst case
    settings = settings_with(tmp_path, BudgetSettings(100.0, "day", ceiling, 0.0, 0))
    lines = [ReserveLine(pg_url, f"p{i}") for i in range(4)]
    budgets = [
        ClusterBudget(Ceilings(pg_url, f"p{i}"), lambda: settings, RecordingSink(), line=line)
        for i, line in enumerate(lines)
    ]
    asked = 0

    async def calls(budget: ClusterBudget) -> None:
        nonlocal asked
        for _ in range(30):
            pending = budget.reserve_ahead("g1", None, worst)
            asked += 1
            await pending.wait()
            held = pending.held()
            if held is not None:
                await trio.sleep(0)  # the call
                budget.settle(held, worst)

    async with trio.open_nursery() as senders:
        for budget in budgets:
            await senders.start(budget.run)
        with trio.fail_after(30):
            while not all(line.ready for line in lines):
                await trio.sleep(0.01)
        async with trio.open_nursery() as nursery:
            for budget in budgets * 2:  # two channels per process
                nursery.start_soon(calls, budget)
        with trio.fail_after(30):
            while any(b.unsettled() for b in budgets):
                await trio.sleep(0.01)
        senders.cancel_scope.cancel()
    for budget in budgets:
        budget.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute("SELECT sum(cost_usd) FROM budget_ledger").fetchone()
        reserved = conn.execute("SELECT count(*) FROM budget_reservation").fetchone()
    assert row is not None and reserved is not None
    assert ceiling / 2 < row[0] <= ceiling + worst + 1e-9
    assert asked == 240 and reserved[0] >= ceiling // worst


async def test_a_reservation_whose_line_was_lost_is_asked_again_on_a_thread(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_with(tmp_path, BudgetSettings(5.0, "day", 20.0, 0.0, 0))
    line = ReserveLine(pg_url, "node-a")
    budget = ClusterBudget(Ceilings(pg_url, "node-a"), lambda: settings, RecordingSink(), line=line)
    async with trio.open_nursery() as nursery:
        await nursery.start(budget.run)
        with trio.fail_after(30):
            while not line.ready:
                await trio.sleep(0.01)
        # The server ends the line's idle connection; the line finds out at the next question.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        pending = budget.reserve_ahead("g1", None, 0.01)
        with trio.fail_after(30):
            await pending.wait()
        held = pending.held()
        assert held is not None
        with trio.fail_after(30):
            while not line.ready:  # and the line is made again
                await trio.sleep(0.01)
        assert line.reconnects == 1
        nursery.cancel_scope.cancel()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT amount_micros FROM budget_reservation WHERE id = %s", (budget._open[held],)
        ).fetchone()
    budget.close()
    assert row == (10_000,)  # held in the database, not on this process's local share
    assert "cannot be reached" not in caplog.text and "unreachable" not in caplog.text
