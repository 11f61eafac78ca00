"""Reading the action log from its end: filters, torn tails, rotated files, the byte budget."""

from __future__ import annotations

from pathlib import Path

import orjson

from picortex.web.logtail import LogFilter, tail


def write(path: Path, ids: range, tail_bytes: bytes = b"") -> None:
    with open(path, "wb") as f:
        for i in ids:
            event = "decision" if i % 2 == 0 else "reply"
            f.write(orjson.dumps({"ts": "t", "event": event, "message_id": i, "channel_id": "7"}))
            f.write(b"\n")
        f.write(tail_bytes)


def ids(records: list[dict[str, object]]) -> list[object]:
    return [r["message_id"] for r in records]


def test_last_n_oldest_first_and_a_torn_tail_skipped(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    write(path, range(5000), b'{"ts": "t", "event": "deci')
    result = tail(path, 3, LogFilter())
    assert ids(result.records) == [4997, 4998, 4999]
    assert result.complete


def test_filters_count_after_filtering(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    write(path, range(100))
    result = tail(path, 4, LogFilter(events=frozenset({"reply"})))
    assert ids(result.records) == [93, 95, 97, 99]
    assert ids(tail(path, 10, LogFilter(message_id="42")).records) == [42]
    assert tail(path, 10, LogFilter(channel_id="8")).records == []
    assert len(tail(path, 1000, LogFilter(channel_id="7")).records) == 100


def test_rotated_files_are_read_after_the_current_one(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    write(tmp_path / "actions.jsonl.2", range(0, 10))
    write(tmp_path / "actions.jsonl.1", range(10, 20))
    write(path, range(20, 25))
    assert ids(tail(path, 8, LogFilter()).records) == list(range(17, 25))
    assert ids(tail(path, 100, LogFilter(message_id="3")).records) == [3]


def test_the_budget_stops_the_scan_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    write(path, range(20_000))
    result = tail(path, 10, LogFilter(message_id="5"), budget=64 * 1024)
    assert result.records == []
    assert not result.complete
    assert result.scanned_bytes <= 64 * 1024
    assert tail(path, 10, LogFilter(message_id="5")).complete


def test_lines_longer_than_a_block_are_whole(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    with open(path, "wb") as f:
        for i in range(3):
            f.write(orjson.dumps({"event": "x", "message_id": i, "pad": "a" * 150_000}) + b"\n")
    assert ids(tail(path, 3, LogFilter()).records) == [0, 1, 2]


def test_no_log_yet(tmp_path: Path) -> None:
    result = tail(tmp_path / "actions.jsonl", 5, LogFilter())
    assert result.records == []
    assert result.complete
