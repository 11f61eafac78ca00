"""The control socket: `picortex status` asks the running bot over a Unix socket in its home."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final, TextIO

import orjson
import trio

from picortex.config import Settings

logger = logging.getLogger(__name__)

SOCKET_NAME: Final = "picortex.sock"
# A status answer is small; a client that sends more than this is not ours.
MAX_REQUEST_BYTES: Final = 1024
CLIENT_TIMEOUT_SECONDS: Final = 5.0
# AF_UNIX paths are limited to 108 bytes (with the NUL); longer homes go through a dir fd.
UNIX_PATH_MAX: Final = 100
# How many triggers and queued channels `picortex status` prints.
STATUS_MAILBOXES_SHOWN: Final = 10


def socket_path(home: Path) -> Path:
    """Where the running bot listens."""
    return home / SOCKET_NAME


@contextlib.contextmanager
def _bindable(path: Path) -> Iterator[str]:
    """A name for `path` short enough for AF_UNIX: itself, or one through its directory's fd.

    Linux resolves `/proc/self/fd/N/NAME` through the open directory, so a home of any
    length works; elsewhere a long path fails at bind/connect with a clear OSError.
    """
    if len(os.fsencode(str(path))) <= UNIX_PATH_MAX or not Path("/proc/self/fd").is_dir():
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


class ControlServer:
    """Answers `status` requests with a JSON snapshot built by `snapshot()`."""

    def __init__(self, path: Path, snapshot: Callable[[], dict[str, Any]]) -> None:
        self._path = path
        self._snapshot = snapshot

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen until cancelled; the socket file is removed on the way out.

        A socket that cannot be opened (an unwritable home) costs `picortex status`, not the
        bot: it is logged once and the actor idles instead of crash-looping the tree.
        """
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()
        sock = trio.socket.socket(trio.socket.AF_UNIX, trio.socket.SOCK_STREAM)
        try:
            try:
                with _bindable(self._path) as name:
                    await sock.bind(name)
                os.chmod(self._path, 0o600)  # status shows triggers: the owner's eyes only
                sock.listen(16)
            except OSError as exc:
                logger.error("control socket %s unavailable: %s", self._path, exc)
                task_status.started()
                await trio.sleep_forever()
            listener = trio.SocketListener(sock)
            task_status.started()
            await trio.serve_listeners(self._serve, [listener])
        finally:
            sock.close()
            with contextlib.suppress(OSError):
                self._path.unlink()

    async def _serve(self, stream: trio.abc.Stream) -> None:
        # A client that hangs up early, or a snapshot that fails, must not stop the server.
        try:
            async with stream:
                with trio.move_on_after(CLIENT_TIMEOUT_SECONDS):
                    request = await stream.receive_some(MAX_REQUEST_BYTES)
                    if request.strip() == b"status":
                        body = orjson.dumps(self._snapshot(), default=str)
                    else:
                        body = orjson.dumps({"error": "unknown request"})
                    await stream.send_all(body + b"\n")
        except Exception as exc:
            logger.warning("status request failed: %s", exc)


def query_status(home: Path, timeout: float = CLIENT_TIMEOUT_SECONDS) -> dict[str, Any] | None:
    """Ask the running bot for its status; None when no bot is listening."""
    path = socket_path(home)
    if not path.exists():
        return None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout)
    try:
        with _bindable(path) as name:
            client.connect(name)
        client.sendall(b"status\n")
        chunks = []
        while True:
            chunk = client.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        client.close()
    try:
        data = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def run_status(settings: Settings, *, out: TextIO) -> int:
    """`picortex status`: print the running bot's state, or say that it is not running."""
    data = query_status(settings.home)
    if data is None:
        print(
            f"picortex is not running (no answer on {socket_path(settings.home)}); "
            "start it with `picortex run`.",
            file=out,
        )
        return 1
    gw = data.get("gateway", {})
    print(f"connection:        {gw.get('state', '?')}", file=out)
    print(f"session:           {gw.get('session_id') or '-'}", file=out)
    print(f"last seq:          {gw.get('seq')}", file=out)
    latency = gw.get("heartbeat_latency_ms")
    print(f"heartbeat latency: {'-' if latency is None else f'{latency} ms'}", file=out)
    print(f"reconnects:        {gw.get('reconnects', 0)}", file=out)
    depths = data.get("mailboxes", {})
    print(f"mailboxes:         {depths or 'all empty'}", file=out)
    print(f"actor restarts:    {data.get('restarts') or 'none'}", file=out)
    budget = data.get("budget", {})
    if budget:
        print("budget (this period):", file=out)
        for workspace, b in sorted(budget.items()):
            print(f"  {workspace}: ${b['spent_usd']:.4f} of ${b['ceiling_usd']:.2f}", file=out)
    else:
        print("budget (this period): nothing spent", file=out)
    triggers = data.get("triggers", [])
    print(f"last triggers ({len(triggers)}):", file=out)
    for t in triggers:
        text = str(t.get("content", "")).replace("\n", " ")[:60]
        print(f"  {t.get('timestamp', '')} {t.get('author_name', '?')}: {text}", file=out)
    return 0
