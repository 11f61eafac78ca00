"""Applying a command's changes: what `forget` deleted, and a store that fails."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from picortex.actors.command_changes import (
    FORGET_FAILED,
    NOT_SAVED_YET,
    PROMPT_FAILED,
    apply_changes,
)
from picortex.actors.pipeline import SettingsSource
from picortex.config import Settings
from picortex.core import commands as cmds
from picortex.core.chat_settings import ChatSettingChange
from picortex.core.trust import Tier
from picortex.errors import DatabaseUnreachable
from picortex.store import AdminStore, Store
from picortex.store.chathome import (
    AGENT_PROMPT_RELPATH,
    AGENT_PROMPT_RESET,
    AGENT_PROMPT_SET,
    ChatHome,
)

BOB = 2
CHAT = 1_234_567_890_123_456_789


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


# ----- the chat's own settings -----------------------------------------------------------------


async def _apply(store: AdminStore, home: Path, *changes: ChatSettingChange) -> str:
    applied = await apply_changes(
        changes,
        store=store,
        settings=SettingsSource(Settings(home=home, owner_id=1), store),
        home=home,
        chat_id=CHAT,
        now=5.0,
    )
    return applied.reply(cmds.CommandResult("done", changes), 1)


async def test_the_chats_own_settings_are_stored(store: AdminStore, tmp_path: Path) -> None:
    reply = await _apply(
        store,
        tmp_path,
        ChatSettingChange("prompt", "Speak like a pirate."),
        ChatSettingChange("model", "claude-haiku-9"),
        ChatSettingChange("threshold", 0.7),
    )
    assert reply == "done"
    home = ChatHome(tmp_path, str(CHAT))
    assert home.read_agent_prompt() == "Speak like a pirate."
    own = store.get_chat_config(CHAT)
    assert own is not None
    assert (own.discriminator_model, own.discriminator_threshold) == ("claude-haiku-9", 0.7)
    await _apply(store, tmp_path, ChatSettingChange("model", None))
    own = store.get_chat_config(CHAT)
    assert own is not None
    assert (own.discriminator_model, own.discriminator_threshold) == (None, 0.7)
    await _apply(store, tmp_path, ChatSettingChange("prompt", None))
    assert home.read_agent_prompt() is None
    assert [v.message for v, _ in home.history_with_diffs(5, AGENT_PROMPT_RELPATH)] == [
        AGENT_PROMPT_RESET,
        AGENT_PROMPT_SET,
    ]


async def test_a_prompt_that_cannot_be_saved_is_one_sentence(
    store: AdminStore, tmp_path: Path
) -> None:
    (tmp_path / "chats").write_text("not a directory", encoding="utf-8")
    reply = await _apply(store, tmp_path, ChatSettingChange("prompt", "Be brief."))
    assert reply == PROMPT_FAILED


async def test_a_change_made_while_the_database_is_unreachable_says_so(
    store: AdminStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def unreachable() -> None:
        raise DatabaseUnreachable("PostgreSQL picortex on db cannot be reached (gone)")

    monkeypatch.setattr(store, "flush", unreachable)
    reply = await _apply(store, tmp_path, ChatSettingChange("model", "claude-haiku-9"))
    assert reply == NOT_SAVED_YET
    assert store.get_chat_config(CHAT) is not None  # in force here meanwhile
