"""The request picks its model tier, and failures pause personas and stages (SPEC 18): the
actor layer, with a fake model and Discord over a real store."""

from __future__ import annotations

import time
from pathlib import Path

from picortex.actors import persona_answer
from picortex.actors.delivery import ChannelReply
from picortex.store import Store
from tests.actors.test_persona_answer import (
    ALICE,
    FakeLLM,
    failed,
    make_pipe,
    message,
    ok,
    request_for,
    store,
)

__all__ = ["store"]  # the fixture, used by name


def _errors(store: Store, persona: str, stage: str, n: int) -> list[int]:
    now = time.time()
    return [
        store.add_invocation_error("10", persona, str(i), stage, "boom", None, now - 60 + i)
        for i in range(n)
    ]


def _auto(tmp_path: Path) -> None:
    (tmp_path / "picortex.toml").write_text('[models]\nroute = "auto"\n')


# -- composting -----------------------------------------------------------------------------


async def test_a_paused_persona_leaves_the_answer_to_the_default_agent_until_resolved(
    tmp_path: Path, store: Store
) -> None:
    llm = FakeLLM()
    pipe, sink = make_pipe(tmp_path, store, llm)
    ids = _errors(store, "sleep", "generate", 5)  # the default threshold
    trigger = message(50, "I slept terribly last night")
    assert not await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert llm.requests == []
    (paused,) = sink.of("compost")
    assert (paused["action"], paused["kind"], paused["name"], paused["errors"]) == (
        "paused",
        "persona",
        "sleep",
        5,
    )
    assert paused["until"].endswith("Z") and "threshold of 5" in paused["reason"]
    (skipped,) = [d for d in sink.of("decision") if d["outcome"] == "composted"]
    assert skipped["persona"] == "sleep" and skipped["until"] == paused["until"]
    assert skipped["reason"].startswith("persona sleep paused by composting until ")

    # Announced once: a second request finds the pause without a second event.
    again = message(51, "I slept badly again")
    assert not await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, again), request_for(again), again, []
    )
    assert len(sink.of("compost")) == 1

    store.resolve_invocation_error(ids[0], "fixed", time.time())
    third = message(52, "slept badly again")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, third), request_for(third), third, []
    )
    assert [r.persona for r in llm.requests] == ["sleep"]
    assert [e["action"] for e in sink.of("compost")] == ["paused", "lifted"]


async def test_other_matches_still_answer_when_one_persona_is_paused(
    tmp_path: Path, store: Store
) -> None:
    llm = FakeLLM()
    pipe, sink = make_pipe(tmp_path, store, llm)
    _errors(store, "fitness", "post", 5)
    trigger = message(50, "so tired after my workout")  # matches sleep and fitness
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert [(r.stage, r.persona) for r in llm.requests] == [("generate", "sleep")]
    assert sink.of("persona")[0]["tiebreak"] == "single match"


async def test_a_paused_tiebreak_is_not_called_and_the_strongest_match_answers(
    tmp_path: Path, store: Store
) -> None:
    llm = FakeLLM()
    pipe, sink = make_pipe(tmp_path, store, llm)
    _errors(store, "fitness", "tiebreak", 5)
    trigger = message(50, "so tired after my workout")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert [r.stage for r in llm.requests] == ["generate"]
    (chosen,) = sink.of("persona")
    assert chosen["tiebreak"].startswith("tiebreak paused by composting until ")
    assert chosen["tiebreak"].endswith(": strongest match")
    assert sink.of("compost")[0]["name"] == "tiebreak"


async def test_threshold_zero_turns_composting_off(tmp_path: Path, store: Store) -> None:
    (tmp_path / "picortex.toml").write_text("[composting]\nthreshold = 0\n")
    llm = FakeLLM()
    pipe, sink = make_pipe(tmp_path, store, llm)
    _errors(store, "sleep", "generate", 50)
    trigger = message(50, "I slept terribly last night")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert sink.of("compost") == []


# -- the request picks its model ------------------------------------------------------------


def _route(sink: object) -> list[dict[str, object]]:
    return [d for d in sink.of("decision") if d["outcome"] == "route"]  # type: ignore[attr-defined]


async def test_fixed_makes_no_route_call_and_no_route_decision(
    tmp_path: Path, store: Store
) -> None:
    llm = FakeLLM()
    pipe, sink = make_pipe(tmp_path, store, llm)
    trigger = message(50, "I slept badly: list the steps to fix it, then plan my week")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert [(r.stage, r.tier) for r in llm.requests] == [("generate", "general")]
    assert _route(sink) == []


async def test_auto_a_short_single_step_request_stays_general_without_a_call(
    tmp_path: Path, store: Store
) -> None:
    _auto(tmp_path)
    llm = FakeLLM()
    pipe, sink = make_pipe(tmp_path, store, llm)
    trigger = message(50, "I slept badly")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert [(r.stage, r.tier) for r in llm.requests] == [("generate", "general")]
    (decision,) = _route(sink)
    assert decision["tier"] == "general" and decision["routed_by"] == "rule"
    assert decision["reason"] == "general: short single-step request"
    assert decision["model"] == "claude-sonnet-5-5" and decision["message_id"] == 50


async def test_auto_the_triage_model_sends_a_multi_step_request_to_complex(
    tmp_path: Path, store: Store
) -> None:
    _auto(tmp_path)
    llm = FakeLLM(ok('{"tier": "complex", "reason": "several steps"}'))
    pipe, sink = make_pipe(tmp_path, store, llm)
    trigger = message(50, "I slept badly: list the steps to fix it, then plan my week")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    routed, answer = llm.requests
    assert (routed.stage, routed.tier, routed.user_id, routed.max_tokens) == (
        "route",
        "triage",
        ALICE.id,
        40,
    )
    assert (answer.stage, answer.tier, answer.persona) == ("generate", "complex", "sleep")
    (decision,) = _route(sink)
    assert decision["reason"] == "complex: several steps"
    assert (decision["tier"], decision["model"], decision["routed_by"]) == (
        "complex",
        "claude-opus-5-5",
        "model",
    )


async def test_auto_an_unusable_or_failed_route_call_stays_general_without_an_error_row(
    tmp_path: Path, store: Store
) -> None:
    _auto(tmp_path)
    llm = FakeLLM(ok("opus please"), ok("x"), failed("timeout"))
    pipe, sink = make_pipe(tmp_path, store, llm)
    first = message(50, "I slept badly: list the steps to fix it, then plan my week")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, first), request_for(first), first, []
    )
    second = message(51, "I slept badly again, so first tell me why, then plan a fix")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, second), request_for(second), second, []
    )
    assert [(r.stage, r.tier) for r in llm.requests] == [
        ("route", "triage"),
        ("generate", "general"),
        ("route", "triage"),
        ("generate", "general"),
    ]
    assert [d["reason"] for d in _route(sink)] == [
        "general: route answer unusable",
        "general: route call timeout",
    ]
    await pipe.store.flush()
    assert store.invocation_errors() == []


async def test_auto_a_persona_that_names_its_tier_keeps_it(tmp_path: Path, store: Store) -> None:
    _auto(tmp_path)
    llm = FakeLLM()
    pipe, sink = make_pipe(tmp_path, store, llm)
    text = (tmp_path / "agents.yaml").read_text()
    (tmp_path / "agents.yaml").write_text(
        text.replace("    name: Sleep Coach\n", "    name: Sleep Coach\n    model: complex\n")
    )
    trigger = message(50, "I slept badly: list the steps to fix it")
    await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    assert [(r.stage, r.tier) for r in llm.requests] == [("generate", "complex")]
    (decision,) = _route(sink)
    assert decision["routed_by"] == "persona" and decision["tier"] == "complex"


async def test_turning_composting_off_lifts_a_pause_and_says_so(
    tmp_path: Path, store: Store
) -> None:
    pipe, sink = make_pipe(tmp_path, store, FakeLLM())
    _errors(store, "sleep", "generate", 5)
    trigger = message(50, "I slept terribly last night")
    assert not await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, trigger), request_for(trigger), trigger, []
    )
    pipe.store.set_runtime_config("composting.threshold", "0")
    pipe.settings.refresh(force=True)  # as the channel actor does when a message arrives
    again = message(51, "I slept badly again")
    assert await persona_answer.maybe_answer(
        pipe, ChannelReply(pipe.replies, again), request_for(again), again, []
    )
    lifted = sink.of("compost")[-1]
    assert (lifted["action"], lifted["reason"]) == ("lifted", "composting turned off")
