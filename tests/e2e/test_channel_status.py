"""`picortex status` shows a channel's queue: messages wait while a decision is being made."""

from __future__ import annotations

from pathlib import Path

import pytest

from picortex.actors import router as router_mod
from picortex.sim.model import ModelReply
from tests.e2e.harness import run_cli, running_bot

pytestmark = pytest.mark.virtual_time(rate=1.0)

DISCRIMINATE_NO = '{"should_respond": false, "reason": "chatter between friends"}'


async def test_status_shows_messages_queued_behind_a_slow_decision(tmp_path: Path) -> None:
    toml = "continuation_seconds = 0\n"
    env = {"PICORTEX_FAULT_INJECT": "mailbox:CRASH"}
    async with running_bot(tmp_path, toml=toml, env=env, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.say(w.random_id, w.alice_id, f"{run.mention()} CRASH here")
        await run.wait_event("supervisor", action="crash")
        run.bot.store.set_attention_mode(w.general_id, "discriminate", 0.0)
        # Answers never hold up decisions; a slow discriminator verdict (a decision) does.
        run.sim.model.script("the answer", ModelReply(text=DISCRIMINATE_NO, delay=3.0))
        first = run.say(w.general_id, w.alice_id, f"{run.mention()} the first question")
        await run.wait_until(lambda: bool(run.replies_to(int(first["id"]))))
        for n in range(3):
            run.say(w.general_id, w.bob_id, f"waiting {n}")
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
        assert "last triggers (1):" in out
        assert "alice in #general: <@" in out and "the first question" in out
        assert "CRASH" not in out.split("last triggers")[1]  # a dropped message is no trigger
    stopped = await run_cli(tmp_path / "home", "status")
    assert stopped.returncode == 1
    assert stopped.stdout.startswith("picortex is not running")
    assert "picortex run" in stopped.stdout


async def test_a_full_mailbox_behind_a_slow_decision_counts_and_logs_the_overflow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(router_mod, "CHANNEL_MAILBOX", 2)
    toml = "continuation_seconds = 0\n"
    async with running_bot(tmp_path, toml=toml, relaxed_limits=True) as run:
        w = run.world
        run.bot.store.set_tier(w.bob_id, "user")
        run.bot.store.set_attention_mode(w.general_id, "discriminate", 0.0)
        run.sim.model.script(ModelReply(text=DISCRIMINATE_NO, delay=1.0))
        run.say(w.general_id, w.bob_id, "hold the line")
        await run.wait_until(lambda: len(run.sim.model.calls) == 1)
        # Bob's message in hand (its verdict is slow), two queued, the rest refused.
        sent = [run.say(w.general_id, w.alice_id, f"{run.mention()} q{n}") for n in range(4)]
        refused = await run.wait_event("error", count=2, scope="mailbox")
        assert [e["message_id"] for e in refused] == [m["id"] for m in sent[2:]]
        assert run.bot.router.mailbox_overflows() == 2
        await run.wait_until(lambda: all(run.replies_to(int(m["id"])) for m in sent[:2]))
        assert [run.replies_to(int(m["id"])) for m in sent[2:]] == [[], []]
