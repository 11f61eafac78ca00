"""`picortex status` and `picortex config set` against a running bot (SPEC 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.harness import running_bot

pytestmark = pytest.mark.virtual_time


async def test_config_set_from_the_cli_reaches_the_running_bot(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        # A real `python -m picortex` child: the entry point, and another process's commit.
        done = await run.cli("config", "set", "wakeword", "!zz", process=True)
        assert done.returncode == 0, done.stderr
        # Another process's commit reaches the bot's memory within the store's poll.
        await run.wait_commit_seen(lambda: run.bot.source.refresh().wakeword == "!zz")
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} !ZZ help")
        await run.wait_until(lambda: bool(run.replies_to(int(msg["id"]))))
        assert "Commands (start with `!zz `)" in run.replies_to(int(msg["id"]))[0]["content"]
        # The response policy too: with `dm` as the default, answers go by DM.
        done = await run.cli("config", "set", "response_policy.default_mode", "dm")
        assert done.returncode == 0, done.stderr
        await run.wait_commit_seen(
            lambda: run.bot.source.refresh().response_policy.default_mode == "dm"
        )
        ask = run.say(w.general_id, w.alice_id, f"{run.mention()} where do you answer?")
        dm = run.dm_id(w.alice_id)
        replies = await run.sim.wait_bot_messages(1, dm)
        assert "where do you answer?" in replies[0]["content"]
        assert run.replies_to(int(ask["id"])) == []
        # The model tiers too: the LLM actor calls the new model from the next message on.
        done = await run.cli("config", "set", "models.general", "claude-test-9")
        assert done.returncode == 0, done.stderr
        await run.wait_commit_seen(
            lambda: run.bot.source.refresh().models.general == "claude-test-9"
        )
        run.say(dm, w.alice_id, "which model now?")
        await run.sim.wait_bot_messages(2, dm)
        assert run.sim.model.calls[-1].model == "claude-test-9"
        # And a bad value is refused by the CLI with one sentence, leaving the bot as it was.
        bad = await run.cli("config", "set", "continuation_seconds", "soon")
        assert bad.returncode == 2
        assert "continuation_seconds" in bad.stderr
        assert run.bot.source.refresh().continuation_seconds == 10
