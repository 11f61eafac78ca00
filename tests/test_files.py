"""Private files: the home 0700 and everything the bot writes 0600, whatever the umask."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from picortex.actors.action_log import ActionLog
from picortex.app import Bot
from picortex.config import load_settings
from picortex.files import open_private, private_dir
from picortex.store import Store
from picortex.store.cache_files import write_atomic


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o000, 0o022, 0o277])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def test_private_dir_and_file_modes_ignore_the_umask(tmp_path: Path, umask: int) -> None:
    home = private_dir(tmp_path / "a" / "home")
    assert mode(home) == 0o700
    fd = open_private(home / "f", os.O_WRONLY)
    os.close(fd)
    assert mode(home / "f") == 0o600


def test_an_existing_open_home_is_closed_to_others(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    private_dir(home)
    assert mode(home) == 0o700


def test_database_with_wal_and_shm_is_0600(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "picortex.db"
    with Store.open(path) as store:
        store.set_tier(5, "user")
        for name in ("picortex.db", "picortex.db-wal", "picortex.db-shm"):
            assert mode(tmp_path / name) == 0o600, name


def test_an_old_world_readable_database_is_made_private(tmp_path: Path) -> None:
    path = tmp_path / "picortex.db"
    Store.open(path).close()
    os.chmod(path, 0o644)
    with Store.open(path):
        assert mode(path) == 0o600


def test_action_log_rotated_and_torn_files_are_0600(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "actions.jsonl"
    path.write_bytes(b'{"ts": "x", "event": "a"}\n{"torn')
    os.chmod(path, 0o644)
    log = ActionLog(path, max_bytes=200)
    for i in range(20):
        log.emit("test", n=i, text="x" * 40)
    log.flush()
    written = sorted(tmp_path.iterdir())
    assert {p.name for p in written} >= {"actions.jsonl", "actions.jsonl.1", "actions.jsonl.torn"}
    for p in written:
        assert mode(p) == 0o600, p.name


def test_cache_files_are_0600(tmp_path: Path, umask: int) -> None:
    target = tmp_path / "123.json"
    write_atomic(target, b"{}")
    assert mode(target) == 0o600


def test_bot_home_and_files_are_private(tmp_path: Path, umask: int) -> None:
    home = tmp_path / "home"
    settings = load_settings(
        {"PICORTEX_HOME": str(home), "DISCORD_BOT_TOKEN": "token-for-the-file-test"}
    )
    bot = Bot(settings)
    try:
        bot.events.emit("test")
        bot.events.flush()
    finally:
        bot.store.close()
    assert mode(home) == 0o700
    for p in home.iterdir():
        if p.is_file():
            assert mode(p) == 0o600, p.name
