"""`picortex status` and `picortex config set` against a running bot (SPEC 2)."""

from __future__ import annotations

from pathlib import Path

from picortex.sim.model import ModelReply
from tests.e2e.harness import run_cli, running_bot


async def test_status_reports_the_running_bot(tmp_path: Path) -> None:
    toml = "continuation_seconds = 0\n"
    env = {"PICORTEX_FAULT_INJECT": "mailbox:CRASH"}
    async with running_bot(tmp_path, toml=toml, env=env, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.say(w.random_id, w.alice_id, f"{run.mention()} CRASH here")
        await run.wait_event("supervisor", action="crash")
        # A slow answer in #general keeps the next messages queued in its mailbox.
        run.sim.model.script(ModelReply(text="slowly", delay=3.0))
        run.say(w.general_id, w.alice_id, f"{run.mention()} the first question")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        for n in range(3):
            run.say(w.general_id, w.bob_id, f"{run.mention()} waiting {n}")
        await run.wait_until(lambda: any(m["depth"] == 2 for m in run.bot.router.mailbox_depths()))
        done = await run.cli("status")
        assert done.returncode == 0, done.stderr
        out = done.stdout
        status = run.bot.gateway.status()
        assert "picortex is running (pid " in out
        assert "connection:        ready (shard 0/1)" in out
        assert f"session:           {status.session_id}" in out
        assert "last seq:          " in out and "last seq:          -" not in out
        assert "2 channel actors, 2 messages queued, 0 refused (full)" in out
        assert f"#general ({w.general_id}): 2 queued" in out
        assert f"actor restarts:    channel-{w.random_id} 1" in out
        # bob's messages wait behind the slow answer: not decided yet, so no triggers yet.
        assert "last triggers (1):" in out
        assert "alice in #general: <@" in out and "the first question" in out
        assert "CRASH" not in out.split("last triggers")[1]  # a dropped message is no trigger
    # Stopped: one clear sentence and a non-zero exit.
    stopped = await run_cli(tmp_path / "home", "status")
    assert stopped.returncode == 1
    assert stopped.stdout.startswith("picortex is not running")
    assert "picortex run" in stopped.stdout


async def test_config_set_from_the_cli_reaches_the_running_bot(tmp_path: Path) -> None:
    async with running_bot(tmp_path, relaxed_limits=True) as run:
        w = run.world
        done = await run.cli("config", "set", "wakeword", "!zz")
        assert done.returncode == 0, done.stderr
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} !ZZ help")
        await run.wait_until(lambda: bool(run.replies_to(int(msg["id"]))))
        assert "Commands (start with `!zz `)" in run.replies_to(int(msg["id"]))[0]["content"]
        # The response policy too: with `dm` as the default, answers go by DM.
        done = await run.cli("config", "set", "response_policy.default_mode", "dm")
        assert done.returncode == 0, done.stderr
        ask = run.say(w.general_id, w.alice_id, f"{run.mention()} where do you answer?")
        dm = run.dm_id(w.alice_id)
        replies = await run.sim.wait_bot_messages(1, dm)
        assert "where do you answer?" in replies[0]["content"]
        assert run.replies_to(int(ask["id"])) == []
        # The model tiers too: the LLM actor calls the new model from the next message on.
        done = await run.cli("config", "set", "models.general", "claude-test-9")
        assert done.returncode == 0, done.stderr
        run.say(dm, w.alice_id, "which model now?")
        await run.sim.wait_bot_messages(2, dm)
        assert run.sim.model.calls[-1].model == "claude-test-9"
        # And a bad value is refused by the CLI with one sentence, leaving the bot as it was.
        bad = await run.cli("config", "set", "continuation_seconds", "soon")
        assert bad.returncode == 2
        assert "continuation_seconds" in bad.stderr
        assert run.bot.source.refresh().continuation_seconds == 10
