"""`picortex run` processes forked from a copy of this test process, which imported the bot.

A bot process spends about two seconds of CPU importing (the model SDK alone takes one)
before it connects. Tests that kill and restart the bot several times start each process
here instead: a fork of a server that has everything imported already, then runs `picortex
run` exactly as the console script does. Each is still a real process, killed by a real
SIGKILL, on its own environment and home.

The server is itself a fork of the test process, made by `prefork` before the tests run
(tests/conftest.py): the test modules are imported by then, so the server costs no import
of its own, and no trio run nor test is under way, so the copy carries none of their state.
It is single-threaded, so forking it again is safe; it ends when the test process closes its
end of the request pipe (`shutdown`, at the end of the run, or the test process's exit).

Protocol, one JSON object a line: the test writes `{"env": {...}, "out": PATH}`; the server
answers `{"pid": N}` once the process is started and `{"exit": N, "code": C}` once it has
ended (C is negative for a signal, as in `subprocess`).
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import json
import logging
import os
import select
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NoReturn

import orjson
import trio

# The server's end of each pipe, as the server process sees them.
_REQUESTS_FD = 0
_REPORTS_FD = 1


class _Server:
    """This process's forked server: its pid and this side's pipe ends."""

    def __init__(self, pid: int, requests: int, reports: int) -> None:
        self.pid = pid
        self.requests = requests
        self.reports = reports


_server: _Server | None = None


def prefork() -> None:
    """Fork this process's server now (once); call it before any test or trio run starts."""
    global _server
    if _server is not None:
        return
    import picortex.app  # noqa: F401  (the imports every bot process would do)
    from picortex.cli import entry

    requests_read, requests_write = os.pipe()
    reports_read, reports_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.dup2(requests_read, _REQUESTS_FD)
            os.dup2(reports_write, _REPORTS_FD)
            with open(os.devnull, "wb") as null:
                os.dup2(null.fileno(), 2)
            # Nothing of the test process's but the two pipes: its other pipes (the test
            # runner's own) must close when it exits, whatever this server does.
            os.closerange(3, os.sysconf("SC_OPEN_MAX"))
            _reset_process_state()
            _serve(entry)
        finally:
            os._exit(0)
    os.close(requests_read)
    os.close(reports_write)
    _server = _Server(pid, requests_write, reports_read)


def shutdown() -> None:
    """End this process's server, if any, and reap it (no zombie outlives the test run)."""
    global _server
    server, _server = _server, None
    if server is None:
        return
    os.close(server.requests)  # the server reads the end of its requests and returns
    os.close(server.reports)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(server.pid, 0)


def _reset_process_state() -> None:
    """What the test process set up for itself, set back to a fresh interpreter's.

    The warning filters need nothing: outside a test, pytest leaves the process's own.
    """
    sys.stdin = open(0, closefd=False)  # noqa: SIM115  (the process's own, never closed)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
    faulthandler.disable()  # its file was the test runner's, closed above
    sys.unraisablehook = sys.__unraisablehook__
    sys.excepthook = sys.__excepthook__
    root = logging.getLogger()
    root.handlers.clear()
    root.setLevel(logging.WARNING)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # The objects imported so far are never collected: the bots forked from here do not
    # walk (and so copy) every page of them at each full collection.
    gc.freeze()


def _serve(entry: Any) -> None:
    def report(**fields: Any) -> None:
        os.write(_REPORTS_FD, (json.dumps(fields) + "\n").encode())

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            report(exit=pid, code=os.waitstatus_to_exitcode(status))

    buffer = b""
    while True:
        ready, _, _ = select.select([_REQUESTS_FD], [], [], 0.02)
        reap()
        if not ready:
            continue
        chunk = os.read(_REQUESTS_FD, 65536)
        if not chunk:
            return
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            request = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _run_bot(entry, request)
            report(pid=pid)


def _run_bot(entry: Any, request: dict[str, Any]) -> NoReturn:
    """In the forked child: `picortex run` with the request's environment and output file."""
    with open(os.devnull, "rb") as null:
        os.dup2(null.fileno(), 0)
    with open(request["out"], "ab") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["picortex", "run"]
    try:
        entry()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 1
    except BaseException:
        code = 1
    else:
        code = 0
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


class ForkedBot:
    """A `picortex run` process of the fork server: what the tests use of a trio.Process."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._ended = trio.Event()

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        await self._ended.wait()
        assert self.returncode is not None
        return self.returncode

    def _end(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


class ForkServer:
    """Starts bot processes by fork (see the module's docstring); use `fork_server()`."""

    def __init__(self, requests: trio.abc.SendStream, reports: trio.abc.ReceiveStream) -> None:
        self._requests = requests
        self._reports = reports
        self._started: trio.MemoryReceiveChannel[int]
        self._send_started, self._started = trio.open_memory_channel[int](1)
        self._bots: dict[int, ForkedBot] = {}
        self._lock = trio.Lock()

    async def start(self, env: dict[str, str], out: Path) -> ForkedBot:
        """Fork a `picortex run` with this environment; its stdout and stderr go to `out`."""
        async with self._lock:
            request = orjson.dumps({"env": dict(env), "out": str(out)}) + b"\n"
            await self._requests.send_all(request)
            pid = await self._started.receive()
            bot = self._bots.setdefault(pid, ForkedBot(pid))
        return bot

    async def _read(self) -> None:
        buffer = b""
        async for chunk in self._reports:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                try:
                    report: dict[str, Any] = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue  # the tail of a report an earlier block stopped reading midway
                if "pid" in report:
                    self._bots[report["pid"]] = ForkedBot(report["pid"])
                    await self._send_started.send(report["pid"])
                else:
                    # Reports of bots an earlier block started end bots nobody waits on.
                    bot = self._bots.setdefault(report["exit"], ForkedBot(report["exit"]))
                    bot._end(report["code"])

    def _kill_all(self) -> None:
        for bot in self._bots.values():
            with contextlib.suppress(ProcessLookupError):
                bot.kill()


@asynccontextmanager
async def fork_server() -> AsyncIterator[ForkServer]:
    """This process's fork server for this block; every bot it started is killed on the way out."""
    if _server is None:
        raise RuntimeError("no fork server: tests/conftest.py forks it before the tests run")
    server = ForkServer(
        trio.lowlevel.FdStream(os.dup(_server.requests)),
        trio.lowlevel.FdStream(os.dup(_server.reports)),
    )
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._read)
            try:
                yield server
            finally:
                server._kill_all()
                nursery.cancel_scope.cancel()
    finally:
        server._kill_all()
        with trio.CancelScope(shield=True):
            await server._requests.aclose()
            await server._reports.aclose()
