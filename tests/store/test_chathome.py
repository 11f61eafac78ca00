"""Chat homes: the git repository holding each chat's discriminator prompt."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from picortex.store.chathome import (
    AGENT_PROMPT_RELPATH,
    HAND_EDIT_MESSAGE,
    PROMPT_RELPATH,
    RESTORE_MESSAGE,
    SEED_MESSAGE,
    ChatHome,
    ChatHomeError,
    default_prompt_template,
)


@pytest.fixture(autouse=True)
def no_global_git_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with no git identity, and GIT_* variables that would point git elsewhere."""
    monkeypatch.setenv("HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nohome"))
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.delenv("GIT_AUTHOR_NAME", raising=False)
    monkeypatch.delenv("EMAIL", raising=False)


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}


def messages(home: ChatHome) -> list[str]:
    return [v.message for v in home.history()]


def test_default_template_ships_in_the_package() -> None:
    text = default_prompt_template()
    assert "{{history}}" in text
    assert '"should_respond"' in text


def test_ensure_creates_a_seeded_repository(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "123456789")
    assert home.history() == []
    assert not home.exists()
    home.ensure()
    assert home.root == tmp_path / "chats" / "123456789"
    assert (home.root / ".git").is_dir()
    assert home.prompt_path == home.root / ".picortex" / "prompts" / "discriminator.md"
    assert home.prompt_path.read_text(encoding="utf-8") == default_prompt_template()
    versions = home.history()
    assert [v.message for v in versions] == [SEED_MESSAGE]
    assert len(versions[0].commit) == 40
    assert datetime.fromisoformat(versions[0].date).tzinfo is not None
    assert not (tmp_path / "elsewhere").exists()


def test_ensure_is_idempotent(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "1")
    home.ensure()
    home.ensure()
    ChatHome(tmp_path, "1").ensure()
    assert messages(home) == [SEED_MESSAGE]


def test_read_prompt_picks_up_a_hand_edit(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "42")
    assert home.read_prompt() == default_prompt_template()
    home.prompt_path.write_text("Edited by hand {{message}}\n", encoding="utf-8")
    assert home.read_prompt() == "Edited by hand {{message}}\n"
    assert messages(home) == [HAND_EDIT_MESSAGE, SEED_MESSAGE]
    home.read_prompt()
    assert messages(home) == [HAND_EDIT_MESSAGE, SEED_MESSAGE]


def test_write_prompt_commits_and_keeps_a_pending_hand_edit(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "42")
    assert home.write_prompt("v1 {{message}}", "attention: prompt set by alice")
    assert not home.write_prompt("v1 {{message}}", "no change")
    home.prompt_path.write_text("hand {{message}}", encoding="utf-8")
    assert home.write_prompt("v2 {{message}}", "config set by owner")
    assert home.read_prompt() == "v2 {{message}}"
    assert messages(home) == [
        "config set by owner",
        HAND_EDIT_MESSAGE,
        "attention: prompt set by alice",
        SEED_MESSAGE,
    ]
    log = subprocess.run(
        ["git", "-C", str(home.root), "show", "--format=%an <%ae>", "-s", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
        env=clean_env(),
    )
    assert log.stdout.strip() == "picortex <picortex@localhost>"


def test_a_deleted_prompt_is_restored_and_committed(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "7")
    home.write_prompt("custom {{message}}", "custom")
    home.prompt_path.unlink()
    assert home.read_prompt() == default_prompt_template()
    assert messages(home)[0] == RESTORE_MESSAGE


def test_a_home_inside_another_repository_is_its_own(tmp_path: Path) -> None:
    subprocess.run(
        ["git", "init", "-q", str(tmp_path)],
        check=True,
        env=clean_env(),
    )
    home = ChatHome(tmp_path, "9")
    home.ensure()
    assert (home.root / ".git").is_dir()
    assert messages(home) == [SEED_MESSAGE]


@pytest.mark.parametrize("chat_id", ["", "../x", "a/b", ".git", "x" * 65])
def test_unsafe_chat_ids_are_refused(tmp_path: Path, chat_id: str) -> None:
    with pytest.raises(ChatHomeError, match="is not a Discord id"):
        ChatHome(tmp_path, chat_id)


def test_git_failure_is_one_clear_sentence(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "5")
    home.root.mkdir(parents=True)
    (home.root / ".git").write_text("not a repository", encoding="utf-8")
    with pytest.raises(ChatHomeError, match=r"^git rev-list failed in .*5: "):
        home.ensure()


def test_missing_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(ChatHomeError, match="git is not installed or not on PATH"):
        ChatHome(tmp_path, "5").ensure()


def test_git_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(*args: Any, **kwargs: Any) -> None:
        raise subprocess.TimeoutExpired(cmd="git", timeout=kwargs["timeout"])

    monkeypatch.setattr(subprocess, "run", hang)
    with pytest.raises(ChatHomeError, match=r"^git init in .* took longer than 15 s$"):
        ChatHome(tmp_path, "5").ensure()


def test_unreadable_prompt(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "8")
    home.ensure()
    home.prompt_path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ChatHomeError, match=r"discriminator\.md is not UTF-8 text"):
        home.read_prompt()


def _git_commands(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Every git command run from now on (its arguments after the `-c` options)."""
    seen: list[list[str]] = []
    real = subprocess.run

    def run(command: list[str], *args: Any, **kwargs: Any) -> Any:
        skip = {i for i, arg in enumerate(command) if arg == "-c"}
        seen.append(
            [a for i, a in enumerate(command[1:], 1) if i not in skip | {j + 1 for j in skip}]
        )
        return real(command, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    return seen


def _age(path: Path) -> None:
    """As if the file was last written an hour ago."""
    then = time.time() - 3600
    os.utime(path, (then, then))


def test_a_home_is_made_without_sample_hooks_or_config_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = _git_commands(monkeypatch)
    home = ChatHome(tmp_path, "11")
    home.ensure()
    home.write_prompt("v1 {{message}}", "set")
    home.history()
    assert list((home.root / ".git").rglob("*.sample")) == []
    assert not (home.root / ".git" / "hooks").exists()
    assert [c for c in commands if c[0] == "config"] == []
    assert messages(home) == ["set", SEED_MESSAGE]


def test_sample_hooks_of_an_older_home_are_dropped(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "12")
    home.root.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(home.root)], check=True, env=clean_env())
    assert list((home.root / ".git" / "hooks").glob("*.sample"))
    home.ensure()
    assert list((home.root / ".git" / "hooks").glob("*.sample")) == []
    assert messages(home) == [SEED_MESSAGE]


def test_an_unchanged_prompt_is_read_without_running_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = ChatHome(tmp_path, "13")
    home.ensure()
    _age(home.prompt_path)
    assert home.read_prompt() == default_prompt_template()  # read and checked once
    commands = _git_commands(monkeypatch)
    for _ in range(3):  # each classification makes its own ChatHome
        assert ChatHome(tmp_path, "13").read_prompt() == default_prompt_template()
    assert commands == []
    # A hand edit changes the file's stamp: it is read, and committed, at once.
    home.prompt_path.write_text("by hand {{message}}\n", encoding="utf-8")
    _age(home.prompt_path)
    assert ChatHome(tmp_path, "13").read_prompt() == "by hand {{message}}\n"
    assert commands
    assert messages(home)[0] == HAND_EDIT_MESSAGE


def test_a_just_written_prompt_is_checked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A write in the same clock tick could keep size and times: a fresh file is not trusted.
    home = ChatHome(tmp_path, "14")
    home.ensure()
    home.read_prompt()
    commands = _git_commands(monkeypatch)
    home.read_prompt()
    assert ["status", "--porcelain", "--", PROMPT_RELPATH] in commands


def test_remove_deletes_the_home(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "15")
    home.write_prompt("custom {{message}}", "custom")
    _age(home.prompt_path)
    home.read_prompt()
    assert home.remove()
    assert not home.root.exists()
    assert not home.remove()
    assert ChatHome(tmp_path, "15").read_prompt() == default_prompt_template()


# ----- the chat's own agent prompt (SPEC 18) --------------------------------------------------


def _agent_log(home: ChatHome) -> list[str]:
    return [v.message for v, _ in home.history_with_diffs(10, AGENT_PROMPT_RELPATH)]


def test_a_chat_without_its_own_agent_prompt_reads_none_without_git(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = _git_commands(monkeypatch)
    assert ChatHome(tmp_path, "20").read_agent_prompt() is None
    assert commands == []
    assert not (tmp_path / "chats" / "20").exists()  # reading makes no home


def test_the_agent_prompt_is_written_reset_and_kept_in_history(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "21")
    assert home.write_agent_prompt("Speak like a pirate.", "agent prompt set in chat")
    assert home.agent_prompt_path == home.root / ".picortex/prompts/agent.md"
    assert home.read_agent_prompt() == "Speak like a pirate."
    assert not home.write_agent_prompt("Speak like a pirate.", "again")  # nothing changed
    assert home.write_agent_prompt("Answer in French.", "changed in the panel")
    assert home.reset_agent_prompt("agent prompt reset")
    assert home.read_agent_prompt() is None
    assert not home.reset_agent_prompt("twice")
    history = home.history_with_diffs(10, AGENT_PROMPT_RELPATH)
    assert [v.message for v, _ in history] == [
        "agent prompt reset",
        "changed in the panel",
        "agent prompt set in chat",
    ]
    assert "-Answer in French." in history[0][1]
    assert "+Answer in French." in history[1][1] and "-Speak like a pirate." in history[1][1]
    # The discriminator prompt's history is its own.
    assert messages(home) == [SEED_MESSAGE]


def test_a_hand_edit_of_the_agent_prompt_is_committed(tmp_path: Path) -> None:
    home = ChatHome(tmp_path, "22")
    home.write_agent_prompt("v1", "set")
    home.agent_prompt_path.write_text("by hand", encoding="utf-8")
    assert home.read_agent_prompt() == "by hand"
    assert _agent_log(home) == [HAND_EDIT_MESSAGE, "set"]
