"""Failed invocations end to end (SPEC 9): logged, stored, redacted, not retried; bot goes on."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from picortex.actors.pipeline import AnswerDeadlines
from picortex.sim.model import ModelReply
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time

# Secret shapes a model error could echo back: none may reach the log or the database.
DISCORD_TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTA.GaBcDe.abcdefghijklmnopqrstuvwxyz0123456789AB"
API_KEY = "sk-ant-api03-abcdefghijklmnopqrstuvwxyz0123456789"
TOML = "continuation_seconds = 0\n"


async def _errors_json(run: Running) -> list[dict[str, object]]:
    done = await run.cli("errors", "--json")
    assert done.returncode == 0, done.stderr
    rows = orjson.loads(done.stdout)
    assert isinstance(rows, list)
    return rows


async def _carries_on(run: Running) -> None:
    """A later trigger in the same channel is answered."""
    ok = run.say(run.world.general_id, run.world.alice_id, f"{run.mention()} still with me?")
    await run.wait_until(lambda: bool(run.replies_to(int(ok["id"]))))


async def test_model_error_is_recorded_redacted_and_not_retried(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=TOML) as run:
        w = run.world
        run.sim.model.script(
            ModelReply(status=500, error_message=f"upstream broke with {DISCORD_TOKEN} {API_KEY}")
        )
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} this will fail")
        failed = await run.wait_event("cortex.invocation_failed")
        assert failed[0]["stage"] == "generate"
        assert failed[0]["signal_id"] == msg["id"]
        assert failed[0]["workspace"] == str(w.guild_id)
        assert "InternalServerError" in failed[0]["error"]
        # No retry: exactly one call, and no answer was posted for the failed trigger.
        assert len(run.sim.model.calls) == 1
        llm = await run.wait_event("llm")
        assert llm[0]["outcome"] == "error"
        await _carries_on(run)
        assert run.replies_to(int(msg["id"])) == []
        rows = await _errors_json(run)
        assert len(rows) == 1
        row = rows[0]
        assert row["stage"] == "generate"
        assert row["signal_id"] == msg["id"]
        assert row["workspace_id"] == str(w.guild_id)
        assert row["resolved_at"] is None
        assert "[redacted]" in str(row["error_message"])
        for text in (str(row["error_message"]), str(row["stack_trace"])):
            assert DISCORD_TOKEN not in text and API_KEY not in text
        log = (run.home / "actions.jsonl").read_text()
        assert DISCORD_TOKEN not in log and API_KEY not in log
        assert "sk-ant-test-key" not in log


async def test_model_timeout_is_a_generate_failure(tmp_path: Path) -> None:
    async with running_bot(
        tmp_path, toml=TOML, deadlines=AnswerDeadlines(answer_timeout=0.3)
    ) as run:
        w = run.world
        run.sim.model.script(ModelReply(text="too late", delay=2.0))
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} think hard")
        failed = await run.wait_event("cortex.invocation_failed")
        assert failed[0]["stage"] == "generate"
        assert "no answer within 0.3 s" in failed[0]["error"]
        assert (await run.wait_event("llm"))[0]["outcome"] == "timeout"
        await _carries_on(run)
        assert run.replies_to(int(msg["id"])) == []
        assert len(run.sim.model.calls) == 2  # the timed-out call and the next question
        rows = await _errors_json(run)
        assert [(r["stage"], r["signal_id"]) for r in rows] == [("generate", msg["id"])]


async def test_post_failure_is_a_post_failure(tmp_path: Path) -> None:
    async with running_bot(tmp_path, toml=TOML) as run:
        w = run.world
        run.sim.inject_rest_error("POST", "/channels/*/messages", 403, code=50013)
        msg = run.say(w.general_id, w.alice_id, f"{run.mention()} answer me")
        failed = await run.wait_event("cortex.invocation_failed")
        assert failed[0]["stage"] == "post"
        assert failed[0]["signal_id"] == msg["id"]
        assert (await run.wait_event("reply"))[0]["result"] == "failed"
        await _carries_on(run)
        assert run.replies_to(int(msg["id"])) == []
        assert len(run.sim.model.calls) == 2  # the answer was generated once, not again
        rows = await _errors_json(run)
        assert [(r["stage"], r["signal_id"]) for r in rows] == [("post", msg["id"])]
        assert "403" in str(rows[0]["error_message"])
        unresolved = await run.cli("errors", "--unresolved")
        assert unresolved.returncode == 0
        assert "post" in unresolved.stdout


async def test_the_configured_key_and_token_are_redacted_whatever_their_shape(
    tmp_path: Path,
) -> None:
    from urllib.parse import quote

    gateway_key = "gw-live/Key+of=another-shape-0042"
    env = {"ANTHROPIC_API_KEY": gateway_key}
    async with running_bot(tmp_path, toml=TOML, env=env) as run:
        w = run.world
        token = run.sim.token
        echoed = f"invalid x-api-key {gateway_key} ({quote(gateway_key, safe='')}), token {token}"
        run.sim.model.script(ModelReply(status=401, error_message=echoed))
        run.say(w.general_id, w.alice_id, f"{run.mention()} this will fail")
        await run.wait_event("cortex.invocation_failed")
        rows = await _errors_json(run)
        stored = orjson.dumps(rows).decode()
        log = (run.home / "actions.jsonl").read_text()
        for text in (stored, log):
            assert "[redacted]" in text
            assert gateway_key not in text
            assert quote(gateway_key, safe="") not in text
        printed = await run.cli("log", "-n", "50")
        assert gateway_key not in printed.stdout + printed.stderr
