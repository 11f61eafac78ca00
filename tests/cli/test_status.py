"""The control socket and `picortex status` output, without a bot behind them."""

from __future__ import annotations

import io
import socket
from pathlib import Path
from typing import Any

import trio

from picortex.actors.control import UNIX_PATH_MAX, ControlServer, socket_path, unix_address
from picortex.cli.status import format_status, query_status, run_status
from picortex.config import load_settings
from picortex.core.jsonids import ids_as_strings

SNAPSHOT: dict[str, Any] = {
    "pid": 4242,
    "uptime_s": 3725.0,
    "gateway": {
        "state": "ready",
        "session_id": "abc123",
        "seq": 57,
        "heartbeat_latency_ms": 1.5,
        "reconnects": 2,
        "shard": [0, 1],
    },
    "channel_actors": 3,
    "mailboxes": [
        {"channel_id": "11", "name": "general", "depth": 0},
        {"channel_id": "12", "name": "random", "depth": 4},
    ],
    "mailbox_overflows": 1,
    "restarts": {"channel-12": 2},
    "budget": {
        "99": {"spent_usd": 0.0123, "ceiling_usd": 5.0, "period": "2026-11-30"},
        "dm": {"spent_usd": 0.000001, "ceiling_usd": 0.000002, "period": "2026-11-30"},
    },
    "triggers": [
        {
            "timestamp": "2026-11-30T10:00:00+00:00",
            "author_name": "alice",
            "channel_id": 11,
            "channel_name": "general",
            "content": "hello\nthere",
            "command": None,
        },
        {
            "timestamp": "2026-11-30T10:00:05+00:00",
            "author_name": "bob",
            "channel_id": 12,
            "channel_name": "random",
            "content": "<@1> !s whitelist list",
            "command": "whitelist list",
        },
    ],
}


def test_format_status_shows_every_part() -> None:
    text = "\n".join(format_status(SNAPSHOT))
    assert "picortex is running (pid 4242, up 1 h 2 min)" in text
    assert "connection:        ready (shard 0/1)" in text
    assert "session:           abc123" in text
    assert "last seq:          57" in text
    assert "heartbeat latency: 1.5 ms" in text
    assert "reconnects:        2" in text
    assert "3 channel actors, 4 messages queued, 1 refused (full)" in text
    # The busiest mailbox first.
    assert text.index("#random (12): 4 queued") < text.index("#general (11): 0 queued")
    assert "actor restarts:    channel-12 2" in text
    # Money in dollars, fixed-point (SPEC 13: `$0.000001`, never `1e-06`).
    assert "99: $0.0123 of $5.00" in text
    assert "dm: $0.000001 of $0.000002" in text
    assert "alice in #general: hello there" in text
    assert "bob in #random [whitelist]: <@1> !s whitelist list" in text


def test_format_status_of_a_bot_not_yet_connected() -> None:
    text = "\n".join(format_status({"gateway": {"state": "connecting"}}))
    assert "connection:        connecting" in text
    assert "session:           -" in text
    assert "last seq:          -" in text
    assert "actor restarts:    none" in text
    assert "budget (this period): nothing spent" in text


def test_format_status_shows_the_shards_held_by_lease() -> None:
    held = {"state": "ready", "session_id": "s1", "reconnects": 0, "shard": [3, 8], "epoch": 4}
    text = "\n".join(format_status({"gateway": held, "shards": [held]}))
    assert "connection:        ready (shard 3/8)" in text
    assert "shard 3/8:         ready, session s1" in text
    assert "reconnects 0, lease epoch 4" in text
    # Holding no shard (other processes hold them all) is said as such.
    none = "\n".join(format_status({"gateway": {"state": "no shard held", "shard": None}}))
    assert "connection:        no shard held\n" in none


def test_not_running_is_one_sentence_and_exit_1(tmp_path: Path) -> None:
    settings = load_settings({"PICORTEX_HOME": str(tmp_path)})
    out = io.StringIO()
    assert run_status(settings, out=out) == 1
    assert out.getvalue().startswith("picortex is not running (no answer on ")
    # A socket file left behind by a killed bot refuses connections: still "not running".
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(socket_path(tmp_path)))
    stale.close()
    out = io.StringIO()
    assert run_status(settings, out=out) == 1
    assert "picortex is not running" in out.getvalue()


async def _serve_and_ask(home: Path) -> dict[str, Any] | None:
    server = ControlServer(socket_path(home), lambda: SNAPSHOT)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.run)
        # A client that hangs up without asking must not stop the server.
        rude = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with unix_address(socket_path(home)) as address:
            await trio.to_thread.run_sync(rude.connect, address)
        rude.close()
        answer = await trio.to_thread.run_sync(query_status, home)
        nursery.cancel_scope.cancel()
    assert not socket_path(home).exists()  # removed on the way out
    return answer


async def test_the_control_socket_answers_status(tmp_path: Path) -> None:
    assert await _serve_and_ask(tmp_path) == ids_as_strings(SNAPSHOT)  # ids as strings (SPEC 11)


async def test_a_long_home_path_still_gets_a_socket(tmp_path: Path) -> None:
    home = tmp_path / ("deep-" * 30)
    home.mkdir()
    assert len(str(socket_path(home))) > UNIX_PATH_MAX
    assert await _serve_and_ask(home) == ids_as_strings(SNAPSHOT)  # ids as strings (SPEC 11)


def test_format_status_lists_each_shard_this_process_holds() -> None:
    shard = {"state": "ready", "heartbeat_latency_ms": 2.0, "reconnects": 0}
    snapshot = {
        **SNAPSHOT,
        "shards": [
            {**shard, "shard": [0, 2], "session_id": "s0"},
            {**shard, "shard": [1, 2], "session_id": "s1", "heartbeat_latency_ms": None},
        ],
    }
    lines = format_status(snapshot)
    assert "shard 0/2:         ready, session s0, latency 2.0 ms, reconnects 0" in lines
    assert "shard 1/2:         ready, session s1, latency -, reconnects 0" in lines
    # One shard: no per-shard lines beside the connection's.
    assert not any(line.startswith("shard ") for line in format_status(SNAPSHOT))
