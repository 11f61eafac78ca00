"""The cluster's ceilings in a real PostgreSQL (SPEC 9, 17): processes reserving at once
overshoot by one call at most, never deadlock, share the per-user limits, warn once, and a
dead process's reservations stop counting when they expire."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest

from picortex.errors import DatabaseUnreachable
from picortex.store.pg.ceilings import (
    HOLD_SECONDS,
    Answer,
    Ask,
    Ceilings,
    Settlement,
    micros,
)

DAY = "2026-12-03"
MONTH = "2026-12"
NOW = 2_000_000_000.0
BIG = 10**12  # a ceiling that never refuses


@pytest.fixture
def processes(pg_url: str) -> Iterator[Callable[[str], Ceilings]]:
    """Ceilings of as many "processes" as a test asks for, each on its own connection."""
    opened: list[Ceilings] = []

    def open_one(node: str) -> Ceilings:
        ceilings = Ceilings(pg_url, node)
        opened.append(ceilings)
        return ceilings

    yield open_one
    for ceilings in opened:
        ceilings.close()


def ask(
    amount: int,
    *,
    workspace: str = "g1",
    user_id: int | None = None,
    period: str = DAY,
    ceiling: int = BIG,
    global_ceiling: int = BIG,
    user_daily: int = 0,
    user_rate: int = 0,
    owner: bool = False,
) -> Ask:
    return Ask(
        uuid.uuid4(),
        workspace,
        user_id,
        amount,
        period,
        DAY,
        ceiling,
        global_ceiling,
        user_daily,
        user_rate,
        user_id is not None and not owner,
    )


def settle(ceilings: Ceilings, made: Ask, cost: int, *, period: str | None = None) -> bool:
    return ceilings.settle(
        Settlement(made.id, made.workspace, made.user_id, cost, period or made.period, DAY, NOW)
    )


def one(url: str, sql: str) -> object:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()  # type: ignore[arg-type]
    assert row is not None
    return row[0]


def test_four_processes_at_once_overshoot_the_global_ceiling_by_one_call_at_most(
    pg_url: str, processes: Callable[[str], Ceilings]
) -> None:
    ceiling, worst = 250_000, 11_000  # $0.25; calls that each cost exactly their worst case
    nodes = [processes(f"p{i}") for i in range(4)]
    start = threading.Barrier(len(nodes))
    errors: list[BaseException] = []

    def calls(ceilings: Ceilings) -> None:
        start.wait()
        try:
            for _ in range(40):
                made = ask(worst, global_ceiling=ceiling)
                if ceilings.reserve(made).refused is None:
                    settle(ceilings, made, worst)
        except BaseException as exc:  # reported below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=calls, args=(c,)) for c in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    spent = int(one(pg_url, "SELECT round(sum(cost_usd) * 1000000) FROM budget_ledger"))  # type: ignore[call-overload]
    assert ceiling <= spent <= ceiling + worst
    counted = one(
        pg_url,
        f"SELECT spent_micros FROM budget_counter WHERE scope = 'global' AND period = '{DAY}'",
    )
    assert counted == spent
    assert one(pg_url, "SELECT count(*) FROM budget_reservation WHERE settled_at IS NULL") == 0


def test_reserving_and_settling_at_once_in_mixed_orders_never_deadlocks(
    pg_url: str, processes: Callable[[str], Ceilings]
) -> None:
    nodes = [processes(f"p{i}") for i in range(6)]
    start = threading.Barrier(len(nodes))
    errors: list[BaseException] = []

    def calls(ceilings: Ceilings, seed: int) -> None:
        rng = random.Random(seed)
        open_calls: list[Ask] = []
        start.wait()
        try:
            for _ in range(150):
                if open_calls and (len(open_calls) > 3 or rng.random() < 0.5):
                    made = open_calls.pop(rng.randrange(len(open_calls)))
                    # Settled in the other period's key now and then: a setting changed.
                    settle(ceilings, made, rng.randrange(100), period=rng.choice((DAY, MONTH)))
                    continue
                made = ask(
                    rng.randrange(1, 100),
                    workspace=rng.choice(("g1", "g2", "dm")),
                    user_id=rng.choice((None, 1, 2, 3)),
                    period=rng.choice((DAY, MONTH)),
                    user_rate=1000,
                )
                if ceilings.reserve(made).refused is None:
                    open_calls.append(made)
            for made in open_calls:
                settle(ceilings, made, 1)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=calls, args=(c, i)) for i, c in enumerate(nodes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []  # a deadlock fails one of them (PostgreSQL breaks it with an error)
    assert one(pg_url, "SELECT count(*) FROM budget_reservation WHERE settled_at IS NULL") == 0
    # Every counter is what the ledger says.
    assert (
        one(
            pg_url,
            "SELECT count(*) FROM budget_counter c WHERE spent_micros <> (SELECT"
            " coalesce(round(sum(cost_usd) * 1000000), 0) FROM budget_ledger l WHERE"
            " (c.scope = 'global' AND l.period_key = c.period) OR (c.scope = 'workspace' AND"
            " l.workspace = c.name AND l.period_key = c.period) OR (c.scope = 'user' AND"
            " l.user_id::text = c.name))",
        )
        == 0
    )


def test_a_users_daily_limit_counts_what_another_process_holds(
    processes: Callable[[str], Ceilings],
) -> None:
    a, b = processes("a"), processes("b")
    first = ask(600_000, user_id=7, user_daily=1_000_000)
    assert a.reserve(first).refused is None
    assert b.reserve(ask(1, user_id=7, user_daily=1_000_000)).refused is None  # 0.6 < 1.0
    settle(a, first, 999_999)  # with the 1 that b holds: the day is spent
    refused = b.reserve(ask(1, user_id=7, user_daily=1_000_000))
    assert refused.refused == "user_daily"
    assert (refused.user_spent, refused.user_held) == (999_999, 1)
    # The owner is not held to it; another user is not either.
    assert b.reserve(ask(1, user_id=7, user_daily=1_000_000, owner=True)).refused is None
    assert b.reserve(ask(1, user_id=8, user_daily=1_000_000)).refused is None


def test_the_per_minute_limit_counts_calls_started_on_every_process(
    processes: Callable[[str], Ceilings],
) -> None:
    a, b = processes("a"), processes("b")
    first, second = ask(5, user_id=9, user_rate=2), ask(5, user_id=9, user_rate=2)
    assert a.reserve(first, now=NOW).refused is None
    assert b.reserve(second, now=NOW + 1).refused is None
    settle(a, first, 5)  # settled calls still count: they started this minute
    settle(b, second, 5)
    refused = a.reserve(ask(5, user_id=9, user_rate=2), now=NOW + 2)
    assert (refused.refused, refused.user_recent) == ("user_rate", 2)
    assert b.reserve(ask(5, user_id=9, user_rate=2), now=NOW + 61).refused is None


def test_of_processes_refused_at_once_exactly_one_warns_and_one_tells_the_user(
    processes: Callable[[str], Ceilings],
) -> None:
    nodes = [processes(f"p{i}") for i in range(4)]
    blocker = ask(1, user_id=5, user_daily=1_000)
    nodes[0].reserve(blocker)
    settle(nodes[0], blocker, 1_000)  # the user's day is spent
    start = threading.Barrier(len(nodes))
    answers: list[Answer] = []

    def refused(ceilings: Ceilings) -> None:
        start.wait()
        for _ in range(3):
            answers.append(ceilings.reserve(ask(1, user_id=5, user_daily=1_000)))

    threads = [threading.Thread(target=refused, args=(c,)) for c in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {a.refused for a in answers} == {"user_daily"}
    assert sum(a.warn for a in answers) == 1
    assert sum(a.tell for a in answers) == 1
    # A global refusal is another limit: warned about once too, the user not told.
    over = nodes[1].reserve(ask(1, user_id=6, global_ceiling=1_000))
    again = nodes[2].reserve(ask(1, user_id=6, global_ceiling=1_000))
    assert (over.refused, over.warn, over.tell) == ("global", True, False)
    assert (again.warn, again.tell) == (False, False)


def test_a_dead_processs_reservations_count_until_they_expire(
    pg_url: str, processes: Callable[[str], Ceilings]
) -> None:
    dead, live, other = processes("dead:1"), processes("live:2"), processes("other:3")
    assert dead.reserve(ask(700_000, global_ceiling=1_000_000), now=NOW).refused is None
    assert live.reserve(ask(300_000, global_ceiling=1_000_000), now=NOW).refused is None
    # Both hold, at their worst case: the ceiling is reached.
    full = other.reserve(ask(1, global_ceiling=1_000_000), now=NOW + 10)
    assert (full.refused, full.global_held) == ("global", 1_000_000)
    # Past their expiry the live process (it still tells its heartbeat) holds on; the dead
    # one no longer counts.
    later = NOW + HOLD_SECONDS + 1
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO cluster_node VALUES ('live:2', 'live', 2, '0/1', %s, %s)",
            (NOW, later),
        )
    freed = other.reserve(ask(1, global_ceiling=1_000_000), now=later)
    assert (freed.refused, freed.global_held, freed.live_nodes) == (None, 300_000, 1)


def test_a_settlement_sent_twice_counts_once_and_one_made_offline_counts(
    pg_url: str, processes: Callable[[str], Ceilings]
) -> None:
    a = processes("a")
    made = ask(100, user_id=4)
    a.reserve(made)
    assert settle(a, made, 80) is True
    assert settle(a, made, 80) is False  # its answer was lost with the connection, say
    offline = ask(100, user_id=4)  # reserved here while the database was unreachable
    assert settle(a, offline, 30) is True
    assert one(pg_url, "SELECT round(sum(cost_usd) * 1000000) FROM budget_ledger") == 110
    answer = a.reserve(ask(1, user_id=4))
    assert (answer.global_spent, answer.user_spent, answer.global_held) == (110, 110, 0)


def test_an_unreachable_database_is_one_clear_error_and_a_pause(pg_url: str) -> None:
    clock = [0.0]
    ceilings = Ceilings(pg_url.replace("/t_", "/missing_t_"), "a", clock=lambda: clock[0])
    with pytest.raises(DatabaseUnreachable, match="missing_t_"):
        ceilings.reserve(ask(1))
    # Within the pause nothing is tried: the caller enforces locally at once.
    with pytest.raises(DatabaseUnreachable, match="a moment ago"):
        ceilings.reserve(ask(1))
    clock[0] = 10.0
    with pytest.raises(DatabaseUnreachable, match="missing_t_"):
        ceilings.reserve(ask(1))
    ceilings.close()


def test_the_database_admits_exactly_as_the_admit_rule_does(
    pg_url: str, processes: Callable[[str], Ceilings]
) -> None:
    from picortex.core import budget

    rng = random.Random(28)
    ceilings = processes("a")
    outcomes: set[str | None] = set()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for case in range(300):
            conn.execute("DELETE FROM budget_reservation")
            conn.execute("DELETE FROM budget_request")
            period, user = f"p{case}", 1000 + case
            spent = [rng.choice((0, 5, 10, 20)) for _ in range(3)]  # global, user, workspace
            for scope, name, key, amount in zip(
                ("global", "user", "workspace"),
                ("", str(user), "w"),
                (period, DAY, period),
                spent,
                strict=True,
            ):
                conn.execute(
                    "INSERT INTO budget_counter VALUES (%s, %s, %s, %s)", (scope, name, key, amount)
                )
            # Held by: this user here, anyone here, this user elsewhere, anyone elsewhere.
            held = [rng.choice((0, 0, 3, 5)) for _ in range(4)]
            for (workspace, user_id), amount in zip(
                (("w", user), ("w", None), ("x", user), ("x", None)), held, strict=True
            ):
                if amount:
                    conn.execute(
                        "INSERT INTO budget_reservation VALUES (%s, 'b', %s, %s, %s, %s, %s, NULL)",
                        (uuid.uuid4(), workspace, user_id, amount, NOW, NOW + 60),
                    )
            recent = rng.choice((0, 1, 2, 3))
            for _ in range(recent):
                conn.execute("INSERT INTO budget_request VALUES (%s, %s)", (user, NOW - 30))
            limits = budget.Limits(
                rng.choice((10, 15, 25, 30)),
                rng.choice((15, 25, 35, 45)),
                rng.choice((0, 10, 15, 25)),
                rng.choice((0, 1, 2, 3)),
            )
            owner = rng.random() < 0.2
            usage = budget.Usage(
                spent[2],
                held[0] + held[1],
                spent[0],
                sum(held),
                spent[1],
                held[0] + held[2],
                recent,
            )
            made = Ask(
                uuid.uuid4(), "w", user, 1, period, DAY,
                int(limits.ceiling_usd), int(limits.global_ceiling_usd),
                int(limits.user_daily_usd), limits.user_requests_per_minute, not owner,
            )  # fmt: skip
            said = ceilings.reserve(made, now=NOW)
            expected = budget.admit(limits, usage, user_limited=not owner)
            assert said.refused == expected, (case, limits, usage, owner)
            outcomes.add(expected)
    assert outcomes == {None, "workspace", "global", "user_daily", "user_rate"}


def test_amounts_become_whole_micro_dollars_never_fewer() -> None:
    assert [micros(x) for x in (0.1, 0.0000011, 5.0, 0.0, -1.0)] == [100_000, 2, 5_000_000, 0, 0]
    assert micros(float("nan")) == 0  # a ceiling that is not a number refuses
    assert micros(float("inf")) < 2**63  # still a bigint
