"""A chat's own agent prompt, read for each answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from picortex.actors.agent_voice import chat_prompt
from picortex.store.chathome import ChatHome

CHAT = 81384788765712384


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """What was handed to a worker thread (and still run there)."""
    handed: list[object] = []
    run_sync = trio.to_thread.run_sync

    async def recorded(fn: Any, *args: Any, **kwargs: Any) -> Any:
        handed.append(fn)
        return await run_sync(fn, *args, **kwargs)

    monkeypatch.setattr(trio.to_thread, "run_sync", recorded)
    return handed


async def test_a_chat_without_a_prompt_of_its_own_costs_no_thread(
    tmp_path: Path, threads: list[object]
) -> None:
    assert await chat_prompt(tmp_path, CHAT) is None
    assert threads == []


async def test_a_chats_own_prompt_is_read_on_a_thread(
    tmp_path: Path, threads: list[object]
) -> None:
    ChatHome(tmp_path, str(CHAT)).write_agent_prompt("Answer in haiku.", "owner's voice")
    assert await chat_prompt(tmp_path, CHAT) == "Answer in haiku."
    assert len(threads) == 1
