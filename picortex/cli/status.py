"""`picortex status`: ask the running bot over its control socket and print the answer."""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path
from typing import Any, Final, TextIO

import orjson

from picortex.actors.control import CLIENT_TIMEOUT_SECONDS, socket_path, unix_address
from picortex.cli import common
from picortex.config import Settings
from picortex.core.money import usd
from picortex.core.terminal import clean_line

# How many queued channels and spenders `picortex status` prints.
STATUS_MAILBOXES_SHOWN: Final = 10
STATUS_USERS_SHOWN: Final = 10  # the biggest spenders today; the log has the rest


def command(args: argparse.Namespace) -> int:
    """Print the running bot's state (exit 0), or why there is none (exit 1)."""
    return run_status(common.reading_settings(), out=sys.stdout)


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
    shard = gw.get("shard", [0, 1])
    # With shard leases a process may hold no shard at all (others hold them all).
    where = f" (shard {shard[0]}/{shard[1]})" if shard else ""
    lines = [
        f"picortex is running (pid {data.get('pid', '?')}, up {_duration(data.get('uptime_s'))})",
        f"connection:        {gw.get('state', '?')}{where}",
        f"session:           {gw.get('session_id') or '-'}",
        f"last seq:          {'-' if gw.get('seq') is None else gw.get('seq')}",
    ]
    latency = gw.get("heartbeat_latency_ms")
    lines.append(f"heartbeat latency: {'-' if latency is None else f'{latency} ms'}")
    lines.append(f"reconnects:        {gw.get('reconnects', 0)}")
    if data.get("database"):
        lines.append(f"database:          {data['database']}")
    shards = data.get("shards") or []
    leased = any("epoch" in held for held in shards)
    if len(shards) > 1 or leased:
        # Many shards in this process, or held by lease: one line each (the connection
        # above is the first).
        for held in shards:
            sid, count = held.get("shard") or ["?", "?"]
            ms = held.get("heartbeat_latency_ms")
            epoch = held.get("epoch")
            lines.append(
                f"shard {sid}/{count}:".ljust(19)
                + f"{held.get('state', '?')}, session {held.get('session_id') or '-'}, "
                + f"latency {'-' if ms is None else f'{ms} ms'}, "
                + f"reconnects {held.get('reconnects', 0)}"
                + ("" if epoch is None else f", lease epoch {epoch}")
            )
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
            lines.append(f"  {workspace}: {usd(b['spent_usd'])} of {usd(b['ceiling_usd'])}")
    else:
        lines.append("budget (this period): nothing spent")
    total = data.get("budget_global") or {}
    if total:
        lines.append(
            f"  all workspaces: {usd(total.get('spent_usd'))} of "
            f"{usd(total.get('ceiling_usd'))} ({usd(total.get('held_usd'))} held by "
            "running calls)"
        )
    users = data.get("budget_users") or {}
    if users:
        lines.append("spent by user (today, UTC):")
        for uid, u in list(users.items())[:STATUS_USERS_SHOWN]:
            who = f"{uid} (owner)" if u.get("owner") else uid
            lines.append(f"  {who}: {usd(u.get('spent_usd'))} of {usd(u.get('daily_usd'))}")
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
