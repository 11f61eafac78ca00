"""The control socket: the running bot answers `picortex status` over a Unix socket in its home."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import orjson
import trio

from picortex.core.redact import redact_obj

logger = logging.getLogger(__name__)

SOCKET_NAME: Final = "picortex.sock"
# A status answer is small; a client that sends more than this is not ours.
MAX_REQUEST_BYTES: Final = 1024
CLIENT_TIMEOUT_SECONDS: Final = 5.0
# AF_UNIX paths are limited to 108 bytes (with the NUL); longer homes go through a dir fd.
UNIX_PATH_MAX: Final = 100


def socket_path(home: Path) -> Path:
    """Where the running bot listens."""
    return home / SOCKET_NAME


@contextlib.contextmanager
def unix_address(path: Path) -> Iterator[str]:
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
                with unix_address(self._path) as name:
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
                        body = orjson.dumps(redact_obj(self._snapshot()), default=str)
                    else:
                        body = orjson.dumps({"error": "unknown request"})
                    await stream.send_all(body + b"\n")
        except Exception as exc:
            logger.warning("status request failed: %s", exc)
