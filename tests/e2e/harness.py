"""Runs the whole bot against the built-in simulator, in one trio run, for end-to-end tests.

The run is on trio's `MockClock` (tests get it with the `virtual_time` marker), which
autojumps to the next deadline once every task has waited AUTOJUMP_SECONDS of wall time, so a
2 s window or a 30 s timeout costs no wall time. The clock never jumps while work it cannot
see is under way: a worker thread (`trio.to_thread`, the model SDK's own thread calls) or an
op handed to the store thread holds it until the result is back on the event loop. Waits are
on events (a log line, a simulator change, the run settling), never on polling. While the
test waits on another process (`wall_time`) the clock runs at wall speed and does not jump.
"""

from __future__ import annotations

import io
import math
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import (
    asynccontextmanager,
    contextmanager,
    redirect_stderr,
    redirect_stdout,
)
from pathlib import Path
from typing import Any, Final, TypeVar

import attrs
import orjson
import trio
import trio.testing

from picortex.actors.pipeline import AnswerDeadlines
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
# Wall seconds every task must have waited before the clock jumps (trio's autojump
# threshold), and the cushion of a wait for the run to settle. Threads and the store hold
# the clock themselves; this only lets bytes just written on a loopback socket be seen.
AUTOJUMP_SECONDS: Final = 0.002
# Wall seconds a test on virtual time may take before it fails (instead of hanging, say
# on a thread that never returns: the clock stands still while it works).
WALL_SECONDS: Final = 120.0
# Wall seconds between two looks for another writer's commit (the store thread polls as often).
COMMIT_POLL_SECONDS: Final = 0.02
# Virtual time between a user's post and whatever happened before it.
USER_GAP_SECONDS: Final = 0.001
# The loop-lag probe's period on virtual time.
LAG_PROBE_ON_VIRTUAL_TIME: Final = 60.0


@attrs.define
class _Holds:
    """Per trio run: the work under way that the clock must not jump over."""

    clock: trio.abc.Clock
    threshold: float
    count: int = 0  # worker threads and store ops under way
    wall: int = 0  # `wall_time` blocks entered
    done: trio.Event = attrs.field(factory=trio.Event)  # set whenever count is 0

    def __attrs_post_init__(self) -> None:
        self.done.set()

    def hold(self, n: int = 1) -> None:
        """Work the clock cannot see has started (`n` pieces of it)."""
        if self.count == 0:
            self.done = trio.Event()
        self.count += n
        self._retune()

    def release(self, n: int = 1) -> None:
        """... and has ended (its result is back on the event loop)."""
        self.count -= n
        if self.count == 0:
            self.done.set()
        self._retune()

    def enter_wall(self) -> None:
        """The test waits on another process: no jumps until `leave_wall`."""
        self.wall += 1
        self._retune()

    def leave_wall(self) -> None:
        """... and has stopped waiting."""
        self.wall -= 1
        self._retune()

    def _retune(self) -> None:
        if isinstance(self.clock, trio.testing.MockClock):
            held = self.count > 0 or self.wall > 0
            self.clock.autojump_threshold = math.inf if held else self.threshold


_HOLDS: Final[trio.lowlevel.RunVar[_Holds]] = trio.lowlevel.RunVar("holds")


def _holds() -> _Holds:
    """This run's holds; the first call makes every worker thread hold the clock."""
    try:
        return _HOLDS.get()
    except LookupError:
        pass
    clock = trio.lowlevel.current_clock()
    threshold = clock.autojump_threshold if isinstance(clock, trio.testing.MockClock) else 0.0
    holds = _Holds(clock, threshold)
    _HOLDS.set(holds)
    # Every `trio.to_thread` call borrows a token from this limiter (the model SDK's thread
    # calls too, through anyio) and gives it back on the event loop, just before its
    # caller resumes: exactly the span the clock must not jump over.
    limiter = trio.to_thread.current_default_thread_limiter()
    acquire, release = limiter.acquire_on_behalf_of, limiter.release_on_behalf_of

    async def acquire_and_hold(borrower: object) -> None:
        await acquire(borrower)
        holds.hold()

    def release_and_go(borrower: object) -> None:
        release(borrower)
        holds.release()

    limiter.acquire_on_behalf_of = acquire_and_hold  # type: ignore[method-assign]
    limiter.release_on_behalf_of = release_and_go  # type: ignore[method-assign]
    return holds


def virtual_clock(rate: float = 0.0) -> trio.testing.MockClock:
    """The clock of an end-to-end run: jumps to the next deadline when the run is idle, and
    also runs at `rate` times wall speed in between."""
    return trio.testing.MockClock(rate=rate, autojump_threshold=AUTOJUMP_SECONDS)


async def run_on_virtual_time(fn: Callable[[], Awaitable[T]]) -> T:
    """Run `fn` with threads holding the clock; fail after WALL_SECONDS of wall time."""
    _holds()
    token = trio.lowlevel.current_trio_token()
    with trio.CancelScope() as scope:
        # The clock stands still while a thread works: a stuck one would hang the test.
        timer = threading.Timer(WALL_SECONDS, token.run_sync_soon, (scope.cancel,))
        timer.daemon = True
        timer.start()
        try:
            return await fn()
        finally:
            timer.cancel()
    raise trio.TooSlowError(f"more than {WALL_SECONDS:g} s of wall time")


async def settle() -> None:
    """Wait until the run is idle: no worker thread or store op under way, every task waiting.

    Anything the bot was going to do about what came before has been done by now (a later
    deadline aside). The clock does not jump while this waits.
    """
    holds = _holds()
    while True:
        await holds.done.wait()
        await trio.testing.wait_all_tasks_blocked(AUTOJUMP_SECONDS)
        if holds.count == 0:
            return


async def _next_deadline() -> None:
    """Wait until the run's next deadline has passed (the clock jumps there when idle)."""
    await trio.sleep(max(0.0, trio.lowlevel.current_statistics().seconds_to_next_deadline))


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
    holds = _holds()
    holds.enter_wall()
    rate, clock.rate = clock.rate, 1.0
    try:
        yield
    finally:
        clock.rate = rate
        holds.leave_wall()


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

        The store thread looks for other writers' commits on a wall-clock poll and applies
        them without a log line: look again at the same pace.
        """
        with wall_time(), trio.fail_after(WAIT_SECONDS):
            while not predicate():
                await trio.sleep(COMMIT_POLL_SECONDS)

    async def idle(self) -> None:
        """Wait until the bot has nothing left to do: every task waits, no worker thread or
        store op is under way, and every write queued so far is committed.

        The event that proves something did NOT happen: anything the bot was going to do
        about what came before has been done by now (a later deadline aside).
        """
        with trio.fail_after(WAIT_SECONDS):
            await settle()
            await self.bot.store.flush()  # what a commit's callbacks do happens next
            await settle()

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
        """Wait until `predicate()` holds (checked after each simulator change, log line,
        and whenever the run settles, before and after each jump of the clock)."""
        settled = False
        with trio.fail_after(WAIT_SECONDS):
            while not predicate():
                logged = self._logged
                async with trio.open_nursery() as nursery:

                    async def first(wait: Callable[[], Awaitable[object]]) -> None:
                        await wait()
                        nursery.cancel_scope.cancel()

                    async def spell(jump: bool) -> None:
                        # The bot's own state changes without a log line (a counter, a
                        # cache): look once the run has settled, and once settled with
                        # nothing new, again after the clock's next jump.
                        nonlocal settled
                        if jump:
                            await _next_deadline()
                        await settle()
                        settled = True
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(first, logged.wait)
                    nursery.start_soon(first, self.sim.changed)
                    nursery.start_soon(spell, settled)
                    settled = False

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


def _hold_on_store_work(bot: Bot) -> None:
    """Make the store thread hold the clock from a hand-over until it is done with it."""
    holds = _holds()

    def watch(ops: int) -> None:
        if ops > 0:
            holds.hold(ops)
        else:
            holds.release(-ops)

    bot.store.on_worker_ops = watch


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
    shards: tuple[tuple[int, int], ...] = (),
    deadlines: AnswerDeadlines | None = None,
) -> AsyncIterator[Running]:
    """Start a simulator with its default world and a bot owned by alice; stop both after.

    `relaxed_limits` raises the per-channel write limits (5 per 5 s on Discord), so a test
    that posts many replies in one channel does not spend its time waiting them out.
    `shards`: the (id, count) shards the bot serves (default: 0/1). `deadlines`: an
    answer's, shortened.
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
        bot = Bot(
            settings,
            shards=shards,
            gateway_timings=GatewayTimings(backoff_base=0.05, backoff_cap=0.5),
            deadlines=deadlines,
        )
        if isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
            # On virtual time the loop is never late, and a probe every 10 ms would hold the
            # clock back to wall speed (it jumps only when every task waits).
            bot.lag.probe_seconds = LAG_PROBE_ON_VIRTUAL_TIME
            # The clock is held while the store thread works: a group's wait for company
            # would be spent in wall time on every write. Each group commits at once.
            bot.store.group_seconds = 0.0
        _hold_on_store_work(bot)
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
