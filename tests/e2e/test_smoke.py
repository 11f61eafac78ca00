"""The bot answers a mention from its owner through the simulator."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time


async def test_owner_mention_is_answered(tmp_path: Path) -> None:
    async with running_bot(tmp_path) as run:
        run.say(run.world.general_id, run.world.alice_id, f"{run.mention()} hello there?")
        replies = await run.sim.wait_bot_messages(1, run.world.general_id)
        assert "hello there" in replies[0]["content"]
        assert replies[0]["message_reference"]["message_id"]
