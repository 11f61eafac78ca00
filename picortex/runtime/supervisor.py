"""OTP-style supervision on trio: strategies, restart types, backoff, intensity, ordered shutdown.

How a supervisor behaves:

- Children start in order with `nursery.start`: a child calls `task_status.started()` when it
  is ready, and only then does the next one start. A child that fails before it is ready is
  handled like any other exit.
- Restart policies: PERMANENT children are restarted after any exit, TRANSIENT ones only after an
  exception (or when they return while their mailbox still holds messages), TEMPORARY ones
  never. Strategies: ONE_FOR_ONE restarts the child that exited, ONE_FOR_ALL every child,
  REST_FOR_ONE the child and those started after it; the others are stopped first, in reverse
  order, and temporary ones among them are not restarted.
- Each restart waits an exponential backoff with jitter (reset once a child stayed up for
  `HEALTHY_RUN_SECONDS`); the wait is cancelled by shutdown.
- More than `intensity` restarts within `period` seconds (measured with `trio.current_time()`)
  stops every child and raises `SupervisorExhausted` from an ExceptionGroup of the crashes.
  A parent supervisor treats that as a crash of the child supervisor; at the root,
  `run_root` turns it into exit code 70. An error whose class says `fatal` (see
  `picortex.errors`) is never retried: it stops the children and propagates unchanged.
- `trio.Cancelled` is never a crash. After `started()`, a child is shielded from its parent's
  cancellation: shutdown cancels children one by one in reverse spec order, waiting up to each
  child's `grace` seconds, so the action log (the first child of the root) stops last.
- A crash is one stdlib logging record and one `supervisor` event; the message an actor had in
  hand (its `ChildSpec.mailbox`) is logged as an `error` event and never redelivered.
"""

from __future__ import annotations

import enum
import logging
import math
import random
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, NoReturn

import attrs
import trio

from picortex.errors import SupervisorExhausted, is_fatal
from picortex.runtime.mailbox import Mailbox
from picortex.types import EventSink

logger = logging.getLogger(__name__)

# The first restart comes quickly: most crashes are one-off (a dropped socket, a bad payload).
BACKOFF_INITIAL_SECONDS: Final = 0.5
# Each further consecutive crash doubles the wait.
BACKOFF_FACTOR: Final = 2.0
# Never wait longer than this; a crash loop reaches the intensity limit well before it anyway.
BACKOFF_MAX_SECONDS: Final = 30.0
# The wait is drawn from [delay * (1 - JITTER), delay], so siblings do not restart in lockstep.
BACKOFF_JITTER: Final = 0.5
# A child that stayed up this long was not crash-looping: its backoff starts over.
HEALTHY_RUN_SECONDS: Final = 30.0
# How long shutdown waits for one child's cleanup after cancelling it, unless its spec says.
DEFAULT_GRACE_SECONDS: Final = 5.0
# OTP's classic limit: more than 5 restarts in 60 s means restarting does not help.
DEFAULT_INTENSITY: Final = 5
DEFAULT_PERIOD_SECONDS: Final = 60.0
# The process exit code when the root supervisor gives up (SPEC section 2).
EXIT_SUPERVISOR_EXHAUSTED: Final = 70
# Longest `repr` of a dropped message written to the action log.
DROPPED_REPR_MAX_CHARS: Final = 500

ChildRun = Callable[..., Awaitable[object]]
"""`async def run(*, task_status=trio.TASK_STATUS_IGNORED)`; calls `task_status.started()`."""


class RestartPolicy(enum.Enum):
    """When a child is restarted."""

    PERMANENT = "permanent"  # after any exit
    TRANSIENT = "transient"  # only after an exception
    TEMPORARY = "temporary"  # never


class Strategy(enum.Enum):
    """Which children restart when one exits."""

    ONE_FOR_ONE = "one_for_one"
    ONE_FOR_ALL = "one_for_all"
    REST_FOR_ONE = "rest_for_one"


@attrs.frozen
class ChildSpec:
    """One supervised child.

    Args:
        name: unique within its supervisor; used in logs, events and `restart_counts()`.
        run: the child's body, `async def run(*, task_status)`.
        restart: the child's restart type.
        grace: seconds shutdown waits for the child to finish after cancelling it.
        mailbox: the child's mailbox, if it has one: it outlives the child, and its message in
            hand at a crash is logged as dropped.
    """

    name: str
    run: ChildRun
    restart: RestartPolicy = RestartPolicy.PERMANENT
    grace: float = DEFAULT_GRACE_SECONDS
    mailbox: Mailbox[Any] | None = None


class _State(enum.Enum):
    PENDING = "pending"  # must be (re)started
    STARTING = "starting"
    RUNNING = "running"
    EXITED = "exited"  # exited on its own; its exit is being handled
    STOPPED = "stopped"  # stopped by the supervisor at shutdown
    REMOVED = "removed"  # will not run again


@attrs.frozen
class _Ready:
    value: object


@attrs.frozen
class _Failed:
    error: Exception | None  # None: returned before it was ready


@attrs.frozen
class _Stopped:
    pass


_StartOutcome = _Ready | _Failed | _Stopped


@attrs.define(eq=False)
class _ChildSlot:
    spec: ChildSpec
    state: _State = _State.PENDING
    incarnation: int = 0
    runs: int = 0
    restarts: int = 0
    failures: int = 0  # consecutive exits since the last healthy run: the backoff exponent
    ready_at: float | None = None
    stopping: bool = False
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    done: trio.Event = attrs.field(factory=trio.Event)


class _ChildStatus:
    """The `task_status` a child sees: marks it ready, then shields it from outside cancels."""

    def __init__(self, real: trio.TaskStatus[_StartOutcome], slot: _ChildSlot) -> None:
        self._real = real
        self._slot = slot
        self.started_called = False

    def started(self, value: object = None) -> None:
        if self.started_called:
            raise RuntimeError("task_status.started() called twice")
        self.started_called = True
        slot = self._slot
        slot.state = _State.RUNNING
        slot.ready_at = trio.current_time()
        self._real.started(_Ready(value))
        # From now on only the supervisor stops this child, in its own order. Unless whoever
        # started it is being cancelled: then trio left the child where it was, and it must
        # see that cancellation and exit.
        if trio.current_effective_deadline() != -math.inf:
            slot.scope.shield = True


class Supervisor:
    """Runs children under a strategy; see the module docstring for the rules."""

    def __init__(
        self,
        name: str,
        strategy: Strategy,
        children: Sequence[ChildSpec],
        *,
        events: EventSink,
        intensity: int = DEFAULT_INTENSITY,
        period: float = DEFAULT_PERIOD_SECONDS,
        rng: random.Random | None = None,
    ) -> None:
        names = [c.name for c in children]
        if len(set(names)) != len(names):
            raise ValueError(f"supervisor {name!r} has two children with the same name")
        if intensity < 0 or period <= 0:
            raise ValueError("intensity must be >= 0 and period > 0")
        self.name = name
        self.strategy = strategy
        self._specs = tuple(children)
        self._events = events
        self._intensity = intensity
        self._period = period
        self._rng = rng if rng is not None else random.Random()
        self._slots: list[_ChildSlot] = []
        # The same slots by child name: a dynamic supervisor is asked per message whether a
        # channel's actor runs, among thousands of channels.
        self._named: dict[str, _ChildSlot] = {}
        self._window: deque[tuple[float, Exception | None]] = deque()
        self._notices: deque[tuple[_ChildSlot, int, Exception | None]] = deque()
        self._wake = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._run_scope: trio.CancelScope | None = None
        self._shutdown_requested = False
        self._closing = False
        self._reset()

    # -- public -------------------------------------------------------------------------

    def restart_counts(self) -> dict[str, int]:
        """How often each current child has been restarted since this supervisor started."""
        return {s.spec.name: s.restarts for s in self._slots if s.state is not _State.REMOVED}

    def running(self, name: str) -> bool:
        """True when the child `name` is up and ready."""
        slot = self._find(name)
        return slot is not None and slot.state is _State.RUNNING

    def shutdown(self) -> None:
        """Stop every child in reverse order and make `run` return normally (e.g. on SIGTERM).

        Called before `run`, it makes that `run` return at once.
        """
        self._shutdown_requested = True
        self._closing = True
        if self._run_scope is not None:
            self._run_scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start the children in order and supervise them until cancelled or `shutdown()`.

        Either way the children are stopped in reverse order before it returns.

        Raises:
            SupervisorExhausted: more than `intensity` restarts within `period` seconds.
            FatalDiscordError, ConfigError: a child raised an error restarting cannot fix.
        """
        if self._nursery is not None:
            raise RuntimeError(f"supervisor {self.name!r} is already running")
        if self._shutdown_requested:
            self._shutdown_requested = False
            task_status.started()
            return
        self._reset()
        failure: Exception | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    with trio.CancelScope() as self._run_scope:
                        await self._supervise(task_status)
                except Exception as exc:
                    # Raised bare once the nursery is closed, not wrapped in a group.
                    failure = exc
                finally:
                    self._closing = True
                    with trio.CancelScope(shield=True):
                        await self._stop_all()
        finally:
            self._nursery = None
            self._run_scope = None
            self._shutdown_requested = False
        if failure is not None:
            raise failure

    # -- supervision loop ---------------------------------------------------------------

    def _reset(self) -> None:
        self._slots = [_ChildSlot(spec) for spec in self._specs]
        self._named = {slot.spec.name: slot for slot in self._slots}
        self._window.clear()
        self._notices.clear()
        self._wake = trio.Event()
        self._closing = False

    def _find(self, name: str) -> _ChildSlot | None:
        slot = self._named.get(name)
        return slot if slot is not None and slot.state is not _State.REMOVED else None

    async def _supervise(self, task_status: trio.TaskStatus[None]) -> None:
        await self._start_pending()
        task_status.started()
        while True:
            while not self._notices:
                await self._wake.wait()
                self._wake = trio.Event()
            slot, incarnation, error = self._notices.popleft()
            await self._on_exit(slot, incarnation, error)
            await self._start_pending()

    async def _start_pending(self) -> None:
        """Start every child that should run, in spec order, each once the previous is ready."""
        while True:
            slot = next((s for s in self._slots if s.state is _State.PENDING), None)
            if slot is None:
                return
            outcome = await self._spawn(slot)
            if isinstance(outcome, _Failed):
                await self._on_exit(slot, slot.incarnation, outcome.error)

    async def _spawn(self, slot: _ChildSlot) -> _StartOutcome:
        assert self._nursery is not None
        slot.state = _State.STARTING
        slot.scope = trio.CancelScope()
        slot.done = trio.Event()
        slot.stopping = False
        slot.ready_at = None
        slot.incarnation += 1
        slot.runs += 1
        outcome: _StartOutcome = await self._nursery.start(
            self._incarnation, slot, slot.incarnation, name=f"{self.name}/{slot.spec.name}"
        )
        return outcome

    async def _incarnation(
        self,
        slot: _ChildSlot,
        incarnation: int,
        *,
        task_status: trio.TaskStatus[_StartOutcome],
    ) -> None:
        status = _ChildStatus(task_status, slot)
        error: Exception | None = None
        try:
            with slot.scope:
                try:
                    await slot.spec.run(task_status=status)
                except Exception as exc:
                    error = exc
        finally:
            slot.done.set()
        if slot.stopping:
            self._drop_in_hand(slot, "was stopped")
            if error is not None:
                logger.warning(
                    "actor %s raised while stopping: %s",
                    slot.spec.name,
                    _describe(error),
                    exc_info=error,
                )
            if not status.started_called:
                task_status.started(_Stopped())
            return
        slot.state = _State.EXITED
        if error is not None:
            self._drop_in_hand(slot, "crashed")
        if not status.started_called:
            task_status.started(_Failed(error))
            return
        self._notices.append((slot, incarnation, error))
        self._wake.set()

    async def _on_exit(self, slot: _ChildSlot, incarnation: int, error: Exception | None) -> None:
        """Decide what one child's exit means: nothing, a restart, or giving up."""
        spec = slot.spec
        if slot.incarnation != incarnation or slot.state is not _State.EXITED:
            # Its group was restarted while this exit waited in line: record it, nothing more.
            if error is not None:
                self._record_crash(slot, error, restart=False, in_window=len(self._window))
            return
        now = trio.current_time()
        if error is None and spec.restart is not RestartPolicy.PERMANENT:
            pending = spec.mailbox is not None and spec.mailbox.depth > 0
            if spec.restart is RestartPolicy.TEMPORARY or not pending:
                self._events.emit(
                    "supervisor",
                    action="exit",
                    supervisor=self.name,
                    actor=spec.name,
                    run=slot.runs,
                    restart=False,
                )
                self._remove(slot)
                return
            # Transient, returned (idle) while messages were still arriving: run it again.
        if error is not None:
            if is_fatal(error):
                self._record_crash(slot, error, restart=False, in_window=len(self._window))
                raise error
            if spec.restart is RestartPolicy.TEMPORARY:
                self._record_crash(slot, error, restart=False, in_window=len(self._window))
                self._remove(slot)
                return
        if slot.ready_at is not None and now - slot.ready_at >= HEALTHY_RUN_SECONDS:
            slot.failures = 0
        slot.failures += 1
        in_window = self._count_restart(now, error)
        if in_window > self._intensity:
            if error is not None:
                self._record_crash(slot, error, restart=False, in_window=in_window)
            self._give_up(in_window)
        delay = self._backoff(slot.failures)
        if error is not None:
            self._record_crash(slot, error, restart=True, in_window=in_window, backoff=delay)
        else:
            self._events.emit(
                "supervisor",
                action="exit",
                supervisor=self.name,
                actor=spec.name,
                run=slot.runs,
                restart=True,
                restarts_in_window=in_window,
                backoff_s=round(delay, 3),
            )
        slot.restarts += 1
        for member in reversed(self._group(slot)):
            if member is slot or member.state is _State.REMOVED:
                continue
            await self._stop(member, reason=f"restart of {spec.name}")
            if member.spec.restart is RestartPolicy.TEMPORARY:
                self._remove(member)
            else:
                member.state = _State.PENDING
                member.restarts += 1
        slot.state = _State.PENDING
        await trio.sleep(delay)

    def _group(self, slot: _ChildSlot) -> list[_ChildSlot]:
        """The children restarted with `slot`, in spec order."""
        if self.strategy is Strategy.ONE_FOR_ONE:
            return [slot]
        if self.strategy is Strategy.ONE_FOR_ALL:
            return list(self._slots)
        return self._slots[self._slots.index(slot) :]

    def _count_restart(self, now: float, error: Exception | None) -> int:
        self._window.append((now, error))
        cutoff = now - self._period
        while self._window and self._window[0][0] < cutoff:
            self._window.popleft()
        return len(self._window)

    def _backoff(self, failures: int) -> float:
        delay = min(BACKOFF_MAX_SECONDS, BACKOFF_INITIAL_SECONDS * BACKOFF_FACTOR ** (failures - 1))
        return delay * (1.0 - BACKOFF_JITTER * self._rng.random())

    def _give_up(self, in_window: int) -> NoReturn:
        errors = [e for _, e in self._window if e is not None]
        message = (
            f"supervisor {self.name!r} gave up: {in_window} restarts in {self._period:g} s "
            f"(more than {self._intensity})"
        )
        logger.error(message, extra={"supervisor": self.name, "restarts_in_window": in_window})
        self._events.emit(
            "supervisor",
            action="gave_up",
            supervisor=self.name,
            restarts_in_window=in_window,
            period_s=self._period,
            errors=[_describe(e) for e in errors],
        )
        cause = ExceptionGroup(f"crashes under {self.name}", errors) if errors else None
        raise SupervisorExhausted(message) from cause

    def _record_crash(
        self,
        slot: _ChildSlot,
        error: Exception,
        *,
        restart: bool,
        in_window: int,
        backoff: float | None = None,
    ) -> None:
        """One stdlib logging record and one `supervisor` event for one crash."""
        name = slot.spec.name
        # A fatal error (a refused token, bad configuration) is the user's to fix: the CLI
        # prints it as one sentence, so no traceback here; it is still in the event below.
        fatal = is_fatal(error)
        (logger.debug if fatal else logger.error)(
            "actor %s crashed (run %d, %d restarts in window, %s): %s",
            name,
            slot.runs,
            in_window,
            "restarting" if restart else "not restarting",
            _describe(error),
            exc_info=None if fatal else error,
            extra={
                "supervisor": self.name,
                "actor": name,
                "run": slot.runs,
                "restarts_in_window": in_window,
            },
        )
        fields: dict[str, object] = {
            "action": "crash",
            "supervisor": self.name,
            "actor": name,
            "error": _describe(error),
            "run": slot.runs,
            "restarts": slot.restarts,
            "restarts_in_window": in_window,
            "restart": restart,
            "traceback": "".join(traceback.format_exception(error)),
        }
        if backoff is not None:
            fields["backoff_s"] = round(backoff, 3)
        self._events.emit("supervisor", **fields)

    def _drop_in_hand(self, slot: _ChildSlot, why: str) -> None:
        mailbox = slot.spec.mailbox
        if mailbox is None:
            return
        item = mailbox.take_in_hand()
        if item is None:
            return
        text = repr(item)
        if len(text) > DROPPED_REPR_MAX_CHARS:
            text = text[:DROPPED_REPR_MAX_CHARS] + "..."
        logger.warning("actor %s %s with a message in hand; dropped: %s", slot.spec.name, why, text)
        self._events.emit(
            "error",
            error=f"message dropped: actor {slot.spec.name} {why} while handling it",
            actor=slot.spec.name,
            supervisor=self.name,
            message=text,
        )

    def _remove(self, slot: _ChildSlot) -> None:
        slot.state = _State.REMOVED

    # -- stopping -----------------------------------------------------------------------

    async def _stop(self, slot: _ChildSlot, *, reason: str) -> None:
        """Cancel one child and wait up to its grace period for it to finish."""
        if slot.state not in (_State.RUNNING, _State.STARTING):
            return
        # Emitted before the cancel, so the action log records even its own stop.
        self._events.emit(
            "supervisor", action="stop", supervisor=self.name, actor=slot.spec.name, reason=reason
        )
        slot.stopping = True
        slot.scope.cancel()
        with trio.move_on_after(slot.spec.grace) as grace:
            await slot.done.wait()
        if grace.cancelled_caught:
            logger.warning(
                "actor %s did not stop within its %g s grace period",
                slot.spec.name,
                slot.spec.grace,
            )
            self._events.emit(
                "supervisor",
                action="stop_timeout",
                supervisor=self.name,
                actor=slot.spec.name,
                grace_s=slot.spec.grace,
            )
        slot.state = _State.STOPPED

    async def _stop_all(self) -> None:
        for slot in reversed(self._slots):
            await self._stop(slot, reason="shutdown")


class DynamicSupervisor(Supervisor):
    """A ONE_FOR_ONE supervisor whose children are added while it runs (per-channel actors).

    Children are usually TRANSIENT: they may return when idle and are then forgotten; a child
    that returns while its mailbox still holds messages is started again at once.
    """

    def __init__(
        self,
        name: str,
        *,
        events: EventSink,
        intensity: int = DEFAULT_INTENSITY,
        period: float = DEFAULT_PERIOD_SECONDS,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            name,
            Strategy.ONE_FOR_ONE,
            (),
            events=events,
            intensity=intensity,
            period=period,
            rng=rng,
        )

    async def start_child(self, spec: ChildSpec) -> object:
        """Start `spec` and wait until it is ready; returns what it passed to `started()`.

        Raises:
            ValueError: a child with this name is already supervised.
            RuntimeError: the supervisor is not running, or shut down while the child started.
            Exception: whatever the child raised before it was ready (it is not kept).
        """
        if self._nursery is None or self._closing:
            raise RuntimeError(f"supervisor {self.name!r} is not running")
        if self._find(spec.name) is not None:
            raise ValueError(f"supervisor {self.name!r} already has a child named {spec.name!r}")
        slot = _ChildSlot(spec)
        self._slots.append(slot)
        self._named[spec.name] = slot
        try:
            outcome = await self._spawn(slot)
        except BaseException:
            self._remove(slot)
            raise
        if isinstance(outcome, _Ready):
            return outcome.value
        self._remove(slot)
        if isinstance(outcome, _Failed):
            if outcome.error is not None:
                self._record_crash(slot, outcome.error, restart=False, in_window=len(self._window))
                raise outcome.error
            return None  # returned before it was ready: nothing to supervise
        raise RuntimeError(f"supervisor {self.name!r} shut down while {spec.name} started")

    def get(self, name: str) -> ChildSpec | None:
        """The spec of the supervised child `name` (running or about to restart), or None."""
        slot = self._find(name)
        return slot.spec if slot is not None else None

    def children(self) -> list[str]:
        """Names of the supervised children, in start order."""
        return [s.spec.name for s in self._slots if s.state is not _State.REMOVED]

    def _remove(self, slot: _ChildSlot) -> None:
        # Forgotten for good: a dynamic supervisor may see thousands of short-lived children.
        slot.state = _State.REMOVED
        if slot in self._slots:
            self._slots.remove(slot)
        if self._named.get(slot.spec.name) is slot:
            del self._named[slot.spec.name]


async def run_root(
    root: Supervisor, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> int:
    """Run the root supervisor; return the process exit code.

    0 after `root.shutdown()` (call it from the SIGINT/SIGTERM handler); 70
    (`EXIT_SUPERVISOR_EXHAUSTED`) when the root gave up. Either way every child has stopped
    in reverse order by then, the action log last, so the log is flushed. Fatal errors
    (a class with `fatal`, such as FatalDiscordError or ConfigError) propagate for the caller
    to map to their `exit_code`::

        exit_code = trio.run(run_root, root)
    """
    try:
        await root.run(task_status=task_status)
    except SupervisorExhausted as exc:
        logger.critical("%s; exiting with code %d", exc, EXIT_SUPERVISOR_EXHAUSTED)
        return EXIT_SUPERVISOR_EXHAUSTED
    return 0


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
