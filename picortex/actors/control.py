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
from picortex.core.redact import redact_obj
from picortex.core.terminal import clean_line

logger = logging.getLogger(__name__)

SOCKET_NAME: Final = "picortex.sock"
# A status answer is small; a client that sends more than this is not ours.
MAX_REQUEST_BYTES: Final = 1024
CLIENT_TIMEOUT_SECONDS: Final = 5.0
# AF_UNIX paths are limited to 108 bytes (with the NUL); longer homes go through a dir fd.
UNIX_PATH_MAX: Final = 100
# How many triggers and queued channels `picortex status` prints.
STATUS_MAILBOXES_SHOWN: Final = 10
STATUS_USERS_SHOWN: Final = 10  # the biggest spenders today; the log has the rest


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


def query_status(home: Path, timeout: float = CLIENT_TIMEOUT_SECONDS) -> dict[str, Any] | None:
    """Ask the running bot for its status; None when no bot answers."""
    answer = _ask(home, timeout)
    return answer if isinstance(answer, dict) else None


def _ask(home: Path, timeout: float) -> dict[str, Any] | str:
    """The bot's status snapshot, or one sentence saying why there is none."""
    path = socket_path(home)
    not_running = f"picortex is not running (no answer on {path}); start it with `picortex run`."
    if not path.exists():
        return not_running
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(timeout)
    chunks = []
    try:
        with unix_address(path) as name:
            client.connect(name)
        client.sendall(b"status\n")
        while True:
            chunk = client.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
    except TimeoutError:
        return f"picortex did not answer on {path} within {timeout:g} s; it may be overloaded."
    except OSError:
        return not_running  # a socket left behind by a killed bot refuses connections
    finally:
        client.close()
    try:
        data = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        return f"picortex sent an unreadable answer on {path}."
    if not isinstance(data, dict):
        return f"picortex sent an unreadable answer on {path}."
    return data


def run_status(settings: Settings, *, out: TextIO, timeout: float = CLIENT_TIMEOUT_SECONDS) -> int:
    """`picortex status`: print the running bot's state, or say that it is not running.

    Returns:
        0 when the bot answered, 1 when it is not running or did not answer.
    """
    data = _ask(settings.home, timeout)
    if isinstance(data, str):
        from picortex.store.lock import running_pid

        holder = running_pid(settings.home)
        if holder is not None:
            data = (
                f"picortex (pid {holder}) holds {settings.home} but its control socket does "
                "not answer; it may still be starting, or be stuck."
            )
        print(data, file=out)
        return 1
    for line in format_status(data):
        print(clean_line(line), file=out)
    return 0


def format_status(data: dict[str, Any]) -> list[str]:
    """The lines `picortex status` prints for a snapshot."""
    gw = data.get("gateway", {})
    shard = gw.get("shard") or [0, 1]
    lines = [
        f"picortex is running (pid {data.get('pid', '?')}, up {_duration(data.get('uptime_s'))})",
        f"connection:        {gw.get('state', '?')} (shard {shard[0]}/{shard[1]})",
        f"session:           {gw.get('session_id') or '-'}",
        f"last seq:          {'-' if gw.get('seq') is None else gw.get('seq')}",
    ]
    latency = gw.get("heartbeat_latency_ms")
    lines.append(f"heartbeat latency: {'-' if latency is None else f'{latency} ms'}")
    lines.append(f"reconnects:        {gw.get('reconnects', 0)}")
    mailboxes = data.get("mailboxes", [])
    queued = sum(int(m.get("depth", 0)) for m in mailboxes)
    lines.append(
        f"mailboxes:         {data.get('channel_actors', len(mailboxes))} channel actors, "
        f"{queued} messages queued, {data.get('mailbox_overflows', 0)} refused (full)"
    )
    busiest = sorted(mailboxes, key=lambda m: (-int(m.get("depth", 0)), str(m.get("name"))))
    for m in busiest[:STATUS_MAILBOXES_SHOWN]:
        lines.append(f"  #{m.get('name')} ({m.get('channel_id')}): {m.get('depth', 0)} queued")
    for warning in data.get("warnings") or ():
        lines.append(f"warning:           {warning}")
    restarts = data.get("restarts") or {}
    shown = ", ".join(f"{name} {count}" for name, count in sorted(restarts.items()))
    lines.append(f"actor restarts:    {shown or 'none'}")
    web = data.get("web")
    if isinstance(web, dict):
        lines.append(f"web panel:         {web.get('url') or 'not served (see the log)'}")
    budget = data.get("budget", {})
    if budget:
        lines.append("budget (this period):")
        for workspace, b in sorted(budget.items()):
            lines.append(f"  {workspace}: ${b['spent_usd']:.4f} of ${b['ceiling_usd']:.6g}")
    else:
        lines.append("budget (this period): nothing spent")
    total = data.get("budget_global") or {}
    if total:
        lines.append(
            f"  all workspaces: ${total.get('spent_usd', 0):.4f} of "
            f"${total.get('ceiling_usd', 0):.6g} (${total.get('held_usd', 0):.4f} held by "
            "running calls)"
        )
    users = data.get("budget_users") or {}
    if users:
        lines.append("spent by user (today, UTC):")
        for uid, u in list(users.items())[:STATUS_USERS_SHOWN]:
            who = f"{uid} (owner)" if u.get("owner") else uid
            lines.append(f"  {who}: ${u.get('spent_usd', 0):.4f} of ${u.get('daily_usd', 0):.6g}")
    triggers = data.get("triggers", [])
    lines.append(f"last triggers ({len(triggers)}):")
    for t in triggers:
        text = str(t.get("content", "")).replace("\n", " ")[:60]
        where = t.get("channel_name") or t.get("channel_id", "?")
        command = str(t.get("command") or "").split()
        kind = f" [{command[0]}]" if command else ""
        lines.append(
            f"  {t.get('timestamp', '')} {t.get('author_name', '?')} in #{where}{kind}: {text}"
        )
    return lines


def _duration(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "?"
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    if minutes:
        return f"{minutes} min {secs} s"
    return f"{secs} s"
