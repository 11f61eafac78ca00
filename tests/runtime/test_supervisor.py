"""Supervision rules: order, strategies, restart types, intensity, backoff, shutdown, mailboxes."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import orjson
import pytest
import trio

from picortex.actors.action_log import ActionLog
from picortex.errors import FatalDiscordError, SupervisorExhausted
from picortex.runtime.mailbox import Mailbox
from picortex.runtime.supervisor import (
    BACKOFF_INITIAL_SECONDS,
    BACKOFF_JITTER,
    BACKOFF_MAX_SECONDS,
    EXIT_SUPERVISOR_EXHAUSTED,
    HEALTHY_RUN_SECONDS,
    ChildSpec,
    DynamicSupervisor,
    RestartPolicy,
    Strategy,
    Supervisor,
    run_root,
)
from tests.helpers import RecordingSink

# Long enough for any backoff of the first few restarts to pass (autojump clock: free).
SETTLE = 10.0


class Kid:
    """A scripted child: logs what happens to it; the test makes it crash or exit."""

    def __init__(
        self,
        name: str,
        log: list[str],
        *,
        ready_after: float = 0.0,
        restart: RestartPolicy = RestartPolicy.PERMANENT,
        grace: float = 5.0,
    ) -> None:
        self.name = name
        self.log = log
        self.ready_after = ready_after
        self.restart = restart
        self.grace = grace
        self.runs = 0
        self.start_times: list[float] = []
        # Scripted outcomes: per run, raise before ready / after ready (None: wait for a kick).
        self.fail_before_ready: list[BaseException | None] = []
        self.fail_after_ready: list[BaseException | None] = []
        self._kick = trio.Event()
        self._kick_error: BaseException | None = None

    def spec(self) -> ChildSpec:
        return ChildSpec(self.name, self.run, restart=self.restart, grace=self.grace)

    def crash(self, error: BaseException | None = None) -> None:
        self._kick_error = error if error is not None else ValueError(f"{self.name} broke")
        self._kick.set()

    def exit(self) -> None:
        self._kick_error = None
        self._kick.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.runs += 1
        self.start_times.append(trio.current_time())
        self.log.append(f"{self.name}:start")
        self._kick = trio.Event()
        try:
            await trio.sleep(self.ready_after)
            if self.fail_before_ready:
                error = self.fail_before_ready.pop(0)
                if error is not None:
                    self.log.append(f"{self.name}:failed-early")
                    raise error
            task_status.started()
            self.log.append(f"{self.name}:ready")
            if self.fail_after_ready:
                error = self.fail_after_ready.pop(0)
                if error is not None:
                    self.log.append(f"{self.name}:crashed")
                    raise error
            await self._kick.wait()
            if self._kick_error is not None:
                self.log.append(f"{self.name}:crashed")
                raise self._kick_error
            self.log.append(f"{self.name}:exited")
        except trio.Cancelled:
            self.log.append(f"{self.name}:cancelled")
            raise


def kids(log: list[str], *names: str, **kw: object) -> list[Kid]:
    return [Kid(n, log, **kw) for n in names]  # type: ignore[arg-type]


def actions(sink: RecordingSink, action: str) -> list[dict[str, object]]:
    return [e for e in sink.of("supervisor") if e["action"] == action]


# -- start order and readiness ----------------------------------------------------------


async def test_children_start_in_order_each_once_the_previous_is_ready(autojump_clock):
    log: list[str] = []
    a, b, c = Kid("a", log, ready_after=1), Kid("b", log, ready_after=2), Kid("c", log)
    sup = Supervisor(
        "root", Strategy.ONE_FOR_ONE, [a.spec(), b.spec(), c.spec()], events=RecordingSink()
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        assert trio.current_time() == pytest.approx(3.0)
        assert log == ["a:start", "a:ready", "b:start", "b:ready", "c:start", "c:ready"]
        assert b.start_times == [pytest.approx(1.0)]
        sup.shutdown()


async def test_a_child_failing_before_ready_is_restarted_before_the_next_starts(autojump_clock):
    log: list[str] = []
    a, b = kids(log, "a", "b")
    a.fail_before_ready = [ValueError("not yet")]
    sink = RecordingSink()
    sup = Supervisor("root", Strategy.ONE_FOR_ONE, [a.spec(), b.spec()], events=sink)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        assert log == ["a:start", "a:failed-early", "a:start", "a:ready", "b:start", "b:ready"]
        assert [e["actor"] for e in actions(sink, "crash")] == ["a"]
        sup.shutdown()


# -- strategies ---------------------------------------------------------------------------


async def test_one_for_one_restarts_only_the_crashed_child(autojump_clock):
    log: list[str] = []
    a, b, c = kids(log, "a", "b", "c")
    sup = Supervisor(
        "s", Strategy.ONE_FOR_ONE, [a.spec(), b.spec(), c.spec()], events=RecordingSink()
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        log.clear()
        b.crash()
        await trio.sleep(SETTLE)
        assert log == ["b:crashed", "b:start", "b:ready"]
        assert (a.runs, b.runs, c.runs) == (1, 2, 1)
        assert sup.restart_counts() == {"a": 0, "b": 1, "c": 0}
        sup.shutdown()


async def test_one_for_all_stops_the_others_in_reverse_order_and_restarts_all(autojump_clock):
    log: list[str] = []
    a, b, c = kids(log, "a", "b", "c")
    sup = Supervisor(
        "s", Strategy.ONE_FOR_ALL, [a.spec(), b.spec(), c.spec()], events=RecordingSink()
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        log.clear()
        b.crash()
        await trio.sleep(SETTLE)
        assert log == [
            "b:crashed",
            "c:cancelled",
            "a:cancelled",
            "a:start",
            "a:ready",
            "b:start",
            "b:ready",
            "c:start",
            "c:ready",
        ]
        assert sup.restart_counts() == {"a": 1, "b": 1, "c": 1}
        sup.shutdown()


async def test_rest_for_one_restarts_the_child_and_those_after_it(autojump_clock):
    log: list[str] = []
    a, b, c = kids(log, "a", "b", "c")
    sup = Supervisor(
        "s", Strategy.REST_FOR_ONE, [a.spec(), b.spec(), c.spec()], events=RecordingSink()
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        log.clear()
        b.crash()
        await trio.sleep(SETTLE)
        assert log == ["b:crashed", "c:cancelled", "b:start", "b:ready", "c:start", "c:ready"]
        assert (a.runs, b.runs, c.runs) == (1, 2, 2)
        sup.shutdown()


# -- restart types --------------------------------------------------------------------------


async def test_permanent_child_is_restarted_after_a_normal_exit(autojump_clock):
    log: list[str] = []
    (a,) = kids(log, "a")
    sink = RecordingSink()
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [a.spec()], events=sink)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        a.exit()
        await trio.sleep(SETTLE)
        assert a.runs == 2
        assert actions(sink, "exit")[0]["restart"] is True
        assert not actions(sink, "crash")
        sup.shutdown()


async def test_transient_child_is_restarted_only_after_an_exception(autojump_clock):
    log: list[str] = []
    a, b = kids(log, "a", "b", restart=RestartPolicy.TRANSIENT)
    sink = RecordingSink()
    sup = Supervisor("s", Strategy.ONE_FOR_ALL, [a.spec(), b.spec()], events=sink)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        a.crash()
        await trio.sleep(SETTLE)
        assert (a.runs, b.runs) == (2, 2)
        b.exit()
        await trio.sleep(SETTLE)
        # A normal exit of a transient child is the end of it, and touches no sibling.
        assert (a.runs, b.runs) == (2, 2)
        assert sup.restart_counts() == {"a": 1}
        assert actions(sink, "exit")[-1] == {
            "event": "supervisor",
            "action": "exit",
            "supervisor": "s",
            "actor": "b",
            "run": 2,
            "restart": False,
        }
        sup.shutdown()


async def test_temporary_child_is_never_restarted_and_its_crash_spares_siblings(autojump_clock):
    log: list[str] = []
    a = Kid("a", log)
    t = Kid("t", log, restart=RestartPolicy.TEMPORARY)
    sink = RecordingSink()
    sup = Supervisor("s", Strategy.ONE_FOR_ALL, [a.spec(), t.spec()], events=sink)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        t.crash()
        await trio.sleep(SETTLE)
        assert (a.runs, t.runs) == (1, 1)
        (crash,) = actions(sink, "crash")
        assert crash["actor"] == "t"
        assert crash["restart"] is False
        assert sup.restart_counts() == {"a": 0}
        sup.shutdown()


async def test_temporary_sibling_stopped_by_a_group_restart_stays_stopped(autojump_clock):
    log: list[str] = []
    a = Kid("a", log)
    t = Kid("t", log, restart=RestartPolicy.TEMPORARY)
    sup = Supervisor("s", Strategy.ONE_FOR_ALL, [a.spec(), t.spec()], events=RecordingSink())
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        a.crash()
        await trio.sleep(SETTLE)
        assert (a.runs, t.runs) == (2, 1)
        assert "t:cancelled" in log
        assert sup.restart_counts() == {"a": 1}
        sup.shutdown()


# -- crash records --------------------------------------------------------------------------


async def test_a_crash_is_one_log_record_and_one_supervisor_event(autojump_clock, caplog):
    log: list[str] = []
    (a,) = kids(log, "a")
    sink = RecordingSink()
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [a.spec()], events=sink)
    caplog.set_level(logging.ERROR, logger="picortex.runtime.supervisor")
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        a.crash(KeyError("boom"))
        await trio.sleep(SETTLE)
        sup.shutdown()
    (record,) = [r for r in caplog.records if r.name == "picortex.runtime.supervisor"]
    assert record.levelno == logging.ERROR
    assert record.actor == "a"  # type: ignore[attr-defined]
    assert record.run == 1  # type: ignore[attr-defined]
    assert record.restarts_in_window == 1  # type: ignore[attr-defined]
    assert record.exc_info is not None and isinstance(record.exc_info[1], KeyError)
    (event,) = actions(sink, "crash")
    assert event["actor"] == "a"
    assert event["supervisor"] == "s"
    assert event["error"] == "KeyError: 'boom'"
    assert event["run"] == 1
    assert event["restarts_in_window"] == 1
    assert event["restart"] is True
    assert "KeyError: 'boom'" in str(event["traceback"])
    assert "Traceback" in str(event["traceback"])


async def test_cancellation_is_never_a_crash_and_shutdown_goes_in_reverse_order(autojump_clock):
    log: list[str] = []
    a, b, c = kids(log, "a", "b", "c")
    sink = RecordingSink()
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [a.spec(), b.spec(), c.spec()], events=sink)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        log.clear()
        nursery.cancel_scope.cancel()
    assert log == ["c:cancelled", "b:cancelled", "a:cancelled"]
    assert [e["actor"] for e in actions(sink, "stop")] == ["c", "b", "a"]
    assert not actions(sink, "crash")
    assert (a.runs, b.runs, c.runs) == (1, 1, 1)


async def test_fatal_errors_are_not_retried(autojump_clock):
    log: list[str] = []
    a, b = kids(log, "a", "b")
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [a.spec(), b.spec()], events=RecordingSink())
    b.fail_after_ready = [FatalDiscordError("Authentication failed", close_code=4004)]
    with pytest.raises(FatalDiscordError) as info:
        await sup.run()
    assert info.value.close_code == 4004
    assert (a.runs, b.runs) == (1, 1)
    assert "a:cancelled" in log


# -- intensity and escalation ----------------------------------------------------------------


async def test_more_than_five_restarts_in_a_minute_gives_up(autojump_clock):
    log: list[str] = []
    a = Kid("a", log)
    a.fail_after_ready = [ValueError(f"crash {i}") for i in range(20)]
    b = Kid("b", log)
    sink = RecordingSink()
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [b.spec(), a.spec()], events=sink)
    with pytest.raises(SupervisorExhausted) as info:
        await sup.run()
    assert trio.current_time() < 60
    assert a.runs == 6  # five restarts, then the sixth crash escalates
    group = info.value.__cause__
    assert isinstance(group, ExceptionGroup)
    assert [str(e) for e in group.exceptions] == [f"crash {i}" for i in range(6)]
    crashes = actions(sink, "crash")
    assert [e["restart"] for e in crashes] == [True] * 5 + [False]
    assert [e["restarts_in_window"] for e in crashes] == [1, 2, 3, 4, 5, 6]
    (gave_up,) = actions(sink, "gave_up")
    assert gave_up["restarts_in_window"] == 6
    assert log[-1] == "b:cancelled"  # the other children were stopped first


async def test_restarts_spread_over_more_than_the_period_do_not_give_up(autojump_clock):
    runs: list[float] = []

    async def crashes_after_20s(
        *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        runs.append(trio.current_time())
        task_status.started()
        await trio.sleep(20)
        raise ValueError("again")

    sink = RecordingSink()
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [ChildSpec("a", crashes_after_20s)], events=sink)
    with trio.move_on_after(600):
        await sup.run()
    # Never more than 5 restarts within 60 s, so it keeps going for the whole 10 minutes.
    assert len(runs) > 12
    assert max(e["restarts_in_window"] for e in actions(sink, "crash")) <= 5
    assert not actions(sink, "gave_up")


async def test_an_exhausted_child_supervisor_escalates_to_its_parent(autojump_clock):
    log: list[str] = []
    worker = Kid("worker", log)
    worker.fail_after_ready = [ValueError("bad") for _ in range(100)]
    inner_sink, outer_sink = RecordingSink(), RecordingSink()
    inner = Supervisor(
        "inner", Strategy.ONE_FOR_ONE, [worker.spec()], events=inner_sink, intensity=1
    )
    outer = Supervisor(
        "outer",
        Strategy.ONE_FOR_ONE,
        [ChildSpec("inner", inner.run)],
        events=outer_sink,
        intensity=2,
    )
    with pytest.raises(SupervisorExhausted, match="outer") as info:
        await outer.run()
    crashes = actions(outer_sink, "crash")
    assert [e["actor"] for e in crashes] == ["inner"] * 3
    assert all(str(e["error"]).startswith("SupervisorExhausted") for e in crashes)
    cause = info.value.__cause__
    assert isinstance(cause, ExceptionGroup)
    assert all(isinstance(e, SupervisorExhausted) for e in cause.exceptions)
    assert len(actions(inner_sink, "gave_up")) == 3


# -- backoff ---------------------------------------------------------------------------------


async def test_backoff_grows_with_jitter_and_resets_after_a_healthy_run(autojump_clock):
    log: list[str] = []
    a = Kid("a", log)
    a.fail_after_ready = [ValueError("x")] * 5
    sup = Supervisor(
        "s",
        Strategy.ONE_FOR_ONE,
        [a.spec()],
        events=RecordingSink(),
        intensity=100,
        rng=random.Random(3),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        await trio.sleep(100)
        assert a.runs == 6
        gaps = [t1 - t0 for t0, t1 in zip(a.start_times, a.start_times[1:], strict=False)]
        for k, gap in enumerate(gaps):
            full = min(BACKOFF_MAX_SECONDS, BACKOFF_INITIAL_SECONDS * 2**k)
            assert full * (1 - BACKOFF_JITTER) <= gap <= full
        assert (
            len({round(g / min(BACKOFF_MAX_SECONDS, 0.5 * 2**k), 6) for k, g in enumerate(gaps)})
            > 1
        )
        # Now a healthy run, then a crash: the next restart is quick again.
        await trio.sleep(HEALTHY_RUN_SECONDS)
        crashed_at = trio.current_time()
        a.crash()
        await trio.sleep(SETTLE)
        assert a.runs == 7
        assert a.start_times[-1] - crashed_at <= BACKOFF_INITIAL_SECONDS
        sup.shutdown()


async def test_shutdown_cancels_a_pending_backoff(autojump_clock):
    log: list[str] = []
    a = Kid("a", log)
    a.fail_after_ready = [ValueError("x")] * 10
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [a.spec()], events=RecordingSink(), intensity=100)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        await trio.sleep(20)  # by now the backoff is several seconds long
        runs = a.runs
        stopped_at = trio.current_time()
        sup.shutdown()
    assert trio.current_time() == stopped_at
    assert a.runs == runs


# -- mailboxes ----------------------------------------------------------------------------------


async def test_mailbox_survives_a_restart_and_the_message_in_hand_is_dropped(autojump_clock):
    mailbox: Mailbox[str] = Mailbox(10, name="chan")
    handled: list[str] = []

    async def actor(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async for message in mailbox:
            await trio.sleep(1)
            if message == "poison":
                raise RuntimeError("cannot handle poison")
            handled.append(message)
            mailbox.done()

    for m in ("a", "poison", "b", "c"):
        assert mailbox.send_nowait(m)
    sink = RecordingSink()
    spec = ChildSpec("chan", actor, mailbox=mailbox)
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [spec], events=sink)
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        await trio.sleep(1.5)  # "poison" is in hand now
        assert mailbox.send_nowait("d")  # arrives while the actor crashes and restarts
        await trio.sleep(SETTLE)
        assert handled == ["a", "b", "c", "d"]
        (dropped,) = sink.of("error")
        assert dropped["actor"] == "chan"
        assert dropped["message"] == "'poison'"
        assert "dropped" in str(dropped["error"])
        assert [e["actor"] for e in actions(sink, "crash")] == ["chan"]
        assert mailbox.in_hand is None and mailbox.depth == 0
        sup.shutdown()


# -- shutdown ------------------------------------------------------------------------------------


async def test_shutdown_stops_in_reverse_order_and_the_action_log_records_it_last(
    autojump_clock, tmp_path: Path
):
    log_path = tmp_path / "actions.jsonl"
    action_log = ActionLog(log_path, 1_000_000)

    def worker(name: str) -> ChildSpec:
        async def run(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                action_log.emit("worker-exit", actor=name)

        return ChildSpec(name, run)

    root = Supervisor(
        "root",
        Strategy.REST_FOR_ONE,
        [ChildSpec("action_log", action_log.run), worker("store"), worker("gateway")],
        events=action_log,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(root.run)
        await trio.sleep(1)
        root.shutdown()
    lines = [orjson.loads(line) for line in log_path.read_bytes().splitlines()]
    story = [(e["event"], e.get("action"), e["actor"]) for e in lines]
    assert story == [
        ("supervisor", "stop", "gateway"),
        ("worker-exit", None, "gateway"),
        ("supervisor", "stop", "store"),
        ("worker-exit", None, "store"),
        ("supervisor", "stop", "action_log"),
    ]


async def test_a_child_that_overstays_its_grace_does_not_hold_up_the_others(autojump_clock):
    stopped: dict[str, float] = {}

    async def polite(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            stopped["polite"] = trio.current_time()

    async def stubborn(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await trio.sleep(100)
            stopped["stubborn"] = trio.current_time()

    sink = RecordingSink()
    sup = Supervisor(
        "s",
        Strategy.ONE_FOR_ONE,
        [ChildSpec("polite", polite), ChildSpec("stubborn", stubborn, grace=2.0)],
        events=sink,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        sup.shutdown()
    assert stopped["polite"] == pytest.approx(2.0)
    assert stopped["stubborn"] == pytest.approx(100.0)
    (timeout,) = actions(sink, "stop_timeout")
    assert timeout["actor"] == "stubborn"


async def test_run_root_returns_70_when_the_root_gives_up_and_0_after_shutdown(autojump_clock):
    log: list[str] = []
    a = Kid("a", log)
    a.fail_after_ready = [ValueError("x")] * 10
    root = Supervisor("root", Strategy.ONE_FOR_ONE, [a.spec()], events=RecordingSink())
    assert await run_root(root) == EXIT_SUPERVISOR_EXHAUSTED == 70

    (b,) = kids(log, "b")
    calm = Supervisor("root", Strategy.ONE_FOR_ONE, [b.spec()], events=RecordingSink())
    async with trio.open_nursery() as nursery:
        codes: list[int] = []

        async def main() -> None:
            codes.append(await run_root(calm))

        nursery.start_soon(main)
        await trio.sleep(1)
        calm.shutdown()
    assert codes == [0]


async def test_a_supervisor_can_be_run_again_after_it_gave_up(autojump_clock):
    log: list[str] = []
    a = Kid("a", log)
    a.fail_after_ready = [ValueError("x")] * 6
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [a.spec()], events=RecordingSink())
    with pytest.raises(SupervisorExhausted):
        await sup.run()
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        assert a.runs == 7
        assert sup.restart_counts() == {"a": 0}
        sup.shutdown()


# -- dynamic supervisor --------------------------------------------------------------------------


async def test_dynamic_children_are_added_looked_up_and_restarted(autojump_clock):
    log: list[str] = []
    sink = RecordingSink()
    dyn = DynamicSupervisor("channels", events=sink)
    a, b = kids(log, "chan-1", "chan-2", restart=RestartPolicy.TRANSIENT)
    async with trio.open_nursery() as nursery:
        await nursery.start(dyn.run)
        assert await dyn.start_child(a.spec()) is None
        await dyn.start_child(b.spec())
        assert dyn.children() == ["chan-1", "chan-2"]
        assert dyn.running("chan-1")
        assert dyn.get("chan-2") == b.spec()
        with pytest.raises(ValueError, match="chan-1"):
            await dyn.start_child(a.spec())
        a.crash()
        await trio.sleep(SETTLE)
        assert a.runs == 2 and b.runs == 1
        assert dyn.restart_counts() == {"chan-1": 1, "chan-2": 0}
        b.exit()  # idle: a transient child may leave
        await trio.sleep(SETTLE)
        assert dyn.get("chan-2") is None
        assert dyn.children() == ["chan-1"]
        dyn.shutdown()


async def test_dynamic_start_child_returns_the_started_value_and_reports_early_failure(
    autojump_clock,
):
    dyn = DynamicSupervisor("d", events=RecordingSink())

    async def ready_with_value(
        *, task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started("hello")
        await trio.sleep_forever()

    async def broken(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        raise OSError("no such channel")

    with pytest.raises(RuntimeError, match="not running"):
        await dyn.start_child(ChildSpec("x", ready_with_value))
    async with trio.open_nursery() as nursery:
        await nursery.start(dyn.run)
        assert await dyn.start_child(ChildSpec("x", ready_with_value)) == "hello"
        with pytest.raises(OSError, match="no such channel"):
            await dyn.start_child(ChildSpec("y", broken))
        assert dyn.children() == ["x"]
        dyn.shutdown()


async def test_transient_child_leaving_with_mail_waiting_is_started_again(autojump_clock):
    mailbox: Mailbox[int] = Mailbox(8)
    seen: list[int] = []

    async def one_at_a_time(
        *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        # Handles one message, then leaves as if idle: the race a real idle exit can lose.
        task_status.started()
        seen.append(await mailbox.receive())
        mailbox.done()

    dyn = DynamicSupervisor("d", events=RecordingSink())
    async with trio.open_nursery() as nursery:
        await nursery.start(dyn.run)
        for i in range(3):
            mailbox.send_nowait(i)
        await dyn.start_child(
            ChildSpec("c", one_at_a_time, restart=RestartPolicy.TRANSIENT, mailbox=mailbox)
        )
        await trio.sleep(SETTLE)
        assert seen == [0, 1, 2]
        assert dyn.children() == []
        dyn.shutdown()


async def test_shutdown_before_run_makes_run_return_at_once(autojump_clock):
    log: list[str] = []
    (a,) = kids(log, "a")
    sup = Supervisor("s", Strategy.ONE_FOR_ONE, [a.spec()], events=RecordingSink())
    sup.shutdown()
    await sup.run()
    assert a.runs == 0
    async with trio.open_nursery() as nursery:  # and it can run normally afterwards
        await nursery.start(sup.run)
        assert a.runs == 1
        sup.shutdown()


async def test_a_message_in_hand_at_shutdown_is_logged_as_dropped(autojump_clock):
    mailbox: Mailbox[str] = Mailbox(4)

    async def slow(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        async for _ in mailbox:
            await trio.sleep(100)

    sink = RecordingSink()
    sup = Supervisor(
        "s", Strategy.ONE_FOR_ONE, [ChildSpec("c", slow, mailbox=mailbox)], events=sink
    )
    mailbox.send_nowait("half-done")
    mailbox.send_nowait("queued")
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        await trio.sleep(1)
        sup.shutdown()
    (dropped,) = sink.of("error")
    assert dropped["message"] == "'half-done'"
    assert "was stopped" in str(dropped["error"])
    assert mailbox.depth == 1  # still queued for whoever reads next


async def test_dynamic_shutdown_while_a_child_is_starting(autojump_clock):
    log: list[str] = []
    dyn = DynamicSupervisor("d", events=RecordingSink())
    slow = Kid("slow", log, ready_after=10)
    errors: list[BaseException] = []

    async def add() -> None:
        try:
            await dyn.start_child(slow.spec())
        except RuntimeError as exc:
            errors.append(exc)

    async with trio.open_nursery() as nursery:
        await nursery.start(dyn.run)
        nursery.start_soon(add)
        await trio.sleep(1)
        dyn.shutdown()
    assert trio.current_time() == pytest.approx(1.0)
    assert [str(e) for e in errors] == ["supervisor 'd' shut down while slow started"]
    assert log == ["slow:start", "slow:cancelled"]
