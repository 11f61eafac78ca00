"""`picortex log`: rotated files in order, -n, --event, --json, torn lines, --follow."""

from __future__ import annotations

import io
import os
from pathlib import Path

import orjson
import pytest

from picortex.cli.log import format_event, log_files, run_log


def line(i: int, event: str = "tick", **fields: object) -> bytes:
    record = {"ts": f"2025-06-01T12:00:{i:02d}.000Z", "event": event, "i": i, **fields}
    return orjson.dumps(record) + b"\n"


def view(path: Path, **kw: object) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args: dict[str, object] = {"n": None, "follow": False, "events": (), "as_json": True}
    args.update(kw)
    code = run_log(path, out=out, err=err, **args)  # type: ignore[arg-type]
    return code, out.getvalue(), err.getvalue()


def numbers(text: str) -> list[int]:
    return [orjson.loads(x)["i"] for x in text.splitlines()]


@pytest.fixture
def rotated_log(tmp_path: Path) -> Path:
    """Three files: .2 (oldest) holds 0-2, .1 holds 3-5, the live file 6-8."""
    path = tmp_path / "actions.jsonl"
    for suffix, start in ((".2", 0), (".1", 3), ("", 6)):
        kinds = ["trigger", "reply", "llm"]
        data = b"".join(line(i, kinds[i % 3]) for i in range(start, start + 3))
        (tmp_path / f"actions.jsonl{suffix}").write_bytes(data)
    (tmp_path / "actions.jsonl.torn").write_bytes(b"junk\n")  # not part of the log
    return path


def test_files_are_read_oldest_first(rotated_log: Path) -> None:
    assert [p.name for p in log_files(rotated_log)] == [
        "actions.jsonl.2",
        "actions.jsonl.1",
        "actions.jsonl",
    ]
    code, out, err = view(rotated_log)
    assert code == 0 and err == ""
    assert numbers(out) == list(range(9))


def test_json_prints_the_raw_lines(rotated_log: Path) -> None:
    _, out, _ = view(rotated_log)
    assert out.encode() == b"".join(
        (rotated_log.parent / f"actions.jsonl{s}").read_bytes() for s in (".2", ".1", "")
    )


def test_n_keeps_the_last_matching_lines(rotated_log: Path) -> None:
    assert numbers(view(rotated_log, n=4)[1]) == [5, 6, 7, 8]
    assert numbers(view(rotated_log, n=2, events=("trigger",))[1]) == [3, 6]
    assert view(rotated_log, n=0)[1] == ""
    assert numbers(view(rotated_log, n=100)[1]) == list(range(9))


def test_event_filter_is_repeatable(rotated_log: Path) -> None:
    assert numbers(view(rotated_log, events=("reply",))[1]) == [1, 4, 7]
    assert numbers(view(rotated_log, events=("reply", "llm"))[1]) == [1, 2, 4, 5, 7, 8]
    assert view(rotated_log, events=("nothing-like-this",))[1] == ""


def test_readable_format_is_one_line_per_event(rotated_log: Path) -> None:
    code, out, _ = view(rotated_log, as_json=False, n=1)
    assert code == 0
    assert out == "2025-06-01 12:00:08.000Z  llm          i=8\n"


def test_readable_format_quotes_text_and_leaves_out_tracebacks() -> None:
    record = {
        "ts": "2025-06-01T12:00:00.000Z",
        "event": "supervisor",
        "actor": "llm",
        "error": "ValueError: bad thing",
        "traceback": "Traceback (most recent call last): ...",
        "restart": True,
        "content": "line one\nline two",
        "long": "z" * 500,
    }
    text = format_event(record)
    assert "\n" not in text and "Traceback" not in text
    assert text.startswith("2025-06-01 12:00:00.000Z  supervisor   actor=llm ")
    assert 'error="ValueError: bad thing"' in text
    assert "restart=true" in text
    assert 'content="line one\\nline two"' in text
    assert "long=" + "z" * 159 + "…" in text


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    whole = line(0) + line(1) + line(2)
    path.write_bytes(whole + b'{"ts":"2025-06-01T12:00:03.000Z","event":"ti')
    code, out, err = view(path)
    assert code == 0
    assert out.encode() == whole
    assert err == "warning: skipped an unreadable line (actions.jsonl line 4)\n"


def test_invalid_lines_anywhere_are_skipped_never_fatal(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    path.write_bytes(line(0) + b"\x00\x00garbage\n" + b"[1, 2]\n" + b"\n" + line(1))
    code, out, err = view(path, as_json=False)
    assert code == 0
    assert [x.split("i=")[1] for x in out.splitlines()] == ["0", "1"]
    assert err.count("warning: skipped an unreadable line") == 2


def test_many_bad_lines_give_a_bounded_number_of_warnings(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    path.write_bytes(b"bad\n" * 25 + line(0))
    code, out, err = view(path)
    assert code == 0 and numbers(out) == [0]
    assert err.count("\n") == 11
    assert err.endswith("warning: skipped 15 more unreadable lines\n")


def test_a_missing_log_is_one_sentence_and_exit_1(tmp_path: Path) -> None:
    code, out, err = view(tmp_path / "nope" / "actions.jsonl")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "No action log at" in err


class FollowScript:
    """Stands in for `time.sleep` in --follow: each poll runs the next step of a script."""

    def __init__(self, path: Path, steps: list[bytes | str | tuple[bytes | str, ...]]) -> None:
        self.path = path
        self.steps = steps

    def __call__(self, seconds: float) -> None:
        if not self.steps:
            raise KeyboardInterrupt
        step = self.steps.pop(0)
        # A tuple is several changes made between two polls.
        for change in step if isinstance(step, tuple) else (step,):
            if change == "rotate":
                self._rotate()
            elif isinstance(change, bytes):
                with open(self.path, "ab") as f:
                    f.write(change)

    def _rotate(self) -> None:
        """As the writer rotates (SPEC 11): `.N` -> `.N+1`, ..., then the log -> `.1`."""
        rotated = sorted(
            (int(p.name.rsplit(".", 1)[1]), p) for p in self.path.parent.glob(self.path.name + ".*")
        )
        for n, p in reversed(rotated):
            os.replace(p, self.path.with_name(f"{self.path.name}.{n + 1}"))
        os.replace(self.path, self.path.with_name(self.path.name + ".1"))


def test_follow_prints_new_lines_across_rotation_and_exits_0_on_ctrl_c(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    path.write_bytes(line(0) + line(1))
    second = line(3)
    script = FollowScript(
        path,
        [
            line(2),
            second[:10],  # half a line: held back until the rest arrives
            second[10:],
            "rotate",
            line(4, "reply"),
            line(5),
            b"",
        ],
    )
    out, err = io.StringIO(), io.StringIO()
    code = run_log(
        path, n=1, follow=True, events=("tick",), as_json=True, out=out, err=err, sleep=script
    )
    assert code == 0
    assert numbers(out.getvalue()) == [1, 2, 3, 5]
    assert err.getvalue() == ""


def test_follow_survives_two_rotations_between_its_polls(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    path.write_bytes(line(0))
    script = FollowScript(
        path,
        [
            line(1),
            # Between two polls: the rest of the held file, a whole file that is rotated
            # away at once, and the start of the newest one.
            (line(2), "rotate", line(3) + line(4), "rotate", line(5)),
            line(6),
            b"",
        ],
    )
    out, err = io.StringIO(), io.StringIO()
    code = run_log(
        path, n=None, follow=True, events=(), as_json=True, out=out, err=err, sleep=script
    )
    assert code == 0
    assert numbers(out.getvalue()) == [0, 1, 2, 3, 4, 5, 6]
    assert err.getvalue() == ""


def test_follow_waits_for_a_log_that_does_not_exist_yet(tmp_path: Path) -> None:
    path = tmp_path / "actions.jsonl"
    script = FollowScript(path, [b"", line(0), b""])
    out, err = io.StringIO(), io.StringIO()
    code = run_log(
        path, n=None, follow=True, events=(), as_json=True, out=out, err=err, sleep=script
    )
    assert code == 0
    assert numbers(out.getvalue()) == [0]
    assert "No action log at" in err.getvalue()


def test_an_event_without_fields_has_no_trailing_spaces() -> None:
    assert format_event({"ts": "2025-06-01T12:00:00.000Z", "event": "b"}) == (
        "2025-06-01 12:00:00.000Z  b"
    )


def test_amounts_read_as_dollars() -> None:
    line = format_event(
        {"ts": "2025-06-01T12:00:00.000Z", "event": "llm", "cost_usd": 1e-06, "tokens": 3}
    )
    # SPEC 13's rule for money, in the CLI too: `$0.000001`, never `1e-06`.
    assert line.endswith("cost_usd=$0.000001 tokens=3")
