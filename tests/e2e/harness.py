"""Runs the whole bot against the built-in simulator, in one trio run, for end-to-end tests.

The run is on virtual time (`virtual_clock`, which tests get with the `virtual_time` marker):
whenever every task waits, the clock jumps to the next deadline, so a 2 s window or a 30 s
timeout costs no wall time. Waits are on events (a log line, a simulator change), never on
polling. While the test waits on another process (`run_cli`) the clock runs at wall speed.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import (
    asynccontextmanager,
    contextmanager,
    redirect_stderr,
    redirect_stdout,
    suppress,
)
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs
import orjson
import trio
import trio.testing

from picortex.app import Bot
from picortex.cli import main
from picortex.config import load_settings
from picortex.core.jsonids import is_id_key
from picortex.discord.protocol import GatewayTimings
from picortex.sim import DefaultWorld, Simulator

T = TypeVar("T")

# Route groups whose limits `relaxed_limits` lifts.
RELAXED_BUCKETS: Final = ("messages.post", "typing", "users/@me/channels", "reactions.me")
# A wait that takes longer than this failed: raise (TooSlowError) instead of hanging the run.
WAIT_SECONDS: Final = 30.0
# The same for a whole test body inside `running_bot`.
TEST_SECONDS: Final = 90.0
# Wall seconds every task must have waited before the virtual clock jumps. Not 0: bytes on
# a loopback socket and the store thread's polling take real time the clock cannot see.
AUTOJUMP_SECONDS: Final = 0.01
# Wall seconds a test on virtual time may take before it fails (instead of hanging).
WALL_SECONDS: Final = 120.0
# Wall seconds the clock waits for busy work (a thread, a store call, a child process)
# before it jumps anyway: stuck work then ends in the test's timeout, not in a hang.
BUSY_HOLD_SECONDS: Final = 20.0
# Virtual time between a user's post and whatever happened before it.
USER_GAP_SECONDS: Final = 0.001
# The loop-lag probe's period on virtual time.
LAG_PROBE_ON_VIRTUAL_TIME: Final = 60.0


@attrs.define
class _VirtualTime:
    """Per trio run: what the clock must not jump over, and who waits for the run to idle."""

    busy: list[Callable[[], bool]]
    idle: trio.Event = attrs.field(factory=trio.Event)


_STATE: Final[trio.lowlevel.RunVar[_VirtualTime]] = trio.lowlevel.RunVar("virtual_time")


def virtual_clock() -> trio.testing.MockClock:
    """The clock of an end-to-end run: stands still until `run_on_virtual_time` jumps it."""
    return trio.testing.MockClock()


async def run_on_virtual_time(fn: Callable[[], Awaitable[T]]) -> T:
    """Run `fn` while jumping the clock to the next deadline whenever the run is idle.

    Idle is every task waiting for AUTOJUMP_SECONDS of wall time *and* no work the clock
    cannot see under way: a `trio.to_thread` call, a store call, a child process. A jump
    while such work runs would fire deadlines that wall time never reaches (a flaky timeout),
    which is what trio's own autojump does. Before a jump, whoever waits for the run to idle
    is woken first (and may act); the jump comes at the next idle spell.
    """
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock)
    state = _VirtualTime(busy=[_threads_busy])
    _STATE.set(state)

    async def jump_when_idle() -> None:
        woke = False
        busy_since: float | None = None
        started = time.monotonic()
        while True:
            await trio.testing.wait_all_tasks_blocked(AUTOJUMP_SECONDS)
            if time.monotonic() - started > WALL_SECONDS:
                raise trio.TooSlowError(f"more than {WALL_SECONDS:g} s of wall time")
            if any(check() for check in state.busy):
                # Held for too long, the work is stuck: jump anyway, so that the test's own
                # deadlines fire and it fails instead of hanging.
                now = time.monotonic()
                busy_since = now if busy_since is None else busy_since
                if now - busy_since < BUSY_HOLD_SECONDS:
                    continue
            busy_since = None
            if not woke and state.idle.statistics().tasks_waiting:
                state.idle.set()
                state.idle = trio.Event()
                woke = True
                continue
            woke = False
            jump = trio.lowlevel.current_statistics().seconds_to_next_deadline
            if 0 < jump < math.inf:
                clock.jump(jump)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(jump_when_idle)
        try:
            return await fn()
        finally:
            nursery.cancel_scope.cancel()


async def run_idle() -> None:
    """Wait until the run idles (virtual time); on wall time, a short while."""
    try:
        state = _STATE.get()
    except LookupError:
        await trio.sleep(0.02)
        return
    if any(check() for check in state.busy):
        # No idle spell comes while work is under way (at wall speed): look again shortly.
        await trio.sleep(0.02)
        return
    await state.idle.wait()


def hold_time_while(check: Callable[[], bool]) -> None:
    """On virtual time, never jump while `check()` says work is under way."""
    with suppress(LookupError):  # wall time, or a test with a clock of its own
        _STATE.get().busy.append(check)


def _threads_busy() -> bool:
    """Whether a `trio.to_thread` call is running (they all borrow the default limiter)."""
    return trio.to_thread.current_default_thread_limiter().statistics().borrowed_tokens > 0


@contextmanager
def wall_time() -> Iterator[None]:
    """While waiting on another process, let the virtual clock run at wall speed, no jumps.

    A child process's work is invisible to the clock: jumping meanwhile would race the test's
    own deadlines through in a few milliseconds.
    """
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock):
        yield
        return
    waiting = True
    hold_time_while(lambda: waiting)
    rate, clock.rate = clock.rate, 1.0
    try:
        yield
    finally:
        clock.rate = rate
        waiting = False


@attrs.define
class Running:
    """A simulator and a bot talking to it."""

    sim: Simulator
    bot: Bot
    world: DefaultWorld
    home: Path
    _token: trio.lowlevel.TrioToken = attrs.field(factory=trio.lowlevel.current_trio_token)
    _logged: trio.Event = attrs.field(factory=trio.Event)
    _rows: list[dict[str, Any]] = attrs.field(factory=list)
    _read_to: int = 0

    def __attrs_post_init__(self) -> None:
        # Every line the bot logs wakes the waiters (the log's own writer runs later).
        emit = self.bot.events.emit

        def emit_and_wake(event: str, /, **fields: object) -> None:
            emit(event, **fields)
            if trio.lowlevel.in_trio_run():
                self._wake()
            else:
                self._token.run_sync_soon(self._wake)

        self.bot.events.emit = emit_and_wake  # type: ignore[method-assign]

    def _wake(self) -> None:
        self._logged.set()
        self._logged = trio.Event()

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """Action-log lines written so far (flushes the log first)."""
        self.bot.events.flush()
        path = self.bot.settings.action_log_path
        if not path.exists():
            return []
        with path.open("rb") as f:
            if f.seek(0, os.SEEK_END) < self._read_to:
                self._read_to, self._rows = 0, []  # rotated: read the new file afresh
            f.seek(self._read_to)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._rows.extend(orjson.loads(line) for line in data[:end].splitlines() if line.strip())
        self._read_to += end
        return [r for r in self._rows if event is None or r["event"] == event]

    async def wait_event(self, event: str, count: int = 1, **match: object) -> list[dict[str, Any]]:
        """Wait until `count` events of a type (with matching fields) are in the log.

        Ids may be given as numbers: the log writes them as strings (SPEC 11).
        """
        match = {k: str(v) if type(v) is int and is_id_key(k) else v for k, v in match.items()}
        with trio.fail_after(WAIT_SECONDS):
            while True:
                logged = self._logged
                found = [
                    e for e in self.events(event) if all(e.get(k) == v for k, v in match.items())
                ]
                if len(found) >= count:
                    return found
                await logged.wait()

    async def wait_commit_seen(self, predicate: Callable[[], bool]) -> None:
        """Wait, at wall speed, until the bot has read another writer's commit.

        The store thread looks for other writers' commits on a wall-clock poll, which the
        virtual clock cannot see.
        """
        with wall_time():
            await self.wait_until(predicate)

    async def idle(self) -> None:
        """Wait until the bot has nothing left to do: every task waits, and no store call,
        worker thread or child process is under way (virtual time only).

        The event that proves something did NOT happen: anything the bot was going to do
        about what came before has been done by now (a later deadline aside).
        """
        try:
            _STATE.get()
        except LookupError:
            raise RuntimeError("Running.idle() needs the `virtual_time` marker") from None
        with trio.fail_after(WAIT_SECONDS):
            await run_idle()

    def say(self, channel_id: int, author_id: int, content: str, **kw: Any) -> dict[str, Any]:
        """A user posts a message (on virtual time, a millisecond after anything before it)."""
        clock = trio.lowlevel.current_clock()
        if isinstance(clock, trio.testing.MockClock):
            # Nothing else would separate two posts: a window of 0 s would still hold both.
            clock.jump(USER_GAP_SECONDS)
        return self.sim.post_user_message(channel_id, author_id, content, **kw)

    def mention(self) -> str:
        """The bot's mention text."""
        return f"<@{self.sim.bot_user_id}>"

    def dm_id(self, user_id: int) -> int:
        """The DM channel between a user and the bot."""
        return self.sim.open_dm(user_id)

    def replies_to(self, message_id: int) -> list[dict[str, Any]]:
        """The bot's messages that reference `message_id`."""
        return [
            m
            for m in self.sim.bot_messages()
            if (m.get("message_reference") or {}).get("message_id") == str(message_id)
        ]

    async def wait_until(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds (checked after each simulator change, log line and
        idle spell of the run)."""
        with trio.fail_after(WAIT_SECONDS):
            while not predicate():
                logged = self._logged
                async with trio.open_nursery() as nursery:

                    async def first(wait: Callable[[], Any]) -> None:
                        await wait()
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(first, logged.wait)
                    nursery.start_soon(first, self.sim.changed)
                    # The bot's own state changes without a log line (a counter, a cache).
                    nursery.start_soon(first, run_idle)

    async def cli(self, *args: str, process: bool = False) -> subprocess.CompletedProcess[str]:
        """`picortex ARGS` on this bot's home; never raises on exit codes.

        In this process through the CLI's `main` (on a worker thread: `status` asks the bot),
        or with `process=True` as a real `python -m picortex` child.
        """
        if process:
            return await run_cli(self.home, *args)
        return await run_cli_in_process(self.home, *args)


async def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m picortex ARGS` with PICORTEX_HOME=home, output captured as text."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICORTEX_", "DISCORD_"))}
    env["PICORTEX_HOME"] = str(home)
    with wall_time():
        done = await trio.run_process(
            [sys.executable, "-m", "picortex", *args],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


async def run_cli_in_process(
    home: Path, *args: str, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """What `run_cli` does, through `picortex.cli.main` on a worker thread of this process.

    The environment (plus `env`), stdout/stderr and the umask are the process's: they are set
    for the call and put back after (the bot under test reads none of them while it runs).
    """
    extra = dict(env or {})
    prefixes = ("PICORTEX_", "DISCORD_", *(("ANTHROPIC_",) if extra else ()))

    def call() -> tuple[int, str, str]:
        saved = {k: v for k, v in os.environ.items() if k.startswith(prefixes) or k in extra}
        for key in saved:
            del os.environ[key]
        os.environ.update(extra)
        os.environ["PICORTEX_HOME"] = str(home)
        umask = os.umask(0o022)
        os.umask(umask)
        out, err = io.StringIO(), io.StringIO()
        try:
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    code = main(list(args))
                except SystemExit as e:  # argparse: --help, usage errors
                    code = e.code if isinstance(e.code, int) else int(e.code is not None)
        finally:
            os.umask(umask)
            for key in (*extra, "PICORTEX_HOME"):
                os.environ.pop(key, None)
            os.environ.update(saved)
        return code, out.getvalue(), err.getvalue()

    with wall_time():
        code, out, err = await trio.to_thread.run_sync(call)
    return subprocess.CompletedProcess(["picortex", *args], code, out, err)


def _store_waits(bot: Bot) -> Callable[[], bool]:
    """Count the calls awaiting the store thread; the check says whether any is under way."""
    call = bot.store.call
    waiting = 0

    async def counted(fn: Callable[[Any], Any], *, write: bool = True) -> Any:
        nonlocal waiting
        waiting += 1
        try:
            return await call(fn, write=write)
        finally:
            waiting -= 1

    bot.store.call = counted  # type: ignore[method-assign]
    return lambda: waiting > 0


@asynccontextmanager
async def running_bot(
    tmp_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    toml: str = "",
    with_key: bool = True,
    sim: Simulator | None = None,
    files: Mapping[str, str] | None = None,
    relaxed_limits: bool = False,
) -> AsyncIterator[Running]:
    """Start a simulator with its default world and a bot owned by alice; stop both after.

    `relaxed_limits` raises the per-channel write limits (5 per 5 s on Discord), so a test
    that posts many replies in one channel does not spend its time waiting them out.
    """
    sim = sim or Simulator(heartbeat_interval_ms=5000)
    if relaxed_limits:
        for bucket in RELAXED_BUCKETS:
            sim.set_rate_limit(bucket, 1000, 1.0)
    world = sim.add_default_world()
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    if toml:
        (home / "picortex.toml").write_text(toml)
    for name, text in (files or {}).items():
        path = home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    async with trio.open_nursery() as nursery:
        urls = await nursery.start(sim.serve)
        base_env = {
            "PICORTEX_HOME": str(home),
            "DISCORD_BOT_TOKEN": sim.token,
            "DISCORD_API_BASE": urls.api_base,
            "PICORTEX_OWNER_ID": str(world.alice_id),
        }
        if with_key:
            base_env["ANTHROPIC_API_KEY"] = "sk-ant-test-key-0000"
            base_env["ANTHROPIC_BASE_URL"] = urls.anthropic_base_url
        base_env.update(env or {})
        settings = load_settings(base_env)
        bot = Bot(settings, gateway_timings=GatewayTimings(backoff_base=0.05, backoff_cap=0.5))
        if isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
            # On virtual time the loop is never late, and a probe every 10 ms would hold the
            # clock back to wall speed (it jumps only when every task waits).
            bot.lag.probe_seconds = LAG_PROBE_ON_VIRTUAL_TIME
        hold_time_while(_store_waits(bot))
        try:
            # The bot stops first, while the simulator still answers its goodbyes.
            async with trio.open_nursery() as bot_nursery:
                run = Running(sim, bot, world, home)
                with trio.fail_after(WAIT_SECONDS):
                    await bot_nursery.start(bot.run)
                    await sim.wait_ready()
                    await run.wait_event("gateway", action="ready")
                try:
                    with trio.fail_after(TEST_SECONDS):
                        yield run
                finally:
                    bot_nursery.cancel_scope.cancel()
        finally:
            nursery.cancel_scope.cancel()
