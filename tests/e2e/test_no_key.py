"""Without ANTHROPIC_API_KEY the bot runs: commands and trust work, answers are skipped (SPEC 9)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time


async def test_without_a_key_commands_work_and_answers_are_skipped(tmp_path: Path) -> None:
    async with running_bot(tmp_path, with_key=False) as run:
        w = run.world
        ask = run.say(w.general_id, w.alice_id, f"{run.mention()} anyone home?")
        decision = await run.wait_event("decision", message_id=int(ask["id"]), outcome="skip")
        assert "ANTHROPIC_API_KEY" in decision[0]["reason"]
        assert (await run.wait_event("llm"))[0]["outcome"] == "no_key"
        help_ = run.say(w.general_id, w.alice_id, f"{run.mention()} !s help")
        await run.wait_until(lambda: bool(run.replies_to(int(help_["id"]))))
        assert run.replies_to(int(ask["id"])) == []
        assert run.sim.model.calls == []
        assert run.events("cortex.invocation_failed") == []
