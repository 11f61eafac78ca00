"""The LLM actor against a scripted model endpoint (a mock transport under the SDK)."""

from __future__ import annotations

import gc
import logging
import os
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anthropic
import attrs
import orjson
import pytest
import trio
from trio.testing import MockClock, wait_all_tasks_blocked

from picortex.actors import llm
from picortex.actors.ledger import LedgerBudget
from picortex.actors.llm import (
    FALLBACK_PRICE,
    LLMActor,
    price_of,
)
from picortex.config import BUILTIN_PRICES, BudgetSettings, ModelTiers, Price, load_settings
from picortex.core.budget import Refusal, Reservation, worst_case_usd
from picortex.core.llm import ChatTurn, ImagePart, LLMRequest, TextPart
from picortex.errors import FaultInjected
from picortex.runtime.faults import FaultPoints
from picortex.store import Store
from tests.helpers import RecordingSink

try:  # the HTTP library the installed SDK is built on
    import httpx2 as sdk_http
except ImportError:  # pragma: no cover - older SDKs use httpx itself
    import httpx as sdk_http  # type: ignore[no-redef]

KEY = "sk-ant-api03-test-key-abcdef"
SONNET = BUILTIN_PRICES["claude-sonnet-5-5"]
MODELS = ModelTiers(
    triage="claude-haiku-5-5", general="claude-sonnet-5-5", complex="claude-opus-5-5"
)

Answer = Callable[[dict[str, Any]], Awaitable[Any]]


@pytest.fixture
def jump_clock() -> MockClock:
    """A virtual clock that jumps only after 50 ms of real idleness.

    The SDK resolves platform details in a worker thread on its first request; a clock that
    jumps at once (autojump_clock) would fire deadlines while that thread runs.
    """
    return MockClock(autojump_threshold=0.05)


class FakeModel:
    """A Messages API endpoint: records requests and answers as `answer` says."""

    def __init__(self, answer: Answer | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.headers: list[Any] = []
        self.answer = answer or reply("hello", 1000, 500)

    async def __call__(self, request: Any) -> Any:
        body = orjson.loads(request.content)
        self.requests.append(body)
        self.headers.append(request.headers)
        result = await self.answer(body)
        if isinstance(result, sdk_http.Response):
            return result
        return sdk_http.Response(200, json=result)


def reply(
    text: str, input_tokens: int, output_tokens: int, *, delay: float = 0.0, **usage: int
) -> Answer:
    async def answer(body: dict[str, Any]) -> Any:
        if delay:
            await trio.sleep(delay)
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens, **usage},
        }

    return answer


def failure(status: int, message: str) -> Answer:
    async def answer(body: dict[str, Any]) -> Any:
        error = {"type": "error", "error": {"type": "api_error", "message": message}}
        return sdk_http.Response(status, json=error)

    return answer


class FakeBudget:
    def __init__(self, allowed: bool = True) -> None:
        self.allowed = allowed
        self.checked: list[str] = []
        self.worst: list[float] = []
        self.recorded: list[tuple[str, float]] = []
        self.settled = 0

    def reserve(self, workspace: str, user_id: int | None, worst_usd: float) -> Any:
        self.checked.append(workspace)
        self.worst.append(worst_usd)
        if not self.allowed:
            return Refusal("workspace")
        return Reservation(workspace, user_id, worst_usd)

    def settle(self, held: Reservation, cost_usd: float) -> None:
        self.settled += 1
        if cost_usd > 0:
            self.recorded.append((held.workspace, cost_usd))


def make_actor(
    model: FakeModel | None,
    sink: RecordingSink,
    *,
    api_key: str | None = KEY,
    budget: FakeBudget | None = None,
    prices: dict[str, Price] | None = None,
    faults: FaultPoints | None = None,
) -> LLMActor:
    def http_client(endpoint: FakeModel) -> Callable[[], Any]:
        return lambda: sdk_http.AsyncClient(transport=sdk_http.MockTransport(endpoint))

    return LLMActor(
        api_key=api_key,
        base_url="http://model.test",
        models=MODELS,
        prices=BUILTIN_PRICES if prices is None else prices,
        events=sink,
        budget=budget,
        faults=faults,
        http_client_factory=None if model is None else http_client(model),
    )


@asynccontextmanager
async def running(actor: LLMActor) -> AsyncIterator[LLMActor]:
    async with trio.open_nursery() as nursery:
        await nursery.start(actor.run)
        yield actor
        nursery.cancel_scope.cancel()


def request(**changes: Any) -> LLMRequest:
    fields: dict[str, Any] = {
        "stage": "generate",
        "system": "You are helpful.",
        "messages": (ChatTurn("user", "hi there"),),
        "workspace": "81384788765712384",
    }
    fields.update(changes)
    return LLMRequest(**fields)


async def test_ok_call_is_priced_from_usage_and_logged() -> None:
    sink = RecordingSink()
    model = FakeModel(reply("hello", 1000, 500))
    budget = FakeBudget()
    async with running(make_actor(model, sink, budget=budget)) as llm:
        result = await llm.complete(request(persona="bard", signal_id="42"))
    assert result.ok
    assert result.text == "hello"
    assert result.model == "claude-sonnet-5-5"
    assert (result.input_tokens, result.output_tokens) == (1000, 500)
    # Sonnet 5.5: $2 in, $10 out per million tokens.
    assert result.cost_usd == pytest.approx(1000 * 2 / 1e6 + 500 * 10 / 1e6)
    (sent,) = model.requests
    assert sent["model"] == "claude-sonnet-5-5"
    assert sent["system"] == "You are helpful."
    assert sent["messages"] == [{"role": "user", "content": "hi there"}]
    assert sent["max_tokens"] == 1024
    sent_headers = model.headers[0]
    assert KEY in (sent_headers.get("x-api-key"), sent_headers.get("authorization", "")[7:])
    (event,) = sink.of("llm")
    assert event == {
        "event": "llm",
        "model": "claude-sonnet-5-5",
        "stage": "generate",
        "input_tokens": 1000,
        "output_tokens": 500,
        "cost_usd": pytest.approx(0.007),
        "latency_ms": result.latency_ms,
        "outcome": "ok",
        "workspace": "81384788765712384",
        "persona": "bard",
        "signal_id": "42",
    }
    assert budget.checked == ["81384788765712384"]
    ((workspace, cost),) = budget.recorded
    assert workspace == "81384788765712384"
    assert cost == pytest.approx(0.007)


async def test_tiers_route_to_models_and_an_explicit_model_wins() -> None:
    sink = RecordingSink()
    model = FakeModel()
    async with running(make_actor(model, sink)) as llm:
        await llm.complete(request(tier="triage", stage="discriminate", system=""))
        await llm.complete(request(tier="complex"))
        await llm.complete(request(model="claude-custom-1"))
    assert [r["model"] for r in model.requests] == [
        "claude-haiku-5-5",
        "claude-opus-5-5",
        "claude-custom-1",
    ]
    assert "system" not in model.requests[0]
    with pytest.raises(ValueError, match="unknown model tier"):
        request(tier="huge")


async def test_unknown_model_costs_as_the_dearest_known_one() -> None:
    sink = RecordingSink()
    async with running(make_actor(FakeModel(reply("x", 1_000_000, 1_000_000)), sink)) as llm:
        result = await llm.complete(request(model="claude-mystery"))
    # Opus 5.5 is the dearest built-in: $4 + $20 for a million tokens each way.
    assert result.cost_usd == pytest.approx(24.0)
    assert price_of("claude-mystery", {}) == FALLBACK_PRICE
    assert price_of("a", {"a": Price(1, 1), "b": Price(3, 3)}) == Price(1, 1)


async def test_cache_tokens_are_charged_as_input() -> None:
    sink = RecordingSink()
    answer = reply("x", 100, 10, cache_creation_input_tokens=50, cache_read_input_tokens=25)
    async with running(make_actor(FakeModel(answer), sink)) as llm:
        result = await llm.complete(request(tier="triage"))
    assert result.input_tokens == 175
    assert result.cost_usd == pytest.approx((175 * 0.10 + 10 * 0.50) / 1e6)


def estimate(one: LLMRequest, price: Price = SONNET) -> float:
    """What a sent call that reported no usage costs: its prompt characters / 3 of input."""
    return price.cost(-(-one.prompt_chars // 3), 0)


async def test_timeout_is_a_deadline_is_not_retried_and_pays_for_its_input(
    jump_clock: MockClock,
) -> None:
    sink = RecordingSink()
    budget = FakeBudget()
    model = FakeModel(reply("late", 1, 1, delay=100.0))
    one = request(timeout=5.0)
    async with running(make_actor(model, sink, budget=budget)) as llm:
        result = await llm.complete(one)
    assert result.outcome == "timeout"
    assert result.text == ""
    assert result.latency_ms == 5000
    # Sent, so paid for (SPEC 9): no usage came back, so the input it was sent.
    assert result.cost_usd == pytest.approx(estimate(one)) and result.cost_usd > 0
    assert result.input_tokens == 8  # 24 prompt characters / 3
    assert result.error == "no answer within 5 s"
    assert len(model.requests) == 1
    (event,) = sink.of("llm")
    assert (event["outcome"], event["usage"]) == ("timeout", "estimated")
    assert event["cost_usd"] == result.cost_usd
    assert budget.recorded == [(one.workspace, result.cost_usd)]
    assert budget.settled == 1


async def test_api_error_is_reported_redacted_and_not_retried() -> None:
    sink = RecordingSink()
    budget = FakeBudget()
    model = FakeModel(failure(500, f"internal error for key {KEY}"))
    async with running(make_actor(model, sink, budget=budget)) as llm:
        result = await llm.complete(request())
    assert result.outcome == "error"
    assert len(model.requests) == 1
    assert result.error is not None
    assert "InternalServerError" in result.error
    assert KEY not in result.error
    assert result.stack_trace is not None
    assert KEY not in result.stack_trace
    (event,) = sink.of("llm")
    assert event["outcome"] == "error"
    assert KEY not in event["error"]
    # The request was sent: paid for as the input it was sent, as no usage came back.
    assert budget.recorded == [(request().workspace, pytest.approx(estimate(request())))]
    assert event["cost_usd"] == result.cost_usd == budget.recorded[0][1]


async def test_without_a_key_nothing_is_called_and_one_warning_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = RecordingSink()
    model = FakeModel()
    actor = make_actor(model, sink, api_key=None)
    assert not actor.available
    with caplog.at_level(logging.WARNING, logger="picortex.actors.llm"):
        async with running(actor) as llm:
            first = await llm.complete(request())
            second = await llm.complete(request(tier="triage"))
        async with running(actor):  # a restart does not warn again
            pass
    assert (first.outcome, second.outcome) == ("no_key", "no_key")
    assert model.requests == []
    warnings = [r for r in caplog.records if "ANTHROPIC_API_KEY" in r.getMessage()]
    assert len(warnings) == 1
    assert [e["outcome"] for e in sink.of("llm")] == ["no_key", "no_key"]


async def test_budget_at_ceiling_makes_no_call() -> None:
    sink = RecordingSink()
    model = FakeModel()
    budget = FakeBudget(allowed=False)
    async with running(make_actor(model, sink, budget=budget)) as llm:
        result = await llm.complete(request(workspace="dm"))
    assert result.outcome == "budget"
    assert model.requests == []
    assert budget.checked == ["dm"]
    assert budget.recorded == []
    (event,) = sink.of("llm")
    assert (event["outcome"], event["workspace"], event["cost_usd"]) == ("budget", "dm", 0.0)


async def test_broken_budget_check_fails_closed() -> None:
    class Broken(FakeBudget):
        def reserve(self, workspace: str, user_id: int | None, worst_usd: float) -> Any:
            raise RuntimeError("ledger unavailable")

    sink = RecordingSink()
    model = FakeModel()
    async with running(make_actor(model, sink, budget=Broken())) as llm:
        result = await llm.complete(request())
    assert result.outcome == "error"
    assert model.requests == []


async def test_calls_from_many_channels_run_concurrently(jump_clock: MockClock) -> None:
    sink = RecordingSink()
    model = FakeModel(reply("ok", 1, 1, delay=2.0))
    finished: list[float] = []

    async def one(llm: LLMActor, n: int) -> None:
        result = await llm.complete(request(workspace=str(n)))
        assert result.ok
        finished.append(trio.current_time())

    async with running(make_actor(model, sink)) as llm:
        # The SDK reads platform details in a worker thread on its first request; the
        # virtual clock could jump while that thread runs on a busy machine, so warm up.
        assert (await llm.complete(request())).ok
        async with trio.open_nursery() as nursery:
            start = trio.current_time()
            for n in range(5):
                nursery.start_soon(one, llm, n)
    assert len(model.requests) == 6
    assert [t - start for t in finished] == [pytest.approx(2.0)] * 5


async def test_a_call_before_the_actor_is_ready_waits_for_it(
    jump_clock: MockClock,
) -> None:
    sink = RecordingSink()
    model = FakeModel()
    actor = make_actor(model, sink)
    results = []
    async with trio.open_nursery() as nursery:

        async def call() -> None:
            results.append(await actor.complete(request(timeout=10.0)))

        nursery.start_soon(call)
        await trio.sleep(1.0)
        await nursery.start(actor.run)
        await trio.sleep(1.0)
        nursery.cancel_scope.cancel()
    assert [r.outcome for r in results] == ["ok"]


async def test_cancelled_caller_aborts_its_call(jump_clock: MockClock) -> None:
    sink = RecordingSink()
    model = FakeModel(reply("slow", 1, 1, delay=30.0))
    async with running(make_actor(model, sink)) as llm:
        with trio.move_on_after(1.0) as scope:
            await llm.complete(request())
        assert scope.cancelled_caught
        after = await llm.complete(request(timeout=60.0))
    assert after.ok
    assert len(model.requests) == 2


async def test_injected_fault_fails_the_call_and_crashes_the_actor() -> None:
    sink = RecordingSink()
    model = FakeModel()
    actor = make_actor(model, sink, faults=FaultPoints.parse("llm:explode"))
    results = []
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            await nursery.start(actor.run)
            results.append(await actor.complete(request(messages=(ChatTurn("user", "explode"),))))
            await trio.sleep_forever()  # run() raises, and the nursery ends
    assert caught.group_contains(FaultInjected)
    (failed,) = results
    assert failed.outcome == "error"
    assert failed.error is not None
    assert "FaultInjected" in failed.error
    assert model.requests == []
    assert failed.cost_usd == 0.0  # never sent: nothing to pay
    # Restarted (as its supervisor would), the actor serves other messages again.
    async with running(actor) as llm:
        assert (await llm.complete(request())).ok
    assert len(model.requests) == 1


async def test_a_restarted_actor_serves_again() -> None:
    sink = RecordingSink()
    model = FakeModel()
    actor = make_actor(model, sink)
    async with running(actor) as llm:
        assert (await llm.complete(request())).ok
    async with running(actor) as llm:
        assert (await llm.complete(request())).ok
    assert len(model.requests) == 2


async def test_reconfigure_changes_later_routing() -> None:
    sink = RecordingSink()
    model = FakeModel()
    async with running(make_actor(model, sink)) as llm:
        llm.reconfigure(models=ModelTiers(general="claude-haiku-5-5"))
        result = await llm.complete(request())
    assert result.model == "claude-haiku-5-5"
    assert model.requests[0]["model"] == "claude-haiku-5-5"


def sse(*events: tuple[str, dict[str, Any]]) -> bytes:
    return b"".join(
        b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"
        for name, data in events
    )


def stream_events(
    model: str, parts: list[str], *, stop: bool = True, input_tokens: int = 400
) -> bytes:
    events: list[tuple[str, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1",
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    for part in parts:
        events.append(
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "text_delta", "text": part},
                },
            )
        )
    if stop:
        events += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                    "usage": {"output_tokens": 300},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
    return sse(*events)


def streamed(parts: list[str], *, stop: bool = True) -> Answer:
    async def answer(body: dict[str, Any]) -> Any:
        assert body["stream"] is True
        return sdk_http.Response(
            200,
            content=stream_events(body["model"], parts, stop=stop),
            headers={"content-type": "text/event-stream"},
        )

    return answer


async def test_a_streamed_call_reports_text_as_it_grows_and_costs_the_final_usage() -> None:
    sink = RecordingSink()
    budget = FakeBudget()
    model = FakeModel(streamed(["Hello", " there.", " Bye."]))
    seen: list[str] = []
    async with running(make_actor(model, sink, budget=budget)) as llm:
        result = await llm.complete(request(), on_text=seen.append)
    assert result.ok
    assert seen == ["Hello", "Hello there.", "Hello there. Bye."]
    assert result.text == "Hello there. Bye."
    assert (result.input_tokens, result.output_tokens) == (400, 300)
    assert result.cost_usd == pytest.approx(400 * 2 / 1e6 + 300 * 10 / 1e6)
    assert budget.recorded == [("81384788765712384", pytest.approx(result.cost_usd))]
    assert len(model.requests) == 1
    assert model.requests[0]["stream"] is True


async def test_a_stream_cut_midway_is_a_cut_that_still_pays_for_what_arrived() -> None:
    sink = RecordingSink()
    budget = FakeBudget()
    model = FakeModel(streamed(["Half an ", "answer"], stop=False))
    seen: list[str] = []
    async with running(make_actor(model, sink, budget=budget)) as llm:
        result = await llm.complete(request(), on_text=seen.append)
    assert result.outcome == "cut"
    assert result.failed
    assert sink.of("llm")[0]["outcome"] == "cut"
    assert seen[-1] == "Half an answer"
    assert result.error is not None
    assert "cut after 14 characters" in result.error
    assert len(model.requests) == 1  # never retried
    assert (result.input_tokens, result.output_tokens) == (400, 1)
    assert result.cost_usd == pytest.approx(SONNET.cost(400, 1))
    assert budget.recorded == [(request().workspace, result.cost_usd)]


# The SDK raises an `error` event from inside its SSE generator and leaves the inner one to
# the garbage collector, which reports it as an unclosed async generator.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_an_error_event_midway_cuts_the_stream() -> None:
    sink = RecordingSink()
    body = stream_events("m", ["Some text"], stop=False) + sse(
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )

    async def answer(request_body: dict[str, Any]) -> Any:
        return sdk_http.Response(200, content=body, headers={"content-type": "text/event-stream"})

    seen: list[str] = []
    async with running(make_actor(FakeModel(answer), sink)) as llm:
        result = await llm.complete(request(), on_text=seen.append)
    assert result.outcome == "cut"
    assert seen == ["Some text"]
    assert result.error is not None
    assert "Overloaded" in result.error
    gc.collect()  # here, under this test's warning filter


async def test_a_redirect_is_not_followed_and_the_key_stays_home() -> None:
    sink = RecordingSink()
    hosts: list[str] = []
    keys: list[str | None] = []

    async def handler(req: Any) -> Any:
        hosts.append(req.url.host)
        keys.append(req.headers.get("x-api-key"))
        return sdk_http.Response(
            307, headers={"location": "http://elsewhere.test/v1/messages"}, content=b""
        )

    transport = sdk_http.MockTransport(handler)
    actor = LLMActor(
        api_key=KEY,
        base_url="http://model.test",
        models=MODELS,
        prices=BUILTIN_PRICES,
        events=sink,
        http_client_factory=lambda: llm.model_http_client(transport),
    )
    async with running(actor):
        plain = await actor.complete(request())
        stream = await actor.complete(request(), on_text=lambda _text: None)
    assert (plain.outcome, stream.outcome) == ("error", "error")
    assert hosts == ["model.test", "model.test"]
    assert keys == [KEY, KEY]


def test_the_model_client_is_tuned() -> None:
    client = llm.model_http_client()
    assert client.follow_redirects is False
    assert client.timeout.connect == llm.MODEL_CONNECT_TIMEOUT
    assert client.timeout.read == llm.MODEL_READ_TIMEOUT
    assert client.trust_env  # proxies from the environment, by the SDK's own code path


@pytest.mark.parametrize(
    ("environ", "traced"),
    [
        ({}, False),
        ({"PATH": "/usr/bin"}, False),
        ({"OTEL_TRACES_EXPORTER": "console"}, True),
        ({"ANTHROPIC_OPEN_TELEMETRY_TRACES_CONTENT_MODE": "content"}, True),
    ],
)
async def test_sdk_telemetry_is_off_unless_the_environment_configures_it(
    environ: dict[str, str], traced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):  # the SDK reads its own variables; this test sets none
        if name.startswith("ANTHROPIC_OPEN_TELEMETRY"):
            monkeypatch.delenv(name)
    async with anthropic.AsyncAnthropic(api_key=KEY, **llm.sdk_telemetry(environ)) as client:
        options = client.open_telemetry
    assert options["traces"]["enabled"] is traced
    assert options["propagation"] is traced


async def test_image_blocks_reach_the_model_as_base64_sources() -> None:
    sink = RecordingSink()
    model = FakeModel()
    turn = ChatTurn("user", (ImagePart("image/png", "aGVsbG8="), TextPart("what is it?")))
    async with running(make_actor(model, sink)) as actor:
        assert (await actor.complete(request(messages=(turn,)))).ok
    assert model.requests[0]["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="},
                },
                {"type": "text", "text": "what is it?"},
            ],
        }
    ]


@pytest.mark.parametrize("ceiling", [0.000001, 0.01, 0.05])
async def test_thirty_simultaneous_calls_overshoot_a_ceiling_by_one_call_at_most(
    tmp_path: Any, jump_clock: MockClock, ceiling: float
) -> None:
    from picortex.actors.ledger import LedgerBudget
    from picortex.config import BudgetSettings, load_settings
    from picortex.core.budget import worst_case_usd
    from picortex.store import Store

    base = load_settings({"PICORTEX_HOME": str(tmp_path)})
    settings = attrs.evolve(base, budget=BudgetSettings(ceiling, "day", 20.0, 0.0, 0))
    sink = RecordingSink()
    store = Store.open(tmp_path / "picortex.db")
    ledger = LedgerBudget(store, lambda: settings, sink)
    one = request(max_tokens=1024)
    price = BUILTIN_PRICES["claude-sonnet-5-5"]
    worst = worst_case_usd(one.prompt_chars, one.max_tokens, price)
    # Every call costs its full worst case, and answers after a second: all 30 overlap.
    model = FakeModel(reply("ok", -(-one.prompt_chars // 3), 1024, delay=1.0))
    outcomes: list[str] = []
    try:
        async with running(make_actor(model, sink, budget=ledger)) as actor:

            async def ask() -> None:
                outcomes.append((await actor.complete(one)).outcome)

            async with trio.open_nursery() as nursery:
                for _ in range(30):
                    nursery.start_soon(ask)
        spent = store.spend(one.workspace, ledger.period_key())
    finally:
        store.close()
    made = outcomes.count("ok")
    assert made == len(model.requests) >= 1
    assert outcomes.count("budget") == 30 - made
    assert spent == pytest.approx(made * worst)
    assert spent <= ceiling + worst + 1e-12
    assert ledger.held_usd() == 0.0


def slow_stream(
    parts: list[str], pace: float, input_tokens: Callable[[dict[str, Any]], int] | None = None
) -> Answer:
    """A stream whose text deltas come `pace` seconds apart; `input_tokens` says what its
    `message_start` reports for a request body (400 when None)."""

    async def answer(body: dict[str, Any]) -> Any:
        async def events() -> Any:
            reported = 400 if input_tokens is None else input_tokens(body)
            whole = stream_events(body["model"], parts, input_tokens=reported)
            for chunk in whole.split(b"\n\n"):
                if b"text_delta" in chunk:
                    await trio.sleep(pace)
                yield chunk + b"\n\n"

        return sdk_http.Response(
            200, content=events(), headers={"content-type": "text/event-stream"}
        )

    return answer


async def test_a_stream_that_keeps_flowing_outlives_the_call_timeout(
    jump_clock: MockClock,
) -> None:
    sink = RecordingSink()
    model = FakeModel(slow_stream(["word "] * 30, pace=1.0))
    seen: list[str] = []

    def on_text(text: str) -> None:
        seen.append(text)
        # The request is out, the SDK's thread done: from here the clock may jump at once.
        jump_clock.autojump_threshold = 0

    async with running(make_actor(model, sink)) as actor:
        result = await actor.complete(request(timeout=5.0), on_text=on_text)
    assert result.ok
    assert result.text == "word " * 30  # 30 s of text, though each call may idle 5 s
    assert len(seen) == 30


async def test_a_stalled_stream_still_times_out_and_pays_for_what_it_reported(
    jump_clock: MockClock, tmp_path: Path
) -> None:
    sink = RecordingSink()
    model = FakeModel(slow_stream(["one ", "two ", "three"], pace=10.0))
    seen: list[str] = []
    with ledger_in(tmp_path, sink) as (ledger, store):
        async with running(make_actor(model, sink, budget=ledger)) as actor:
            result = await actor.complete(request(timeout=5.0), on_text=seen.append)
        spent = store.spend(request().workspace, ledger.period_key())
    assert result.outcome == "timeout"
    assert seen == []
    # `message_start` reported 400 input tokens (and 1 output) before the stall.
    assert (result.input_tokens, result.output_tokens) == (400, 1)
    assert result.cost_usd == SONNET.cost(400, 1)
    assert spent == pytest.approx(SONNET.cost(400, 1), abs=1e-12)
    assert "usage" not in sink.of("llm")[0]  # reported, not estimated
    assert ledger.held_usd() == 0.0


@contextmanager
def ledger_in(
    tmp_path: Path, sink: RecordingSink, ceiling: float = 5.0
) -> Iterator[tuple[LedgerBudget, Store]]:
    """A real ledger over a store in `tmp_path`, with a workspace ceiling of `ceiling`."""
    base = load_settings({"PICORTEX_HOME": str(tmp_path)})
    settings = attrs.evolve(base, budget=BudgetSettings(ceiling, "day", 20.0, 0.0, 0))
    store = Store.open(tmp_path / "picortex.db")
    try:
        yield LedgerBudget(store, lambda: settings, sink), store
    finally:
        store.close()


async def test_a_stream_cancelled_after_message_start_pays_for_what_it_reported(
    jump_clock: MockClock, tmp_path: Path
) -> None:
    sink = RecordingSink()
    model = FakeModel(slow_stream(["one ", "two ", "three"], pace=10.0))
    seen: list[str] = []
    with ledger_in(tmp_path, sink) as (ledger, store):
        async with running(make_actor(model, sink, budget=ledger)) as actor:
            with trio.CancelScope() as scope:

                def on_text(text: str) -> None:
                    seen.append(text)
                    scope.cancel()  # a follow-up restarting generation, say

                await actor.complete(request(), on_text=on_text)
            assert scope.cancelled_caught
        spent = store.spend(request().workspace, ledger.period_key())
    assert seen == ["one "]
    (event,) = sink.of("llm")
    assert event["outcome"] == "cancelled"
    assert (event["input_tokens"], event["output_tokens"]) == (400, 1)
    assert event["cost_usd"] == SONNET.cost(400, 1)
    assert spent == pytest.approx(SONNET.cost(400, 1), abs=1e-12)
    assert ledger.held_usd() == 0.0


async def test_a_call_cancelled_before_any_usage_pays_for_the_input_it_was_sent(
    tmp_path: Path,
) -> None:
    sink = RecordingSink()
    arrived = trio.Event()

    async def held(body: dict[str, Any]) -> Any:
        arrived.set()
        await trio.sleep_forever()

    one = request()
    with ledger_in(tmp_path, sink) as (ledger, store):
        actor = make_actor(FakeModel(held), sink, budget=ledger)
        async with running(actor), trio.open_nursery() as nursery:
            nursery.start_soon(actor.complete, one)
            await arrived.wait()
            nursery.cancel_scope.cancel()
        spent = store.spend(one.workspace, ledger.period_key())
    (event,) = sink.of("llm")
    assert (event["outcome"], event["usage"]) == ("cancelled", "estimated")
    assert (event["input_tokens"], event["output_tokens"]) == (8, 0)
    assert spent == pytest.approx(estimate(one), abs=1e-12) and spent > 0
    assert ledger.held_usd() == 0.0


async def test_a_call_cancelled_before_it_was_sent_costs_nothing(
    jump_clock: MockClock, tmp_path: Path
) -> None:
    sink = RecordingSink()
    model = FakeModel()
    with ledger_in(tmp_path, sink) as (ledger, store):
        actor = make_actor(model, sink, budget=ledger)  # not run: the call waits for it
        with trio.move_on_after(1.0):
            await actor.complete(request())
        spent = store.spend(request().workspace, ledger.period_key())
    assert model.requests == []
    (event,) = sink.of("llm")
    assert (event["outcome"], event["cost_usd"], event["input_tokens"]) == ("cancelled", 0.0, 0)
    assert spent == 0.0
    assert ledger.held_usd() == 0.0


async def test_a_follow_up_storm_pays_for_every_call_and_each_restart_reserves_afresh(
    jump_clock: MockClock, tmp_path: Path
) -> None:
    # Seven calls with growing prompts, each cancelled once its stream started (as follow-ups
    # restart an answer), then one answered. Each stream reports its own input.
    def reported(body: dict[str, Any]) -> int:
        return len(body["messages"][0]["content"]) // 4

    sink = RecordingSink()
    storm = [request(messages=(ChatTurn("user", "more detail " * 250 * n),)) for n in range(1, 8)]
    last = request()
    expected = sum(SONNET.cost(len(one.messages[0].text) // 4, 1) for one in storm)
    expected += SONNET.cost(len(last.messages[0].text) // 4, 300)
    worst = min(worst_case_usd(one.prompt_chars, one.max_tokens, SONNET) for one in storm)
    # Room for what the storm spends, not for a reservation a cancelled call kept as well.
    ceiling = expected + worst / 2
    model = FakeModel(slow_stream(["Sure, ", "it ", "is."], pace=2.0, input_tokens=reported))
    outcomes: list[str] = []
    with ledger_in(tmp_path, sink, ceiling) as (ledger, store):
        async with running(make_actor(model, sink, budget=ledger)) as actor:
            for one in storm:
                with trio.CancelScope() as scope:
                    await actor.complete(one, on_text=lambda _text: scope.cancel())
                assert scope.cancelled_caught
                assert ledger.held_usd() == 0.0
            outcomes.append((await actor.complete(last, on_text=lambda _t: None)).outcome)
        spent = store.spend(last.workspace, ledger.period_key())
    assert outcomes == ["ok"]
    events = sink.of("llm")
    assert [e["outcome"] for e in events] == ["cancelled"] * 7 + ["ok"]
    assert [len(str(body["messages"][0]["content"])) for body in model.requests[:7]] == [
        3000 * n for n in range(1, 8)
    ]
    assert spent == pytest.approx(expected, abs=1e-9)
    assert sum(e["cost_usd"] for e in events) == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(streamed(["All ", "of it."]), id="a body read at once"),
        pytest.param(slow_stream(["All ", "of it."], pace=0.1), id="a body still arriving"),
    ],
)
async def test_a_call_cancelled_while_its_answer_is_posted_leaves_no_stream_for_the_collector(
    jump_clock: MockClock, answer: Answer
) -> None:
    # Cancelled at `message_stop` (a shutdown while the reply's post is out): the SDK's stream
    # readers are closed by the call, not left half read for the garbage collector to find.
    sink = RecordingSink()
    model = FakeModel(answer)

    async def post(text: str) -> None:
        await trio.sleep_forever()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        async with running(make_actor(model, sink)) as actor:
            with trio.move_on_after(30.0) as waited:
                await actor.complete(request(), on_text=lambda _text: None, on_end=post)
            gc.collect()
            await wait_all_tasks_blocked()
    assert waited.cancelled_caught
    assert [e["outcome"] for e in sink.of("llm")] == ["cancelled"]
    left = [str(w.message) for w in caught if "garbage collected" in str(w.message)]
    assert left == []
