"""Applying a command's changes: what `forget` deleted, and a store that fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from picortex.actors.command_changes import FORGET_FAILED, apply_changes
from picortex.actors.pipeline import SettingsSource
from picortex.config import Settings
from picortex.core import commands as cmds
from picortex.core.trust import Tier
from picortex.store import AdminStore, Store

BOB = 2


@pytest.fixture
def store(tmp_path: Path) -> Iterator[AdminStore]:
    with Store.open(tmp_path / "picortex.db") as db:
        db.add_memory_message(1, 10, None, BOB, "bob", "insomnia", 1.0)
        db.add_observation("sleep", 1, 10, None, "insomnia", "insomnia", 1.0, BOB)
    with AdminStore.open(tmp_path / "picortex.db") as opened:
        yield opened


async def _forget(store: AdminStore, tmp_path: Path) -> tuple[cmds.CommandResult, str]:
    settings = Settings(home=tmp_path, owner_id=1)
    result = cmds.execute(
        cmds.Forget((BOB,)),
        Tier.ADMIN,
        cmds.CommandState(
            owner_id=1,
            trust={},
            wakeword="!s",
            attention_mode="always",
            prompt_path="",
            poll_enabled=False,
            poll_seconds=1.0,
            config_values={},
            parse_config_value=lambda key, value: value,
            format_config_value=str,
            requester_id=1,
        ),
    )
    applied = await apply_changes(
        result.changes,
        store=store,
        settings=SettingsSource(settings, store),
        home=tmp_path,
        chat_id=None,
        now=0.0,
    )
    return result, applied.reply(result, 1)


async def test_forget_counts_what_it_deleted(store: AdminStore, tmp_path: Path) -> None:
    _, reply = await _forget(store, tmp_path)
    assert reply == f"Forgot what <@{BOB}> said: 1 message and 1 observation deleted."
    with Store.open(tmp_path / "picortex.db") as db:
        assert db.search_memory("insomnia", 0.0, None) == []


async def test_a_store_that_fails_is_one_sentence_not_a_crash(
    store: AdminStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(user_id: int) -> tuple[int, int]:
        raise OSError("disk I/O error")

    monkeypatch.setattr(store, "forget_user", broken)
    result, reply = await _forget(store, tmp_path)
    assert result.changes == (cmds.ForgetUser(BOB),)
    assert reply == FORGET_FAILED
