"""The action-log actor: lines, timestamps, redaction, rotation, torn lines, drops, faults."""

from __future__ import annotations

import io
import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
import trio

from picortex.actors.action_log import ActionLog
from picortex.cli.log import run_log
from picortex.errors import FaultInjected
from picortex.runtime.faults import FaultPoints

TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GaBcDe.abcdefghijklmnopqrstuvwxyz0123456789AB"
API_KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"
# 2025-06-01T12:00:00.250Z
FIXED_NOW = 1748779200.25


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


async def run_briefly(log: ActionLog, *events: tuple[str, dict[str, object]]) -> None:
    """Start the actor, emit, let it write, then stop it."""
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        for name, fields in events:
            log.emit(name, **fields)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()


async def test_each_event_is_one_json_line_with_ts_and_event_first(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000, clock=lambda: FIXED_NOW)
    await run_briefly(
        log,
        ("trigger", {"channel_id": 12, "reason": "wakeword", "content": "hi\nthere"}),
        ("llm", {"model": "m", "cost_usd": 0.0012, "tokens": [1, 2]}),
    )
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 2
    first, second = read_lines(path)
    assert list(first) == ["ts", "event", "channel_id", "reason", "content"]
    assert first == {
        "ts": "2025-06-01T12:00:00.250Z",
        "event": "trigger",
        "channel_id": "12",
        "reason": "wakeword",
        "content": "hi\nthere",
    }
    assert second["event"] == "llm" and second["tokens"] == [1, 2]


async def test_the_real_clock_gives_rfc3339_utc_with_milliseconds(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    await run_briefly(ActionLog(path, 1_000_000), ("gateway", {}))
    (line,) = read_lines(path)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])
    assert line == {"ts": line["ts"], "event": "gateway"}


async def test_secrets_are_redacted_in_every_field_and_key(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000)
    await run_briefly(
        log,
        (
            "error",
            {
                "error": f"401 for Bot {TOKEN}",
                "nested": {"headers": {"authorization": f"Bot {TOKEN}", TOKEN: 1}},
                "list": [API_KEY, f"x-api-key: {API_KEY}"],
            },
        ),
    )
    raw = path.read_bytes()
    assert TOKEN.encode() not in raw and API_KEY.encode() not in raw
    (line,) = read_lines(path)
    assert line["error"] == "401 for Bot [redacted]"
    assert line["nested"] == {"headers": {"authorization": "Bot [redacted]", "[redacted]": 1}}
    assert line["list"] == ["[redacted]", "x-api-key: [redacted]"]


async def test_odd_values_are_written_readably_and_emit_never_raises(tmp_path, autojump_clock):
    @attrs.frozen
    class Point:
        x: int
        y: int

    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000)
    await run_briefly(
        log,
        ("a", {"point": Point(1, 2), "error": ValueError("bad"), "raw": b"bytes", "p": Path("/x")}),
        ("b", {"huge": 2**80, "keys": {1: "one"}}),
        ("c", {"ts": "theirs", "event": "theirs"}),
    )
    a, b, c = read_lines(path)
    assert a["point"] == {"x": 1, "y": 2}
    assert a["error"] == "ValueError: bad"
    assert a["raw"] == "bytes" and a["p"] == "/x"
    assert b["huge"] == str(2**80) and b["keys"] == {"1": "one"}
    assert c["event"] == "c" and c["field_event"] == "theirs" and c["field_ts"] == "theirs"


async def test_lines_waiting_together_are_written_in_one_write(
    tmp_path, autojump_clock, monkeypatch
):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000)
    writes: list[int] = []
    real_write = os.write

    def counting_write(fd: int, data: Any) -> int:
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting_write)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        for i in range(100):
            log.emit("tick", i=i)
        await trio.sleep(1)
        assert len(writes) == 1
        log.emit("tock")
        await trio.sleep(1)
        assert len(writes) == 2
        nursery.cancel_scope.cancel()
    assert [e["i"] for e in read_lines(path)[:100]] == list(range(100))


async def test_everything_queued_is_written_on_cancel(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        for i in range(50):
            log.emit("late", i=i)
        nursery.cancel_scope.cancel()  # before the writer had a turn
    assert [e["i"] for e in read_lines(path)] == list(range(50))


def test_flush_writes_what_was_emitted_outside_run(tmp_path):
    path = tmp_path / "sub" / "actions.jsonl"
    log = ActionLog(path, 1_000_000)
    log.emit("supervisor", action="gave_up")
    log.flush()
    assert [e["action"] for e in read_lines(path)] == ["gave_up"]
    assert log.statistics().written == 1
    assert oct(path.stat().st_mode & 0o777) == oct(0o600)


async def test_a_full_queue_drops_counts_and_says_so_later(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000, max_pending_bytes=300)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        for i in range(20):
            log.emit("chatty", i=i, padding="x" * 40)  # never blocks, never raises
        assert log.statistics().dropped > 0
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    lines = read_lines(path)
    kept = [e["i"] for e in lines if e["event"] == "chatty"]
    assert kept == list(range(len(kept))) and 0 < len(kept) < 20
    (note,) = [e for e in lines if e["event"] == "error"]
    assert note["dropped"] == 20 - len(kept)
    assert "dropped" in note["error"]


async def test_rotation_keeps_five_files_each_within_max_bytes(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 2_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        for i in range(400):
            log.emit("tick", i=i, text="some words to fill the line up")
            if i % 7 == 0:
                await trio.sleep(0.1)
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    rotated = sorted(p.name for p in tmp_path.iterdir())
    assert rotated == [
        "actions.jsonl",
        "actions.jsonl.1",
        "actions.jsonl.2",
        "actions.jsonl.3",
        "actions.jsonl.4",
        "actions.jsonl.5",
    ]
    numbers: list[int] = []
    for name in reversed(rotated[1:]):  # .5 is the oldest
        assert (tmp_path / name).stat().st_size <= 2_000
        numbers += [e["i"] for e in read_lines(tmp_path / name)]
    numbers += [e["i"] for e in read_lines(path)]
    assert path.stat().st_size <= 2_000
    # The kept files hold the newest events, whole and in order.
    assert numbers == list(range(numbers[0], 400))


async def test_a_line_longer_than_max_bytes_gets_a_file_of_its_own(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 200)
    await run_briefly(log, ("small", {}), ("big", {"text": "y" * 500}), ("after", {}))
    assert [e["event"] for e in read_lines(tmp_path / "actions.jsonl.2")] == ["small"]
    assert [e["event"] for e in read_lines(tmp_path / "actions.jsonl.1")] == ["big"]
    assert [e["event"] for e in read_lines(path)] == ["after"]


async def test_a_torn_last_line_is_moved_aside_at_start(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    whole = (
        b'{"ts":"2025-06-01T12:00:00.000Z","event":"a"}\n'
        b'{"ts":"2025-06-01T12:00:01.000Z","event":"b"}\n'
    )
    torn = b'{"ts":"2025-06-01T12:00:02.000Z","event":"rep'
    path.write_bytes(whole + torn)
    log = ActionLog(path, 1_000_000)
    await run_briefly(log, ("after", {}))
    lines = read_lines(path)  # every line is whole JSON again
    assert [e["event"] for e in lines] == ["a", "b", "error", "after"]
    assert "torn" in lines[2]["error"] and lines[2]["bytes"] == len(torn)
    assert (tmp_path / "actions.jsonl.torn").read_bytes() == torn + b"\n"


async def test_a_whole_last_line_missing_only_its_newline_is_kept(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    path.write_bytes(b'{"event":"a"}\n{"event":"b"}')
    await run_briefly(ActionLog(path, 1_000_000), ("c", {}))
    assert [e["event"] for e in read_lines(path)] == ["a", "b", "c"]
    assert not (tmp_path / "actions.jsonl.torn").exists()


async def test_a_file_that_is_all_torn_is_emptied(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    path.write_bytes(b'{"event":"cut sh')
    await run_briefly(ActionLog(path, 1_000_000))
    (note,) = read_lines(path)
    assert note["event"] == "error"


async def test_a_log_fault_drops_that_line_and_keeps_the_rest_in_order(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000, faults=FaultPoints.parse("log:kaboom"))
    with pytest.RaisesGroup(FaultInjected):
        async with trio.open_nursery() as nursery:
            await nursery.start(log.run)
            log.emit("one")
            log.emit("two", content="kaboom")
            log.emit("three")
            await trio.sleep(1)
    # Run again, as the supervisor would.
    await run_briefly(log, ("four", {}))
    events = [e["event"] for e in read_lines(path)]
    assert events == ["one", "error", "three", "four"]
    assert b"kaboom" in path.read_bytes()  # the note names the fault, not the line
    assert "message dropped" in read_lines(path)[1]["error"]


async def test_unserializable_fields_still_give_one_whole_line(tmp_path, autojump_clock):
    deep: list[object] = []
    for _ in range(300):
        deep = [deep]
    path = tmp_path / "actions.jsonl"
    await run_briefly(ActionLog(path, 1_000_000), ("deep", {"v": deep}), ("next", {}))
    first, second = read_lines(path)
    assert first["event"] == "deep" and second["event"] == "next"


KILL_ROUNDS = 5
WRITER = """
import sys, trio
from pathlib import Path
from picortex.actors.action_log import ActionLog

log = ActionLog(Path(sys.argv[1]), 50_000)

async def main():
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        print("ready", flush=True)
        i = 0
        while True:
            log.emit("tick", i=i, text="x" * (i % 300))
            i += 1
            if i % 40 == 0:
                await trio.sleep(0)

trio.run(main)
"""


@pytest.mark.long(seconds=2)
def test_sigkill_at_any_moment_leaves_a_readable_log(tmp_path):
    path = tmp_path / "actions.jsonl"
    rng = random.Random(5)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    for _ in range(KILL_ROUNDS):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE, env=env
        )
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.01, 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
        # Readers never choke: every whole line comes out, a torn tail is skipped.
        out, err = io.StringIO(), io.StringIO()
        assert run_log(path, n=None, follow=False, events=(), as_json=True, out=out, err=err) == 0
        for text in out.getvalue().splitlines():
            assert orjson.loads(text)["event"] in ("tick", "error")
    # And the next start leaves only whole lines behind.
    ActionLog(path, 50_000).flush()
    for file in [path, *tmp_path.glob("actions.jsonl.[0-9]")]:
        data = file.read_bytes()
        assert data == b"" or data.endswith(b"\n")  # empty: killed right after a rotation
        for raw in data.splitlines():
            orjson.loads(raw)


# ---- ids as strings, flood control --------------------------------------------------------


async def test_discord_ids_are_written_as_strings(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000, clock=lambda: FIXED_NOW)
    big = 1_380_000_000_000_000_123  # beyond 2**53: a JSON number loses its last digits
    await run_briefly(
        log,
        (
            "reply",
            {
                "message_id": big,
                "channel_id": 12,
                "message_ids": [big, 5],
                "requester": 7,
                "parts": 2,
                "nested": {"author_id": 9, "count": 3},
            },
        ),
    )
    (line,) = read_lines(path)
    assert line["message_id"] == str(big)
    assert line["channel_id"] == "12"
    assert line["message_ids"] == [str(big), "5"]
    assert line["requester"] == "7"
    assert line["parts"] == 2  # a count stays a number
    assert line["nested"] == {"author_id": "9", "count": 3}


def test_log_json_prints_old_numeric_ids_as_strings(tmp_path):
    path = tmp_path / "actions.jsonl"
    path.write_bytes(
        b'{"ts":"2025-06-01T12:00:00.000Z","event":"decision","message_id":1380000000000000123}\n'
        b'{"ts":"2025-06-01T12:00:01.000Z","event":"decision","message_id":"42","n":1}\n'
    )
    out, err = io.StringIO(), io.StringIO()
    assert run_log(path, n=None, follow=False, events=(), as_json=True, out=out, err=err) == 0
    first, second = (orjson.loads(line) for line in out.getvalue().splitlines())
    assert first["message_id"] == "1380000000000000123"
    assert second == {
        "ts": "2025-06-01T12:00:01.000Z",
        "event": "decision",
        "message_id": "42",
        "n": 1,
    }


async def test_repeated_errors_are_written_a_few_times_then_counted(tmp_path, autojump_clock):
    now = [FIXED_NOW]
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000, clock=lambda: now[0])
    async with trio.open_nursery() as nursery:
        await nursery.start(log.run)
        for i in range(1000):
            log.emit("error", scope="normalize", event_name="MESSAGE_CREATE", message="bad id")
            log.emit("error", scope="normalize", event_name="MESSAGE_CREATE", message="no author")
            if i == 10:
                log.emit("trigger", message_id=1)  # other events are never held back
        await trio.sleep(1)
        # The window ends: the counts are written even though no new error came.
        now[0] += 61
        await trio.sleep(60)
        lines = read_lines(path)
        log.emit("error", scope="normalize", event_name="MESSAGE_CREATE", message="bad id")
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    bad = [e for e in lines if e.get("message") == "bad id"]
    assert [e.get("repeated") for e in bad] == [None, None, None, 997]
    assert bad[-1]["scope"] == "normalize" and bad[-1]["event_name"] == "MESSAGE_CREATE"
    other = [e for e in lines if e.get("message") == "no author"]
    assert [e.get("repeated") for e in other] == [None, None, None, 997]
    assert sum(1 for e in lines if e["event"] == "trigger") == 1
    # A new window writes the error again.
    final = read_lines(path)
    assert [e.get("repeated") for e in final if e.get("message") == "bad id"][-1] is None
    assert len(final) == len(lines) + 1


async def test_counted_errors_are_written_at_shutdown(tmp_path, autojump_clock):
    path = tmp_path / "actions.jsonl"
    log = ActionLog(path, 1_000_000, clock=lambda: FIXED_NOW)
    await run_briefly(log, *[("error", {"scope": "router", "message": "queue full"})] * 10)
    assert [e.get("repeated") for e in read_lines(path)] == [None, None, None, 7]
