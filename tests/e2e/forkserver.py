"""`picortex run` processes forked from one interpreter that has already imported the bot.

A bot process spends about two seconds of CPU importing (the model SDK alone takes one)
before it connects. Tests that kill and restart the bot several times start each process
here instead: a fork of a server that imported everything once, then runs `picortex run`
exactly as the console script does. Each is still a real process, killed by a real SIGKILL,
on its own environment and home. The server is single-threaded, so forking it is safe.

Protocol, one JSON object a line: the test writes `{"env": {...}, "out": PATH}`; the server
answers `{"pid": N}` once the process is started and `{"exit": N, "code": C}` once it has
ended (C is negative for a signal, as in `subprocess`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import trio

SERVER = r"""
import json, os, select, sys

import picortex.app  # noqa: F401  (the imports every bot process would do)
from picortex.cli import entry

def report(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()

def reap():
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        report(exit=pid, code=os.waitstatus_to_exitcode(status))

def run(request):
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
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

buffer = b""
while True:
    ready, _, _ = select.select([0], [], [], 0.02)
    reap()
    if not ready:
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        break
    buffer += chunk
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run(request)
        report(pid=pid)
"""


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

    def __init__(self, process: trio.Process) -> None:
        self._process = process
        self._started: trio.MemoryReceiveChannel[int]
        self._send_started, self._started = trio.open_memory_channel[int](1)
        self._bots: dict[int, ForkedBot] = {}
        self._lock = trio.Lock()

    async def start(self, env: Mapping[str, str], out: Path) -> ForkedBot:
        """Fork a `picortex run` with this environment; its stdout and stderr go to `out`."""
        assert self._process.stdin is not None
        async with self._lock:
            request = orjson.dumps({"env": dict(env), "out": str(out)}) + b"\n"
            await self._process.stdin.send_all(request)
            pid = await self._started.receive()
            bot = self._bots.setdefault(pid, ForkedBot(pid))
        return bot

    async def _read(self) -> None:
        assert self._process.stdout is not None
        buffer = b""
        async for chunk in self._process.stdout:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                report: dict[str, Any] = orjson.loads(line)
                if "pid" in report:
                    self._bots[report["pid"]] = ForkedBot(report["pid"])
                    await self._send_started.send(report["pid"])
                else:
                    bot = self._bots.setdefault(report["exit"], ForkedBot(report["exit"]))
                    bot._end(report["code"])


@asynccontextmanager
async def fork_server(env: Mapping[str, str]) -> AsyncIterator[ForkServer]:
    """A fork server for this block; every bot it started is killed on the way out."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-c", SERVER], env=dict(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    server = ForkServer(process)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._read)
            try:
                yield server
            finally:
                for bot in server._bots.values():
                    with contextlib.suppress(ProcessLookupError):
                        bot.kill()
                assert process.stdin is not None
                await process.stdin.aclose()
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            with trio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
