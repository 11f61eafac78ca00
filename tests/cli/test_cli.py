"""The command line as a newcomer meets it: help, one-sentence errors, reading a broken home."""

from __future__ import annotations

import argparse
import os
import socket
from pathlib import Path

import orjson
import pytest

from picortex import cli
from picortex.cli.status import format_status
from picortex.core.events import EVENT_TYPES
from picortex.store.lock import hold_home, running_pid

# `cli.main` sets up logging for a process; in this one, later tests need theirs back.
pytestmark = pytest.mark.usefixtures("root_logging_restored")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith(("PICORTEX_", "DISCORD_", "ANTHROPIC_")):
            monkeypatch.delenv(name)
    path = tmp_path / "home"
    monkeypatch.setenv("PICORTEX_HOME", str(path))
    return path


def _subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                found.extend(_subparsers(child))
    return found


def test_every_option_and_argument_has_a_description() -> None:
    missing = []
    for parser in _subparsers(cli.build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if not action.help:
                missing.append(f"{parser.prog} {action.dest}")
    assert missing == []


def test_log_help_lists_the_event_types(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        cli.main(["log", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for event in EVENT_TYPES:
        assert event in out
    assert "--event TYPE" in out


def test_sim_on_a_busy_port_is_one_sentence(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = cli.main(["sim", "--port", str(port)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip() == (
        f"picortex: port {port} is already in use; choose another with --port, or leave "
        "--port out to take any free one"
    )


@pytest.mark.parametrize("command", [["run"], ["errors"]])
def test_a_home_that_cannot_be_created_is_one_sentence(
    command: list[str],
    home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "tok")
    real_mkdir = Path.mkdir

    def read_only_parent(self: Path, *args: object, **kwargs: object) -> None:
        if self == home:
            raise PermissionError(13, "Permission denied", str(self))
        real_mkdir(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "mkdir", read_only_parent)
    code = cli.main(command)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err == (
        f"picortex: PICORTEX_HOME {home} cannot be created or used (Permission denied); set "
        "PICORTEX_HOME to a folder you can write\n"
    )


def test_a_broken_config_does_not_stop_the_reading_commands(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home.mkdir()
    (home / "picortex.toml").write_text("wakeword = [unclosed\n", encoding="utf-8")
    line = {"ts": "2026-12-01T10:00:00Z", "event": "decision", "outcome": "ignore"}
    (home / "actions.jsonl").write_bytes(orjson.dumps(line) + b"\n")

    assert cli.main(["log"]) == 0
    captured = capsys.readouterr()
    assert "decision" in captured.out
    assert "picortex.toml: not valid TOML" in captured.err
    assert "reading with the defaults" in captured.err

    assert cli.main(["errors", "--json"]) == 0
    captured = capsys.readouterr()
    assert orjson.loads(captured.out) == []
    assert "not valid TOML" in captured.err

    assert cli.main(["status"]) == 1
    captured = capsys.readouterr()
    assert "is not running" in captured.out
    assert "not valid TOML" in captured.err

    # Commands that act on the configuration still refuse it.
    assert cli.main(["config", "get"]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_a_second_run_on_the_same_home_exits_2_naming_the_first(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "tok")
    home.mkdir()
    with hold_home(home):
        assert running_pid(home) == os.getpid()
        code = cli.main(["run"])
        err = capsys.readouterr().err
        assert cli.main(["status"]) == 1
        status = capsys.readouterr().out
    assert code == 2
    assert err == (
        f"picortex: picortex is already running on {home} (pid {os.getpid()}); stop it first, "
        "or set PICORTEX_HOME to another folder\n"
    )
    assert f"pid {os.getpid()}" in status
    # Released on exit: nobody holds the home any more.
    assert running_pid(home) is None


def test_status_shows_warnings() -> None:
    lines = format_status({"warnings": ["agents.yaml: unknown key persona: is ignored"]})
    assert "warning:           agents.yaml: unknown key persona: is ignored" in lines


async def test_an_unknown_agents_key_is_warned_at_start_and_shown_in_status(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from picortex.app import Bot
    from picortex.config import load_settings

    home.mkdir()
    (home / "agents.yaml").write_text("persona:\n  - id: sleep\n", encoding="utf-8")
    settings = load_settings({"PICORTEX_HOME": str(home), "DISCORD_BOT_TOKEN": "tok"})
    with caplog.at_level("WARNING"):
        bot = Bot(settings)
    try:
        warning = f"{home / 'agents.yaml'}: unknown key persona: is ignored"
        assert any(warning in r.getMessage() for r in caplog.records)
        snapshot = bot.snapshot()
    finally:
        bot.store.close()
    assert [w for w in snapshot["warnings"] if warning in w]
