"""The request picks its model, and composting pauses what keeps failing (SPEC 18), end to
end against the simulator."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from picortex.mcp import Tools
from picortex.sim.model import ModelReply
from tests.e2e.harness import Running, running_bot

pytestmark = pytest.mark.virtual_time

AGENTS = """
personas:
  - id: sleep
    name: Sleep Coach
    description: Helps people who sleep badly.
    domain_triggers: [sleep, slept, insomnia]
"""
TRIAGE, GENERAL, COMPLEX = "claude-haiku-5-5", "claude-sonnet-5-5", "claude-opus-5-5"


def _models(run: Running) -> list[str | None]:
    return [call.model for call in run.sim.model.calls]


async def test_auto_route_sends_a_multi_step_request_to_complex_and_says_why(
    tmp_path: Path,
) -> None:
    toml = 'continuation_seconds = 0\n[models]\nroute = "auto"\n'
    async with running_bot(tmp_path, toml=toml) as run:
        w = run.world
        short = run.say(w.general_id, w.alice_id, f"{run.mention()} hi there")
        await run.wait_until(lambda: bool(run.replies_to(int(short["id"]))))
        assert _models(run) == [GENERAL]  # short and single-step: no route call

        hard = run.say(
            w.general_id, w.alice_id, f"{run.mention()} list the steps to bake bread, then plan"
        )
        await run.wait_until(lambda: bool(run.replies_to(int(hard["id"]))))
        assert _models(run) == [GENERAL, TRIAGE, COMPLEX]
        routes = await run.wait_event("decision", 2, outcome="route")
        assert [(d["message_id"], d["tier"], d["routed_by"]) for d in routes] == [
            (short["id"], "general", "rule"),
            (hard["id"], "complex", "model"),
        ]
        assert routes[1]["reason"] == "complex: (offline model) asks for steps"
        assert routes[1]["model"] == COMPLEX
        route_calls = [e for e in run.events("llm") if e["stage"] == "route"]
        assert len(route_calls) == 1 and route_calls[0]["cost_usd"] < 0.001

        # An unusable answer leaves the request on `general`.
        run.sim.model.script("Opus, definitely")
        third = run.say(w.general_id, w.alice_id, f"{run.mention()} first explain, then compare")
        await run.wait_until(lambda: bool(run.replies_to(int(third["id"]))))
        assert _models(run)[3:] == [TRIAGE, GENERAL]
        last = (await run.wait_event("decision", 3, outcome="route"))[-1]
        assert last["reason"] == "general: route answer unusable"


async def _patterns(run: Running) -> list[dict[str, object]]:
    done = await run.cli("errors", "--patterns", "--json")
    assert done.returncode == 0, done.stderr
    rows = orjson.loads(done.stdout)
    assert isinstance(rows, list)
    return rows


async def test_a_failing_persona_is_paused_then_resolving_lifts_it(tmp_path: Path) -> None:
    toml = "continuation_seconds = 0\n[composting]\nthreshold = 2\npause_seconds = 600\n"
    async with running_bot(tmp_path, toml=toml, files={"agents.yaml": AGENTS}) as run:
        w = run.world
        run.sim.model.script(ModelReply(status=500), ModelReply(status=500))
        for n in range(2):
            run.say(w.general_id, w.alice_id, f"{run.mention()} I slept badly ({n})")
            await run.wait_event("cortex.invocation_failed", n + 1)

        paused = run.say(w.general_id, w.alice_id, f"{run.mention()} I slept badly again")
        # The default agent answers, in the channel as a reply (no persona thread).
        await run.wait_until(lambda: bool(run.replies_to(int(paused["id"]))))
        assert run.sim.threads() == []
        (compost,) = await run.wait_event("compost")
        assert (compost["action"], compost["kind"], compost["name"]) == (
            "paused",
            "persona",
            "sleep",
        )
        assert "threshold of 2" in compost["reason"]
        (skip,) = await run.wait_event("decision", outcome="composted")
        assert skip["message_id"] == paused["id"] and skip["until"] == compost["until"]

        rows = await _patterns(run)
        assert [(r["persona"], r["stage"], r["paused_until"]) for r in rows] == [
            ("sleep", "generate", compost["until"])
        ]
        table = await run.cli("errors", "--patterns")
        assert "Paused: persona sleep until " in table.stdout
        (tool,) = Tools(run.bot.settings).call("list_paused", {})
        assert (tool["kind"], tool["name"], tool["until"]) == ("persona", "sleep", compost["until"])

        errors = orjson.loads((await run.cli("errors", "--json", "--unresolved")).stdout)
        done = await run.cli("errors", "resolve", str(errors[0]["id"]), "--as", "fixed")
        assert done.returncode == 0, done.stderr
        assert (await _patterns(run))[0]["paused_until"] is None
        assert Tools(run.bot.settings).call("list_paused", {}) == []

        lifted = run.say(w.general_id, w.alice_id, f"{run.mention()} I slept badly once more")
        await run.wait_event("persona.responded", message_id=lifted["id"])
        assert [e["action"] for e in run.events("compost")] == ["paused", "lifted"]


async def test_a_failing_discriminator_is_paused_and_the_group_stays_quiet(tmp_path: Path) -> None:
    toml = (
        'continuation_seconds = 0\n[attention]\ngroup = "discriminate"\n'
        "[composting]\nthreshold = 2\n"
    )
    async with running_bot(tmp_path, toml=toml) as run:
        w = run.world
        run.sim.model.script(ModelReply(status=500), ModelReply(status=500))
        for n in range(2):
            run.say(w.general_id, w.alice_id, f"anyone around, bot? ({n})")
            await run.wait_event("cortex.invocation_failed", n + 1, stage="discriminate")
        calls = len(run.sim.model.calls)
        quiet = run.say(w.general_id, w.alice_id, "anyone around, bot?")
        (decision,) = await run.wait_event("decision", message_id=quiet["id"])
        assert decision["outcome"] == "skip"
        assert "discriminator paused by composting until " in decision["reason"]
        assert len(run.sim.model.calls) == calls  # no classification was paid for
        (compost,) = await run.wait_event("compost")
        assert (compost["kind"], compost["name"]) == ("stage", "discriminate")
